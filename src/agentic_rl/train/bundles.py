"""Replay bundles: every RL step's training data, saved in the run directory when
`trainer.save_batches=true`, so that `agentic-rl replay` (replay.py) can run the step's reward
shaping, batch filters, advantages and update again and compare them with what was logged.

One directory per step (written into a temporary directory and renamed, so a killed run never
leaves half a bundle)::

    RUN/batches/step_000012/
        tensors.safetensors   the step's generated samples, concatenated over samples:
                                token_ids (int32), loss_mask (int8), logprobs (float32),
                                token_versions (int32, only when recorded), lengths [S] (int64)
                              the training batch the update ran on, each row cut to its length
                              and concatenated: batch_advantages (float32), batch_loss_mask
                              (float32, after the overlong filter), batch_lengths [N] (int64)
        bundle.json           format, step, config (resolved), code (package version, git
                              commit), weights (the checkpoint of step - 1: the weights the step
                              sampled with and updated from), samples (per generated sample:
                              episode, prompt_length, turn_spans, step_rewards, reward (as
                              trained, after shaping), outcome_reward (before shaping), group_id,
                              task_id, anchors, policy_version, terminated, truncated, metrics,
                              completion_text), episode_tasks, kept (indices of the generated
                              episodes trained on, in batch order; for reading, replay filters
                              again), metrics (those logged)

The samples are those `collect` generated, every rollout batch of the step (dynamic sampling
may run several), with the rewards shaping left on them: the overlong penalty is undone from
`outcome_reward` at replay. TTRL's majority vote replaces the env reward for good; replay votes
again from the samples' text, so the env reward is not needed.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from agentic_rl.checkpoint.layout import CheckpointError, checkpoints_dir, step_dir_name
from agentic_rl.config.schema import Config
from agentic_rl.learner.batch import Episodes, TrainBatch
from agentic_rl.train.shaping import OUTCOME
from agentic_rl.types import Trajectory

BATCHES_DIRNAME = "batches"
BUNDLE_FILE = "bundle.json"
TENSORS_FILE = "tensors.safetensors"
FORMAT = 1


class BundleError(CheckpointError):
    """A replay bundle is missing, incomplete or cannot be replayed (like a checkpoint, a run's
    artifact on disk: the command line reports it in one line)."""


def bundle_dir(run: Path, step: int) -> Path:
    """Where the bundle of `step` of run directory `run` lives."""
    return Path(run) / BATCHES_DIRNAME / step_dir_name(step)


@functools.cache
def code_version() -> dict[str, Any]:
    """The installed package version and, for a git checkout, its commit (and whether the
    working tree had uncommitted changes to tracked files); None where unknown."""
    try:
        version: str | None = importlib.metadata.version("agentic-rl")
    except importlib.metadata.PackageNotFoundError:
        version = None
    source = Path(__file__).resolve().parent
    commit, dirty = None, None
    try:
        commit = (
            subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=source, capture_output=True, text=True, timeout=10
            ).stdout.strip()
            or None
        )
        if commit:
            status = subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=source,
                capture_output=True,
                text=True,
                timeout=30,
            )
            dirty = bool(status.stdout.strip()) if status.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):  # no git, not a checkout
        pass
    return {"version": version, "git_commit": commit, "git_dirty": dirty}


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return {"__tuple__": [_jsonable(v) for v in value]}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def _from_json(value: Any) -> Any:
    """Undo `_jsonable`: tuples (anchors must stay hashable) come back as tuples."""
    if isinstance(value, dict):
        if set(value) == {"__tuple__"}:
            return tuple(_from_json(v) for v in value["__tuple__"])
        return {k: _from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    return value


def _sample_record(sample: Trajectory, episode: int) -> dict[str, Any]:
    return {
        "episode": episode,
        "prompt_length": sample.prompt_length,
        "turn_spans": [list(span) for span in sample.turn_spans],
        "step_rewards": list(sample.step_rewards),
        "reward": sample.reward,
        "outcome_reward": sample.metrics.get(OUTCOME, sample.reward),
        "group_id": sample.group_id,
        "task_id": sample.task_id,
        "anchors": _jsonable(list(sample.anchors)),
        "policy_version": sample.policy_version,
        "terminated": sample.terminated,
        "truncated": sample.truncated,
        "metrics": dict(sample.metrics),
        "completion_text": sample.completion_text,
    }


@dataclass
class StepRecorder:
    """What one training step hands to its bundle: the generated and kept episodes
    (`loop.train_step`) and the batch the update ran on (`loop.update_policy`)."""

    generated: Episodes | None = None
    kept: Episodes | None = None
    batch: TrainBatch | None = None
    seen_batch: bool = False

    def episodes(self, generated: Episodes, kept: Episodes) -> None:
        self.generated, self.kept = generated, kept

    def set_batch(self, batch: TrainBatch | None) -> None:
        self.batch, self.seen_batch = batch, True


def write_bundle(
    run: Path, step: int, cfg: Config, recorder: StepRecorder, metrics: dict[str, Any]
) -> Path:
    """Write the bundle of `step` (module docstring) and return its directory."""
    generated, kept = recorder.generated, recorder.kept
    if generated is None or kept is None or not recorder.seen_batch:
        raise BundleError(f"step {step}: the step recorded no episodes or batch to save")
    flat: list[tuple[int, Trajectory]] = [
        (e, s) for e, samples in enumerate(generated.samples) for s in samples
    ]
    # kept episodes are generated ones (the filters select, never copy): found by identity
    index = {id(samples[0]): e for e, samples in enumerate(generated.samples) if samples}
    tensors: dict[str, torch.Tensor] = {
        "lengths": torch.tensor([len(s.token_ids) for _, s in flat], dtype=torch.long),
        "token_ids": torch.tensor([t for _, s in flat for t in s.token_ids], dtype=torch.int32),
        "loss_mask": torch.tensor([m for _, s in flat for m in s.loss_mask], dtype=torch.int8),
        "logprobs": torch.tensor([p for _, s in flat for p in s.logprobs], dtype=torch.float32),
    }
    if flat and all(s.token_versions for _, s in flat):
        tensors["token_versions"] = torch.tensor(
            [v for _, s in flat for v in s.token_versions], dtype=torch.int32
        )
    batch = recorder.batch
    if batch is not None:
        advantages, masks = batch_rows(batch)
        tensors["batch_lengths"] = torch.tensor([len(a) for a in advantages], dtype=torch.long)
        tensors["batch_advantages"] = torch.cat(advantages)
        tensors["batch_loss_mask"] = torch.cat(masks)
    step_num = int(step)
    weights = checkpoints_dir(Path(".")) / step_dir_name(step_num - 1)
    data = {
        "format": FORMAT,
        "step": step_num,
        "config": cfg.to_dict(),
        "code": code_version(),
        "weights": {"checkpoint": str(weights), "step": step_num - 1},
        "episode_tasks": [task.task_id for task in generated.tasks],
        "kept": [index.get(id(samples[0]), -1) for samples in kept.samples],
        "samples": [_sample_record(s, e) for e, s in flat],
        "metrics": {k: v for k, v in metrics.items()},
    }
    final = bundle_dir(run, step_num)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".tmp-{final.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp / TENSORS_FILE))
    (tmp / BUNDLE_FILE).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    if final.exists():  # a killed attempt's bundle of this step: the resumed run's replaces it
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


@dataclass
class Bundle:
    """A bundle read back: its JSON fields, the generated episodes (rewards as before shaping)
    and the training batch's per-row advantages and loss masks."""

    path: Path
    data: dict[str, Any]
    samples: list[list[Trajectory]]  # per generated episode
    advantages: list[torch.Tensor]  # per batch row, cut to its length
    loss_masks: list[torch.Tensor]

    @property
    def step(self) -> int:
        return int(self.data["step"])

    @property
    def run(self) -> Path:
        """The run directory the bundle belongs to (RUN/batches/step_N)."""
        return self.path.parent.parent

    @property
    def weights(self) -> Path:
        """The checkpoint with the weights the step sampled with and updated from."""
        return self.run / self.data["weights"]["checkpoint"]


