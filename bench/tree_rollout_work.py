"""The generator's and the learner's work for a tree rollout against independent episodes,
counted (not timed), as tests/test_bench_guard.py counts work.

B = 2 calculator tasks x G = 6 episodes, 3 turns of 5 sampled tokens each (the random tiny
model never writes a tag: every turn is an invalid action, an error observation and another
turn). Tree arm: rollout.tree roots=2, expansions=2, iterations=1 (2 x (1 + 2) = 6 leaves).
Counted per arm: tokens decoded (a branch's copied prefix counts once, for its parent), prompt
tokens prefilled by the HF generator and prompt tokens whose KV it reused from rows it kept
(an episode's earlier turn; a branch's parent, up to the branch point: backends/kv_store.py,
with room for the 12 episodes as `make_generator` gives a tree rollout), generate calls, and
the tokens of all samples together. Then the learner's forward over
the samples, in the micro-batches its no-grad passes form with model.share_prefix
(learner/update.py: a tree's leaves together, `tree_order`, `micro_batch_bounds`): the tokens
the backbone's linear layers see as plain padded rows, packed with each group's prompt once
(`pack_rows(share_turns=False)`), and packed as a prefix tree, each shared turn once.

    .venv/bin/python bench/tree_rollout_work.py                       # the tiny random model
    .venv/bin/python bench/tree_rollout_work.py --model smollm2-135m \\
        --out bench/results/tree_rollout_work_smollm2.json            # the bundled model

Writes bench/results/tree_rollout_work.json (or --out).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import torch

from agentic_rl.backends.hf import HFGenerator
from agentic_rl.config.rollout import ModelConfig, RolloutConfig, TreeConfig
from agentic_rl.envs.math.calculator import CalculatorEnv, make_calculator_tasks
from agentic_rl.formats.chat import TagFormat
from agentic_rl.learner.batch import collate, micro_batch_bounds, tree_order
from agentic_rl.model.load import load_policy, load_tokenizer, tiny_model
from agentic_rl.model.packing import pack_rows
from agentic_rl.rollout.actors import policy_actor
from agentic_rl.rollout.loop import run_episodes
from agentic_rl.rollout.tree import decoded_tokens, distinct_trajectories, run_tree_episodes
from agentic_rl.types import Trajectory

RESULTS = Path(__file__).resolve().parent / "results" / "tree_rollout_work.json"


def learner_tokens(samples: list[Trajectory], micro_batch_size: int) -> dict[str, int]:
    """Tokens one forward over `samples` runs through the backbone, summed over the
    micro-batches the learner forms with prefix sharing: padded rows (plain), packed with the
    prompt once (prompt_packed), packed as a prefix tree (trie_packed)."""
    batch = collate(samples, 0)
    rows = tree_order(batch, torch.arange(len(batch)))
    trees = batch.tree_ids[rows].tolist() if batch.tree_ids is not None else None
    counts = {"plain": 0, "prompt_packed": 0, "trie_packed": 0}
    for start, end in micro_batch_bounds(len(rows), micro_batch_size, trees):
        mb = batch.select(rows[start:end])
        wanted = (mb.loss_mask > 0) & mb.attention_mask.bool()
        prompt_only = pack_rows(mb.input_ids, mb.attention_mask, wanted, share_turns=False)
        trie = pack_rows(mb.input_ids, mb.attention_mask, wanted)
        assert prompt_only is not None and trie is not None  # collate right-pads
        counts["plain"] += mb.input_ids.numel()
        counts["prompt_packed"] += prompt_only.tokens
        counts["trie_packed"] += trie.tokens
    return counts


def main(argv: list[str] | None = None) -> dict[str, dict[str, int]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny", help="model.name: tiny (default) or a model")
    parser.add_argument("--micro-batch-size", type=int, default=8, help="optim.micro_batch_size")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.model == "tiny":
        tokenizer = load_tokenizer(ModelConfig())
        model = tiny_model(len(tokenizer), seed=0)
    else:
        model, tokenizer = load_policy(ModelConfig(name=args.model))
    tree = TreeConfig(roots=2, expansions=2, iterations=1)
    cfg = RolloutConfig(max_turns=3, max_tokens_per_turn=5, max_total_tokens=400, tree=tree)
    tasks = make_calculator_tasks("train", 2, seed=0)
    expanded = [t for t in tasks for _ in range(6)]
    groups = [f"0:{t.task_id}" for t in expanded]
    fmt = TagFormat(CalculatorEnv().tools)
    arms = {}
    for arm in ("tree", "independent"):
        # as make_generator gives each: a tree rollout's store keeps room for its episodes and
        # lets a branch read its parent's KV cut to the branch point; independent episodes
        # reuse only their own earlier turns
        trees = arm == "tree"
        gen = HFGenerator(
            model,
            tokenizer,
            max_batch_size=64,
            kv_rows=len(expanded) if trees else 0,
            cut_prefixes=trees,
        )
        act = policy_actor(gen, fmt, cfg, seed=1)
        envs = [CalculatorEnv() for _ in expanded]
        if arm == "tree":
            played = run_tree_episodes(envs, expanded, groups, act, fmt, tokenizer, cfg, 0)
            samples = [s for ep in played for s in ep]
        else:
            samples = run_episodes(envs, expanded, groups, act, fmt, tokenizer, cfg, 0)
        forwarded = learner_tokens(samples, args.micro_batch_size)
        arms[arm] = {
            "samples": len(samples),
            "decoded_tokens": sum(decoded_tokens(s) for s in samples),
            "prefill_tokens": gen.prompt_tokens,
            "reused_prompt_tokens": gen.reused_tokens,
            "generate_calls": gen.calls,
            "sample_tokens": sum(len(s.token_ids) for s in samples),
            "distinct_trajectories": distinct_trajectories(samples),
            **{f"learner_tokens_{form}": n for form, n in forwarded.items()},
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "command": " ".join([Path(sys.executable).name, *sys.argv]),
                "model": "tiny (2-layer random Llama, bundled vocabulary)"
                if args.model == "tiny"
                else args.model,
                "setup": "2 calculator tasks x 6, 3 turns x 5 tokens; tree 2 x (1 + 1 x 2); "
                f"learner micro-batches of {args.micro_batch_size}",
                "machine": platform.platform(),
                "seeds": {"model": 0, "tasks": 0, "sampling": 1},
                "arms": arms,
            },
            indent=1,
        )
        + "\n"
    )
    print(json.dumps(arms, indent=1))
    return arms


if __name__ == "__main__":
    main()
