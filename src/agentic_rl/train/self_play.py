"""Absolute Zero's self-play step: propose, validate, estimate learnability, solve.

The training loop collects each step with `self_play_step` when rollout.scheme=self_play (Zhao et al.
2025, "Absolute Zero: Reinforced Self-play Reasoning with Zero Data", Alg. 1). Per RL step, for
each task type (deduction, abduction, induction):

1. PROPOSE: rollout.tasks_per_step proposer prompts, each showing K programs drawn from the task
   buffer (induction: one program to write inputs and a hint for), G samples each. The env
   validates every proposal in the sandbox: -1 format error, -0.5 rejected (an error, a banned
   import or call, a timeout, two runs printing different outputs).
2. LEARNABILITY: each distinct valid proposal becomes a solve task; n solver rollouts of it
   (env option solve_samples) give its solve rate r, and every proposer of it gets
   r_propose = 1 - r, or 0 when r is 0 or 1 (a task that is always or never solved teaches
   nothing). These rollouts only measure the task; they are not trained on.
3. SOLVE: rollout.tasks_per_step solve tasks drawn from the buffer (this step's proposals
   included), G samples each.

The trained batch is the proposer and solver episodes; their tasks carry `task_type` and `role`
so TRR++ (algo.name=trr_pp) normalises rewards within each of the six (type, role) buckets.
The buffer is the seed programs plus RUN_DIR/task_buffer.jsonl, one line per valid proposal
with the step that added it; a resumed run drops lines of steps it has not finished, so it
rebuilds the buffer an uninterrupted run had.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentic_rl.envs.code.self_play import (
    MIN_INDUCTION_PAIRS,
    TASK_TYPES,
    CodeSelfPlayEnv,
    CodeTask,
    propose_task,
    seed_programs,
    solve_task,
    validate_proposal,
)
from agentic_rl.envs.from_config import make_envs
from agentic_rl.learner.batch import Episodes
from agentic_rl.rewards.absolute_zero import FORMAT_ERROR, WRONG_BUT_FORMATTED, learnability_reward
from agentic_rl.train.collect import rollout
from agentic_rl.train.setup import Setup, run_dir
from agentic_rl.train.shaping import model_answer_text
from agentic_rl.types import Task

_PHASE_SEED = 1_000_003  # seed offset between the three rollout phases of a step


@dataclass
class TaskBuffer:
    """Seed programs plus the valid proposals of earlier steps: (step, task type, task)."""

    seeds: list[CodeTask]
    added: list[tuple[int, str, CodeTask]] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path, before_step: int) -> TaskBuffer:
        """The buffer at the start of `before_step` (lines of later steps are ignored)."""
        buffer = cls(seed_programs("train"))
        if path.exists():
            for line in path.read_text().splitlines():
                row = json.loads(line)
                if row["step"] < before_step:
                    buffer.added.append((row["step"], row["task_type"], CodeTask.from_dict(row)))
        return buffer

    def programs(self) -> list[CodeTask]:
        return self.seeds + [task for _, _, task in self.added]

    def solvable(self, task_type: str) -> list[CodeTask]:
        """Tasks a solver of `task_type` can be given (induction needs several pairs)."""
        if task_type != "induction":
            return self.programs()
        return [t for t in self.programs() if len(t.inputs) >= MIN_INDUCTION_PAIRS]

    def add(self, path: Path, step: int, new: list[tuple[str, CodeTask]]) -> int:
        """Record `step`'s valid proposals not in the buffer yet (in memory and on disk,
        replacing any lines a previous, interrupted run wrote for this or later steps); returns
        how many were new."""
        known = set(self.programs())
        fresh = [(t, task) for t, task in new if task not in known]
        self.added += [(step, t, task) for t, task in fresh]
        lines = [
            json.dumps({"step": s, "task_type": t, **task.to_dict()}) for s, t, task in self.added
        ]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(line + "\n" for line in lines))
        return len(fresh)


def _proposals(
    buffer: TaskBuffer, rng: random.Random, step: int, per_type: int, k: int
) -> list[Task]:
    """Proposer prompts of every type: K buffer programs as examples (induction: the one
    program to propose inputs for, also the scripted expert's proposal)."""
    tasks = []
    programs = buffer.programs()
    for task_type in TASK_TYPES:
        for j in range(per_type):
            count = 1 if task_type == "induction" else min(k, len(programs))
            references = rng.sample(programs, count)
            task_id = f"az-s{step}-propose-{task_type}-{j}"
            tasks.append(propose_task(task_id, task_type, references, references[0]))
    return tasks


def _solves(buffer: TaskBuffer, rng: random.Random, step: int, per_type: int) -> list[Task]:
    """Solve tasks of every type drawn from the buffer (one input-output pair each)."""
    tasks = []
    for task_type in TASK_TYPES:
        for j in range(per_type):
            code = rng.choice(buffer.solvable(task_type))
            index = rng.randrange(len(code.inputs))
            tasks.append(solve_task(f"az-s{step}-solve-{task_type}-{j}", task_type, code, index))
    return tasks


def _valid_proposal(setup: Any, env: CodeSelfPlayEnv, samples: list, task: Task) -> CodeTask | None:
    """The validated task an episode proposed, None unless the env found it valid."""
    if samples[0].reward != 0.0:  # the env gives exactly 0 to valid proposals only
        return None
    action = setup.fmt.parse(model_answer_text(samples, setup.tokenizer), "stop")
    result = validate_proposal(env.runner, task, action.text, env.timeout_s)
    return result if isinstance(result, CodeTask) else None


def self_play_step(setup: Setup, step: int) -> tuple[Episodes, Episodes, dict[str, float]]:
    """One Absolute Zero step (module docstring): (episodes to train on, episodes generated,
    metrics), like `collect.collect`. The task buffer is RUN_DIR/task_buffer.jsonl."""
    cfg = setup.cfg
    buffer_path = run_dir(cfg) / "task_buffer.jsonl"
    env = make_envs(cfg, 1)[0]
    assert isinstance(env, CodeSelfPlayEnv)
    rng = random.Random(cfg.trainer.seed * 1_000_003 + step)
    seed = cfg.trainer.seed * 100_000 + step
    group, per_type = cfg.rollout.group_size, cfg.rollout.tasks_per_step
    buffer = TaskBuffer.load(buffer_path, step)

    proposals = _proposals(buffer, rng, step, per_type, env.references)
    proposed = rollout(setup, proposals, group, seed, step)
    codes = [
        _valid_proposal(setup, env, samples, task)
        for samples, task in zip(proposed.samples, proposed.tasks, strict=True)
    ]
    keys = [
        (task.fields["task_type"], code)
        for code, task in zip(codes, proposed.tasks, strict=True)
        if code is not None
    ]
    distinct = list(dict.fromkeys(keys))  # each new task is estimated once
    rates: dict[tuple[str, CodeTask], float] = {}
    if distinct:
        probes = [
            solve_task(f"az-s{step}-estimate-{i}", task_type, code)
            for i, (task_type, code) in enumerate(distinct)
        ]
        estimates = rollout(setup, probes, env.solve_samples, seed + _PHASE_SEED, step)
        for key, members in zip(distinct, estimates.groups(), strict=True):
            successes = [estimates.samples[i][0].metrics["success"] for i in members]
            rates[key] = sum(successes) / len(successes)
    learnability = []
    for samples, task, code in zip(proposed.samples, proposed.tasks, codes, strict=True):
        if code is not None:
            reward = learnability_reward(rates[task.fields["task_type"], code])
            learnability.append(reward)
        elif samples[0].reward == 0.0:  # valid in the env, but a re-run disagreed: invalid
            reward = WRONG_BUT_FORMATTED
        else:
            continue
        for sample in samples:
            sample.reward = reward
    added = buffer.add(buffer_path, step, distinct)

    solves = _solves(buffer, rng, step, per_type)
    solved = rollout(setup, solves, group, seed + 2 * _PHASE_SEED, step)
    episodes = Episodes()
    episodes.extend(proposed)
    episodes.extend(solved)
    return episodes, episodes, _metrics(proposed, solved, codes, learnability, buffer, added)


def _metrics(
    proposed: Episodes,
    solved: Episodes,
    codes: list[CodeTask | None],
    learnability: list[float],
    buffer: TaskBuffer,
    added: int,
) -> dict[str, float]:
    n = max(len(codes), 1)
    metrics = {
        "az_valid_proposals": sum(c is not None for c in codes) / n,
        "az_format_errors": sum(s[0].reward == FORMAT_ERROR for s in proposed.samples) / n,
        "az_learnability": sum(learnability) / max(len(learnability), 1),
        "az_new_tasks": float(added),
        "az_buffer_size": float(len(buffer.programs())),
    }
    for task_type in TASK_TYPES:
        rows = [
            samples[0]
            for samples, task in zip(solved.samples, solved.tasks, strict=True)
            if task.fields["task_type"] == task_type
        ]
        solve_rate = sum(r.metrics["success"] for r in rows) / max(len(rows), 1)
        metrics[f"az_solve_rate_{task_type}"] = solve_rate
    return metrics
