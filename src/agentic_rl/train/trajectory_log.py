"""What the agent did: a sample of every step's (and every evaluation's) episodes, token by token,
in `RUN_DIR/trajectories.jsonl.gz`. `agentic-rl report` reads it into the trajectory explorer.

One JSON object per trajectory (one line), written as one gzip member per step or evaluation, so
a killed run leaves at most one unfinished member at the end, which the reader ignores; a resumed
run truncates the file to the step it resumes from (as `metrics.jsonl`), and a fresh run starts it
empty. A record holds:

    step, split            the RL step; "train", or the evaluation's metrics prefix ("eval",
                           "eval_before", "eval_warm_start")
    episode, sample        the episode's index in the step, the sample's index in the episode
                           (step-wise rollouts train on one sample per turn)
    group_id, task_id, reward, step_rewards, success, terminated, truncated, metrics,
    prompt_length, policy_version
    trained                whether the learner trained on it (false: a batch filter dropped it;
                           null for evaluations)
    ids, pieces            token ids and the text of each id, decoded once per id (never
                           re-tokenised): "".join(pieces) is the episode's text up to byte-level
                           pieces of multi-byte characters
    mask                   the trajectory's loss mask (1 = sampled by the policy)
    train_mask             the mask the learner used, where it differs (overlong filter,
                           rollout.train_on_observations)
    lp                     behaviour logprobs (those the generator sampled with)
    learner_lp, ref_lp     the learner's and the reference model's logprobs of the same tokens,
                           where the update computed them (null otherwise)
    adv                    per-token advantages of trained samples (null otherwise)
    versions               per-token policy version (-1 = not sampled), null if unrecorded
    turns                  per model turn: its [start, end) span, the observation span after it,
                           its step reward and the parsed action (tool call, answer, error)
    tree                   tree rollouts (rollout.tree): {"id", "leaf", "parent", "shared_turns",
                           "shared_tokens"}, the leaf's place in its tree; null otherwise
    role                   multi-agent envs: the role that wrote the sample's turns (each role's
                           turns are their own samples of the episode); null with one agent

Floats are rounded to 4 decimals. Records start with `{"step": S, "split": "..."` so a reader can
skip a record without parsing it (`read_trajectories(..., keep=...)`).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import random
import re
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentic_rl.learner.batch import Episodes, TrainBatch
    from agentic_rl.types import Trajectory

TRAJECTORY_FILE = "trajectories.jsonl.gz"

_HEAD = re.compile(rb'^\{"step": (-?\d+), "split": "([^"]*)"')


def _round(values: Sequence[float]) -> list[float]:
    return [round(float(v), 4) if math.isfinite(v) else 0.0 for v in values]


class TrajectoryLog:
    """Appends sampled trajectories of a run to `out_dir/trajectories.jsonl.gz`.

    per_step: episodes written per step and per evaluation (whole groups, chosen at random,
    seeded by the step); all of them when there are fewer, -1 for all, 0 for none.
    resume_step: the step a resumed run continues from (later records are dropped); None for a
    fresh run (the file starts empty)."""

    def __init__(
        self,
        out_dir: Path,
        tokenizer: Any,
        fmt: Any = None,
        per_step: int = -1,
        seed: int = 0,
        resume_step: int | None = None,
    ) -> None:
        self.path = Path(out_dir) / TRAJECTORY_FILE
        self.tokenizer = tokenizer
        self.fmt = fmt
        self.per_step = per_step
        self.seed = seed
        self._pieces: dict[int, str] = {}
        if per_step != 0:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        truncate_trajectories(self.path, resume_step if resume_step is not None else -1)

    # ---------------------------------------------------------------------------------------
    # what the loop calls

    def step(self, step: int, generated: Episodes) -> StepTrajectories:
        """Step `step`'s episodes, to be written with the batch once the update has run."""
        return StepTrajectories(self, step, generated)

    def write_step(
        self,
        step: int,
        generated: Episodes,
        kept: Episodes | None = None,
        batch: TrainBatch | None = None,
    ) -> int:
        """Log a training step: a sample of the episodes generated (filtered-out ones included,
        marked `trained: false`), with the batch's advantages and logprobs for the trained ones.
        Returns the number of records written."""
        if self.per_step == 0:
            return 0
        rows: dict[int, int] = {}  # id(trajectory) -> its row in the batch
        if kept is not None and batch is not None:
            flat = [sample for samples in kept.samples for sample in samples]
            rows = {id(sample): row for row, sample in enumerate(flat)}
        episodes = list(generated.samples)
        seen = {id(s) for samples in episodes for s in samples}
        # Samples a filter rebuilt (e.g. TTRL's relabelled copies) are logged as trained too.
        if kept is not None:
            episodes += [s for s in kept.samples if not any(id(x) in seen for x in s)]
        tensors = _batch_rows(batch) if batch is not None else {}
        records = []
        for e in self._sample(step, episodes):
            for k, sample in enumerate(episodes[e]):
                row = rows.get(id(sample))
                extra = (
                    {name: _row(t, row) for name, t in tensors.items()} if row is not None else {}
                )
                records.append(
                    self._record(step, "train", e, k, sample, trained=row is not None, **extra)
                )
        return self._append(records)

    def write_eval(self, step: int, split: str, episodes: list[list[Trajectory]]) -> int:
        """Log an evaluation's episodes under `split` (the metrics prefix, e.g. "eval")."""
        if self.per_step == 0:
            return 0
        records = [
            self._record(step, split, e, k, sample, trained=None)
            for e in self._sample(step, episodes)
            for k, sample in enumerate(episodes[e])
        ]
        return self._append(records)

    # ---------------------------------------------------------------------------------------

    def _sample(self, step: int, episodes: list[list[Trajectory]]) -> list[int]:
        """Indices of the episodes to log: whole groups in a seeded random order, cut at
        `per_step`; all of them when there are no more than that."""
        if self.per_step < 0 or len(episodes) <= self.per_step:
            return list(range(len(episodes)))
        groups: dict[str, list[int]] = {}
        for i, samples in enumerate(episodes):
            groups.setdefault(samples[0].group_id if samples else "", []).append(i)
        order = list(groups.values())
        random.Random(self.seed * 1_000_003 + step).shuffle(order)
        chosen = [i for group in order for i in group][: self.per_step]
        return sorted(chosen)

    def pieces(self, ids: Sequence[int]) -> list[str]:
        """The text of each token id, decoded once per id for the whole run."""
        cache = self._pieces
        for i in ids:
            if i not in cache:
                cache[i] = self.tokenizer.decode([i])
        return [cache[i] for i in ids]

    def _record(
        self,
        step: int,
        split: str,
        episode: int,
        sample: int,
        t: Trajectory,
        trained: bool | None,
        **tensors: list[float] | None,
    ) -> dict[str, Any]:
        n = len(t.token_ids)
        pieces = self.pieces(t.token_ids)
        train_mask = tensors.pop("train_mask", None)
        if train_mask is not None and [int(m) for m in train_mask] == list(t.loss_mask):
            train_mask = None
        return {
            "step": int(step),
            "split": split,
            "episode": episode,
            "sample": sample,
            "group_id": t.group_id,
            "task_id": t.task_id,
            "reward": round(float(t.reward), 6),
            "step_rewards": _round(t.step_rewards),
            "success": float(t.metrics.get("success", 0.0)),
            "terminated": bool(t.terminated),
            "truncated": bool(t.truncated),
            "trained": trained,
            "policy_version": int(t.policy_version),
            "prompt_length": int(t.prompt_length),
            "metrics": {k: _json_number(v) for k, v in t.metrics.items()},
            "ids": list(t.token_ids),
            "pieces": pieces,
            "mask": list(t.loss_mask),
            "train_mask": None if train_mask is None else [int(m) for m in train_mask],
            "lp": _round(t.logprobs),
            "learner_lp": _fit(tensors.get("learner_lp"), n),
            "ref_lp": _fit(tensors.get("ref_lp"), n),
            "adv": _fit(tensors.get("adv"), n),
            "versions": list(t.token_versions) if t.token_versions else None,
            "turns": self._turns(t, pieces),
            # images by reference (a vision-language policy): file and sha256, in token order
            "images": [{"path": i.path, "sha256": i.sha256} for i in t.images] or None,
            "tree": None
            if t.tree is None
            else {
                "id": t.tree.tree_id,
                "leaf": t.tree.leaf,
                "parent": t.tree.parent,
                "shared_turns": t.tree.shared_turns,
                "shared_tokens": t.tree.shared_tokens,
            },
            "role": t.role or None,
        }

    def _turns(self, t: Trajectory, pieces: list[str]) -> list[dict[str, Any]]:
        spans = [(int(s), int(e)) for s, e in t.turn_spans]
        turns = []
        for i, (start, end) in enumerate(spans):
            obs_end = spans[i + 1][0] if i + 1 < len(spans) else len(t.token_ids)
            turns.append(
                {
                    "span": [start, end],
                    "obs": [end, obs_end] if obs_end > end else None,
                    "reward": round(float(t.step_rewards[i]), 6)
                    if i < len(t.step_rewards)
                    else None,
                    "action": self._action("".join(pieces[start:end])),
                }
            )
        return turns

    def _action(self, text: str) -> dict[str, Any] | None:
        """The turn's action as the chat format parses it (for display only)."""
        if self.fmt is None:
            return None
        try:
            action = self.fmt.parse(text, "stop")
        except Exception:  # a display aid: never let a parser quirk stop training
            return None
        out: dict[str, Any] = {"kind": action.kind}
        if action.name:
            out["name"] = action.name
        if action.arguments:
            out["arguments"] = action.arguments
        if action.text:
            out["text"] = action.text
        if action.error:
            out["error"] = action.error
        return out

    def _append(self, records: list[dict[str, Any]]) -> int:
        if not records:
            return 0
        text = "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in records)
        member = gzip.compress(text.encode("utf-8"), compresslevel=6, mtime=0)
        with self.path.open("ab") as f:  # one write: a kill leaves at most a partial last member
            f.write(member)
            f.flush()
            os.fsync(f.fileno())
        return len(records)


