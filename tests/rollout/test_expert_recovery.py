"""Recovery demonstrations (warm_start.recovery_fraction): a share of the scripted expert's
episodes opens with the env's scripted mistake, shown with loss mask 0, then the expert's
recovery, trained. Checked through the real episode loops on the search env, whose mistake is
a misspelt name that loses the person's document."""

from __future__ import annotations

from agentic_rl.config.rollout import RolloutConfig
from agentic_rl.envs.search.single_hop import SearchQAEnv, make_search_qa_tasks
from agentic_rl.formats.chat import TagFormat
from agentic_rl.rollout.actors import expert_actor, shows_mistake
from agentic_rl.rollout.episode import Episode
from agentic_rl.rollout.loop import run_episodes
from agentic_rl.rollout.stepwise import run_stepwise
from agentic_rl.train.collect import has_untrained_turn

CFG = RolloutConfig(max_turns=4, max_tokens_per_turn=48, max_total_tokens=600)


def _play(tokenizer, fraction: float, run=run_episodes, n: int = 12):
    tasks = make_search_qa_tasks("train", n, seed=3)
    envs = [SearchQAEnv(topk=2) for _ in tasks]
    fmt = TagFormat(envs[0].tools)
    act = expert_actor(fmt, tokenizer, recovery_fraction=fraction, seed=0)
    return tasks, run(envs, tasks, [t.task_id for t in tasks], act, fmt, tokenizer, CFG, 0)


def _turns(tokenizer, trajectory):
    return [tokenizer.decode(trajectory.token_ids[a:b]) for a, b in trajectory.turn_spans]


def test_the_mistake_is_shown_untrained_and_the_recovery_trained(tokenizer) -> None:
    tasks, trajectories = _play(tokenizer, 1.0)
    opened = 0
    for task, trajectory in zip(tasks, trajectories, strict=True):
        assert trajectory.metrics["success"] == 1.0
        turns = _turns(tokenizer, trajectory)
        first, *rest = trajectory.turn_spans
        name = task.fields["entity"]
        if has_untrained_turn(trajectory):  # the mistake: a search for another name, mask 0
            opened += 1
            assert turns[0].startswith("<search>") and f"<search>{name}</search>" != turns[0]
            assert turns[1].startswith(f"<search>{name} ")  # the recovery search, trained
            assert len(turns) == 3 and trajectory.metrics["tool_calls"] == 2
        else:  # a task without a mistake that loses the document: the plain expert
            assert turns[0] == f"<search>{name}</search>"
        # every other turn is the expert's, trained token for token
        for start, end in rest + ([] if has_untrained_turn(trajectory) else [first]):
            assert all(trajectory.loss_mask[start:end])
    assert 0 < opened < len(tasks)


def test_no_recovery_fraction_plays_the_plain_expert(tokenizer) -> None:
    _, plain = _play(tokenizer, 0.0)
    tasks = make_search_qa_tasks("train", 12, seed=3)
    envs = [SearchQAEnv(topk=2) for _ in tasks]
    fmt = TagFormat(envs[0].tools)
    act = expert_actor(fmt, tokenizer)
    default = run_episodes(envs, tasks, [t.task_id for t in tasks], act, fmt, tokenizer, CFG, 0)
    assert [t.token_ids for t in plain] == [t.token_ids for t in default]
    assert [t.loss_mask for t in plain] == [t.loss_mask for t in default]
    assert not any(has_untrained_turn(t) for t in plain)


def test_step_mode_leaves_the_mistake_step_without_a_trained_token(tokenizer) -> None:
    tasks, episodes = _play(tokenizer, 1.0, run_stepwise)
    untrained = [samples for samples in episodes if not samples[0].num_generated]
    assert untrained  # the mistake's step sample: expert_demos drops it
    for samples in untrained:
        assert all(s.num_generated for s in samples[1:])  # the recovery steps train
        # the recovery step sees the mistake's result in its context
        assert "<information>" in tokenizer.decode(samples[1].token_ids)


def test_the_share_of_mistakes_follows_the_fraction_and_the_seed(tokenizer) -> None:
    def picks(fraction: float, seed: int) -> list[int]:
        episodes = [Episode(None, None, "g", [], 0, index=i) for i in range(400)]  # type: ignore[arg-type]
        return [i for i, ep in enumerate(episodes) if shows_mistake(fraction, seed, ep)]

    assert picks(0.0, 0) == [] and len(picks(1.0, 0)) == 400
    quarter = picks(0.25, 0)
    assert 70 <= len(quarter) <= 130  # ~100 of 400
    assert picks(0.25, 0) == quarter and picks(0.25, 1) != quarter


def test_a_solvers_untrained_guess_shows_the_verifier_rejecting(tokenizer) -> None:
    """The solver / verifier team with no trained guesses (expert_mistakes=0): recovery
    demonstrations open with the solver's wrong guess, untrained; the verifier's rejection and
    the solver's computed answer are trained, each in its role's own sample."""
    from agentic_rl.envs.math.calculator import make_calculator_tasks
    from agentic_rl.envs.multiagent.solver_verifier import SOLVER, VERIFIER, SolverVerifierEnv
    from agentic_rl.rollout.memory import run_memory_episodes

    tasks = make_calculator_tasks("train", 4, seed=0)
    envs = [SolverVerifierEnv(expert_mistakes=0.0) for _ in tasks]
    fmt = TagFormat(envs[0].tools)
    act = expert_actor(fmt, tokenizer, recovery_fraction=1.0, seed=0)
    cfg = RolloutConfig(mode="memory", max_turns=10, max_tokens_per_turn=48)
    episodes = run_memory_episodes(
        envs, tasks, [t.task_id for t in tasks], act, fmt, tokenizer, cfg, 0
    )
    for task, samples in zip(tasks, episodes, strict=True):
        roles = [s.role for s in samples]
        assert roles == [SOLVER, VERIFIER, VERIFIER, SOLVER, SOLVER, VERIFIER, VERIFIER]
        replies = [tokenizer.decode(s.token_ids[s.prompt_length :]) for s in samples]
        assert replies[0] == f"<answer>{int(task.answers[0]) + 10}</answer>"
        assert samples[0].num_generated == 0  # the guess: shown, not trained
        assert "<verdict>reject</verdict>" in replies[2] and samples[2].num_generated > 0
        assert "<verdict>accept</verdict>" in replies[6]
        assert all(s.num_generated for s in samples[1:])
        assert samples[-1].reward == 1.0
