"""`agentic-rl` command line: train, eval, check-env, recipes, sft, dpo, report, ..."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from agentic_rl.checkpoint.export import add_export_command
from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError, recipe_dirs
from agentic_rl.errors import UserInputError
from agentic_rl.report.cli import add_report_command
from agentic_rl.retrieval.cli import add_index_commands
from agentic_rl.serving.cli import add_serve_policy_command
from agentic_rl.tools.sandbox.cli import add_sandbox_command


def _cmd_train(args: argparse.Namespace) -> int:
    from agentic_rl.train.stages import train_recipe

    overrides = [*args.overrides, *(["trainer.resume=force"] if args.force else [])]
    cfg = load_config(args.recipe, overrides, smoke=args.smoke)
    train_recipe(cfg)
    if cfg.learner.strategy == "fsdp2":  # torchrun: every process leaves the group together
        from agentic_rl.scale.fsdp import shutdown

        shutdown()
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from agentic_rl.checkpoint.io import load_checkpoint
    from agentic_rl.checkpoint.layout import latest_checkpoint
    from agentic_rl.logging import counting_progress
    from agentic_rl.train.collect import eval_episodes
    from agentic_rl.train.setup import build
    from agentic_rl.train.summary import env_summary_metrics, summarize

    cfg = load_config(args.recipe, args.overrides)
    if args.planner:  # inference-time planning with the recipe's model (or the checkpoint's)
        return _eval_planner(args, cfg)
    path: Path | None = None
    if args.checkpoint:
        path = Path(args.checkpoint)
        if not (path / "COMPLETE").exists():  # a run directory: take its last checkpoint
            found = latest_checkpoint(path)
            if found is None:
                raise ConfigError(
                    f"--checkpoint {path}: no complete checkpoint there (give a checkpoint dir "
                    "or a run dir; without --checkpoint the recipe's starting model is evaluated)"
                )
            path = found
    setup = build(cfg)  # the tasks are made first: a bad task file fails before the model loads
    if path is not None:
        load_checkpoint(path, setup.policy, restore_rng=False)
    tasks, size = setup.eval_tasks, cfg.rollout.eval_batch_size
    what = str(path) if path is not None else f"the starting model {cfg.model.name}"
    print(
        f"evaluating {what} on {len(tasks)} held-out tasks, greedy, {size} at a time "
        "(fewer tasks: env.num_eval_tasks=N; Ctrl-C stops)",
        file=sys.stderr,
        flush=True,
    )
    episodes = []
    with counting_progress(len(tasks), "eval", sys.stderr) as advance:
        for start in range(0, len(tasks), size):  # evaluate()'s batches, one at a time
            chunk = tasks[start : start + size]
            episodes += eval_episodes(setup, chunk)
            advance(len(chunk))
    result = summarize([samples[0] for samples in episodes], env_summary_metrics(cfg))
    source = {"checkpoint": str(path) if path is not None else None, "model": cfg.model.name}
    print(json.dumps({**source, **result}, indent=2))
    return 0


def _cmd_replay(args: argparse.Namespace) -> int:
    from agentic_rl.train.replay import replay_command

    return replay_command(args)


def _eval_planner(args: argparse.Namespace, cfg: Any) -> int:
    from agentic_rl.train.planning import evaluate_planner
    from agentic_rl.train.setup import build

    if args.checkpoint:
        cfg.model.name = str(args.checkpoint)  # an exported model dir (RUN_DIR/model)
    out = Path(args.out) if args.out else None
    result = evaluate_planner(build(cfg), args.planner, out=out)
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=2))
    return 0


def env_check_config(name: str, overrides: list[str], tasks: int, seed: int) -> Any:
    """The config `check-env NAME key=value...` checks: `env.name=NAME`, `tasks` eval tasks
    from `seed`, then the user's overrides, which may set only `env.*` keys (nothing else
    acts on a check); validated as a training run's env section is."""
    from agentic_rl.config.parse import build_dataclass, parse_override, set_dotted
    from agentic_rl.config.schema import Config
    from agentic_rl.config.validate_env import validate_env
    from agentic_rl.envs.registry import env_names

    if name not in env_names():
        raise ConfigError(f"unknown env '{name}' (valid: {', '.join(env_names())})")
    data: dict[str, Any] = {"env": {"name": name, "num_eval_tasks": tasks, "seed": seed}}
    for text in overrides:
        key, value = parse_override(text)
        if key.split(".")[0] != "env":
            raise ConfigError(
                f"override '{text}': check-env uses only env.* settings (env.options.K=V, "
                "env.eval_file=PATH, ...); the model and the trainer play no part in a check"
            )
        set_dotted(data, key, value)
    cfg = build_dataclass(Config, data)
    validate_env(cfg)
    return cfg


