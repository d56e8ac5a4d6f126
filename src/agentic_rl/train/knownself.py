"""KnownSelf (Qiao et al. 2025, "Agentic Knowledgeable Self-awareness"): the agent learns when
to act at once (fast thinking), when to reflect first (slow thinking) and when to consult
knowledge (knowledgeable thinking), from where the model itself fails.

1. Labelling (`labelling_actor`): the env's scripted expert is replayed step by step; at each
   gold step the model (greedy) proposes an action in the same context.
   - it matches the gold action: **fast**, the step is the gold action alone;
   - it does not, but after `[Reflection]<reflection>` the model's own reflection leads it to
     the gold action: **slow**, the step is that reflection, then the gold action;
   - the reflection fails too: **knowledgeable**, the step consults the env's knowledge tool
     (`[Knowledge]<knowledge>help</knowledge>`; the env answers with a "When ..., the agent
     should ..." rule, inserted with loss mask 0) and then takes the gold action.
   The labelled episodes are played through the ordinary rollout loop, so they are
   token-native trajectories in exactly the contexts the agent will act in.
2. SFT on the labelled trajectories (train/sft.py, the agent's tokens only).
3. DPO pairs: the SFT model plays the labelled tasks (sampled at rollout.temperature); each
   failed episode is the rejected side of a pair whose chosen side is the task's labelled gold
   trajectory (same prompt). DPO (train/dpo.py) with KnownSelf's extra NLL on the chosen
   trajectory (`knownself.nll_coef`, algos/knownself.py), beta from `dpo.beta` (paper: 0.5).
4. Greedy evaluation on the held-out tasks before, after SFT and after DPO.

Differences from the paper: the knowledge rule comes from a tool the agent calls (the paper
writes the selected rule into the agent's own text); KnownSelf adds six special tokens, here
the markers are plain text; the model's own reflection is the only reflection tried (the paper
can also use a stronger model's). An env qualifies when it has a scripted expert
(`expert_turn`) and a tool named "knowledge" (Blocksworld with `knowledge: true`).
"""

from __future__ import annotations

import copy
import json
import random
import time
from collections import Counter
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

from agentic_rl.backends.base import sync_weights
from agentic_rl.checkpoint.export import save_model
from agentic_rl.config.parse import ConfigError
from agentic_rl.config.schema import Config
from agentic_rl.envs.base import has_expert
from agentic_rl.envs.discrete import parse_action, split_actions
from agentic_rl.envs.from_config import make_envs
from agentic_rl.formats.chat import TagFormat
from agentic_rl.model.tokens import encode_text
from agentic_rl.rollout.actors import Actor, expert_actor, policy_actor
from agentic_rl.rollout.episode import Episode
from agentic_rl.train.collect import evaluate, play
from agentic_rl.train.dpo import dpo_from_config
from agentic_rl.train.setup import Setup, build, run_dir
from agentic_rl.train.sft import load_trajectories, save_trajectories, warm_start_sft
from agentic_rl.types import Action, Completion, SamplingParams, Task, Trajectory

FAST, SLOW, KNOWLEDGEABLE = "fast", "slow", "knowledgeable"
REFLECTION_OPEN, REFLECTION_CLOSE = "[Reflection]<reflection>", "</reflection>"
KNOWLEDGE_CALL = "[Knowledge]<knowledge>help</knowledge>"
KNOWLEDGE_TOOL = "knowledge"
LABELLED_FILE = "labelled.jsonl"


def check_knownself_env(env: Any) -> None:
    """KnownSelf needs a scripted expert and a knowledge tool; a clear error otherwise."""
    if not has_expert(env):
        raise ConfigError(f"knownself: env {type(env).__name__} has no scripted expert")
    if not any(getattr(t, "name", "") == KNOWLEDGE_TOOL for t in env.tools):
        raise ConfigError(
            f"knownself: env {type(env).__name__} has no '{KNOWLEDGE_TOOL}' tool (for "
            "Blocksworld set env.options.knowledge=true)"
        )


