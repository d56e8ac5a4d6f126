"""Soak with faults: a search-agent training run whose retrieval server is killed (SIGKILL) and
restarted again and again, and whose trainer is killed with SIGKILL and resumed, must end with
the same metrics as the same run undisturbed.

Both runs train `search_r1_grpo` (GRPO, two-hop questions) on the bundled model with a short
scripted-expert warm start, so the policy really searches, against `serve-retriever` (BM25 over
the two-hop corpus) in a child process (`env.options.retriever_url`). The disturbed run:

- the retriever is killed with SIGKILL every `--retriever-every` seconds and restarted after
  `--retriever-down` seconds. Searches that fail meanwhile raise ToolInfrastructureError: the
  episode ends, the batch is replayed with the same seed once the server is back
  (rollout.infra_retries, rollout.infra_retry_wait_s), and nothing of the outage is trained on;
- the trainer is killed with SIGKILL each time a new step checkpoint appears at the steps given
  by `--kill-after-steps` (mid-way through the next step) and restarted with the same command,
  which resumes from the last checkpoint (trainer.resume).

The run is deterministic on CPU (seeded per step, a replayed batch is the batch an undisturbed
run plays, a resumed run reproduces the uninterrupted one), so every per-step training metric and
the final held-out evaluation must match the undisturbed run exactly; the script reports
the largest difference, the faults injected and the replays counted.

    .venv/bin/python bench/soak_faults.py
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
IGNORED = ("seconds", "time", "tokens_per_s", "infra_", "memory", "rss", "wall")


class Retriever:
    """`serve-retriever` in a child process on a fixed port."""

    def __init__(self, index: Path, port: int) -> None:
        self.index, self.port = index, port
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None
        self.kills = 0

    def start(self) -> None:
        cmd = [sys.executable, "-m", "agentic_rl.retrieval.cli", "serve-retriever"]
        cmd += [str(self.index), "--port", str(self.port)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("retriever did not start")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.kills += 1


def train_cmd(out: Path, url: str, args: argparse.Namespace) -> list[str]:
    overrides = [
        f"model.name={args.model}",
        f"env.options.retriever_url={url}",
        f"trainer.out_dir={out}",
        "trainer.run_name=run",
        f"trainer.steps={args.steps}",
        "trainer.save_every=1",
        "trainer.eval_every=0",
        "trainer.progress=false",
        "trainer.max_minutes=0",
        "rollout.tasks_per_step=2",
        "rollout.group_size=2",
        "rollout.max_turns=3",
        "rollout.infra_retries=6",
        "rollout.infra_retry_wait_s=2",
        f"warm_start.num_tasks={args.warm_start}",
        "warm_start.epochs=2",
        f"env.num_eval_tasks={args.eval_tasks}",
        "optim.micro_batch_size=4",
    ]
    return [sys.executable, "-m", "agentic_rl.cli", "train", "search_r1_grpo", *overrides]


def metric_rows(run: Path) -> dict[tuple[int, str], float]:
    rows: dict[tuple[int, str], float] = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        for key, value in row.items():
            if key == "step" or any(word in key for word in IGNORED):
                continue
            if isinstance(value, int | float):
                rows[(int(row["step"]), key)] = float(value)
    return rows


def last_step(run: Path) -> int:
    """Step of the run's latest complete checkpoint (-1: none yet)."""
    from agentic_rl.checkpoint.layout import latest_checkpoint

    last = latest_checkpoint(run) if run.exists() else None
    return int(last.name.split("_")[-1]) if last is not None else -1


