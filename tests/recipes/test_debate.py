"""The `debate` recipe: two debaters, a LoRA adapter each, GRPO grouped per role.

Mechanism checked through the trainer's own code: with every team failing (the second debater
is always wrong) the team's outcome tells no sample apart, so each debater's advantages come
from its own reward term alone: the first debater's right answers are credited and its wrong
ones are not, the second debater's samples (all alike) get none, and one update moves the first
debater's adapter only, leaving the second's and the base bit-identical. Under MATPO's rule
(algo.role_groups=false) the debaters' own terms do not reach the advantages."""

from __future__ import annotations

import torch

from agentic_rl.cli import main
from agentic_rl.config.load import load_config
from agentic_rl.logging import read_metrics
from agentic_rl.model.lora import adapter_parameters, role_adapters
from agentic_rl.train.batch import prepare_batch
from agentic_rl.train.collect import collect
from agentic_rl.train.loop import update_policy
from agentic_rl.train.setup import build, make_optimizer

SMOKE = ["model.name=tiny", "trainer.progress=false"]


def first_right_in_one_episode(ep, index, turn):
    """The group's first episode has a first debater that answers right in both rounds; every
    other first debater and every second debater answers wrong."""
    gold = ep.task.answers[0]
    if ep.role == "first" and index == 0:
        return f"<answer>{gold}</answer>"
    return f"<answer>{int(float(gold)) + 7}</answer>"


def test_debate_smoke(tmp_path, scripted):
    scripted(lambda ep, index, turn: ep.env.expert_turn() if index == 0 else "<answer>1</answer>")
    out = [f"trainer.out_dir={tmp_path}", "trainer.run_name=debate"]
    assert main(["train", "debate", *SMOKE, *out, "--smoke"]) == 0
    rows = [r for r in read_metrics(tmp_path / "debate" / "metrics.jsonl") if "train/reward" in r]
    assert rows and "train/env/first_reward" in rows[0] and "train/env/second_reward" in rows[0]
    step_dirs = sorted((tmp_path / "debate" / "checkpoints").iterdir())
    for role in ("first", "second"):  # every debater's adapter is in the checkpoint
        assert (step_dirs[-1] / "adapter" / role / "adapter_model.safetensors").is_file()


def test_each_debater_is_credited_by_its_own_answers_and_only_its_adapter_moves(scripted):
    setup = build(load_config("debate", SMOKE))
    assert role_adapters(setup.policy) == ("first", "second")
    scripted(first_right_in_one_episode)
    kept, _, _ = collect(setup, 1)
    batch = prepare_batch(setup, kept)
    samples = [s for ep in kept.samples for s in ep]
    for row, sample in enumerate(samples):
        role = batch.agent_names[int(batch.agent_ids[row])]
        values = batch.advantages[row][batch.loss_mask[row] > 0]
        if role == "second":
            assert torch.all(values == 0)  # every second debater alike: nothing to tell apart
        elif sample.metrics["env/first_reward"] > 0:
            assert torch.all(values > 0)
        else:
            assert torch.all(values < 0)
    assert any(s.metrics["env/first_reward"] > 0 for s in samples)
    before = {n: p.detach().clone() for n, p in setup.policy.named_parameters()}
    update_policy(setup, make_optimizer(setup), kept)
    moved = {n for n, p in setup.policy.named_parameters() if not torch.equal(p, before[n])}
    first = {id(p) for p in adapter_parameters(setup.policy, "first")}
    named = dict(setup.policy.named_parameters())
    assert moved and all(id(named[n]) in first for n in moved)

    setup = build(load_config("debate", [*SMOKE, "algo.role_groups=false"]))
    kept, _, _ = collect(setup, 1)
    assert torch.all(prepare_batch(setup, kept).advantages == 0)


def test_three_debaters_get_an_adapter_each_and_each_plays_its_own_turns(scripted):
    overrides = [*SMOKE, "env.options.debaters=3", "rollout.max_turns=12"]
    setup = build(load_config("debate", overrides))
    assert role_adapters(setup.policy) == ("first", "second", "third")
    scripted(lambda ep, index, turn: ep.env.expert_turn())
    kept, _, _ = collect(setup, 1)
    episode = kept.samples[0]
    assert [s.role for s in episode] == ["first", "first", "second", "second", "third", "third"] * 2
    for ep in kept.samples:  # the scripted debaters are right: the team wins, each is paid
        assert ep[-1].metrics["success"] == 1.0
        assert all(ep[-1].metrics[f"env/{r}_reward"] > 0 for r in ("first", "second", "third"))
