"""LoRA through PEFT: adapters only train, the reference is the adapter-off base or (after a
warm start) the base with a frozen copy of the adapter, never a second copy of the base,
adapter-only checkpoints round-trip, HF generation runs through the adapter, a recipe trains."""

from __future__ import annotations

import json
import sys

import pytest
import torch

pytest.importorskip("peft")

from agentic_rl.backends.hf import HFGenerator  # noqa: E402
from agentic_rl.checkpoint.io import load_checkpoint, save_checkpoint
from agentic_rl.checkpoint.layout import ADAPTER_DIR, MODEL_FILE, CheckpointError
from agentic_rl.config.load import load_config  # noqa: E402
from agentic_rl.config.parse import ConfigError
from agentic_rl.config.rollout import ModelConfig
from agentic_rl.model.errors import ModelLoadError
from agentic_rl.model.load import load_policy, token_logprobs
from agentic_rl.model.lora import (
    AdapterReference,
    adapter_disabled,
    adapter_state,
    is_lora,
    merged_copy,
    parameter_counts,
    require_peft,
    unwrap,
)
from agentic_rl.types import SamplingParams  # noqa: E402

LORA = ModelConfig(name="tiny", lora_rank=4, lora_alpha=8.0)


def lora_policy(seed: int = 0, cfg: ModelConfig = LORA):
    policy, tokenizer = load_policy(cfg, seed=seed)
    return policy, tokenizer