def run_undisturbed(work: Path, url: str, args: argparse.Namespace) -> float:
    start = time.monotonic()
    subprocess.run(train_cmd(work / "a", url, args), check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - start


def run_disturbed(
    work: Path, retriever: Retriever, args: argparse.Namespace
) -> tuple[float, dict[str, Any]]:
    cmd = train_cmd(work / "b", retriever.url, args)
    run = work / "b" / "run"
    faults: dict[str, Any] = {"trainer_kills": [], "retriever_kills": 0}
    done = threading.Event()

    def flap_retriever() -> None:
        while not done.wait(args.retriever_every):
            retriever.kill()
            done.wait(args.retriever_down)
            retriever.start()

    flapper = threading.Thread(target=flap_retriever, daemon=True)
    start = time.monotonic()
    flapper.start()
    pending = sorted(args.kill_after_steps)
    log = (work / "disturbed.log").open("ab")  # a pipe could fill up and block the trainer
    while True:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
        killed = False
        while proc.poll() is None:
            time.sleep(0.2)
            if pending and last_step(run) >= pending[0]:
                time.sleep(args.kill_delay)  # mid-way through the next step
                if proc.poll() is None:
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait()
                    faults["trainer_kills"].append({"after_step": pending[0]})
                    killed = True
                pending.pop(0)
        if not killed:
            if proc.returncode != 0:
                done.set()
                log.close()
                tail = (work / "disturbed.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"trainer failed: {tail}")
            break
    done.set()
    flapper.join()
    log.close()
    text = (work / "disturbed.log").read_text(errors="replace")
    faults["retriever_kills"] = retriever.kills
    faults["infra_failure_messages"] = text.count("tool infrastructure failed")
    return time.monotonic() - start, faults


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warm-start", type=int, default=16, help="expert demo episodes")
    parser.add_argument("--eval-tasks", type=int, default=8)
    parser.add_argument("--retriever-every", type=float, default=15.0)
    parser.add_argument("--retriever-down", type=float, default=3.0)
    parser.add_argument("--kill-after-steps", type=int, nargs="*", default=[2, 4])
    parser.add_argument("--kill-delay", type=float, default=8.0)
    parser.add_argument("--out", default=str(ROOT / "bench/results/soak_faults.json"))
    parser.add_argument(
        "--keep", type=Path, help="keep the two runs (metrics, trajectories, logs) in this folder"
    )
    args = parser.parse_args()

    from agentic_rl.envs.search.multihop import build_multihop_corpus
    from agentic_rl.retrieval.corpus import write_corpus
    from agentic_rl.retrieval.index import build_index
    from agentic_rl.retrieval.server import bind_socket

    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        write_corpus(work / "corpus.jsonl", build_multihop_corpus())
        build_index(work / "corpus.jsonl", "bm25", work / "index")
        sock = bind_socket()
        port = sock.getsockname()[1]
        sock.close()
        retriever = Retriever(work / "index", port)
        retriever.start()
        try:
            wall_a = run_undisturbed(work, retriever.url, args)
            print(f"undisturbed run: {wall_a:.0f} s", flush=True)
            wall_b, faults = run_disturbed(work, retriever, args)
            print(f"disturbed run: {wall_b:.0f} s, faults {faults}", flush=True)
        finally:
            retriever.kill()
        a, b = metric_rows(work / "a" / "run"), metric_rows(work / "b" / "run")
        infra = [
            json.loads(line)
            for line in (work / "b" / "run" / "metrics.jsonl").read_text().splitlines()
        ]
    replays = sum(r.get("train/infra_retried", 0) for r in infra)
    dropped = sum(r.get("train/infra_dropped", 0) for r in infra)
    missing = sorted(set(a) ^ set(b))
    diffs = {f"{s}:{k}": abs(a[(s, k)] - b[(s, k)]) for s, k in set(a) & set(b)}
    worst = max(diffs.values(), default=0.0)
    final = {k: v for (s, k), v in a.items() if s == max(s for s, _ in a) and "eval" in k}
    result = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "wall_s": {"undisturbed": round(wall_a), "disturbed": round(wall_b)},
        "faults": faults,
        "episodes_replayed": replays,
        "episodes_dropped": dropped,
        "metrics_compared": len(diffs),
        "metrics_missing_in_one_run": [f"{s}:{k}" for s, k in missing],
        "max_abs_difference": worst,
        "differing": {k: v for k, v in sorted(diffs.items()) if v > 0},
        "final_eval_undisturbed": final,
        "identical": worst == 0.0 and not missing,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: result[k] for k in result if k != "differing"}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
