"""Bounded load test of the three HTTP servers on loopback: requests/s, p50/p99 latency, errors,
and nothing lost.

Each server runs as its real CLI in a child process behind its bearer token (the guard of
tools/http_guard.py is on the measured path): `serve-retriever` (BM25 over the built-in
search-QA corpus), `serve-sandbox` (4 workers) and `serve-policy` (the tiny random model,
4 new tokens a call: this measures the server, not the model). N concurrent clients (one asyncio
process, httpx) send requests back to back for a fixed time. "Nothing lost": every request sent
got an answer, and every 200 answer is checked for being the right one: the retriever returns
the expected top document for each query (computed in-process over the same corpus), the
sandbox prints N*N for the N it was sent, and every answered chat call is recorded by the
policy server as its own episode (read back from GET /v1/episodes).

    .venv/bin/python bench/server_load.py --clients 32 --seconds 60
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "load-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def free_port() -> int:
    from agentic_rl.retrieval.server import bind_socket

    sock = bind_socket()
    port = sock.getsockname()[1]
    sock.close()
    return port


def start(cmd: list[str], url: str, timeout_s: float = 300) -> subprocess.Popen:
    env = {**os.environ, "AGENTIC_RL_API_TOKEN": TOKEN, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{cmd[3]} exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError(f"{cmd[3]} did not start within {timeout_s} s")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def load(url: str, clients: int, seconds: float, make: Any, check: Any) -> dict[str, Any]:
    """`clients` loops of make(i) -> (path, body) requests for `seconds`; check(i, json) -> bool
    for 200 answers."""
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    sent = answered = wrong = transport_errors = 0
    counter = iter(range(10**9))
    deadline = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits, headers=AUTH) as http:

        async def client() -> None:
            nonlocal sent, answered, wrong, transport_errors
            while time.monotonic() < deadline:
                i = next(counter)
                path, body, headers = make(i)
                sent += 1
                start_t = time.perf_counter()
                try:
                    response = await http.post(path, json=body, headers=headers)
                except httpx.HTTPError:
                    transport_errors += 1
                    continue
                latencies.append((time.perf_counter() - start_t) * 1000)
                answered += 1
                key = str(response.status_code)
                statuses[key] = statuses.get(key, 0) + 1
                if response.status_code == 200 and not check(i, response.json()):
                    wrong += 1

        began = time.monotonic()
        await asyncio.gather(*(client() for _ in range(clients)))
        elapsed = time.monotonic() - began
    ok = statuses.get("200", 0)
    return {
        "clients": clients,
        "seconds": round(elapsed, 1),
        "sent": sent,
        "answered": answered,
        "transport_errors": transport_errors,
        "statuses": statuses,
        "errors": answered - ok + transport_errors,
        "wrong_answers": wrong,
        "requests_per_s": round(ok / elapsed, 1),
        "p50_ms": round(percentile(latencies, 0.50), 1),
        "p99_ms": round(percentile(latencies, 0.99), 1),
    }


def bench_retrieval(clients: int, seconds: float, work: Path) -> dict[str, Any]:
    from agentic_rl.retrieval.corpus import load_corpus, write_builtin_corpus
    from agentic_rl.retrieval.index import build_index
    from agentic_rl.tools.search import BM25Search

    corpus = work / "corpus.jsonl"
    write_builtin_corpus(corpus, num_entities=500)
    build_index(corpus, "bm25", work / "index")
    docs = load_corpus(corpus)
    queries = [doc["contents"].split("\n")[0].strip('"') for doc in docs]
    expected = [row[0]["document"]["id"] for row in BM25Search(docs).retrieve(queries, topk=3)]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "agentic_rl.retrieval.cli", "serve-retriever"]
    proc = start([*cmd, str(work / "index"), "--port", str(port)], url)
    try:

        def make(i: int):
            q = queries[i % len(queries)]
            return "/retrieve", {"queries": [q], "topk": 3, "return_scores": True}, None

        def check(i: int, body: dict) -> bool:
            return body["result"][0][0]["document"]["id"] == expected[i % len(queries)]

        result = asyncio.run(load(url, clients, seconds, make, check))
    finally:
        stop(proc)
    return {"server": "retrieval (bm25, 662 docs)", **result}


def bench_sandbox(clients: int, seconds: float, workers: int) -> dict[str, Any]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "agentic_rl.cli", "serve-sandbox", "--port", str(port)]
    proc = start([*cmd, "--workers", str(workers)], url)
    try:

        def make(i: int):
            return "/run", {"code": f"print({i} * {i})"}, None

        def check(i: int, body: dict) -> bool:
            return body["stdout"] == f"{i * i}\n" and body["ok"]

        result = asyncio.run(load(url, clients, seconds, make, check))
    finally:
        stop(proc)
    return {"server": f"sandbox ({workers} workers)", **result}


def bench_policy(clients: int, seconds: float, work: Path) -> dict[str, Any]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "agentic_rl.cli", "serve-policy", "calculator_grpo"]
    cmd += ["model.name=tiny", f"trainer.out_dir={work}", "--port", str(port)]
    cmd += ["--max-tokens", "4", "--out", str(work / "episodes.jsonl")]
    proc = start(cmd, url)
    try:

        def make(i: int):
            body = {"messages": [{"role": "user", "content": f"call {i}"}], "max_tokens": 4}
            return "/v1/chat/completions", body, {"X-Episode-Id": f"load-{i}"}

        def check(i: int, body: dict) -> bool:
            return body.get("episode_id") == f"load-{i}"

        result = asyncio.run(load(url, clients, seconds, make, check))
        recorded = httpx.get(f"{url}/v1/episodes", headers=AUTH, timeout=60).json()["episodes"]
        result["episodes_recorded"] = len(recorded)
        result["lost"] = result["statuses"].get("200", 0) - len(recorded)
    finally:
        stop(proc)
    return {"server": "serve-policy (tiny model, 4 tokens)", **result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--sandbox-workers", type=int, default=4)
    parser.add_argument(
        "--servers",
        nargs="+",
        default=["retrieval", "sandbox", "policy"],
        choices=["retrieval", "sandbox", "policy"],
    )
    parser.add_argument("--out", default=str(ROOT / "bench/results/server_load.json"))
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="server-load-") as tmp:
        work = Path(tmp)
        for name in args.servers:
            if name == "retrieval":
                rows.append(bench_retrieval(args.clients, args.seconds, work))
            elif name == "sandbox":
                rows.append(bench_sandbox(args.clients, args.seconds, args.sandbox_workers))
            else:
                rows.append(bench_policy(args.clients, args.seconds, work))
            print(json.dumps(rows[-1]), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"clients": args.clients, "seconds": args.seconds, "rows": rows}, indent=2)
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
