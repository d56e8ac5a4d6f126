"""Scripted experts for the chosen MiniWoB++ tasks: the next action from the page and the task's
utterance, the way a careful person would read them.

Each expert looks only at the current Snapshot (what the agent also sees), so it can be asked
at any state of an episode, including states the agent reached by mistakes: that is what the
UI-TARS-style learning from failures needs (the corrected action at the failing state). Where
the state cannot be completed (e.g. the wrong button was already clicked, which ends the
episode) there is nothing to ask.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from agentic_rl.envs.browser.actions import BrowserAction
from agentic_rl.envs.browser.page import Element, Snapshot


class ExpertError(RuntimeError):
    """The expert cannot act on this page (an utterance or page it does not understand)."""


def _quoted(utterance: str) -> str:
    match = re.search(r'"([^"]*)"', utterance)
    if match is None:
        raise ExpertError(f"no quoted target in {utterance!r}")
    return match.group(1)


def _first(snapshot: Snapshot, role: str, name: str | None = None) -> Element:
    for element in snapshot.elements:
        if element.role == role and (name is None or element.name == name):
            return element
    raise ExpertError(f"no {role} {name or ''!r} on the page".replace(" ''", ""))


def click_button(snapshot: Snapshot) -> BrowserAction:
    """'Click on the "ok" button.'"""
    return BrowserAction("click", _first(snapshot, "button", _quoted(snapshot.utterance)).ref)


def click_link(snapshot: Snapshot) -> BrowserAction:
    """'Click on the link "dolor".'"""
    return BrowserAction("click", _first(snapshot, "link", _quoted(snapshot.utterance)).ref)


def focus_text(snapshot: Snapshot) -> BrowserAction:
    """'Focus into the textbox.'"""
    return BrowserAction("click", _first(snapshot, "textbox").ref)


def enter_text(snapshot: Snapshot) -> BrowserAction:
    """'Enter "Ann" into the text field and press Submit.': type it, then click Submit."""
    wanted = _quoted(snapshot.utterance)
    box = _first(snapshot, "textbox")
    if box.value != wanted:
        return BrowserAction("type", box.ref, wanted)
    return BrowserAction("click", _first(snapshot, "button", "Submit").ref)


def click_checkboxes(snapshot: Snapshot) -> BrowserAction:
    """'Select qw, Rt and click Submit.' (or 'Select nothing and click Submit.'): toggle the
    first checkbox whose state is wrong, in page order; Submit when all are right."""
    match = re.match(r"Select (.*) and click Submit\.?$", snapshot.utterance)
    if match is None:
        raise ExpertError(f"cannot read {snapshot.utterance!r}")
    names = set() if match.group(1) == "nothing" else set(match.group(1).split(", "))
    for element in snapshot.elements:
        if element.role == "checkbox" and bool(element.checked) != (element.name in names):
            return BrowserAction("click", element.ref)
    return BrowserAction("click", _first(snapshot, "button", "Submit").ref)


EXPERTS: dict[str, Callable[[Snapshot], BrowserAction]] = {
    "click-button": click_button,
    "click-link": click_link,
    "focus-text": focus_text,
    "enter-text": enter_text,
    "click-checkboxes": click_checkboxes,
}
"""MiniWoB++ task name -> its expert. The tasks a 135M model can plausibly learn: one or a few
clicks or one typed word, read from the utterance and the page."""
