"""Fixtures for recipe tests: a scripted policy and a check that sandboxes leave nothing behind.

`scripted(script)` replaces the policy in trainer rollouts (training and evaluation) with
`script(episode, index, turn) -> text`, where `index` numbers the episodes of a group in the
order the rollout started them; the text is tokenised like a sampled turn (logprob -1 each).
Tests then build, collect and prepare batches with the real trainer code.

`expert_or_give_up_run(recipe, overrides)` trains a text-game recipe (expert warm start, then
step-wise GiGPO) with the expert against a quitter, as the ALFWorld, ScienceWorld and
TextWorldExpress recipe tests do.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from strays import no_strays

from agentic_rl.cli import main
from agentic_rl.logging import read_metrics
from agentic_rl.model.tokens import encode_text
from agentic_rl.rollout.actors import Actor
from agentic_rl.rollout.episode import Episode
from agentic_rl.tools.sandbox import shared
from agentic_rl.train import collect
from agentic_rl.types import Completion

Script = Callable[[Episode, int, int], str]


def scripted_actor(script: Script, tokenizer: Any) -> Actor:
    """An Actor playing `script` (see the module docstring)."""
    started: dict[str, list[Episode]] = {}

    def index_of(ep: Episode) -> int:
        group = started.setdefault(ep.group_id, [])
        for i, other in enumerate(group):
            if other is ep:
                return i
        group.append(ep)
        return len(group) - 1

    def act(episodes: list[Episode], budgets: list[int], turn: int) -> list[Completion]:
        out = []
        for ep, budget in zip(episodes, budgets, strict=True):
            text = script(ep, index_of(ep), turn)
            ids = encode_text(tokenizer, text)
            assert len(ids) <= budget, f"scripted turn of {len(ids)} tokens > budget {budget}"
            out.append(Completion(ids, [-1.0] * len(ids), "stop", text))
        return out

    return act


@pytest.fixture
def scripted(monkeypatch, tokenizer) -> Callable[[Script], Actor]:
    def install(script: Script) -> Actor:
        actor = scripted_actor(script, tokenizer)
        monkeypatch.setattr(collect, "policy_actor", lambda *args, **kwargs: actor)
        return actor

    return install


@pytest.fixture
def warm_start_episodes() -> Callable[[Any], float]:
    """`warm_start_episodes(run_dir)`: the successful expert episodes a run's warm start used."""

    def read(run: Any) -> float:
        rows = [r for r in read_metrics(run / "metrics.jsonl") if "warm_start/episodes" in r]
        assert len(rows) == 1, rows
        return rows[0]["warm_start/episodes"]

    return read


def expert_or_give_up(ep: Episode, index: int, turn: int) -> str:
    """Evaluation episodes and episode 0 of each training group play the env's expert (the
    walkthrough, the gold path); the other training episodes give up at once (an answer ends
    the episode with reward 0) from the group's shared start state."""
    if ep.group_id.startswith("eval:") or index == 0:
        return ep.env.expert_turn()
    return "<answer>give up</answer>"


@pytest.fixture
def expert_or_give_up_run(
    tmp_path: Path, scripted: Callable[[Script], Actor], warm_start_episodes: Callable[[Any], float]
) -> Callable[[str, list[str]], dict[str, Any]]:
    """`expert_or_give_up_run(recipe, overrides)`: train `recipe` with `--smoke` and the
    overrides into tmp_path/run, the episodes scripted by `expert_or_give_up`; check that the
    warm start used expert episodes and that GiGPO trained step-wise samples whose group shares
    its start state (the expert and the quitter part there); return the run's summary.json."""

    def run(recipe: str, overrides: list[str]) -> dict[str, Any]:
        scripted(expert_or_give_up)
        out = [f"trainer.out_dir={tmp_path}", "trainer.run_name=run"]
        assert main(["train", recipe, *overrides, *out, "--smoke"]) == 0
        run_dir = tmp_path / "run"
        assert warm_start_episodes(run_dir) > 0
        rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if "train/reward" in r]
        assert rows and all(r["train/samples"] > r["train/episodes"] for r in rows)  # step-wise
        assert all(r["train/shared_step_groups"] > 0 for r in rows)  # the shared start state
        return json.loads((run_dir / "summary.json").read_text())

    return run


@pytest.fixture
def no_stray_processes():
    """After the test: close the process-wide sandbox pools the recipe's envs started, then
    require that no process the test started and none running as a sandbox uid is left
    (tests/strays.py: processes that lived before the test, e.g. a session-wide math verifier
    or a browser an earlier test holds, and whatever they start meanwhile, are not the
    test's)."""

    def cleanup() -> set[int]:
        uids = {uid for pool in list(shared._pools.values()) for uid in pool.sandbox_uids()}
        shared.close_shared_pools()
        return uids

    with no_strays(cleanup):
        yield
