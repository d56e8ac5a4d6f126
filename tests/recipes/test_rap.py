"""The `rap_blocksworld` recipe: RAP's MCTS planner (`agentic-rl eval --planner mcts`) and the
chain-of-thought baseline (`--planner cot`) on Blocksworld.

Mechanism: with a crafted scorer that makes a wrong first action the most likely one, greedy
choice by the model's rewards takes it and misses the goal within the plan length, while RAP's
search (UCT exploration, the goal reward back-propagated) changes the first action and reaches
the goal; the model really is the world model (its predicted states are what the search sees).
"""

from __future__ import annotations

import json
import re

from agentic_rl.cli import main
from agentic_rl.config.load import load_config
from agentic_rl.envs.games.blocksworld import BlocksworldEnv, problem_task
from agentic_rl.envs.games.blocksworld_domain import apply_action, check_plan, parse_state, solve
from agentic_rl.rollout.mcts import MCTS, MCTSConfig, greedy_plan
from agentic_rl.rollout.rap import EVAL_QUESTION, Budget, RAPConfig, RAPProblem, rap_plan

SMOKE = ["model.name=tiny", "env.num_eval_tasks=2", "planner.iterations=2"]

START = frozenset(
    {
        ("handempty",),
        ("clear", "blue"),
        ("clear", "orange"),
        ("on", "blue", "red"),
        ("ontable", "red"),
        ("ontable", "orange"),
    }
)
GOAL = [("on", "red", "orange")]
DECOY = "pick up the orange block"


def blocks_env():
    env = BlocksworldEnv(num_blocks=3)
    env.reset(problem_task(START, GOAL, "t", solve(START, GOAL)), seed=0)
    return env


class CraftedScorer:
    """Action likelihood 0 for the optimal next action, -1 for any other; in the start state
    the decoy gets 0 and the optimal action -1. Self-evaluation is neutral (0)."""

    def __init__(self):
        self.budget = Budget()

    def continuation_logprobs(self, prefix, tails):
        state = parse_state(re.findall(r"I have that, (.*)\.", prefix)[-1])
        best = (solve(state, GOAL) or [""])[0]
        out = []
        for context, scored in tails:
            if context.endswith(EVAL_QUESTION):
                out.append(0.0)
                continue
            action = scored.strip()
            good = action == DECOY if state == START else action == best
            out.append(0.0 if good else -1.0)
        return out


def test_mcts_changes_the_action_greedy_takes():
    env = blocks_env()
    cfg = RAPConfig(world_model="exact", search=MCTSConfig(iterations=10, depth_limit=4))
    problem = RAPProblem(env, CraftedScorer(), cfg)
    greedy = greedy_plan(problem, 4)
    assert greedy[0] == DECOY
    assert check_plan(START, GOAL, greedy) == (True, False)  # greedy misses the goal
    plan = MCTS(problem, cfg.search).search()
    assert plan[0] == "unstack the blue block from on top of the red block"
    assert check_plan(START, GOAL, plan) == (True, True)


class ScriptedWorldModel(CraftedScorer):
    """Also the world model: predicts the true next state, in words, for each request."""

    def __init__(self):
        super().__init__()
        self.predictions = 0

    def generate(self, prompt, max_new_tokens, stop):
        self.predictions += 1
        state_part, action = re.findall(r"I have that, (.*)\.\n\[ACTION\]\n(.*)\n", prompt)[-1]
        nxt = apply_action(parse_state(state_part), action)
        from agentic_rl.envs.games.blocksworld_domain import state_text

        return (" " + state_text(nxt) if nxt else " nonsense"), -0.1


def test_the_model_is_the_world_model():
    env = blocks_env()
    scorer = ScriptedWorldModel()
    cfg = RAPConfig(world_model="llm", search=MCTSConfig(iterations=10, depth_limit=4))
    plan, stats = rap_plan(env, scorer, cfg)
    assert scorer.predictions > 0 and stats["unparsed_predictions"] == 0
    assert stats["world_model_correct"] == stats["world_model_predictions"] == scorer.predictions
    assert check_plan(START, GOAL, plan) == (True, True)


def test_rap_blocksworld_recipe_loads():
    cfg = load_config("rap_blocksworld")
    assert cfg.env.name == "blocksworld" and cfg.planner.iterations == 10
    assert cfg.planner.w_exp == 1.0 and cfg.planner.alpha == 0.5
    assert cfg.planner.goal_reward == 100.0 and cfg.planner.world_model == "llm"


def test_rap_blocksworld_smoke(tmp_path, capsys):
    out = tmp_path / "mcts.json"
    assert main(["eval", "rap_blocksworld", *SMOKE, "--planner", "mcts", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["planner"] == "mcts" and result["tasks"] == 2
    for row in result["rows"]:
        assert row["generate_requests"] >= 1 and row["score_requests"] >= 2  # model as WM
        assert 0 < len(row["plan"]) <= row["plan_length"]
    cot = tmp_path / "cot.json"
    assert main(["eval", "rap_blocksworld", *SMOKE, "--planner", "cot", "--out", str(cot)]) == 0
    rows = json.loads(cot.read_text())["rows"]
    assert all(r["model_calls"] == 1 for r in rows)  # one greedy generation per problem


def test_bad_planner_settings_fail_at_load(capsys):
    assert main(["eval", "rap_blocksworld", "planner.world_model=oracle", "--planner", "mcts"]) == 2
    assert "planner.world_model" in capsys.readouterr().err
    # without --planner or --checkpoint: the starting model plays the episodes (issue 32)
    assert main(["eval", "rap_blocksworld", "model.name=tiny", "env.num_eval_tasks=2"]) == 0
    assert '"checkpoint": null' in capsys.readouterr().out
