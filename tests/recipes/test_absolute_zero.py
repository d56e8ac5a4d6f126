"""The `absolute_zero` recipe: propose/solve self-play over code tasks checked in the sandbox.

Mechanisms checked: the executor rejects invalid proposals (an error, a banned import, a
program whose two runs differ, too few inputs) and malformed ones score -1; solvers are checked
by running code (abduction: any input that works; induction: held-out pairs); through the real
self-play step with a scripted policy, a valid proposal's reward is the learnability 1 - r of
its solver rollouts (hand-computed), it joins the persisted task buffer, and TRR++ normalises
rewards within (task type, role) buckets (hand-computed; GRPO's per-prompt groups give 0).
"""

from __future__ import annotations

import pytest
import torch

from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError
from agentic_rl.envs.check import check_env
from agentic_rl.envs.code.self_play import (
    CodeSelfPlayEnv,
    CodeTask,
    make_self_play_tasks,
    propose_task,
    seed_programs,
    solve_task,
)
from agentic_rl.envs.from_config import make_envs
from agentic_rl.logging import read_metrics
from agentic_rl.rewards.absolute_zero import validate_task
from agentic_rl.tools.sandbox import shared
from agentic_rl.tools.sandbox.limits import SandboxLimits
from agentic_rl.tools.sandbox.pool import SandboxPool
from agentic_rl.train.batch import prepare_batch
from agentic_rl.train.self_play import TaskBuffer, self_play_step
from agentic_rl.train.setup import build
from agentic_rl.train.stages import train_recipe
from agentic_rl.types import Action

FAST = ["model.name=tiny", "trainer.progress=false", "trainer.tensorboard=false"]
TRIPLE = "def f(x):\n    return x * 3 + 1"  # the scripted proposer's task: f(4) = 13
RAISES = "def f(x):\n    return 1 / 0"
RANDOM = "import _random\ndef f(x):\n    return _random.Random().random()"


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(1, SandboxLimits(timeout_s=2.0, memory_mb=512)) as pool:
        yield pool


@pytest.fixture
def shared_pools():
    """Envs built from config start the process-wide sandbox pool: close it afterwards."""
    yield
    shared.close_shared_pools()


def test_seed_programs_are_valid_tasks_with_their_recorded_outputs(pool):
    for code in seed_programs("train") + seed_programs("eval"):
        for input_text, output in zip(code.inputs, code.outputs, strict=True):
            run = validate_task(pool, code.program, input_text)
            assert run.ok and run.output == output, (code.program, input_text)
    train = {c.program for c in seed_programs("train")}
    assert train.isdisjoint(c.program for c in seed_programs("eval"))


def test_held_out_tasks_are_distinct_and_bounded():
    """Eval tasks are drawn without replacement (a draw with replacement from 6 programs gave
    31 distinct tasks in 60); abduction counts a (program, output) once; asking for more than
    the eval programs make is an error that says how many they make."""
    tasks = make_self_play_tasks("eval", 120, seed=0)
    assert len({t.prompt for t in tasks}) == 120
    assert [t.fields["task_type"] for t in tasks[:3]] == ["deduction", "abduction", "induction"]
    programs = seed_programs("eval")
    deduction = sum(len(c.inputs) for c in programs)
    abduction = sum(len(set(c.outputs)) for c in programs)
    available = deduction + abduction + len(programs)
    everything = make_self_play_tasks("eval", available, seed=1)
    assert len({t.prompt for t in everything}) == available
    with pytest.raises(ValueError, match=f"make {available} distinct"):
        make_self_play_tasks("eval", available + 1)


def proposal(program, *inputs):
    blocks = "".join(f"```input\n{i}\n```\n" for i in inputs)
    return f"```python\n{program}\n```\n{blocks}" if program else blocks


@pytest.mark.parametrize(
    "task_type, text, reward",
    [
        ("deduction", proposal(TRIPLE, "4"), 0.0),  # valid: learnability comes later
        ("deduction", proposal("def f(x):\n    return x / 0", "4"), -0.5),  # raises
        ("abduction", proposal("import os\ndef f(x):\n    return x", "1"), -0.5),  # banned
        # `_random` passes the import check but its draws differ run to run: the second
        # execution catches it
        ("deduction", proposal(RANDOM, "1"), -0.5),
        ("abduction", proposal("def f(x):\n    while True:\n        pass", "1"), -0.5),  # hangs
        ("deduction", "```python\ndef f(x):\n    return x\n```", -1.0),  # no input block
        ("induction", proposal("", "1, 2", "1, 2"), -0.5),  # one distinct input
        ("induction", proposal("", "1, 2", "3, 4") + "```message\nadds\n```", 0.0),
        ("induction", "some inputs", -1.0),
    ],
)
def test_the_executor_validates_proposals(pool, task_type, text, reward):
    env = CodeSelfPlayEnv(runner=pool, tool_timeout_s=1.0)
    reference = CodeTask("def f(a, b):\n    return a + b", ("1, 2",), ("3",))
    env.reset(propose_task("p", task_type, [reference], reference), seed=0)
    result = env.step(Action(kind="answer", text=text))
    assert result.terminated and result.reward == reward
    assert result.info["success"] == float(reward == 0.0)