def action_key(env: Any, action: Action) -> Hashable:
    """What makes two actions the same: the parsed action indices for envs with named actions,
    else the tool name and its arguments."""
    if action.kind != "tool":
        return (action.kind, (action.text or "").strip().lower())
    names = getattr(env, "action_names", None)
    if names is not None and action.name == "action":
        tokens = split_actions(str(action.arguments.get("actions", "")))
        return tuple(parse_action(t, names, getattr(env, "index_base", 0)) for t in tokens)
    return (action.name, json.dumps(action.arguments, sort_keys=True).lower())


def labelling_actor(
    setup: Setup, labels: list[dict[str, Any]], reflect_tokens: int, action_tokens: int = 32
) -> Actor:
    """The labelling episode's turns (module docstring, step 1); each gold step's label is
    appended to `labels` as {"task_id", "step", "label"}."""
    fmt, tokenizer, generator = setup.fmt, setup.tokenizer, setup.generator
    parsers: dict[int, TagFormat] = {}
    pending: dict[int, str] = {}  # episode -> the gold action after its knowledge call
    steps: Counter[int] = Counter()

    def greedy(prompts: list[list[int]], budget: int, stop: list[str]) -> list[Completion]:
        if not prompts:
            return []
        params = SamplingParams(max_new_tokens=budget, temperature=0.0, stop=stop)
        return generator.generate(prompts, [params] * len(prompts))

    def act(episodes: list[Episode], budgets: list[int], turn: int) -> list[Completion]:
        texts: dict[int, str] = {}
        gold: dict[int, tuple[str, Hashable]] = {}
        for ep in episodes:
            if id(ep) in pending:
                texts[id(ep)] = pending.pop(id(ep))
                continue
            parser = parsers.setdefault(id(ep.env), TagFormat(ep.env.tools))
            action = parser.parse(ep.env.expert_turn(), "stop")
            gold[id(ep)] = (fmt.render_action(action), action_key(ep.env, action))
        asking = [ep for ep in episodes if id(ep) in gold]
        budget = min(max(budgets), action_tokens)

        def matches(ep: Episode, completion: Completion) -> bool:
            proposed = fmt.parse(completion.text, completion.finish_reason)
            return action_key(ep.env, proposed) == gold[id(ep)][1]

        proposals = greedy([ep.token_ids for ep in asking], budget, list(fmt.stop))
        wrong = [ep for ep, c in zip(asking, proposals, strict=True) if not matches(ep, c)]
        opened = [ep.token_ids + encode_text(tokenizer, REFLECTION_OPEN) for ep in wrong]
        reflections = greedy(opened, reflect_tokens, [REFLECTION_CLOSE])
        thoughts = [r.text.split(REFLECTION_CLOSE)[0].strip() for r in reflections]
        retried = greedy(
            [
                ids + encode_text(tokenizer, f"{t}{REFLECTION_CLOSE}")
                for ids, t in zip(opened, thoughts, strict=True)
            ],
            budget,
            list(fmt.stop),
        )
        recovered = {
            id(ep): thought
            for ep, thought, c in zip(wrong, thoughts, retried, strict=True)
            if thought and matches(ep, c)
        }
        wrong_ids = {id(ep) for ep in wrong}
        for ep in asking:
            text = gold[id(ep)][0]
            if id(ep) not in wrong_ids:
                label = FAST
            elif id(ep) in recovered:
                label = SLOW
                text = f"{REFLECTION_OPEN}{recovered[id(ep)]}{REFLECTION_CLOSE}{text}"
            else:
                label = KNOWLEDGEABLE
                pending[id(ep)] = text
                text = KNOWLEDGE_CALL
            texts[id(ep)] = text
            labels.append({"task_id": ep.task.task_id, "step": steps[id(ep)], "label": label})
            steps[id(ep)] += 1
        out = []
        for ep, limit in zip(episodes, budgets, strict=True):
            ids = encode_text(tokenizer, texts[id(ep)])[: max(limit, 1)]
            out.append(Completion(ids, [0.0] * len(ids), "stop", texts[id(ep)]))
        return out

    return act


