"""Reward schemes of the search envs: prompts, tags, expert style and transcript scoring."""

import pytest

from agentic_rl.config.rollout import RolloutConfig
from agentic_rl.envs.check import check_env
from agentic_rl.envs.search.multihop import MultiHopQAEnv, make_multihop_tasks
from agentic_rl.envs.search.schemes import SCHEMES, RetaggedTool, dress_expert_turn, transcript
from agentic_rl.formats.chat import TagFormat
from agentic_rl.rewards.search import search_r1_score
from agentic_rl.rollout.actors import expert_actor
from agentic_rl.rollout.loop import run_episodes
from agentic_rl.tools.search import BM25Search
from agentic_rl.types import Task

CORPUS = [
    {"id": "0", "contents": '"Alpha"\nalpha beta'},
    {"id": "1", "contents": '"Gamma"\ngamma delta'},
    {"id": "2", "contents": '"Zeta"\nzeta eta'},
]
TASK = Task(
    "t0",
    "Where is it?",
    ["New Amsterdam Harbour"],
    {"support_docs": [CORPUS[0]["contents"], CORPUS[1]["contents"]]},
)


def small_env(reward: str, **kwargs) -> MultiHopQAEnv:
    """A scheme's env over CORPUS, without ToolEnv's per-turn format penalty (as the recipes)."""
    kwargs.setdefault("format_penalty", 0.0)
    return MultiHopQAEnv(reward=reward, tools=[BM25Search(CORPUS, topk=1)], **kwargs)


def play(env, turns, task=TASK):
    """Per-turn rewards of the model turns `turns` (parsed as the rollout parses them)."""
    fmt = TagFormat(env.tools)
    env.reset(task, 0)
    rewards = []
    for text in turns:
        result = env.step(fmt.parse(text, "stop"))
        rewards.append(result.reward)
        if result.terminated:
            break
    return rewards


def test_every_scheme_passes_check_env_on_two_hop_tasks():
    tasks = make_multihop_tasks("eval", 8)
    for name in SCHEMES:
        check_env(MultiHopQAEnv(reward=name), tasks)


def test_unknown_scheme_names_the_valid_ones():
    with pytest.raises(ValueError, match="search_r1, research"):
        MultiHopQAEnv(reward="search-r1")
    with pytest.raises(ValueError, match="step_reward_weight"):
        MultiHopQAEnv(step_reward_weight=-1)


SEARCH = "<think>look</think><search>alpha</search>"


@pytest.mark.parametrize(
    "answer_turn, score",
    [
        ("<think>so</think><answer>new amsterdam harbour</answer>", 1.0),  # EM, valid
        ("<answer>New Amsterdam Harbour</answer>", 0.8),  # EM, no <think>: 1 - 0.2
        ("<think>so</think><answer>Old Pier</answer>", 0.2),  # valid format only
        ("<answer>Old Pier</answer>", 0.1),  # an answer, bad format
    ],
)
def test_search_r1_reward_lands_on_the_answer_turn(answer_turn, score):
    env = small_env("search_r1")
    assert play(env, [SEARCH, answer_turn]) == [0.0, pytest.approx(score)]
    # the plain EM scheme sees only the answer
    assert play(small_env("em"), [SEARCH, answer_turn])[-1] == float(score >= 0.8)


def test_an_episode_cut_without_answer_keeps_its_scheme_score():
    # R1-Searcher stage 2: no answer is a bad format, F1 0 - 2; booked as soon as it is true,
    # so the return is -2 although the env never learns that the budget ended the episode.
    rewards = play(small_env("r1_searcher_stage2"), ["<think>a <search>alpha</search>", "more"])
    assert rewards == [-2.0, 0.0]


def test_inserted_text_cannot_supply_the_models_tags():
    env = small_env("search_r1")
    rewards = play(env, ["no tags at all"])  # invalid: the error hint names <answer>...</answer>
    assert rewards == [0.0]
    hint = env.history[0][1].content
    assert "<answer>...</answer>" in hint
    # scored raw, the hint's tags would count as an answer in bad format (0.1)
    raw = env.history[0][0].raw + f"<error>{hint}</error>"
    assert search_r1_score(raw, TASK.answers) == pytest.approx(0.1)
    assert "&lt;answer>" in transcript(env.history, env.fmt)


def test_research_results_come_back_in_result_tags():
    env = small_env("research")
    assert isinstance(env.tools[0], RetaggedTool) and env.tools[0].retrieve(["alpha"])[0]
    play(env, ["<think>a</think><search>alpha</search>"])
    assert '<result>Doc 1(Title: "Alpha") alpha beta</result>' in transcript(env.history, env.fmt)
    assert "<result>" in env.system_prompt() and "\\boxed{}" in env.system_prompt()


def test_expert_turns_are_dressed_per_scheme():
    search, answer = "<search>Ann Lee</search>", "<answer>Oslo</answer>"
    assert dress_expert_turn(SCHEMES["em"], search, first=True) == search
    assert dress_expert_turn(SCHEMES["search_r1"], search, first=False) == (
        "<think>I should look up Ann Lee.</think><search>Ann Lee</search>"
    )
    assert dress_expert_turn(SCHEMES["research"], answer, first=False) == (
        "<think>The documents say the answer is Oslo.</think>"
        "<answer>The final answer is \\boxed{Oslo}</answer>"
    )
    spanning = SCHEMES["r1_searcher_stage1"]
    assert dress_expert_turn(spanning, search, first=True).startswith("<think>I should")
    assert "think>" not in dress_expert_turn(spanning, search, first=False)
    assert dress_expert_turn(spanning, answer, first=False).endswith(
        ".</think><answer>Oslo</answer>"
    )


@pytest.mark.parametrize(
    "scheme, reward", [("r1_searcher_stage1", 2.0), ("research", 1.0), ("search_r1", 1.0)]
)
def test_expert_rollouts_keep_the_schemes_format(tokenizer, scheme, reward):
    """Through the real rollout loop: the expert actor keeps the thoughts (one <think> across
    all turns for R1-Searcher) and the demonstrations score the scheme's maximum."""
    tasks = make_multihop_tasks("train", 3)
    envs = [MultiHopQAEnv(reward=scheme) for _ in tasks]
    fmt = TagFormat(envs[0].tools)
    cfg = RolloutConfig(max_turns=4, max_tokens_per_turn=48, max_total_tokens=600)
    trajectories = run_episodes(
        envs, tasks, ["a", "b", "c"], expert_actor(fmt, tokenizer), fmt, tokenizer, cfg, 0
    )
    for t in trajectories:
        assert t.reward == pytest.approx(reward) and t.metrics["success"] == 1.0
        text = t.completion_text
        assert text.startswith("<think>")
        if scheme == "r1_searcher_stage1":
            assert text.count("<think>") == text.count("</think>") == 1
        else:
            assert text.count("<think>") == len(t.turn_spans)
