"""The page as the agent reads it: compact accessibility-like text with element ids.

A script walks the task's DOM in document order and returns the visible elements an agent can
act on, each numbered and tagged with `data-ref` so an action can find it again, plus the
visible text between them:

    [1] button "Submit"
    text "Select qw, Rt and click Submit."
    [2] checkbox "qw" checked=false
    [3] textbox "" value="Ann" focused
    [4] tab "Tab #2" selected=false
    [5] combobox "" value="Ann" options=["Ann", "Bob"]

What is walked: MiniWoB's task region (`#area`; the whole body elsewhere) and, after it, what
the page shows outside it (a dialog, a date picker or a menu the page attached to the body;
not MiniWoB's own reward display). What is numbered: buttons, links (also MiniWoB's
`span.alink`), text fields, checkboxes, radios, selects (their options and selected value),
elements with an interactive ARIA role (tab, menuitem, option, ...: a tab says whether it is
selected, an accordion header whether it is expanded), and anything with a click handler
(an `onclick`, or a jQuery click handler, as most MiniWoB pages bind). Container roles (tablist,
tabpanel, dialog, group, ...) are walked into, not numbered, so the links inside a tab panel
get ids. A control's name is its label, its text (without the text of controls inside it),
its placeholder, or for an element without text (an icon) its aria-label, title or alt (a
clickable icon without any: its class, e.g. `like`); text inside a named control is not
repeated, but controls inside a named one stay reachable.

Numbers follow document order, so the same page always gets the same numbers (observations are
deterministic, and a replayed episode sees the ids the model saw).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_TEXT = 60  # characters of one text item or name
MAX_OPTIONS = 20  # options of a select shown (the rest are counted)

SNAPSHOT_JS = r"""
var area = document.getElementById('area');
var roots = [area || document.body];
if (area) {  // what the page shows outside the task region: dialogs, pickers, menus
  var skip = ['wrap', 'reward-display', 'sync-task-cover', 'click-canvas'];
  var top = document.body.children;
  for (var t = 0; t < top.length; t++) {
    var tag0 = top[t].tagName.toLowerCase();
    if (skip.indexOf(top[t].id) < 0 && tag0 !== 'script' && tag0 !== 'style') roots.push(top[t]);
  }
}
var old = document.querySelectorAll('[data-ref]');
for (var i = 0; i < old.length; i++) old[i].removeAttribute('data-ref');
var CONTROL_ROLES = ['button', 'link', 'tab', 'checkbox', 'radio', 'textbox', 'searchbox',
  'combobox', 'listbox', 'option', 'menuitem', 'menuitemcheckbox', 'menuitemradio', 'switch',
  'slider', 'spinbutton', 'treeitem', 'gridcell'];
