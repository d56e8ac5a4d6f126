"""The `agentic-rl report` command."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def _cmd_report(args: argparse.Namespace) -> int:
    from agentic_rl.config.parse import ConfigError
    from agentic_rl.report.data import ReportError
    from agentic_rl.report.html import write_report

    out = Path(args.out) if args.out else Path(args.runs[0]) / "report.html"
    try:
        path = write_report(args.runs, out, args.max_trajectories, args.title)
    except ReportError as err:
        raise ConfigError(str(err)) from err
    size = path.stat().st_size / 1e6
    print(f"wrote {path} ({size:.1f} MB): open it in a browser (no network needed)")
    return 0


def add_report_command(sub: Any) -> None:
    report = sub.add_parser(
        "report",
        help="one self-contained HTML page of one or more runs: curves, evaluations, config, "
        "a token-level trajectory explorer",
    )
    report.add_argument("runs", nargs="+", help="run directories (RUN_DIR: out_dir/run_name)")
    report.add_argument("--out", help="HTML file to write (default: FIRST_RUN_DIR/report.html)")
    report.add_argument(
        "--max-trajectories",
        type=int,
        default=400,
        help="trajectories per run in the page, evenly spaced steps (default 400); the run's "
        "trajectories.jsonl.gz keeps them all",
    )
    report.add_argument("--title", default="", help="page title (default: the run names)")
    report.set_defaults(fn=_cmd_report)
