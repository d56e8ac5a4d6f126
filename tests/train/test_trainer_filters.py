"""The trainer's collect stage with scripted generations: dynamic sampling, RoC, StarPO-S,
TTRL, overlong filtering and TRR++ ids, through the real env and learner (tiny model)."""

import pytest
import torch

from agentic_rl.config.load import load_config
from agentic_rl.model.tokens import encode_text
from agentic_rl.train.batch import prepare_batch
from agentic_rl.train.collect import DynamicSamplingError, collect
from agentic_rl.train.loop import train_step
from agentic_rl.train.setup import build, make_optimizer
from agentic_rl.types import Completion


class PlanGenerator:
    """Answers each prompt with plan(call, index, gold) text; counts generate() calls."""

    def __init__(self, setup, plan):
        self.tokenizer, self.tasks, self.plan = setup.tokenizer, setup.train_tasks, plan
        self.calls, self.prompts = 0, []

    def generate(self, prompts, params):
        out = []
        for i, prompt in enumerate(prompts):
            text = self.tokenizer.decode(prompt)
            gold = next(t.answers[0] for t in self.tasks if t.prompt in text)
            reply = self.plan(self.calls, i, gold)
            ids = encode_text(self.tokenizer, reply)
            out.append(Completion(ids, [-1.0] * len(ids), "stop", reply))
        self.calls += 1
        self.prompts.append(len(prompts))
        return out

    def update_weights(self, state_dict):
        """Scripted replies do not depend on the weights: nothing to load."""


def setup_with(plan, *overrides):
    cfg = load_config(
        "calculator_grpo", ["model.name=tiny", "trainer.progress=false", *overrides], smoke=True
    )
    setup = build(cfg)
    setup.generator = PlanGenerator(setup, plan)
    return setup


def right_if(condition, gold):
    return f"<answer>{gold}</answer>" if condition else "<answer>-1</answer>"


def test_dynamic_sampling_generates_more_batches_until_the_batch_is_full():
    def plan(call, i, gold):  # call 0: all wrong; 1: first group varies; 2: both vary
        return right_if((call == 1 and i == 0) or (call == 2 and i % 2 == 0), gold)

    setup = setup_with(plan, "filters.dynamic_sampling=true", "filters.max_gen_batches=4")
    metrics = train_step(setup, make_optimizer(setup), 1)
    assert setup.generator.calls == 3 and metrics["gen_batches"] == 3
    assert metrics["generated_groups"] == 6 and metrics["kept_groups"] == 2
    assert metrics["zero_variance_groups"] == pytest.approx(3 / 6)
    assert metrics["samples"] == 4 and metrics["nonzero_adv_fraction"] == 1.0
    assert metrics["episodes"] == 12 and metrics["skipped_update"] == 0.0


def test_dynamic_sampling_raises_a_clear_error_after_max_gen_batches():
    setup = setup_with(
        lambda c, i, gold: right_if(False, gold),
        "filters.dynamic_sampling=true",
        "filters.max_gen_batches=3",
    )
    with pytest.raises(DynamicSamplingError, match="kept 0 of the 2 groups .*max_gen_batches=3"):
        collect(setup, 1)
    assert setup.generator.calls == 3


def test_without_dynamic_sampling_one_batch_and_a_skipped_update():
    setup = setup_with(lambda c, i, gold: right_if(False, gold))
    metrics = train_step(setup, make_optimizer(setup), 1)
    assert setup.generator.calls == 1 and metrics["gen_batches"] == 1
    assert metrics["skipped_update"] == 1.0 and metrics["zero_variance_groups"] == 1.0


def test_variance_filter_keeps_the_top_groups_by_reward_std():
    # 4 groups of 2: groups 0 and 2 split 1/0, groups 1 and 3 all wrong
    setup = setup_with(
        lambda c, i, gold: right_if(i in (0, 4), gold),
        "rollout.tasks_per_step=4",
        "filters.variance_filter_keep=0.5",
    )
    episodes, generated, metrics = collect(setup, 1)
    assert metrics["kept_groups"] == 2 and len(generated) == 8
    assert [s[0].reward for s in episodes.samples] == [1.0, 0.0, 1.0, 0.0]


def test_roc_oversamples_and_keeps_group_size():
    setup = setup_with(
        lambda c, i, gold: right_if(i % 4 in (0, 1), gold),
        "rollout.group_size=2",
        "filters.roc=true",
        "filters.roc_min_per_class=1",
    )
    episodes, generated, _ = collect(setup, 1)
    assert setup.generator.prompts == [8]  # 2 tasks x (2 x G=2)
    assert len(generated) == 8 and len(episodes) == 4
    assert [s[0].reward for s in episodes.samples] == [1.0, 0.0, 1.0, 0.0]


def test_ttrl_votes_on_n_samples_and_trains_on_m():
    # 3 of 4 samples say 7 (the majority, wrong), one says the gold answer
    setup = setup_with(
        lambda c, i, gold: f"<answer>{gold}</answer>" if i % 4 == 3 else "<answer>7</answer>",
        "filters.ttrl_vote_samples=4",
    )
    episodes, generated, metrics = collect(setup, 1)
    assert setup.generator.prompts == [8] and len(episodes) == 4
    assert [s[0].reward for s in generated.samples] == [1.0, 1.0, 1.0, 0.0] * 2
    assert [s[0].reward for s in episodes.samples] == [1.0, 1.0] * 2
    assert metrics["ttrl_label_accuracy"] == 0.0 and metrics["ttrl_vote_share"] == 0.75


