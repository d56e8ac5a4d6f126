"""bench/tree_rollout_work.py on the tiny model: the learner's tokens forwarded per form, the
prefix tree forwarding each shared token once, and independent episodes packing as before."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import torch

from agentic_rl.learner.batch import collate
from agentic_rl.types import Trajectory, TreePosition

SPEC = importlib.util.spec_from_file_location(
    "tree_rollout_work", Path(__file__).resolve().parent.parent / "bench" / "tree_rollout_work.py"
)
assert SPEC is not None and SPEC.loader is not None
bench = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench)


def _leaf(ids: list[int], tree: str, group: str = "g") -> Trajectory:
    mask = [0] * 10 + [1] * (len(ids) - 10)
    return Trajectory(
        ids, mask, [0.0] * len(ids), prompt_length=10, group_id=group,
        tree=TreePosition(tree_id=tree, leaf=0),
    )  # fmt: skip


def test_learner_tokens_by_hand() -> None:
    """One tree: a root chain of 10 prompt + 30 tokens and a branch that copies its first
    22 and adds 5; another tree of the same task: 10 prompt + 12. Micro-batches of 2: the
    trees apart, (2 x 40) + (1 x 40) padded tokens; prompt once per micro-batch:
    (10 + 30 + 17) + (10 + 12); the prefix tree: (10 + 12 + 18 + 5) + 22."""
    prompt = list(range(1, 11))
    root = prompt + list(range(100, 130))
    branch = root[:22] + list(range(200, 205))
    other = prompt + list(range(300, 312))
    samples = [_leaf(root, "t0"), _leaf(other, "t1"), _leaf(branch, "t0")]
    assert collate(samples, 0).input_ids.shape == (3, 40)
    counts = bench.learner_tokens(samples, micro_batch_size=2)
    assert counts == {"plain": 120, "prompt_packed": 57 + 22, "trie_packed": 45 + 22}


def test_the_bench_on_the_tiny_model(tmp_path) -> None:
    out = tmp_path / "work.json"
    arms = bench.main(["--out", str(out)])
    assert json.loads(out.read_text())["arms"] == arms
    tree, independent = arms["tree"], arms["independent"]
    # independent episodes share their prompts, and the groups of a micro-batch the opening
    # their prompts have in common (the system prompt): never more than the prompt once
    assert independent["learner_tokens_trie_packed"] <= independent["learner_tokens_prompt_packed"]
    assert tree["learner_tokens_trie_packed"] < tree["learner_tokens_prompt_packed"]
    assert tree["learner_tokens_prompt_packed"] < tree["learner_tokens_plain"]
    assert tree["decoded_tokens"] < independent["decoded_tokens"]
    # a branch's prompt comes from its parent's kept KV: the trees prefill less, not more
    assert tree["prefill_tokens"] < independent["prefill_tokens"]


def test_each_shared_token_is_forwarded_once_per_micro_batch() -> None:
    """The prefix tree's tokens equal the distinct non-empty row prefixes of each micro-batch
    (every shared run here is at least packing.MIN_SHARED_RUN tokens long)."""
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(1, 90, (10,), generator=g).tolist()
    root = prompt + torch.randint(1, 90, (40,), generator=g).tolist()
    samples = [_leaf(root, "t0")]
    for cut in (18, 30, 30, 45):  # branches at three depths (two at the same node)
        samples.append(_leaf(root[:cut] + torch.randint(1, 90, (7,), generator=g).tolist(), "t0"))
    counts = bench.learner_tokens(samples, micro_batch_size=8)
    distinct = {tuple(s.token_ids[: k + 1]) for s in samples for k in range(len(s.token_ids))}
    assert counts["trie_packed"] == len(distinct) == 50 + 7 * 4
    assert counts["prompt_packed"] == 10 + sum(len(s.token_ids) - 10 for s in samples)
