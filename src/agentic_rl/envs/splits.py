"""Held-out splits of generated tasks: a task's split is a hash of its key.

A task generator draws candidates and keeps those whose key (the prompt, a layout, a scene, a
task id) falls in the split asked for: "eval" for 1 key in `EVAL_BUCKETS`, "train" for the rest.
The split depends on the key alone, so no seed or task count can put one task in both splits,
and an eval set stays unseen in training however many train tasks are drawn.
"""

from __future__ import annotations

import hashlib
from typing import Literal

Split = Literal["train", "eval"]
EVAL_BUCKETS = 5  # 1 in 5 keys is held out for evaluation


def split_of(key: str) -> Split:
    """The split of the task with this key: "eval" when the first byte of the key's SHA-256 is
    a multiple of `EVAL_BUCKETS`, else "train".

    Why one function: every generator that uses it holds out the same share by the same rule,
    and the rule is stable across Python versions and processes (unlike `hash`).
    """
    return "eval" if hashlib.sha256(key.encode()).digest()[0] % EVAL_BUCKETS == 0 else "train"