def read_bundle(path: Path) -> Bundle:
    """Read a bundle directory written by `write_bundle`; the samples' rewards are reset to
    their value before reward shaping (the trainer's shaping runs again at replay)."""
    path = Path(path)
    meta, tensor_file = path / BUNDLE_FILE, path / TENSORS_FILE
    if not meta.is_file() or not tensor_file.is_file():
        raise BundleError(
            f"{path} is not a replay bundle (no {BUNDLE_FILE} / {TENSORS_FILE}); bundles are "
            "RUN/batches/step_N, written by runs with trainer.save_batches=true"
        )
    data = json.loads(meta.read_text(encoding="utf-8"))
    if data.get("format") != FORMAT:
        raise BundleError(f"{meta}: bundle format {data.get('format')} (this code reads {FORMAT})")
    tensors = load_file(str(tensor_file))
    lengths = tensors["lengths"].tolist()
    starts = [sum(lengths[:i]) for i in range(len(lengths))]
    versions = tensors.get("token_versions")
    episodes: list[list[Trajectory]] = [[] for _ in data["episode_tasks"]]
    for record, start, n in zip(data["samples"], starts, lengths, strict=True):
        metrics = dict(record["metrics"])
        metrics.pop(OUTCOME, None)  # the shaping stages set it again
        sample = Trajectory(
            token_ids=tensors["token_ids"][start : start + n].tolist(),
            loss_mask=tensors["loss_mask"][start : start + n].tolist(),
            logprobs=tensors["logprobs"][start : start + n].tolist(),
            prompt_length=record["prompt_length"],
            turn_spans=[tuple(span) for span in record["turn_spans"]],
            step_rewards=list(record["step_rewards"]),
            reward=record["outcome_reward"],
            group_id=record["group_id"],
            task_id=record["task_id"],
            anchors=_from_json(record["anchors"]),
            policy_version=record["policy_version"],
            token_versions=versions[start : start + n].tolist() if versions is not None else [],
            terminated=record["terminated"],
            truncated=record["truncated"],
            metrics=metrics,
            completion_text=record["completion_text"],
        )
        episodes[record["episode"]].append(sample)
    advantages: list[torch.Tensor] = []
    masks: list[torch.Tensor] = []
    if "batch_lengths" in tensors:
        row_lengths = tensors["batch_lengths"].tolist()
        advantages = list(tensors["batch_advantages"].split(row_lengths))
        masks = list(tensors["batch_loss_mask"].split(row_lengths))
    return Bundle(path, data, episodes, advantages, masks)


def batch_rows(batch: TrainBatch) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """A batch's advantages and loss masks per row, cut to each row's length (as saved)."""
    assert batch.advantages is not None
    lengths = batch.attention_mask.sum(dim=1).cpu()
    adv = [batch.advantages[i, : int(n)].float().cpu() for i, n in enumerate(lengths)]
    mask = [batch.loss_mask[i, : int(n)].float().cpu() for i, n in enumerate(lengths)]
    return adv, mask
