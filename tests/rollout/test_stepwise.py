"""Step-wise rollout mode (GiGPO): one sample per env step, bounded token-native context."""

from agentic_rl.config.rollout import RolloutConfig
from agentic_rl.envs.games.gridworld import GridWorldEnv, make_gridworld_tasks
from agentic_rl.formats.chat import TagFormat
from agentic_rl.model.tokens import encode_prompt, encode_text
from agentic_rl.rollout.loop import run_episodes
from agentic_rl.rollout.stepwise import run_stepwise, step_context
from agentic_rl.types import Completion, Task

TASK = Task(
    task_id="t",
    prompt="",
    answers=["right right right"],
    fields={"walls": [[1, 1]], "start": [0, 0], "goal": [0, 3]},
)


def scripted(tokenizer, turns):
    """An actor playing fixed texts per group; records each prompt it was asked to continue."""
    prompts = []

    def act(episodes, budgets, turn):
        out = []
        for ep, budget in zip(episodes, budgets, strict=True):
            prompts.append(list(ep.token_ids))
            ids = encode_text(tokenizer, turns[ep.group_id][turn])[:budget]
            out.append(Completion(ids, [-0.25] * len(ids), "stop"))
        return out

    return act, prompts


def cfg(**kw):
    base = dict(max_turns=6, max_tokens_per_turn=16, max_total_tokens=400, mode="step")
    return RolloutConfig(**{**base, **kw})


def test_each_step_is_a_sample_with_a_bounded_token_native_window(tokenizer):
    turns = ["<action>up</action>", "<action>north</action>", "<action>right</action>"] + [
        "<action>right</action>"
    ] * 3
    act, prompts = scripted(tokenizer, {"g": turns})
    env = GridWorldEnv()
    fmt = TagFormat(env.tools)
    (steps,) = run_stepwise([env], [TASK], ["g"], act, fmt, tokenizer, cfg(history_window=2), 0)
    assert len(steps) == 5  # up (bump), north (invalid), right, right, right (goal)
    prompt = encode_prompt(tokenizer, env.reset(TASK, 0).messages)
    actions = [encode_text(tokenizer, t) for t in turns]
    assert [s.step_rewards for s in steps] == [[0.0], [-0.1], [0.0], [0.0], [1.0]]
    assert all(s.reward == 0.9 for s in steps)  # the episode return on every step
    for t, sample in enumerate(steps):
        context = prompts[t]
        assert sample.token_ids == context + actions[t]  # exactly what was sampled from
        assert sample.loss_mask == [0] * len(context) + [1] * len(actions[t])
        assert sample.logprobs == [0.0] * len(context) + [-0.25] * len(actions[t])
        assert sample.turn_spans == [(len(context), len(sample.token_ids))]
        assert context[: len(prompt)] == prompt
        assert sample.metrics["step"] == t and sample.metrics["success"] == 1.0
    # step 3's context: the prompt + steps 1 and 2 (turn ids + observation ids), nothing older
    obs = [
        encode_text(tokenizer, fmt.render_observation(o))
        for o in _observations(turns[:2], GridWorldEnv())
    ]
    assert prompts[2] == prompt + actions[0] + obs[0] + actions[1] + obs[1]
    assert prompts[3][len(prompt) : len(prompt) + len(actions[1])] == actions[1]
    # anchors: the state each step acted on; the bump and the invalid move keep the state
    assert steps[0].anchors == steps[1].anchors == steps[2].anchors
    assert steps[3].anchors != steps[2].anchors
    assert steps[-1].terminated and not steps[0].terminated


def _observations(texts, env):
    env.reset(TASK, 0)
    out = []
    for text in texts:
        direction = text.removeprefix("<action>").removesuffix("</action>")
        action = TagFormat(env.tools).parse(f"<action>{direction}</action>", "stop")
        out.append(env.step(action).observation)
    return out


def test_context_stays_flat_over_a_long_episode(tokenizer):
    act, prompts = scripted(tokenizer, {"g": ["<action>up</action>"] * 12})
    env = GridWorldEnv()
    (steps,) = run_stepwise(
        [env], [TASK], ["g"], act, TagFormat(env.tools), tokenizer, cfg(max_turns=12), 0
    )
    assert len(steps) == 12 and steps[-1].truncated and steps[0].metrics["truncated"] == 1.0
    lengths = [len(p) for p in prompts]
    assert lengths[2] == max(lengths) and len(set(lengths[2:])) == 1
    (episode,) = run_episodes(
        [GridWorldEnv()],
        [TASK],
        ["g"],
        scripted(tokenizer, {"g": ["<action>up</action>"] * 12})[0],
        TagFormat(env.tools),
        tokenizer,
        cfg(max_turns=12, mode="episode"),
        0,
    )
    assert len(episode.token_ids) > 3 * max(lengths) // 2  # the full history keeps growing


def test_window_zero_keeps_the_latest_observation_and_budget_drops_oldest():
    history = [([1, 2], [3]), ([4], [5, 6]), ([7], [8])]
    assert step_context([0], history, cfg(history_window=0)) == [0, 8]
    assert step_context([0], history, cfg(history_window=2)) == [0, 4, 5, 6, 7, 8]
    tight = cfg(history_window=3, max_total_tokens=19, max_tokens_per_turn=16)
    assert step_context([0], history, tight) == [0, 7, 8]  # 3 tokens of room
    assert step_context([0], [], cfg()) == [0]


def test_groups_share_the_start_state_and_metrics_match_episode_mode(tokenizer):
    tasks = make_gridworld_tasks("train", 2, seed=0)
    envs = [GridWorldEnv() for _ in range(4)]
    expanded = [tasks[0], tasks[0], tasks[1], tasks[1]]
    groups = ["a", "a", "b", "b"]
    turns = {g: ["<action>down</action>"] * 3 for g in groups}
    act, _ = scripted(tokenizer, turns)
    fmt = TagFormat(envs[0].tools)
    episodes = run_stepwise(envs, expanded, groups, act, fmt, tokenizer, cfg(max_turns=3), 0)
    assert episodes[0][0].anchors == episodes[1][0].anchors != episodes[2][0].anchors
    act2, _ = scripted(tokenizer, turns)
    full = run_episodes(
        [GridWorldEnv() for _ in range(4)],
        expanded,
        groups,
        act2,
        fmt,
        tokenizer,
        cfg(max_turns=3, mode="episode"),
        0,
    )
    for steps, trajectory in zip(episodes, full, strict=True):
        assert steps[0].reward == trajectory.reward
        assert [s.step_rewards[0] for s in steps] == trajectory.step_rewards
        assert [s.anchors[0] for s in steps] == trajectory.anchors[: len(steps)]
        for key in ("success", "turns", "invalid_actions", "generated_tokens"):
            assert steps[0].metrics[key] == trajectory.metrics[key], key
