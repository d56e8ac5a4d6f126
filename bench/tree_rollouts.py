"""Tree rollouts against independent GRPO episodes on a multi-turn recipe: learning per
generated token, three seeds, budgeted in optimizer steps.

The recipe is the default one (`search_qa_grpo`: a BM25 search agent, up to 4 turns, a
supervised warm start on the scripted expert, then GRPO with 2 PPO mini-batches a step).
Every arm plays the same B = 2 tasks x 8 episodes a step; only how the 8 are played and
credited changes:

  * grpo        8 independent episodes per task, GRPO's group advantage (the recipe as shipped)
  * tree_grpo   rollout.tree: 2 root episodes per task, 3 nodes of each tree expanded once
                (2 x (1 + 3) = 8 leaves); Tree-GRPO's advantage, inter-tree + intra-tree
  * tree_adv_grpo  the same trees, GRPO's advantage over the 8 leaves (ARPO's released scripts
                credit their trees this way)

Each step logs `decoded_tokens` (tokens the generator sampled: a branch's copied prefix counts
once, for its parent) and `distinct_trajectories`. Every arm runs `--steps` RL steps (each 2
optimizer steps), evaluating on the held-out tasks every `--eval-every` steps; time limits are
off, so a loaded machine changes the time, not the result. Each run is a separate
`agentic-rl train` process.

    .venv/bin/python bench/tree_rollouts.py                         # all arms, seeds 0 1 2
    .venv/bin/python bench/tree_rollouts.py --arms grpo tree_grpo --seeds 0 --steps 2  # a look

Writes bench/results/tree_rollouts.json (per arm and seed: per-step train metrics, held-out
evaluations, the decoded tokens summed over the run) and prints a markdown table of the means
over seeds: held-out success after RL, its change from the evaluation before RL per million
decoded tokens, decoded tokens per step, distinct trajectories per step.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "tree_rollouts.json"
TREE = ["rollout.tree.roots=2", "rollout.tree.expansions=3", "rollout.group_size=8"]
ARMS: dict[str, list[str]] = {
    "grpo": [],
    "tree_grpo": [*TREE, "algo.name=tree_grpo"],
    "tree_adv_grpo": TREE,
}
TRAIN_KEYS = (
    "reward",
    "success",
    "decoded_tokens",
    "distinct_trajectories",
    "zero_variance_groups",
    "step_seconds",
)


def run_arm(args: argparse.Namespace, arm: str, seed: int, out: Path) -> dict[str, Any]:
    """One `agentic-rl train` run of the recipe with the arm's overrides."""
    overrides = [
        f"trainer.seed={seed}",
        f"trainer.steps={args.steps}",
        f"trainer.eval_every={args.eval_every}",
        "trainer.max_minutes=0",
        "trainer.progress=false",
        "trainer.log_trajectories=0",
        f"trainer.out_dir={out}",
        f"trainer.run_name={arm}-{seed}",
        *ARMS[arm],
        *args.overrides,
    ]
    cmd = [sys.executable, "-m", "agentic_rl.cli", "train", args.recipe, *overrides]
    t0 = time.time()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{arm} seed {seed} failed:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (out / f"{arm}-{seed}" / "metrics.jsonl").open()]
    train = [
        {"step": r["step"], **{k: r[f"train/{k}"] for k in TRAIN_KEYS if f"train/{k}" in r}}
        for r in rows
        if "train/reward" in r
    ]
    evals = [
        {"step": r["step"], "success": r[f"{p}/success"], "split": p}
        for r in rows
        for p in ("eval_before", "eval_warm_start", "eval")
        if f"{p}/success" in r
    ]
    decoded = sum(row.get("decoded_tokens", 0.0) for row in train)
    return {
        "train": train,
        "eval": evals,
        "decoded_tokens": decoded,
        "wall_seconds": time.time() - t0,
        "command": cmd,
    }


def mean_of(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def summary(run: dict[str, Any]) -> dict[str, float | None]:
    """Held-out success after RL, its change from the last evaluation before RL per million
    decoded tokens, and the per-step means of decoded tokens and distinct trajectories."""
    before = [e["success"] for e in run["eval"] if e["split"] != "eval"]
    after = [e["success"] for e in run["eval"] if e["split"] == "eval"]
    steps = run["train"]
    gain = after[-1] - before[-1] if before and after else None
    millions = run["decoded_tokens"] / 1e6
    return {
        "success": after[-1] if after else None,
        "gain_per_m_tokens": gain / millions if gain is not None and millions else None,
        "decoded_per_step": mean_of([r["decoded_tokens"] for r in steps if "decoded_tokens" in r]),
        "distinct_per_step": mean_of(
            [r["distinct_trajectories"] for r in steps if "distinct_trajectories" in r]
        ),
    }


def table(results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| arm | held-out success after RL | success gain per 1M decoded tokens "
        "| decoded tokens / step | distinct trajectories / step (of 16) |",
        "|---|---|---|---|---|",
    ]
    for arm, seeds in results.items():
        rows = [summary(run) for run in seeds.values()]

        def avg(key: str, rows: list[dict[str, float | None]] = rows) -> str:
            vals = [r[key] for r in rows if r[key] is not None]
            return f"{statistics.fmean(vals):.3f}" if vals else "-"

        lines.append(
            f"| {arm} | {avg('success')} | {avg('gain_per_m_tokens')} | "
            f"{avg('decoded_per_step')} | {avg('distinct_per_step')} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recipe", default="search_qa_grpo")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--overrides", nargs="*", default=[], help="added to every run")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    results: dict[str, dict[str, Any]] = {}
    if args.out.is_file():  # resume: keep the arms and seeds already measured
        results = json.loads(args.out.read_text()).get("results", {})
    with tempfile.TemporaryDirectory(prefix="tree-rollouts-") as tmp:
        for seed in args.seeds:
            for arm in args.arms:
                if str(seed) in results.get(arm, {}):
                    continue
                print(f"[{arm} seed {seed}]", flush=True)
                results.setdefault(arm, {})[str(seed)] = run_arm(args, arm, seed, Path(tmp))
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(
                    json.dumps(
                        {
                            "command": " ".join(sys.argv),
                            "recipe": args.recipe,
                            "steps": args.steps,
                            "optimizer_steps_per_step": 2,
                            "eval_every": args.eval_every,
                            "arms": {a: ARMS[a] for a in results},
                            "machine": platform.platform(),
                            "results": results,
                        },
                        indent=1,
                    )
                )
    print(table(results))


if __name__ == "__main__":
    main()
