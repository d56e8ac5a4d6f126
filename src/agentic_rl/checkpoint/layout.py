"""Where checkpoints live: the names of a checkpoint's files, its `step_*` directory, finding
the complete checkpoints of a run (`list_checkpoints`, `latest_checkpoint`) and deleting old
ones (`prune_checkpoints`). The layout and the atomic save are described in io.py. Also the layout checks of
checkpoints written by several processes (`check_layout`) and `CheckpointError`.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from agentic_rl.errors import UserInputError

CHECKPOINTS_DIRNAME = "checkpoints"
MODEL_FILE = "model.safetensors"
ADAPTER_DIR = "adapter"
OPTIMIZER_FILE = "optimizer.pt"
TRAINER_STATE_FILE = "trainer_state.json"
RNG_FILE = "rng.pt"
COMPLETE_MARKER = "COMPLETE"
TMP_PREFIX = ".tmp-"

_STEP_DIR_RE = re.compile(r"^step_(\d+)$")


def checkpoints_dir(out_dir: Path) -> Path:
    """The directory that holds every `step_*` checkpoint of run `out_dir`."""
    return Path(out_dir) / CHECKPOINTS_DIRNAME


def step_dir_name(step: int) -> str:
    """Directory name of the checkpoint for `step` (zero-padded so names sort like steps)."""
    return f"step_{step:06d}"


def _step_of(path: Path) -> int | None:
    match = _STEP_DIR_RE.match(path.name)
    return int(match.group(1)) if match else None


def list_checkpoints(out_dir: Path) -> list[Path]:
    """Complete checkpoints of run `out_dir`, oldest step first.

    A directory counts only if it has the `COMPLETE` marker; half-written or foreign directories
    are ignored.
    """
    root = checkpoints_dir(out_dir)
    if not root.is_dir():
        return []
    found: list[tuple[int, Path]] = []
    for child in root.iterdir():
        step = _step_of(child)
        if step is not None and child.is_dir() and (child / COMPLETE_MARKER).is_file():
            found.append((step, child))
    return [path for _, path in sorted(found)]


def latest_checkpoint(out_dir: Path) -> Path | None:
    """The complete checkpoint with the highest step under `out_dir/checkpoints`, or None."""
    checkpoints = list_checkpoints(out_dir)
    return checkpoints[-1] if checkpoints else None


def prune_checkpoints(out_dir: Path, keep_last: int, protect: Path | None = None) -> list[Path]:
    """Delete complete checkpoints beyond the newest `keep_last` and stale `.tmp-*` dirs.

    `protect` is never deleted (the checkpoint just written, even if a higher step exists from an
    abandoned run). Returns the removed paths.
    """
    root = checkpoints_dir(out_dir)
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    # Only one process saves at a time, so every temp dir still here is from a crashed save.
    for child in root.iterdir():
        if child.name.startswith(TMP_PREFIX) and child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
            removed.append(child)
    if keep_last > 0:
        complete = list_checkpoints(out_dir)
        for path in complete[: max(0, len(complete) - keep_last)]:
            if protect is not None and path.resolve() == Path(protect).resolve():
                continue
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def drop_optimizer_states(out_dir: Path, keep: Path) -> list[Path]:
    """Delete the optimizer state of every complete checkpoint of run `out_dir` but `keep` (the
    one just written): a resume always starts from the latest checkpoint, and AdamW's moments
    are twice the size of the weights, so older checkpoints keep their weights only. Returns
    the removed files."""
    removed = []
    for path in list_checkpoints(out_dir):
        state = path / OPTIMIZER_FILE
        if path.resolve() != Path(keep).resolve() and state.is_file():
            state.unlink()
            removed.append(state)
    return removed


class CheckpointError(UserInputError, RuntimeError):
    """A checkpoint is missing, incomplete or does not match what is being loaded into it."""


SHARDED_DIR = "sharded"
LAYOUT_FILE = "distributed.json"


def is_sharded(path: Path) -> bool:
    """Was the checkpoint at `path` written by a sharded (torchrun) run?"""
    return (Path(path) / LAYOUT_FILE).is_file()


def written_by(path: Path) -> tuple[bool, int]:
    """(sharded?, number of processes) of the run that wrote the checkpoint at `path`."""
    layout = Path(path) / LAYOUT_FILE
    if not layout.is_file():
        return False, 1
    return True, int(json.loads(layout.read_text())["world_size"])


def check_layout(path: Path, world_size: int, sharded: bool) -> None:
    """Raise a CheckpointError saying what to do when `path` was not written by a run like the
    one resuming it: `world_size` processes, sharded (learner.strategy=fsdp2) or not."""
    saved_sharded, saved = written_by(path)
    if (saved_sharded, saved) == (sharded, world_size):
        return

    def describe(is_sharded: bool, n: int) -> str:
        if not is_sharded:
            return "a single process (learner.strategy=single)"
        return f"{n} process{'es' if n != 1 else ''} (learner.strategy=fsdp2)"

    if saved_sharded:
        resume = (
            f"resume it with `torchrun --nproc_per_node={saved} -m agentic_rl.cli train ... "
            "learner.strategy=fsdp2`"
        )
    else:
        resume = "resume it in one process without torchrun (learner.strategy=single)"
    raise CheckpointError(
        f"checkpoint {path} was written by {describe(saved_sharded, saved)} but this run has "
        f"{describe(sharded, world_size)}: {resume}, or start a new run from its weights "
        f"(`agentic-rl export {path} --out DIR`, then model.name=DIR in another trainer.out_dir)"
    )
