"""`agentic-rl serve-policy`: serve a recipe's policy to any OpenAI-client agent.

Wired into the main parser with:
    from agentic_rl.serving.cli import add_serve_policy_command
    add_serve_policy_command(sub)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from agentic_rl.tools.http_guard import add_guard_arguments

DEFAULT_RECIPE = "calculator_grpo"


def serve_policy(
    recipe: str | None,
    overrides: list[str],
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    out: str | None = None,
    model_name: str | None = None,
    max_tokens: int = 256,
    on_mismatch: str = "reject",
    train_every: int = 0,
    save_dir: str | None = None,
    max_batch: int = 32,
    group_size: int | None = None,
    episode_ttl: float = 1800.0,
    log_level: str = "info",
    token: str | None = None,
    max_inflight: int = 128,
) -> None:
    """Build the recipe's policy, generator and learner settings and serve until interrupted.
    `token` (default $AGENTIC_RL_API_TOKEN) is required when `host` is not loopback."""
    import uvicorn

    from agentic_rl.config.load import load_config
    from agentic_rl.serving.batching import ServeLimits
    from agentic_rl.serving.policy_server import PolicyService, create_app
    from agentic_rl.tools.http_guard import require_token
    from agentic_rl.train.setup import build

    token = require_token(host, token, "serve-policy")  # before building the model
    cfg = load_config(recipe or DEFAULT_RECIPE, overrides)
    setup = build(cfg)
    context = getattr(setup.policy.config, "max_position_embeddings", 2048)
    export = (
        Path(out) if out else Path(cfg.trainer.out_dir) / f"{cfg.recipe}-serve" / "episodes.jsonl"
    )
    service = PolicyService.from_setup(
        setup,
        model_name=model_name or cfg.model.name,
        limits=ServeLimits(
            default_max_tokens=max_tokens,
            max_context=context,
            max_batch=max_batch,
            max_inflight=max_inflight,
        ),
        on_mismatch=on_mismatch,  # type: ignore[arg-type]
        export=export,
        train_every=train_every,
        save_dir=save_dir,
        keep_finished=False,  # the JSONL keeps them; memory stays flat on a long run
        group_size=group_size or cfg.rollout.group_size,
        episode_ttl_s=episode_ttl,
    )
    training = (
        f", an update per {train_every} finished episodes in complete groups of "
        f"{service.group_size}"
        if train_every
        else ""
    )
    served = (
        f"as a team: 'model' names the role, one of {', '.join(service.roles)}"
        if service.roles
        else f"as model {service.model_name!r}"
    )
    print(
        f"serving {cfg.model.name} ({cfg.algo.name}) on http://{host}:{port}/v1 "
        f"{served}; episodes -> {export}{training}",
        flush=True,
    )
    uvicorn.run(create_app(service, token), host=host, port=port, log_level=log_level)


def _cmd_serve_policy(args: argparse.Namespace) -> int:
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as err:
        print(
            f"error: serve-policy needs FastAPI and uvicorn, which are not installed ({err}): "
            "pip install 'agentic-rl[retrieval]'",
            file=sys.stderr,
        )
        return 2
    from agentic_rl.tools.http_guard import is_loopback, resolve_token

    if resolve_token(args.auth_token) is None and not is_loopback(args.host):
        print(
            f"error: serve-policy bound to {args.host} needs an access token: pass "
            "--auth-token TOKEN or set AGENTIC_RL_API_TOKEN (OpenAI clients send it as api_key)",
            file=sys.stderr,
        )
        return 2
    serve_policy(
        args.recipe,
        list(args.overrides),
        host=args.host,
        port=args.port,
        out=args.out,
        model_name=args.model_name,
        max_tokens=args.max_tokens,
        on_mismatch=args.on_mismatch,
        train_every=args.train_every,
        save_dir=args.save_dir,
        max_batch=args.max_batch,
        group_size=args.group_size,
        episode_ttl=args.episode_ttl,
        token=args.auth_token,
        max_inflight=args.max_inflight,
    )
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be at least 0 seconds, got {text}")
    return value


def add_serve_policy_command(subparsers: Any) -> argparse.ArgumentParser:
    """Add `serve-policy` to an argparse subparsers object; returns the new parser."""
    parser = subparsers.add_parser(
        "serve-policy",
        help="serve the policy as an OpenAI-compatible chat endpoint that records trajectories",
    )
    parser.add_argument(
        "recipe",
        nargs="?",
        default=None,
        help=f"recipe for the model, algorithm and optimiser (default {DEFAULT_RECIPE}; its env "
        "is not used)",
    )
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. model.name=tiny")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--out", help="episodes JSONL (default: OUT_DIR/RECIPE-serve/episodes.jsonl)"
    )
    parser.add_argument("--model-name", help="model id clients pass (default: model.name)")
    parser.add_argument(
        "--max-tokens", type=_positive, default=256, help="new tokens when a call names none"
    )
    parser.add_argument(
        "--on-mismatch",
        choices=["reject", "split"],
        default="reject",
        help="a call that does not extend its episode's history: refuse it (409) or start a "
        "new training sample in the same episode",
    )
    parser.add_argument(
        "--train-every",
        type=_non_negative,
        default=0,
        help="update the policy with the recipe's algorithm after every N finished episodes "
        "(0: only record)",
    )
    parser.add_argument(
        "--group-size",
        type=_positive,
        default=None,
        help="finished episodes a group (same opening prompt or reported group_id) needs before "
        "it is trained; groups are never split (default: the recipe's rollout.group_size)",
    )
    parser.add_argument(
        "--episode-ttl",
        type=_seconds,
        default=1800.0,
        help="seconds after which an open episode with no call expires, as does an incomplete "
        "group that stopped growing (0: never)",
    )
    parser.add_argument("--save-dir", help="save the model here after each update")
    parser.add_argument("--max-batch", type=_positive, default=32, help="calls generated at once")
    add_guard_arguments(parser, default_inflight=128)
    parser.set_defaults(fn=_cmd_serve_policy)
    return parser
