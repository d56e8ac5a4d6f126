"""Regression guard for the rollout's work per step, counted (not timed) with the tiny model.

A rollout of B tasks x G samples through the real loop (`run_episodes` + `policy_actor` +
`HFGenerator`) must
1. prefill each distinct prompt once per turn-1 generate call, not G times;
2. on turn 2, reuse the KV of turn 1: only the tokens appended since (the last sampled token,
   whose KV was never computed, and the observation) are run through the model;
3. never re-tokenise model text: the tokenizer encodes prompts (chat template) and observations,
   never a completion's text, and the trajectories hold the sampled ids themselves.

The negative controls at the end show each check fails on the regression it guards against.
"""

from __future__ import annotations

from typing import Any

from agentic_rl.backends.hf import HFGenerator
from agentic_rl.config.rollout import RolloutConfig
from agentic_rl.envs.math.calculator import CalculatorEnv, make_calculator_tasks
from agentic_rl.formats.chat import TagFormat
from agentic_rl.rollout.actors import policy_actor
from agentic_rl.rollout.loop import run_episodes

B, G = 2, 4  # tasks per step, samples per task


class CountingTokenizer:
    """Delegates to the real tokenizer and records every text it is asked to encode."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.encoded: list[str] = []  # texts given to __call__ / encode
        self.templated: list[list[dict]] = []  # conversations given to apply_chat_template

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __len__(self) -> int:
        return len(self._inner)

    def __call__(self, text: Any, *args: Any, **kwargs: Any) -> Any:
        self.encoded.extend([text] if isinstance(text, str) else list(text))
        return self._inner(text, *args, **kwargs)

    def encode(self, text: str, *args: Any, **kwargs: Any) -> Any:
        self.encoded.append(text)
        return self._inner.encode(text, *args, **kwargs)

    def apply_chat_template(self, conversation: Any, *args: Any, **kwargs: Any) -> Any:
        self.templated.append(conversation)
        return self._inner.apply_chat_template(conversation, *args, **kwargs)


class CountingGenerator:
    """Wraps a generator: per generate call, the prompts, the completions, the change of the
    HFGenerator counters and the shapes of the model forwards (first = prefill)."""

    def __init__(self, inner: Any, model: Any) -> None:
        self.inner = inner
        self.records: list[dict[str, Any]] = []
        self._shapes: list[tuple[int, ...]] = []
        model.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module: Any, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        self._shapes.append(tuple(ids.shape))

    def _counters(self) -> tuple[int, int, int]:
        hf = self.inner if isinstance(self.inner, HFGenerator) else self.inner.inner
        return hf.calls, hf.prompt_tokens, hf.reused_tokens

    def generate(self, prompts: Any, params: Any) -> Any:
        before = self._counters()
        self._shapes = []
        out = self.inner.generate(prompts, params)
        after = self._counters()
        self.records.append(
            {
                "prompts": [list(p) for p in prompts],
                "completions": [list(c.token_ids) for c in out],
                "calls": after[0] - before[0],
                "prompt_tokens": after[1] - before[1],
                "reused_tokens": after[2] - before[2],
                "forwards": list(self._shapes),
            }
        )
        return out


class PerSampleGenerator:
    """A regression on purpose: one generate call per sample, so a group's prompt is prefilled
    G times."""

    def __init__(self, inner: HFGenerator) -> None:
        self.inner = inner

    def generate(self, prompts: Any, params: Any) -> Any:
        params = params if isinstance(params, list) else [params] * len(prompts)
        return [self.inner.generate([p], [q])[0] for p, q in zip(prompts, params, strict=True)]


def rollout(tiny: Any, tokenizer: Any, make_generator=None, act_wrapper=None):
    """B tasks x G samples, two turns of 5 sampled tokens each on the calculator env (the random
    tiny model never writes a tag, so turn 1 is an invalid action: an error observation and a
    second turn)."""
    tok = CountingTokenizer(tokenizer)
    hf = HFGenerator(tiny, tok, max_batch_size=B * G)
    gen = CountingGenerator(make_generator(hf) if make_generator else hf, tiny)
    env0 = CalculatorEnv()
    fmt = TagFormat(env0.tools)
    cfg = RolloutConfig(
        max_turns=2, max_tokens_per_turn=5, max_total_tokens=400, temperature=1.0, top_p=1.0
    )
    tasks = make_calculator_tasks("train", B, seed=0)
    expanded = [t for t in tasks for _ in range(G)]
    groups = [f"0:{t.task_id}" for t in expanded]
    envs = [CalculatorEnv() for _ in expanded]
    act = policy_actor(gen, fmt, cfg, seed=1)
    if act_wrapper is not None:
        act = act_wrapper(act, tok)
    trajs = run_episodes(envs, expanded, groups, act, fmt, tok, cfg, seed=0)
    return trajs, gen, tok


def turn1_work(gen: CountingGenerator) -> tuple[int, int, int]:
    """(distinct prompts, prompt tokens prefilled, rows of the prefill forward) of turn 1."""
    first = gen.records[0]
    distinct = {tuple(p) for p in first["prompts"]}
    return len(distinct), first["prompt_tokens"], first["forwards"][0][0]


def turn2_expected(trajs: list) -> tuple[int, int]:
    """(new tokens, reused tokens) turn 2 should cost when turn 1's KV is reused: each
    continuing episode feeds its last sampled token (never run through the model) and the
    observation; the prompt and the other turn-1 tokens come from the cache."""
    new = reused = 0
    for t in trajs:
        if len(t.turn_spans) == 2:
            (_, end1), (start2, _) = t.turn_spans
            new += start2 - (end1 - 1)
            reused += end1 - 1
    return new, reused


def retokenised(tok: CountingTokenizer, gen: CountingGenerator, tokenizer: Any) -> list[str]:
    """The encoded texts that contain the text of a sampled completion."""
    model_texts = [tokenizer.decode(c) for r in gen.records for c in r["completions"]]
    assert all(text.strip() for text in model_texts)
    return [text for text in tok.encoded if any(m in text for m in model_texts)]


def test_each_distinct_prompt_is_prefilled_once(tiny, tokenizer):
    trajs, gen, _ = rollout(tiny, tokenizer)
    assert len(trajs) == B * G
    first = gen.records[0]
    assert len(first["prompts"]) == B * G and first["calls"] == 1
    distinct, prefilled, prefill_rows = turn1_work(gen)
    assert distinct == B  # the G samples of a task share its prompt
    assert prefill_rows == B  # one prefill row per distinct prompt, not per sample
    assert prefilled == sum(len(p) for p in {tuple(p) for p in first["prompts"]})
    # Every later forward of turn 1 decodes one token per live row.
    assert all(shape[1] == 1 for shape in first["forwards"][1:])


def test_turn_two_reuses_turn_one_kv(tiny, tokenizer):
    trajs, gen, _ = rollout(tiny, tokenizer)
    assert len(gen.records) == 2, "expected a second turn for the invalid first actions"
    continuing = [t for t in trajs if len(t.turn_spans) == 2]
    assert len(continuing) == B * G
    second = gen.records[1]
    new, reused = turn2_expected(trajs)
    assert second["prompt_tokens"] == new
    assert second["reused_tokens"] == reused
    full = sum(len(p) for p in second["prompts"])
    assert second["prompt_tokens"] + second["reused_tokens"] == full
    assert second["prompt_tokens"] < full / 3  # the point: the context is not re-run


def test_rollout_never_retokenises_model_text(tiny, tokenizer):
    trajs, gen, tok = rollout(tiny, tokenizer)
    # Trajectories hold exactly the sampled ids.
    sampled = [c for record in gen.records for c in record["completions"]]
    spans = [t.token_ids[s:e] for t in trajs for s, e in t.turn_spans]
    assert sorted(map(tuple, spans)) == sorted(map(tuple, sampled))
    # Encodes: one chat template per episode start, one observation per continuing episode.
    assert len(tok.templated) == B * G
    assert len(tok.encoded) == sum(len(t.turn_spans) == 2 for t in trajs)
    assert retokenised(tok, gen, tokenizer) == []


# --- negative controls: the checks above catch the regressions they guard against -------------


def test_guard_catches_per_sample_prefill(tiny, tokenizer):
    _, gen, _ = rollout(tiny, tokenizer, make_generator=PerSampleGenerator)
    _, prefilled, _ = turn1_work(gen)
    once = sum(len(p) for p in {tuple(p) for p in gen.records[0]["prompts"]})
    # outside tree rollouts the KV store reuses only an episode's own earlier turn, never part
    # of another row (backends/kv_store.py cut_prefixes), so G one-row calls prefill G times
    assert prefilled == G * once != once  # what test_each_distinct_prompt_is_prefilled_once rejects


def test_guard_catches_lost_kv_reuse(tiny, tokenizer):
    def no_prefix_cache(hf: HFGenerator) -> HFGenerator:
        hf.prefix_cache = False
        return hf

    trajs, gen, _ = rollout(tiny, tokenizer, make_generator=no_prefix_cache)
    new, _ = turn2_expected(trajs)
    second = gen.records[1]
    assert second["reused_tokens"] == 0
    assert second["prompt_tokens"] == sum(len(p) for p in second["prompts"]) > new


def test_guard_catches_retokenised_model_text(tiny, tokenizer):
    def retokenising(act, tok):
        def wrapped(episodes, budgets, turn):
            out = act(episodes, budgets, turn)
            for c in out:  # the classic bug: decode the completion, encode the text again
                c.token_ids = list(
                    tok(tok.decode(c.token_ids), add_special_tokens=False)["input_ids"]
                )
                c.logprobs = [0.0] * len(c.token_ids)
            return out

        return wrapped

    _, gen, tok = rollout(tiny, tokenizer, act_wrapper=retokenising)
    assert len(retokenised(tok, gen, tokenizer)) == B * G * 2  # every turn of every episode
