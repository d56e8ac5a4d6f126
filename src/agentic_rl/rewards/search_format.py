"""Format rules of search agents (Search-R1, ReSearch, R1-Searcher, multi-turn checks).

All functions read a *completion*: the text after the prompt, model turns with the inserted
results in between, as `Trajectory.completion_text` holds it. Tags are configurable
(`SearchTags`): this project's tag format is Search-R1's (`<search>`, `<information>`); the
constants below give each system's own tags for data produced elsewhere.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

ASSISTANT_MARKER = re.compile(r"<\|im_start\|>assistant\s*")
_END_TOKENS = re.compile(r"(?:\s|<\|(?:im_end|endoftext|eot_id|end_of_text)\|>|</s>)+\Z")


def strip_end_tokens(text: str) -> str:
    """Remove end-of-turn / end-of-text tokens (and whitespace) at the end of a decoded
    completion, so `...</answer><|im_end|>` counts as ending with the answer."""
    return _END_TOKENS.sub("", text)


@dataclass(frozen=True)
class SearchTags:
    """Opening and closing strings of the think, search, result and answer spans."""

    search: tuple[str, str] = ("<search>", "</search>")
    result: tuple[str, str] = ("<information>", "</information>")
    think: tuple[str, str] = ("<think>", "</think>")
    answer: tuple[str, str] = ("<answer>", "</answer>")

    def all(self) -> list[tuple[str, str]]:
        return [self.think, self.search, self.result, self.answer]


SEARCH_R1_TAGS = SearchTags()
DEFAULT_TAGS = SEARCH_R1_TAGS
RESEARCH_TAGS = SearchTags(result=("<result>", "</result>"))
R1_SEARCHER_TAGS = SearchTags(
    search=("<|begin_of_query|>", "<|end_of_query|>"),
    result=("<|begin_of_documents|>", "<|end_of_documents|>"),
)


def _span(tags: tuple[str, str]) -> re.Pattern[str]:
    return re.compile(re.escape(tags[0]) + r"(.*?)" + re.escape(tags[1]), re.DOTALL)


def blocks(text: str, tags: tuple[str, str]) -> list[str]:
    """Stripped contents of every complete `open ... close` span, in order."""
    return [match.strip() for match in _span(tags).findall(text)]


def last_block(text: str, tags: tuple[str, str]) -> str | None:
    """Stripped content of the last complete span, or None."""
    found = blocks(text, tags)
    return found[-1] if found else None


def balanced(text: str, tags: tuple[str, str]) -> bool:
    """As many opening as closing strings."""
    return text.count(tags[0]) == text.count(tags[1])


def after_assistant_marker(text: str) -> str:
    """Text after the first `<|im_start|>assistant` (whole prompt+response strings), else all."""
    match = ASSISTANT_MARKER.search(text)
    return text[match.end() :] if match else text


def search_r1_valid_sequence(text: str, tags: SearchTags = SEARCH_R1_TAGS) -> tuple[bool, str]:
    """Search-R1 v0.3's `is_valid_sequence` (verl/utils/reward_score/qa_em_format.py).

    Every tag balanced; the spans follow the grammar
    `think (search information think)* answer`, i.e. start -> <think> -> </think> -> either
    <search> ... </search> <information> ... </information> and a new <think>, or <answer> ...
    </answer> -> end; only whitespace between spans; the text ends after </answer>.
    Returns (valid, reason).
    """
    content = strip_end_tokens(after_assistant_marker(text))
    for pair in tags.all():
        if not balanced(content, pair):
            return False, f"{pair[0]} and {pair[1]} are not balanced"
    names = {tags.think: "think", tags.search: "search", tags.result: "information"}
    names[tags.answer] = "answer"
    kinds: dict[str, tuple[str, bool]] = {}
    for pair, name in names.items():
        kinds[pair[0]], kinds[pair[1]] = (name, True), (name, False)
    splitter = re.compile("(" + "|".join(re.escape(t) for t in kinds) + ")")
    # state -> {(tag kind, is opening): next state}
    moves = {
        "start": {("think", True): "in_think"},
        "in_think": {("think", False): "after_think"},
        "after_think": {("search", True): "in_search", ("answer", True): "in_answer"},
        "in_search": {("search", False): "after_search"},
        "after_search": {("information", True): "in_information"},
        "in_information": {("information", False): "information"},
        "information": {("think", True): "in_think"},
        "in_answer": {("answer", False): "end"},
    }
    inside = {"in_think", "in_search", "in_information", "in_answer"}
    state = "start"
    for part in splitter.split(content):
        if not part.strip():
            continue
        if part in kinds:
            nxt = moves.get(state, {}).get(kinds[part])
            if nxt is None:
                return False, f"unexpected {part} in state {state}"
            state = nxt
        elif state not in inside:
            return False, f"text {part.strip()[:40]!r} outside the tags (state {state})"
    if state != "end":
        return False, f"incomplete sequence, ended in state {state}"
    return True, "valid"


def extract_boxed(text: str) -> str | None:
    r"""Content of the last `\boxed{...}` (braces matched; a `\text{...}` wrapper removed)."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed")
    for i in range(start + len("\\boxed"), len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                break
    else:
        return None  # never closed
    inner = text[start + len("\\boxed{") : i].strip()
    if inner.startswith("\\text{") and inner.endswith("}"):
        inner = inner[len("\\text{") : -1].strip()
    return inner


def research_valid_format(text: str, tags: SearchTags = RESEARCH_TAGS) -> tuple[bool, str]:
    r"""ReSearch's `validate_format` (Agent-RL/ReSearch, verl/utils/reward_score/re_search.py).

    Think tags balanced and at least one pair; exactly one answer pair; every search followed
    by its result in order (search < /search < result < /result); the answer holds \boxed{}.
    """
    think, answer = tags.think, tags.answer
    if not balanced(text, think):
        return False, "think tags not paired"
    if text.count(think[0]) == 0:
        return False, "no think span"
    if text.count(answer[0]) != 1 or text.count(answer[1]) != 1:
        return False, "need exactly one answer span"
    pos = 0
    while (search_at := text.find(tags.search[0], pos)) != -1:
        search_end = text.find(tags.search[1], search_at)
        result_at = text.find(tags.result[0], search_at)
        result_end = text.find(tags.result[1], max(result_at, 0))
        if -1 in (search_end, result_at, result_end):
            return False, "search/result spans incomplete"
        if not search_at < search_end < result_at < result_end:
            return False, "search/result spans out of order"
        pos = result_end
    answer_at, answer_end = text.find(answer[0]), text.find(answer[1])
    if answer_at > answer_end:
        return False, "answer closed before it opened"
    if "\\boxed{" not in text[answer_at:answer_end]:
        return False, "answer has no \\boxed{}"
    return True, "valid"


def split_turns(
    completion: str, tags: SearchTags = DEFAULT_TAGS, extra_result_tags: Sequence[str] = ("error",)
) -> list[str]:
    """Model turns of a multi-turn completion: the text between inserted result spans.

    Results are `tags.result` spans plus `<name>...</name>` for each of `extra_result_tags`
    (the tag format wraps error observations in `<error>`). A completion that ends with a
    result has an empty last turn (the episode was cut before the model answered).
    """
    spans = [tags.result] + [(f"<{name}>", f"</{name}>") for name in extra_result_tags]
    pattern = "|".join(re.escape(a) + r".*?" + re.escape(b) for a, b in spans)
    return re.split(pattern, completion, flags=re.DOTALL)


def turn_well_formed(
    turn: str,
    action_tags: Sequence[str],
    final: bool,
    tags: SearchTags = DEFAULT_TAGS,
    require_think: bool = False,
) -> bool:
    """One model turn: optional think spans (required first if `require_think`), then exactly one
    non-empty action span and nothing after it; no stray tags. The action is the answer in the
    final turn and one of `action_tags` (tool names, `<name>...</name>`) in the others."""
    text = turn.strip()
    thinks = _span(tags.think)
    if require_think and not (text.startswith(tags.think[0]) and thinks.match(text)):
        return False
    rest = thinks.sub(" ", text)
    actions = [(f"<{name}>", f"</{name}>") for name in action_tags] + [tags.answer]
    pattern = "|".join(
        f"(?P<a{i}>{re.escape(a)})(?P<b{i}>.*?){re.escape(b)}" for i, (a, b) in enumerate(actions)
    )
    found = list(re.finditer(pattern, rest, flags=re.DOTALL))
    if len(found) != 1 or rest[found[0].end() :].strip():
        return False
    match = found[0]
    index = next(i for i in range(len(actions)) if match.group(f"a{i}") is not None)
    if not match.group(f"b{index}").strip():
        return False
    if (index == len(actions) - 1) != final:
        return False
    outside = rest[: match.start()] + rest[match.end() :]
    return not any(t in outside for pair in actions + [tags.think, tags.result] for t in pair)


def turn_format_flags(
    completion: str,
    action_tags: Sequence[str] = ("search",),
    tags: SearchTags = DEFAULT_TAGS,
    require_think: bool = False,
) -> list[bool]:
    """`turn_well_formed` for each turn of `split_turns(completion)` (the last must answer)."""
    turns = split_turns(strip_end_tokens(completion), tags)
    return [
        turn_well_formed(turn, action_tags, i == len(turns) - 1, tags, require_think)
        for i, turn in enumerate(turns)
    ]
