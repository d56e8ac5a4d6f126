"""A run directory -> the data one report shows: its metrics as series, its evaluations, its config
and summary, and a sample of its logged trajectories (train/trajectory_log.py) small enough to
open fast.

Trajectories are sampled by whole steps: every record of the file when they fit in the budget,
else evenly spaced (step, split)s (the first and the last of each split included), the same number
of records from each (whole groups first: the file keeps a step's groups together). Token
pieces are stored once per run (`vocab`), records carry ids only.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from agentic_rl.logging import METRICS_FILE, read_metrics
from agentic_rl.train.trajectory_log import TRAJECTORY_FILE, read_trajectories, scan_trajectories

# Record fields the report drops (pieces go to the run's vocab) or shortens.
_FLOAT_FIELDS = ("lp", "learner_lp", "ref_lp", "adv")


class ReportError(ValueError):
    """A run directory the report cannot read."""


def load_run(path: Path, max_trajectories: int = 400, name: str | None = None) -> dict[str, Any]:
    """Everything the report shows of the run in `path` (a run directory)."""
    path = Path(path)
    if not path.is_dir():
        raise ReportError(f"{path} is not a directory (pass a run directory, e.g. runs/RECIPE)")
    metrics_path = path / METRICS_FILE
    if not metrics_path.exists() and not (path / TRAJECTORY_FILE).exists():
        raise ReportError(f"{path} has no {METRICS_FILE} or {TRAJECTORY_FILE}: not a run directory")
    records = read_metrics(metrics_path) if metrics_path.exists() else []
    trajectories, vocab, logged = sample_trajectories(path, max_trajectories)
    return {
        "name": name or path.name,
        "path": str(path),
        "config": _read_json(path / "config.json"),
        "summary": _read_json(path / "summary.json"),
        "series": metric_series(records),
        "evals": eval_rows(records),
        "trajectories": trajectories,
        "vocab": vocab,
        "logged_trajectories": logged,
    }


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def metric_series(records: list[dict[str, Any]]) -> dict[str, list[list[float]]]:
    """{metric: [[step, value], ...]} in step order; the last record of a step wins (a resumed
    run's metrics.jsonl has no duplicates, a hand-edited one may). Missing values are skipped;
    `time/elapsed_minutes` is the wall time since the first record."""
    series: dict[str, dict[int, float]] = {}
    start = None
    for record in records:
        step = record.get("step")
        if not isinstance(step, int):
            continue
        for key, value in record.items():
            if key == "time" and isinstance(value, (int, float)):
                start = value if start is None else start
                if any(k.startswith("train/") for k in record):
                    series.setdefault("time/elapsed_minutes", {})[step] = (value - start) / 60
                continue
            if key == "step" or not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            if math.isfinite(value):
                series.setdefault(key, {})[step] = float(value)
    return {key: [[s, v] for s, v in sorted(points.items())] for key, points in series.items()}


def eval_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per evaluation: {"stage", "step", metric: value}. Evaluations are the metric
    prefixes that start with "eval" ("eval_before", "eval_warm_start", "eval")."""
    rows = []
    for record in records:
        prefixes = {k.split("/", 1)[0] for k in record if "/" in k}
        for prefix in sorted(p for p in prefixes if p.startswith("eval")):
            row: dict[str, Any] = {"stage": prefix, "step": record.get("step")}
            for key, value in record.items():
                if key.startswith(prefix + "/"):
                    row[key.split("/", 1)[1]] = value
            rows.append(row)
    return rows


def choose_records(heads: list[tuple[int, str]], budget: int) -> set[int]:
    """Indices (file order) of at most `budget` records: every (step, split) when all fit, else
    evenly spaced ones per split (first and last included), the same number of records from each
    (8, or fewer where the budget is smaller)."""
    if len(heads) <= budget:
        return set(range(len(heads)))
    by_key: dict[tuple[str, int], list[int]] = {}
    for index, (step, split) in enumerate(heads):
        by_key.setdefault((split, step), []).append(index)
    if budget <= 0:
        return set()
    splits: dict[str, list[tuple[str, int]]] = {}
    for key in sorted(by_key, key=lambda k: (k[1], k[0])):
        splits.setdefault(key[0], []).append(key)
    per = max(min(8, budget), budget // len(by_key))
    n_keys = max(1, budget // per)
    chosen: list[tuple[str, int]] = []
    for keys in splits.values():  # each split gets its share of the steps, ends included
        share = max(1, round(n_keys * len(keys) / len(by_key)))
        chosen += [keys[i] for i in _spread(len(keys), share)]
    while per > 1 and sum(min(per, len(by_key[k])) for k in chosen) > budget:
        per -= 1
    picked = sorted(i for key in chosen for i in by_key[key][:per])
    return set(picked[:budget])


def _spread(n: int, k: int) -> list[int]:
    """k indices spread evenly over range(n), first and last included."""
    if k >= n:
        return list(range(n))
    if k == 1:
        return [n - 1]
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def sample_trajectories(
    path: Path, budget: int
) -> tuple[list[dict[str, Any]], dict[str, str], int]:
    """(sampled records without their pieces, {id: piece} of their tokens, records logged)."""
    file = Path(path) / TRAJECTORY_FILE
    if not file.exists():
        return [], {}, 0
    heads = scan_trajectories(file)
    picked = choose_records(heads, budget)
    vocab: dict[str, str] = {}
    out = []
    for record in read_trajectories(file, keep=lambda index, step, split: index in picked):
        pieces = record.pop("pieces", None) or []
        for token, piece in zip(record.get("ids", []), pieces, strict=False):
            vocab.setdefault(str(token), piece)
        for name in _FLOAT_FIELDS:
            if record.get(name) is not None:
                record[name] = [round(v, 3) for v in record[name]]
        out.append(record)
    return out, vocab, len(heads)
