"""Where a decoding step's time goes, per operation, in our generator and in TRL's generation path.

The shape of `bench/vs_trl.py`'s rollout: the bundled SmolLM2-135M-Instruct, 2 search_qa
prompts (84-86 tokens, chat template) x 8 samples = 16 rows, temperature 1, top-p 1. End of
sequence is switched off on both sides so all 16 rows stay in the batch for every step (ours:
an EOS id that never occurs; transformers: `min_new_tokens`); ours keeps no KV for a next turn
(`prefix_cache=False`: single-turn, and its copy-out at the end is not a decoding step). Variants:

- ours: `HFGenerator.generate` (the trainer's generator) in bf16 (its bfloat16 copy of the
  weights) with and without the oneDNN-prepacked linears (`packed_weights`) and with the matmul
  attention or PyTorch's SDPA on that copy (forced: `choose_fast_paths=False`), as the trainer
  runs it (`ours-bf16-auto`: the generator's one-time measurement chooses; its choice and
  timings are in the variant's `setup.fast_paths`), and in float32;
- TRL's path: `model.generate` of transformers (DynamicCache, left-padded batch of 16), as
  GRPOTrainer calls it without vLLM, in bf16 (a fresh `torch.autocast` context around every
  forward, as accelerate wraps the model's forward for `bf16=True`) with eager or SDPA attention,
  and in float32 (SDPA).

Each variant: one warm-up generate, then a timed generate of `--steps` decoding steps (ms per
step = the median time between the starts of consecutive decoding forwards: forward + sampling
+ cache bookkeeping), then the same generate under `torch.profiler` (CPU), whose
`key_averages()` by operator gives each op's self CPU time per step and share of the step
(the profiler's own overhead inflates the profiled time; the shares are what it is for). The
context is ~85 + a few tokens (the first decoding steps of the bench's 64).

    .venv/bin/python bench/profile_rollout.py                 # ~2-4 min at 2 threads
    .venv/bin/python bench/profile_rollout.py --steps 2 --warmup-tokens 2 --only ours-bf16  # smoke

Writes bench/results/profile_rollout.json and prints a table per variant.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from vs_trl import SEED, cpu_info, prompt_messages, thread_env  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "profile_rollout.json"
ROWS_PER_PROMPT = 8
PROMPTS = 2

VARIANTS = (
    "ours-bf16-auto",  # what the trainer runs: the fast paths chosen by measurement
    "ours-bf16",  # packed + matmul attention: the defaults, forced
    "ours-bf16-unpacked",
    "ours-bf16-sdpa",
    "ours-bf16-unpacked-sdpa",
    "ours-fp32",
    "trl-bf16-eager",
    "trl-bf16-sdpa",
    "trl-fp32-sdpa",
)


class StepClock:
    """Records the start time of every forward call; decoding steps are the calls after the
    prefill, and a step's time is the gap between consecutive starts."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.on_call: Callable[[int], None] | None = None  # called with the call's index

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self.on_call is not None:
                self.on_call(len(self.starts))
            self.starts.append(time.perf_counter())
            return fn(*args, **kwargs)

        return timed

    def step_ms(self) -> list[float]:
        # starts[0] is the prefill; starts[1] - starts[0] holds the prefill itself
        return [1000 * (b - a) for a, b in zip(self.starts[1:], self.starts[2:], strict=False)]


def top_ops(prof: Any, steps: int, top: int) -> tuple[float, list[dict[str, Any]]]:
    """Self CPU time per step by operator: (total ms per step, the top ops with their share)."""
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total_us = sum(e.self_cpu_time_total for e in events)
    events.sort(key=lambda e: e.self_cpu_time_total, reverse=True)
    ops = [
        {
            "op": e.key,
            "self_ms_per_step": e.self_cpu_time_total / 1000 / steps,
            "share": e.self_cpu_time_total / total_us,
            "calls_per_step": e.count / steps,
        }
        for e in events[:top]
    ]
    return total_us / 1000 / steps, ops


