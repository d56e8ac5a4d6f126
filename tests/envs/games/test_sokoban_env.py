from collections import deque

import pytest

from agentic_rl.envs.check import check_env
from agentic_rl.envs.discrete import parse_action, split_actions
from agentic_rl.envs.games.sokoban import SokobanEnv, level_task, make_sokoban_tasks
from agentic_rl.envs.games.sokoban_levels import (
    ACTIONS,
    LevelError,
    live_cells,
    parse_xsb,
    read_xsb_levels,
    solve,
    step_level,
)
from agentic_rl.envs.registry import ENVS, TASKS, make_env
from agentic_rl.types import Action

# Player left of a box left of a goal: one push solves it.
ONE_PUSH = "#####\n#@$.#\n#####"
# Two boxes: one starts on a goal (*), one not ($); a second goal (.) to the right.
TWO_BOXES = "######\n#@* .#\n# $  #\n#    #\n######"


def act(text):
    return Action(kind="tool", name="action", arguments={"actions": text})


def env_on(xsb, **kwargs):
    env = SokobanEnv(**kwargs)
    level = parse_xsb(xsb)
    env.reset(level_task(level, "t", solve(level) or []), seed=0)
    return env


def bfs_length(level):
    """Optimal solution length by plain BFS over (player, boxes): the solver's reference."""
    start = (level.player, level.boxes)
    seen, queue = {start}, deque([(level, 0)])
    while queue:
        lv, d = queue.popleft()
        if lv.solved:
            return d
        for move in range(4):
            nxt, _ = step_level(lv, move)
            if (nxt.player, nxt.boxes) not in seen:
                seen.add((nxt.player, nxt.boxes))
                queue.append((nxt, d + 1))
    return None


def test_registered_and_passes_check_env():
    assert ENVS["sokoban"] is SokobanEnv and TASKS["sokoban"] is make_sokoban_tasks
    assert check_env(make_env("sokoban"), make_sokoban_tasks("eval", 30, seed=1)) == []
    # one move per turn: levels of up to 6 moves still fit check_env's 6 turns
    short = [t for t in make_sokoban_tasks("eval", 30, seed=2) if t.answers[0].count(" ") < 6]
    check_env(SokobanEnv(max_actions_per_turn=1), short)


def test_xsb_parsing_and_ragen_rendering():
    level = parse_xsb(TWO_BOXES)
    assert level.player == (1, 1) and level.boxes == {(1, 2), (2, 2)}
    assert level.goals == {(1, 2), (1, 4)} and (0, 0) in level.walls
    assert level.render() == "######\n#P√_O#\n#_X__#\n#____#\n######"
    assert parse_xsb(level.to_xsb()) == level
    on_goal = parse_xsb("#####\n#+$*#\n#####")  # + player on goal
    assert on_goal.render().split("\n")[1] == "#SX√#"
    for bad, why in [
        ("#####\n#@$ #\n#####", "1 boxes but 0 goals"),
        ("#####\n#$.##\n#####", "exactly one player"),
        ("#####\n#@*##\n#####", "already solved"),
        ("#####\n#@$.!#", "unknown character '!'"),
    ]:
        with pytest.raises(LevelError, match=why):
            parse_xsb(bad)


def test_rewards_are_gym_sokobans():
    env = env_on(TWO_BOXES, max_steps=20)
    assert env.state_text().startswith("######\n#P√_O#\n")
    off = env.step(act("Right"))  # pushes the box off its goal: -0.1 - 1
    assert off.reward == pytest.approx(-1.1) and not off.terminated
    assert off.observation.content.split("\n")[1] == "#_SXO#"
    on = env.step(act("Right"))  # onto the other goal: -0.1 + 1
    assert on.reward == pytest.approx(0.9)
    assert on.observation.content.split("\n")[1] == "#_OP√#"
    wall = env.step(act("Right"))  # the box is against the wall: a no-op that still costs 0.1
    assert wall.reward == pytest.approx(-0.1) and env.level.player == (1, 3)
    last = env.step(act("Down || Down || Left || Up"))  # around, then push $ up: solved
    assert last.terminated and last.reward == pytest.approx(-0.1 * 3 + 10.9)
    assert last.info == {"tool_call": 1, "actions": 4, "success": 1.0}
    solved = env_on(ONE_PUSH).step(act("Right"))  # -0.1 + 1 + 10
    assert solved.reward == pytest.approx(10.9) and solved.terminated
    assert solved.info["success"] == 1.0 and solved.observation.content == "#####\n#_P√#\n#####"