class StepTrajectories:
    """A training step's generated episodes, waiting for the batch the update trains on
    (`TrajectoryLog.step`; `loop.update_policy` calls `write`)."""

    def __init__(self, log: TrajectoryLog, step: int, generated: Episodes) -> None:
        self.log, self.step, self.generated = log, step, generated

    def write(self, kept: Episodes, batch: TrainBatch | None) -> int:
        return self.log.write_step(self.step, self.generated, kept, batch)


def _json_number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _batch_rows(batch: TrainBatch) -> dict[str, Any]:
    """The per-token tensors of a batch worth showing, by record field name. The learner's
    logprobs come from `batch.learner_logprobs` where the update fills it, or from the pi_old
    logprobs the update recomputed before its first mini-batch (`old_logprobs`, when
    `behav_logprobs` holds the generator's and they differ)."""
    import torch  # the loop has it loaded; the report reads records without it

    tensors: dict[str, Any] = {"train_mask": batch.loss_mask}
    if batch.advantages is not None:
        tensors["adv"] = batch.advantages
    if batch.ref_logprobs is not None:
        tensors["ref_lp"] = batch.ref_logprobs
    learner = getattr(batch, "learner_logprobs", None)
    behav = batch.behav_logprobs
    if learner is None and behav is not None and not torch.equal(behav, batch.old_logprobs):
        learner = batch.old_logprobs  # recomputed (pi_old); equal ones are a copy of behav
    if learner is not None:
        tensors["learner_lp"] = learner
    return tensors


