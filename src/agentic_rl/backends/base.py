"""The `Generator` protocol, choosing a generator from config, and keeping it in step with the
learner.

A generator turns token prompts into token continuations with their behaviour logprobs and
takes new weights after each update. Two live here: `hf` (backends/hf.py, the policy object
itself, so new weights are seen at once; with a model per role, backends/roles.py, one per
role) and `vllm` (backends/vllm.py, imported only when
`rollout.backend=vllm`, which holds its own copy and is sent the weights, or only the LoRA
adapter, after every update).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

from agentic_rl.backends.hf import HFGenerator
from agentic_rl.backends.roles import RoleGenerators
from agentic_rl.config.schema import Config
from agentic_rl.model.lora import is_lora, unwrap
from agentic_rl.model.roles import RoleModels
from agentic_rl.types import Completion, ImageRef, SamplingParams


@runtime_checkable
class Generator(Protocol):
    """What the rollout loop calls (rollout/actors.py `policy_actor`)."""

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams | Sequence[SamplingParams],
        images: Sequence[Sequence[ImageRef]] | None = None,
    ) -> list[Completion]:
        """One continuation per prompt: sampled ids, their behaviour logprobs (under the
        distribution each token was drawn from: the policy's logits / temperature, renormalised
        over the top-p nucleus; temperature 1 for greedy requests) and why it stopped ("stop" at
        a stop string, "eos", "length"). `images`: for a vision-language policy, each prompt's
        pictures in the order of its placeholder tokens (None: a text-only call)."""
        ...

    def update_weights(self, state: Mapping[str, torch.Tensor] | None = None) -> None:
        """Take the learner's new weights (a full state dict with Hugging Face names), or
        None when the generator runs on the learner's own model object."""
        ...


def make_generator(cfg: Config, policy: nn.Module, tokenizer: Any) -> Generator:
    """The generator `rollout.backend` names, on the current policy weights."""
    if cfg.rollout.backend == "vllm":
        from agentic_rl.backends.vllm import VLLMGenerator  # the optional engine: only here

        return VLLMGenerator.from_config(cfg, policy, tokenizer)
    if isinstance(policy, RoleModels):  # model.role_policies=models: a generator per role
        generators = {role: _hf_generator(cfg, m, tokenizer) for role, m in policy.models.items()}
        return RoleGenerators(policy, generators)
    # The HF generator runs the transformers model itself (for LoRA: the base model with the
    # adapter layers injected), so updates are visible without copying anything.
    return _hf_generator(cfg, unwrap(policy), tokenizer)


def _hf_generator(cfg: Config, model: nn.Module, tokenizer: Any) -> HFGenerator:
    """An HF generator on `model`. A tree rollout's rounds play fewer rows than its B x G
    episodes: its KV store keeps room for all of them (`kv_rows`), so a later round's branches
    reuse their parents' KV, cut to the branch point (`cut_prefixes`; backends/kv_store.py).

    Step and memory modes cut prefixes too: their contexts re-send the prompt without (all of)
    the episode's earlier turns, so a turn's context continues no stored entry whole, but it
    starts with the prompt an earlier turn's entry starts with, whose KV is reused instead of
    prefilled again (tests/rollout/test_step_prefix_reuse.py). In episode mode a context only
    grows, the whole-entry reuse covers it, and cuts stay off (KVStore.cut_prefixes)."""
    trees = cfg.rollout.tree.roots > 0
    return HFGenerator(
        model,
        tokenizer,
        max_batch_size=max(cfg.rollout.eval_batch_size, cfg.rollout.group_size),
        mixed_precision=cfg.rollout.mixed_precision,
        compiled_decode=cfg.rollout.compiled_decode,
        kv_rows=cfg.rollout.tasks_per_step * cfg.rollout.group_size if trees else 0,
        cut_prefixes=trees or cfg.rollout.mode in ("step", "memory"),
    )


def shares_weights(generator: Any, policy: nn.Module) -> bool:
    """Does `generator` run on the learner's own model object (nothing to send)?"""
    return getattr(generator, "model", None) is unwrap(policy)


def release_for_update(generator: Any) -> None:
    """Let the generator free its accelerator memory while the learner works (vLLM sleep mode;
    a no-op for generators without it). `sync_weights` wakes it up again."""
    sleep = getattr(generator, "sleep", None)
    if callable(sleep):
        sleep()


def sync_weights(generator: Any, policy: nn.Module, updated: bool = True) -> None:
    """Make the generator sample from the learner's current policy.

    Shared-model generators only drop their stale KV cache. A generator that takes adapters
    (`update_adapter`, vLLM) gets only the LoRA adapter of a PEFT policy; any other gets the full
    state dict of the transformers model (adapter layers included), the names its own copy of
    that model has. With `updated=False` (the step skipped its update) nothing is sent; a
    sleeping engine wakes."""
    if shares_weights(generator, policy):
        if updated:  # nothing to copy; KV computed under the old weights is dropped
            generator.update_weights(None)
        return
    if not updated:
        wake = getattr(generator, "wake_up", None)
        if callable(wake):
            wake()
        return
    update_adapter = getattr(generator, "update_adapter", None)
    if is_lora(policy) and callable(update_adapter):
        update_adapter(policy)
        return
    generator.update_weights(unwrap(policy).state_dict())
