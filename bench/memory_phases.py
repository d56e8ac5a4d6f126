"""Where a recipe's peak memory comes from: resident memory by phase of a real run.

`ru_maxrss` says how high a run's resident memory went, not when. This runs a recipe in-process
(as `agentic-rl train` does: its warm start, evaluations and RL steps) with a thread that samples
the resident set (`VmRSS`) every 50 ms, and tags each sample with the phase the trainer is in:
`build` (loading the policy, reference, critic), `eval` (greedy held-out evaluation),
`warm_start` (the supervised warm start), `collect` (RL rollouts), `update` (the policy / critic
update) and `other` (checkpoints, logging). It prints, per phase, the resident memory on entry
and its peak, and the process's overall peak.

    .venv/bin/python bench/memory_phases.py search_r1 --set trainer.steps=2
    .venv/bin/python bench/memory_phases.py search_r1 --set trainer.steps=2 optim.micro_batch_size=2

Memory does not depend on machine load, so this is meaningful on a busy machine. Writes
bench/results/memory_phases/RECIPE[-TAG].json.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "memory_phases"


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class PhaseSampler:
    """Samples VmRSS every `period` seconds and keeps, per phase, the entry value and the peak."""

    def __init__(self, period: float = 0.05, cap_mib: float = 0.0) -> None:
        self.period = period
        self.cap_mib = cap_mib
        self.over_cap = False
        self.on_cap: Callable[[], None] | None = None  # called before exiting over the cap
        self.phase = "start"
        self.stats: dict[str, dict[str, float]] = {}
        self.order: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _record(self, value: float) -> None:
        entry = self.stats.setdefault(self.phase, {"entry_mib": value, "peak_mib": value, "n": 0})
        entry["peak_mib"] = max(entry["peak_mib"], value)
        entry["n"] += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            value = rss_mib()
            self._record(value)
            if self.cap_mib and value > self.cap_mib and not self.over_cap:
                # Stop the run before the kernel's OOM killer does (it would lose the table);
                # from this thread, since the main thread may be inside one long kernel.
                self.over_cap = True
                print(f"over the cap: {value:.0f} MiB in phase {self.phase}", flush=True)
                if self.on_cap is not None:
                    self.on_cap()
                os._exit(3)
            time.sleep(self.period)

    def enter(self, phase: str) -> str:
        previous = self.phase
        if previous in self.stats:  # live, so a killed run still shows where memory went
            s = self.stats[previous]
            print(
                f"[memory] {previous}: entry {s['entry_mib']:.0f} MiB, peak {s['peak_mib']:.0f} "
                f"MiB -> {phase}",
                flush=True,
            )
        self.phase = phase
        if phase not in self.stats:
            self.order.append(phase)
        self._record(rss_mib())
        return previous

    def wrap(self, owner: Any, name: str, phase: str) -> None:
        """Tag every call of `owner.name` with `phase` (restoring the caller's phase after)."""
        original: Callable[..., Any] = getattr(owner, name)

        @functools.wraps(original)
        def tagged(*args: Any, **kwargs: Any) -> Any:
            previous = self.enter(phase)
            try:
                return original(*args, **kwargs)
            finally:
                self.enter(previous)

        setattr(owner, name, tagged)

    def __enter__(self) -> PhaseSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("recipe")
    parser.add_argument("--set", nargs="*", default=[], help="config overrides")
    parser.add_argument("--tag", default="", help="suffix of the result file")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--cap-mib", type=float, default=0.0, help="stop the run when RSS passes this (0: never)"
    )
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from agentic_rl.config.load import load_config
    from agentic_rl.train import loop, stages

    sampler = PhaseSampler(cap_mib=args.cap_mib)
    # The names the loop module calls (it imported them from their modules).
    sampler.wrap(loop, "build", "build")
    sampler.wrap(loop, "warm_start", "warm_start")
    sampler.wrap(loop, "_eval_and_log", "eval")
    sampler.wrap(loop, "update_policy", "update")
    original_collector = loop.collector

    def collector(cfg: Any) -> Any:  # tag the returned collect function's calls
        fn = original_collector(cfg)

        def collect(*a: Any, **kw: Any) -> Any:
            previous = sampler.enter("collect")
            try:
                return fn(*a, **kw)
            finally:
                sampler.enter(previous)

        return collect

    loop.collector = collector  # type: ignore[assignment]

    start = time.time()

    def report() -> None:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        result = {
            "recipe": args.recipe,
            "set": args.set,
            "threads": args.threads,
            "stopped_over_cap_mib": args.cap_mib if sampler.over_cap else None,
            "peak_rss_mib": round(peak, 1),
            "wall_seconds": round(time.time() - start, 1),
            "phases": {
                p: {
                    "entry_mib": round(sampler.stats[p]["entry_mib"], 1),
                    "peak_mib": round(sampler.stats[p]["peak_mib"], 1),
                }
                for p in sampler.order
                if p in sampler.stats
            },
        }
        print(f"{'phase':<16}{'entry MiB':>12}{'peak MiB':>12}")
        for p, s in result["phases"].items():
            print(f"{p:<16}{s['entry_mib']:>12.0f}{s['peak_mib']:>12.0f}")
        print(f"peak_rss_mib: {peak:.0f}", flush=True)
        RESULTS.mkdir(parents=True, exist_ok=True)
        name = args.recipe + (f"-{args.tag}" if args.tag else "")
        (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")

    sampler.on_cap = report
    with tempfile.TemporaryDirectory(prefix="memphase-") as out:
        overrides = [f"trainer.out_dir={out}", "trainer.progress=false", *args.set]
        cfg = load_config(args.recipe, overrides)
        with sampler:
            sampler.enter("other")
            stages.train_recipe(cfg)
    report()


if __name__ == "__main__":
    main()
