"""Memory agents on CPU with the bundled model: MemAgent's reader against the long-context
baselines (accuracy, tokens processed and wall time against document length).

MemAgent part (`memagent`): the same held-out RULER-HotpotQA-like questions
(envs/memory/long_qa.py) at each document length, read three ways with greedy decoding:
- memagent: sections of `chunk_tokens` into an overwritten memory of `memory_tokens`, then the
  answer from problem + memory (rollout/memory.py);
- full: the whole document in one prompt, only where it fits SmolLM2's 8K window;
- truncate: the head of the document that fits the window.
`--timing` reads one document per length with MemAgent only and records the tokens through the
model and the wall time (linear in the length: every conversation has the same size).

    .venv/bin/python bench/memory_agents.py memagent --model RUN/model           # accuracy
    .venv/bin/python bench/memory_agents.py memagent --model RUN/model --timing 2048 8192 32768
    .venv/bin/python bench/memory_agents.py memagent --smoke                     # tiny model

Results merge into bench/results/memory_memagent.json (unless --smoke); a markdown table is
printed.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from agentic_rl.config.load import load_config
from agentic_rl.envs.memory.long_qa import make_long_qa_tasks
from agentic_rl.envs.memory.memagent import MemAgentEnv
from agentic_rl.rollout.actors import policy_actor
from agentic_rl.rollout.memory import MemoryContextError, run_memory_episodes
from agentic_rl.train.setup import build

RESULTS = Path(__file__).resolve().parent / "results"


def _mean(values: list[float]) -> float:
    return sum(values) / max(len(values), 1)


def read(
    setup: Any, tasks: list, reader: str, options: dict[str, Any], batch: int
) -> dict[str, Any]:
    """Greedy episodes of `tasks` with `reader`; accuracy, cost and wall time. `setup` None =
    the scripted reader (no model: the framework's own cost and the token counts)."""
    if setup is None:
        from agentic_rl.config.rollout import ModelConfig, RolloutConfig
        from agentic_rl.formats.chat import TagFormat
        from agentic_rl.model.load import load_tokenizer
        from agentic_rl.rollout.actors import expert_actor

        tokenizer = load_tokenizer(ModelConfig())
        fmt = TagFormat([])
        setup = SimpleNamespace(
            cfg=SimpleNamespace(rollout=RolloutConfig(max_tokens_per_turn=16)),
            fmt=fmt,
            tokenizer=tokenizer,
        )
        act = expert_actor(fmt, tokenizer)
    else:
        act = policy_actor(
            setup.generator,
            setup.fmt,
            setup.cfg.rollout,
            seed=0,
            greedy=True,
            tokenizer=setup.tokenizer,
        )
    cfg = setup.cfg
    kwargs = {k: options[k] for k in ("chunk_tokens", "memory_tokens", "context_tokens")}
    finals = []
    start = time.perf_counter()
    for i in range(0, len(tasks), batch):
        chunk = tasks[i : i + batch]
        envs = [MemAgentEnv(reader=reader, **kwargs) for _ in chunk]
        groups = [f"eval:{t.task_id}" for t in chunk]
        try:
            episodes = run_memory_episodes(
                envs, chunk, groups, act, setup.fmt, setup.tokenizer, cfg.rollout, seed=0
            )
        except MemoryContextError as err:
            return {"reader": reader, "fits": False, "why": str(err)}
        finals += [ep[-1] for ep in episodes]
    wall = time.perf_counter() - start
    m = lambda key: _mean([s.metrics[key] for s in finals])  # noqa: E731
    return {
        "reader": reader,
        "fits": True,
        "tasks": len(finals),
        "accuracy": _mean([s.reward for s in finals]),
        "document_tokens": m("document_tokens"),
        "tokens_processed": m("tokens_processed"),
        "conversations": m("conversations"),
        "memory_truncated_per_episode": m("memory_truncated"),
        "invalid_answers": m("invalid_actions"),
        "wall_s": wall,
        "wall_s_per_episode": wall / max(len(finals), 1),
        "answers": [s.completion_text for s in finals[:3]],
    }


def memagent(args: argparse.Namespace) -> dict[str, Any]:
    model = "tiny" if args.model == "scripted" else args.model
    overrides = [f"model.name={model}", "trainer.progress=false", *args.override]
    cfg = load_config("memagent", overrides, smoke=args.smoke)
    torch.set_num_threads(args.threads)
    setup = None if args.model == "scripted" else build(cfg)
    options = {"context_tokens": 8192, **cfg.env.options}
    if args.chunk_tokens:
        options["chunk_tokens"] = args.chunk_tokens
    out: dict[str, Any] = {
        "model": args.model,
        "hops": args.hops,
        "chunk_tokens": options["chunk_tokens"],
        "memory_tokens": options["memory_tokens"],
        "context_tokens": options["context_tokens"],
        "answer_tokens": cfg.rollout.max_tokens_per_turn,
        "threads": args.threads,
    }
    deadline = time.perf_counter() + args.max_minutes * 60
    rows = []
    for length in args.lengths:
        tasks = make_long_qa_tasks(
            "eval", args.tasks, seed=args.seed, doc_tokens=length, hops=args.hops
        )
        for reader in args.readers:
            if time.perf_counter() > deadline:
                rows.append({"length": length, "reader": reader, "fits": False, "why": "time"})
                continue
            full = next((r for r in rows if r["length"] == length and r["reader"] == "full"), None)
            if reader == "truncate" and full is not None and full["fits"]:
                # the whole document fits: truncation keeps all of it, the same prompt as "full"
                rows.append({**full, "reader": reader, "same_as": "full"})
                continue
            batch = args.tasks if reader == "memagent" else args.full_batch
            row = read(setup, tasks, reader, options, batch)
            row["length"] = length
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "answers"}), flush=True)
    if rows:
        out["accuracy"] = rows
    timing = []
    for length in args.timing:  # one document per length, MemAgent only
        if time.perf_counter() > deadline:
            break
        tasks = make_long_qa_tasks("eval", 1, seed=args.seed + 7, doc_tokens=length)
        row = read(setup, tasks, "memagent", options, 1)
        row["length"] = length
        timing.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "answers"}), flush=True)
    if timing:
        out["timing"] = timing
    return out