def ours_variant(name: str, model: Any, tokenizer: Any, prompts: list[list[int]]) -> Any:
    """A generate(max_new_tokens) closure over a fresh HFGenerator set up as `name` says, and
    the clock that times its forwards."""
    from agentic_rl.backends.hf import HFGenerator
    from agentic_rl.model.attention import NAME
    from agentic_rl.types import SamplingParams

    bf16 = "bf16" in name
    generator = HFGenerator(
        model,
        tokenizer,
        max_batch_size=len(prompts),
        eos_token_ids=[-1],  # never sampled: every row decodes every step
        # No KV kept for a next turn: copying it out when the rows finish (~1000 small index
        # ops here, once per rollout) would land in the profiled window of a few steps.
        prefix_cache=False,
        mixed_precision="bf16" if bf16 else "no",
        packed_weights="unpacked" not in name,
        choose_fast_paths="auto" in name,
    )
    compute = generator._compute_model()  # builds (packs, chooses) the bf16 copy now
    if bf16 and "auto" not in name:
        # the copy has its own config: switching its attention leaves the fp32 model alone
        compute.config._attn_implementation = "sdpa" if "sdpa" in name else NAME
    clock = StepClock()
    generator._forward = clock.wrap(generator._forward)  # type: ignore[method-assign]

    def run(new_tokens: int) -> None:
        params = SamplingParams(
            max_new_tokens=new_tokens, temperature=1.0, top_p=1.0, stop=[], seed=SEED
        )
        generator.generate(prompts, params)

    info: dict[str, Any] = {
        "packed_linears": len(generator._packed),
        "attn_implementation": compute.config._attn_implementation,
    }
    if "auto" in name:  # the forced variants' record would name the defaults, not what ran
        info["fast_paths"] = generator.fast_paths
    return run, clock, info


