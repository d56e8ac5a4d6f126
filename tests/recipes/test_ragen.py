"""The RAGEN recipes (`ragen_sokoban`, `ragen_frozenlake`, `ragen_bandit`): StarPO / StarPO-S on
RAGEN's envs.

Mechanisms checked:
- ragen_sokoban: StarPO-S's variance filter trains only on the top 25% of groups by reward
  std (a group whose episodes differ is kept, constant groups are dropped), and turns carry
  several `||`-separated actions, each executed with gym-sokoban's rewards;
- ragen_frozenlake: the ice is slippery, and the envs of a group share the reset seed (the
  same moves slip the same way within a group, differently across groups); the filter keeps
  50% of the groups;
- ragen_bandit: the risky arm's draw is shared by a group and pays 1.0 about one time in four,
  so pulling it is worse in most groups and better on average; eval arm names are unseen.
"""

from __future__ import annotations

import pytest

from agentic_rl.cli import main
from agentic_rl.config.load import load_config
from agentic_rl.envs.games.bandit import ARM_PAIRS
from agentic_rl.envs.games.sokoban_levels import ACTIONS, parse_xsb, solve
from agentic_rl.logging import read_metrics
from agentic_rl.train.collect import collect, play
from agentic_rl.train.setup import build

SMOKE = ["model.name=tiny", "trainer.progress=false"]


def train_rows(run):
    return [r for r in read_metrics(run / "metrics.jsonl") if "train/reward" in r]


def expert_in_first_group(first: list[str]):
    """Episode 0 of the first group started plays the expert; everything else is invalid."""

    def script(ep, index, turn):
        if not first:
            first.append(ep.group_id)
        if ep.group_id == first[0] and index == 0:
            return ep.env.expert_turn()
        return "<action>jump</action>"

    return script


def test_ragen_sokoban_smoke(tmp_path, scripted):
    scripted(expert_in_first_group([]))
    out = [f"trainer.out_dir={tmp_path}", "trainer.run_name=sokoban"]
    assert main(["train", "ragen_sokoban", *SMOKE, *out, "--smoke"]) == 0
    rows = train_rows(tmp_path / "sokoban")
    assert len(rows) == 2
    for row in rows:  # smoke: 2 groups, the top 25% is 1 group
        assert row["train/generated_groups"] == 2 and row["train/kept_groups"] == 1
        assert row["train/value_loss"] > 0  # StarPO-S: PPO with a critic


