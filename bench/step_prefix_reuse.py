"""Prompt KV reuse in step and memory modes against prefilling every turn's whole context,
A/B interleaved, on the bundled model.

In step mode (GiGPO, verl-agent) a turn's context is the prompt plus the last few steps, and in
memory mode (MemAgent) every conversation starts with the same instructions: a context continues
no earlier entry of the HF generator's KV store whole, so before, each turn prefilled its whole
context. Now those modes cut prefixes (backends/base.py `_hf_generator`): a turn reuses the KV
of the longest prefix it shares with a kept row, at least the prompt.

For each recipe: one policy (the untrained bundled model: the rollouts' lengths are what the
recipe's episodes cost before training), the rollouts of `--repeats` training batches of the
recipe's B tasks x G samples, each batch played once per arm (`prefill`: cut_prefixes off,
`reuse`: on), the arms interleaved batch by batch, the KV store emptied before each, after one
untimed episode (the generator's first call measures its fast paths). Per arm:
rollout seconds, prompt tokens prefilled and reused, and the sampled tokens of the two arms
compared (sampling is seeded per episode and turn, so they differ only where a float rounding
in the reused KV changes a sample). The learner's side, counted on the last batch's samples:
the tokens one forward runs through the backbone in the recipe's micro-batches, padded, packed
with only equal prompts shared (before) and packed with the opening the samples share (now,
model/packing.py).

    .venv/bin/python bench/step_prefix_reuse.py                    # the recipes below
    .venv/bin/python bench/step_prefix_reuse.py --recipes scienceworld --repeats 1 \
        --overrides rollout.tasks_per_step=1 rollout.group_size=4     # a smaller batch
    .venv/bin/python bench/step_prefix_reuse.py --smoke --out /tmp/s.json   # tiny model

Writes bench/results/step_prefix_reuse.json (a recipe already in the file and not rerun is kept,
each with its own command) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tree_rollout_work import learner_tokens  # noqa: E402  (bench/ is scripts, not a package)

RESULTS = Path(__file__).resolve().parent / "results" / "step_prefix_reuse.json"
RECIPES = ("gigpo_household", "scienceworld", "memagent")
ARMS = {"prefill": False, "reuse": True}  # arm -> cut_prefixes
SMOKE = [
    "model.name=tiny",
    "warm_start.num_tasks=0",
    "rollout.tasks_per_step=1",
    "rollout.group_size=2",
    "rollout.max_turns=3",
    "rollout.max_tokens_per_turn=8",
]


def measure(recipe: str, args: argparse.Namespace) -> dict[str, Any]:
    """One recipe: seconds and prompt tokens per arm over `args.repeats` training batches."""
    from agentic_rl.config.load import load_config
    from agentic_rl.train import collect
    from agentic_rl.train.setup import build

    cfg = load_config(recipe, [*(SMOKE if args.smoke else []), *args.overrides], smoke=args.smoke)
    if cfg.rollout.mode not in ("step", "memory"):
        raise SystemExit(f"{recipe}: rollout.mode={cfg.rollout.mode}, not step or memory")
    setup = build(cfg)
    gen = setup.generator
    seconds: dict[str, list[float]] = {arm: [] for arm in ARMS}
    prefilled = dict.fromkeys(ARMS, 0)
    reused = dict.fromkeys(ARMS, 0)
    differ = total = 0
    # untimed: the generator's first call measures its fast paths (backends/fast_paths.py),
    # a one-time cost that would land on the first arm
    warm = random.Random(-1).sample(setup.train_tasks, 1)
    collect.rollout(setup, warm, 1, seed=-1, step=1)
    for repeat in range(args.repeats):
        tasks = random.Random(repeat).sample(setup.train_tasks, cfg.rollout.tasks_per_step)
        sampled: dict[str, list[list[int]]] = {}
        for arm, cuts in ARMS.items():
            gen._kv_store.clear()
            gen._kv_store.cut_prefixes = cuts
            p0, r0 = gen.prompt_tokens, gen.reused_tokens
            start = time.perf_counter()
            played = collect.rollout(setup, tasks, cfg.rollout.group_size, seed=repeat, step=1)
            seconds[arm].append(time.perf_counter() - start)
            prefilled[arm] += gen.prompt_tokens - p0
            reused[arm] += gen.reused_tokens - r0
            samples = [s for ep in played.samples for s in ep]
            sampled[arm] = [s.token_ids for s in samples]
            print(f"[{recipe} {arm} batch {repeat}] {seconds[arm][-1]:.1f} s", flush=True)
        pairs = list(zip(sampled["prefill"], sampled["reuse"], strict=False))
        differ += sum(a != b for a, b in pairs) + abs(
            len(sampled["prefill"]) - len(sampled["reuse"])
        )
        total += max(len(sampled["prefill"]), len(sampled["reuse"]))
    # the learner's side, on the last batch: tokens one forward runs through the backbone in
    # the recipe's micro-batches, packed with equal prompts once (as before step and memory
    # samples shared their opening) and as now
    forwarded = learner_tokens(samples, cfg.optim.micro_batch_size)
    mean = {arm: statistics.fmean(s) for arm, s in seconds.items()}
    return {
        "mode": cfg.rollout.mode,
        "batch": f"{cfg.rollout.tasks_per_step} tasks x {cfg.rollout.group_size} samples",
        "seconds": seconds,
        "mean_seconds": mean,
        "speedup": mean["prefill"] / mean["reuse"],
        "prompt_tokens_prefilled": prefilled,
        "prompt_tokens_reused": reused,
        "prefill_cut": 1 - prefilled["reuse"] / prefilled["prefill"],
        "samples": total,
        "samples_differing": differ,
        "learner_tokens": {
            "micro_batch_size": cfg.optim.micro_batch_size,
            "plain": forwarded["plain"],
            "equal_prompts_packed": forwarded["prompt_packed"],
            "opening_shared": forwarded["trie_packed"],
        },
    }


def table(results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| recipe | mode | rollout s, prefill | rollout s, reuse | speedup "
        "| prompt tokens prefilled, prefill / reuse | samples differing |",
        "|---|---|---|---|---|---|---|",
    ]
    for recipe, r in results.items():
        p = r["prompt_tokens_prefilled"]
        lines.append(
            f"| {recipe} | {r['mode']} | {r['mean_seconds']['prefill']:.1f} | "
            f"{r['mean_seconds']['reuse']:.1f} | {r['speedup']:.2f}x | "
            f"{p['prefill']} / {p['reuse']} | {r['samples_differing']} of {r['samples']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recipes", nargs="+", default=list(RECIPES))
    parser.add_argument("--repeats", type=int, default=2, help="training batches per arm")
    parser.add_argument("--overrides", nargs="*", default=[], help="added to every recipe")
    parser.add_argument("--smoke", action="store_true", help="the tiny model, short episodes")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    import torch

    command = " ".join(
        ["bench/step_prefix_reuse.py", *(argv if argv is not None else sys.argv[1:])]
    )
    results: dict[str, Any] = {}
    if args.out.is_file():  # recipes measured earlier (e.g. with other overrides) are kept
        results = json.loads(args.out.read_text()).get("results", {})
    for recipe in args.recipes:
        results[recipe] = {**measure(recipe, args), "command": command, "repeats": args.repeats}
    record = {
        "machine": {
            "platform": platform.platform(),
            "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(),
        },
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1))
    print(table(results))
    return record


if __name__ == "__main__":
    main()
