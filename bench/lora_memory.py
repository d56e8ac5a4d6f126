"""Peak memory of one RL training step: LoRA vs full fine-tuning, same model, same batch.

Each variant runs in a fresh subprocess through the trainer's own code path (`trainer.build`,
`prepare_batch` with a KL reference, `learner.update`), so the numbers include what each mode
really holds: full tuning keeps a frozen reference copy, a gradient and two AdamW moments for
every weight; LoRA keeps none of the three for the frozen base (its reference is the same
model with the adapter off, or after a warm start with a frozen copy of the adapter swapped in:
variant `lora_warm_start`, built as a run with a warm start would be; the warm start itself is
not run, as it changes values, not sizes).

Measured per variant: resident memory after imports (baseline), after building the run, and
the process's peak (VmHWM) after the step; on a CUDA machine (`--device cuda`) also
`torch.cuda.max_memory_allocated`. Exact tensor sizes (weights, reference copy, gradients,
optimizer state) are counted from the tensors themselves.

    .venv/bin/python bench/lora_memory.py            # bundled SmolLM2-135M, rank 16
    .venv/bin/python bench/lora_memory.py --rank 8 --seqs 8 --length 256

Writes bench/results/lora_memory.json. Memory, not time: the result does not depend on how
busy the machine is.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

MB = 2**20


def rss_mb(field: str = "VmRSS") -> float:
    """Resident (VmRSS) or peak resident (VmHWM) memory of this process, from /proc."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in /proc/self/status (Linux only)")


def reference_tensors(reference: Any) -> list[Any]:
    """What the KL reference holds beside the policy: none (LoRA: the adapter-off policy), a
    frozen model's weights, or (LoRA after a warm start) the adapter copy in its buffers."""
    if reference is None:
        return []
    return [*reference.parameters(), *reference.buffers()]


def tensor_mb(tensors) -> float:
    seen = {id(t): t for t in tensors if t is not None}
    return sum(t.numel() * t.element_size() for t in seen.values()) / MB


VARIANTS = ("full", "lora", "lora_warm_start")


def run_variant(args: argparse.Namespace) -> dict:
    """One training step in this process; returns the measurements."""
    import torch

    baseline = rss_mb()
    from agentic_rl.config.load import load_config
    from agentic_rl.learner.batch import Episodes
    from agentic_rl.learner.update import update
    from agentic_rl.model.lora import parameter_counts
    from agentic_rl.train.batch import prepare_batch
    from agentic_rl.train.setup import build, make_optimizer
    from agentic_rl.types import Task, Trajectory

    # with a warm start configured, build() keeps the reference a warm-started run needs
    warm_start_tasks = 8 if args.variant == "lora_warm_start" else 0
    overrides = [
        f"model.name={args.model}",
        f"warm_start.num_tasks={warm_start_tasks}",
        f"algo.kl_coef={args.kl_coef}",
        f"optim.micro_batch_size={args.micro_batch}",
        "env.num_train_tasks=16",
        "env.num_eval_tasks=4",
        f"rollout.group_size={args.seqs}",
    ]
    if args.variant != "full":
        overrides.append(f"model.lora_rank={args.rank}")
    cfg = load_config("calculator_grpo", overrides)
    setup = build(cfg)
    device = torch.device(args.device)
    setup.policy.to(device)
    if setup.reference is not None:
        setup.reference.to(device)
    optimizer = make_optimizer(setup)
    after_build = rss_mb()

    gen = torch.Generator().manual_seed(0)
    vocab = setup.policy.config.vocab_size
    half = args.length // 2
    samples = []
    for i in range(args.seqs):
        ids = torch.randint(0, vocab, (args.length,), generator=gen).tolist()
        mask = [0] * half + [1] * (args.length - half)
        reward = float(i % 2)  # one GRPO group with mixed rewards: non-zero advantages
        samples.append(
            [Trajectory(ids, mask, [0.0] * args.length, half, reward=reward, group_id="g")]
        )
    episodes = Episodes(samples, [Task("t", "q")] * args.seqs)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    batch = prepare_batch(setup, episodes)
    for name, value in vars(batch).items():
        if isinstance(value, torch.Tensor):
            setattr(batch, name, value.to(device))
    metrics = update(setup.policy, optimizer, batch, cfg)
    peak = rss_mb("VmHWM")
    params = list(setup.policy.parameters())
    result = {
        "variant": args.variant,
        "model": args.model,
        "lora_rank": args.rank if args.variant != "full" else 0,
        "sequences": args.seqs,
        "tokens_per_sequence": args.length,
        **{f"{k}_params": v for k, v in parameter_counts(setup.policy).items()},
        "weights_mb": round(tensor_mb(params), 1),
        "reference_copy_mb": round(  # a frozen model's weights, or a frozen adapter copy's
            tensor_mb(reference_tensors(setup.reference)), 1
        ),
        "gradients_mb": round(tensor_mb(p.grad for p in params), 1),
        "optimizer_state_mb": round(
            tensor_mb(
                v
                for state in optimizer.state.values()
                for v in state.values()
                if isinstance(v, torch.Tensor) and v.dim() > 0
            ),
            1,
        ),
        "rss_baseline_mb": round(baseline, 1),
        "rss_after_build_mb": round(after_build, 1),
        "rss_peak_mb": round(peak, 1),
        "peak_over_baseline_mb": round(peak - baseline, 1),
        "loss": metrics["loss"],
        "kl": metrics["kl"],
    }
    if device.type == "cuda":
        result["cuda_max_allocated_mb"] = round(torch.cuda.max_memory_allocated() / MB, 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--seqs", type=int, default=8, help="sequences in the batch")
    parser.add_argument("--length", type=int, default=256, help="tokens per sequence")
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--kl-coef", type=float, default=0.05)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default="bench/results/lora_memory.json")
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:  # child process: measure one variant, print JSON
        print("RESULT " + json.dumps(run_variant(args)), flush=True)
        return
    rows = []
    for variant in VARIANTS:
        cmd = [sys.executable, __file__, "--variant", variant]
        for flag in ("model", "rank", "seqs", "length", "micro_batch", "kl_coef", "device"):
            cmd += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            sys.exit(f"{variant} run failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
        rows.append(json.loads(lines[-1][len("RESULT ") :]))
    keys = [
        "trainable_params",
        "weights_mb",
        "reference_copy_mb",
        "gradients_mb",
        "optimizer_state_mb",
        "rss_after_build_mb",
        "rss_peak_mb",
        "peak_over_baseline_mb",
    ] + (["cuda_max_allocated_mb"] if args.device.startswith("cuda") else [])
    print(f"| measure | full fine-tuning | LoRA r={args.rank} | LoRA after a warm start |")
    print("|---|---:|---:|---:|")
    for key in keys:
        print(f"| {key} | " + " | ".join(str(row[key]) for row in rows) + " |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "results": rows}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
