"""bf16 mixed precision: autocast matmuls over float32 weights, in the learner and the generator."""

from __future__ import annotations

import copy

import pytest
import torch

from agentic_rl.backends.base import make_generator
from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError
from agentic_rl.learner.advantages import compute_advantages
from agentic_rl.learner.batch import collate
from agentic_rl.learner.update import update
from agentic_rl.train import sft
from agentic_rl.types import SamplingParams, Trajectory


def _linear_output_dtypes(model: torch.nn.Module) -> list[torch.dtype]:
    seen: list[torch.dtype] = []
    layer = model.model.layers[0].mlp.down_proj
    layer.register_forward_hook(lambda mod, args, out: seen.append(out.dtype))
    return seen


def _batch() -> list[Trajectory]:
    g = torch.Generator().manual_seed(0)
    trajs = []
    for i in range(4):
        ids = torch.randint(10, 1000, (10 + i,), generator=g).tolist()
        trajs.append(
            Trajectory(
                token_ids=ids,
                loss_mask=[0] * 4 + [1] * (6 + i),
                logprobs=[0.0] * len(ids),
                prompt_length=4,
                turn_spans=[(4, len(ids))],
                step_rewards=[],
                reward=float(i % 2),
                group_id="g",
            )
        )
    return trajs


def test_config_checks_the_choice_and_the_weight_dtype() -> None:
    with pytest.raises(ConfigError, match="rollout.mixed_precision"):
        load_config(None, ["rollout.mixed_precision=fp16"])
    with pytest.raises(ConfigError, match="model.dtype=float32"):
        load_config(None, ["learner.mixed_precision=bf16", "model.dtype=bfloat16"])
    with pytest.raises(ConfigError, match="rollout.mixed_precision is set but does nothing"):
        load_config(None, ["rollout.backend=vllm", "rollout.mixed_precision=bf16"])
    cfg = load_config(None, ["learner.mixed_precision=bf16", "rollout.mixed_precision=bf16"])
    assert cfg.learner.strategy == "single"


def test_bf16_update_computes_in_bf16_and_keeps_float32_weights(tiny) -> None:
    trajs = _batch()
    models, dtypes = [], []
    for precision in ("no", "bf16"):
        # One comparable step; the trajectories carry no behaviour logprobs (placeholder 0s),
        # so no rollout correction (auto would weigh them: bf16 learner, fp32 rollouts).
        one_step = ["algo.ppo_mini_batches=1", "algo.clip_high=0.2", "algo.rollout_correction=none"]
        cfg = load_config(
            None, ["model.name=tiny", f"learner.mixed_precision={precision}", *one_step]
        )
        model = copy.deepcopy(tiny)
        seen = _linear_output_dtypes(model)
        batch = collate(trajs, 0)
        compute_advantages(batch, cfg.algo)
        update(model, torch.optim.SGD(model.parameters(), lr=0.5), batch, cfg)
        models.append(model)
        dtypes.append(set(seen))
    assert dtypes == [{torch.float32}, {torch.bfloat16}]
    params = zip(models[0].parameters(), models[1].parameters(), tiny.parameters(), strict=True)
    for p32, p16, p0 in (tuple(t.detach() for t in ps) for ps in params):
        assert p16.dtype == torch.float32  # master weights stay float32
        step32, step16 = p32 - p0, p16 - p0
        # The same update up to bf16 rounding of the activations.
        assert torch.allclose(step16, step32, atol=2e-2 * float(step32.abs().max()) + 1e-7)


def test_bf16_generator_samples_under_autocast_with_close_logprobs(tiny, tokenizer) -> None:
    prompts = [[1, 5, 9, 13, 17, 21]] * 2
    params = SamplingParams(max_new_tokens=8, temperature=0.0, stop=[])
    out = {}
    for precision in ("no", "bf16"):
        cfg = load_config(None, ["model.name=tiny", f"rollout.mixed_precision={precision}"])
        model = copy.deepcopy(tiny)
        seen = _linear_output_dtypes(model)
        generator = make_generator(cfg, model, tokenizer)
        out[precision] = generator.generate(prompts, params)[0]
        assert set(seen) == {torch.float32 if precision == "no" else torch.bfloat16}
    lp32, lp16 = out["no"].logprobs, out["bf16"].logprobs
    assert len(lp32) == 8
    # Greedy paths agree at the first token; logprobs agree up to bf16 rounding (tiny model).
    assert out["no"].token_ids[0] == out["bf16"].token_ids[0]
    assert abs(lp32[0] - lp16[0]) < 0.05


def test_bf16_sft_computes_in_bf16_and_follows_the_learner_setting(tiny, monkeypatch) -> None:
    """The warm start / `agentic-rl sft` stage honours learner.mixed_precision: bf16 matmuls,
    float32 weights, the same step as float32 up to activation rounding (SGD: see test_sft_dpo)."""
    from agentic_rl.train.sft import sft_precision, train_sft

    monkeypatch.setattr(sft, "adamw", lambda params, lr: torch.optim.SGD(params, lr=lr))
    models, dtypes = [], []
    for precision in ("no", "bf16"):
        model = copy.deepcopy(tiny)
        seen = _linear_output_dtypes(model)
        train_sft(model, _batch(), 0, lr=0.5, batch_size=4, mixed_precision=precision)
        models.append(model)
        dtypes.append(set(seen))
    assert dtypes == [{torch.float32}, {torch.bfloat16}]
    for p32, p16, p0 in zip(
        models[0].parameters(), models[1].parameters(), tiny.parameters(), strict=True
    ):
        assert p16.dtype == torch.float32
        step32, step16 = (p32 - p0).detach(), (p16 - p0).detach()
        assert torch.allclose(step16, step32, atol=2e-2 * float(step32.abs().max()) + 1e-7)
    assert sft_precision(load_config(None, ["learner.mixed_precision=bf16"])) == "bf16"
    assert sft_precision(load_config(None, [])) == "no"
