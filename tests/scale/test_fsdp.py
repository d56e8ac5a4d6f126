"""learner.strategy=fsdp2 on CPU: two processes on gloo against the single-process numbers.

The fast tests share one launch of tests/scale/fsdp_worker.py in two processes (as torchrun starts
them); the slow one runs `torchrun ... agentic-rl train` end to end, resumes it and exports it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from agentic_rl.checkpoint.export import export_checkpoint
from agentic_rl.checkpoint.io import load_checkpoint, save_checkpoint
from agentic_rl.checkpoint.layout import CheckpointError, check_layout
from agentic_rl.checkpoint.sharded import load_sharded_checkpoint
from agentic_rl.cli import main as cli_main
from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError
from agentic_rl.config.rollout import ModelConfig
from agentic_rl.model import load as models
from agentic_rl.model.load import load_policy, tiny_model, token_logprobs
from agentic_rl.scale.fsdp import init_process_group
from agentic_rl.train.loop import train

WORKER = Path(__file__).parent / "fsdp_worker.py"
TOL = 1e-5  # float32, different summation order across two processes
# AdamW divides by sqrt(v) + 1e-8: a gradient entry near 1e-8 turns a 1e-8 difference into a
# visible one in the weights (lr 1e-3): gradients equal to 3e-8 have given weights 1.6e-5 and
# 3.0e-5 apart depending on the float rounding of the vocabulary softmax. 5e-5 is 5% of one
# step; a wrong gradient moves weights by ~lr.
WEIGHT_TOL = 5e-5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_env(**extra: str) -> dict[str, str]:
    # CUDA hidden: the CPU path (gloo) is what these tests check, on any machine
    return {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", **extra}


def launch_two(out: Path, timeout: float = 300) -> None:
    """Start the worker as ranks 0 and 1 of a gloo group, as torchrun would."""
    env = cpu_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="2")
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(out)],
            env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]
    try:
        logs = [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for rank, (p, log) in enumerate(zip(procs, logs, strict=True)):
        assert p.returncode == 0, f"rank {rank} failed:\n{log[-4000:]}"


@pytest.fixture(scope="module")
def worker(tmp_path_factory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("fsdp")
    launch_two(out)
    return json.loads((out / "results.json").read_text()), out


@pytest.mark.parametrize("case", ["grpo_kl", "ppo_defer", "ppo_separate", "noclip"])
def test_sharded_update_matches_single_process(worker, case):
    """Same batch: the two-process FSDP2 update gives the single-process loss, metrics,
    reference logprobs, values, gradients and new weights."""
    result = worker[0][case]
    single, sharded = result["metrics"]
    assert single.keys() == sharded.keys()
    for key in single:
        assert sharded[key] == pytest.approx(single[key], rel=1e-5, abs=1e-6), key
    for key in ("ref_logprobs", "old_values", "advantages"):
        assert result[key] <= 1e-6, key
    assert result["grads"] <= TOL
    assert result["weights"] <= WEIGHT_TOL
    assert result["moved"] > 100 * TOL  # the step really changed the weights
    assert single["grad_norm"] > 0.1


def test_every_row_is_trained_including_a_padding_micro_batch(worker):
    """5 rows, 2 processes, micro-batches of 2: rank 0 runs 3 rows in 2 micro-batches, rank 1
    2 rows and a weight-0 padding micro-batch; all 5 count, none twice (loss matched above)."""
    assert worker[0]["grpo_kl"]["metrics"][1]["trained_sequences"] == 5.0


def test_generator_copy_follows_the_shards_and_processes_sample_differently(worker):
    result = worker[0]["grpo_kl"]
    assert result["stale"] > 100 * TOL  # before the sync the copy holds the old weights
    assert result["synced"] <= WEIGHT_TOL  # after it, the single-process updated weights
    rank0, rank1 = result["samples"]
    assert rank0 != rank1  # same seed, different process: different draws


def test_rollout_groups_are_split_between_processes_and_gathered_in_order(worker):
    result = worker[0]["grpo_kl"]
    # groups g0 (a, b) and g1 (c) on rank 0, g2 (d, e) on rank 1; a group is never split
    assert result["played"] == [["a@0"], ["b@0"], ["c@0"], ["d@1"], ["e@1"]]
    assert result["played_everywhere"]


def test_sharded_checkpoint_saves_and_resumes(worker):
    result = worker[0]["ppo_defer"]
    path = Path(result["checkpoint"])
    assert {p.name for p in path.iterdir()} >= {
        "sharded",
        "distributed.json",
        "trainer_state.json",
        "rng_rank0.pt",
        "rng_rank1.pt",
        "COMPLETE",
    }
    assert json.loads((path / "distributed.json").read_text())["world_size"] == 2
    assert result["trainer_state"] == {"note": "x", "step": 1}
    assert result["loaded"] == 0.0 and result["moments"] == 0.0
    assert result["optimizer_entries"] == 22  # 20 policy tensors + the value head's 2
    assert result["resumed_step"] == 0.0  # the next step from the loaded state is identical


def test_sharded_separate_critic_saves_and_resumes(worker):
    """algo.critic=separate under fsdp2: the critic (its own backbone) is sharded per layer,
    checkpointed with the policy and resumed exactly."""
    result = worker[0]["ppo_separate"]
    assert result["metrics"][0]["critic_grad_norm"] > 0
    assert result["loaded"] == 0.0 and result["moments"] == 0.0
    assert result["optimizer_entries"] == 20 + 20 + 2  # policy, critic backbone, value head
    assert result["resumed_step"] == 0.0


def test_resuming_with_another_world_size_is_a_clear_error(worker, tmp_path):
    path = Path(worker[0]["ppo_defer"]["checkpoint"])
    three = SimpleNamespace(world_size=3, rank=0)
    with pytest.raises(CheckpointError, match=r"2 processes .* this run has 3 processes"):
        load_sharded_checkpoint(three, path, torch.nn.Linear(1, 1))
    with pytest.raises(CheckpointError, match="torchrun --nproc_per_node=2"):
        load_checkpoint(path, torch.nn.Linear(1, 1))  # a single-process run
    single = save_checkpoint(tmp_path, 3, torch.nn.Linear(2, 2), None)
    with pytest.raises(CheckpointError, match="single process .* in one process without"):
        check_layout(single, 2, sharded=True)


def _logprobs(model: torch.nn.Module) -> torch.Tensor:
    ids = torch.randint(10, 1000, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return token_logprobs(model, ids, torch.ones_like(ids), 4)[0]


def test_export_of_a_sharded_checkpoint_loads_with_the_trained_weights(worker, tmp_path):
    results, out = worker
    target = export_checkpoint(Path(results["ppo_defer"]["checkpoint"]), tmp_path / "hf")
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in target.iterdir()
    }
    exported, _ = load_policy(ModelConfig(name=str(target)))
    weights = torch.load(out / "run" / "full_weights.pt", weights_only=True)  # ppo_defer's run
    trained = tiny_model(exported.config.vocab_size)
    trained.load_state_dict(weights)
    for name, tensor in exported.state_dict().items():
        assert torch.equal(tensor, weights[name]), name
    assert torch.equal(_logprobs(exported), _logprobs(trained))


def test_export_of_a_single_process_run_via_the_cli(tmp_path, tokenizer, capsys):
    model = tiny_model(len(tokenizer), seed=5)
    run = tmp_path / "run"
    save_checkpoint(run, 7, model, None)
    (run / "config.json").write_text(json.dumps(load_config(None, ["model.name=tiny"]).to_dict()))
    assert cli_main(["export", str(run), "--out", str(tmp_path / "hf")]) == 0
    assert "model.name=" in capsys.readouterr().out
    exported, _ = load_policy(ModelConfig(name=str(tmp_path / "hf")))
    assert torch.equal(_logprobs(exported), _logprobs(model))
    with pytest.raises(ConfigError, match="not empty"):
        export_checkpoint(run, tmp_path / "hf")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["learner.strategy=ddp"], "learner.strategy: 'ddp' is not one of single, fsdp2"),
        (["learner.defer_grad_sync=true"], "applies to learner.strategy=fsdp2 only"),
        (["learner.strategy=fsdp2", "model.lora_rank=4"], "model.lora_rank=4"),
        (["learner.strategy=fsdp2", "rollout.max_staleness=1"], "rollout.max_staleness=1"),
    ],
)
def test_bad_learner_settings_fail_at_load(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU rule")
def test_mixed_precision_needs_a_gpu():
    with pytest.raises(ConfigError, match="needs a GPU"):
        load_config(None, ["learner.strategy=fsdp2", "learner.mixed_precision=bf16"])


def test_fsdp2_outside_torchrun_says_how_to_launch(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(ConfigError, match="torchrun --nproc_per_node"):
        init_process_group()


def _torchrun(nproc: int, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={nproc}",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
        "-m",
        "agentic_rl.cli",
        *args,
    ]
    return subprocess.run(
        command, env=cpu_env(), capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.mark.slow
def test_torchrun_train_resume_mismatch_and_export(tmp_path):
    """The documented command end to end: two processes train, resume, refuse one process,
    and the result exports to a model directory that trains again."""
    base = [
        "train",
        "--smoke",
        "model.name=tiny",
        "algo.entropy_coef=0.01",
        "trainer.progress=false",
        "trainer.eval_before=false",
        f"trainer.out_dir={tmp_path}",
        "trainer.run_name=run",
        "learner.strategy=fsdp2",
    ]
    first = _torchrun(2, *base)
    assert first.returncode == 0, first.stderr[-4000:]
    run = tmp_path / "run"
    rows = _metrics(run)
    assert rows == _metrics(run / "rank_1")  # every process computed the same global metrics
    assert [r["step"] for r in rows if "train/loss" in r] == [1, 2]

    again = _torchrun(2, *base, "trainer.steps=3")
    assert again.returncode == 0, again.stderr[-4000:]
    assert "resuming from" in again.stdout and "step 2" in again.stdout
    assert (run / "checkpoints/step_000003/distributed.json").is_file()

    alone = _torchrun(1, *base, "trainer.steps=4")
    assert alone.returncode != 0
    assert "written by 2 processes" in alone.stderr and "this run has 1 process" in alone.stderr

    assert cli_main(["export", str(run), "--out", str(tmp_path / "hf")]) == 0
    model, _ = load_policy(ModelConfig(name=str(tmp_path / "hf")))
    assert model.config.num_hidden_layers == 2


def _metrics(run: Path) -> list[dict]:
    # costs of each process, not global results: timings, and its generator's KV reuse (each
    # rank plays its share of the episodes)
    drop = ("time", "seconds", "tokens_per_s", "reused_prompt_tokens")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not any(d in k for d in drop)} for r in rows]


def _assert_metrics_close(actual: list[dict], expected: list[dict]) -> None:
    """Same rows and keys; numbers within 1e-4 relative (1e-6 absolute). Rounding differences
    of ~1e-7 between the two paths stay far inside this; a wrong share, gather, reduction or
    normaliser changes a loss, KL or reward by orders of magnitude more."""
    assert [sorted(r) for r in actual] == [sorted(r) for r in expected]
    for got, want in zip(actual, expected, strict=True):
        for key, value in want.items():
            if isinstance(value, float):
                assert got[key] == pytest.approx(value, rel=1e-4, abs=1e-6), (want["step"], key)
            else:
                assert got[key] == value, (want.get("step"), key)


@pytest.mark.slow
def test_one_process_fsdp2_run_reproduces_the_single_process_run(tmp_path, monkeypatch):
    """The whole sharded path (rollout share and gather, sharded reference and value head,
    padded micro-batches, weight sync, sharded checkpoints) with one process gives the numbers of
    a plain run: PPO with a KL term after a warm start.

    Two code paths (FSDP2's flattened parameters and reductions against the plain module), so
    the metrics agree to a tolerance, not bit for bit: summation order differs between CPUs
    and kernels. Same-path reproducibility (resume) is tested bit-exactly elsewhere. Both runs
    use one thread (torchrun's worker runs with OMP_NUM_THREADS=1): on some CPUs a matrix
    product's rounding depends on the thread count, and after an Adam step a gradient that is
    rounding noise moves its weight by a full step, so two thread counts drift apart by more than
    the tolerance by step 2."""
    common = [
        "model.name=tiny",
        "algo.name=ppo",
        "algo.kl_coef=0.05",
        "trainer.progress=false",
        "trainer.eval_before=false",
        "trainer.run_name=run",
        "model.share_prefix=false",  # fsdp2 never shares the prompt: compare like with like
    ]
    single = load_config(None, [*common, f"trainer.out_dir={tmp_path / 'single'}"], smoke=True)
    # nor does it keep the vocabulary softmax for the backward pass (models.KEPT_PROBS_BYTES)
    monkeypatch.setattr(models, "KEPT_PROBS_BYTES", 0)
    torch.set_num_threads(1)  # as the torchrun worker (cpu_env); conftest restores it
    train(single)
    sharded = _torchrun(
        1,
        "train",
        "--smoke",
        *common,
        f"trainer.out_dir={tmp_path / 'fsdp'}",
        "learner.strategy=fsdp2",
    )
    assert sharded.returncode == 0, sharded.stderr[-4000:]
    expected = _metrics(tmp_path / "single/run")
    assert [r["step"] for r in expected if "train/loss" in r] == [1, 2]
    _assert_metrics_close(_metrics(tmp_path / "fsdp/run"), expected)