def memory_r1(args: argparse.Namespace) -> dict[str, Any]:
    """Exact match / F1 of the frozen answer agent on held-out dialogues, with the bank managed
    by: every fact ADDed (append-everything), the scripted manager, and - given `--model` (a
    trained manager, e.g. the exported memory_r1 run) - the model, greedy."""
    from agentic_rl.config.rollout import RolloutConfig
    from agentic_rl.envs.memory.dialogues import make_dialogue_tasks
    from agentic_rl.envs.memory.memory_r1 import MemoryR1Env
    from agentic_rl.formats.chat import TagFormat
    from agentic_rl.model.load import load_tokenizer
    from agentic_rl.rollout.actors import expert_actor

    tasks = make_dialogue_tasks(
        "eval", args.tasks, seed=args.seed, sessions=args.sessions, changes_per_session=2
    )
    fmt = TagFormat([])
    rollout = RolloutConfig(max_tokens_per_turn=40, max_turns=16)
    managers: dict[str, Any] = {}
    tokenizer = None
    if args.model != "none":
        options = f"env.options.sessions={args.sessions}"
        cfg = load_config("memory_r1", [f"model.name={args.model}", options, *args.override])
        setup = build(cfg)
        tokenizer = setup.tokenizer
        managers["model"] = policy_actor(
            setup.generator, setup.fmt, cfg.rollout, seed=0, greedy=True, tokenizer=tokenizer
        )
    else:
        from agentic_rl.config.rollout import ModelConfig

        tokenizer = load_tokenizer(ModelConfig())
    managers = {"append_everything": None, "scripted": expert_actor(fmt, tokenizer), **managers}
    out: dict[str, Any] = {"tasks": len(tasks), "sessions": args.sessions, "model": args.model}
    for name, act in managers.items():
        envs = [MemoryR1Env(append_only=act is None) for _ in tasks]
        start = time.perf_counter()
        run_memory_episodes(
            envs,
            tasks,
            [t.task_id for t in tasks],
            act or expert_actor(fmt, tokenizer),
            fmt,
            tokenizer,
            rollout,
            seed=0,
        )
        ops: dict[str, int] = {}
        for env in envs:
            for key, value in env.ops.items():
                ops[key] = ops.get(key, 0) + value
        out[name] = {
            "em": _mean([env.scores["em"] for env in envs]),
            "f1": _mean([env.scores["f1"] for env in envs]),
            "ops": ops,
            "wall_s": time.perf_counter() - start,
        }
        print(name, json.dumps(out[name]), flush=True)
    return out


def warm_start_profile(args: argparse.Namespace) -> dict[str, Any]:
    """Where Memory-R1's warm start spends its time: the scripted manager's demos (no
    generation: one conversation per fact), their token counts, and the seconds per SFT step
    (batch 8, one micro-batch) in float32 / bf16 compute, each with and without running the
    instructions all rows share once (model.share_prefix in the warm start)."""
    import copy

    from agentic_rl.train.collect import expert_demos
    from agentic_rl.train.sft import train_sft

    overrides = [f"model.name={args.model}", f"env.options.sessions={args.sessions}"]
    cfg = load_config("memory_r1", [*overrides, "trainer.progress=false", *args.override])
    torch.set_num_threads(args.threads)
    setup = build(cfg)
    start = time.perf_counter()
    demos, episodes = expert_demos(setup, args.tasks)
    lengths = [len(t.token_ids) for t in demos]
    trained = [sum(t.loss_mask) for t in demos]
    out: dict[str, Any] = {
        "dialogues": episodes,
        "sessions": args.sessions,
        "demos": len(demos),
        "demo_seconds": time.perf_counter() - start,
        "tokens_per_demo": _mean(lengths),
        "trained_tokens_per_demo": _mean(trained),
        "steps": [],
    }
    batch = demos[: 8 * args.passes]
    pad = setup.tokenizer.pad_token_id
    for precision in ("no", "bf16"):
        for share in (False, True):
            model = copy.deepcopy(setup.policy)
            start = time.perf_counter()
            train_sft(
                model, batch, pad, batch_size=8, mixed_precision=precision, share_prefix=share
            )
            row = {
                "precision": precision,
                "share_prefix": share,
                "s_per_step": (time.perf_counter() - start) / args.passes,
            }
            out["steps"].append(row)
            print(json.dumps(row), flush=True)
    print(json.dumps({k: v for k, v in out.items() if k != "steps"}), flush=True)
    return out


