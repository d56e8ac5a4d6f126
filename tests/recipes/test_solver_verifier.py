"""The `solver_verifier` recipe: a solver / verifier math team, a LoRA adapter per role (or,
with model.role_policies=models, a full model per role).

Mechanism checked through the trainer's own code: with advantages grouped per role the
verifier's samples are credited by its own verdicts while the solver's (a constant team outcome
in the group) get none, one update then moves the verifier's adapter and leaves the solver's
and the base bit-identical; under MATPO's rule (algo.role_groups=false) the verifier's term
does not reach the advantages. With a full model per role the same update moves the verifier's
model only, the warm start trains each role's model on that role's demonstrations (a frozen
role's not at all), and a run resumed from a checkpoint ends bit-identical to an uninterrupted
one."""

from __future__ import annotations

import torch
from safetensors.torch import load_file

from agentic_rl.checkpoint.layout import MODEL_FILE, latest_checkpoint
from agentic_rl.cli import main
from agentic_rl.config.load import load_config
from agentic_rl.logging import read_metrics
from agentic_rl.model.lora import adapter_parameters, role_adapters
from agentic_rl.model.roles import role_policies
from agentic_rl.train import loop
from agentic_rl.train.batch import prepare_batch
from agentic_rl.train.collect import collect
from agentic_rl.train.loop import train, update_policy, warm_start
from agentic_rl.train.setup import build, make_optimizer

SMOKE = ["model.name=tiny", "trainer.progress=false"]


def wrong_solver_and_judges(ep, index, turn):
    """Every solver proposes 7 (never the answer); the group's first verifier rejects it (a
    correct verdict: its own term), the others accept it (wrong)."""
    if ep.role == "solver":
        return "<answer>7</answer>"
    return "<verdict>reject</verdict>" if index == 0 else "<verdict>accept</verdict>"


def test_solver_verifier_smoke(tmp_path, scripted):
    scripted(lambda ep, index, turn: ep.env.expert_turn() if index == 0 else "<answer>1</answer>")
    out = [f"trainer.out_dir={tmp_path}", "trainer.run_name=sv"]
    assert main(["train", "solver_verifier", *SMOKE, *out, "--smoke"]) == 0
    rows = [r for r in read_metrics(tmp_path / "sv" / "metrics.jsonl") if "train/reward" in r]
    assert rows and rows[0]["train/env/verifier_conversations"] > 0
    step_dirs = sorted((tmp_path / "sv" / "checkpoints").iterdir())
    for role in ("solver", "verifier"):  # every role's adapter is in the checkpoint
        assert (step_dirs[-1] / "adapter" / role / "adapter_model.safetensors").is_file()


def test_the_verifier_is_credited_by_its_own_verdicts_and_only_its_adapter_moves(scripted):
    cfg = load_config("solver_verifier", [*SMOKE, "env.options.max_attempts=1"])
    setup = build(cfg)
    assert role_adapters(setup.policy) == ("solver", "verifier")
    scripted(wrong_solver_and_judges)
    kept, _, _ = collect(setup, 1)
    batch = prepare_batch(setup, kept)
    names = batch.agent_names
    for row in range(len(batch)):
        role = names[int(batch.agent_ids[row])]
        values = batch.advantages[row][batch.loss_mask[row] > 0]
        sample = [s for ep in kept.samples for s in ep][row]
        if role == "solver":
            assert torch.all(values == 0)  # every team failed: nothing to tell solvers apart
        elif "reject" in sample.completion_text:
            assert torch.all(values > 0)
        else:
            assert torch.all(values < 0)
    before = {n: p.detach().clone() for n, p in setup.policy.named_parameters()}
    update_policy(setup, make_optimizer(setup), kept)
    moved = {n for n, p in setup.policy.named_parameters() if not torch.equal(p, before[n])}
    verifier = {id(p) for p in adapter_parameters(setup.policy, "verifier")}
    named = dict(setup.policy.named_parameters())
    assert moved and all(id(named[n]) in verifier for n in moved)

    matpo = load_config(
        "solver_verifier", [*SMOKE, "env.options.max_attempts=1", "algo.role_groups=false"]
    )
    setup = build(matpo)
    kept, _, _ = collect(setup, 1)
    assert torch.all(prepare_batch(setup, kept).advantages == 0)


MODELS = ["model.lora_rank=0", "model.role_policies=models"]


def test_with_a_model_per_role_the_update_moves_only_the_verifiers_model(scripted):
    setup = build(load_config("solver_verifier", [*SMOKE, *MODELS, "env.options.max_attempts=1"]))
    assert role_policies(setup.policy) == ("solver", "verifier")
    scripted(wrong_solver_and_judges)
    kept, _, _ = collect(setup, 1)
    before = {n: p.detach().clone() for n, p in setup.policy.named_parameters()}
    update_policy(setup, make_optimizer(setup), kept)
    moved = {n for n, p in setup.policy.named_parameters() if not torch.equal(p, before[n])}
    assert moved and all(n.startswith("models.verifier.") for n in moved)


