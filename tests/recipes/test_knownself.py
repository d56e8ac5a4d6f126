"""The `knownself` recipe: step labels from where the model fails, SFT on the labelled
trajectories, DPO (+ NLL) on (labelled gold, failed episode) pairs.

Mechanism: a scripted model that gets step 0 right, step 1 right only after reflecting and
the rest wrong even then gives the labels fast, slow, knowledgeable, knowledgeable; the
labelled trajectory carries its reflection at step 1 and a knowledge call, answered by the
env's rule (loss mask 0), at steps 2 and 3; the DPO pairs prefer that trajectory over the
failed ones.
"""

from __future__ import annotations

import json

import pytest

from agentic_rl.cli import main
from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError
from agentic_rl.envs.games.blocksworld import BlocksworldEnv, make_blocksworld_tasks
from agentic_rl.model.tokens import encode_text
from agentic_rl.train import knownself as ks
from agentic_rl.train.setup import build
from agentic_rl.types import Completion

SMOKE = ["model.name=tiny", "trainer.progress=false"]


class ScriptedModel:
    """A generator that answers as `script[step]` says: "fast" (right at once), "slow" (right
    after reflecting) or "wrong" (wrong even then); the step is read from the prompt (the
    number of actions taken so far)."""

    def __init__(self, tokenizer, plan, script):
        self.tokenizer, self.plan, self.script = tokenizer, plan, script
        self.base = None  # "</action>" count of the opening prompt (the system's example)

    def reply(self, text):
        if self.base is None:
            self.base = text.count("</action>")
        step = text.count("</action>") - self.base
        gold = self.plan[step]
        wrong = "put down the magenta block"
        if text.endswith(ks.REFLECTION_OPEN):
            return "check which block is clear" + ks.REFLECTION_CLOSE
        after_reflection = text.endswith(ks.REFLECTION_CLOSE)
        right = self.script[step] == "fast" or (self.script[step] == "slow" and after_reflection)
        return f"<action>{gold if right else wrong}</action>"

    def generate(self, prompts, params):
        out = []
        for ids in prompts:
            text = self.reply(self.tokenizer.decode(ids))
            tokens = encode_text(self.tokenizer, text)
            out.append(Completion(tokens, [-1.0] * len(tokens), "stop", text))
        return out


def four_step_task():
    tasks = make_blocksworld_tasks("train", 20, seed=0, min_plan=4, max_plan=4)
    return tasks[0]


def test_labels_follow_the_failure_points_and_pairs_prefer_them():
    cfg = load_config("knownself", SMOKE, smoke=True)
    setup = build(cfg)
    task = four_step_task()
    plan = task.answers[0].split("\n")
    setup.generator = ScriptedModel(setup.tokenizer, plan, ["fast", "slow", "wrong", "wrong"])
    gold, labels = ks.label_tasks(setup, [task], reflect_tokens=16)
    assert [x["label"] for x in labels] == ["fast", "slow", "knowledgeable", "knowledgeable"]
    trajectory = gold[task.task_id]
    assert trajectory.metrics["success"] == 1.0
    turns = [setup.tokenizer.decode(trajectory.token_ids[a:b]) for a, b in trajectory.turn_spans]
    assert turns[0] == f"<action>{plan[0]}</action>"  # fast: the gold action alone
    assert turns[1].startswith(ks.REFLECTION_OPEN + "check which block is clear")
    assert turns[1].endswith(f"<action>{plan[1]}</action>")  # slow: reflection, then gold
    assert turns[2] == ks.KNOWLEDGE_CALL and turns[3] == f"<action>{plan[2]}</action>"
    assert turns[4] == ks.KNOWLEDGE_CALL and turns[5] == f"<action>{plan[3]}</action>"
    # the knowledge rule is in the context, inserted by the env (loss mask 0)
    text = setup.tokenizer.decode(trajectory.token_ids)
    assert "When " in text and "the agent should" in text
    rule_at = text.index("the agent should")
    masked = [i for i, m in enumerate(trajectory.loss_mask) if m == 0]
    prefix = setup.tokenizer.decode(trajectory.token_ids[: masked[-1] + 1])
    assert rule_at < len(prefix)
    # pairs: the labelled gold trajectory is preferred over each failed episode of its task
    failed = trajectory.__class__(
        token_ids=trajectory.token_ids[: trajectory.prompt_length + 3],
        loss_mask=[0] * trajectory.prompt_length + [1, 1, 1],
        logprobs=[0.0] * (trajectory.prompt_length + 3),
        prompt_length=trajectory.prompt_length,
        task_id=task.task_id,
        metrics={"success": 0.0},
    )
    solved = trajectory.__class__(**{**failed.__dict__, "metrics": {"success": 1.0}})
    other = trajectory.__class__(**{**failed.__dict__, "task_id": "unlabelled"})
    pairs = ks.build_pairs(gold, [failed, solved, other])
    assert len(pairs) == 1 and pairs[0][0] is trajectory and pairs[0][1] is failed


