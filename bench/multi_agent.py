"""Multi-agent recipes on the bundled model, with seeds: the planner / executor team against the
single-agent search recipe at the same token budget, the solver / verifier team and the debate.

Arms (each run a separate `agentic-rl train` process, budgeted in RL steps, time limits off):

  * planner_executor  recipe planner_executor: a planner and an executor in one model (MATPO)
  * search_single     recipe search_r1_grpo (one search agent on the same two-hop questions),
                      set to the team's budget: 2 tasks x 8 episodes a step, up to 10 turns of
                      48 tokens each (the team: up to 10 conversations of 48 tokens), so both
                      arms may decode at most 480 tokens an episode and 7,680 a step;
                      both arms on the same 100 held-out questions, in bf16 autocast
  * solver_verifier   recipe solver_verifier as first measured: a LoRA adapter per role, GRPO
                      grouped per role, the verifier's term summed over its verdicts
                      (env.options.verdict_credit=sum), no solver term
  * solver_verifier_solver_term  the same with the solver's own term on (env.options.
                      solver_reward=0.5 per correct proposal, whatever the verdict): the remedy
                      for the reject-everything trap one seed of solver_verifier fell into
  * solver_verifier_mean_credit  the solver's own term and the verifier's term as the fraction
                      of its verdicts that were right (env.options.verdict_credit=mean), so that
                      a rejection, which opens another verdict, earns no more than accepting
  * solver_verifier_counterfactual  the solver's own term and the verifier's term as each
                      verdict's gain over accepting (env.options.verdict_credit=counterfactual):
                      a caught wrong answer earns, a rejected right one costs, accepting earns 0
                      (a rubber stamp is not paid; rejecting everything is, while most
                      proposals are wrong)
  * solver_verifier_untrained_guesses  the mean-credit arm whose warm start shows the
                      solver's wrong guesses untrained (env.options.expert_mistakes=0,
                      warm_start.recovery_fraction=0.5): half the demonstrations hold a
                      rejection, twice the recipe's share, and the solver is never taught to
                      guess
  * solver_verifier_models  the mean-credit arm with a full model per role
                      (model.role_policies=models, no LoRA) at the full fine-tuning rates of
                      the other full-model recipes (planner_executor, calculator_grpo): warm
                      start lr 1e-4, RL lr 5e-6
  * debate            recipe debate: two debaters, a LoRA adapter each, GRPO grouped per role

Every step logs `decoded_tokens` (tokens the generator sampled), so the table gives held-out
success after RL, its gain over the evaluation before RL (after the warm start) and that gain per
million decoded tokens. A gain is claimed over three seeds.

    .venv/bin/python bench/multi_agent.py                       # every arm, seeds 0 1 2
    .venv/bin/python bench/multi_agent.py --arms solver_verifier --seeds 0 --steps 2   # a look
    .venv/bin/python bench/multi_agent.py --arms solver_verifier solver_verifier_models  # roles
    .venv/bin/python bench/multi_agent.py --smoke --out /tmp/ma.json   # tiny model, seconds

Writes bench/results/multi_agent.json (per arm and seed: per-step train metrics, held-out
evaluations, the command) after every run, so a killed comparison resumes where it stopped, and
multi_agent.png beside it (held-out success against RL steps per arm; `--plot` only redraws it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from arms import arm_parser, gain_summary, plot_arms, run_arms, seed_mean  # noqa: E402  (bench/ is scripts, not a package)

RESULTS = Path(__file__).resolve().parent / "results" / "multi_agent.json"
BUDGET = ["rollout.tasks_per_step=2", "rollout.group_size=8", "rollout.max_tokens_per_turn=48"]
# The team and the single agent are compared on the same 100 held-out questions (both envs make
# their tasks with make_multihop_tasks; the single agent's recipe evaluates 50), sampling and
# learning in bf16 autocast (about twice as fast on a CPU with AVX512-BF16 / AMX; both arms alike)
SEARCH_ARMS = [*BUDGET, "rollout.max_turns=10", "env.num_eval_tasks=100"]
SEARCH_ARMS += ["rollout.mixed_precision=bf16", "learner.mixed_precision=bf16"]


def credit(solver_reward: float, verdict_credit: str) -> list[str]:
    """The solver / verifier env's two reward options: the solver's own term per correct
    proposal and how verdicts earn the verifier's term."""
    return [
        f"env.options.solver_reward={solver_reward}",
        f"env.options.verdict_credit={verdict_credit}",
    ]