def test_no_chained_pushes():
    env = env_on("#######\n#@*$ .#\n#######")  # box, box: pushing the first is blocked
    result = env.step(act("Right"))
    assert result.reward == pytest.approx(-0.1) and env.level.player == (1, 1)


def test_multi_action_turns_cap_invalid_actions_and_penalty():
    env = env_on(TWO_BOXES, max_steps=50, max_actions_per_turn=3)
    result = env.step(act("down || jump || Left || up || right"))  # 5 > 3: two dropped
    # executed: Down, Left (wall: stays); 'jump' invalid -> one format penalty for the turn
    assert result.info == {"tool_call": 1, "actions": 2, "invalid_action": 1}
    assert result.reward == pytest.approx(-0.1 - 0.1 - 0.1)
    assert env.level.player == (2, 1) and not result.terminated
    assert "Ignored invalid action(s): jump." in result.observation.content
    assert "Ignored 2 action(s) over the limit of 3." in result.observation.content
    nothing = env.step(act("north || ???"))
    assert nothing.observation.name == "error" and nothing.reward == pytest.approx(-0.1)
    assert env.steps == 2 and env.level.player == (2, 1)  # state unchanged
    assert env.step(Action(kind="invalid", error="no action")).info == {"invalid_action": 1}
    gave_up = env.step(Action(kind="answer", text="done"))
    assert gave_up.terminated and gave_up.reward == 0.0 and gave_up.info["success"] == 0.0


def test_action_parsing_is_robust():
    names = list(ACTIONS)
    for text, expected in [
        ("Up", 0),
        ("up", 0),
        (" DOWN ", 1),
        ("Left.", 2),
        ("`right`", 3),
        ('"Right"', 3),
        ("move up", 0),
        ("push left", 2),
        ("R", 3),
        ("4", 3),  # RAGEN's numbering: 1 Up ... 4 Right
        ("0", None),
        ("5", None),
        ("upward", None),
        ("", None),
    ]:
        assert parse_action(text, names, index_base=1) == expected, text
    assert split_actions(" Up ||Left|| ||Down ") == ["Up", "Left", "Down"]


def test_truncated_at_max_steps():
    env = env_on(TWO_BOXES, max_steps=3)
    first = env.step(act("Left || Up"))  # two bumps into walls
    assert not first.truncated and env.steps == 2
    last = env.step(act("Up || Up"))  # only one action left in the budget
    assert last.truncated and not last.terminated and env.steps == 3
    assert last.info["success"] == 0.0 and last.info["actions"] == 1
    with pytest.raises(RuntimeError, match="after the episode terminated"):
        env.step(act("Up"))


def test_solver_is_optimal_and_prunes_dead_cells():
    level = parse_xsb(TWO_BOXES)
    plan = solve(level)
    assert len(plan) == bfs_length(level) == 6
    replay = level
    for move in plan:
        replay, _ = step_level(replay, move)
    assert replay.solved
    corner = parse_xsb("#####\n#$  #\n# @.#\n#####")  # a box in a corner is lost
    assert (1, 1) not in live_cells(corner) and solve(corner) is None
    for task in make_sokoban_tasks("train", 40, seed=3):
        level = parse_xsb(task.fields["level"])
        assert len(solve(level)) == bfs_length(level) == task.fields["solution_length"]


