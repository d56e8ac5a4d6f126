"""The `one_shot_rlvr` recipe: RL on a single training example with an entropy bonus.

Mechanisms checked: the one example is chosen by 1-shot RLVR's rule (env.select_by_variance:
the candidate whose sampled rewards vary most, here under a scripted policy that half solves
candidate 2 and always solves candidate 3), logged, kept on resume and seeded; under --smoke
every rollout of every RL step of the one-shot stage is that task (and its run holds one
training task); bad selection settings fail at load; the entropy bonus changes the loss by
exactly -entropy_coef x the entropy aggregated like the policy loss, computed here by hand from
the model's logits, and changes the update (with zero advantages it is the only gradient).
"""

from __future__ import annotations

import copy
import json

import pytest
import torch

from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError, build_dataclass
from agentic_rl.config.schema import Config
from agentic_rl.envs.math.calculator import make_calculator_tasks
from agentic_rl.learner.batch import collate
from agentic_rl.learner.update import _micro_batch_loss, update
from agentic_rl.logging import read_metrics
from agentic_rl.model.load import tiny_model
from agentic_rl.train import collect
from agentic_rl.train.collect import rollout
from agentic_rl.train.setup import build
from agentic_rl.train.stages import train_recipe
from agentic_rl.train.task_select import select_train_tasks
from agentic_rl.types import Trajectory

FAST = ["model.name=tiny", "trainer.progress=false", "trainer.tensorboard=false"]


def rl_stage(*overrides: str) -> Config:
    cfg = load_config("one_shot_rlvr", [*FAST, *overrides])
    return build_dataclass(Config, dict(cfg.stages[1]))


CANDIDATES = make_calculator_tasks("train", 4, seed=0)  # the smoke run's candidates
TARGET, SOLVED = CANDIDATES[2].task_id, CANDIDATES[3].task_id


def half_solves_candidate_2(episode, index, turn):
    """Candidate 2: every other sample right (p = 1/2, the largest p(1-p)); candidate 3:
    always right (p = 1, variance 0, as the old recipe's example was); the rest: always wrong."""
    task = episode.task
    right = task.task_id == SOLVED or (task.task_id == TARGET and index % 2 == 0)
    return f"<answer>{task.answers[0] if right else -1}</answer>"


def record_rollouts(monkeypatch) -> list:
    calls = []
    real_rollout = rollout

    def recording(setup, tasks, group_size, seed, step, stats=None):
        stage = setup.cfg.trainer.run_name.split("/")[-1]
        calls.append((stage, len(setup.train_tasks), [t.task_id for t in tasks], group_size))
        return real_rollout(setup, tasks, group_size, seed, step, stats)

    monkeypatch.setattr(collect, "rollout", recording)
    return calls


def test_smoke_trains_every_step_on_the_variance_chosen_example(tmp_path, monkeypatch, scripted):
    scripted(half_solves_candidate_2)
    calls = record_rollouts(monkeypatch)
    overrides = [*FAST, f"trainer.out_dir={tmp_path}", "env.num_eval_tasks=2"]
    summary = train_recipe(load_config("one_shot_rlvr", overrides, smoke=True))
    assert list(summary["stages"]) == ["format_sft", "one_shot_rl"]
    selection = summary["stages"]["one_shot_rl"]["task_selection"]
    assert selection["chosen"] == [2] and selection["chosen_task_ids"] == [TARGET]
    assert selection["mean_rewards"] == [0.0, 0.0, 0.5, 1.0]
    assert selection["chosen_variance"] == [0.25] and selection["samples"] == 2
    one_shot = [c for c in calls if c[0] == "one_shot_rl"]
    assert len(one_shot) == summary["stages"]["one_shot_rl"]["steps"] == 2
    for _, num_train_tasks, task_ids, group_size in one_shot:
        assert num_train_tasks == 1
        # the whole batch: G samples of the chosen example, not the first task (the default)
        assert task_ids == [TARGET] != [CANDIDATES[0].task_id]
        assert group_size == 2
    run = tmp_path / "one_shot_rlvr" / "one_shot_rl"
    config = json.loads((run / "config.json").read_text())
    assert config["algo"]["entropy_coef"] > 0
    logged = [r for r in read_metrics(run / "metrics.jsonl") if "task_select/chosen_index" in r]
    assert len(logged) == 1 and logged[0]["task_select/chosen_index"] == 2.0
    assert logged[0]["task_select/candidates_varying"] == 0.25


def test_a_resumed_run_trains_on_the_tasks_chosen_before_it_stopped(
    tmp_path, monkeypatch, scripted
):
    scripted(half_solves_candidate_2)
    overrides = [*FAST, f"trainer.out_dir={tmp_path}", "env.num_eval_tasks=2"]
    train_recipe(load_config("one_shot_rlvr", overrides, smoke=True))
    # now candidate 1 would win a new selection; the resumed stage must not select again
    scripted(lambda ep, index, turn: f"<answer>{-1 if index % 2 else ep.task.answers[0]}</answer>")
    (tmp_path / "one_shot_rlvr" / "one_shot_rl" / "summary.json").unlink()
    calls = record_rollouts(monkeypatch)
    summary = train_recipe(
        load_config("one_shot_rlvr", [*overrides, "one_shot_rl:trainer.steps=3"], True)
    )
    assert summary["stages"]["one_shot_rl"]["steps"] == 3
    assert [c[2] for c in calls] == [[TARGET]]  # only step 3 ran, on the chosen task
    assert summary["stages"]["one_shot_rl"]["task_selection"]["chosen"] == [2]


