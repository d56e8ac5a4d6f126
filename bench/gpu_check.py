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

Prints one JSON object per mode (prefixed RESULT) and appends it to --out.
"""

from __future__ import annotations

import argparse
import copy
import json
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["full", "lora"], default="full")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="bfloat16", help="vLLM dtype")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--tasks", type=int, default=16, help="B for the tokens/s rollout")
    parser.add_argument("--group", type=int, default=8, help="G for the tokens/s rollout")
    parser.add_argument("--gpu-memory", type=float, default=0.4)
    parser.add_argument("--out", default="bench/results/gpu_check.json")
    args = parser.parse_args()

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
    print("RESULT " + json.dumps(result), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a") as f:
        f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