def test_generated_levels_are_solvable_distinct_and_split():
    train = make_sokoban_tasks("train", 200, seed=0)
    assert [t.fields for t in train] == [t.fields for t in make_sokoban_tasks("train", 200, 0)]
    evals = make_sokoban_tasks("eval", 50, seed=0)
    keys = lambda tasks: {t.fields["level"] for t in tasks}  # noqa: E731
    assert len(keys(train)) == 200 and not keys(train) & keys(evals)
    for task in train + evals:
        level = parse_xsb(task.fields["level"])
        assert len(level.boxes) == 1 and level.height == level.width == 6
        assert 2 <= task.fields["solution_length"] <= 10 and not level.solved
        for move in task.answers[0].split():  # the gold answer solves the level
            level, _ = step_level(level, ACTIONS.index(move))
        assert level.solved
        assert task.prompt == parse_xsb(task.fields["level"]).render()
    harder = make_sokoban_tasks("train", 10, seed=0, dim=8, num_boxes=2)
    assert all(len(parse_xsb(t.fields["level"]).boxes) == 2 for t in harder)


def test_levels_from_an_xsb_file(tmp_path):
    path = tmp_path / "levels.xsb"
    path.write_text(f"; my levels\n{ONE_PUSH}\n\n; the second\n{TWO_BOXES}\n")
    levels = read_xsb_levels(path)
    assert [lv.render() for lv in levels] == [
        parse_xsb(ONE_PUSH).render(),
        parse_xsb(TWO_BOXES).render(),
    ]
    tasks = make_sokoban_tasks("train", 10, level_file=str(path))
    assert [t.answers[0] for t in tasks] == ["Right", solve_names(TWO_BOXES)]
    assert make_sokoban_tasks("eval", 1, level_file=str(path))[0].answers == ["Right"]
    check_env(SokobanEnv(), tasks)
    bad = tmp_path / "bad.xsb"
    bad.write_text(f"{ONE_PUSH}\n\n#####\n#@$ #\n#####\n")
    with pytest.raises(LevelError, match="level 2: 1 boxes but 0 goals"):
        make_sokoban_tasks("train", 5, level_file=str(bad))
    stuck = tmp_path / "stuck.xsb"
    stuck.write_text("#####\n#$  #\n# @.#\n#####\n")
    with pytest.raises(LevelError, match="level 1 has no solution"):
        make_sokoban_tasks("train", 5, level_file=str(stuck))


def solve_names(xsb):
    return " ".join(ACTIONS[m] for m in solve(parse_xsb(xsb)))


def test_expert_replays_an_optimal_plan_and_replans():
    env = env_on(TWO_BOXES, max_actions_per_turn=2, max_steps=20)
    plan = solve_names(TWO_BOXES).split()
    first = env.expert_turn()
    assert first == f"<action>{plan[0]} || {plan[1]}</action>"
    env.step(act(f"{plan[0]} || {plan[1]}"))
    assert env.expert_turn() == f"<action>{plan[2]} || {plan[3]}</action>"
    env.step(act("Down"))  # off the plan: the expert plans again from here
    turns = 0
    while not env.done:
        text = env.expert_turn()
        result = env.step(act(text.removeprefix("<action>").removesuffix("</action>")))
        turns += 1
    assert result.info["success"] == 1.0 and turns <= 3


def test_anchors_are_the_grid_state():
    env = env_on(TWO_BOXES, max_steps=20)
    first = env.reset(level_task(parse_xsb(TWO_BOXES), "t", []), seed=5)
    assert first.anchor == first.messages[-1]["content"] == env.state_text()
    there = env.step(act("Down"))
    back = env.step(act("Up"))
    assert back.observation.anchor == first.anchor != there.observation.anchor
    assert "Up, Down, Left, Right" in first.messages[0]["content"]


def test_plans_longer_than_the_step_limit_are_refused_when_tasks_are_made(tmp_path):
    long = tmp_path / "long.xsb"
    long.write_text("#########\n#@$    .#\n#########\n")  # 5 pushes
    assert len(make_sokoban_tasks("train", 1, level_file=str(long), max_steps=5)) == 1
    with pytest.raises(LevelError, match=r"level 1's shortest plan takes 5 moves, more than"):
        make_sokoban_tasks("train", 1, level_file=str(long), max_steps=4)
    with pytest.raises(ValueError, match="max_solution=12 allows levels whose shortest plan"):
        make_sokoban_tasks("train", 1, max_solution=12)  # max_steps defaults to 10, as the env
    with pytest.raises(LevelError, match=f"env.options.level_file: {tmp_path / 'no.xsb'}: no such"):
        make_sokoban_tasks("train", 1, level_file=str(tmp_path / "no.xsb"))