def trl_variant(name: str, model_dir: str, tokenizer: Any, messages: list[Any]) -> Any:
    """transformers `model.generate` as GRPOTrainer runs it on CPU without vLLM."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    attn = "eager" if "eager" in name else "sdpa"
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation=attn
    ).eval()
    processing = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    texts = processing.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    batch = processing(
        [t for t in texts for _ in range(ROWS_PER_PROMPT)], return_tensors="pt", padding=True
    )
    clock = StepClock()
    forward = model.forward
    if "bf16" in name:  # accelerate's mixed precision: autocast around every forward

        def autocast_forward(*args: Any, **kwargs: Any) -> Any:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return forward(*args, **kwargs)

        model.forward = clock.wrap(autocast_forward)
    else:
        model.forward = clock.wrap(forward)

    def run(new_tokens: int) -> None:
        config = GenerationConfig(
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=True,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            pad_token_id=processing.pad_token_id,
            eos_token_id=processing.eos_token_id,
            disable_compile=True,
        )
        with torch.no_grad():
            model.generate(**batch, generation_config=config)

    info = {
        "attn_implementation": model.config._attn_implementation,
        "prompt_width": int(batch["input_ids"].shape[1]),
    }
    return run, clock, info


def profile_variant(
    name: str, run: Callable[[int], None], clock: StepClock, args: argparse.Namespace
) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    run(args.warmup_tokens)
    clock.starts.clear()
    t0 = time.perf_counter()
    run(args.steps + 1)  # the first sampled token comes from the prefill's logits
    wall = time.perf_counter() - t0
    step_ms = clock.step_ms()
    # Profile the decoding steps only: the profiler starts at the first decoding forward
    # (call 1; call 0 is the prefill) and stops after the last.
    clock.starts.clear()
    prof = profile(activities=[ProfilerActivity.CPU])
    clock.on_call = lambda i: prof.start() if i == 1 else None
    try:
        run(args.steps + 1)  # the prefill + `steps` decoding forwards
    finally:
        clock.on_call = None
        prof.stop()
    profiled_ms = clock.step_ms()
    total_ms, ops = top_ops(prof, args.steps, args.top)
    return {
        "variant": name,
        "step_ms": {
            "median": statistics.median(step_ms),
            "min": min(step_ms),
            "max": max(step_ms),
            "all": step_ms,
        },
        "generate_wall_s": wall,
        "profiled_step_ms_median": statistics.median(profiled_ms) if profiled_ms else None,
        "profiled_self_ms_per_step": total_ms,
        "top_ops": ops,
        "torch_threads": torch.get_num_threads(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=6, help="decoding steps timed / profiled")
    parser.add_argument("--warmup-tokens", type=int, default=4, help="tokens of the warm-up run")
    parser.add_argument("--top", type=int, default=12, help="ops listed per variant")
    parser.add_argument(
        "--only", default="", help=f"comma-separated subset of {', '.join(VARIANTS)}"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    chosen = [v for v in args.only.split(",") if v] or list(VARIANTS)
    unknown = [v for v in chosen if v not in VARIANTS]
    if unknown or args.steps < 2:
        parser.error(f"unknown variants {unknown} (known: {VARIANTS}); --steps must be >= 2")

    import torch
    import transformers

    from agentic_rl.config.rollout import ModelConfig
    from agentic_rl.model.load import bundled_model_dir, load_policy
    from agentic_rl.model.tokens import encode_prompt

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    wall0 = time.perf_counter()
    torch.manual_seed(SEED)
    messages = prompt_messages(PROMPTS)
    results: list[dict[str, Any]] = []
    ours_model = tokenizer = None
    for name in chosen:
        t0 = time.perf_counter()
        if name.startswith("ours"):
            if ours_model is None:
                ours_model, tokenizer = load_policy(ModelConfig(dtype="float32"), seed=SEED)
            prompts = [
                encode_prompt(tokenizer, m) for m in messages for _ in range(ROWS_PER_PROMPT)
            ]
            run, clock, info = ours_variant(name, ours_model, tokenizer, prompts)
        else:
            model_dir = str(bundled_model_dir(ModelConfig()))
            run, clock, info = trl_variant(name, model_dir, tokenizer, messages)
        record = profile_variant(name, run, clock, args)
        record["setup"] = info
        record["variant_wall_s"] = time.perf_counter() - t0
        results.append(record)
        step = record["step_ms"]
        print(
            f"\n## {name}: {step['median']:.1f} ms a decoding step "
            f"({step['min']:.1f}-{step['max']:.1f}; {info})"
        )
        print("| op | self ms/step | share | calls/step |")
        print("|---|---:|---:|---:|")
        for op in record["top_ops"]:
            print(
                f"| {op['op']} | {op['self_ms_per_step']:.2f} | {100 * op['share']:.1f}% "
                f"| {op['calls_per_step']:.0f} |"
            )
    print("\n| variant | ms per decoding step (median, min-max) |")
    print("|---|---:|")
    for r in results:
        s = r["step_ms"]
        print(f"| {r['variant']} | {s['median']:.1f} ({s['min']:.1f}-{s['max']:.1f}) |")
    record_all = {
        "command": "python " + " ".join(sys.argv),
        "setup": {
            "rows": PROMPTS * ROWS_PER_PROMPT,
            "prompts": "search_qa train tasks (seed 0), system + question, chat template",
            "decoding_steps": args.steps,
            "warmup_tokens": args.warmup_tokens,
            "eos": "off (all rows decode every step)",
        },
        "machine": {
            "cpu": cpu_info(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "torch_threads": torch.get_num_threads(),
            "thread_env": thread_env(),
            "load_average_at_end": os.getloadavg(),
        },
        "variants": results,
        "wall_s": time.perf_counter() - wall0,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record_all, indent=2, default=str))
    print(f"wrote {args.out} ({record_all['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
