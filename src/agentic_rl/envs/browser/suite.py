"""The MiniWoB++ task set: the task pages the installed `miniwob` package ships, the names a
config may give (`env.options.tasks`: a comma-separated list, or `all` for the benchmark's own
set, the pages the package registers), and the train / eval episodes over them (each a page
at its own seed; train seeds even, eval seeds odd). miniwob.py plays an episode in the browser.
"""

from __future__ import annotations

import difflib
import importlib.util
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from agentic_rl.envs.browser.experts import EXPERTS
from agentic_rl.types import Task

Split = Literal["train", "eval"]
DEFAULT_TASKS = "click-button,click-link,focus-text,enter-text,click-checkboxes"


class MiniWoBUnavailable(RuntimeError):
    """The `miniwob` package (the task pages) is not installed."""


def html_dir() -> Path:
    """The MiniWoB++ task pages shipped by the `miniwob` package (found without importing it:
    its import pulls in gymnasium's env registration, which is not needed here)."""
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        raise MiniWoBUnavailable(
            "the MiniWoB++ pages need `miniwob`: pip install 'agentic-rl[gui]'"
        )
    return Path(list(spec.submodule_search_locations)[0]) / "html" / "miniwob"


def page_names() -> list[str]:
    """Every MiniWoB++ task page the installed `miniwob` package ships (`html/miniwob/*.html`),
    sorted; without the package, the tasks with a scripted expert (their pages cannot load
    until it is installed, which reset() says)."""
    try:
        folder = html_dir()
    except MiniWoBUnavailable:
        return sorted(EXPERTS)
    return sorted(p.stem for p in folder.glob("*.html"))


def suite_names() -> list[str]:
    """The benchmark's task set (`tasks: all`): the pages the installed package registers as
    Gymnasium envs (`miniwob/NAME-v1` in its registration.py, read as text: importing it
    registers them all); every page where that file cannot be read. The package also ships
    a few pages it does not register (e.g. chase-circle, simon-says): they can be named."""
    pages = page_names()
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        return pages
    registration = Path(list(spec.submodule_search_locations)[0]) / "registration.py"
    try:
        registered = set(re.findall(r'id="miniwob/([^"]+)-v1"', registration.read_text()))
    except OSError:
        return pages
    return [p for p in pages if p in registered] or pages


def task_names(tasks: str | Sequence[str]) -> list[str]:
    """The task list of the `tasks` option (comma-separated or a list; `all` is the
    benchmark's task set, `suite_names`), checked against the installed package's pages."""
    names = [t.strip() for t in tasks.split(",")] if isinstance(tasks, str) else list(tasks)
    names = [n for n in names if n]
    if names == ["all"]:
        return suite_names()
    known = page_names()
    unknown = [n for n in names if n not in known]
    if not names or unknown:
        close = difflib.get_close_matches(unknown[0], known, n=3) if unknown else []
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ValueError(
            f"env.options.tasks: unknown MiniWoB++ task(s) {', '.join(unknown) or '(none given)'}"
            f"{hint}; name any of the {len(known)} task pages of the installed miniwob package "
            f"(e.g. {', '.join(known[:4])}, ...), or `all` for the benchmark's task set"
        )
    return names


def make_miniwob_tasks(
    split: Split, n: int, seed: int = 0, *, tasks: str | list[str] = DEFAULT_TASKS
) -> list[Task]:
    """`n` episodes of the MiniWoB++ `tasks`, round-robin, each with its own page seed (train
    seeds even, eval seeds odd: the held-out pages are never trained on)."""
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    names = task_names(tasks)
    out = []
    for i in range(n):
        name = names[i % len(names)]
        page_seed = 2 * (seed * 1_000_000 + i) + (split == "eval")
        out.append(
            Task(
                task_id=f"miniwob-{name}-{page_seed}",
                prompt=name,
                # MiniWoB judges success in the page; `<answer>` only ends (gives up) an episode.
                answers=["done"],
                fields={
                    "miniwob_task": name,
                    "page_seed": page_seed,
                    "has_expert": name in EXPERTS,  # the warm start demonstrates these only
                },
            )
        )
    return out
