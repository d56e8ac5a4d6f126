r"""The `research` recipe: ReSearch's format (<think>, <search>, <result>, \boxed{} answer) and
its F1 reward on the whole completion.

Mechanism checked: hand-made completions score as ReSearch's rules say (F1 of the \boxed{}
answer computed by hand; 0.1 for a well-formed wrong answer; 0 for a bad format), where the
plain F1 scheme would pay a correct answer without \boxed{} in full; results come back in
<result> tags, without which the same turns would fail the format.
"""

from __future__ import annotations

import pytest

from agentic_rl.config.load import load_config
from agentic_rl.envs.search.multihop import MultiHopQAEnv
from agentic_rl.formats.chat import TagFormat
from agentic_rl.logging import read_metrics
from agentic_rl.rewards.search import research_score
from agentic_rl.rewards.search_format import RESEARCH_TAGS
from agentic_rl.tools.search import BM25Search
from agentic_rl.train.collect import expert_demos
from agentic_rl.train.setup import build
from agentic_rl.train.stages import train_recipe
from agentic_rl.types import Task

SMOKE = ["model.name=tiny", "trainer.progress=false"]
WRONG = "<think>I guess.</think><answer>The final answer is \\boxed{Nowhere}</answer>"


def expert_or_wrong(ep, index, turn):
    return ep.env.expert_turn() if index == 0 else WRONG


def test_research_smoke(tmp_path, scripted):
    scripted(expert_or_wrong)
    cfg = load_config("research", [*SMOKE, f"trainer.out_dir={tmp_path}"], smoke=True)
    assert cfg.algo.name == "grpo" and cfg.env.options["reward"] == "research"
    setup = build(cfg)
    demos, successes = expert_demos(setup, 2)
    assert successes == 2
    for demo in demos:  # the warm start's demonstrations are in ReSearch's format
        assert demo.reward == 1.0 and "<result>Doc 1(Title:" in demo.completion_text
        assert "The final answer is \\boxed{" in demo.completion_text
    summary = train_recipe(cfg)
    assert summary["steps"] == 2
    rows = read_metrics(tmp_path / "research" / "metrics.jsonl")
    rewards = [r["train/reward"] for r in rows if "train/reward" in r]
    assert rewards == [pytest.approx(0.55)] * 2  # (1.0 + 0.1) / 2


CORPUS = [{"id": "0", "contents": '"Harbour"\nThe harbour is New Amsterdam Harbour.'}]
TASK = Task("t", "Which harbour?", ["New Amsterdam Harbour"])
SEARCH = "<think>Look it up.</think><search>harbour</search>"


def returns(reward: str, turns: list[str]) -> list[float]:
    env = MultiHopQAEnv(reward=reward, tools=[BM25Search(CORPUS, topk=1)], format_penalty=0.0)
    fmt = TagFormat(env.tools)
    env.reset(TASK, 0)
    return [env.step(fmt.parse(text, "stop")).reward for text in turns]


def boxed(answer: str) -> str:
    return f"<think>Found it.</think><answer>The final answer is \\boxed{{{answer}}}</answer>"


@pytest.mark.parametrize(
    "turns, score",
    [
        ([SEARCH, boxed("New Amsterdam Harbour")], 1.0),
        # F1: precision 2/2, recall 2/3 -> 2 * 1 * 2/3 / (1 + 2/3) = 0.8
        ([SEARCH, boxed("Amsterdam Harbour")], 0.8),
        # "the" is dropped: [amsterdam, harbour, of, oslo]; P = 2/4, R = 2/3 -> F1 = 4/7
        ([SEARCH, boxed("the Amsterdam harbour of Oslo")], 4 / 7),
        ([SEARCH, boxed("Old Pier")], 0.1),  # well formed, F1 0
        ([boxed("Old Pier")], 0.1),  # no search is still ReSearch's format
        ([SEARCH, "<think>Found it.</think><answer>New Amsterdam Harbour</answer>"], 0.0),
        (["<search>harbour</search>", "<answer>\\boxed{New Amsterdam Harbour}</answer>"], 0.0),
    ],
)
def test_research_reward_on_hand_made_completions(turns, score):
    rewards = returns("research", turns)
    assert rewards[:-1] == [0.0] * (len(turns) - 1)  # nothing before the answer
    assert rewards[-1] == pytest.approx(score)


def test_research_needs_boxed_answers_and_result_tags():
    plain = [SEARCH, "<think>Found it.</think><answer>New Amsterdam Harbour</answer>"]
    assert returns("f1", plain)[-1] == 1.0  # the plain F1 scheme pays it in full
    assert returns("research", plain)[-1] == 0.0  # ReSearch wants \boxed{}
    # the same turns with the results in Search-R1's <information> tags fail ReSearch's format
    good = [SEARCH, boxed("New Amsterdam Harbour")]
    info = "\n\n<information>Doc 1(Title: x) y</information>\n\n"
    with_result = good[0] + info.replace("information", "result") + good[1]
    assert research_score(with_result, TASK.answers, tags=RESEARCH_TAGS) == 1.0
    assert research_score(good[0] + info + good[1], TASK.answers, tags=RESEARCH_TAGS) == 0.0