RECIPES: dict[str, tuple[str, list[str]]] = {  # arm -> (recipe, its overrides)
    "planner_executor": ("planner_executor", SEARCH_ARMS),
    "search_single": ("search_r1_grpo", SEARCH_ARMS),
    # the solver / verifier arms name both reward options, so an arm's runs stay what they
    # were whatever the recipe's defaults become
    "solver_verifier": ("solver_verifier", credit(0.0, "sum")),
    "solver_verifier_solver_term": ("solver_verifier", credit(0.5, "sum")),
    "solver_verifier_mean_credit": ("solver_verifier", credit(0.5, "mean")),
    "solver_verifier_counterfactual": ("solver_verifier", credit(0.5, "counterfactual")),
    "solver_verifier_untrained_guesses": (
        "solver_verifier",
        [*credit(0.5, "mean"), "env.options.expert_mistakes=0", "warm_start.recovery_fraction=0.5"],
    ),
    "debate": ("debate", []),
    "solver_verifier_models": (
        "solver_verifier",
        [
            *credit(0.5, "mean"),
            "model.role_policies=models",
            "model.lora_rank=0",
            "warm_start.lr=1e-4",
            "optim.lr=5e-6",
        ],
    ),
}
SMOKE = [  # the tiny model, two tasks a split: the whole bench in seconds (tests)
    "model.name=tiny",
    "env.num_train_tasks=8",
    "env.num_eval_tasks=2",
    "warm_start.num_tasks=2",
    "rollout.group_size=2",
    "rollout.tasks_per_step=1",
]
TRAIN_KEYS = ("reward", "success", "decoded_tokens", "zero_variance_groups", "step_seconds")


def team_summary(run: dict[str, Any]) -> dict[str, float | None]:
    """`gain_summary`, and for a solver / verifier run what its verifier did at the last RL
    evaluation: "caught", the fraction of wrong proposals it rejected, and "right_rejected",
    the right proposals it rejected an episode (None where the run predates the env's verdict
    counts, or no proposal was wrong). A team's success alone does not tell a verifier that
    checks from one that accepts everything."""
    summary = gain_summary(run)
    last = [e.get("env", {}) for e in run["eval"] if e["split"] == "eval"]
    env = last[-1] if last else {}
    wrong = env.get("verdicts_on_wrong")
    if "wrong_rejected" in env:
        summary["caught"] = env["wrong_rejected"] / wrong if wrong else None
        summary["right_rejected"] = env.get("right_rejected")
    return summary


def table(results: dict[str, dict[str, Any]]) -> str:
    """Means over seeds (and the number of seeds) of each arm's `summary`."""
    lines = [
        "| arm | seeds | held-out success after RL | gain from RL | gain per 1M decoded tokens "
        "| decoded tokens / step |",
        "|---|---|---|---|---|---|",
    ]
    for arm, seeds in results.items():
        rows = [gain_summary(run) for run in seeds.values()]
        cells = [seed_mean(rows, k) for k in ("success", "gain", "gain_per_m_tokens")]
        cells.append(seed_mean(rows, "decoded_per_step"))
        lines.append(f"| {arm} | {len(rows)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Every arm's runs (one recipe per arm), merged into one results file."""
    results: dict[str, dict[str, Any]] = {}
    extra = SMOKE if args.smoke else []
    for arm in args.arms:
        recipe = RECIPES[arm][0]
        mine = argparse.Namespace(**{**vars(args), "recipe": recipe, "arms": [arm]})
        mine.overrides = [*args.overrides, *extra]
        header = {"recipes": {a: RECIPES[a][0] for a in RECIPES}, "smoke": args.smoke}
        results = run_arms(
            mine, {a: RECIPES[a][1] for a in RECIPES}, TRAIN_KEYS, header, team_summary
        )
    return results


def main(argv: list[str] | None = None) -> None:
    parser = arm_parser(__doc__.split("\n")[0], list(RECIPES), RESULTS)
    parser.add_argument("--smoke", action="store_true", help="the tiny model, a few tasks")
    parser.add_argument("--plot", action="store_true", help="only redraw the picture")
    args = parser.parse_args(argv)
    if args.smoke:
        args.steps, args.eval_every = min(args.steps, 1), 1
    results = json.loads(args.out.read_text())["results"] if args.plot else run(args)
    title = "multi-agent recipes on the bundled model" if not args.smoke else "smoke"
    plot_arms(results, args.out.with_suffix(".png"), title)
    print(table(results))


if __name__ == "__main__":
    main()
