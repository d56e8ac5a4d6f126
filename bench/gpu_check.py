"""GPU check of the vLLM generator (run by bench/gpu_check.sh on a CUDA machine with vLLM).

One mode per process (a vLLM engine per process):

- `--mode full`: start the run the trainer would (`trainer.build`, rollout.backend=vllm) and
  1. sample completions with vLLM, rescore exactly the same token ids with the learner's HF
     model (`token_logprobs`, float32 on the GPU) and report the max / mean absolute
     difference of the per-token logprobs;
  2. change the learner's weights (a small random perturbation, as an update would), sync them
     with `sync_weights` (full state dict -> `load_weights`, prefix cache reset) and compare
     again: a stale engine would show a large difference here;
  3. run rollouts of the recipe (B tasks x G samples, multi-turn, real env) and report
     generated tokens/s and the fraction of prompt tokens served from the prefix cache.
- `--mode lora`: the same comparison for a LoRA policy whose adapter was perturbed and synced
  as an adapter-only `LoRARequest`.
- `--mode train --backend hf|vllm`: the single-GPU learner (trainer.device=cuda) on the default
  recipe (search_qa_grpo, bundled model): its warm start, then `--steps` RL steps of the
  trainer's own `train_step` with the HF generator sampling on the learner's GPU, or with vLLM
  colocated on it (vllm.sleep_level=1: the engine sleeps while the learner updates). Reports
  steps/s (after the first step), the step / rollout seconds, generated tokens/s, the
  learner/generator mismatch the update logs (mismatch_k3, mismatch_max_abs) and, measured here
  after training, the max / mean |learner - generator| logprob of a fresh rollout's sampled
  tokens (the learner at the sampling temperature), where every model lives, peak GPU memory.

Prints one JSON object per mode (prefixed RESULT) and appends it to --out.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import time
from pathlib import Path

import torch


def compare(setup, hf_model, prompts, params) -> dict:
    """vLLM behaviour logprobs vs the HF model's logprobs of the very same tokens."""
    from agentic_rl.model.load import token_logprobs

    completions = setup.generator.generate(prompts, params)
    diffs = []
    with torch.no_grad():
        for prompt, c in zip(prompts, completions, strict=True):
            if not c.token_ids:
                continue
            ids = torch.tensor([prompt + c.token_ids], device="cuda")
            lp, _, _ = token_logprobs(hf_model, ids, torch.ones_like(ids))
            diffs.append((lp[0, len(prompt) :].float().cpu() - torch.tensor(c.logprobs)).abs())
    flat = torch.cat(diffs)
    return {
        "tokens_compared": int(flat.numel()),
        "max_abs_diff": float(flat.max()),
        "mean_abs_diff": float(flat.mean()),
        "p99_abs_diff": float(flat.quantile(0.99)),
    }


