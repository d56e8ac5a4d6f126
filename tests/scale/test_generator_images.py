"""The generator wrappers of the scale-out paths (asynchronous rollouts, FSDP2 processes) hand a
vision-language policy's pictures to the generator they wrap, and keep text-only calls plain."""

from __future__ import annotations

from types import SimpleNamespace

from agentic_rl.scale.async_rollout import VersionedGenerator
from agentic_rl.scale.fsdp import ShardedGenerator
from agentic_rl.types import Completion, ImageRef, SamplingParams


class Recording:
    """A generator that records what each call was given."""

    def __init__(self):
        self.calls = []

    def generate(self, prompts, params, **kwargs):
        self.calls.append((prompts, kwargs))
        return [Completion([1], [-0.5], "length") for _ in prompts]


PICTURES = [[ImageRef("/img/a.png", "a" * 64)], []]


def test_versioned_generator_passes_the_pictures(tiny, tokenizer):
    gen = VersionedGenerator(tiny, tokenizer, max_batch_size=2, version=3)
    gen.inner = Recording()
    params = SamplingParams(max_new_tokens=1)
    out = gen.generate([[1, 2], [3]], params, images=PICTURES)
    gen.generate([[1, 2]], params)
    assert gen.inner.calls == [([[1, 2], [3]], {"images": PICTURES}), ([[1, 2]], {})]
    assert [c.policy_version for c in out] == [3, 3]


def test_sharded_generator_passes_the_pictures():
    inner = Recording()
    gen = ShardedGenerator(inner, policy=None, dp=SimpleNamespace(rank=1))
    gen.generate([[1, 2], [3]], SamplingParams(max_new_tokens=1, seed=5), images=PICTURES)
    gen.generate([[1]], SamplingParams(max_new_tokens=1))
    assert inner.calls == [([[1, 2], [3]], {"images": PICTURES}), ([[1]], {})]
