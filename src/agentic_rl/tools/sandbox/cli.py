"""`agentic-rl serve-sandbox`: the sandbox pool as an HTTP service.

Wired into the main parser with:
    from agentic_rl.tools.sandbox.cli import add_sandbox_command
    add_sandbox_command(sub)
"""

from __future__ import annotations

import argparse
from typing import Any

from agentic_rl.tools.http_guard import add_guard_arguments
from agentic_rl.tools.sandbox.limits import SandboxLimits


def _cmd_serve_sandbox(args: argparse.Namespace) -> int:
    from agentic_rl.tools.sandbox.server import serve_sandbox

    try:
        limits = SandboxLimits(
            timeout_s=args.timeout_s,
            max_timeout_s=max(args.max_timeout_s, args.timeout_s),
            memory_mb=args.memory_mb,
            nproc=args.nproc,
            allow_unisolated=args.allow_unisolated,
        )
    except ValueError as err:
        print(f"error: {err}")
        return 2
    from agentic_rl.tools.sandbox.worker_process import SandboxUnavailableError

    try:
        serve_sandbox(
            args.host,
            args.port,
            args.workers,
            limits,
            backend=args.backend,
            token=args.auth_token,
            max_inflight=args.max_inflight,
        )
    except (SandboxUnavailableError, ValueError) as err:
        print(f"error: {err}")
        return 2
    return 0


def add_sandbox_command(subparsers: Any) -> argparse.ArgumentParser:
    """Add `serve-sandbox` to an argparse subparsers object; returns the new parser."""
    defaults = SandboxLimits()
    parser = subparsers.add_parser(
        "serve-sandbox", help="serve the Python sandbox over HTTP (POST /run, GET /health)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--workers", type=int, default=4, help="warm worker processes")
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=defaults.timeout_s,
        help="default wall-time limit per execution",
    )
    parser.add_argument(
        "--max-timeout-s",
        type=float,
        default=defaults.max_timeout_s,
        help="largest timeout_s a request may ask for",
    )
    parser.add_argument(
        "--memory-mb", type=int, default=defaults.memory_mb, help="address-space limit per process"
    )
    parser.add_argument(
        "--nproc", type=int, default=defaults.nproc, help="process/thread limit per execution"
    )
    parser.add_argument(
        "--allow-unisolated",
        action="store_true",
        help="run model code even where no isolation (bubblewrap, or root's namespaces) can be "
        "had: it can then read your files, signal your processes and reach the network",
    )
    parser.add_argument("--backend", choices=["auto", "fastapi", "stdlib"], default="auto")
    add_guard_arguments(parser, default_inflight=None)  # None: 8 per worker
    parser.set_defaults(fn=_cmd_serve_sandbox)
    return parser