def test_a_non_deterministic_program_is_rejected_for_its_differing_runs(pool):
    run = validate_task(pool, RANDOM, "1")
    assert not run.ok and "non-deterministic" in run.error


def test_solvers_are_checked_by_running_code(pool):
    env = CodeSelfPlayEnv(runner=pool)
    program = "def f(xs):\n    return max(xs) - min(xs)"
    code = CodeTask(program, ("[3, 9, 1]", "[5]", "[-4, 4]"), ("8", "0", "8"), "the spread")

    def reward(task_type, answer, kind="answer"):
        env.reset(solve_task("s", task_type, code), seed=0)
        return env.step(Action(kind=kind, text=answer)).reward

    assert reward("deduction", "8") == 1.0 and reward("deduction", "9") == -0.5
    assert reward("abduction", "[0, 8]") == 1.0  # any input with output 8 counts
    assert reward("abduction", "[1, 2]") == -0.5
    assert reward("deduction", "", kind="invalid") == -1.0  # no <answer>: format error
    assert reward("induction", "```python\ndef f(xs):\n    return max(xs) - min(xs)\n```") == 1.0
    # fits the two shown pairs ([3, 9, 1] -> 8, [5] -> 0) but not the held-out [-4, 4] -> 8
    overfit = "def f(xs):\n    return 8 if len(xs) == 3 else 0"
    assert reward("induction", overfit) == -0.5
    prompt = solve_task("s", "induction", code).prompt
    assert "f([3, 9, 1]) == 8" in prompt and "[-4, 4]" not in prompt


def test_check_env_on_solve_tasks(pool):
    tasks = [t for t in make_self_play_tasks("train", 12, seed=0) if t.fields["role"] == "solve"]
    check_env(CodeSelfPlayEnv(runner=pool), tasks + make_self_play_tasks("eval", 3, seed=0))


def script(ep, index, turn):
    """Deduction proposers: prompt 0 proposes TRIPLE (valid), prompt 1 writes no answer.
    Abduction proposers: an erroring program. Induction proposers: no inputs. Solvers (and
    the learnability probes): sample 0 right, the others a malformed argument list."""
    fields = ep.task.fields
    if fields["role"] == "propose":
        if fields["task_type"] == "deduction":
            first = ep.task.task_id.endswith("-0")
            return f"<answer>{proposal(TRIPLE, '4')}</answer>" if first else "no idea"
        if fields["task_type"] == "abduction":
            return f"<answer>{proposal(RAISES, '2')}</answer>"
        return "<answer>```message\nhint\n```</answer>"
    if index > 0:
        return "<answer>nope(</answer>"
    if fields["task_type"] == "induction":
        return f"<answer>```python\n{fields['program']}\n```</answer>"
    return f"<answer>{ep.task.answers[0]}</answer>"


def az_setup(tmp_path, *overrides):
    sizes = ["rollout.tasks_per_step=2", "rollout.group_size=4", "env.options.solve_samples=4"]
    overrides = [*FAST, f"trainer.out_dir={tmp_path}", *sizes, *overrides]
    return build(load_config("absolute_zero", overrides, smoke=True))


def bucket(episodes, task_type, role):
    return [
        i
        for i, task in enumerate(episodes.tasks)
        if (task.fields["task_type"], task.fields["role"]) == (task_type, role)
    ]