def _cmd_check_env(args: argparse.Namespace) -> int:
    from agentic_rl.envs.check import check_env
    from agentic_rl.envs.from_config import make_envs, make_tasks

    cfg = env_check_config(args.name, args.overrides, args.tasks, args.seed)
    tasks = make_tasks(cfg, "eval")  # env.eval_file's rows where set, else generated ones
    skipped = check_env(make_envs(cfg, 1)[0], tasks, seed=args.seed)
    print(f"{cfg.env.name}: all checks passed on {len(tasks)} tasks")
    for check in skipped:
        print(f"  skipped: {check}")
    return 0


def _cmd_envs(args: argparse.Namespace) -> int:
    from agentic_rl.envs.registry import env_class, env_names

    for name in env_names():
        summary = " ".join((env_class(name).__doc__ or "").strip().split("\n\n")[0].split())
        print(f"{name:20s} {summary}")
    print("check one with: agentic-rl check-env NAME; use one with: env.name=NAME")
    return 0


def _cmd_recipes(args: argparse.Namespace) -> int:
    seen: set[str] = set()
    for folder in recipe_dirs():
        for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
            if path.stem in seen:
                continue
            seen.add(path.stem)
            cfg = load_config(path)
            print(f"{path.stem:28s} {cfg.description}")
    return 0


def _stage_dir(args: argparse.Namespace, cfg: Any, stage: str) -> Path:
    return Path(args.out) if args.out else Path(cfg.trainer.out_dir) / f"{cfg.recipe}-{stage}"


def _cmd_sft(args: argparse.Namespace) -> int:
    from agentic_rl.train.sft import TrajectoryFormatError, run_sft

    cfg = load_config(args.recipe, args.overrides)
    out = _stage_dir(args, cfg, "sft")
    try:
        summary = run_sft(cfg, args.data, out, save_data=args.save_data)
    except (TrajectoryFormatError, FileNotFoundError) as err:
        raise ConfigError(f"--data: {err}") from err
    print(json.dumps(summary, indent=2))
    print(f"RL from it: agentic-rl train {cfg.recipe} model.name={summary['model']}")
    return 0


def _cmd_dpo(args: argparse.Namespace) -> int:
    from agentic_rl.train.dpo import run_dpo
    from agentic_rl.train.sft import TrajectoryFormatError

    cfg = load_config(args.recipe, args.overrides)
    try:
        summary = run_dpo(cfg, args.pairs, _stage_dir(args, cfg, "dpo"))
    except (TrajectoryFormatError, FileNotFoundError) as err:
        raise ConfigError(f"--pairs: {err}") from err
    print(json.dumps(summary, indent=2))
    return 0


