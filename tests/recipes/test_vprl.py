"""The `vprl` recipe: Visual Planning's full method, the policy writes each next state as image
tokens and the move is inferred from the pictures (envs/vision/image_planning.py).

Mechanisms checked through the real rollout loop and batch preparation: a picture is 25 code
tokens of the turn (one vocabulary id each); the shortest path's pictures earn 1 per move and
VPRL's exact-match metric; a picture that moves the agent but also erases a wall is invalid
(-5), as is one that does not move it; GRPO ranks the three plans in that order.
"""

from __future__ import annotations

import json

import pytest

from agentic_rl.cli import main
from agentic_rl.config.load import load_config
from agentic_rl.envs.code_words import code_word_ids
from agentic_rl.envs.games.gridworld import MOVES, shortest_path
from agentic_rl.envs.vision.image_planning import TOKENS_PER_IMAGE, grid_vq
from agentic_rl.envs.vision.scenes import render_grid
from agentic_rl.learner.batch import Episodes
from agentic_rl.train.batch import prepare_batch
from agentic_rl.train.collect import play
from agentic_rl.train.setup import build

SMOKE = ["model.name=tiny", "trainer.progress=false", "trainer.tensorboard=false"]


def test_recipe_config():
    cfg = load_config("vprl")
    assert cfg.env.name == "image_planning" and cfg.model.name == "smollm2-135m"
    assert cfg.env.options["expert_noise"] == 0.5
    rewards = [cfg.env.options[k] for k in ("progress_reward", "valid_reward", "invalid_reward")]
    assert rewards == [1.0, 0.0, -5.0]
    assert cfg.algo.name == "grpo" and cfg.warm_start.num_tasks > 0


def next_picture(env) -> str:
    """The picture after the next move of a shortest path."""
    dr, dc = MOVES[shortest_path(env.walls, env.position, env.goal)[0]]
    return env.picture_tokens((env.position[0] + dr, env.position[1] + dc))


def wall_erased(env) -> str:
    """The agent one step along the path, but a wall erased from the picture."""
    dr, dc = MOVES[shortest_path(env.walls, env.position, env.goal)[0]]
    target = (env.position[0] + dr, env.position[1] + dc)
    image = render_grid(set(sorted(env.walls)[1:]), target, env.goal)
    return env.vq.to_text(env.vq.encode(image))


def plans(ep, index, turn):
    env = ep.env
    picture = [next_picture, lambda e: e.picture_tokens(), wall_erased][index % 3](env)
    return f"<state>{picture}</state>"


def test_pictures_are_the_plan_and_the_reward_reads_them(scripted, tokenizer):
    cfg = load_config("vprl", [*SMOKE, "rollout.group_size=3"], smoke=True)
    setup = build(cfg)
    task = setup.train_tasks[0]
    walls = {tuple(w) for w in task.fields["walls"]}
    moves = len(shortest_path(walls, tuple(task.fields["start"]), tuple(task.fields["goal"])))
    samples = play(setup, [task] * 3, ["g"] * 3, scripted(plans), seed=0)
    best, still, erased = (s[0] for s in samples)
    assert best.reward == moves and best.metrics["success"] == 1.0
    assert best.metrics["env/optimal_plan"] == 1.0 and best.metrics["env/progress_moves"] == moves
    turns = cfg.rollout.max_turns
    assert still.reward == -5.0 * turns and still.metrics["invalid_actions"] == turns
    assert erased.reward == -5.0 * turns and erased.metrics["success"] == 0.0
    # token-native: each turn of the best plan is <state>, 25 code ids, </state>
    codes = set(code_word_ids(tokenizer, grid_vq().size))
    start, end = best.turn_spans[0]
    turn_ids = best.token_ids[start:end]
    assert sum(1 for t in turn_ids if t in codes) == TOKENS_PER_IMAGE
    batch = prepare_batch(setup, Episodes(samples, [task] * 3))
    adv = [float(batch.advantages[i][batch.loss_mask[i] > 0][0]) for i in range(3)]
    assert adv[0] > 0 > adv[1] and adv[1] == pytest.approx(adv[2])


def test_smoke_reports_the_exact_match_metric(tmp_path, warm_start_episodes):
    out = [f"trainer.out_dir={tmp_path}", "trainer.run_name=vprl"]
    assert main(["train", "vprl", *SMOKE, *out, "--smoke"]) == 0
    assert warm_start_episodes(tmp_path / "vprl") > 0
    summary = json.loads((tmp_path / "vprl" / "summary.json").read_text())
    # the env's own metrics reach the summary (the untrained model writes no valid picture)
    for stage in ("before", "warm_start", "after"):
        assert "env/malformed_pictures" in summary[stage]


def test_a_warm_start_without_successful_expert_episodes_says_why(tmp_path):
    # every layout needs at least 2 moves, so one turn never reaches the goal
    out = [f"trainer.out_dir={tmp_path}", "trainer.run_name=vprl", "rollout.max_turns=1"]
    with pytest.raises(RuntimeError, match="none of the 8 scripted-expert episodes reached"):
        main(["train", "vprl", *SMOKE, *out, "--smoke"])