def label_tasks(
    setup: Setup, tasks: list[Task], reflect_tokens: int, action_tokens: int = 32
) -> tuple[dict[str, Trajectory], list[dict[str, Any]]]:
    """Labelled gold trajectories of `tasks` (successful ones, by task id) and every label."""
    labels: list[dict[str, Any]] = []
    act = labelling_actor(setup, labels, reflect_tokens, action_tokens)
    groups = [f"knownself:{t.task_id}" for t in tasks]
    episodes = play(setup, tasks, groups, act, seed=0)
    gold = {
        task.task_id: samples[0]
        for task, samples in zip(tasks, episodes, strict=True)
        if samples[0].metrics["success"] >= 1.0
    }
    return gold, labels


def build_pairs(
    gold: dict[str, Trajectory], played: list[Trajectory]
) -> list[tuple[Trajectory, Trajectory]]:
    """(chosen = the task's labelled gold trajectory, rejected = a failed played episode of the
    same task): KnownSelf's DPO pairs. Successful episodes and tasks without gold give none."""
    return [
        (gold[t.task_id], t) for t in played if t.metrics["success"] < 1.0 and t.task_id in gold
    ]


def supervised(setup: Setup, trajectories: list[Trajectory]) -> dict[str, float]:
    """SFT of the policy on `trajectories` with the warm_start settings."""
    result = warm_start_sft(setup.cfg, setup.policy, trajectories, setup.tokenizer.pad_token_id)
    sync_weights(setup.generator, setup.policy)
    return result


def sft_only(setup: Setup, tasks: list[Task]) -> tuple[dict[str, float], dict[str, float]]:
    """The SFT-only baseline: SFT on the plain expert trajectories of `tasks`, evaluated; then
    the starting weights are put back. Returns (SFT result, eval)."""
    start = copy.deepcopy(setup.policy.state_dict())
    act = expert_actor(setup.fmt, setup.tokenizer)
    played = play(setup, tasks, [f"expert:{t.task_id}" for t in tasks], act, seed=0)
    demos = [s[0] for s in played if s[0].metrics["success"] >= 1.0]
    if not demos:
        raise RuntimeError("knownself: the expert solved none of the tasks")
    result = supervised(setup, demos)
    evaluation = evaluate(setup)
    setup.policy.load_state_dict(start)
    sync_weights(setup.generator, setup.policy)
    return result, evaluation


def labelled_path(cfg: Config) -> Path:
    """Where phase "dpo" reads the labelled trajectories (see `knownself.labelled_file`)."""
    if cfg.knownself.labelled_file:
        return Path(cfg.knownself.labelled_file)
    return Path(cfg.model.name).parent / LABELLED_FILE


def train_knownself(cfg: Config) -> dict[str, Any]:
    """KnownSelf (module docstring), all phases or one (`knownself.phase`). Progress is
    rewritten to RUN_DIR/progress.json after every phase (a run stopped by a time limit keeps
    what it measured); RUN_DIR/summary.json marks the run (or stage) finished."""
    start = time.time()
    k = cfg.knownself
    setup = build(cfg)
    check_knownself_env(make_envs(cfg, 1)[0])
    out = run_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2))
    evals: dict[str, dict[str, float]] = {}
    summary: dict[str, Any] = {"recipe": cfg.recipe, "phase": k.phase, "evals": evals}

    def record(phase: str, **values: Any) -> None:
        summary.update(values, seconds=time.time() - start)
        if phase in evals:
            print(f"eval {phase}: success {evals[phase]['success']:.3f}", flush=True)
        (out / "progress.json").write_text(json.dumps(summary, indent=2))

    if cfg.trainer.eval_before and cfg.trainer.eval_untrained:
        evals["before"] = evaluate(setup)
        record("before")
    if k.phase == "sft_only":
        rng = random.Random(cfg.trainer.seed + 29)
        tasks = rng.sample(setup.train_tasks, min(k.num_tasks, len(setup.train_tasks)))
        baseline, evals["sft_only"] = sft_only(setup, tasks)
        record("sft_only", sft_only=baseline)
        gold = {}
    elif k.phase in ("all", "sft"):
        gold = _label_and_sft(setup, evals, record, out)
    else:
        path = labelled_path(cfg)
        if not path.exists():
            raise ConfigError(f"knownself.phase=dpo: no labelled trajectories at {path}")
        gold = {t.task_id: t for t in load_trajectories(path, setup.tokenizer)}
    if k.phase in ("all", "dpo"):
        _pairs_and_dpo(setup, gold, evals, record)
    if cfg.trainer.export_model:
        save_model(setup.policy, setup.tokenizer, out)
    record("done")
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


