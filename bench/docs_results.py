"""Numbers for the docs, read from the results files under bench/results (typed once).

The recipe pages and the README never hold a measured number of their own: their sources (under
docs/sources/recipes/) name where each number lives, and `bench/docs_tables.py` fills it in from
the results file with the functions here. Three ways a source names a number:

- a reference, ``[[FILE.json:PATH|FORMAT]]``: one value, ``PATH`` dotted through dicts and list
  indices (``runs.0.summary.after.success``), ``FORMAT`` one of :data:`FORMATS`;
- a run table, ``[[runs: FILE.json]]``: a `bench/recipe_runs.py` file as a table of its
  held-out evaluations (every seed, stage and evaluation point) with its command and machine;
- a learning table, ``[[learning: FILE.json]]``: a `bench/learning.py` file (held-out metric
  before, after the warm start and after RL per seed, and the RL gain over seeds).

- a rows table, ``[[rows: FILE.json:PATH|header=key:FORMAT; header=key]]``: one table row per
  item of the list at ``PATH`` (``FILE.json|...`` for a file that is a list), one column per
  ``header=key`` (``key`` dotted inside the item, ``FORMAT`` as for a reference); at a dict of
  dicts, one row per entry, whose name is the key ``@key``.

Headlines (the README's one line per recipe) use ``[[runs-headline: FILE]]`` and
``[[learning-headline: FILE]]`` the same way. Everything here is pure: the caller passes a
``load(name) -> data`` function, so the tests can hand it dictionaries.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

Loader = Callable[[str], Any]


class DocsSourceError(ValueError):
    """A docs source names a results file, key or format that does not exist; the message names
    the source file and what it asked for."""


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _points(x: float | None) -> str:
    """A difference of fractions in percentage points: 0.2 -> +20 points."""
    return "-" if x is None else f"{100 * x:+.0f} points"


FORMATS: dict[str, Callable[[Any], str]] = {
    "pct": _pct,  # a fraction in [0, 1] as a whole percentage: 0.8333 -> 83%
    "pct1": lambda x: f"{100 * x:.1f}%",
    "points": _points,  # a difference of fractions: 0.2 -> +20 points
    "int": lambda x: f"{round(x):,}",
    "f1": lambda x: f"{x:.1f}",
    "f2": lambda x: f"{x:.2f}",
    "f3": lambda x: f"{x:.3f}",
    "e1": lambda x: f"{x:.1e}",
    "x": lambda x: f"{x:.2f}x",  # a ratio: 3.14x
    "s": lambda x: f"{x:.0f} s",
    "s1": lambda x: f"{x:.1f} s",
    "min": lambda x: f"{x / 60:.1f} min",  # seconds shown as minutes
    "gib": lambda x: f"{x / 1024:.1f} GiB",  # MiB shown as GiB
    "gib2": lambda x: f"{x:.2f} GiB",  # already GiB
    "mgib2": lambda x: f"{x / 1024:.2f} GiB",  # MiB shown as GiB, two decimals
    "onoff": lambda x: "on" if x else "off",  # a boolean setting
    "ms": lambda x: f"{x:.0f} ms",
    "ms1": lambda x: f"{x:.1f} ms",
    "raw": str,
}

REFERENCE = re.compile(r"\[\[([^\[\]:|\s]+\.json):([^\[\]|\s]+)(?:\|(\w+))?\]\]")
ROWS = re.compile(r"\[\[rows: *([^\[\]:|\s]+\.json)(?::([^\[\]|\s]+))?\|([^\[\]]+)\]\]")
DIRECTIVE = re.compile(r"\[\[(runs|learning|runs-headline|learning-headline): *([^\[\]\s]+)\]\]")


def lookup(data: Any, path: str) -> Any:
    """The value at a dotted ``path`` (dict keys, list indices), or KeyError naming the part
    that is missing."""
    value = data
    for part in path.split("."):
        if isinstance(value, list):
            if not part.lstrip("-").isdigit() or not -len(value) <= int(part) < len(value):
                raise KeyError(f"{part!r} (a list of {len(value)})")
            value = value[int(part)]
        elif isinstance(value, dict):
            if part not in value:
                raise KeyError(f"{part!r} (keys: {', '.join(list(value)[:12])})")
            value = value[part]
        else:
            raise KeyError(f"{part!r} (inside a {type(value).__name__})")
    return value


def format_value(value: Any, fmt: str | None) -> str:
    """``value`` written as ``fmt`` says (default: ``raw`` for strings, ``f2`` for floats)."""
    if fmt is None:
        fmt = "f2" if isinstance(value, float) else "raw"
    if fmt not in FORMATS:
        raise KeyError(f"format {fmt!r} (known: {', '.join(FORMATS)})")
    if fmt != "raw" and not isinstance(value, (int, float)):
        raise KeyError(f"format {fmt!r} needs a number, got {value!r}")
    return FORMATS[fmt](value)


def substitute(text: str, load: Loader, source: str) -> str:
    """``text`` with every reference and directive replaced by what its results file holds.
    ``source`` names the docs source in errors."""

    def reference(match: re.Match[str]) -> str:
        name, path, fmt = match.groups()
        try:
            return format_value(lookup(load(name), path), fmt)
        except KeyError as err:
            raise DocsSourceError(f"{source}: [[{name}:{path}]]: no {err.args[0]}") from None

    def directive(match: re.Match[str]) -> str:
        kind, name = match.groups()
        data = load(name)
        try:
            return DIRECTIVES[kind](data, name)
        except KeyError as err:
            raise DocsSourceError(f"{source}: [[{kind}: {name}]]: no {err.args[0]}") from None

    def rows(match: re.Match[str]) -> str:
        name, path, spec = match.groups()
        try:
            return rows_table(load(name), path, spec)
        except KeyError as err:
            raise DocsSourceError(
                f"{source}: [[rows: {name}:{path or ''}]]: no {err.args[0]}"
            ) from None

    text = ROWS.sub(rows, DIRECTIVE.sub(directive, text))
    return REFERENCE.sub(reference, text)


def rows_table(data: Any, path: str | None, spec: str) -> str:
    """A Markdown table of the list at ``path`` in ``data``: one row per item, one column per
    ``header=key[:format]`` of ``spec`` (separated by ``;``); a key an item lacks is "-"."""
    items = lookup(data, path) if path else data
    if isinstance(items, dict):  # a dict of rows: its keys are the column key ``@key``
        items = [{"@key": k, **v} for k, v in items.items() if isinstance(v, dict)]
    if not isinstance(items, list):
        raise KeyError(f"list at {path!r}")
    columns = []
    for part in spec.split(";"):
        header, _, key = part.partition("=")
        if not key:
            raise KeyError(f"column {part.strip()!r} (write header=key:format)")
        key, _, fmt = key.strip().partition(":")
        columns.append((header.strip(), key, fmt or None))
    lines = ["| " + " | ".join(h for h, _, _ in columns) + " |", "|" + "---|" * len(columns)]
    for item in items:
        cells = []
        for _, key, fmt in columns:
            try:
                value = lookup(item, key)
            except KeyError:
                cells.append("-")
                continue
            cells.append("-" if value is None else format_value(value, fmt))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --- bench/recipe_runs.py files -------------------------------------------------------------


def _command(command: str) -> str:
    """The command as a reader types it from the repository root (no machine-local paths)."""
    return re.sub(r"\S*/\.venv/bin/python", ".venv/bin/python", command)


def evaluation_points(summary: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """``(stage, evaluation, metrics)`` for every held-out evaluation of one run's summary, in
    the order they happened: before training, after the warm start, after RL; per stage for a
    multi-stage recipe (whose stages may also name their own evaluations, ``evals``)."""
    stages = summary.get("stages", {"": summary})
    points = []
    for stage, s in stages.items():
        if "before" in s:
            points.append((stage, "before", s["before"]))
        if "warm_start" in s:
            points.append((stage, "after the warm start", s["warm_start"]))
        if "after" in s:
            steps = s.get("steps", 0)
            label = f"after {steps} RL step{'s' * (steps != 1)}" if steps else "after the stage"
            points.append((stage, label, s["after"]))
        for name, metrics in s.get("evals", {}).items():
            points.append((stage, name, metrics))
    return points


def _cell(metrics: dict[str, Any], key: str, fmt: str) -> str:
    return format_value(metrics[key], fmt) if key in metrics else "-"


ENV_PREFIX = "env/"
"""The env's own metrics in a summary (a benchmark's score, BFCL's accuracy per category)."""