def perturb(policy, lora: bool, seed: int = 0, scale: float = 1e-2) -> None:
    """A stand-in for an optimiser step: every trainable tensor moves a little."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if lora and "lora_" not in name:
                continue
            noise = torch.randn(p.shape, generator=gen) * scale
            p.add_(noise * (1.0 if lora else p.detach().abs().mean()))


class _NoLog:
    def log(self, *args, **kwargs) -> dict:
        return {}


def rescore_mismatch(setup, episodes) -> dict:
    """|learner - generator| logprob on every sampled token of `episodes`, the learner on the
    same tokens at the sampling temperature (what the generator reports, backends/base.py)."""
    from agentic_rl.model.load import token_logprobs

    try:
        from agentic_rl.learner.update import sampling_temperature

        temperature = sampling_temperature(setup.cfg)
    except ImportError:  # an older learner: logprobs at temperature 1
        temperature = 1.0
    kwargs = {"temperature": temperature} if temperature != 1.0 else {}
    diffs = []
    with torch.no_grad():
        for samples in episodes.samples:
            for s in samples:
                ids = torch.tensor([s.token_ids], device=setup.device)
                lp, _, _ = token_logprobs(setup.policy, ids, torch.ones_like(ids), **kwargs)
                mask = torch.tensor(s.loss_mask, dtype=torch.bool)
                behaviour = torch.tensor(s.logprobs)[mask]
                diffs.append((lp[0].float().cpu()[mask] - behaviour).abs())
    flat = torch.cat(diffs)
    return {
        "tokens_compared": int(flat.numel()),
        "max_abs_diff": float(flat.max()),
        "mean_abs_diff": float(flat.mean()),
    }


def train_check(args) -> dict:
    """The single-GPU learner on the default recipe (see the module docstring)."""
    from agentic_rl.backends.base import sync_weights
    from agentic_rl.config.load import load_config
    from agentic_rl.train.collect import rollout
    from agentic_rl.train.loop import train_step, warm_start
    from agentic_rl.train.setup import build, make_optimizer, set_learning_rate

    overrides = [f"model.name={args.model}", f"trainer.device={args.device}"]
    overrides += [f"trainer.steps={args.steps}"]
    overrides += [f"rollout.backend={args.backend}", f"trainer.seed={args.seed}"]
    if args.backend == "vllm":
        overrides += [
            f"vllm.gpu_memory_utilization={args.gpu_memory}",
            "vllm.sleep_level=1",
            f"vllm.dtype={args.dtype}",
        ]
    cfg = load_config(args.recipe, overrides)
    t0 = time.perf_counter()
    setup = build(cfg)
    result: dict = {
        "mode": "train",
        "backend": args.backend,
        "recipe": cfg.recipe,
        "model": args.model,
        "build_s": round(time.perf_counter() - t0, 1),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "torch_version": torch.__version__,
        "learner_device": str(setup.device),
        "devices": {
            name: sorted({str(p.device) for p in module.parameters()})
            for name, module in (
                ("policy", setup.policy),
                ("reference", setup.reference),
                ("critic", setup.value_head),
            )
            if module is not None
        },
    }
    if args.backend == "hf":
        result["generator_shares_the_policy"] = getattr(setup.generator, "model", None) is (
            setup.policy
        )
    t0 = time.perf_counter()
    if cfg.warm_start.num_tasks > 0:
        warm = warm_start(setup, _NoLog())
        sync_weights(setup.generator, setup.policy)
        if setup.reference is not None:
            setup.reference.load_state_dict(setup.policy.state_dict())
        result["warm_start"] = {
            "seconds": round(time.perf_counter() - t0, 1),
            "first_loss": round(warm["first_loss"], 4),
            "last_loss": round(warm["last_loss"], 4),
        }
    optimizer = make_optimizer(setup)
    steps = []
    for step in range(1, args.steps + 1):
        set_learning_rate(optimizer, cfg, step)
        t0 = time.perf_counter()
        metrics = train_step(setup, optimizer, step)
        metrics["wall_s"] = time.perf_counter() - t0
        steps.append(metrics)
        print(
            f"step {step}: {metrics['wall_s']:.2f} s, reward {metrics.get('reward', 0):.3f}, "
            f"mismatch_k3 {metrics.get('mismatch_k3', float('nan')):.2e}",
            flush=True,
        )
    timed = steps[1:] or steps  # the first step pays for kernels, allocator and graph warm-up

    def mean(key: str) -> float | None:
        values = [m[key] for m in timed if key in m and math.isfinite(m[key])]
        return round(statistics.fmean(values), 6) if values else None

    result["steps"] = len(steps)
    result["steps_per_s"] = round(len(timed) / sum(m["wall_s"] for m in timed), 4)
    for key in ("step_seconds", "rollout_seconds", "tokens_per_s", "reward", "loss", "grad_norm"):
        result[f"mean_{key}"] = mean(key)
    result["learner_mismatch_k3"] = mean("mismatch_k3")  # logged by the update, if measured
    result["learner_mismatch_max_abs"] = mean("mismatch_max_abs")
    result["skipped_updates"] = sum(m.get("skipped_update", 0.0) for m in steps)
    tasks = setup.train_tasks[: cfg.rollout.tasks_per_step]
    episodes = rollout(setup, tasks, cfg.rollout.group_size, seed=10_000, step=args.steps + 1)
    result["rescored_mismatch"] = rescore_mismatch(setup, episodes)
    if setup.device.type == "cuda":
        result["peak_gpu_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["full", "lora", "train"], default="full")
    parser.add_argument("--backend", choices=["hf", "vllm"], default="hf", help="--mode train")
    parser.add_argument("--recipe", default="search_qa_grpo", help="--mode train")
    parser.add_argument("--steps", type=int, default=6, help="--mode train: RL steps")
    parser.add_argument(
        "--device",
        default="cuda",
        help="--mode train: trainer.device (a CPU "
        "dry run of the script: --device cpu --model tiny --steps 2)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="bfloat16", help="vLLM dtype")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--tasks", type=int, default=16, help="B for the tokens/s rollout")
    parser.add_argument("--group", type=int, default=8, help="G for the tokens/s rollout")
    parser.add_argument("--gpu-memory", type=float, default=0.4)
    parser.add_argument("--out", default="bench/results/gpu_check.json")
    args = parser.parse_args()
    if args.mode == "train":
        write(train_check(args), args.out)
        return

    from agentic_rl.backends.base import sync_weights
    from agentic_rl.config.load import load_config
    from agentic_rl.envs.from_config import make_envs
    from agentic_rl.model.lora import unwrap
    from agentic_rl.model.tokens import encode_prompt
    from agentic_rl.train.collect import rollout
    from agentic_rl.train.setup import build
    from agentic_rl.types import SamplingParams

    overrides = [
        f"model.name={args.model}",
        "rollout.backend=vllm",
        f"vllm.dtype={args.dtype}",
        f"vllm.gpu_memory_utilization={args.gpu_memory}",
        "warm_start.num_tasks=0",
        f"rollout.tasks_per_step={args.tasks}",
        f"rollout.group_size={args.group}",
        "env.num_train_tasks=256",
    ]
    if args.mode == "lora":
        overrides += ["model.lora_rank=16", "model.lora_alpha=32"]
    cfg = load_config("calculator_grpo", overrides)
    t0 = time.perf_counter()
    setup = build(cfg)
    result: dict = {
        "mode": args.mode,
        "model": args.model,
        "vllm_dtype": args.dtype,
        "engine_start_s": round(time.perf_counter() - t0, 1),
        "gpu": torch.cuda.get_device_name(0),
    }
    import vllm

    result["vllm_version"] = vllm.__version__
    result["torch_version"] = torch.__version__

    tasks = setup.train_tasks[: args.prompts]
    envs = make_envs(cfg, len(tasks))
    prompts = [
        encode_prompt(setup.tokenizer, env.reset(task, seed=i).messages)
        for i, (env, task) in enumerate(zip(envs, tasks, strict=True))
    ]
    params = [
        SamplingParams(max_new_tokens=64, temperature=1.0, stop=list(setup.fmt.stop), seed=i)
        for i in range(len(prompts))
    ]

    def hf_copy():
        return copy.deepcopy(unwrap(setup.policy)).to("cuda", torch.float32).eval()

    if args.mode == "full":
        result["initial"] = compare(setup, hf_copy(), prompts, params)
    perturb(setup.policy, lora=args.mode == "lora")
    sync_weights(setup.generator, setup.policy)
    result["after_sync"] = compare(setup, hf_copy(), prompts, params)

    if args.mode == "full":
        rollout(setup, setup.train_tasks[: args.tasks], args.group, seed=0, step=1)  # warm-up
        gen = setup.generator
        gen.prompt_tokens = gen.reused_tokens = 0
        t0 = time.perf_counter()
        episodes = rollout(setup, setup.train_tasks[: args.tasks], args.group, seed=1, step=2)
        seconds = time.perf_counter() - t0
        tokens = sum(s.num_generated for samples in episodes.samples for s in samples)
        result["rollout"] = {
            "episodes": len(episodes),
            "generated_tokens": tokens,
            "seconds": round(seconds, 2),
            "tokens_per_s": round(tokens / seconds, 1),
            "prefix_cache_hit_fraction": round(gen.reused_tokens / max(gen.prompt_tokens, 1), 3),
        }
    write(result, args.out)


def write(result: dict, path: str) -> None:
    print("RESULT " + json.dumps(result), flush=True)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a") as f:
        f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
