"""The page as the agent reads it: compact accessibility-like text with element ids.

A script walks the task's DOM (`#area`, MiniWoB's task region; the whole body elsewhere) in
document order and returns the visible elements an agent can act on (buttons, links, text
fields, checkboxes, radios, selects, anything with a click handler), each numbered and tagged
with `data-ref` so an action can find it again, plus the visible text between them:

    [1] button "Submit"
    text "Select qw, Rt and click Submit."
    [2] checkbox "qw" checked=false
    [3] textbox "" value="Ann" focused

Numbers follow document order, so the same page always gets the same numbers (observations are
deterministic, and a replayed episode sees the ids the model saw). A control's name is its
label, its text, or its placeholder; text inside a named control is not repeated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_TEXT = 60  # characters of one text item or name

SNAPSHOT_JS = r"""
var root = document.getElementById('area') || document.body;
var old = document.querySelectorAll('[data-ref]');
for (var i = 0; i < old.length; i++) old[i].removeAttribute('data-ref');
function clean(t) { return (t || '').replace(/\s+/g, ' ').trim(); }
function visible(el) {
  var s = window.getComputedStyle(el);
  if (s.display === 'none' || s.visibility === 'hidden') return false;
  var r = el.getBoundingClientRect();
  return r.width > 0 && r.height > 0;
}
function roleOf(el) {
  var explicit = el.getAttribute('role');
  if (explicit) return explicit;
  var tag = el.tagName.toLowerCase();
  if (tag === 'button') return 'button';
  if (tag === 'a' || el.classList.contains('alink')) return 'link';
  if (tag === 'input') {
    var ty = (el.getAttribute('type') || 'text').toLowerCase();
    if (ty === 'checkbox' || ty === 'radio') return ty;
    if (ty === 'submit' || ty === 'button' || ty === 'reset') return 'button';
    if (ty === 'hidden') return null;
    return 'textbox';
  }
  if (tag === 'textarea') return 'textbox';
  if (tag === 'select') return 'combobox';
  if (el.__onclick || el.onclick) return 'clickable';
  return null;
}
function nameOf(el, role) {
  if (role === 'checkbox' || role === 'radio') {
    var label = el.closest('label');
    if (!label && el.id) label = document.querySelector('label[for="' + el.id + '"]');
    return label ? clean(label.textContent) : '';
  }
  if (role === 'textbox') return clean(el.getAttribute('placeholder') || '');
  if (el.tagName.toLowerCase() === 'input') return clean(el.value);
  return clean(el.textContent);
}
var items = [], n = 0, named = [];
function insideNamed(node) {
  for (var k = 0; k < named.length; k++) if (named[k].contains(node)) return true;
  return false;
}
var walker = document.createTreeWalker(root, NodeFilter.SHOW_ELEMENT | NodeFilter.SHOW_TEXT);
var node = walker.nextNode();
while (node) {
  if (node.nodeType === 3) {
    var text = clean(node.textContent);
    var parent = node.parentElement;
    if (text && parent && visible(parent) && !insideNamed(node)) items.push({text: text});
  } else if (visible(node) && !insideNamed(node)) {
    var role = roleOf(node);
    if (role) {
      n += 1;
      node.setAttribute('data-ref', String(n));
      var item = {ref: n, role: role, name: nameOf(node, role),
                  focused: document.activeElement === node};
      if (role === 'checkbox' || role === 'radio') {
        item.checked = !!node.checked;
        var lab = node.closest('label');
        if (lab) named.push(lab);
      }
      if (role === 'textbox' || role === 'combobox') item.value = node.value;
      if (role !== 'textbox' && role !== 'checkbox' && role !== 'radio') named.push(node);
      items.push(item);
    }
  }
  node = walker.nextNode();
}
var done = (typeof WOB_DONE_GLOBAL !== 'undefined') && WOB_DONE_GLOBAL;
return {
  utterance: (typeof core !== 'undefined' && core.getUtterance) ? core.getUtterance() : '',
  items: items,
  done: done,
  raw_reward: (typeof WOB_RAW_REWARD_GLOBAL !== 'undefined') ? WOB_RAW_REWARD_GLOBAL : 0,
  reason: (typeof WOB_REWARD_REASON !== 'undefined') ? WOB_REWARD_REASON : null
};
"""


@dataclass(frozen=True)
class Element:
    """One actionable element of a snapshot (`ref` is its id in the text)."""

    ref: int
    role: str
    name: str
    checked: bool | None = None
    value: str | None = None
    focused: bool = False


@dataclass(frozen=True)
class Snapshot:
    """What the snapshot script saw: the task's utterance, the page's items in order
    (Elements, and plain strings for text), and MiniWoB's episode state."""

    utterance: str
    items: tuple[Element | str, ...]
    done: bool
    raw_reward: float
    reason: str | None = None

    @property
    def elements(self) -> list[Element]:
        return [item for item in self.items if isinstance(item, Element)]

    def element(self, ref: int) -> Element | None:
        return next((e for e in self.elements if e.ref == ref), None)

    def render(self) -> str:
        """The compact text the agent reads (module doc)."""
        return "\n".join(render_item(item) for item in self.items) or "(empty page)"


def _quote(text: str) -> str:
    text = text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."
    return '"' + text.replace('"', "'") + '"'


def render_item(item: Element | str) -> str:
    if isinstance(item, str):
        return f"text {_quote(item)}"
    parts = [f"[{item.ref}] {item.role} {_quote(item.name)}"]
    if item.checked is not None:
        parts.append(f"checked={'true' if item.checked else 'false'}")
    if item.value is not None and item.role == "textbox":
        parts.append(f"value={_quote(item.value)}")
    if item.focused:
        parts.append("focused")
    return " ".join(parts)


def parse_snapshot(raw: dict[str, Any]) -> Snapshot:
    """A Snapshot from the script's result."""
    items: list[Element | str] = []
    for item in raw.get("items", []):
        if "ref" in item:
            items.append(
                Element(
                    ref=int(item["ref"]),
                    role=str(item["role"]),
                    name=str(item.get("name", "")),
                    checked=item.get("checked"),
                    value=item.get("value"),
                    focused=bool(item.get("focused", False)),
                )
            )
        else:
            items.append(str(item["text"]))
    return Snapshot(
        utterance=str(raw.get("utterance") or ""),
        items=tuple(items),
        done=bool(raw.get("done")),
        raw_reward=float(raw.get("raw_reward") or 0.0),
        reason=None if raw.get("reason") is None else str(raw["reason"]),
    )


def take_snapshot(driver: Any) -> Snapshot:
    """Number the page's elements and read them (see the module doc)."""
    return parse_snapshot(driver.execute_script(SNAPSHOT_JS))