def rmm(args: argparse.Namespace) -> dict[str, Any]:
    """Recall@k of the needed memory on held-out people's questions, before and after the
    reranker's online updates from the frozen extractive answerer's citations."""
    from agentic_rl.envs.memory.rmm import MemoryWorld, online_reflection

    world = MemoryWorld(num_people=args.people, seed=args.seed, merge_threshold=0.4)
    held_out, train = world.questions["eval"], world.questions["train"]
    ks = (1, 2, 4)
    out: dict[str, Any] = {
        "people": args.people,
        "memories": len(world.memories),
        "merges": world.merges,
        "train_questions": len(train),
        "eval_questions": len(held_out),
        "before": {f"recall@{k}": world.recall_at(held_out, k) for k in ks},
    }
    curve = []
    for p in range(1, args.passes + 1):
        stats = online_reflection(world, train, passes=1, seed=args.seed + p)
        curve.append({"pass": p, **stats, "recall@2": world.recall_at(held_out, 2)})
    out["after"] = {f"recall@{k}": world.recall_at(held_out, k) for k in ks}
    out["train_recall"] = {f"recall@{k}": world.recall_at(train, k) for k in ks}
    out["curve"] = curve
    print(json.dumps(out, indent=1))
    return out


def table(result: dict[str, Any]) -> str:
    lines: list[str] = []
    if "accuracy" in result:
        lines += ["| length | reader | accuracy | tokens processed | wall s / episode |"]
        lines += ["|---|---|---|---|---|"]
        for r in result["accuracy"]:
            if not r["fits"]:
                lines.append(f"| {r['length']} | {r['reader']} | does not fit | - | - |")
                continue
            reader = f"{r['reader']} (= {r['same_as']})" if r.get("same_as") else r["reader"]
            lines.append(
                f"| {r['length']} | {reader} | {r['accuracy']:.2f} | "
                f"{r['tokens_processed']:.0f} | {r['wall_s_per_episode']:.1f} |"
            )
    if "timing" in result:
        lines += ["| length | document tokens | tokens processed | wall s | s per 1K doc tokens |"]
        lines += ["|---|---|---|---|---|"]
        for r in result["timing"]:
            per = r["wall_s"] / (r["document_tokens"] / 1000)
            lines.append(
                f"| {r['length']} | {r['document_tokens']:.0f} | {r['tokens_processed']:.0f} | "
                f"{r['wall_s']:.1f} | {per:.2f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("system", choices=["memagent", "memory_r1", "rmm", "warm_start"])
    parser.add_argument("--model", default="smollm2-135m", help="'scripted': no model")
    parser.add_argument("--lengths", type=int, nargs="*", default=[512, 1024, 2048, 4096, 8192])
    parser.add_argument("--readers", nargs="+", default=["memagent", "full", "truncate"])
    parser.add_argument("--tasks", type=int, default=12, help="questions per length")
    parser.add_argument("--full-batch", type=int, default=2, help="baseline prompts per batch")
    parser.add_argument("--timing", type=int, nargs="*", default=[], help="lengths to time")
    parser.add_argument("--chunk-tokens", type=int, default=0, help="0 = the recipe's")
    parser.add_argument("--hops", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-minutes", type=float, default=11.0, help="memagent wall budget")
    parser.add_argument("--sessions", type=int, default=3, help="memory_r1: dialogue sessions")
    parser.add_argument("--people", type=int, default=60, help="rmm: people in the bank")
    parser.add_argument(
        "--passes", type=int, default=3, help="rmm: online passes; warm_start: steps"
    )
    parser.add_argument("--smoke", action="store_true", help="tiny model, small lengths")
    parser.add_argument("--tag", default="", help="key of this run in the results file")
    parser.add_argument("override", nargs="*", help="dotted recipe overrides")
    args = parser.parse_intermixed_args()  # overrides may follow the options
    if args.smoke:
        args.model, args.tasks, args.people, args.passes = "tiny", 2, 20, 1
        args.lengths, args.timing = [256, 512], [256] if args.timing else []
    systems = {"memagent": memagent, "memory_r1": memory_r1, "rmm": rmm}
    result = {**systems, "warm_start": warm_start_profile}[args.system](args)
    if args.system == "memagent":
        print(table(result))
    if args.smoke:
        return
    name = "memory_r1" if args.system == "warm_start" else args.system
    path = RESULTS / f"memory_{name}.json"
    merged = json.loads(path.read_text()) if path.exists() else {}
    key = args.tag or "result"
    merged[key] = result
    path.write_text(json.dumps(merged, indent=2) + "\n")
    print(f"wrote {path} [{key}]")


if __name__ == "__main__":
    main()
