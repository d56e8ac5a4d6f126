"""The embodied recipes (`vln_r1`, `vla_rl`) on the bundled model: held-out success before
training, after the SFT warm start and after RL.

Runs the recipe end to end as `agentic-rl train` does (`train_recipe`: a two-stage recipe runs
its stages in order, each from the last one's weights) and collects the greedy held-out evals:
"before" (the untrained model), "sft" (after the expert warm start) and "rl" (after the RL
steps), plus the RL stage's per-step training reward and success.

    .venv/bin/python bench/embodied.py vln_r1
    .venv/bin/python bench/embodied.py vla_rl --set trainer.steps=10
    .venv/bin/python bench/embodied.py vln_r1 --set model.name=tiny rl:trainer.steps=1 \\
        env.num_eval_tasks=4 sft:warm_start.num_tasks=4    # does it run

Writes bench/results/<recipe>.json (or --out) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agentic_rl.config.load import load_config
from agentic_rl.logging import read_metrics
from agentic_rl.train.stages import stage_configs, train_recipe

RESULTS = Path(__file__).resolve().parent / "results"
KEYS = ("success", "reward", "invalid_actions_per_episode", "tool_calls_per_episode")
# per-step training metrics kept where the run logs them (PPO: the critic; wall time per step)
TRAIN_EXTRA = ("value_loss", "clip_frac", "step_seconds", "rollout_seconds")


def stage_evals(summary: dict[str, Any]) -> dict[str, dict[str, float]]:
    """before / sft / rl evals of a run summary (one stage with a warm start, or two stages)."""
    stages = summary.get("stages")
    if stages:  # SFT stage then RL stage
        first, last = next(iter(stages.values())), list(stages.values())[-1]
        out = {"sft": first.get("warm_start", first["after"]), "rl": last["after"]}
        if "before" in first:
            out["before"] = first["before"]
        return out
    out = {"rl": summary["after"]}
    for name, key in (("before", "before"), ("sft", "warm_start")):
        if key in summary:
            out[name] = summary[key]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipe")
    parser.add_argument("--set", nargs="*", default=[], help="dotted overrides")
    parser.add_argument("--out", default="")
    parser.add_argument("--keep", action="store_true", help="keep the run directory")
    args = parser.parse_args(argv)
    out_dir = Path(tempfile.mkdtemp(prefix=f"bench_{args.recipe}_"))
    overrides = [
        f"trainer.out_dir={out_dir}",
        "trainer.progress=false",
        "trainer.tensorboard=false",
        *args.set,
    ]
    cfg = load_config(args.recipe, overrides)
    start = time.time()
    summary = train_recipe(cfg)
    wall = time.time() - start
    stages = stage_configs(cfg) if cfg.stages else [cfg]
    rl = stages[-1]
    rows = [
        r
        for r in read_metrics(
            Path(rl.trainer.out_dir) / (rl.trainer.run_name or rl.recipe) / "metrics.jsonl"
        )
        if "train/reward" in r
    ]
    evals = {k: {m: v[m] for m in KEYS} for k, v in stage_evals(summary).items()}
    result = {
        "recipe": args.recipe,
        "command": " ".join(
            ["bench/embodied.py", args.recipe, *(["--set", *args.set] if args.set else [])]
        ),
        "model": rl.model.name if not cfg.stages else cfg.model.name,
        "eval_tasks": cfg.env.num_eval_tasks,
        "rl_steps": len(rows),
        "algo": rl.algo.name,
        "wall_seconds": round(wall, 1),
        "evals": evals,
        "train": [
            {"step": r["step"], "reward": r["train/reward"], "success": r["train/success"]}
            | {k: r[f"train/{k}"] for k in TRAIN_EXTRA if f"train/{k}" in r}
            for r in rows
        ],
        "date": time.strftime("%Y-%m-%d"),
    }
    path = Path(args.out) if args.out else RESULTS / f"{args.recipe}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print("\n| stage | held-out success | reward | invalid actions / ep. |\n|---|---|---|---|")
    for name in ("before", "sft", "rl"):
        if name in evals:
            e = evals[name]
            print(
                f"| {name} | {e['success']:.2f} | {e['reward']:.3f} | "
                f"{e['invalid_actions_per_episode']:.2f} |"
            )
    print(f"wall {wall / 60:.1f} min, {len(rows)} RL steps; wrote {path}")
    if args.keep:
        print(f"run directory: {out_dir}")
    else:  # the exported models of a multi-stage run are ~0.5 GB each
        shutil.rmtree(out_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
