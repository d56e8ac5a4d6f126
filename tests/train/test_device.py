"""trainer.device: where the learner runs (policy, reference, critic, optimizer state, every
micro-batch's forward and backward) and the HF generator samples.

On this CPU machine: "auto" resolves to the CPU, "cpu" runs explicitly, CUDA is refused at load
with a message that says why, the device names resolve as they would on a GPU machine (with
torch's CUDA queries patched), and a training step moves every micro-batch to the models'
device. The real GPU run is the `gpu` test here and bench/gpu_check.sh."""

from __future__ import annotations

import math

import pytest
import torch

from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError
from agentic_rl.config.validate_engines import resolve_device
from agentic_rl.learner.batch import TrainBatch
from agentic_rl.train.loop import train_step
from agentic_rl.train.setup import build, make_optimizer
from agentic_rl.train.sft import train_sft
from agentic_rl.types import Trajectory

CPU = torch.device("cpu")


def cfg(*extra: str):
    return load_config("calculator_grpo", ["model.name=tiny", *extra], smoke=True)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_auto_is_the_cpu_here_and_cuda_is_refused_at_load():
    assert resolve_device(cfg()) == CPU  # the default, auto
    assert resolve_device(cfg("trainer.device=cpu")) == CPU
    for name in ("cuda", "cuda:0"):
        with pytest.raises(ConfigError, match=f"trainer.device={name} but torch sees no CUDA"):
            cfg(f"trainer.device={name}")
    with pytest.raises(ConfigError, match="'gpu' is not auto, cpu, cuda or cuda:N"):
        cfg("trainer.device=gpu")


def test_device_names_resolve_as_on_a_machine_with_two_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device(cfg()) == torch.device("cuda", 0)  # auto: the GPU
    assert resolve_device(cfg("trainer.device=cuda")) == torch.device("cuda", 0)
    assert resolve_device(cfg("trainer.device=cuda:1")) == torch.device("cuda", 1)
    assert resolve_device(cfg("trainer.device=cpu")) == CPU  # a GPU machine can still say cpu
    with pytest.raises(ConfigError, match="cuda:2 does not exist"):
        cfg("trainer.device=cuda:2")
    # vLLM takes the first visible GPU: the learner must share it, not sit on another one.
    assert resolve_device(cfg("rollout.backend=vllm")) == torch.device("cuda", 0)
    with pytest.raises(ConfigError, match="the engine runs on the first visible GPU"):
        cfg("rollout.backend=vllm", "trainer.device=cuda:1")
    # fsdp2: each torchrun process takes its own GPU, so the generation copy follows it.
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert resolve_device(cfg("learner.strategy=fsdp2")) == torch.device("cuda", 1)
    with pytest.raises(ConfigError, match="each process runs on its own GPU"):
        cfg("learner.strategy=fsdp2", "trainer.device=cuda:0")


def on(module: torch.nn.Module) -> set[torch.device]:
    return {p.device for p in module.parameters()} | {b.device for b in module.buffers()}


def test_a_step_on_an_explicit_device_moves_every_micro_batch_there(monkeypatch):
    """ppo with a KL reference: policy, reference, value head and AdamW state on
    trainer.device, and every forward (reference, values, update) on a micro-batch moved to it."""
    setup = build(cfg("trainer.device=cpu", "algo.name=ppo", "algo.kl_coef=0.01"))
    assert setup.device == CPU and setup.generator.model is setup.policy
    moved: list[torch.device] = []
    real_to = TrainBatch.to

    def spy(self, device):
        moved.append(torch.device(device))
        return real_to(self, device)

    monkeypatch.setattr(TrainBatch, "to", spy)
    optimizer = make_optimizer(setup)
    metrics = train_step(setup, optimizer, step=1)
    assert math.isfinite(metrics["loss"]) and metrics["skipped_update"] == 0.0
    # reference pass + value pass + one per update micro-batch, all to the models' device
    assert len(moved) >= 3 and set(moved) == {setup.device}
    for module in (setup.policy, setup.reference, setup.value_head):
        assert on(module) == {setup.device}
    state = [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
    assert state and {t.device for t in state if t.dim() > 0} == {setup.device}


def test_the_warm_start_moves_its_batches_to_the_models_device(tiny, monkeypatch):
    moved: list[torch.device] = []
    real_to = TrainBatch.to
    monkeypatch.setattr(
        TrainBatch, "to", lambda self, d: moved.append(torch.device(d)) or real_to(self, d)
    )
    demo = Trajectory(
        token_ids=[1, 2, 3, 4, 5], loss_mask=[0, 0, 1, 1, 1], logprobs=[0.0] * 5, prompt_length=2
    )
    train_sft(tiny, [demo, demo], pad_token_id=0, batch_size=2, chunk_size=8)
    assert moved == [CPU]


@pytest.mark.gpu
def test_one_step_of_the_default_recipe_learns_on_the_gpu():
    setup = build(cfg("trainer.device=cuda"))
    assert setup.device.type == "cuda" and on(setup.policy) == {setup.device}
    assert setup.generator.model is setup.policy  # the HF generator samples on the GPU too
    optimizer = make_optimizer(setup)
    metrics = train_step(setup, optimizer, step=1)
    assert all(math.isfinite(v) for v in metrics.values())
    state = [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
    assert {t.device.type for t in state if t.dim() > 0} <= {"cuda"}
