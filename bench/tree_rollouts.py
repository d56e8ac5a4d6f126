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
  * arpo        ARPO's entropy-triggered branching (rollout.tree.branch=entropy): 4 full episodes
                per task, then after each tool result a copy where the entropy of the next turn's
                first 20 tokens rose (p = clamp(u - 0.2 dH, 0, 1) <= 0.5, beam 2), up to 8 leaves
                per task (fresh episodes fill what branches do not); GRPO's advantage over the 8
                (ARPO's scripts: 16 leaves from 8 initial rollouts, the same half)

Each step logs `decoded_tokens` (tokens the generator sampled: a branch's copied prefix counts
once, for its parent), `distinct_trajectories` and `reused_prompt_tokens` (prompt tokens whose
KV the generator had kept, so did not prefill: an episode's earlier turns, a branch's prefix
from its parent). Every arm runs `--steps` RL steps (each 2
optimizer steps), evaluating on the held-out tasks every `--eval-every` steps; time limits are
off, so a loaded machine changes the time, not the result. Each run is a separate
`agentic-rl train` process.

    .venv/bin/python bench/tree_rollouts.py                         # all arms, seeds 0 1 2
    .venv/bin/python bench/tree_rollouts.py --arms grpo tree_grpo --seeds 0 --steps 2  # a look
    .venv/bin/python bench/tree_rollouts.py --smoke      # every arm on the tiny model, 1 step

Writes bench/results/tree_rollouts.json (--smoke: tree_rollouts_smoke.json; per arm and seed: per-step train metrics, held-out
evaluations) and prints a markdown table of the means over seeds: held-out success after RL,
its change from the evaluation before RL per million decoded tokens, decoded tokens per step,
prompt tokens reused per step, distinct trajectories per step.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from arms import arm_parser, gain_summary, mean_of, run_arms, seed_mean  # noqa: E402  (bench/ is scripts, not a package)

RESULTS = Path(__file__).resolve().parent / "results" / "tree_rollouts.json"
TREE = ["rollout.tree.roots=2", "rollout.tree.expansions=3", "rollout.group_size=8"]
ARPO = ["rollout.tree.branch=entropy", "rollout.tree.roots=4", "rollout.group_size=8"]
ARMS: dict[str, list[str]] = {
    "grpo": [],
    "tree_grpo": [*TREE, "algo.name=tree_grpo"],
    "tree_adv_grpo": TREE,
    "arpo": ARPO,
}
SMOKE = [
    "model.name=tiny",
    "warm_start.num_tasks=0",
    "env.num_train_tasks=16",
    "env.num_eval_tasks=4",
    "rollout.max_turns=2",
    "rollout.max_tokens_per_turn=8",
    "rollout.max_total_tokens=200",
    "rollout.eval_batch_size=4",
]
"""--smoke: the tiny random model, no warm start, short episodes; the arms' groups of 8 kept."""
TRAIN_KEYS = (
    "reward",
    "success",
    "decoded_tokens",
    "reused_prompt_tokens",
    "distinct_trajectories",
    "zero_variance_groups",
    "step_seconds",
)


def summary(run: dict[str, Any]) -> dict[str, float | None]:
    """`gain_summary` (held-out success before and after RL, the gain, per million decoded
    tokens, decoded tokens a step) and the per-step means of reused prompt tokens and distinct
    trajectories."""
    steps = run["train"]
    return {
        **gain_summary(run),
        "reused_per_step": mean_of(
            [r["reused_prompt_tokens"] for r in steps if "reused_prompt_tokens" in r]
        ),
        "distinct_per_step": mean_of(
            [r["distinct_trajectories"] for r in steps if "distinct_trajectories" in r]
        ),
    }


def table(results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| arm | held-out success after RL | success gain per 1M decoded tokens "
        "| decoded tokens / step | prompt tokens reused (KV kept) / step "
        "| distinct trajectories / step (of 16) |",
        "|---|---|---|---|---|---|",
    ]
    for arm, seeds in results.items():
        rows = [summary(run) for run in seeds.values()]
        keys = (
            "success",
            "gain_per_m_tokens",
            "decoded_per_step",
            "reused_per_step",
            "distinct_per_step",
        )
        lines.append(f"| {arm} | " + " | ".join(seed_mean(rows, k) for k in keys) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, dict[str, Any]]:
    parser = arm_parser(__doc__.split("\n")[0], ARMS, RESULTS)
    parser.add_argument("--smoke", action="store_true", help="every arm on the tiny model, a look")
    args = parser.parse_args(argv)
    if args.smoke:
        args.steps, args.eval_every, args.seeds = 1, 1, args.seeds[:1]
        args.overrides = [*SMOKE, *args.overrides]
        if args.out == RESULTS:
            args.out = RESULTS.with_name("tree_rollouts_smoke.json")
            args.out.unlink(missing_ok=True)  # a look starts afresh
    results = run_arms(args, ARMS, TRAIN_KEYS, {"optimizer_steps_per_step": 2}, summary)
    print(table(results))
    return results


if __name__ == "__main__":
    main()
