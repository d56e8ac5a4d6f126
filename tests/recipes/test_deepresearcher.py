"""The `deepresearcher` recipe: web_search + browse_webpage over the local fake web, pages read
through the condensing reader, DeepResearcher's reward (F1; -1 for any malformed turn).

Mechanisms checked through the trainer: browsing returns condensed page text; the rewards of
scripted episodes follow the paper's rules by hand and reach the GRPO batch; the real web is
never contacted (the test fails on any HTTP request), and asking for it without the settings
fails with a clear error.
"""

from __future__ import annotations

import re

import httpx
import pytest
import torch

from agentic_rl.config.load import load_config
from agentic_rl.envs.from_config import make_envs
from agentic_rl.envs.search.web_qa import FAKE_WEB_URL, WebQAEnv
from agentic_rl.logging import read_metrics
from agentic_rl.tools.web import LocalFakeProvider, WebDisabledError
from agentic_rl.train.batch import prepare_batch
from agentic_rl.train.collect import collect, expert_demos
from agentic_rl.train.setup import build
from agentic_rl.train.stages import train_recipe

# the smoke run skips the evaluation before training: the shared CPU is the bottleneck
LIGHT = ["trainer.eval_before=false"]
SMOKE = ["model.name=tiny", "trainer.progress=false"]


@pytest.fixture
def offline(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("an HTTP request was made")

    monkeypatch.setattr(httpx.Client, "send", refuse)
    monkeypatch.delenv("AGENTIC_RL_ENABLE_WEB", raising=False)


def test_deepresearcher_smoke(tmp_path, offline):
    cfg = load_config("deepresearcher", [*SMOKE, *LIGHT, f"trainer.out_dir={tmp_path}"], smoke=True)
    assert cfg.env.name == "web_qa" and cfg.env.options["reward"] == "deepresearcher"
    summary = train_recipe(cfg)
    assert summary["steps"] == 2 and "after" in summary
    rows = read_metrics(tmp_path / "deepresearcher" / "metrics.jsonl")
    assert sum("train/reward" in r for r in rows) == 2
    assert any("warm_start/last_loss" in r for r in rows)


def script(ep, index, turn):
    """0: the expert (think, search, browse, search, browse, answer). 1: the expert without a
    thought in its second turn. 2: the expert with a wordy answer ("X city")."""
    text = ep.env.expert_turn()
    if index == 1 and turn == 1:
        return re.sub(r"<think>.*?</think>", "", text)
    if index == 2:
        return text.replace("</answer>", " city</answer>")
    return text


def test_pages_are_condensed_and_rewards_follow_the_rules(scripted, offline):
    cfg = load_config("deepresearcher", [*SMOKE, "rollout.group_size=3"])
    setup = build(cfg)
    env = make_envs(cfg, 1)[0]
    assert isinstance(env, WebQAEnv) and [t.name for t in env.tools] == [
        "web_search",
        "browse_webpage",
    ]
    assert isinstance(env.tools[0].provider, LocalFakeProvider)
    scripted(script)
    episodes, _, _ = collect(setup, step=1)
    for samples, task in zip(episodes.samples, episodes.tasks, strict=True):
        (episode,) = samples
        pages = re.findall(r"<information>(Page: .*?)</information>", episode.completion_text, re.S)
        assert len(pages) == 2  # both hops' pages were opened
        for page, fact in zip(pages, (task.fields["bridge"], task.answers[0]), strict=True):
            url, text = page.split("\n", 1)
            raw = env.tools[0].provider.fetch(url.removeprefix("Page: "))
            assert url.startswith(f"Page: {FAKE_WEB_URL}") and len(text) <= 200 < len(raw)
            assert fact in text  # the part that answers the hop was kept
    # per group: the expert 1.0; a turn without <think> -1; F1 of "X city" = 2 * 1/2 / 1.5 = 2/3
    rewards = episodes.rewards().view(2, 3)
    assert torch.allclose(rewards, torch.tensor([1.0, -1.0, 2 / 3]).expand(2, 3))
    batch = prepare_batch(setup, episodes)
    r = torch.tensor([1.0, -1.0, 2 / 3])
    expected = (r - r.mean()) / (r.std() + 1e-6)  # GRPO over each group
    first = batch.advantages[torch.arange(6), batch.loss_mask.argmax(dim=1)]
    assert torch.allclose(first, expected.repeat(2), atol=1e-5)


def test_real_web_needs_explicit_settings(offline):
    cfg = load_config("deepresearcher", [*SMOKE, "env.options.provider=http"])
    with pytest.raises(ValueError, match="http_endpoint"):
        build(cfg)
    endpoint = "env.options.http_endpoint=https://search.invalid/api"
    cfg = load_config("deepresearcher", [*SMOKE, "env.options.provider=http", endpoint])
    with pytest.raises(WebDisabledError, match="enable_web"):
        build(cfg)


def test_warm_start_demonstrations_are_well_formed(tokenizer, offline):
    setup = build(load_config("deepresearcher", SMOKE))
    demos, successes = expert_demos(setup, 4)
    assert successes == 4 and len(demos) == 4
    for demo in demos:
        assert demo.reward == 1.0  # DeepResearcher's score: every turn well formed, F1 1
        turns = [tokenizer.decode(demo.token_ids[a:b]) for a, b in demo.turn_spans]
        assert len(turns) == 5 and all(turn.startswith("<think>") for turn in turns)