def test_selection_is_seeded_by_trainer_seed(monkeypatch):
    seeds = []
    real_actor = collect.policy_actor

    def recording(generator, fmt, cfg, seed, **kwargs):
        seeds.append(seed)
        return real_actor(generator, fmt, cfg, seed, **kwargs)

    monkeypatch.setattr(collect, "policy_actor", recording)
    chosen = []
    for seed in (0, 0, 1):
        cfg = rl_stage(f"trainer.seed={seed}")
        cfg.env.select_by_variance, cfg.env.select_samples = 4, 2
        cfg.rollout.eval_batch_size = 4  # 2 candidates x 2 samples per batch
        cfg.rollout.max_tokens_per_turn = 8
        cfg.rollout.max_turns = 1
        setup = build(cfg)
        chosen.append(select_train_tasks(setup))
        assert [t.task_id for t in setup.train_tasks] == chosen[-1]["chosen_task_ids"]
    assert chosen[0] == chosen[1]
    assert seeds[:2] == seeds[2:4] != seeds[4:6] and len(set(seeds[:2])) == 2


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["one_shot_rl:env.select_by_variance=1"], "cannot choose env.num_train_tasks=1"),
        (
            ["one_shot_rl:env.select_by_variance=4", "one_shot_rl:env.num_train_tasks=4"],
            "needs more candidates",
        ),
        (["one_shot_rl:env.select_by_variance=-1"], "must be >= 0"),
        (
            ["one_shot_rl:env.select_by_variance=4", "one_shot_rl:env.select_samples=1"],
            "one sample cannot vary",
        ),
        (
            ["one_shot_rl:env.select_by_variance=0", "one_shot_rl:env.select_samples=4"],
            "set but does nothing",
        ),
    ],
)
def test_task_selection_config_errors(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config("one_shot_rlvr", [*FAST, *overrides])


def test_task_selection_needs_sampled_rollouts():
    with pytest.raises(ConfigError, match="rollout.scheme=self_play makes its own tasks"):
        load_config("absolute_zero", [*FAST, "env.num_train_tasks=1", "env.select_by_variance=4"])


def hand_batch(tokenizer):
    texts = ["<calc>12 * 34</calc>", "<answer>408</answer> done"]
    rows = []
    for text in texts:
        prompt = tokenizer("Question: what is 12 * 34?")["input_ids"]
        reply = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids = prompt + reply
        mask = [0] * len(prompt) + [1] * len(reply)
        rows.append(Trajectory(ids, mask, [0.0] * len(ids), prompt_length=len(prompt)))
    batch = collate(rows, tokenizer.pad_token_id)
    batch.advantages = torch.tensor([[1.0], [-1.0]]) * batch.loss_mask
    return batch


def hand_entropy(model, batch) -> torch.Tensor:
    """seq-mean-token-mean of H_t = -sum_v p log p over the loss tokens (GRPO's aggregation)."""
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    logp = torch.log_softmax(logits.double(), dim=-1)
    entropy = -(logp.exp() * logp).sum(-1)  # [N, T]: H of the distribution at position t
    per_token = torch.zeros_like(batch.loss_mask, dtype=torch.float64)
    per_token[:, 1:] = entropy[:, :-1]  # position t-1 predicts token t
    mask = batch.loss_mask.double()
    return ((per_token * mask).sum(1) / mask.sum(1)).mean()


def test_entropy_bonus_changes_the_loss_by_exactly_minus_coef_times_entropy(tokenizer):
    cfg = rl_stage()
    coef = cfg.algo.entropy_coef
    assert coef > 0 and cfg.algo.loss_agg == "seq-mean-token-mean"
    off = copy.deepcopy(cfg)
    off.algo.entropy_coef = 0.0
    model = tiny_model(len(tokenizer), seed=0)
    batch = hand_batch(tokenizer)
    counts = {"num_sequences": len(batch), "num_tokens": float(batch.loss_mask.sum())}
    counts["max_tokens"] = cfg.rollout.max_total_tokens
    with torch.no_grad():
        loss_on = _micro_batch_loss(model, batch, cfg, counts, None)["loss"]
        loss_off = _micro_batch_loss(model, batch, off, counts, None)["loss"]
    entropy = hand_entropy(model, batch)
    assert entropy > 1.0  # a random model over a 49k vocabulary is far from deterministic
    assert float(loss_on - loss_off) == pytest.approx(-coef * float(entropy), rel=1e-4)


def test_entropy_bonus_changes_the_update(tokenizer):
    cfg = rl_stage("optim.lr=1e-3", "optim.micro_batch_size=8")
    off = copy.deepcopy(cfg)
    off.algo.entropy_coef = 0.0
    after = {}
    for name, run_cfg, advantages in (("on", cfg, 1.0), ("off", off, 1.0), ("only", cfg, 0.0)):
        model = tiny_model(len(tokenizer), seed=0)
        batch = hand_batch(tokenizer)
        batch.advantages = batch.advantages * advantages
        optimizer = torch.optim.AdamW(model.parameters(), lr=run_cfg.optim.lr)
        update(model, optimizer, batch, run_cfg)
        after[name] = (model, hand_entropy(model, batch))
    start = hand_entropy(tiny_model(len(tokenizer), seed=0), hand_batch(tokenizer))
    on, off = (after[name][0].model.embed_tokens.weight for name in ("on", "off"))
    assert not torch.allclose(on, off)
    # with zero advantages the entropy bonus is the whole gradient: it raises the entropy
    assert after["only"][1] > start