Record = Callable[..., None]


def _label_and_sft(
    setup: Setup, evals: dict[str, Any], record: Record, out: Path
) -> dict[str, Trajectory]:
    """Steps 1-2 (and the SFT-only baseline): the labelled gold trajectories by task id."""
    cfg, k = setup.cfg, setup.cfg.knownself
    rng = random.Random(cfg.trainer.seed + 29)
    tasks = rng.sample(setup.train_tasks, min(k.num_tasks, len(setup.train_tasks)))
    if k.sft_only_baseline:
        baseline, evals["sft_only"] = sft_only(setup, tasks)
        record("sft_only", sft_only=baseline)
    gold, labels = label_tasks(setup, tasks, k.reflect_tokens, k.action_tokens)
    counts = Counter(label["label"] for label in labels)
    print(f"labelled {len(gold)} of {len(tasks)} tasks: {dict(counts)}", flush=True)
    (out / "labels.jsonl").write_text("".join(json.dumps(x) + "\n" for x in labels))
    if not gold:
        raise RuntimeError("knownself: no labelled episode succeeded; nothing to train on")
    trained = list(gold.values())[: k.sft_tasks or None]
    held_back = list(gold.values())[len(trained) :]
    # held-back tasks first: the DPO stage plays the labelled tasks in this order
    gold = {t.task_id: t for t in held_back + trained}
    save_trajectories(out / LABELLED_FILE, list(gold.values()))
    record(
        "labels",
        labels=dict(counts),
        labelled_tasks=len(gold),
        held_back=len(held_back),
        sft_task_ids=[t.task_id for t in trained],
    )
    sft = supervised(setup, trained)
    evals["sft"] = evaluate(setup)
    record("sft", sft=sft)
    return gold


def _pairs_and_dpo(
    setup: Setup, gold: dict[str, Trajectory], evals: dict[str, Any], record: Record
) -> None:
    """Steps 3-4: the model plays the labelled tasks (in `gold`'s order: those held back from
    SFT first), failures become DPO pairs, DPO + NLL."""
    cfg, k = setup.cfg, setup.cfg.knownself
    by_id = {t.task_id: t for t in setup.train_tasks}
    pair_tasks = [by_id[task_id] for task_id in gold if task_id in by_id][: k.pair_tasks]
    act = policy_actor(
        setup.generator, setup.fmt, cfg.rollout, seed=cfg.trainer.seed, tokenizer=setup.tokenizer
    )
    played = play(setup, pair_tasks, [f"pairs:{t.task_id}" for t in pair_tasks], act, seed=1)
    pairs = build_pairs(gold, [samples[0] for samples in played])
    print(f"{len(pairs)} DPO pairs from {len(pair_tasks)} played tasks", flush=True)
    record("pairs", pairs=len(pairs), played=len(pair_tasks), dpo={})
    if not pairs:
        print(
            "DPO skipped: the SFT model solved every pair task, so no failed episode pairs "
            "with a gold one (more knownself.pair_tasks, or harder tasks, give failures)",
            flush=True,
        )
        return
    dpo = dpo_from_config(
        cfg, setup.policy, pairs, setup.tokenizer.pad_token_id, nll_coef=k.nll_coef
    )
    sync_weights(setup.generator, setup.policy)
    evals["dpo"] = evaluate(setup)
    record("dpo", dpo=dpo)
