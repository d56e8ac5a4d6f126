"""The run logger: metrics to JSONL, TensorBoard and the console.

`RunLogger` writes one JSON object per `log` call to `OUT/metrics.jsonl` (the source of truth,
read back with `read_metrics`), mirrors finite scalars to TensorBoard under `OUT/tb/` (and, when
asked, to Weights & Biases under the same names, offline by default: `OUT/wandb/`), and shows a
`rich` progress bar on a terminal or one compact line per step otherwise (CI logs, `nohup`).

The module is named like the stdlib `logging`, which is harmless with absolute imports: inside
the package `import logging` still resolves to the standard library.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

METRICS_FILE = "metrics.jsonl"
TB_DIRNAME = "tb"

_log = logging.getLogger(__name__)

# (label shown, metric names accepted for it, format spec): the few numbers worth a glance.
_KEY_METRICS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("reward", ("reward", "reward_mean"), ".3f"),
    ("success", ("success", "success_rate"), ".2f"),
    ("kl", ("kl",), ".3g"),
    ("entropy", ("entropy",), ".3f"),
    ("tok/s", ("tokens_per_s", "tok_per_s"), ".0f"),
)

Scalar = int | float | None


def _scalar(name: str, value: Any) -> Scalar:
    """Convert a metric to a JSON-safe number: ints stay ints, nan/inf become None."""
    if hasattr(value, "item") and callable(value.item):  # torch / numpy scalars
        try:
            value = value.item()
        except (RuntimeError, ValueError) as err:  # a tensor with more than one element
            raise TypeError(f"metric {name!r} is not a scalar: {value!r}") from err
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    try:
        number = float(value)
    except (TypeError, ValueError) as err:
        raise TypeError(f"metric {name!r} is not a number: {value!r}") from err
    # json.dumps would write NaN/Infinity, which strict JSON parsers reject.
    return number if math.isfinite(number) else None


def _metric_key(prefix: str, name: str) -> str:
    return f"{prefix}/{name}" if prefix else name


def format_metrics(metrics: Mapping[str, Scalar]) -> str:
    """`reward=0.250 success=0.25 kl=0.001 tok/s=812` from whichever key metrics are present."""
    parts = []
    for label, names, spec in _KEY_METRICS:
        for name in names:
            if name in metrics:
                value = metrics[name]
                parts.append(f"{label}={'nan' if value is None else format(value, spec)}")
                break
    return " ".join(parts)


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Read a metrics.jsonl file (or a run directory containing one) back into dicts.

    A line that does not parse (the tail a killed process left half-written) is skipped.
    """
    path = Path(path)
    if path.is_dir():
        path = path / METRICS_FILE
    records = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            record = _parse_line(line)
            if record is not None:
                records.append(record)
    return records


def _parse_line(line: str) -> dict[str, Any] | None:
    line = line.strip()
    if not line:
        return None
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def truncate_metrics(path: Path, keep_through_step: int) -> int:
    """Atomically rewrite `path` keeping only records with step <= `keep_through_step`.

    A resumed run re-logs the steps after its checkpoint; dropping the killed attempt's records
    for those steps avoids duplicates. Returns the number of records kept.
    """
    path = Path(path)
    if not path.exists():
        return 0
    kept = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            record = _parse_line(line)
            step = record.get("step") if record is not None else None
            if isinstance(step, int) and step <= keep_through_step:
                kept.append(line.rstrip("\n") + "\n")
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with tmp.open("w", encoding="utf-8") as f:
        f.writelines(kept)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return len(kept)


