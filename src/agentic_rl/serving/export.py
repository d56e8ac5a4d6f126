"""Finished served episodes as JSONL: one line per training sample, and back.

Each line carries everything a Trajectory holds (token ids, loss mask, behaviour logprobs, turn
spans, rewards, group, policy version of each token, metrics) plus `episode_id` and `segment`. The lines are
also valid input for `agentic-rl sft --data` (token-native form).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from agentic_rl.learner.batch import Episodes
from agentic_rl.train.sft import TrajectoryFormatError
from agentic_rl.types import Task, Trajectory

_FIELDS = (
    "token_ids",
    "loss_mask",
    "logprobs",
    "prompt_length",
    "turn_spans",
    "step_rewards",
    "reward",
    "group_id",
    "task_id",
    "policy_version",
    "token_versions",
    "terminated",
    "truncated",
    "metrics",
    "completion_text",
)


def trajectory_record(trajectory: Trajectory, episode_id: str, segment: int) -> dict[str, Any]:
    record: dict[str, Any] = {"episode_id": episode_id, "segment": segment}
    record.update({name: getattr(trajectory, name) for name in _FIELDS})
    record["turn_spans"] = [list(span) for span in trajectory.turn_spans]
    return record


class JsonlWriter:
    """Appends finished episodes to a file, one JSON line per sample (thread-safe)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def write(self, episode_id: str, samples: list[Trajectory]) -> None:
        lines = [json.dumps(trajectory_record(t, episode_id, i)) for i, t in enumerate(samples)]
        with self._lock, self.path.open("a") as fh:
            fh.write("".join(line + "\n" for line in lines))


def _trajectory(record: dict[str, Any], where: str) -> Trajectory:
    missing = [name for name in ("token_ids", "loss_mask", "logprobs") if name not in record]
    if missing:
        raise TrajectoryFormatError(f"{where}: missing {', '.join(missing)}")
    try:
        values = {name: record[name] for name in _FIELDS if name in record}
        values["turn_spans"] = [tuple(span) for span in values.get("turn_spans", [])]
        return Trajectory(**values)
    except (TypeError, ValueError) as err:
        raise TrajectoryFormatError(f"{where}: {err}") from err


def load_episodes(path: str | Path) -> Episodes:
    """Read a served-episodes JSONL file back into trainer `Episodes` (samples grouped by
    `episode_id`, episodes in order of first appearance)."""
    grouped: dict[str, list[Trajectory]] = {}
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise TrajectoryFormatError(f"{where}: not JSON ({err})") from err
        if not isinstance(record, dict) or not isinstance(record.get("episode_id"), str):
            raise TrajectoryFormatError(f"{where}: needs an 'episode_id' string")
        grouped.setdefault(record["episode_id"], []).append(_trajectory(record, where))
    if not grouped:
        raise TrajectoryFormatError(f"{path}: no episodes")
    samples = list(grouped.values())
    return Episodes(samples, [Task(task_id=s[0].task_id, prompt="") for s in samples])
