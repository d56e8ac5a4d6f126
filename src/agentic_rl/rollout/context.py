"""Keep a long multi-turn token context within a budget (long-horizon search agents).

ASearcher (Gao et al. 2025, "Beyond Ten Turns: Unlocking Long-Horizon Agentic Search with
Large-Scale Asynchronous RL") runs up to 128 turns; the raw context (prompt + every action +
every retrieved page) would outgrow the model's window long before that. These pure functions
build the context the next turn is generated from: the prompt and the most recent `k` turns are
kept whole, and the oldest observations are truncated (their head kept) or dropped, optionally
replaced by a marker (e.g. the ids of "[...]"), until the total fits:

    while sum(len(span)) > budget and an old observation is left:
        cut the oldest one to len - excess - len(marker) tokens (drop it if that is below
        `min_observation_tokens`, or always in mode "drop")
    then, if allowed (`drop_old_actions`), drop the oldest unprotected actions

Everything operates on token spans carrying their loss mask and logprobs, so the kept ids, masks
and logprobs stay aligned (marker tokens: mask 0, logprob 0). The policy's own tokens are never
cut: an action is kept whole or dropped whole. The trainer must train on the context the tokens
were sampled under; this module only builds it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

SpanKind = Literal["prompt", "action", "observation"]
Mode = Literal["truncate", "drop"]


@dataclass(frozen=True)
class Span:
    """A run of tokens of one kind, with a loss mask and logprob per token."""

    kind: SpanKind
    token_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]
    logprobs: tuple[float, ...]

    def __post_init__(self) -> None:
        if not len(self.token_ids) == len(self.loss_mask) == len(self.logprobs):
            raise ValueError(
                f"{self.kind} span lengths differ: ids {len(self.token_ids)}, mask "
                f"{len(self.loss_mask)}, logprobs {len(self.logprobs)}"
            )

    def __len__(self) -> int:
        return len(self.token_ids)

    def head(self, n: int) -> Span:
        """The first `n` tokens of this span."""
        return Span(self.kind, self.token_ids[:n], self.loss_mask[:n], self.logprobs[:n])


def make_span(kind: SpanKind, token_ids: Sequence[int], generated: bool | None = None) -> Span:
    """A span whose mask is 1 for actions (unless `generated` says otherwise) and 0 elsewhere;
    logprobs 0 (use the Span constructor to carry real ones)."""
    mask = int(kind == "action" if generated is None else generated)
    n = len(token_ids)
    return Span(kind, tuple(token_ids), (mask,) * n, (0.0,) * n)


def spans_from_trajectory(
    token_ids: Sequence[int],
    loss_mask: Sequence[int],
    logprobs: Sequence[float],
    prompt_length: int,
    turn_spans: Sequence[tuple[int, int]],
) -> list[Span]:
    """Cut a flat trajectory (Trajectory's fields) into prompt / action / observation spans:
    `turn_spans` are the actions; the gaps between them (and after the last) are observations."""
    n = len(token_ids)
    if not n == len(loss_mask) == len(logprobs):
        raise ValueError("token_ids, loss_mask and logprobs differ in length")

    def cut(kind: SpanKind, a: int, b: int) -> Span:
        return Span(kind, tuple(token_ids[a:b]), tuple(loss_mask[a:b]), tuple(logprobs[a:b]))

    spans = [cut("prompt", 0, prompt_length)]
    position = prompt_length
    for start, end in turn_spans:
        if not position <= start <= end <= n:
            raise ValueError(f"turn span ({start}, {end}) out of order or past the end ({n})")
        if start > position:
            spans.append(cut("observation", position, start))
        spans.append(cut("action", start, end))
        position = end
    if position < n:
        spans.append(cut("observation", position, n))
    return spans


@dataclass
class ContextWindow:
    """The kept context and what was done to fit it. `spans` is the kept list (markers
    included); `dropped` / `truncated` index the input spans; `fits` is False when even
    dropping everything allowed left it over budget."""

    spans: list[Span]
    dropped: list[int] = field(default_factory=list)
    truncated: list[int] = field(default_factory=list)
    removed_tokens: int = 0
    fits: bool = True

    @property
    def token_ids(self) -> list[int]:
        return [t for span in self.spans for t in span.token_ids]

    @property
    def loss_mask(self) -> list[int]:
        return [m for span in self.spans for m in span.loss_mask]

    @property
    def logprobs(self) -> list[float]:
        return [lp for span in self.spans for lp in span.logprobs]

    def __len__(self) -> int:
        return sum(len(span) for span in self.spans)


def protected_indices(spans: Sequence[Span], keep_last_turns: int) -> set[int]:
    """The prompt, plus the last `keep_last_turns` actions and everything after the first of
    them (their observations)."""
    protected = {i for i, span in enumerate(spans) if span.kind == "prompt"}
    actions = [i for i, span in enumerate(spans) if span.kind == "action"]
    if keep_last_turns > 0 and actions:
        first = actions[-keep_last_turns] if keep_last_turns <= len(actions) else actions[0]
        protected.update(range(first, len(spans)))
    return protected


def fit_context(
    spans: Sequence[Span],
    budget: int,
    keep_last_turns: int = 2,
    mode: Mode = "truncate",
    marker_ids: Sequence[int] = (),
    min_observation_tokens: int = 16,
    drop_old_actions: bool = False,
) -> ContextWindow:
    """Fit `spans` into `budget` tokens (see the module docstring for the order of cuts)."""
    if budget < 0 or keep_last_turns < 0 or min_observation_tokens < 0:
        raise ValueError("budget, keep_last_turns and min_observation_tokens must be >= 0")
    if mode not in ("truncate", "drop"):
        raise ValueError(f"mode must be 'truncate' or 'drop', got {mode!r}")
    total = sum(len(span) for span in spans)
    # what each input span becomes: itself, a head + marker, a marker, or nothing
    out: list[list[Span]] = [[span] for span in spans]
    window = ContextWindow(spans=[])
    excess = total - budget
    marker = make_span("observation", marker_ids, generated=False)
    markers = [marker] if len(marker) else []
    protected = protected_indices(spans, keep_last_turns)
    for i, span in enumerate(spans):
        if excess <= 0:
            break
        if span.kind != "observation" or i in protected:
            continue
        keep = len(span) - excess - len(marker)
        if mode == "truncate" and keep >= max(min_observation_tokens, 1):
            out[i] = [span.head(keep), *markers]
            window.truncated.append(i)
            excess = 0
        elif len(span) > len(marker):
            out[i] = list(markers)
            window.dropped.append(i)
            excess -= len(span) - len(marker)
    if excess > 0 and drop_old_actions:
        for i, span in enumerate(spans):
            if excess <= 0:
                break
            if span.kind == "action" and i not in protected:
                out[i] = []
                window.dropped.append(i)
                excess -= len(span)
    window.spans = [piece for pieces in out for piece in pieces if len(piece)]
    window.removed_tokens = total - len(window)
    window.fits = len(window) <= budget
    window.dropped.sort()
    return window
