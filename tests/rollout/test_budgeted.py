"""Context-budgeted episodes: no turn sees more than the budget; each turn trained exactly once,
in the context it was generated from."""

import pytest

from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError
from agentic_rl.config.rollout import RolloutConfig
from agentic_rl.envs.search.multihop import make_multihop_tasks
from agentic_rl.envs.search.web_qa import WebQAEnv
from agentic_rl.formats.chat import TagFormat
from agentic_rl.model.tokens import encode_text
from agentic_rl.rollout.budgeted import (
    CUT_MARKER,
    ContextBudgetError,
    fit_history,
    run_budgeted_episodes,
)
from agentic_rl.rollout.context import make_span
from agentic_rl.rollout.loop import run_episodes
from agentic_rl.types import Completion

# prompt 4 | a1 3 | o1 6 | a2 2 | o2 5 = 20 tokens; the cut marker is one token (99)
P, A1, O1, A2, O2 = [1, 2, 3, 4], [10, 11, 12], [20, 21, 22, 23, 24, 25], [30, 31], [40, 41, 42]
O2 = O2 + [43, 44]
HISTORY = [
    make_span("prompt", P),
    make_span("action", A1),
    make_span("observation", O1),
    make_span("action", A2),
    make_span("observation", O2),
]


def ids(spans):
    return [list(span.token_ids) for span in spans]


def test_fit_history_by_hand():
    m = [99]
    assert ids(fit_history(HISTORY, 20, 20, 2, m)) == [P, A1, O1, A2, O2]  # fits: unchanged
    # o1 is below min_observation_tokens once cut: dropped, marked; 4 + 3 + 1 + 2 + 5 = 15
    assert ids(fit_history(HISTORY, 16, 16, 1, m)) == [P, A1, m, A2, O2]
    # target 10 is out of reach with the last turn kept; the budget (16) is still met
    assert ids(fit_history(HISTORY, 16, 10, 1, m)) == [P, A1, m, A2, O2]
    # keeping 2 turns protects o1 too (20 > 19): the last turn alone is kept instead
    assert ids(fit_history(HISTORY, 19, 19, 2, m)) == [P, A1, m, A2, O2]
    # budget 10: nothing protected but the prompt; both results dropped, then the oldest turn
    assert ids(fit_history(HISTORY, 10, 10, 1, m)) == [P, m, A2, m]  # 4 + 1 + 2 + 1 = 8
    assert fit_history(HISTORY, 4, 4, 1, m) is None  # the prompt and two markers: 6 > 4


def expert(tokenizer, contexts):
    """The env's scripted expert as a policy (logprob -0.5 per token); records every context."""

    def act(episodes, budgets, turn):
        out = []
        for ep in episodes:
            contexts.setdefault(ep.group_id, []).append(list(ep.token_ids))
            text = ep.env.expert_turn()
            token_ids = encode_text(tokenizer, text)[: budgets[0]]
            out.append(Completion(token_ids, [-0.5] * len(token_ids), "stop", text))
        return out

    return act


def run(tokenizer, budget, tasks):
    envs = [WebQAEnv() for _ in tasks]
    groups = [f"g{i}" for i in range(len(tasks))]
    contexts: dict[str, list[list[int]]] = {}
    act, fmt = expert(tokenizer, contexts), TagFormat(envs[0].tools)
    cfg = RolloutConfig(max_turns=6, max_tokens_per_turn=64, max_total_tokens=2000)
    if not budget:
        return [
            [t] for t in run_episodes(envs, tasks, groups, act, fmt, tokenizer, cfg, 0)
        ], contexts
    cfg.context_budget = budget
    return run_budgeted_episodes(envs, tasks, groups, act, fmt, tokenizer, cfg, 0), contexts


def test_no_turn_sees_more_than_the_budget_and_off_it_does(tokenizer):
    tasks = make_multihop_tasks("train", 3)
    budget = 300
    episodes, contexts = run(tokenizer, budget, tasks)
    seen = [len(c) for cs in contexts.values() for c in cs]
    assert max(seen) <= budget
    unbounded, raw_contexts = run(tokenizer, 0, tasks)
    assert max(len(c) for cs in raw_contexts.values() for c in cs) > budget  # the ablation
    marker = encode_text(tokenizer, CUT_MARKER)
    for samples, plain, group in zip(episodes, unbounded, ("g0", "g1", "g2"), strict=True):
        # same episode, same reward: only what the policy is shown changed
        assert samples[0].reward == plain[0].reward == 1.0
        assert len(samples) > 1 and samples[0].metrics["context_cuts"] == len(samples) - 1
        assert samples[0].metrics["max_context"] <= budget
        assert {s.group_id for s in samples} == {plain[0].group_id}
        turns = [(s, a, b) for s in samples for a, b in s.turn_spans]
        assert len(turns) == len(contexts[group]) == 5
        for (sample, start, _), context in zip(turns, contexts[group], strict=True):
            assert sample.token_ids[:start] == context  # trained in the context it saw
        for k, sample in enumerate(samples):
            sampled = {i for a, b in sample.turn_spans for i in range(a, b)}
            assert sample.loss_mask == [int(i in sampled) for i in range(len(sample.token_ids))]
            assert sample.logprobs == [
                -0.5 if i in sampled else 0.0 for i in range(len(sample.token_ids))
            ]
            assert sample.token_versions == [
                0 if i in sampled else -1 for i in range(len(sample.token_ids))
            ]
            if k:  # a later segment starts from a cut context
                start = sample.prompt_length
                window = sample.token_ids[:start]
                assert any(window[i : i + len(marker)] == marker for i in range(start))
        # every turn trained exactly once: the sampled tokens are the uncut episode's
        assert sum(sum(s.loss_mask) for s in samples) == sum(plain[0].loss_mask)
        assert samples[-1].completion_text == plain[0].completion_text
        assert [r for s in samples for r in s.step_rewards] == plain[0].step_rewards


def test_a_budget_that_never_binds_gives_the_plain_episode(tokenizer):
    tasks = make_multihop_tasks("train", 1)
    (samples,), _ = run(tokenizer, 4000, tasks)
    ((plain,),), _ = run(tokenizer, 0, tasks)
    assert len(samples) == 1
    assert samples[0].token_ids == plain.token_ids and samples[0].loss_mask == plain.loss_mask
    assert samples[0].turn_spans == plain.turn_spans


def test_a_prompt_longer_than_the_budget_is_an_error(tokenizer):
    with pytest.raises(ContextBudgetError, match="context_budget=50"):
        run(tokenizer, 50, make_multihop_tasks("train", 1))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["rollout.context_budget=300", "rollout.mode=step"], "rollout.mode=episode"),
        (
            ["rollout.context_budget=300", "algo.name=ppo"],
            "one of grpo, dr_grpo, rloo, mt_grpo, turn_ppo, not ppo",
        ),
        (["rollout.context_budget=300", "rollout.context_target=400"], "exceeds"),
        (["rollout.context_target=100"], "does nothing"),
        (["rollout.context_budget=-1"], ">= 0"),
    ],
)
def test_config_rules(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config("search_qa_grpo", overrides)
