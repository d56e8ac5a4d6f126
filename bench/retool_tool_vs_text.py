"""ReTool on CPU: held-out accuracy with the code interpreter vs. text-only at the same budget.

Two runs of the `retool` recipe that differ only in the tool:
- tool: env `math_tool`, chat format `retool` (code runs in the sandbox, output inserted as
  <interpreter>, loss mask 0), cold-start SFT on the scripted solver's code-augmented traces;
- text: env `math_text`, chat format `retool_text` (same problems, prompt asks for the same
  \\boxed{} answer, no code execution), cold-start SFT on the same number of answer-only traces.
Everything else is equal: model, warm-start size and learning rate, PPO settings, RL steps,
turn and token budgets (`rollout.max_turns`, `max_tokens_per_turn`, `max_total_tokens`), seeds,
and the held-out problems (the same `envs/math/problems.py` eval split). Accuracy is greedy
success on those problems before training, after the SFT cold start and after RL.

    .venv/bin/python bench/retool_tool_vs_text.py                 # full recipe, ~30 min idle
    .venv/bin/python bench/retool_tool_vs_text.py --smoke         # tiny model, a check it runs
    # the two arms side by side, one torch thread each (results merge into one JSON file):
    .venv/bin/python bench/retool_tool_vs_text.py --arm tool --threads 1 &
    .venv/bin/python bench/retool_tool_vs_text.py --arm text --threads 1

Writes bench/results/retool_tool_vs_text.json (unless --smoke) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from agentic_rl.config.load import load_config
from agentic_rl.train.loop import train

RESULTS = Path(__file__).resolve().parent / "results" / "retool_tool_vs_text.json"
ARMS = {
    "tool": [],
    "text": ["env.name=math_text", "rollout.chat_format=retool_text", "env.options={score: pm1}"],
}
STAGES = ("before", "warm_start", "after")


def arm_overrides(args: argparse.Namespace, arm: str, out_dir: str) -> list[str]:
    common = [
        f"model.name={args.model}",
        f"trainer.out_dir={out_dir}",
        f"trainer.run_name={arm}",
        f"trainer.seed={args.seed}",
        "trainer.resume=false",
        "trainer.progress=false",
        "trainer.tensorboard=false",
    ]
    if args.steps is not None:
        common.append(f"trainer.steps={args.steps}")
    if args.eval_tasks is not None:
        common.append(f"env.num_eval_tasks={args.eval_tasks}")
    return common + ARMS[arm] + list(args.override)


def run_arm(args: argparse.Namespace, arm: str, out_dir: str) -> dict[str, Any]:
    cfg = load_config("retool", arm_overrides(args, arm, out_dir), smoke=args.smoke)
    start = time.time()
    summary = train(cfg)
    return {
        "env": cfg.env.name,
        "chat_format": cfg.rollout.chat_format,
        "budget": {
            "max_turns": cfg.rollout.max_turns,
            "max_tokens_per_turn": cfg.rollout.max_tokens_per_turn,
            "max_total_tokens": cfg.rollout.max_total_tokens,
        },
        "steps": summary["steps"],
        "eval_tasks": cfg.env.num_eval_tasks,
        **{stage: summary[stage] for stage in STAGES if stage in summary},
        "seconds": round(time.time() - start, 1),
        "threads": torch.get_num_threads(),
    }


def table(results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| arm | env / format | before | after SFT | after RL | tool calls / ep. (after RL) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for arm, r in results.items():
        acc = [f"{r[s]['success']:.1%}" if s in r else "-" for s in STAGES]
        calls = r["after"]["tool_calls_per_episode"]
        lines.append(
            f"| {arm} | {r['env']} / {r['chat_format']} | {' | '.join(acc)} | {calls:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="default: smollm2-135m (tiny with --smoke)")
    parser.add_argument("--smoke", action="store_true", help="the recipe's --smoke settings")
    parser.add_argument("--steps", type=int, default=None, help="RL steps (default: the recipe)")
    parser.add_argument("--eval-tasks", type=int, default=None, help="held-out problems")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out-dir", default=None, help="run directories (default: a temp dir)")
    parser.add_argument("--arm", choices=sorted(ARMS), help="run one arm (default: both)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    parser.add_argument(
        "--override", nargs="*", default=[], help="more overrides for both arms (key=value)"
    )
    args = parser.parse_args()
    args.model = args.model or ("tiny" if args.smoke else "smollm2-135m")
    if args.threads:
        torch.set_num_threads(args.threads)
    arms = [args.arm] if args.arm else list(ARMS)
    with tempfile.TemporaryDirectory(prefix="retool_bench_") as tmp:
        out_dir = args.out_dir or tmp
        results = {arm: run_arm(args, arm, out_dir) for arm in arms}
    print(table(results))
    if not args.smoke:
        save(args, results)


def save(args: argparse.Namespace, results: dict[str, dict[str, Any]]) -> None:
    """Write the arms just run into the results file, keeping the other arm of the same
    settings (model, seed, overrides) when only one arm ran."""
    settings = {"model": args.model, "seed": args.seed, "override": list(args.override)}
    arms: dict[str, Any] = {}
    if args.arm and RESULTS.exists():
        old = json.loads(RESULTS.read_text())
        if {key: old.get(key) for key in settings} == settings:
            arms = old.get("arms", {})
    arms.update(results)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({**settings, "arms": arms}, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
