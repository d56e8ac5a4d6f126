"""Fixtures for the policy server: one tiny-model trainer Setup, generators that record or
script what the model produces, and a running server with its OpenAI client."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import torch

from agentic_rl.config.load import load_config
from agentic_rl.model.load import token_logprobs
from agentic_rl.model.tokens import encode_text
from agentic_rl.retrieval.server import BackgroundServer
from agentic_rl.serving.policy_server import PolicyService, create_app
from agentic_rl.train.setup import build
from agentic_rl.types import Completion


@pytest.fixture(scope="session")
def setup():
    """calculator_grpo on the tiny random model (GRPO, no reference model)."""
    return build(load_config("calculator_grpo", ["model.name=tiny"]))


def policy_logprobs(model, ids: list[int]) -> list[float]:
    """log pi(x_t | x_<t) of every token by one plain forward pass (0 for the first)."""
    tensor = torch.tensor([ids])
    with torch.no_grad():
        lp, _, _ = token_logprobs(model, tensor, torch.ones_like(tensor))
    return lp[0].tolist()


class RecordingGenerator:
    """Wraps the real generator and keeps every prompt it was given and what it sampled."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.model = inner.model  # shares the policy's weights, as the wrapped one does
        self.calls: list[tuple[list[int], Completion]] = []

    def generate(self, prompts, params):
        out = self.inner.generate(prompts, params)
        self.calls += [(list(p), c) for p, c in zip(prompts, out, strict=True)]
        return out

    def update_weights(self, state=None) -> None:
        self.inner.update_weights(state)


class ScriptedGenerator:
    """Plays given assistant turns (their token ids) in place of sampling, with their real
    logprobs under the model, so tests can drive tool calls a random model never writes."""

    def __init__(self, model, tokenizer, turns: list[str]) -> None:
        self.model, self.tokenizer, self.turns = model, tokenizer, list(turns)
        self.calls: list[tuple[list[int], Completion]] = []

    def generate(self, prompts, params):
        out = []
        for prompt, p in zip(prompts, params, strict=True):
            text = self.turns.pop(0)
            ids = encode_text(self.tokenizer, text)
            lps = policy_logprobs(self.model, list(prompt) + ids)[len(prompt) :]
            if ids[-1] == self.tokenizer.eos_token_id:
                finish = "eos"
            else:
                finish = "stop" if any(text.endswith(s) for s in p.stop) else "length"
            out.append(Completion(ids, lps, finish, text))
            self.calls.append((list(prompt), out[-1]))
        return out

    def update_weights(self, state=None) -> None:
        pass


@contextlib.contextmanager
def serving(service: PolicyService) -> Iterator[tuple[str, object]]:
    """A running server for `service` and an OpenAI client pointed at it."""
    from openai import OpenAI

    with BackgroundServer(create_app(service)) as server:
        yield server.url, OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


@pytest.fixture
def recording(setup):
    """Factory: the real (tiny-model) generator, recording every call."""
    return lambda: RecordingGenerator(setup.generator)


@pytest.fixture
def scripted(setup):
    """Factory: a generator playing the given assistant turns."""
    return lambda turns: ScriptedGenerator(setup.policy, setup.tokenizer, turns)


@pytest.fixture
def serve():
    """`with serve(service) as (url, client): ...`"""
    return serving


@pytest.fixture
def recompute(setup):
    """Logprobs of a token sequence under the current policy (one plain forward pass)."""
    return lambda ids: policy_logprobs(setup.policy, ids)