def test_learnability_buffer_and_trr_pp_through_the_self_play_step(
    tmp_path, scripted, shared_pools
):
    scripted(script)
    setup = az_setup(tmp_path)
    episodes, generated, metrics = self_play_step(setup, 1)
    assert episodes is generated and len(episodes) == 2 * 3 * 2 * 4  # roles x types x 2 x G
    rewards = episodes.rewards()
    deduction = bucket(episodes, "deduction", "propose")
    # probe: 1 of 4 solver rollouts right -> r = 0.25 -> learnability 1 - 0.25 = 0.75
    assert rewards[deduction].tolist() == [0.75] * 4 + [-1.0] * 4
    assert rewards[bucket(episodes, "abduction", "propose")].tolist() == [-0.5] * 8
    assert rewards[bucket(episodes, "induction", "propose")].tolist() == [-1.0] * 8
    solve = bucket(episodes, "deduction", "solve")
    assert rewards[solve].tolist() == [1.0, -0.5, -0.5, -0.5] * 2
    assert metrics["az_new_tasks"] == 1.0 and metrics["az_learnability"] == 0.75
    assert metrics["az_valid_proposals"] == pytest.approx(4 / 24)
    assert metrics["az_buffer_size"] == len(seed_programs("train")) + 1

    path = tmp_path / "absolute_zero" / "task_buffer.jsonl"
    assert CodeTask(TRIPLE, ("4",), ("13",)) in TaskBuffer.load(path, before_step=2).programs()
    assert TaskBuffer.load(path, before_step=1).programs() == seed_programs("train")

    batch = prepare_batch(setup, episodes)
    adv = (batch.advantages * batch.loss_mask).sum(1) / batch.loss_mask.sum(1)  # per sequence

    def whitened_over_tokens(rows):
        # TRR++ whitens each bucket's tokens (every token carries its sequence's reward):
        # token-weighted mean, unbiased variance over the bucket's N tokens
        values, n = rewards[rows], batch.loss_mask[rows].sum(1)
        mean = (n * values).sum() / n.sum()
        var = (n * (values - mean) ** 2).sum() / (n.sum() - 1)
        return ((values - mean) / torch.sqrt(var + 1e-8)).tolist()

    # TRR++ bucket (deduction, propose): rewards 0.75 x4, -1 x4
    assert adv[deduction].tolist() == pytest.approx(whitened_over_tokens(deduction), abs=1e-4)
    assert (adv[deduction][:4] > 0).all() and (adv[deduction][4:] < 0).all()
    # (deduction, solve): [1, -.5, -.5, -.5] x2
    assert adv[solve].tolist() == pytest.approx(whitened_over_tokens(solve), abs=1e-4)
    assert adv[bucket(episodes, "abduction", "propose")].abs().max() == 0  # constant bucket

    # GRPO normalises within each prompt's group instead: both deduction-proposer groups are
    # constant (0.75 x4 and -1 x4), so that signal vanishes without TRR++'s buckets.
    setup.cfg = load_config("absolute_zero", [*FAST, "algo.name=grpo"], smoke=True)
    grpo = prepare_batch(setup, episodes)
    assert (grpo.advantages[deduction] * grpo.loss_mask[deduction]).abs().max() == 0


def test_a_resumed_step_rewrites_its_buffer_lines(tmp_path):
    path = tmp_path / "task_buffer.jsonl"
    new = CodeTask(TRIPLE, ("4",), ("13",))
    other = CodeTask("def f(x):\n    return -x", ("2",), ("-2",))
    buffer = TaskBuffer.load(path, 1)
    buffer.add(path, 1, [("deduction", new)])
    TaskBuffer.load(path, 2).add(path, 2, [("deduction", other), ("abduction", new)])  # dup
    assert len(path.read_text().splitlines()) == 2
    rerun = TaskBuffer.load(path, 2)  # step 2 interrupted: its line is not in the buffer
    assert other not in rerun.programs() and new in rerun.programs()
    rerun.add(path, 2, [])
    assert len(path.read_text().splitlines()) == 1


def test_smoke(tmp_path, scripted, shared_pools):
    # The scripted policy (valid and invalid proposals, right and wrong solutions) reaches
    # every branch of the step: a random model only ever writes format errors.
    scripted(script)
    overrides = [*FAST, f"trainer.out_dir={tmp_path}", "env.num_eval_tasks=3"]
    summary = train_recipe(
        load_config("absolute_zero", [*overrides, "trainer.eval_before=false"], smoke=True)
    )
    assert summary["steps"] == 2
    rows = read_metrics(tmp_path / "absolute_zero" / "metrics.jsonl")
    assert any("warm_start/last_loss" in r for r in rows)
    train = [r for r in rows if "train/az_valid_proposals" in r]
    assert len(train) == 2 and all(r["train/samples"] == 12 for r in train)
    assert train[0]["train/az_new_tasks"] == 1.0  # the deduction proposal joined the buffer
    assert train[1]["train/az_new_tasks"] == 0.0  # proposed again: not new
    assert all(r["train/skipped_update"] == 0.0 for r in train)


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["rollout.max_turns=2"], "one answer per episode"),
        (["filters.ttrl_vote_samples=8"], "does not apply to env.name=code_self_play"),
        (["env.options.references=0"], "references and solve_samples must be >= 1"),
    ],
)
def test_bad_self_play_settings_fail(overrides, match):
    with pytest.raises((ConfigError, ValueError), match=match):
        cfg = load_config("absolute_zero", overrides)
        make_envs(cfg, 1)