def env_columns(runs: list[dict[str, Any]]) -> list[str]:
    """The env's own metrics that any evaluation of the runs reports, sorted: each is a column
    of the runs table, so a benchmark's page shows the benchmark's own numbers."""
    keys = {
        key
        for run in runs
        for _, _, metrics in evaluation_points(run["summary"])
        for key in metrics
        if key.startswith(ENV_PREFIX)
    }
    return sorted(keys)


def _env_format(key: str) -> str:
    """A subset metric (`env/accuracy@simple_python`: pass or fail per episode, averaged over
    the subset's episodes) is a rate, shown in percent; any other env metric as a number."""
    return "pct" if "@" in key else "f2"


def runs_table(data: dict[str, Any], name: str) -> str:
    """A `bench/recipe_runs.py` results file as a Markdown table (one row per seed, stage and
    evaluation point; a column per env metric, `env_columns`) and a line with its command,
    held-out tasks, wall time and machine."""
    runs = data["runs"]
    staged = any("stages" in run["summary"] for run in runs)
    env_keys = env_columns(runs)
    head = ["seed"] + ["stage"] * staged + ["held-out evaluation", "success", "reward"]
    head += ["tool calls / episode", "invalid actions / episode"]
    head += [f"`{key.removeprefix(ENV_PREFIX)}`" for key in env_keys]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for run in runs:
        for stage, label, m in evaluation_points(run["summary"]):
            row = [str(run["seed"])] + [f"`{stage}`"] * staged + [label]
            row += [_cell(m, "success", "pct"), _cell(m, "reward", "f2")]
            row += [_cell(m, "tool_calls_per_episode", "f2")]
            row += [_cell(m, "invalid_actions_per_episode", "f2")]
            row += [_cell(m, key, _env_format(key)) for key in env_keys]
            lines.append("| " + " | ".join(row) + " |")
    tasks = _eval_tasks(runs[0]["summary"])
    facts = [f"{len(runs)} seed{'s' * (len(runs) != 1)}"]
    if tasks:
        facts.append(f"{tasks} held-out tasks, greedy")
    walls = [run["wall_seconds"] for run in runs if "wall_seconds" in run]
    if walls:
        facts.append(f"{format_value(max(walls), 'min')} wall per run")
    rss = [run["peak_rss_mib"] for run in runs if run.get("peak_rss_mib")]
    if rss:
        facts.append(f"peak RSS {format_value(max(rss), 'gib')}")
    machine = data.get("machine", {})
    if machine:
        facts.append(f"{machine.get('cores', '?')}-core {machine.get('cpu', 'CPU')}")
    lines += ["", f"`{_command(data['command'])}` ({name}; {', '.join(facts)})"]
    return "\n".join(lines)