def _ensure_trailing_newline(path: Path) -> None:
    """A killed writer can leave a partial last line; never glue the next record onto it."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with path.open("rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) != b"\n":
            f.write(b"\n")


class RunLogger:
    """Log training metrics to `out_dir/metrics.jsonl`, TensorBoard and the console.

    Use as a context manager (or call `close`). With `resume_step`, records after that step left
    by a killed attempt are dropped from metrics.jsonl and TensorBoard before logging continues.
    """

    def __init__(
        self,
        out_dir: Path,
        total_steps: int,
        tensorboard: bool = True,
        progress: bool = True,
        resume_step: int | None = None,
        *,
        force_progress: bool = False,
        print_every: int = 1,
        stream: TextIO | None = None,
        wandb: Mapping[str, Any] | None = None,
    ) -> None:
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.total_steps = total_steps
        self.print_every = max(1, print_every)
        self.metrics_path = self.out_dir / METRICS_FILE
        self._stream = stream
        self._closed = False

        if resume_step is not None:
            truncate_metrics(self.metrics_path, resume_step)
        _ensure_trailing_newline(self.metrics_path)
        self._file = self.metrics_path.open("a", encoding="utf-8")

        self._writer = self._open_tensorboard(resume_step) if tensorboard else None
        self._wandb = self._open_wandb(wandb) if wandb is not None else None
        out = stream if stream is not None else sys.stdout
        use_bar = progress and (force_progress or _isatty(out))
        self._progress, self._task = (
            self._open_progress(resume_step or 0) if use_bar else (None, None)
        )

    # ---------------------------------------------------------------------------------------
    # setup

    def _open_tensorboard(self, resume_step: int | None) -> Any:
        try:
            # Lazy: importing torch.utils.tensorboard fails when tensorboard is not installed,
            # and TensorBoard is optional.
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            _log.warning("tensorboard is not installed; logging to %s only", self.metrics_path)
            return None
        # purge_step makes TensorBoard discard the killed attempt's events from that step on.
        purge = resume_step + 1 if resume_step is not None else None
        return SummaryWriter(log_dir=str(self.out_dir / TB_DIRNAME), purge_step=purge)

    def _open_wandb(self, settings: Mapping[str, Any]) -> Any:
        """A Weights & Biases run in OUT/wandb: offline unless WANDB_MODE says otherwise (no
        account or network needed; `wandb sync OUT/wandb/offline-run-*` uploads it later).
        `settings` are keyword arguments of `wandb.init` (project, name, config)."""
        try:
            import wandb  # lazy: an optional extra
        except ImportError as err:
            raise ImportError(
                "trainer.wandb=true needs Weights & Biases: pip install 'agentic-rl[wandb]'"
            ) from err
        options = {"mode": os.environ.get("WANDB_MODE", "offline"), **settings}
        return wandb.init(dir=str(self.out_dir), **options)

    def _open_progress(self, start: int) -> tuple[Any, Any]:
        return progress_bar(self.total_steps, "train", start, self._stream)

    # ---------------------------------------------------------------------------------------
    # logging

    def log(self, step: int, metrics: Mapping[str, Any], prefix: str = "train") -> dict[str, Any]:
        """Record `metrics` for `step` under `prefix/`; returns the JSON record written."""
        if self._closed:
            raise RuntimeError("RunLogger.log called after close()")
        values = {name: _scalar(name, value) for name, value in metrics.items()}
        record: dict[str, Any] = {"step": int(step), "time": time.time()}
        record.update({_metric_key(prefix, name): value for name, value in values.items()})

        # allow_nan=False turns any non-finite value that slipped through into an error.
        self._file.write(json.dumps(record, allow_nan=False) + "\n")
        self._file.flush()

        if self._writer is not None:
            for name, value in values.items():
                if value is not None:  # TensorBoard cannot plot nan/inf; they are gaps
                    self._writer.add_scalar(_metric_key(prefix, name), value, int(step))
        if self._wandb is not None:  # the same names as TensorBoard; None values are gaps
            finite = {_metric_key(prefix, n): v for n, v in values.items() if v is not None}
            self._wandb.log(finite, step=int(step))

        self._show(int(step), values, prefix)
        return record

    def _show(self, step: int, values: Mapping[str, Scalar], prefix: str) -> None:
        summary = format_metrics(values)
        if self._progress is not None:
            if prefix == "train":
                description = f"train {summary}".rstrip()
                self._progress.update(self._task, completed=step, description=description)
            else:  # eval results are printed above the bar so they stay visible
                self._progress.console.print(f"{prefix} step {step}/{self.total_steps} {summary}")
            return
        if step % self.print_every != 0 and step != self.total_steps:
            return
        head = "step" if prefix == "train" else f"{prefix} step"
        line = f"{head} {step}/{self.total_steps} {summary}".rstrip()
        print(line, file=self._stream if self._stream is not None else sys.stdout, flush=True)

    # ---------------------------------------------------------------------------------------
    # teardown

    def flush(self) -> None:
        """Push buffered metrics to disk (JSONL is flushed per line; this also fsyncs)."""
        if self._closed:
            return
        self._file.flush()
        os.fsync(self._file.fileno())
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        """Flush and close every sink; safe to call twice."""
        if self._closed:
            return
        self.flush()
        self._closed = True
        self._file.close()
        if self._writer is not None:
            self._writer.close()
        if self._wandb is not None:
            self._wandb.finish()
        if self._progress is not None:
            self._progress.stop()

    def __enter__(self) -> RunLogger:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def progress_bar(
    total: int, description: str, start: int = 0, stream: TextIO | None = None
) -> tuple[Any, Any]:
    """A started `rich` progress bar (description, bar, done/total, elapsed, eta) and its task:
    training's display, also used by `agentic-rl eval`."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    console = Console(file=stream) if stream is not None else None
    progress = Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )
    task = progress.add_task(description, total=total, completed=start)
    progress.start()
    return progress, task


@contextlib.contextmanager
def counting_progress(
    total: int, description: str, stream: TextIO | None = None
) -> Iterator[Callable[[int], None]]:
    """Progress of a loop over `total` items: yields `advance(n)`. On a terminal the training
    progress bar (`progress_bar`), else one line per advance ("eval 50/100"), as RunLogger."""
    out = stream if stream is not None else sys.stdout
    if not _isatty(out):
        done = 0

        def advance_line(n: int) -> None:
            nonlocal done
            done += n
            print(f"{description} {done}/{total}", file=out, flush=True)

        yield advance_line
        return
    progress, task = progress_bar(total, description, 0, stream)
    try:
        yield lambda n: progress.update(task, advance=n)
    finally:
        progress.stop()


def _isatty(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except ValueError:  # closed stream
        return False
