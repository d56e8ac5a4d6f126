import pytest

from agentic_rl.envs.check import check_env
from agentic_rl.envs.games.gridworld import (
    MAX_PATH,
    MIN_PATH,
    GridWorldEnv,
    describe,
    make_gridworld_tasks,
    shortest_path,
)
from agentic_rl.envs.registry import ENVS, TASKS, make_env
from agentic_rl.types import Action, Task


def move(direction):
    return Action(kind="tool", name="action", arguments={"direction": direction})


def layout(walls=((1, 1),), start=(0, 0), goal=(0, 2)):
    return Task(
        task_id="t",
        prompt="",
        answers=["right right"],
        fields={"walls": [list(w) for w in walls], "start": list(start), "goal": list(goal)},
    )


def test_registered_and_passes_check_env():
    assert ENVS["gridworld"] is GridWorldEnv and TASKS["gridworld"] is make_gridworld_tasks
    check_env(make_env("gridworld"), make_gridworld_tasks("eval", 30, seed=1))


def test_tasks_are_deterministic_disjoint_and_solvable_within_bounds():
    train = make_gridworld_tasks("train", 300, seed=0)
    assert [t.fields for t in train] == [t.fields for t in make_gridworld_tasks("train", 300, 0)]
    evals = make_gridworld_tasks("eval", 100, seed=0)
    key = lambda t: (str(t.fields["walls"]), str(t.fields["start"]), str(t.fields["goal"]))  # noqa: E731
    assert not {key(t) for t in train} & {key(t) for t in evals}
    for task in train:
        walls = {tuple(w) for w in task.fields["walls"]}
        path = shortest_path(walls, tuple(task.fields["start"]), tuple(task.fields["goal"]))
        assert MIN_PATH <= len(path) <= MAX_PATH
        assert task.answers == [" ".join(path)]


def test_describe_relative_goal_and_blocked_moves():
    assert (
        describe({(1, 1)}, (0, 1), (2, 3)) == "The goal is 2 down and 2 right. Blocked: up, down."
    )
    assert describe(set(), (2, 2), (2, 0)) == "The goal is 2 left. Blocked: none."


def test_moves_walls_invalid_actions_and_goal():
    env = GridWorldEnv(format_penalty=0.1)
    first = env.reset(layout(), seed=3)
    assert (
        first.anchor == first.messages[-1]["content"] == "The goal is 2 right. Blocked: up, left."
    )
    bump = env.step(move("down"))  # (1, 0) is free
    assert bump.reward == 0.0 and not bump.terminated and env.position == (1, 0)
    wall = env.step(move("right"))  # (1, 1) is a wall: a legal move that stays put
    assert wall.reward == 0.0 and env.position == (1, 0) and wall.info == {"tool_call": 1}
    assert wall.observation.anchor == bump.observation.anchor
    bad = env.step(move("north"))
    assert bad.reward == pytest.approx(-0.1) and bad.info == {"invalid_action": 1}
    assert bad.observation.name == "error" and bad.observation.anchor == bump.observation.anchor
    none = env.step(Action(kind="invalid", error="no action in this turn"))
    assert none.reward == pytest.approx(-0.1) and not none.terminated
    env.step(move("up"))
    env.step(move("right"))
    done = env.step(move("right"))
    assert done.reward == 1.0 and done.terminated and done.info["success"] == 1.0
    with pytest.raises(RuntimeError, match="after the episode terminated"):
        env.step(move("up"))


def test_distance_reward_pays_each_move_its_progress_and_sums_to_the_start_distance():
    # Layout: wall at (1, 1), start (0, 0), goal (0, 2): shortest path 2 (right, right).
    env = GridWorldEnv(format_penalty=0.1, distance_reward=0.25)
    env.reset(layout(), seed=0)
    away = env.step(move("down"))  # (1, 0): the path is now 3 (up, right, right)
    assert away.reward == pytest.approx(-0.25) and away.info["env/progress"] == -0.25
    wall = env.step(move("right"))  # into the wall: no move, no progress
    assert wall.reward == 0.0 and env.position == (1, 0)
    bad = env.step(move("north"))  # malformed: the format penalty only
    assert bad.reward == pytest.approx(-0.1) and "env/progress" not in bad.info
    rewards = [env.step(move(d)).reward for d in ("up", "right", "right")]
    assert rewards == pytest.approx([0.25, 0.25, 1.25])  # arrival: 1 + its step's progress
    # Over the episode the shaping telescopes to c x d_start = 0.25 x 2.
    shaping = away.reward + wall.reward + sum(rewards) - 1.0
    assert shaping == pytest.approx(0.25 * 2)


def test_distance_reward_must_be_a_number_at_least_zero_and_the_goal_reachable():
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="distance_reward must be a number >= 0"):
            GridWorldEnv(distance_reward=bad)
    plain = GridWorldEnv()
    plain.reset(layout(), seed=0)
    assert plain.step(move("down")).info == {"tool_call": 1}  # off by default: no metric
    walled_off = layout(walls=((0, 1), (1, 0)), start=(0, 0), goal=(2, 2))
    plain.reset(walled_off, seed=0)  # without the progress reward a walled-off goal plays
    assert plain.step(move("up")).reward == 0.0
    with pytest.raises(ValueError, match="task t: .*unreachable.*needs a reachable goal"):
        GridWorldEnv(distance_reward=0.1).reset(walled_off, seed=0)


def test_answer_gives_up_and_expert_follows_bfs():
    env = GridWorldEnv()
    env.reset(layout(), seed=0)
    result = env.step(Action(kind="answer", text="done"))
    assert result.terminated and result.reward == 0.0 and result.info["success"] == 0.0
    env.reset(layout(walls=((0, 1),), goal=(0, 2)), seed=0)  # must go around the wall
    turns = []
    while not env.done:
        turns.append(env.expert_turn())
        direction = turns[-1].removeprefix("<action>").removesuffix("</action>")
        env.step(move(direction))
    assert turns == [f"<action>{d}</action>" for d in ("down", "right", "right", "up")]
