"""Web research env: condensed pages, DeepResearcher / ASearcher rewards, no real web by default."""

import json
import re

import httpx
import pytest

from agentic_rl.config.rollout import RolloutConfig
from agentic_rl.envs.check import check_env
from agentic_rl.envs.search import web_qa
from agentic_rl.envs.search.multihop import make_multihop_tasks
from agentic_rl.envs.search.web_qa import WebQAEnv
from agentic_rl.formats.chat import TagFormat
from agentic_rl.model.tokens import encode_text
from agentic_rl.rewards.search import asearcher_score, deepresearcher_score
from agentic_rl.rollout.loop import run_episodes
from agentic_rl.tools.page_reader import html_to_text
from agentic_rl.tools.web import WebDisabledError
from agentic_rl.types import Action, Completion

TASK = make_multihop_tasks("train", 1)[0]  # employer_city: answer "Gulstead"


def browse(env, url):
    return env.step(Action(kind="tool", name="browse_webpage", arguments={"url": url}))


def test_browsing_returns_the_condensed_page():
    env = WebQAEnv()
    env.reset(TASK, 0)
    person_url, bridge_url = (web_qa.FAKE_WEB_URL + i for i in TASK.fields["support_doc_ids"])
    raw = web_qa.local_web().pages[bridge_url]
    assert "Open Content License" in raw and len(html_to_text(raw)) > 350
    text = browse(env, bridge_url).observation.content
    header = f"Page: {bridge_url}\n"
    assert text.startswith(header) and len(text) - len(header) <= 200
    assert f"in the city of {TASK.answers[0]}" in text  # the fact that answers the question
    assert "Open Content License" not in text and "var page" not in text  # chrome left out
    whole = WebQAEnv(page_max_chars=5000)
    whole.reset(TASK, 0)
    assert "Open Content License" in browse(whole, bridge_url).observation.content
    # search hits carry a title, the URL and a short snippet; the answer needs the pages
    hits = env.step(
        Action(kind="tool", name="web_search", arguments={"query": TASK.fields["entity"]})
    ).observation.content
    assert f"URL: {person_url}\n" in hits
    assert all(len(line) <= 80 for line in hits.splitlines())


def scripted(tokenizer, edit=lambda turn, text: text):
    """Plays the env's expert, with `edit(turn, text)` applied to each turn's text."""

    def act(episodes, budgets, turn):
        out = []
        for ep in episodes:
            text = edit(turn, ep.env.expert_turn())
            ids = encode_text(tokenizer, text)
            reason = "stop" if text.rstrip().endswith(">") else "length"
            out.append(Completion(ids, [-0.5] * len(ids), reason, text))
        return out

    return act


def no_think(turn, text):
    return re.sub(r"<think>.*?</think>", "", text) if turn == 1 else text


def wordy_answer(turn, text):
    return re.sub(r"</answer>", " city</answer>", text)


def rambles(turn, text):
    return "<think>I am not sure what to do next" if turn == 1 else text


# (edit, max turns, DeepResearcher reward, ASearcher reward, answer EM), by hand
CASES = [
    (lambda t, x: x, 6, 1.0, 1.0, 1.0),  # the expert: search, browse, search, browse, answer
    (wordy_answer, 6, 2 / 3, 2 / 3, 0.0),  # F1 of "gulstead city": P 1/2, R 1 -> 2/3
    (no_think, 6, -1.0, 1.0, 1.0),  # think is required by DeepResearcher, optional in ASearcher
    (rambles, 7, -1.0, 0.0, 1.0),  # a turn without any action is malformed for both
    (lambda t, x: x, 3, -1.0, 0.0, 0.0),  # cut before answering
]


@pytest.mark.parametrize(("edit", "turns", "dr", "asr", "em"), CASES)
def test_rewards_follow_the_papers_rules_and_match_the_completion_scores(
    tokenizer, edit, turns, dr, asr, em
):
    cfg = RolloutConfig(max_turns=turns, max_tokens_per_turn=64, max_total_tokens=2000)
    for scheme, expected, score in (
        ("deepresearcher", dr, deepresearcher_score),
        ("asearcher", asr, asearcher_score),
    ):
        env = WebQAEnv(reward=scheme)
        fmt = TagFormat(env.tools)
        actor = scripted(tokenizer, edit)
        (traj,) = run_episodes([env], [TASK], ["g"], actor, fmt, tokenizer, cfg, 0)
        assert traj.reward == pytest.approx(expected), scheme
        # the env's per-turn rewards add up to rewards/search.py's score of the whole text
        assert score(traj.completion_text, TASK.answers) == pytest.approx(expected), scheme
        assert traj.metrics["success"] == em  # the answer's EM, whatever the format


def test_the_expert_reaches_reward_one_with_both_schemes():
    tasks = make_multihop_tasks("eval", 5)
    for scheme in ("deepresearcher", "asearcher"):
        check_env(WebQAEnv(reward=scheme), tasks, max_expert_turns=6)


def test_real_web_is_never_reached_by_default(monkeypatch, tokenizer):
    def refuse(*args, **kwargs):
        raise AssertionError("the network was reached")

    monkeypatch.setattr(httpx.Client, "send", refuse)
    monkeypatch.delenv("AGENTIC_RL_ENABLE_WEB", raising=False)
    env = WebQAEnv()
    cfg = RolloutConfig(max_turns=6, max_tokens_per_turn=64, max_total_tokens=2000)
    (traj,) = run_episodes(
        [env], [TASK], ["g"], scripted(tokenizer), TagFormat(env.tools), tokenizer, cfg, 0
    )
    assert traj.reward == 1.0 and traj.metrics["tool_calls"] == 4
    with pytest.raises(ValueError, match="http_endpoint"):
        WebQAEnv(provider="http")
    with pytest.raises(WebDisabledError, match="enable_web=true"):
        WebQAEnv(provider="http", http_endpoint="https://search.invalid/api")
    with pytest.raises(ValueError, match="provider is 'local'"):
        WebQAEnv(enable_web=True)
    # enabled but without an API key: a tool error the agent sees, no request is made
    web_qa._http_provider.cache_clear()
    live = WebQAEnv(provider="http", http_endpoint="https://search.invalid/api", enable_web=True)
    live.reset(TASK, 0)
    monkeypatch.delenv("AGENTIC_RL_WEB_API_KEY", raising=False)
    result = live.step(Action(kind="tool", name="web_search", arguments={"query": "x"}))
    assert "set AGENTIC_RL_WEB_API_KEY" in result.observation.content
    web_qa._http_provider.cache_clear()


def test_a_replay_cache_answers_without_any_provider(tmp_path):
    cache = tmp_path / "web.jsonl"
    hit = {"title": "Gulstead", "url": "https://x.invalid/g", "snippet": "a town"}
    row = {"kind": "search", "query": "Gulstead", "k": 3, "result": [hit]}
    cache.write_text(json.dumps(row) + "\n")
    env = WebQAEnv(provider="http", web_cache=str(cache), web_cache_mode="replay")
    env.reset(TASK, 0)
    found = env.step(Action(kind="tool", name="web_search", arguments={"query": "Gulstead"}))
    assert "URL: https://x.invalid/g" in found.observation.content
    missing = env.step(Action(kind="tool", name="web_search", arguments={"query": "other"}))
    assert "no cached search" in missing.observation.content


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"reward": "bleu"}, "reward"),
        ({"provider": "ftp"}, "provider"),
        ({"page_max_chars": 5}, "page_max_chars"),
    ],
)
def test_bad_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        WebQAEnv(**kwargs)