function clean(t) { return (t || '').replace(/\s+/g, ' ').trim(); }
function visible(el) {
  var s = window.getComputedStyle(el);
  if (s.display === 'none' || s.visibility === 'hidden') return false;
  var r = el.getBoundingClientRect();
  return r.width > 0 && r.height > 0;
}
function hasHandler(el) {
  if (el.__onclick || el.onclick) return true;
  if (!window.jQuery || !jQuery._data) return false;
  var ev = jQuery._data(el, 'events');
  return !!(ev && ev.click);  // not mousedown alone: jQuery UI binds it to drag handles
}
function roleOf(el) {
  var explicit = (el.getAttribute('role') || '').toLowerCase();
  if (CONTROL_ROLES.indexOf(explicit) >= 0) return explicit;
  if (explicit) return null;  // a container (tablist, tabpanel, dialog, presentation, ...)
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
  if (hasHandler(el)) return 'clickable';
  return null;
}
function isControl(el) { return roleOf(el) !== null; }
function ownText(el) {  // the text of el without the text of the controls inside it
  var out = '';
  for (var c = el.firstChild; c; c = c.nextSibling) {
    if (c.nodeType === 3) out += ' ' + c.textContent;
    else if (c.nodeType === 1 && !isControl(c)) out += ' ' + ownText(c);
  }
  return clean(out);
}
function labelOf(el) {
  var label = el.closest('label');
  if (!label && el.id) label = document.querySelector('label[for="' + el.id + '"]');
  return label ? clean(label.textContent) : clean(el.getAttribute('aria-label') || '');
}
function nameOf(el, role) {
  if (role === 'checkbox' || role === 'radio' || role === 'combobox') return labelOf(el);
  if (role === 'textbox') return clean(el.getAttribute('placeholder') || '');
  if (el.tagName.toLowerCase() === 'input') return clean(el.value);
  var text = ownText(el);
  if (text) return text;
  var img = el.querySelector('img');
  var label = el.getAttribute('aria-label') || el.getAttribute('title') ||
              (img && img.getAttribute('alt'));  // an icon: what it stands for
  if (!label && role === 'clickable') label = el.getAttribute('class');
  return clean(label || '');
}
var items = [], n = 0, named = [];
function insideNamed(node) {
  for (var k = 0; k < named.length; k++) if (named[k].contains(node)) return true;
  return false;
}
for (var ri = 0; ri < roots.length; ri++) {
  var root = roots[ri];
  if (root.nodeType !== 1 || !visible(root)) continue;
  var walker = document.createTreeWalker(root, NodeFilter.SHOW_ELEMENT | NodeFilter.SHOW_TEXT);
  var node = ri === 0 ? walker.nextNode() : root;
  while (node) {
    if (node.nodeType === 3) {
      var text = clean(node.textContent);
      var parent = node.parentElement;
      if (text && parent && visible(parent) && !insideNamed(node)) items.push({text: text});
    } else if (visible(node)) {
      var role = roleOf(node);
      // text inside a named control is its name; controls inside it stay reachable
      if (role && (role !== 'clickable' || !insideNamed(node))) {
        n += 1;
        node.setAttribute('data-ref', String(n));
        var item = {ref: n, role: role, name: nameOf(node, role),
                    focused: document.activeElement === node};
        if (role === 'checkbox' || role === 'radio') {
          item.checked = !!node.checked;
          var lab = node.closest('label');
          if (lab) named.push(lab);
        }
        if (role === 'textbox') item.value = node.value;
        if (role === 'combobox' && node.tagName.toLowerCase() === 'select') {
          item.options = Array.prototype.map.call(node.options, function (o) {
            return clean(o.textContent); });
          var chosen = node.options[node.selectedIndex];
          item.value = chosen ? clean(chosen.textContent) : '';
        }
        var sel = node.getAttribute('aria-selected');
        if (sel !== null && (role === 'tab' || role === 'option')) item.selected = sel === 'true';
        var exp = node.getAttribute('aria-expanded');
        if (exp !== null) item.expanded = exp === 'true';
        if (role !== 'textbox' && role !== 'checkbox' && role !== 'radio') named.push(node);
        items.push(item);
      }
    }
    node = walker.nextNode();
  }
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
    options: tuple[str, ...] | None = None  # a select's options, in order
    selected: bool | None = None  # a tab's or an option's aria-selected
    expanded: bool | None = None  # aria-expanded (an accordion header, a menu button)


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
    if item.value is not None and item.role in ("textbox", "combobox"):
        parts.append(f"value={_quote(item.value)}")
    if item.options is not None:
        shown = ", ".join(_quote(o) for o in item.options[:MAX_OPTIONS])
        more = len(item.options) - MAX_OPTIONS
        parts.append(f"options=[{shown}{f', ... {more} more' if more > 0 else ''}]")
    for flag in ("selected", "expanded"):
        if getattr(item, flag) is not None:
            parts.append(f"{flag}={'true' if getattr(item, flag) else 'false'}")
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
                    options=None
                    if item.get("options") is None
                    else tuple(str(o) for o in item["options"]),
                    selected=item.get("selected"),
                    expanded=item.get("expanded"),
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
