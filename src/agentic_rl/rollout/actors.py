"""The actors: how a batch of live episodes gets its next turns. An `Actor` is called by the
episode engine (rollout/loop.py) with the episodes to decode, a token budget per episode and
the turn index (which, with the episode's place in the rollout, seeds its sampling:
rollout/episode.py `turn_seed`); it returns one Completion per episode. The policy samples them from the generator (`policy_actor`; with a thinking budget, rollout/think_budget.py),
the env's scripted expert writes them for the supervised warm start (`expert_actor`); the
multi-agent role actor (rollout/roles.py) wraps either.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import Any

from agentic_rl.config.rollout import RolloutConfig
from agentic_rl.formats.chat import ChatFormat, TagFormat
from agentic_rl.model.tokens import encode_text
from agentic_rl.rollout.episode import Episode, turn_seed
from agentic_rl.rollout.think_budget import budget_actor
from agentic_rl.types import Completion, SamplingParams

# A thought before the action: a whole <think> span, or the opening / closing part of one that
# spans several turns (R1-Searcher searches inside a single think).
_LEADING_THINK = re.compile(r"\s*(?:<think>.*?</think>|<think>[^<]*|[^<]*</think>)\s*", re.DOTALL)


# act(live episodes, token budget per episode, turn index) -> one Completion per episode
Actor = Callable[[list[Episode], list[int], int], list[Completion]]


def policy_actor(
    generator: Any,
    fmt: ChatFormat,
    cfg: RolloutConfig,
    seed: int,
    greedy: bool = False,
    tokenizer: Any = None,
) -> Actor:
    """Sample each turn from the policy (greedy for evaluation). With `rollout.think_budget`
    thinking blocks are cut at the budget (rollout/think_budget.py), which reads the turn's
    text with `tokenizer` (default: the generator's)."""
    if cfg.think_budget > 0:
        tokenizer = tokenizer if tokenizer is not None else getattr(generator, "tokenizer", None)
        if tokenizer is None:
            raise ValueError("rollout.think_budget needs the tokenizer: pass it to policy_actor")
        return budget_actor(generator, fmt, cfg, tokenizer, seed, greedy)

    # ARPO's branching (rollout/arpo.py) reads the entropy of each sampled turn's first tokens.
    entropy_tokens = cfg.tree.entropy_tokens if cfg.tree.branch == "entropy" and not greedy else 0

    def act(episodes: list[Episode], budgets: list[int], turn: int) -> list[Completion]:
        params = [
            SamplingParams(
                max_new_tokens=budget,
                temperature=0.0 if greedy else cfg.temperature,
                top_p=1.0 if greedy else cfg.top_p,
                stop=list(fmt.stop),
                seed=turn_seed(seed, ep, turn),
                entropy_tokens=entropy_tokens,
            )
            for ep, budget in zip(episodes, budgets, strict=True)
        ]
        prompts = [ep.token_ids for ep in episodes]
        if any(ep.images for ep in episodes):  # a vision-language policy sees the pictures
            return generator.generate(prompts, params, images=[ep.images for ep in episodes])
        return generator.generate(prompts, params)

    return act


def shows_mistake(recovery_fraction: float, seed: int, episode: Episode) -> bool:
    """Whether the warm start's `episode` (by its place in the rollout) shows the env's
    scripted mistake: a `recovery_fraction` share of episodes, drawn from `seed`."""
    if recovery_fraction <= 0:
        return False
    draw = random.Random(f"warm_start/recovery/{seed}/{episode.index}").random()
    return draw < recovery_fraction


def expert_actor(
    fmt: ChatFormat, tokenizer: Any, recovery_fraction: float = 0.0, seed: int = 0
) -> Actor:
    """Play the env's scripted expert (tag-format text) in the target chat format.

    This is demonstration data for the supervised warm start, so tokenising its text is the one
    place model-side tokens come from text; behaviour logprobs are 0 (unused by SFT).

    With `recovery_fraction` (warm_start.recovery_fraction) that share of episodes plays the
    env's scripted mistake (`expert_mistake`, e.g. a misspelt first search) at the turn the env
    offers it (the env returns None elsewhere, and once it was played); the mistake's tokens
    are marked inserted (loss mask 0, as an observation's), so the warm start trains the
    expert's recovery in the context the mistake left and never the mistake itself."""
    tag_parsers: dict[int, TagFormat] = {}

    def act(episodes: list[Episode], budgets: list[int], turn: int) -> list[Completion]:
        out = []
        for ep, budget in zip(episodes, budgets, strict=True):
            parser = tag_parsers.setdefault(id(ep.env), TagFormat(ep.env.tools))
            mistake = None
            if shows_mistake(recovery_fraction, seed, ep):
                mistake = ep.env.expert_mistake()
            text = ep.env.expert_turn() if mistake is None else mistake
            action = parser.parse(text, "stop")
            rendered = text
            if action.kind in ("tool", "answer"):
                # Keep the expert's leading thought: rewards that demand <think> (DeepResearcher,
                # Search-R1, R1-Searcher) must see it in the demonstrations.
                thought = _LEADING_THINK.match(text)
                if ep.think_mode == "no_think":  # the empty thinking block is prefilled
                    thought = None
                rendered = (thought.group(0) if thought else "") + fmt.render_action(action)
            ids = encode_text(tokenizer, rendered)[: max(budget, 1)]
            untrained = [(0, len(ids))] if mistake is not None else []
            out.append(Completion(ids, [0.0] * len(ids), "stop", rendered, inserted=untrained))
        return out

    return act
