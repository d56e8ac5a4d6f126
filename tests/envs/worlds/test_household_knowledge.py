"""The household env with KnownSelf's knowledge tool: the rule base and the tool call."""

import pytest

from agentic_rl.envs.worlds.household_knowledge import household_rule
from agentic_rl.types import Action


def test_rules_name_the_objects_of_the_next_command():
    assert household_rule("open fridge").startswith("When the fridge is closed")
    assert "take the apple from the table" in household_rule("take apple from table")
    assert "go east" in household_rule("go east")
    assert "insert the mug into the cabinet" in household_rule("insert mug into cabinet")
    assert "put the book on the desk" in household_rule("put book on desk")
    assert household_rule("eat apple") == "When unsure what to do next, the agent should eat apple."


def test_knowledge_call_in_a_textworld_game(tmp_path):
    pytest.importorskip("textworld")
    from agentic_rl.envs.check import check_env
    from agentic_rl.envs.registry import ENVS
    from agentic_rl.envs.worlds.household import make_household_tasks
    from agentic_rl.envs.worlds.household_knowledge import HouseholdKnowledgeEnv

    assert ENVS["household_knowledge"] is HouseholdKnowledgeEnv
    env = HouseholdKnowledgeEnv(cache_dir=str(tmp_path))
    task = make_household_tasks("train", 1, seed=0)[0]
    env.reset(task, seed=0)
    assert "<knowledge>help</knowledge>" in env.system_prompt()
    first = env.state.policy_commands[0]  # the engine's walkthrough from this state
    result = env.step(Action(kind="tool", name="knowledge", arguments={"topic": "help"}))
    assert result.observation.content == household_rule(first)
    assert result.info["knowledge_call"] == 1 and env.steps == 0
    assert check_env(env, [task]) == []
