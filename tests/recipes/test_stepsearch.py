"""The `stepsearch` recipe: per-search-step rewards (information gain - redundancy) under PPO/GAE.

Mechanism checked: through the real rollout loop, each search turn's step reward
0.6 (IG_t - RP_t) (hand-computed on a corpus whose cosines are 0 or 1) sits on that turn's
StepResult and, after collation, on the turn's last token; the GAE returns and the PPO
advantages differ from those of the same episode with the step rewards off (outcome only).
"""

from __future__ import annotations

import pytest
import torch

from agentic_rl.algos.advantages import gae_advantages
from agentic_rl.config.algo import AlgoConfig
from agentic_rl.config.load import load_config
from agentic_rl.config.rollout import RolloutConfig
from agentic_rl.envs.search.multihop import MultiHopQAEnv
from agentic_rl.formats.chat import TagFormat
from agentic_rl.learner.advantages import compute_advantages
from agentic_rl.learner.batch import collate
from agentic_rl.logging import read_metrics
from agentic_rl.rollout.loop import run_episodes
from agentic_rl.tools.search import BM25Search
from agentic_rl.train.stages import train_recipe
from agentic_rl.types import Task

SMOKE = ["model.name=tiny", "trainer.progress=false"]


def expert_or_wrong(ep, index, turn):
    return ep.env.expert_turn() if index == 0 else "<think>I guess.</think><answer>Nowhere</answer>"


def test_stepsearch_smoke(tmp_path, scripted):
    scripted(expert_or_wrong)
    cfg = load_config("stepsearch", [*SMOKE, f"trainer.out_dir={tmp_path}"], smoke=True)
    assert cfg.algo.name == "ppo" and cfg.env.options["step_reward_weight"] == 0.6
    summary = train_recipe(cfg)
    assert summary["steps"] == 2
    rows = [
        r for r in read_metrics(tmp_path / "stepsearch" / "metrics.jsonl") if "train/reward" in r
    ]
    assert len(rows) == 2 and all(r["train/value_loss"] > 0 for r in rows)
    assert all(r["train/success"] == 0.5 for r in rows)  # the expert right, the other wrong


CORPUS = [
    {"id": "0", "contents": '"Alpha"\nalpha beta'},
    {"id": "1", "contents": '"Gamma"\ngamma delta'},
    {"id": "2", "contents": '"Zeta"\nzeta eta'},
]
TASK = Task(
    "t",
    "Which?",
    ["delta"],
    {
        "support_docs": [CORPUS[0]["contents"], CORPUS[1]["contents"]],
        "search_keys": [["alpha"], ["gamma"]],
    },
)
TURNS = [
    "<think>a</think><search>alpha</search>",  # gold 1 found: IG (1 + 0) / 2, RP 0
    "<think>b</think><search>alpha</search>",  # the same document again: IG 0, RP 1
    "<think>c</think><search>zeta</search>",  # nothing relevant: IG 0, RP 0
    "<think>d</think><search>gamma</search>",  # gold 2 found: IG (0 + 1) / 2, RP 0
    "<think>e</think><answer>delta</answer>",
]
STEP = [0.6 * 0.5, 0.6 * -1.0, 0.0, 0.6 * 0.5, 0.0]
# outcome: -1 is booked while no answer exists; at the answer F1 1 + 0.618 x key match 1
OUTCOME = [-1.0, 0.0, 0.0, 0.0, 1.618 + 1.0]


def rollout(scripted, tokenizer, weight: float):
    env = MultiHopQAEnv(
        reward="stepsearch",
        step_reward_weight=weight,
        tools=[BM25Search(CORPUS, topk=1)],
        format_penalty=0.0,
    )
    fmt = TagFormat(env.tools)
    act = scripted(lambda ep, index, turn: TURNS[turn])
    cfg = RolloutConfig(max_turns=5, max_tokens_per_turn=32, max_total_tokens=400)
    (trajectory,) = run_episodes([env], [TASK], ["g"], act, fmt, tokenizer, cfg, seed=0)
    return trajectory, env


def test_step_rewards_land_on_their_search_turns(scripted, tokenizer):
    t, env = rollout(scripted, tokenizer, 0.6)
    expected = [s + o for s, o in zip(STEP, OUTCOME, strict=True)]
    assert t.step_rewards == pytest.approx(expected)
    assert t.reward == pytest.approx(1.618 + 0.0)  # the step rewards sum to 0 here
    off, _ = rollout(scripted, tokenizer, 0.0)
    assert off.step_rewards == pytest.approx(OUTCOME)
    # collated: each turn's reward on its last token, nothing elsewhere
    batch = collate([t], tokenizer.pad_token_id)
    ends = [end - 1 for _, end in t.turn_spans]
    assert batch.token_rewards[0, ends].tolist() == pytest.approx(expected)
    others = torch.ones(batch.token_rewards.shape[1], dtype=torch.bool)
    others[ends] = False
    assert torch.all(batch.token_rewards[0, others] == 0)


def test_gae_advantages_differ_from_outcome_only(scripted, tokenizer):
    on, _ = rollout(scripted, tokenizer, 0.6)
    off, _ = rollout(scripted, tokenizer, 0.0)
    batch = collate([on, off], tokenizer.pad_token_id)
    zeros = torch.zeros_like(batch.loss_mask)
    advantages, _ = gae_advantages(batch.token_rewards, zeros, batch.loss_mask, 1.0, 1.0)
    # with V = 0 and gamma = lambda = 1, a turn's tokens get the rewards from that turn on
    for row, expected in ((0, [1.618, 2.318, 2.918, 2.918, 2.618]), (1, [1.618] + [2.618] * 4)):
        for (start, end), value in zip(on.turn_spans, expected, strict=True):
            assert torch.allclose(advantages[row, start:end], torch.tensor(value), atol=1e-5)
    # the trainer's PPO estimator (whitened GAE) sees the difference as well
    batch.old_values = zeros
    compute_advantages(batch, AlgoConfig(name="ppo", gamma=1.0, lam=1.0))
    start, end = on.turn_spans[1]
    assert not torch.allclose(batch.advantages[0, start:end], batch.advantages[1, start:end])