def perturb_adapter(policy, seed: int = 1, scale: float = 0.5) -> None:
    """B = 0 at init makes the adapter a no-op; give it weight so it changes the outputs."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * scale)


def batch_ids(tokenizer):
    ids = torch.tensor([tokenizer("The answer is 42, said the calculator.")["input_ids"]] * 2)
    return ids, torch.ones_like(ids)


def test_only_adapter_parameters_train():
    policy, tokenizer = lora_policy()
    assert is_lora(policy)
    counts = parameter_counts(policy)
    # rank 4 on 7 projections x 2 layers of a hidden-32 model: a tiny fraction of the weights
    assert 0 < counts["trainable"] < 0.01 * counts["total"]
    base_before = {n: p.detach().clone() for n, p in policy.named_parameters() if "lora_" not in n}
    perturb_adapter(policy)  # B = 0 would leave A without gradient
    ids, attn = batch_ids(tokenizer)
    lp, _, _ = token_logprobs(policy, ids, attn)
    (-lp.sum()).backward()
    for name, param in policy.named_parameters():
        if "lora_" in name:
            assert param.requires_grad and param.grad is not None and param.grad.abs().sum() > 0
        else:
            assert not param.requires_grad and param.grad is None, name
    trainable = [p for p in policy.parameters() if p.requires_grad]
    torch.optim.SGD(trainable, lr=0.1).step()
    for name, param in policy.named_parameters():
        if "lora_" not in name:
            assert torch.equal(param, base_before[name]), name


def test_reference_is_the_base_model_with_the_adapter_off():
    base, tokenizer = load_policy(ModelConfig(name="tiny"), seed=0)  # same seed: same base
    policy, _ = lora_policy(seed=0)
    perturb_adapter(policy)
    ids, attn = batch_ids(tokenizer)
    with torch.no_grad():
        expected, _, _ = token_logprobs(base, ids, attn)
        adapted, _, _ = token_logprobs(policy, ids, attn)
        with adapter_disabled(policy):
            reference, _, _ = token_logprobs(policy, ids, attn)
        after, _, _ = token_logprobs(policy, ids, attn)
    torch.testing.assert_close(reference, expected, atol=1e-6, rtol=0)
    assert (adapted - expected).abs().max() > 1e-3  # the adapter does change the policy
    torch.testing.assert_close(after, adapted, atol=0, rtol=0)  # and is back on afterwards


def kl_reference_logprobs(tmp_path, warm_start_tasks):
    """A LoRA KL run's setup; its adapter moved (as a warm start would, then start_from_policy
    as the trainer calls it after one), then prepare_batch's reference logprobs of a two-episode
    batch, with the base model's and the adapted policy's logprobs of the same tokens."""
    from agentic_rl.learner.batch import Episodes
    from agentic_rl.train.batch import prepare_batch
    from agentic_rl.train.setup import build, start_from_policy
    from agentic_rl.types import Task, Trajectory

    cfg = load_config(
        "calculator_grpo",
        [
            "model.name=tiny",
            "model.lora_rank=4",
            f"warm_start.num_tasks={warm_start_tasks}",
            "algo.kl_coef=0.05",
            f"trainer.out_dir={tmp_path}",
        ],
        smoke=True,
    )
    setup = build(cfg)
    assert is_lora(setup.policy)
    assert setup.generator.model is unwrap(setup.policy)  # HF generation through the adapter
    ids = setup.tokenizer("Q: 2 + 3? A: <calc>2+3</calc> so 5")["input_ids"]
    samples = [
        [
            Trajectory(
                ids, [0] * 6 + [1] * (len(ids) - 6), [0.0] * len(ids), 6, reward=r, group_id="g"
            )
        ]
        for r in (0.0, 1.0)
    ]
    episodes = Episodes(samples, [Task("t", "q")] * 2)
    perturb_adapter(setup.policy)
    start_from_policy(setup)
    batch = prepare_batch(setup, episodes)
    base, _ = load_policy(ModelConfig(name="tiny"), seed=cfg.trainer.seed)
    with torch.no_grad():
        expected, _, _ = token_logprobs(base, batch.input_ids, batch.attention_mask)
        adapted, _, _ = token_logprobs(setup.policy, batch.input_ids, batch.attention_mask)
    mask = batch.loss_mask > 0
    assert mask.any()
    return setup, batch.ref_logprobs[mask], expected[mask], adapted[mask]


def test_trainer_uses_the_adapter_off_policy_as_reference(tmp_path):
    """No frozen copy under LoRA without a warm start, and prepare_batch's reference logprobs
    are the base model's (they would equal the policy's if the adapter were not switched off)."""
    setup, reference, base, adapted = kl_reference_logprobs(tmp_path, 0)
    assert setup.reference is None
    torch.testing.assert_close(reference, base, atol=1e-5, rtol=0)
    assert (reference - adapted).abs().max() > 1e-3


def test_after_a_warm_start_the_lora_reference_is_the_warm_started_policy(tmp_path):
    """With a warm start the adapter moves before RL: the KL reference is then the one base with
    a frozen copy of the warm-started adapter, so KL pulls toward the warm start, not back to the
    base (which the adapter-off policy would), and no second copy of the base is made."""
    setup, reference, base, adapted = kl_reference_logprobs(tmp_path, 2)
    assert isinstance(setup.reference, AdapterReference)
    copied = sum(t.numel() for t in setup.reference.buffers())
    assert copied == sum(t.numel() for t in adapter_state(setup.policy).values())
    assert copied < 0.05 * parameter_counts(setup.policy)["total"]  # the adapter, not the base
    torch.testing.assert_close(reference, adapted, atol=1e-5, rtol=0)
    assert (reference - base).abs().max() > 1e-3


def test_the_adapter_reference_stays_at_the_warm_start_while_the_policy_moves():
    """AdapterReference: after the policy's adapter moves on (RL updates), computing as the
    reference gives the warm-started policy's logprobs, and the policy's own adapter (the same
    tensors, which the optimizer holds) is back afterwards, bit for bit."""
    policy, tokenizer = lora_policy()
    ids, attn = batch_ids(tokenizer)
    perturb_adapter(policy, seed=1)  # the warm start
    reference = AdapterReference(policy)
    with torch.no_grad():
        warm, _, _ = token_logprobs(policy, ids, attn)
    perturb_adapter(policy, seed=2)  # RL moved the adapter
    live = {n: p for n, p in policy.named_parameters() if "lora_" in n}
    before = {n: p.detach().clone() for n, p in live.items()}
    with torch.no_grad():
        moved, _, _ = token_logprobs(policy, ids, attn)
        with reference.computing_with(policy) as ref_policy:
            got, _, _ = token_logprobs(ref_policy, ids, attn)
    torch.testing.assert_close(got, warm, atol=0, rtol=0)  # the same path, the same weights
    assert (got - moved).abs().max() > 1e-3
    after = dict(policy.named_parameters())
    assert all(after[n] is p and torch.equal(p, before[n]) for n, p in live.items())
    reference.copy_from(policy)  # start_from_policy: the reference is now the moved adapter
    with torch.no_grad(), reference.computing_with(policy) as ref_policy:
        torch.testing.assert_close(token_logprobs(ref_policy, ids, attn)[0], moved, atol=0, rtol=0)


def test_an_adapter_reference_refuses_a_policy_with_other_adapters():
    policy, _ = lora_policy()
    reference = AdapterReference(policy)
    other, _ = lora_policy(cfg=ModelConfig(name="tiny", lora_rank=4, lora_targets=["q_proj"]))
    with (
        pytest.raises(ValueError, match="not the ones this reference copied"),
        reference.computing_with(other),
    ):
        pass
    with pytest.raises(ValueError, match="needs a LoRA policy"):
        AdapterReference(load_policy(ModelConfig(name="tiny"), seed=0)[0])


def test_hf_generator_samples_from_the_adapted_policy(tokenizer):
    policy, _ = lora_policy()
    perturb_adapter(policy, scale=0.3)
    gen = HFGenerator(unwrap(policy), tokenizer)
    prompt = tokenizer("What is 3 + 4?")["input_ids"]
    out = gen.generate([prompt], SamplingParams(max_new_tokens=6, seed=5))[0]
    ids = torch.tensor([prompt + out.token_ids])
    with torch.no_grad():
        lp, _, _ = token_logprobs(policy, ids, torch.ones_like(ids))
    torch.testing.assert_close(lp[0, len(prompt) :], torch.tensor(out.logprobs), atol=1e-4, rtol=0)


def test_adapter_only_checkpoint_round_trip(tmp_path):
    policy, tokenizer = lora_policy()
    perturb_adapter(policy)
    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-3)
    ids, attn = batch_ids(tokenizer)
    (-token_logprobs(policy, ids, attn)[0].sum()).backward()
    optimizer.step()
    path = save_checkpoint(tmp_path, 3, policy, optimizer, trainer_state={"note": "x"})
    assert not (path / MODEL_FILE).exists()
    adapter_files = sorted(p.name for p in (path / ADAPTER_DIR).iterdir())
    assert adapter_files == ["adapter_config.json", "adapter_model.safetensors"]
    assert json.loads((path / ADAPTER_DIR / "adapter_config.json").read_text())["r"] == 4
    saved_bytes = (path / ADAPTER_DIR / "adapter_model.safetensors").stat().st_size
    full_bytes = sum(p.numel() * p.element_size() for p in policy.parameters())
    assert saved_bytes < 0.05 * full_bytes  # the frozen base is not in the checkpoint

    fresh, _ = lora_policy()  # same base (seed), untrained adapter
    fresh_opt = torch.optim.AdamW([p for p in fresh.parameters() if p.requires_grad], lr=1e-3)
    state = load_checkpoint(path, fresh, fresh_opt)
    assert state["step"] == 3 and state["note"] == "x"
    for key, value in adapter_state(policy).items():
        torch.testing.assert_close(adapter_state(fresh)[key], value, atol=0, rtol=0)
    with torch.no_grad():
        torch.testing.assert_close(
            token_logprobs(fresh, ids, attn)[0], token_logprobs(policy, ids, attn)[0]
        )
    assert fresh_opt.state_dict()["state"].keys() == optimizer.state_dict()["state"].keys()


def test_checkpoint_kind_mismatches_are_named(tmp_path):
    policy, _ = lora_policy()
    full, _ = load_policy(ModelConfig(name="tiny"))
    lora_ckpt = save_checkpoint(tmp_path / "lora", 1, policy, None)
    full_ckpt = save_checkpoint(tmp_path / "full", 1, full, None)
    with pytest.raises(CheckpointError, match="LoRA adapter only"):
        load_checkpoint(lora_ckpt, load_policy(ModelConfig(name="tiny"))[0])
    with pytest.raises(CheckpointError, match="full model weights"):
        load_checkpoint(full_ckpt, lora_policy()[0])
    rank8 = ModelConfig(name="tiny", lora_rank=8, lora_alpha=8.0)
    with pytest.raises(CheckpointError, match="lora_rank"):
        load_checkpoint(lora_ckpt, lora_policy(cfg=rank8)[0])


def test_merged_copy_folds_the_adapter_and_leaves_the_policy(tokenizer):
    policy, _ = lora_policy()
    perturb_adapter(policy)
    merged = merged_copy(policy)
    assert not is_lora(merged) and is_lora(policy)
    assert not any("lora_" in n for n, _ in merged.named_parameters())
    ids, attn = batch_ids(tokenizer)
    with torch.no_grad():
        torch.testing.assert_close(
            token_logprobs(merged, ids, attn)[0],
            token_logprobs(policy, ids, attn)[0],
            atol=1e-5,
            rtol=0,
        )


def test_missing_peft_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "peft", None)  # `import peft` now raises ImportError
    with pytest.raises(ModelLoadError, match=r"agentic-rl\[peft\]"):
        require_peft()
    with pytest.raises(ModelLoadError, match=r"agentic-rl\[peft\]"):
        load_policy(LORA)
    assert not is_lora(torch.nn.Linear(2, 2))


def test_bad_lora_targets_are_a_clear_error():
    with pytest.raises(ModelLoadError, match="lora_targets"):
        load_policy(ModelConfig(name="tiny", lora_rank=2, lora_targets=["no_such_proj"]))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.lora_alpha=32"], "model.lora_rank=0"),
        (["model.lora_rank=-1"], "lora_rank must be >= 0"),
        (["model.lora_rank=4", "model.lora_targets=q_proj"], "list of layer names"),
        (["model.lora_rank=4", "model.lora_alpha=0"], "lora_alpha must be > 0"),
    ],
)
def test_lora_config_errors(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config("calculator_grpo", overrides)  # this recipe has a warm start


@pytest.mark.slow
def test_smoke_recipe_trains_only_the_adapter_and_resumes(tmp_path):
    """The defining mechanism end to end: after RL steps with LoRA the base weights are bit-for-
    bit the initial ones, the adapter moved, checkpoints are adapter-only, and a resumed run
    continues from the adapter."""
    from agentic_rl.train.loop import train
    from agentic_rl.train.setup import build

    overrides = [
        "model.name=tiny",
        "model.lora_rank=4",
        "model.lora_alpha=16",
        "warm_start.num_tasks=0",
        "algo.kl_coef=0.05",
        "algo.entropy_coef=0.01",  # random-token episodes all score alike: keep updates non-trivial
        "optim.lr=0.01",
        "trainer.eval_before=false",
        "trainer.tensorboard=false",
        "trainer.progress=false",
        f"trainer.out_dir={tmp_path}",
    ]
    train(load_config("calculator_grpo", [*overrides, "trainer.steps=1"], smoke=True))
    run = tmp_path / "calculator_grpo"
    first = sorted((run / "checkpoints").iterdir())[-1]
    assert first.name == "step_000001"
    assert (first / ADAPTER_DIR / "adapter_model.safetensors").is_file()
    assert not (first / MODEL_FILE).exists()

    cfg = load_config("calculator_grpo", overrides, smoke=True)  # 2 steps: resumes at step 1
    summary = train(cfg)
    assert summary["after"]["success"] >= 0
    last = sorted((run / "checkpoints").iterdir())[-1]
    assert last.name == "step_000002"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert sorted(r["step"] for r in rows if "train/kl" in r) == [1, 2]  # no step redone

    initial = build(cfg).policy  # base + zero adapter, as the run started
    trained = build(cfg).policy
    load_checkpoint(last, trained)  # the frozen base comes from model.name, the adapter from disk
    with torch.no_grad():
        moved = sum(
            float((a - b).abs().sum())
            for a, b in zip(
                adapter_state(trained).values(), adapter_state(initial).values(), strict=True
            )
        )
    assert moved > 0  # the RL steps changed the adapter
    # The optimizer only ever held the adapter: one state per LoRA tensor, none for the base.
    opt = torch.load(last / "optimizer.pt", weights_only=True)["optimizer"]
    assert len(opt["state"]) == len(adapter_state(trained)) < len(list(trained.parameters()))


@pytest.mark.slow
def test_a_warm_started_lora_reference_is_checkpointed_and_a_resumed_run_matches(tmp_path):
    """LoRA + warm start + KL end to end: the frozen reference is saved with the checkpoint and
    comes back on resume, so a run stopped after step 1 and resumed ends with the adapter of an
    uninterrupted run, bit for bit (same path, same seeds)."""
    from safetensors.torch import load_file

    from agentic_rl.checkpoint.layout import latest_checkpoint
    from agentic_rl.train.loop import train

    def run(out, steps):
        overrides = ["model.name=tiny", "model.lora_rank=4", "algo.kl_coef=0.05"]
        overrides += ["trainer.progress=false", "trainer.eval_before=false"]
        overrides += [f"trainer.out_dir={out}", "trainer.run_name=r", f"trainer.steps={steps}"]
        train(load_config("calculator_grpo", overrides, smoke=True))
        return out / "r"

    first = run(tmp_path / "a", 1)
    assert (first / "checkpoints" / "step_000001" / "reference.safetensors").is_file()
    run(tmp_path / "a", 2)  # resumes at step 1: the reference comes back from the checkpoint
    uninterrupted = run(tmp_path / "b", 2)
    adapter = ADAPTER_DIR + "/adapter_model.safetensors"
    resumed = load_file(str(latest_checkpoint(first) / adapter))
    straight = load_file(str(latest_checkpoint(uninterrupted) / adapter))
    assert resumed.keys() == straight.keys()
    assert all(torch.equal(resumed[k], straight[k]) for k in resumed)
