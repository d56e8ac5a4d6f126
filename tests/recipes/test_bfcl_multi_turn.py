"""The `bfcl_multi_turn` recipe: BFCL's multi-turn verdict is the reward the trainer sees.

Mechanism checked through the real trainer code (build, play, prepare_batch) with a scripted
policy: in one group, the ground truth's calls pass BFCL's state and response checks (reward 1),
ending every turn at once fails them (0), and calling a tool until the turn budget cuts the
episode fails too (0) and still counts in its category's accuracy; the group's GRPO advantages
order them. The warm start demonstrates training scenarios only (never a reported one), each
turn ended by the end-of-turn token; a smoke run trains end to end and reports BFCL's accuracy
per category.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("bfcl_eval", reason="bfcl-eval is installed by make setup (--no-deps)")
pytest.importorskip("tree_sitter", reason="the bfcl extra: tree-sitter 0.21")

from agentic_rl.cli import main  # noqa: E402
from agentic_rl.config.load import load_config  # noqa: E402
from agentic_rl.envs.benchmarks.bfcl_data import MULTI_TURN, in_train_fold  # noqa: E402
from agentic_rl.learner.batch import Episodes  # noqa: E402
from agentic_rl.train.batch import prepare_batch  # noqa: E402
from agentic_rl.train.collect import expert_demos, play  # noqa: E402
from agentic_rl.train.setup import build  # noqa: E402
from agentic_rl.train.summary import summarize  # noqa: E402

SMOKE = ["model.name=tiny", "trainer.progress=false", "env.num_train_tasks=20"]


def ground_truth(ep) -> str:
    """The env's expert turn as the model would write it (no <answer> tags)."""
    return ep.env.expert_turn().removeprefix("<answer>").removesuffix("</answer>")


def test_reward_is_bfcls_verdict_and_a_cut_episode_counts_as_failed(scripted):
    cfg = load_config("bfcl_multi_turn", [*SMOKE, "rollout.group_size=3"], smoke=True)
    assert cfg.rollout.chat_format == "python_calls" and cfg.algo.name == "grpo"
    setup = build(cfg)
    task = next(t for t in setup.eval_tasks if t.fields["category"] == "multi_turn_base")
    scripts = [ground_truth, lambda ep: "[]", lambda ep: "[pwd()]"]
    samples = play(
        setup, [task] * 3, ["g"] * 3, scripted(lambda ep, i, turn: scripts[i](ep)), seed=0
    )
    assert [s[0].reward for s in samples] == [1.0, 0.0, 0.0]
    cut = samples[2][0]
    assert cut.truncated and cut.metrics["turns"] == cfg.rollout.max_turns
    key = "env/accuracy@multi_turn_base"
    assert [s[0].metrics[key] for s in samples] == [1.0, 0.0, 0.0]
    assert summarize([s[0] for s in samples])[key] == pytest.approx(1 / 3)
    batch = prepare_batch(setup, Episodes(samples, [task] * 3))
    adv = [float(batch.advantages[i][batch.loss_mask[i] > 0][0]) for i in range(3)]
    assert adv[0] > 0 > adv[1] and adv[1] == pytest.approx(adv[2])


def test_warm_start_demonstrates_training_scenarios_with_turns_that_end():
    cfg = load_config("bfcl_multi_turn", [*SMOKE, "warm_start.num_tasks=4"], smoke=True)
    setup = build(cfg)
    demos, episodes = expert_demos(setup, 4)
    assert episodes == 4 and all(d.reward == 1.0 for d in demos)
    assert all(in_train_fold(d.task_id, 5) for d in demos)
    eos = setup.tokenizer.eos_token_id
    for d in demos:
        assert len(d.turn_spans) >= 2  # calls, then `[]`, at least once
        assert all(d.token_ids[end - 1] == eos for _, end in d.turn_spans)


@pytest.mark.slow  # 8,000-token episodes through the learner (about a minute)
def test_smoke_trains_and_reports_accuracy_per_category(tmp_path, scripted):
    # the expert plays evaluation episodes and one episode of each training group; the other
    # ends every turn at once, so each group has a pass and a failure
    scripted(
        lambda ep, i, turn: ground_truth(ep) if i == 0 or ep.group_id.startswith("eval:") else "[]"
    )
    out = [f"trainer.out_dir={tmp_path}", "trainer.run_name=run", "warm_start.num_tasks=2"]
    out.append("trainer.steps=1")
    assert main(["train", "bfcl_multi_turn", "model.name=tiny", *out, "--smoke"]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    for stage in ("before", "warm_start", "after"):
        accuracy = {k: v for k, v in summary[stage].items() if k.startswith("env/accuracy@")}
        expected = {f"env/accuracy@{c}": 1.0 for c in MULTI_TURN}
        # and BFCL's multi-turn score, the mean of the four (envs/benchmarks/bfcl_score.py)
        assert accuracy == expected | {"env/accuracy@multi_turn": 1.0}, stage


def test_every_reported_prompt_and_its_episode_fit_the_bundled_models_positions():
    """The recipe writes BFCL's function docs in its python variant so that every reported
    entry's opening prompt plus the episode's token budget fits the bundled model's 8,192
    positions; with BFCL's default json docs some would not (prompts up to ~9,600 tokens)."""
    from transformers import AutoConfig, AutoTokenizer

    from agentic_rl.envs.from_config import make_envs, make_tasks
    from agentic_rl.model.load import bundled_model_dir

    cfg = load_config("bfcl_multi_turn", ["env.num_eval_tasks=640"])
    assert cfg.model.name == "smollm2-135m"
    positions = AutoConfig.from_pretrained(bundled_model_dir()).max_position_embeddings
    tokenizer = AutoTokenizer.from_pretrained(bundled_model_dir())
    tasks = make_tasks(cfg, "eval")
    assert len(tasks) == 640

    def longest_prompt(cfg) -> int:
        env = make_envs(cfg, 1)[0]
        texts = (
            tokenizer.apply_chat_template(
                env.reset(task, 0).messages, tokenize=False, add_generation_prompt=True
            )
            for task in tasks
        )
        return max(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts)

    python_docs = longest_prompt(cfg)
    assert python_docs > 3000 and python_docs + cfg.rollout.max_total_tokens <= positions
    json_docs = load_config("bfcl_multi_turn", ["env.options.function_doc_format=json"])
    assert longest_prompt(json_docs) + cfg.rollout.max_total_tokens > positions
