"""CISPO, Clip-Cov, KL-Cov, GMPO and IcePop against the default recipe's loss, on the bundled
model: policy entropy and held-out success per step, three seeds, budgeted in optimizer steps.

Each arm is the default recipe (`search_qa_grpo`: expert warm start, then GRPO with clip-higher
and 2 PPO mini-batches a step) with one change:

  * ppo (baseline)      the recipe as shipped
  * cispo               algo.policy_loss=cispo (cap 1.2, no lower bound), token-mean
  * clip_cov            algo.policy_loss=clip_cov, the paper's band (1, 5) and ratio 2e-4
  * clip_cov_x100       ... ratio 2e-2: at CPU batch sizes 2e-4 detaches one token a micro-batch
  * kl_cov              algo.policy_loss=kl_cov, ratio 2e-4, coefficient 1
  * gmpo                algo.policy_loss=gmpo, log-space clip 0.4
  * bf16_tis / bf16_icepop  rollouts in bf16 against the fp32 learner (a real mismatch):
                        truncated IS (C = 2) vs IcePop (band [0.5, 5]); the mismatch metrics
                        (mismatch_k3, mismatch_max_abs) and the zeroed fraction are recorded

Every arm runs `trainer.steps` RL steps (each 2 optimizer steps), evaluating on the held-out
tasks every `eval_every` steps; time limits are off, so a loaded machine changes the time, not
the result. Each run is a separate `agentic-rl train` process.

    .venv/bin/python bench/newer_losses.py                     # all arms, seeds 0 1 2
    .venv/bin/python bench/newer_losses.py --arms ppo cispo --seeds 0 --steps 4   # a quick look

Writes bench/results/newer_losses.json (per arm and seed: the per-step train metrics and the
held-out evaluations) and prints a markdown table of the means over seeds.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from arms import arm_parser, arm_summary, held_out, mean_of, run_arms  # noqa: E402  (bench/ is scripts, not a package)

RESULTS = Path(__file__).resolve().parent / "results" / "newer_losses.json"
RESET = ["algo.clip_high=0.2"]  # the recipe's clip-higher is a knob of ppo/clip_cov only
ARMS: dict[str, list[str]] = {
    "ppo": [],
    "cispo": ["algo.policy_loss=cispo", *RESET, "algo.loss_agg=token-mean"],
    "clip_cov": ["algo.policy_loss=clip_cov"],
    "clip_cov_x100": ["algo.policy_loss=clip_cov", "algo.clip_cov_ratio=0.02"],
    "kl_cov": ["algo.policy_loss=kl_cov", *RESET],
    "gmpo": ["algo.policy_loss=gmpo", *RESET],
    "bf16_tis": ["rollout.mixed_precision=bf16", "algo.rollout_correction=tis"],
    "bf16_icepop": ["rollout.mixed_precision=bf16", "algo.rollout_correction=icepop"],
}
TRAIN_KEYS = (
    "entropy",
    "success",
    "reward",
    "clip_frac",
    "mismatch_k3",
    "mismatch_max_abs",
    "rollout_correction_weight",
    "rollout_correction_zeroed",
    "step_seconds",
)


def summary(run: dict[str, Any]) -> dict[str, float | None]:
    """One run's numbers: held-out success after the warm start and at the last evaluation, the
    policy entropy at the first and the last step (a learner metric: absent on steps whose
    update was skipped), and the per-step means of the clip fraction, the rollout / learner
    mismatch and the share of tokens a rollout correction zeroed."""
    before, after = held_out(run)
    entropy = [row["entropy"] for row in run["train"] if "entropy" in row]

    def per_step(key: str) -> float | None:
        return mean_of([row[key] for row in run["train"] if key in row])

    return {
        "before": before,
        "success": after,
        "entropy_first": entropy[0] if entropy else None,
        "entropy_last": entropy[-1] if entropy else None,
        "clip_frac": per_step("clip_frac"),
        "mismatch_k3": per_step("mismatch_k3"),
        "zeroed": per_step("rollout_correction_zeroed"),
    }


def table(results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| arm | held-out success, last eval (mean of seeds) | train entropy, first -> last step"
        " | clip_frac | mismatch_k3 | zeroed |",
        "|---|---|---|---|---|---|",
    ]
    for arm, seeds in results.items():
        row = arm_summary([summary(run) for run in seeds.values()])

        def num(key: str, digits: int = 3, row: dict[str, Any] = row) -> str:
            return "-" if row[key] is None else f"{row[key]:.{digits}f}"

        lines.append(
            f"| {arm} | {num('success')} | {num('entropy_first')} -> {num('entropy_last')} | "
            f"{num('clip_frac', 4)} | {num('mismatch_k3', 4)} | {num('zeroed', 4)} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = arm_parser(__doc__.split("\n")[0], ARMS, RESULTS)
    args = parser.parse_args()
    results = run_arms(args, ARMS, TRAIN_KEYS, {"optimizer_steps_per_step": 2}, summary)
    print(table(results))


if __name__ == "__main__":
    main()
