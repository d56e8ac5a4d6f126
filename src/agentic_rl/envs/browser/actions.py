"""The browser action language, parsed from the model's text, and its execution.

One action per turn, inside the env's `<action>...</action>` tag:

    click(3)              click element 3 (a real WebDriver click: focus, mouse events)
    type(4, "Ann")        click text field 4, clear it, and type the text (anything that does
                          not take text, e.g. a button, is refused before it is touched)
    select(5, "Bob")      choose the option "Bob" of select 5 (its text as the page shows it)
    press("Enter")        press a key on the focused element (Enter, Tab, Escape, Backspace,
                          Space, ArrowUp/Down/Left/Right, or one character)
    scroll("down")        scroll the page (up or down) by 200 pixels

Parsing is lenient where it is unambiguous (`click 3`, `click([3])`, single quotes, no quotes
for one word, any case of the verb); anything else is a `BrowserActionError`, which the env turns
into an error observation and a counted metric, never a crash.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

VERBS = ("click", "type", "select", "press", "scroll")
MAX_ECHO = 40  # characters of the model's text quoted back in an error
KEYS = {
    "enter": "ENTER",
    "return": "ENTER",
    "tab": "TAB",
    "escape": "ESCAPE",
    "esc": "ESCAPE",
    "backspace": "BACKSPACE",
    "delete": "DELETE",
    "space": "SPACE",
    "arrowup": "ARROW_UP",
    "arrowdown": "ARROW_DOWN",
    "arrowleft": "ARROW_LEFT",
    "arrowright": "ARROW_RIGHT",
    "up": "ARROW_UP",
    "down": "ARROW_DOWN",
    "left": "ARROW_LEFT",
    "right": "ARROW_RIGHT",
}
SCROLL_PIXELS = 200

_CALL = re.compile(r"^\s*([A-Za-z_]+)\s*(?:\((.*)\)|\s(.*))?\s*$", re.DOTALL)
_REF = re.compile(r"^\[?\s*#?(\d{1,9})\s*\]?$")  # an id, not a 5000-digit number
_QUOTED = re.compile(r"""^(["'])(.*)\1$""", re.DOTALL)


class BrowserActionError(ValueError):
    """A malformed browser action; the message tells the model how to write it."""


@dataclass(frozen=True)
class BrowserAction:
    """One parsed action: `verb` in VERBS, `ref` (click/type), `text` (type: the text; press:
    the key; scroll: "up" or "down")."""

    verb: str
    ref: int | None = None
    text: str = ""

    def render(self) -> str:
        """The canonical text of the action (what the scripted expert writes)."""
        if self.verb == "click":
            return f"click({self.ref})"
        if self.verb in ("type", "select"):
            return f"{self.verb}({self.ref}, {_dq(self.text)})"
        return f"{self.verb}({_dq(self.text)})"


def _dq(text: str) -> str:
    return '"' + text.replace('"', '\\"') + '"'


def _cut(text: str) -> str:
    """The model's text as an error quotes it: at most MAX_ECHO characters (a long malformed
    action must not flood the observation that echoes it)."""
    return text if len(text) <= MAX_ECHO else text[: MAX_ECHO - 3] + "..."


def _unquote(text: str) -> str:
    text = text.strip()
    match = _QUOTED.match(text)
    if match:
        return match.group(2).replace('\\"', '"')
    if any(c in text for c in "\"'(),"):
        raise BrowserActionError(f"cannot read the text argument {_cut(text)!r}: quote it")
    return text


def _ref(text: str, verb: str) -> int:
    match = _REF.match(text.strip())
    if not match:
        raise BrowserActionError(f"{verb} needs an element id number, got {_cut(text.strip())!r}")
    return int(match.group(1))


def parse_browser_action(text: str) -> BrowserAction:
    """One action from the body of an `<action>` tag (module doc), or BrowserActionError."""
    text = text.strip().rstrip(";.").strip()
    match = _CALL.match(text)
    if not text or not match:
        raise BrowserActionError(f"cannot read {_cut(text)!r} as an action")
    verb = match.group(1).lower()
    args = (match.group(2) if match.group(2) is not None else match.group(3) or "").strip()
    if verb not in VERBS:
        raise BrowserActionError(f"unknown action {_cut(verb)!r} (the actions: {', '.join(VERBS)})")
    if verb == "click":
        return BrowserAction("click", _ref(args, verb))
    if verb in ("type", "select"):
        ref_text, sep, rest = args.partition(",")
        if not sep:
            raise BrowserActionError(f'{verb} needs an element id and a text: {verb}(4, "text")')
        return BrowserAction(verb, _ref(ref_text, verb), _unquote(rest))
    key = _unquote(args)
    if verb == "press":
        if key.lower() not in KEYS and len(key) != 1:
            raise BrowserActionError(f"unknown key {_cut(key)!r}")
        return BrowserAction("press", text=key)
    if key.lower() not in ("up", "down"):
        raise BrowserActionError(f'scroll takes "up" or "down", got {_cut(key)!r}')
    return BrowserAction("scroll", text=key.lower())


def execute(driver: Any, action: BrowserAction) -> None:
    """Perform `action` in the page. Page-level failures (no element with that id, an element
    that cannot take the action) raise BrowserActionError; a dead browser raises WebDriver's
    own errors (the pool tells them apart)."""
    from selenium.common.exceptions import (
        ElementClickInterceptedException,
        ElementNotInteractableException,
        InvalidElementStateException,
        NoSuchElementException,
        StaleElementReferenceException,
    )
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    if action.verb == "scroll":
        step = SCROLL_PIXELS if action.text == "down" else -SCROLL_PIXELS
        driver.execute_script("window.scrollBy(0, arguments[0]);", step)
        return
    if action.verb == "press":
        key = KEYS.get(action.text.lower())
        ActionChains(driver).send_keys(getattr(Keys, key) if key else action.text).perform()
        return
    try:
        element = driver.find_element(By.CSS_SELECTOR, f'[data-ref="{action.ref}"]')
    except NoSuchElementException:
        raise BrowserActionError(f"there is no element [{action.ref}] on the page") from None
    if action.verb == "select":
        _select(element, action)
        return
    if action.verb == "type":
        refused = driver.execute_script(TAKES_TEXT_JS, element)
        if refused:
            raise BrowserActionError(
                f"element [{action.ref}] is {refused}: it cannot be typed into"
                + (
                    f' (choose an option: select({action.ref}, "..."))'
                    if "select" in refused
                    else ""
                )
            )
    try:
        if action.verb == "click":
            element.click()
        else:
            element.click()
            element.clear()
            element.send_keys(action.text)
    except (
        ElementClickInterceptedException,
        ElementNotInteractableException,
        InvalidElementStateException,
        StaleElementReferenceException,
    ) as err:
        what = "typed into" if action.verb == "type" else "clicked"
        raise BrowserActionError(
            f"element [{action.ref}] cannot be {what} ({type(err).__name__})"
        ) from None


# "" when the element takes typed text (a text-like input, a textarea, an editable element),
# else what it is: `type` checks this before it touches the element, so typing into a button
# never clicks it (which would submit the page).
TAKES_TEXT_JS = """
var el = arguments[0], tag = el.tagName.toLowerCase();
if (tag === 'textarea' || el.isContentEditable) return '';
if (tag === 'input') {
  var ty = (el.getAttribute('type') || 'text').toLowerCase();
  var text = ['text', 'password', 'email', 'search', 'tel', 'url', 'number', 'date', 'time',
              'datetime-local', 'month', 'week'];
  return text.indexOf(ty) >= 0 ? '' : 'an input of type ' + ty;
}
if (tag === 'select') return 'a select';
var role = el.getAttribute('role');
return role ? 'a ' + role : (tag === 'button' ? 'a button' : 'a ' + tag + ' element');
"""


def _select(element: Any, action: BrowserAction) -> None:
    """Choose the option of a select whose text is `action.text` (spaces as the page text
    shows them); BrowserActionError when the element is no select or has no such option."""
    from selenium.webdriver.support.select import Select

    if element.tag_name.lower() != "select":
        raise BrowserActionError(f"element [{action.ref}] is not a select: click it instead")
    options = [" ".join(o.text.split()) for o in Select(element).options]
    wanted = " ".join(action.text.split())
    if wanted not in options:
        raise BrowserActionError(f"select [{action.ref}] has no option {_cut(action.text)!r}")
    Select(element).select_by_index(options.index(wanted))