def test_overlong_filter_masks_truncated_episodes_only():
    def plan(call, i, gold):  # even samples answer at once; odd ones calculate until cut off
        return f"<answer>{gold}</answer>" if i % 2 == 0 and call == 0 else "<calc>1+1</calc>"

    setup = setup_with(plan, "filters.overlong_filter=true")
    episodes, _, _ = collect(setup, 1)
    batch = prepare_batch(setup, episodes)
    truncated = torch.tensor([s[0].truncated for s in episodes.samples])
    assert truncated.tolist() == [False, True, False, True]
    assert batch.loss_mask[truncated].sum() == 0 and batch.loss_mask[~truncated].sum() > 0
    assert (batch.advantages[~truncated] != 0).any()


def test_overlong_soft_penalty_reaches_the_rewards():
    setup = setup_with(
        lambda c, i, gold: right_if(True, gold) if i % 2 else "<calc>1+1</calc>" * (1 + c),
        # the smoke run generates at most 2 turns x 48 = 96 tokens: L_exp = 20 tokens
        "filters.overlong_buffer=76",
    )
    episodes, _, metrics = collect(setup, 1)
    assert metrics["overlong_penalized"] > 0 and metrics["overlong_penalty"] < 0
    # the length is the model's own tokens: the calculator's <result> observations do not count
    lengths = [s[0].metrics["generated_tokens"] for s in episodes.samples]
    assert lengths == [sum(s[0].loss_mask) for s in episodes.samples]
    assert all(
        s[0].metrics["response_tokens"] > s[0].metrics["generated_tokens"]
        for s in episodes.samples[::2]
    )
    penalties = [min(0.0, (20 - n) / 76) for n in lengths]
    assert [s[0].reward for s in episodes.samples][1::2] == pytest.approx(
        [1.0 + p for p in penalties[1::2]]
    )
    assert [s[0].metrics["outcome_reward"] for s in episodes.samples][1::2] == [1.0, 1.0]


LONG = "Let me work this out carefully, one step after the other, and then answer: "


@pytest.mark.parametrize("metric", ["outcome", "reward"])
def test_dynamic_sampling_compares_outcomes_before_the_length_penalty(metric):
    def plan(call, i, gold):
        if call == 0:  # group 0 all right, one answer long (penalised); group 1 all wrong
            return (LONG if i == 1 else "") + right_if(i < 2, gold)
        return right_if(i % 2 == 0, gold)  # both groups split right / wrong

    setup = setup_with(
        plan,
        "filters.dynamic_sampling=true",
        f"filters.metric={metric}",
        "filters.overlong_buffer=76",  # L_exp = 96 - 76 = 20 generated tokens
    )
    episodes, generated, metrics = collect(setup, 1)
    shaped = [s[0].reward for s in generated.samples[:2]]
    assert shaped[0] == 1.0 and shaped[1] < 1.0  # the long right answer is penalised
    assert metrics["gen_batches"] == 2 and metrics["kept_groups"] == 2
    outcomes = [
        [episodes.samples[i][0].metrics["outcome_reward"] for i in g] for g in episodes.groups()
    ]
    if metric == "outcome":  # every kept group has right and wrong answers
        assert outcomes == [[1.0, 0.0], [1.0, 0.0]]
    else:  # the shaped reward keeps the all-right group: GRPO would give it +-0.7 advantages
        assert outcomes[0] == [1.0, 1.0]


def test_trr_pp_buckets_come_from_task_fields():
    setup = setup_with(
        lambda c, i, gold: right_if(i % 2 == 0, gold),
        "algo.name=trr_pp",
        "algo.trr_type_field=template",
        "algo.trr_role_field=",
    )
    episodes, _, _ = collect(setup, 1)
    batch = prepare_batch(setup, episodes)
    templates = [t.fields["template"] for t in episodes.tasks]
    same = [templates[i] == templates[j] for i in range(4) for j in range(4)]
    ids = batch.task_type_ids.tolist()
    assert same == [ids[i] == ids[j] for i in range(4) for j in range(4)]
    assert batch.role_ids.tolist() == [0, 0, 0, 0]


def test_kl_reference_is_the_warm_started_model_and_survives_resume(tmp_path):
    from safetensors.torch import load_file

    from agentic_rl.checkpoint.layout import latest_checkpoint
    from agentic_rl.train.loop import train

    def run(out, steps):
        overrides = ["model.name=tiny", "trainer.progress=false", "algo.kl_coef=0.01"]
        overrides += [f"trainer.out_dir={out}", "trainer.run_name=r", f"trainer.steps={steps}"]
        train(load_config("gigpo_gridworld", overrides, smoke=True))
        return tmp_path / out / "r"

    first = run(tmp_path / "a", 1)
    warm = load_file(str(first / "checkpoints" / "step_000000" / "model.safetensors"))
    reference = load_file(str(first / "checkpoints" / "step_000001" / "reference.safetensors"))
    assert all(torch.equal(warm[k], reference[k]) for k in warm)
    run(tmp_path / "a", 2)  # resumes: the reference comes back from the checkpoint
    uninterrupted = run(tmp_path / "b", 2)
    wa = load_file(str(latest_checkpoint(tmp_path / "a" / "r") / "model.safetensors"))
    wb = load_file(str(latest_checkpoint(uninterrupted) / "model.safetensors"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