def _add_stage_commands(sub: Any) -> None:
    sft = sub.add_parser(
        "sft", help="supervised fine-tuning on trajectories (only loss-mask-1 tokens)"
    )
    sft.add_argument("recipe", help="recipe name or YAML path (model, warm_start settings)")
    sft.add_argument("overrides", nargs="*", help="dotted overrides, e.g. warm_start.lr=1e-4")
    sft.add_argument(
        "--data", help="trajectory JSONL (default: scripted-expert episodes of the recipe's env)"
    )
    sft.add_argument("--save-data", help="also write the trajectories trained on as JSONL")
    sft.add_argument("--out", help="output dir (default: OUT_DIR/RECIPE-sft)")
    sft.set_defaults(fn=_cmd_sft)

    dpo = sub.add_parser("dpo", help="DPO on trajectory pairs against a frozen reference")
    dpo.add_argument("recipe", help="recipe name or YAML path (model, dpo settings)")
    dpo.add_argument("overrides", nargs="*", help="dotted overrides, e.g. dpo.beta=0.1")
    dpo.add_argument("--pairs", required=True, help='JSONL of {"chosen": ..., "rejected": ...}')
    dpo.add_argument("--out", help="output dir (default: OUT_DIR/RECIPE-dpo)")
    dpo.set_defaults(fn=_cmd_dpo)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentic-rl", description="Train LLM agents with multi-turn reinforcement learning."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train a recipe (default: the CPU search agent)")
    train.add_argument("recipe", nargs="?", default=None, help="recipe name or YAML path")
    train.add_argument("overrides", nargs="*", help="dotted overrides, e.g. algo.name=rloo")
    train.add_argument(
        "--smoke",
        action="store_true",
        help="a few tiny steps (tests, checks), in their own run dir RUN_NAME-smoke",
    )
    train.add_argument(
        "--force",
        action="store_true",
        help="resume the run dir's checkpoint even if its settings differ (trainer.resume=force)",
    )
    train.set_defaults(fn=_cmd_train)

    ev = sub.add_parser("eval", help="evaluate a checkpoint on the recipe's held-out tasks")
    ev.add_argument("recipe", help="recipe name or YAML path")
    ev.add_argument("overrides", nargs="*", help="dotted overrides")
    ev.add_argument(
        "--checkpoint",
        help="checkpoint dir or run dir (with --planner: a model dir); default: the recipe's "
        "starting model (model.name)",
    )
    ev.add_argument(
        "--planner",
        choices=["mcts", "cot"],
        help="plan each task with the model instead: RAP's MCTS or chain of thought (planner.*)",
    )
    ev.add_argument("--out", help="with --planner: write the per-task results as JSON here")
    ev.set_defaults(fn=_cmd_eval)

    replay = sub.add_parser(
        "replay",
        help="rerun a saved training step (trainer.save_batches=true) and compare it with the log",
    )
    replay.add_argument("bundle", help="a step's bundle, RUN/batches/step_N (or RUN with --step)")
    replay.add_argument("--step", type=int, help="the step to replay when BUNDLE is a run dir")
    replay.add_argument(
        "--rtol", type=float, default=1e-5, help="relative tolerance of the metrics (1e-5)"
    )
    replay.set_defaults(fn=_cmd_replay)

    check = sub.add_parser("check-env", help="validate an environment with check_env")
    check.add_argument("name", help="env name, e.g. search_qa")
    check.add_argument(
        "overrides",
        nargs="*",
        help="env settings as for train, e.g. env.options.env_id=Taxi-v3 or env.eval_file=F",
    )
    check.add_argument(
        "--tasks",
        type=int,
        default=20,
        metavar="N",
        help="number of eval tasks to run the checks on (a count, default 20)",
    )
    check.add_argument("--seed", type=int, default=0, help="seed of the tasks and resets")
    check.set_defaults(fn=_cmd_check_env)

    recipes = sub.add_parser("recipes", help="list recipes with one line each")
    recipes.set_defaults(fn=_cmd_recipes)

    envs = sub.add_parser("envs", help="list environments with one line each")
    envs.set_defaults(fn=_cmd_envs)
    _add_stage_commands(sub)
    add_index_commands(sub)
    add_sandbox_command(sub)
    add_serve_policy_command(sub)
    add_export_command(sub)
    add_report_command(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # Overrides after a flag (`train R --smoke a.b=c`) arrive as unknown args; take those.
    if (
        extra
        and hasattr(args, "overrides")
        and all("=" in e and not e.startswith("-") for e in extra)
    ):
        args.overrides = [*args.overrides, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    # `train a.b=c` without a recipe: argparse takes the first override as the recipe name.
    if getattr(args, "recipe", None) and "=" in args.recipe:
        args.overrides = [args.recipe, *args.overrides]
        args.recipe = None
    try:
        return args.fn(args)
    except KeyboardInterrupt:  # Ctrl-C: a message and the shell's code for SIGINT, no traceback
        hint = " (rerun the same command to resume from the last checkpoint)"
        print(f"\ninterrupted{hint if args.command == 'train' else ''}", file=sys.stderr)
        return 130
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
    except UserInputError as err:  # a file, row, picture, env id... the user gave (errors.py)
        print(f"error: {err}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
