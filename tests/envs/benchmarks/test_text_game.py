"""The benchmarks' text-game base (envs/benchmarks/text_game.py) on a scripted fake simulator:
score-change rewards, `env/score`, commands the simulator does not understand, commands outside
the valid list, the observation text, the gold-path expert and its position. No Java needed."""

from __future__ import annotations

import pytest

from agentic_rl.envs.benchmarks.text_game import BenchmarkTextGame, gold_position, take_in_turns
from agentic_rl.envs.check import check_env
from agentic_rl.types import Action, Task

# A corridor: "go east" twice reaches the goal; each room is worth 40 points, the goal 100; the
# task opens with 10 points (ScienceWorld's opening "look around" earns a few).
ROOMS = ["hall", "kitchen", "garden"]
SCORES = [10, 50, 100]


class FakeGame(BenchmarkTextGame):
    system_text = "Play. Up to {k} commands."

    def __init__(self, restrict: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.restrict_to_valid = restrict
        self.room = 0
        self.sent: list[str] = []

    def _start(self, task):
        self.room = 0
        self.score = SCORES[0]
        return "reach the garden", "Task: reach the garden\nYou are in the hall."

    def _send(self, command):
        self.sent.append(command)
        if command == "go east" and self.room < 2:
            self.room += 1
            self.score = SCORES[self.room]
            self.finished = self.won = self.room == 2
            return f"You are in the {ROOMS[self.room]}.", True
        if command == "jump in the pond":
            self.score, self.finished = 0.0, True  # a failed task counts 0
            return "You drown.", True
        if command in ("look around", "wait"):
            return f"You are in the {ROOMS[self.room]}.", True
        return "No known action matches that input.", False

    def _valid(self):
        return ["wait", "look around", "go east", "jump in the pond"]

    def _gold_path(self):
        return ["look around", "go east", "go east"]

    def anchor_key(self):
        return ROOMS[self.room]


TASK = Task(task_id="fake/0", prompt="reach the garden")


def act(text: str) -> Action:
    return Action(kind="tool", name="action", arguments={"actions": text})


def test_rewards_are_score_changes_and_env_score_sums_to_the_final_score():
    env = FakeGame(reward_scale=0.01)
    env.reset(TASK, 0)
    first = env.step(act("go east"))
    second = env.step(act("go east"))
    assert first.reward == pytest.approx(0.40) and second.reward == pytest.approx(0.50)
    # env/score reports the score itself: the opening 10 points arrive with the first step
    assert first.info["env/score"] == 50 and second.info["env/score"] == 50
    assert second.terminated and second.info["success"] == 1.0
    assert second.observation.content == "> go east\nYou are in the garden."


def test_a_failed_task_takes_its_points_back():
    env = FakeGame(reward_scale=0.01)
    env.reset(TASK, 0)
    gained = env.step(act("go east"))
    failed = env.step(act("jump in the pond"))
    assert failed.terminated and failed.info["success"] == 0.0
    assert gained.info["env/score"] + failed.info["env/score"] == 0  # the final score: 0
    assert failed.reward == pytest.approx(-0.50)


def test_a_command_the_simulator_does_not_understand_is_an_invalid_action():
    env = FakeGame(format_penalty=0.1)
    env.reset(TASK, 0)
    result = env.step(act("fly"))
    assert result.reward == pytest.approx(-0.1) and result.info["invalid_action"] == 1
    assert not result.terminated and env.sent == ["fly"]  # sent: the simulator is the judge
    assert result.observation.content == "> fly\nNo known action matches that input."
    assert "invalid_action" not in env.step(act("wait")).info


def test_restricted_envs_refuse_commands_outside_the_valid_list_without_sending_them():
    env = FakeGame(restrict=True, valid_actions=-1)
    env.reset(TASK, 0)
    result = env.step(act("fly"))
    assert result.observation.name == "error" and env.sent == []
    assert "Invalid action: 'fly' is not an action" in result.observation.content
    assert result.info["env/score"] == 10  # the opening score, reported on the first step
    assert env.step(act("Go East.")).info["env/score"] == 40  # case and punctuation forgiven
    assert env.sent == ["go east"]


def test_observation_text_and_valid_actions():
    env = FakeGame(valid_actions=2)
    opening = env.reset(TASK, 0).messages
    assert opening[0] == {"role": "system", "content": "Play. Up to 1 commands."}
    # the two shortest valid actions, then how many are not shown
    assert opening[1]["content"] == (
        "Task: reach the garden\nYou are in the hall.\nValid actions: wait, go east (and 2 more)."
    )
    everything = FakeGame(valid_actions=-1)
    everything.reset(TASK, 0)
    shown = everything.step(act("wait")).observation.content.splitlines()[-1]
    assert shown == "Valid actions: go east, jump in the pond, look around, wait."
    assert FakeGame().reset(TASK, 0).messages[1]["content"].count("Valid actions") == 0
    several = FakeGame(max_actions_per_turn=2)
    several.reset(TASK, 0)
    text = several.step(act("wait || go east")).observation.content
    assert text == "> wait\nYou are in the hall.\n> go east\nYou are in the kitchen."


def test_the_expert_plays_the_gold_path_from_where_the_episode_left_it():
    assert gold_position(["a", "b", "x"], ["a", "b", "c"]) == 2
    assert gold_position(["x", "a", "y", "b"], ["a", "b", "c"]) == 2  # strays are skipped
    assert gold_position(["A"], ["a", "b"]) == 1 and gold_position([], ["a"]) == 0
    env = FakeGame(max_actions_per_turn=2)
    env.reset(TASK, 0)
    assert env.expert_turn() == "<action>look around || go east</action>"
    env.step(act("look around"))
    assert env.expert_turn() == "<action>go east || go east</action>"
    env.step(act("wait"))  # a stray command: the expert goes on from the gold path's position 1
    assert env.expert_turn() == "<action>go east || go east</action>"
    assert env.expert_turn_limit == env.max_steps


def test_passes_check_env():
    assert check_env(FakeGame(), [TASK]) == [
        "gold answer scores >= a wrong one (the tasks have no gold answers)"
    ]


def test_bad_settings_are_value_errors():
    with pytest.raises(ValueError, match="valid_actions"):
        FakeGame(valid_actions=-2)
    with pytest.raises(ValueError, match="reward_scale"):
        FakeGame(reward_scale=0)


def test_take_in_turns_takes_each_queues_next_item_in_turn():
    queues = [["a1", "a2", "a3"], ["b1"], ["c1", "c2"]]
    assert take_in_turns(queues, 6) == ["a1", "b1", "c1", "a2", "c2", "a3"]
    assert take_in_turns(queues, 4) == ["a1", "b1", "c1", "a2"]  # cut mid-round
    assert take_in_turns(queues, 0) == []
    with pytest.raises(ValueError, match="7 items asked from queues that hold 6"):
        take_in_turns(queues, 7)  # would otherwise never fill