def _eval_tasks(summary: dict[str, Any]) -> int | None:
    stages = summary["stages"].values() if "stages" in summary else [summary]
    for s in stages:
        if "eval_tasks" in s:
            return int(s["eval_tasks"])
        for metrics in s.get("evals", {}).values():
            if "episodes" in metrics:
                return int(metrics["episodes"])
    return None


def _point_name(i: int, stage: str, label: str) -> str:
    """A short name for an evaluation point in a headline: ``untrained``, ``warm start``,
    ``2 RL steps``; prefixed by its stage in a multi-stage recipe (``ttrl (4 RL steps)``)."""
    if label == "before":
        short = "untrained" if i == 0 else "start"
    elif label == "after the warm start":
        short = "warm start"
    elif label.startswith("after ") and label.endswith(("RL step", "RL steps")):
        short = label[len("after ") :]
    elif label == "after the stage":
        short = ""
    else:
        return label  # an evaluation a stage names itself (KnownSelf's sft_only, sft)
    if not stage or short == "untrained":
        return short
    return f"{stage} ({short})" if short else stage


def runs_headline(data: dict[str, Any], name: str) -> str:
    """One line: the held-out success at every evaluation point (every seed's value where there
    are several), the tasks and the seeds."""
    runs = data["runs"]
    parts = []
    for i, (stage, label, _) in enumerate(evaluation_points(runs[0]["summary"])):
        values = [_cell(evaluation_points(r["summary"])[i][2], "success", "pct") for r in runs]
        parts.append(f"{_point_name(i, stage, label)} {'/'.join(values)}")
    tasks = _eval_tasks(runs[0]["summary"])
    seeds = f"{len(runs)} seed{'s' * (len(runs) != 1)}"
    return f"held-out success {' → '.join(parts)} ({tasks} tasks, {seeds})"


# --- bench/learning.py files ----------------------------------------------------------------


def learning_table(data: dict[str, Any], name: str) -> str:
    """A `bench/learning.py` results file: the held-out metric before training, after the warm
    start and after RL for each seed, the RL gain (after RL minus the warm start, or minus the
    start where the recipe has no warm start), and a last row with the mean over seeds and their
    range (min-max)."""
    metric = data.get("metric", "success")
    head = ["seed", "before", "after the warm start", f"after {data['rl_steps']} RL steps"]
    head.append("RL gain")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    seeds = data["seeds"]
    for seed in seeds:
        row = [str(seed["seed"])] + [_maybe_pct(seed[k]) for k in _LEARNING_POINTS]
        gain = _seed_gain(seed)
        lines.append("| " + " | ".join(row + [_points(gain)]) + " |")
    if len(seeds) > 1:
        row = [f"mean of {len(seeds)} (min-max)"]
        for key in _LEARNING_POINTS:
            row.append(_spread([s[key] for s in seeds if s[key] is not None], _pct))
        gains = [g for g in map(_seed_gain, seeds) if g is not None]
        row.append(_spread(gains, _points))
        lines.append("| " + " | ".join(row) + " |")
    tail = f"held-out {metric} on {data['held_out_tasks']} tasks, greedy"
    gain = data.get("rl_gain")
    if gain:
        tail += (
            f"; RL gain over seeds: mean {_points(gain['mean'])}"
            f" (min {_points(gain['min'])}, max {_points(gain['max'])})"
        )
    commands = sorted({_command(s["command"]) for s in seeds if "command" in s})
    lines += ["", f"{tail} ({name})."]
    lines += [f"`{c}`" for c in commands[:1]]
    return "\n".join(lines)