def _row(tensor: Any, row: int) -> list[float]:
    return tensor[row].detach().float().cpu().tolist()


def _fit(values: list[float] | None, n: int) -> list[float] | None:
    """A padded batch row cut to the trajectory's length, rounded."""
    return None if values is None else _round(values[:n])


# -------------------------------------------------------------------------------------------
# reading


def _lines(path: Path, chunk_size: int = 1 << 20) -> Iterator[bytes]:
    """The complete lines of every complete gzip member of `path`, streamed. A member a killed
    writer left unfinished (or any damaged tail) ends the stream."""
    with Path(path).open("rb") as f:
        decomp = zlib.decompressobj(wbits=31)
        pending = b""  # decompressed bytes of the current member not yet split into lines
        buffered = b""  # compressed input not yet fed
        while True:
            data = buffered or f.read(chunk_size)
            buffered = b""
            if not data:
                return  # end of file: an unfinished member's lines are dropped
            try:
                pending += decomp.decompress(data)
            except zlib.error:
                return
            if decomp.eof:  # member complete: its lines are whole
                yield from (line for line in pending.split(b"\n") if line)
                pending = b""
                buffered = decomp.unused_data
                decomp = zlib.decompressobj(wbits=31)
                if not buffered:
                    buffered = f.read(chunk_size)
                    if not buffered:
                        return


def scan_trajectories(path: Path) -> list[tuple[int, str]]:
    """(step, split) of every record in file order, without parsing the records."""
    out = []
    for line in _lines(path):
        head = _HEAD.match(line)
        if head:
            out.append((int(head.group(1)), head.group(2).decode()))
    return out


def read_trajectories(
    path: Path, keep: Callable[[int, int, str], bool] | None = None
) -> Iterator[dict[str, Any]]:
    """The records of a trajectory file (or a run directory holding one), in file order.
    `keep(index, step, split)` selects records before they are parsed (index: file order)."""
    path = Path(path)
    if path.is_dir():
        path = path / TRAJECTORY_FILE
    if not path.exists():
        return
    for index, line in enumerate(_lines(path)):
        if keep is not None:
            head = _HEAD.match(line)
            if head is None or not keep(index, int(head.group(1)), head.group(2).decode()):
                continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            yield record


def truncate_trajectories(path: Path, keep_through_step: int) -> int:
    """Atomically rewrite `path` keeping the records of steps <= `keep_through_step` (and
    dropping an unfinished last member); returns the number kept. A missing file stays missing."""
    path = Path(path)
    if not path.exists():
        return 0
    kept = [
        line + b"\n"
        for line in _lines(path)
        if (head := _HEAD.match(line)) and int(head.group(1)) <= keep_through_step
    ]
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with tmp.open("wb") as f:
        if kept:
            f.write(gzip.compress(b"".join(kept), compresslevel=6, mtime=0))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return len(kept)