def test_all_fast_when_the_model_is_right():
    cfg = load_config("knownself", SMOKE, smoke=True)
    setup = build(cfg)
    task = four_step_task()
    setup.generator = ScriptedModel(setup.tokenizer, task.answers[0].split("\n"), ["fast"] * 4)
    gold, labels = ks.label_tasks(setup, [task], reflect_tokens=16)
    assert {x["label"] for x in labels} == {"fast"} and task.task_id in gold


def test_knownself_needs_a_knowledge_tool():
    with pytest.raises(ConfigError, match="knowledge"):
        ks.check_knownself_env(BlocksworldEnv(knowledge=False))
    ks.check_knownself_env(BlocksworldEnv(knowledge=True))


def test_knownself_smoke(tmp_path):
    out = [f"trainer.out_dir={tmp_path}", "trainer.run_name=ks"]
    assert main(["train", "knownself", *SMOKE, *out, "--smoke"]) == 0
    # stage 1 (baseline): SFT-only on the plain expert trajectories, weights passed on unchanged
    base = json.loads((tmp_path / "ks" / "baseline" / "summary.json").read_text())
    assert base["sft_only"]["steps"] >= 1 and {"before", "sft_only"} <= set(base["evals"])
    # stage 2 (sft): labels, SFT on the labelled trajectories
    sft = json.loads((tmp_path / "ks" / "sft" / "summary.json").read_text())
    assert sum(sft["labels"].values()) >= sft["labelled_tasks"] * 2  # >= 2 steps each
    assert sft["sft"]["steps"] >= 1 and set(sft["evals"]) == {"sft"}
    lines = (tmp_path / "ks" / "sft" / "labels.jsonl").read_text().splitlines()
    assert {json.loads(line)["label"] for line in lines} <= {"fast", "slow", "knowledgeable"}
    assert (tmp_path / "ks" / "sft" / "labelled.jsonl").exists()
    # stage 3 (dpo): from stage 2's model and labelled trajectories
    dpo = json.loads((tmp_path / "ks" / "dpo" / "summary.json").read_text())
    cfg = json.loads((tmp_path / "ks" / "dpo" / "config.json").read_text())
    assert cfg["model"]["name"] == str(tmp_path / "ks" / "sft" / "model")
    assert dpo["played"] >= 1
    if dpo["pairs"]:
        assert dpo["dpo"]["steps"] >= 1 and "dpo" in dpo["evals"]
    # a rerun skips the finished stages
    assert main(["train", "knownself", *SMOKE, *out, "--smoke"]) == 0


@pytest.mark.slow  # compiles TextWorld games (about 2 minutes)
def test_knownself_household_smoke(tmp_path):
    pytest.importorskip("textworld")
    out = [f"trainer.out_dir={tmp_path}", "trainer.run_name=ksh"]
    assert main(["train", "knownself_household", *SMOKE, *out, "--smoke"]) == 0
    summary = json.loads((tmp_path / "ksh" / "sft" / "summary.json").read_text())
    assert summary["labelled_tasks"] >= 1 and summary["sft"]["steps"] >= 1
    assert {"before", "sft_only", "sft"} <= set(summary["evals"])  # baseline in the same run
    assert (tmp_path / "ksh" / "dpo" / "summary.json").exists()


def test_sft_tasks_holds_labelled_tasks_back_for_the_pairs(tmp_path):
    out = [f"trainer.out_dir={tmp_path}", "trainer.run_name=ks", "*:knownself.sft_tasks=1"]
    assert main(["train", "knownself", *SMOKE, *out, "--smoke"]) == 0
    sft = json.loads((tmp_path / "ks" / "sft" / "summary.json").read_text())
    assert sft["labelled_tasks"] >= 2 and sft["held_back"] == sft["labelled_tasks"] - 1
    # the held-back tasks come first in the labelled file, which the DPO stage plays in order
    gold = [
        json.loads(line)["task_id"]
        for line in (tmp_path / "ks" / "sft" / "labelled.jsonl").read_text().splitlines()
    ]
    dpo = json.loads((tmp_path / "ks" / "dpo" / "summary.json").read_text())
    assert len(gold) == sft["labelled_tasks"] and gold[-1:] == sft["sft_task_ids"]
    assert dpo["played"] == min(len(gold), 4)
    with pytest.raises(ConfigError, match="knownself.sft_tasks must be in 0..knownself.num_tasks"):
        load_config("knownself", ["knownself.sft_tasks=999"])
