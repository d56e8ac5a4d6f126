"""The `r1_searcher` recipe: two RL stages with their own rewards, stage 2 from stage 1's weights.

Mechanism checked: the same completions score differently under the stage-1 reward (+-1
cover-EM, +0.5 search, +0.5 one think and one answer) and the stage-2 reward (F1, -2 for a bad
format), all hand-computed; the pipeline trains stage 1 (with the warm start) and then stage 2
starting from exactly the weights stage 1 exported, with stage 2's reward in its rollouts.
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from agentic_rl.config.load import load_config
from agentic_rl.envs.search.multihop import MultiHopQAEnv
from agentic_rl.formats.chat import TagFormat
from agentic_rl.logging import read_metrics
from agentic_rl.tools.search import BM25Search
from agentic_rl.train.stages import stage_configs, train_recipe
from agentic_rl.types import Task

SMOKE = ["model.name=tiny", "trainer.progress=false"]
WRONG = "<think>I guess.</think><answer>Nowhere</answer>"


def expert_or_wrong(ep, index, turn):
    """The first episode of a group plays the expert, the second answers WRONG. (Stage 2 draws
    the same tasks, hence group ids, as stage 1: its episodes continue the count at 2 and 3.)"""
    return ep.env.expert_turn() if index % 2 == 0 else WRONG


def test_stages_use_their_rewards_and_stage_2_starts_from_stage_1(tmp_path, scripted):
    scripted(expert_or_wrong)
    out = [f"trainer.out_dir={tmp_path}", "trainer.keep_last=5"]  # keep stage 2's step 0
    cfg = load_config("r1_searcher", [*SMOKE, *out], smoke=True)
    stage1, stage2 = stage_configs(cfg)
    assert stage1.env.options["reward"] == "r1_searcher_stage1"
    assert stage2.env.options["reward"] == "r1_searcher_stage2"
    assert stage1.warm_start.num_tasks > 0 and stage2.warm_start.num_tasks == 0
    summary = train_recipe(cfg)
    assert set(summary["stages"]) == {"stage1", "stage2"}
    run = tmp_path / "r1_searcher"
    exported = load_file(run / "stage1" / "model" / "model.safetensors")
    start = load_file(run / "stage2" / "checkpoints" / "step_000000" / "model.safetensors")
    tied = {"model.embed_tokens.weight": "lm_head.weight"}  # one tensor, saved under either
    for name, tensor in exported.items():
        assert torch.equal(tensor, start[name if name in start else tied[name]]), name
    rewards = {}
    for stage in ("stage1", "stage2"):
        rows = read_metrics(run / stage / "metrics.jsonl")
        rewards[stage] = [r["train/reward"] for r in rows if "train/reward" in r]
        assert any("warm_start/last_loss" in r for r in rows) == (stage == "stage1")
    # the same two behaviours: the expert (right, searches, one think) and WRONG
    assert rewards["stage1"] == [pytest.approx((2.0 - 0.5) / 2)] * 2
    assert rewards["stage2"] == [pytest.approx((1.0 + 0.0) / 2)] * 2


CORPUS = [{"id": "0", "contents": '"Harbour"\nThe harbour is New Amsterdam Harbour.'}]
TASK = Task("t", "Which harbour?", ["New Amsterdam Harbour"])
OPEN = "<think>Look it up. <search>harbour</search>"
CLOSE = "So it is that.</think><answer>{}</answer>"


def episode_return(reward: str, turns: list[str]) -> float:
    env = MultiHopQAEnv(reward=reward, tools=[BM25Search(CORPUS, topk=1)], format_penalty=0.0)
    fmt = TagFormat(env.tools)
    env.reset(TASK, 0)
    return sum(env.step(fmt.parse(text, "stop")).reward for text in turns)


@pytest.mark.parametrize(
    "turns, stage1, stage2",
    [
        # one think holding the search, right answer: 1 + 0.5 + 0.5 | F1 1, good format
        ([OPEN, CLOSE.format("New Amsterdam Harbour")], 2.0, 1.0),
        # a gold answer inside a longer one: cover-EM 1 | F1 2*(3/4*1)/(3/4+1) = 6/7
        ([OPEN, CLOSE.format("the New Amsterdam Harbour pier")], 2.0, 6 / 7),
        # a partial answer: cover-EM -1 + 1 | F1 2*(1*2/3)/(1+2/3) = 0.8
        ([OPEN, CLOSE.format("Amsterdam Harbour")], 0.0, 0.8),
        # Search-R1's layout, a think per turn: no one-think bonus, 1 + 0.5 | format still fine
        (
            [
                "<think>Look.</think><search>harbour</search>",
                "<think>So.</think><answer>New Amsterdam Harbour</answer>",
            ],
            1.5,
            1.0,
        ),
        # no search, wrong: -1 + 0.5 (one think, one answer) | F1 0, good format
        (["<think>Guess.</think><answer>Old Pier</answer>"], -0.5, 0.0),
        # no think at all, right: 1 + 0.5 | F1 1 - 2
        (["<search>harbour</search>", "<answer>New Amsterdam Harbour</answer>"], 1.5, -1.0),
        # cut after one search, no answer: -1 + 0.5 | 0 - 2
        ([OPEN], -0.5, -2.0),
    ],
)
def test_the_same_completion_scores_differently_per_stage(turns, stage1, stage2):
    assert episode_return("r1_searcher_stage1", turns) == pytest.approx(stage1)
    assert episode_return("r1_searcher_stage2", turns) == pytest.approx(stage2)