def test_ragen_sokoban_variance_filter_and_multi_action_turns(scripted):
    cfg = load_config("ragen_sokoban", [*SMOKE, "rollout.tasks_per_step=4"], smoke=True)
    assert cfg.algo.name == "ppo" and cfg.filters.variance_filter_keep == 0.25
    assert cfg.algo.clip_high == 0.28 and cfg.algo.kl_coef == 0.0
    setup = build(cfg)
    first: list[str] = []
    scripted(expert_in_first_group(first))
    kept, generated, metrics = collect(setup, 1)
    assert metrics["generated_groups"] == 4 and metrics["kept_groups"] == 1
    assert {s[0].group_id for s in kept.samples} == {first[0]}  # the only group that varies
    expert = next(s[0] for s in generated.samples if s[0].group_id == first[0])
    task = next(
        t for s, t in zip(generated.samples, generated.tasks, strict=True) if s[0] is expert
    )
    moves = len(solve(parse_xsb(task.fields["level"])))
    assert expert.metrics["success"] == 1.0
    # several moves per turn: the whole solution in ceil(moves / 5) turns, each move -0.1,
    # +1 for the box on its target and +10 for the solved level
    assert len(expert.turn_spans) == -(-moves // 5)  # up to 5 moves per turn
    assert expert.reward == pytest.approx(11.0 - 0.1 * moves)
    assert expert.completion_text.count("||") >= moves - len(expert.turn_spans)
    others = [s[0].reward for s in generated.samples if s[0] is not expert]
    assert others == [pytest.approx(-0.2)] * 7  # an invalid action per turn, 2 turns
    assert all(a in ACTIONS for a in task.answers[0].split())


def test_ragen_frozenlake_smoke(tmp_path, scripted):
    scripted(lambda ep, index, turn: ep.env.expert_turn() if index == 0 else "<answer>no</answer>")
    out = [f"trainer.out_dir={tmp_path}", "trainer.run_name=lake"]
    assert main(["train", "ragen_frozenlake", *SMOKE, *out, "--smoke"]) == 0
    rows = train_rows(tmp_path / "lake")
    assert len(rows) == 2
    for row in rows:  # the oracle expert always reaches the goal, giving up scores 0
        assert row["train/reward"] == pytest.approx(0.5) and row["train/success"] == 0.5
        assert row["train/kept_groups"] == 1  # 50% of the 2 smoke groups
        assert row["train/value_loss"] > 0


FIXED = "<action>Down || Right || Up || Left || Down</action>"


@pytest.mark.parametrize("slippery", [True, False])
def test_ragen_frozenlake_slips_alike_within_a_group(scripted, slippery):
    overrides = [*SMOKE, f"env.options.is_slippery={str(slippery).lower()}"]
    setup = build(load_config("ragen_frozenlake", overrides, smoke=True))
    task = setup.train_tasks[0]
    groups = [g for g in "abcdefgh" for _ in range(2)]  # 8 groups of 2 episodes
    episodes = play(setup, [task] * 16, groups, scripted(lambda ep, i, t: FIXED), seed=0)
    ids = [e[0].token_ids for e in episodes]
    assert all(ids[i] == ids[i + 1] for i in range(0, 16, 2))  # a group slips alike
    distinct = len({tuple(i) for i in ids})
    if slippery:
        assert distinct > 1  # the same moves slip differently in other groups
    else:
        assert distinct == 1


def test_ragen_frozenlake_keeps_half_the_groups(scripted):
    cfg = load_config("ragen_frozenlake", [*SMOKE, "rollout.tasks_per_step=4"], smoke=True)
    assert cfg.filters.variance_filter_keep == 0.5 and cfg.env.options["is_slippery"] is True
    setup = build(cfg)
    first: list[str] = []
    scripted(expert_in_first_group(first))
    kept, _, metrics = collect(setup, 1)
    assert metrics["generated_groups"] == 4 and metrics["kept_groups"] == 2
    assert first[0] in {s[0].group_id for s in kept.samples}


def risky_or_safe(ep, index, turn):
    """Even episodes pull the risky arm, odd ones the safe arm."""
    fields = ep.task.fields
    return f"<answer>{fields['risky'] if index % 2 == 0 else fields['safe']}</answer>"


def test_ragen_bandit_smoke(tmp_path, scripted):
    scripted(risky_or_safe)
    out = [f"trainer.out_dir={tmp_path}", "trainer.run_name=bandit"]
    assert main(["train", "ragen_bandit", *SMOKE, *out, "--smoke"]) == 0
    rows = train_rows(tmp_path / "bandit")
    assert len(rows) == 2 and all(r["train/success"] == 0.5 for r in rows)


def test_ragen_bandit_groups_share_the_risky_draw(scripted):
    setup = build(load_config("ragen_bandit", SMOKE, smoke=True))
    pairs = lambda tasks: {(t.fields["safe"], t.fields["risky"]) for t in tasks}  # noqa: E731
    assert pairs(setup.train_tasks) <= set(ARM_PAIRS["train"])
    assert pairs(setup.eval_tasks) <= set(ARM_PAIRS["eval"])  # unseen names in eval
    tasks = setup.train_tasks[:10]
    expanded = [t for t in tasks for _ in range(4) for _ in range(4)]  # 4 groups x 4 per task
    groups = [f"{i // 4}" for i in range(len(expanded))]
    episodes = play(setup, expanded, groups, scripted(risky_or_safe), seed=0)
    paid, gaps = 0, []
    for g in range(0, len(episodes), 4):
        risky = [episodes[g + i][0].reward for i in (0, 2)]
        safe = [episodes[g + i][0].reward for i in (1, 3)]
        assert safe == [pytest.approx(0.1)] * 2
        assert risky[0] == risky[1] in (0.0, 1.0)  # one draw per group
        paid += risky[0] == 1.0
        gaps.append(risky[0] - 0.1)
    assert paid == 10  # of 40 groups (p = 0.25; the seeds are fixed, so this is exact)
    assert sum(g < 0 for g in gaps) == 30  # the risky arm loses in most groups...
    assert sum(gaps) / len(gaps) == pytest.approx(0.15)  # ...and wins on average (0.25 - 0.1)