class NoLog:
    def log(self, *args, **kwargs):
        pass


def test_with_a_model_per_role_the_warm_start_trains_each_roles_model_on_its_own_demos(monkeypatch):
    calls = []

    def recording(cfg, model, demos, *args, **kwargs):
        calls.append((model, {d.role for d in demos}))
        return real(cfg, model, demos, *args, **kwargs)

    real = loop.warm_start_sft
    monkeypatch.setattr(loop, "warm_start_sft", recording)
    setup = build(load_config("solver_verifier", [*SMOKE, *MODELS, "warm_start.num_tasks=8"]))
    before = {n: p.detach().clone() for n, p in setup.policy.named_parameters()}
    warm_start(setup, NoLog())
    models = setup.policy.models
    assert [(m, r) for m, r in calls] == [
        (models["solver"], {"solver"}),
        (models["verifier"], {"verifier"}),
    ]
    for role in ("solver", "verifier"):
        mine = [n for n in before if n.startswith(f"models.{role}.")]
        named = dict(setup.policy.named_parameters())
        assert any(not torch.equal(named[n], before[n]) for n in mine), role

    calls.clear()  # a frozen role: its demonstrations carry no trained token, its model stays
    frozen = [*SMOKE, *MODELS, "warm_start.num_tasks=8", "rollout.train_roles=[verifier]"]
    setup = build(load_config("solver_verifier", frozen))
    before = {n: p.detach().clone() for n, p in setup.policy.named_parameters()}
    warm_start(setup, NoLog())
    assert [r for _, r in calls] == [{"verifier"}]
    moved = {n for n, p in setup.policy.named_parameters() if not torch.equal(p, before[n])}
    assert moved and all(n.startswith("models.verifier.") for n in moved)


def test_a_model_per_role_run_resumes_bit_identical_to_an_uninterrupted_one(tmp_path):
    """Warm start (each role's model on its own demonstrations), a reference model per role
    (algo.kl_coef > 0), RL steps; stopped after step 1 and resumed, it ends where one
    uninterrupted run does, every role's model and reference bit for bit."""
    over = [
        *SMOKE,
        *MODELS,
        "warm_start.num_tasks=8",
        "algo.kl_coef=0.05",
        "algo.entropy_coef=0.01",  # random-token episodes all score alike: keep updates
        "trainer.eval_before=false",
        "trainer.tensorboard=false",
        "trainer.run_name=run",
    ]

    def config(out, steps):
        return load_config(
            "solver_verifier", [*over, f"trainer.out_dir={out}", f"trainer.steps={steps}"], True
        )

    train(config(tmp_path / "a", 2))
    train(config(tmp_path / "b", 1))
    train(config(tmp_path / "b", 2))  # resumes from step 1
    last_a, last_b = (
        latest_checkpoint(tmp_path / "a" / "run"),
        latest_checkpoint(tmp_path / "b" / "run"),
    )
    assert last_a.name == last_b.name == "step_000002"
    for file in (MODEL_FILE, "reference.safetensors"):
        wa, wb = load_file(str(last_a / file)), load_file(str(last_b / file))
        assert wa.keys() == wb.keys()
        assert all(torch.equal(wa[k], wb[k]) for k in wa), file
    weights = load_file(str(last_a / MODEL_FILE))
    solver = {k.split(".", 2)[2]: v for k, v in weights.items() if k.startswith("models.solver.")}
    verifier = {
        k.split(".", 2)[2]: v for k, v in weights.items() if k.startswith("models.verifier.")
    }
    assert solver.keys() == verifier.keys()
    assert any(not torch.equal(solver[k], verifier[k]) for k in solver)  # two policies
    step_1 = load_file(str(last_a.parent / "step_000001" / MODEL_FILE))
    # step 2 moved the solver's model, so the resume had work to do (the verifier's model
    # did not move in step 2 here: the random tiny model's episodes gave it nothing to learn)
    mine = [k for k in weights if k.startswith("models.solver.")]
    assert any(not torch.equal(weights[k], step_1[k]) for k in mine)


def test_turn_credit_per_role_trains(tmp_path, scripted):
    # MT-GRPO on the team: each role's conversations are its own turns (algos/turns.py
    # `role_units`), one update per role's adapter as with GRPO
    scripted(lambda ep, index, turn: ep.env.expert_turn() if index == 0 else "<answer>1</answer>")
    out = [f"trainer.out_dir={tmp_path}", "trainer.run_name=mt"]
    turns = ["algo.name=mt_grpo", "algo.role_groups=false"]
    assert main(["train", "solver_verifier", *SMOKE, *turns, *out, "--smoke"]) == 0
    rows = [r for r in read_metrics(tmp_path / "mt" / "metrics.jsonl") if "train/reward" in r]
    assert rows and rows[0]["train/env/verifier_conversations"] > 0
    assert all("train/turn_adv_nonzero" in r for r in rows)
