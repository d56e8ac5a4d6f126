"""Sandbox throughput: warm fork-per-call pool vs a fresh interpreter per call.

Runs N small snippets (default 200) through each configuration and reports executions per
second and p50/p99 latency seen by the caller:

- warm pool: `SandboxPool` workers fork a child per call from an interpreter that has already
  imported the runner (the default mode);
- fresh interpreter: the same pool, limits, namespaces and uid drop, but each child execs a new
  `python -I -c ...` (`fresh_interpreter=True`): the cost of interpreter start-up per call;
- HTTP: the warm pool behind `SandboxServer` (FastAPI if installed), one client;
- plain `python -c` via subprocess.run with no sandbox at all, for scale only.

    .venv/bin/python bench/sandbox_bench.py [--n 200] [--out bench/results/sandbox.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from agentic_rl.tools.sandbox.client import SandboxClient
from agentic_rl.tools.sandbox.limits import SandboxLimits
from agentic_rl.tools.sandbox.pool import SandboxPool
from agentic_rl.tools.sandbox.server import SandboxServer

LIMITS = SandboxLimits(timeout_s=10.0, memory_mb=1024, nproc=32)


def snippets(n: int) -> list[str]:
    """Small, varied cells like a math agent writes: arithmetic, a loop, a print, an error."""
    out = []
    for i in range(n):
        kind = i % 4
        if kind == 0:
            out.append(f"x = {i}\nsum(k * k for k in range(x * 10))")
        elif kind == 1:
            out.append(f"import math\nprint(math.comb({i % 30 + 10}, 5))")
        elif kind == 2:
            out.append(f"from fractions import Fraction\nFraction({i}, {i + 3}) + Fraction(1, 7)")
        else:
            out.append(f"values = [{i}, 0]\nvalues[0] / values[1]")  # ZeroDivisionError
    return out


def measure(run: Callable[[str], object], codes: list[str], concurrency: int) -> dict:
    """Run every snippet (with `concurrency` callers) and time each call."""
    latencies: list[float] = []

    def timed(code: str) -> None:
        start = time.perf_counter()
        run(code)
        latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    if concurrency == 1:
        for code in codes:
            timed(code)
    else:
        with ThreadPoolExecutor(concurrency) as executor:
            list(executor.map(timed, codes))
    wall = time.perf_counter() - start
    ordered = sorted(latencies)
    return {
        "executions": len(codes),
        "concurrency": concurrency,
        "wall_s": round(wall, 3),
        "exec_per_s": round(len(codes) / wall, 1),
        "p50_ms": round(1000 * statistics.median(ordered), 2),
        "p99_ms": round(1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 2),
    }


def checked(pool: SandboxPool) -> Callable[[str], object]:
    def run(code: str) -> object:
        result = pool.run(code)
        if result.timed_out or result.error.startswith("SandboxError"):
            raise RuntimeError(f"benchmark snippet failed in the sandbox: {result}")
        return result

    return run


def plain_subprocess(code: str) -> object:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="snippets per configuration")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "sandbox.json"))
    args = parser.parse_args()
    codes = snippets(args.n)
    rows: dict[str, dict] = {}
    isolation: dict = {}
    for fresh in (False, True):
        for size in (1, 2):
            start = time.perf_counter()
            with SandboxPool(size, LIMITS, fresh_interpreter=fresh) as pool:
                startup = time.perf_counter() - start
                isolation = pool.isolation
                checked(pool)(codes[0])  # warm-up call, not timed
                name = f"{'fresh interpreter' if fresh else 'warm pool'}, {size} worker(s)"
                rows[name] = {**measure(checked(pool), codes, size), "startup_s": round(startup, 3)}
                if not fresh and size == 2:
                    with SandboxServer(pool) as server:
                        client = SandboxClient(server.url)
                        client.run(codes[0])
                        label = f"warm pool over HTTP ({server.backend}), 2 workers, 1 client"
                        rows[label] = measure(client.run, codes, 1)
    rows["plain `python -c`, no sandbox (scale only)"] = measure(plain_subprocess, codes, 1)

    print(f"\n{args.n} snippets, {os.cpu_count()} CPUs, Python {platform.python_version()}\n")
    print("| configuration | exec/s | p50 ms | p99 ms | wall s |")
    print("|---|---:|---:|---:|---:|")
    for name, row in rows.items():
        cells = f"{row['exec_per_s']} | {row['p50_ms']} | {row['p99_ms']} | {row['wall_s']}"
        print(f"| {name} | {cells} |")
    enforced = sorted(k for k, v in isolation.items() if v is True)
    print(f"\nisolation in force: {', '.join(enforced)}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "n": args.n,
        "cpus": os.cpu_count(),
        "loadavg_at_end": os.getloadavg(),
        "python": platform.python_version(),
        "limits": LIMITS.to_dict(),
        "isolation": isolation,
        "results": rows,
    }
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
