"""The `bfcl` recipe: BFCL's own verdict is the reward the trainer sees, per category.

Mechanism checked through the real trainer code (build, play, prepare_batch) with a scripted
policy: in one group, the expert's call list scores 1, a wrong value and prose score 0, and
the group's GRPO advantages order them; the warm start's demonstrations are the live
categories' possible answers, ended by the end-of-turn token, and never a reported entry.
"""

from __future__ import annotations

import pytest

pytest.importorskip("bfcl_eval", reason="bfcl-eval is installed by make setup (--no-deps)")
pytest.importorskip("tree_sitter", reason="the bfcl extra: tree-sitter 0.21")

from agentic_rl.config.load import load_config  # noqa: E402
from agentic_rl.learner.batch import Episodes  # noqa: E402
from agentic_rl.train.batch import prepare_batch  # noqa: E402
from agentic_rl.train.collect import expert_demos, play  # noqa: E402
from agentic_rl.train.setup import build  # noqa: E402

SMOKE = ["model.name=tiny", "trainer.progress=false", "env.num_train_tasks=20"]


def test_bfcl_reward_is_bfcls_verdict(scripted):
    cfg = load_config("bfcl", [*SMOKE, "rollout.group_size=3"], smoke=True)
    assert cfg.rollout.chat_format == "python_calls" and cfg.algo.name == "grpo"
    setup = build(cfg)
    task = next(t for t in setup.eval_tasks if t.fields["category"] == "simple_python")
    gold = task.answers[0]
    wrong = gold.replace("=", "=1", 1) if "=" in gold else "[nothing()]"
    replies = [gold, wrong, "I would call the function."]
    samples = play(setup, [task] * 3, ["g"] * 3, scripted(lambda ep, i, turn: replies[i]), seed=0)
    assert [s[0].reward for s in samples] == [1.0, 0.0, 0.0]
    assert samples[0][0].metrics["env/accuracy@simple_python"] == 1.0
    batch = prepare_batch(setup, Episodes(samples, [task] * 3))
    adv = [float(batch.advantages[i][batch.loss_mask[i] > 0][0]) for i in range(3)]
    assert adv[0] > 0 > adv[1] and adv[1] == pytest.approx(adv[2])


def test_warm_start_demonstrates_live_answers_that_end_the_turn():
    cfg = load_config("bfcl", [*SMOKE, "warm_start.num_tasks=6"], smoke=True)
    setup = build(cfg)
    demos, episodes = expert_demos(setup, 6)
    assert episodes == 6 and all(d.reward == 1.0 for d in demos)
    assert all(d.task_id.startswith("live_") for d in demos)
    eos = setup.tokenizer.eos_token_id
    for d in demos:
        generated = [t for t, m in zip(d.token_ids, d.loss_mask, strict=True) if m]
        assert generated[-1] == eos