def _maybe_pct(x: float | None) -> str:
    return "-" if x is None else _pct(x)


def _seed_gain(seed: dict[str, Any]) -> float | None:
    """after_rl minus the warm start (minus before where the recipe has no warm start)."""
    start = seed["warm_start"] if seed.get("warm_start") is not None else seed.get("before")
    return None if start is None or seed.get("after_rl") is None else seed["after_rl"] - start


def _spread(values: list[float], fmt: Callable[[float], str]) -> str:
    """``mean (min-max)`` of ``values`` written with ``fmt``; "-" for none."""
    if not values:
        return "-"
    mean = sum(values) / len(values)
    return f"{fmt(mean)} ({fmt(min(values))} to {fmt(max(values))})"


_LEARNING_POINTS = ("before", "warm_start", "after_rl")


def learning_headline(data: dict[str, Any], name: str) -> str:
    """One line: the mean over seeds before, after the warm start and after RL, and the RL
    gain's range over seeds."""
    seeds = data["seeds"]
    means = []
    for key in _LEARNING_POINTS:
        values = [s[key] for s in seeds if s.get(key) is not None]
        means.append(_pct(sum(values) / len(values)) if values else None)
    points = [means[0]] + ([f"{means[1]} (warm start)"] if means[1] else [])
    points.append(f"{means[2]} ({data['rl_steps']} RL steps)")
    text = (
        f"held-out {data.get('metric', 'success')} {' → '.join(p for p in points if p)}, mean of"
        f" {len(seeds)} seed{'s' * (len(seeds) != 1)}"
    )
    gain = data.get("rl_gain")
    if gain:
        text += f"; RL gain {100 * gain['min']:+.0f} to {100 * gain['max']:+.0f} points"
    return text


# The bar for "RL itself adds" in a family: three seeds, a mean gain of at least ten
# points over the warm start, and every seed's gain positive.
BAR_SEEDS, BAR_MEAN_GAIN = 3, 0.10


def families_table(families: list[tuple[str, str, str]], files: dict[str, dict[str, Any]]) -> str:
    """One row per family of `bench/learning.py` (``(key, recipe, why)`` in its order): the mean
    over seeds after the warm start and after RL, the RL gain's mean and range, and whether the
    family meets the bar (:data:`BAR_SEEDS` seeds, mean gain >= :data:`BAR_MEAN_GAIN`, every
    seed positive). ``files`` maps a key to its ``learning/KEY.json`` (absent: not run yet)."""
    head = ["family", "recipe", "seeds", "after the warm start", "after RL", "RL gain", "bar"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, recipe, why in families:
        data = files.get(key)
        if data is None:
            lines.append(f"| `{key}` | `{recipe}` | 0 | - | - | - | not run yet ({why}) |")
            continue
        seeds = data["seeds"]
        gains = [g for g in map(_seed_gain, seeds) if g is not None]
        warm = [s["warm_start"] for s in seeds if s.get("warm_start") is not None]
        after = [s["after_rl"] for s in seeds if s.get("after_rl") is not None]
        met = (
            len(gains) >= BAR_SEEDS
            and sum(gains) / len(gains) >= BAR_MEAN_GAIN
            and all(g > 0 for g in gains)
        )
        verdict = "met" if met else ("not met" if len(gains) >= BAR_SEEDS else "too few seeds")
        if not met:  # what the evidence says and what would help, from the family's "why"
            verdict += f" ({why})"
        row = [
            f"`{key}`",
            f"[`{data['recipe']}`](../recipes/{data['recipe']}.md)",
            f"{len(seeds)} x {data['rl_steps']} steps"
            + (f" ({len(data['stopped'])} stopped early)" if data.get("stopped") else ""),
            _spread(warm, _pct),
            _spread(after, _pct),
            _spread(gains, _points),
            verdict,
        ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


DIRECTIVES: dict[str, Callable[[dict[str, Any], str], str]] = {
    "runs": runs_table,
    "runs-headline": runs_headline,
    "learning": learning_table,
    "learning-headline": learning_headline,
}
