"""`agentic-rl serve-policy`: the rollout side as an OpenAI-compatible chat endpoint.

Any agent code written against the OpenAI client (tools included) runs against the policy being
trained; every call is recorded token by token (serving/recorder.py) and an episode becomes
training samples once the client reports its reward.

    POST /v1/chat/completions          OpenAI chat completions (n=1, no streaming; tools in the
                                       hermes format); the reply carries `episode_id`
    POST /v1/episodes/{id}/reward      {"reward": float, "step_rewards"?: [float per model turn],
                                        "group_id"?, "task_id"?, "success"?, "truncated"?}
    GET  /v1/episodes, /v1/episodes/{id}   summaries / recorded tokens of one episode
    DELETE /v1/episodes/{id}           drop an open episode
    GET  /v1/models, /health

The episode of a call is the `X-Episode-Id` header, `metadata.episode_id` or `user`; without
one, the open episode whose conversation the call extends. Episodes opening with the same
prompt share a GRPO group unless the reward names one. Concurrent calls are generated together
in one batch (`GenerationQueue`; with the HF generator a batch samples from the `seed` of its
first call); when a batch fails, each of its calls is retried alone, so one bad call fails
only itself. Malformed input gets a 4xx with an OpenAI-style error body: every field is
validated before it reaches generation (serving/openai_api.py).

A team (a run with model.role_policies adapters or models, or model.name an exported team) is
served as one endpoint: the request's `model` names the role to answer as (GET /v1/models lists
them), each role is generated with its own policy (`rollout/roles.py generating_as`) in batches
of its own calls, and each role's conversation is an episode of its own whose samples carry
the role, so training updates each role's policy from its own episodes only (the learner's
role micro-batches) and groups form within a role.

The servers' shared guard (tools/http_guard.py) sits in front of every route: a server bound to
a non-loopback address needs a bearer token (`--auth-token` or $AGENTIC_RL_API_TOKEN; OpenAI
clients send it as their `api_key`) and refuses to start without one; the body size is checked
before and while it is read (chunked bodies too); at most `max_inflight` requests are in flight
and the next gets 503 at once; the recorder's open-episode limit answers 429.

Training (`train_every`, or `take_finished` + `train` in-process) runs the trainer's own update
(`train.loop.update_policy`) on whole groups only: a group is trained once `group_size` of its
episodes have finished (serving/recorder.py). Tokens sampled before an update that lands
mid-episode (or while the episode waited for its group) are stale: they are trained with
decoupled PPO against the current weights, each weighted by min(pi_now / pi_behav,
algo.stale_is_cap), as asynchronous rollouts are; updates log the staleness. Open episodes
idle for `episode_ttl_s` expire, so abandoned ones do not hold the open-episode limit forever.
"""

# No `from __future__ import annotations`: FastAPI resolves the handlers' `Request` annotation
# at runtime, and that class is imported inside create_app to keep imports lazy.
import dataclasses
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from agentic_rl.checkpoint.export import save_model
from agentic_rl.learner.batch import Episodes
from agentic_rl.model.roles import role_policies
from agentic_rl.rollout.roles import generating_as
from agentic_rl.scale.async_rollout import check_stale_correction
from agentic_rl.serving.batching import GenerationQueue, ServeLimits
from agentic_rl.serving.export import JsonlWriter, trajectory_record
from agentic_rl.serving.openai_api import (
    ApiError,
    finite_number,
    hermes_format,
    load_body,
    parse_chat_request,
)
from agentic_rl.serving.openai_reply import build_reply, completion_body
from agentic_rl.serving.recorder import EpisodeRecorder, OnMismatch
from agentic_rl.tools.http_guard import Guard
from agentic_rl.train.loop import update_policy
from agentic_rl.train.setup import make_optimizer, set_learning_rate
from agentic_rl.train.summary import summarize
from agentic_rl.types import Completion, SamplingParams

REWARD_FIELDS = {"reward", "step_rewards", "group_id", "task_id", "success", "truncated"}

# Request bodies as OpenAPI (the handlers read raw bodies, so FastAPI cannot infer them): they
# document the API and let schemathesis fuzz it. Validation itself is in parse_chat_request and
# _reward_body, which accept exactly these shapes.
_MESSAGE = {
    "type": "object",
    "required": ["role", "content"],
    "additionalProperties": False,
    "properties": {
        "role": {"enum": ["system", "developer", "user", "assistant", "tool"]},
        "content": {"type": "string"},
    },
}
_TOOL = {
    "type": "object",
    "required": ["type", "function"],
    "additionalProperties": False,
    "properties": {
        "type": {"enum": ["function"]},
        "function": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
                "description": {"type": "string"},
                "parameters": {"type": "object"},
            },
        },
    },
}
CHAT_SCHEMA = {
    "type": "object",
    "required": ["messages"],
    "additionalProperties": False,
    "properties": {
        "model": {"type": "string"},
        "messages": {"type": "array", "minItems": 1, "maxItems": 8, "items": _MESSAGE},
        "max_tokens": {"type": "integer", "minimum": 1, "maximum": 64},
        "temperature": {"type": "number", "minimum": 0, "maximum": 2},
        "top_p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "seed": {"type": "integer", "minimum": -(2**63), "maximum": 2**63 - 1},
        "stop": {
            "type": "array",
            "maxItems": 4,
            "items": {"type": "string", "minLength": 1},
        },
        "tools": {"type": "array", "maxItems": 4, "items": _TOOL},
        "tool_choice": {"enum": ["auto", "none"]},
        "logprobs": {"type": "boolean"},
    },
}
REWARD_SCHEMA = {
    "type": "object",
    "required": ["reward"],
    "additionalProperties": False,
    "properties": {
        "reward": {"type": "number"},
        "step_rewards": {"type": "array", "items": {"type": "number"}},
        "group_id": {"type": "string", "minLength": 1},
        "task_id": {"type": "string", "minLength": 1},
        "success": {"type": "number"},
        "truncated": {"type": "boolean"},
    },
}


def _body_openapi(schema: dict[str, Any]) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


class PolicyService:
    """Generation, recording and (with a trainer `Setup`) policy updates behind the endpoint.

    In-process use: `take_finished()` pops the finished episodes of complete groups as trainer
    `Episodes`, `train()` runs one update of the recipe's algorithm on them (holding the model
    lock, so serving and training never touch the weights at once) and moves the policy
    version on."""

    def __init__(
        self,
        generator: Any,
        tokenizer: Any,
        *,
        model_name: str = "agentic-rl-policy",
        limits: ServeLimits | None = None,
        on_mismatch: OnMismatch = "reject",
        export: str | Path | None = None,
        setup: Any = None,
        train_every: int = 0,
        save_dir: str | Path | None = None,
        keep_finished: bool = True,
        group_size: int = 1,
        episode_ttl_s: float = 1800.0,
    ) -> None:
        """`keep_finished=False` drops finished episodes once exported (a long-running
        recording server whose JSONL is the only consumer); training keeps what it needs.
        `group_size`: finished episodes a group needs before it is trained (the G of GRPO; 1:
        every episode at once). `train_every=N`: train once at least N finished episodes of
        complete groups wait. `episode_ttl_s` (0: never): idle open episodes, and incomplete
        groups that stopped growing, expire after it."""
        if train_every and setup is None:
            raise ValueError("train_every needs a trainer Setup (PolicyService.from_setup)")
        if train_every:  # served episodes may span updates: refuse what cannot correct that
            check_stale_correction(setup.cfg)
        self.generator = generator
        self.tokenizer = tokenizer
        self.model_name = model_name
        model = setup.policy if setup is not None else getattr(generator, "model", None)
        self.roles = role_policies(model) if model is not None else ()
        """A team's roles (the `model` a request names); () for one policy."""
        trained = setup.cfg.rollout.train_roles if setup is not None else ()
        frozen = tuple(r for r in self.roles if trained and r not in trained)
        self.limits = limits or ServeLimits()
        self.keep_finished = keep_finished or bool(train_every)
        self.group_size = group_size
        self.recorder = EpisodeRecorder(
            tokenizer,
            on_mismatch,
            group_size=group_size if self.keep_finished else 1,  # recording only: no waiting
            ttl_s=episode_ttl_s,
            frozen_roles=frozen,
        )
        self.writer = JsonlWriter(export) if export else None
        self.setup = setup
        self.train_every = train_every
        self.save_dir = Path(save_dir) if save_dir else None
        self.optimizer: torch.optim.Optimizer | None = None
        self.policy_version = 0
        self.updates: list[dict[str, float]] = []
        self.model_lock = threading.Lock()
        self._train_lock = threading.Lock()  # one check-take-train at a time
        self.queue = GenerationQueue(self._generate, self.limits.max_batch)

    @classmethod
    def from_setup(cls, setup: Any, **kwargs: Any) -> "PolicyService":
        """Serve a trainer `Setup` (its generator, tokenizer, recipe algorithm and optimiser
        settings); the context limit defaults to the model's position embeddings and the group
        size to the recipe's rollout.group_size."""
        if "limits" not in kwargs:
            config = getattr(getattr(setup.policy, "config", None), "max_position_embeddings", 0)
            kwargs["limits"] = ServeLimits(max_context=int(config or 2048))
        kwargs.setdefault("group_size", setup.cfg.rollout.group_size)
        return cls(setup.generator, setup.tokenizer, setup=setup, **kwargs)

    def _generate(
        self, prompts: Sequence[list[int]], params: Sequence[SamplingParams], role: str = ""
    ) -> list[tuple[Completion, int]]:
        with self.model_lock, generating_as(self.generator, role):
            version = self.policy_version
            return [(c, version) for c in self.generator.generate(prompts, list(params))]

    def role_of(self, request: Any) -> str:
        """The role a team server answers as: the request's `model`, one of `roles` ("" for a
        server of one policy, which ignores `model`)."""
        if not self.roles:
            return ""
        if request.model in self.roles:
            return str(request.model)
        named = "names no role" if request.model is None else f"is {request.model!r}"
        raise ApiError(
            f"this server plays a team: 'model' names the role to answer as, one of "
            f"{', '.join(self.roles)}; the request's 'model' {named}",
            404 if request.model is not None else 400,
            param="model",
        )

    async def chat(self, raw: bytes, episode_header: str | None = None) -> dict[str, Any]:
        """One chat completion: validate, assemble the token prompt, generate, record."""
        request = parse_chat_request(raw, episode_header)
        role = self.role_of(request)
        call = self.recorder.begin(request, role)
        committed = False
        try:
            room = self.limits.max_context - len(call.prompt)
            params = request.sampling(min(self.limits.default_max_tokens, max(room, 1)))
            if params.max_new_tokens > room:
                raise ApiError(
                    f"prompt of {len(call.prompt)} tokens + max_tokens {params.max_new_tokens} "
                    f"exceeds the context of {self.limits.max_context} tokens",
                    param="messages",
                )
            completion, version = await self.queue.submit(call.prompt, params, role)
            reply = build_reply(
                completion, request, hermes_format(request, self.tokenizer), self.tokenizer
            )
            self.recorder.commit(call, completion, reply, version)
            committed = True
        finally:
            if not committed:
                self.recorder.abort(call)
        return completion_body(
            reply,
            completion,
            self.tokenizer,
            model=role or self.model_name,
            episode_id=call.episode.episode_id,
            prompt_tokens=len(call.prompt),
            policy_version=version,
            logprobs=request.logprobs,
        )

    def finish(self, episode_id: str, raw: bytes) -> dict[str, Any]:
        """Report an episode's reward (a /reward body); trains once `train_every` finished
        episodes of complete groups wait."""
        body = _reward_body(raw)
        samples = self.recorder.finish(
            episode_id,
            body["reward"],
            step_rewards=body.get("step_rewards"),
            group_id=body.get("group_id"),
            task_id=body.get("task_id"),
            success=body.get("success"),
            truncated=body.get("truncated", False),
        )
        if self.writer is not None:
            self.writer.write(episode_id, samples)
        update = None
        if self.train_every:
            update = self._train_when_ready()
        elif not self.keep_finished:
            self.take_finished()
        return {
            "episode_id": episode_id,
            "samples": len(samples),
            "group_id": samples[0].group_id if samples else "",
            "generated_tokens": sum(s.num_generated for s in samples),
            "update": update,
        }

    def take_finished(self, limit: int | None = None) -> Episodes:
        """The finished episodes of complete groups, whole groups up to `limit` episodes."""
        return self.recorder.take_finished(limit)

    def _train_when_ready(self) -> dict[str, float] | None:
        """Updates on whole complete groups while `train_every` episodes of them wait (more
        than one when several groups completed at once); the last update's metrics."""
        update = None
        with self._train_lock:  # concurrent rewards: one of them trains
            while self.recorder.ready() >= self.train_every:
                update = self.train(self.take_finished(self.train_every))
        return update

    def train(
        self, episodes: Episodes, optimizer: torch.optim.Optimizer | None = None
    ) -> dict[str, float]:
        """One update of the recipe's algorithm (e.g. GRPO) on finished episodes, the trainer's
        own (`update_policy`), stale tokens corrected; the generator then samples from the new
        weights and later turns record the new version."""
        if self.setup is None:
            raise RuntimeError("training needs a trainer Setup (PolicyService.from_setup)")
        if not len(episodes):
            raise ValueError("no finished episodes to train on")
        setup = self.setup
        if optimizer is None:
            self.optimizer = self.optimizer or make_optimizer(setup)
            optimizer = self.optimizer
        with self.model_lock:
            set_learning_rate(optimizer, setup.cfg, len(self.updates) + 1)
            metrics = summarize([s[0] for s in episodes.samples])
            # The served generator may wrap the Setup's (tests record calls): sync that one.
            served = dataclasses.replace(setup, generator=self.generator)
            metrics.update(update_policy(served, optimizer, episodes, self.policy_version))
            useful = not metrics["skipped_update"]
            self.policy_version += int(useful)
            metrics["policy_version"] = self.policy_version
            if useful and self.save_dir is not None:
                save_model(setup.policy, setup.tokenizer, self.save_dir)
        self.updates.append(metrics)
        return metrics

    def episode(self, episode_id: str) -> dict[str, Any]:
        ep = self.recorder.get(episode_id)
        samples = [trajectory_record(t, episode_id, i) for i, t in enumerate(ep.samples)]
        if not ep.finished:
            samples = [
                {
                    "segment": i,
                    "token_ids": s.token_ids,
                    "loss_mask": s.loss_mask,
                    "logprobs": s.logprobs,
                    "prompt_length": s.prompt_length,
                    "turn_spans": [list(span) for span in s.turn_spans],
                    "policy_versions": s.versions,
                }
                for i, s in enumerate(ep.segments)
            ]
        return {**ep.summary(), "samples": samples}


def _reward_body(raw: bytes) -> dict[str, Any]:
    body = load_body(raw)
    if not isinstance(body, dict):
        raise ApiError('body must be a JSON object like {"reward": 1.0}')
    unknown = sorted(set(body) - REWARD_FIELDS)
    if unknown:
        raise ApiError(f"unknown field(s): {', '.join(unknown)}", param=unknown[0])

    finite = finite_number
    if not finite(body.get("reward")):
        raise ApiError(
            f"'reward' must be a finite number, got {body.get('reward')!r}", param="reward"
        )
    steps = body.get("step_rewards")
    if steps is not None and (not isinstance(steps, list) or not all(finite(r) for r in steps)):
        raise ApiError("'step_rewards' must be a list of finite numbers", param="step_rewards")
    for key in ("group_id", "task_id"):
        if body.get(key) is not None and not (isinstance(body[key], str) and body[key]):
            raise ApiError(f"'{key}' must be a non-empty string", param=key)
    if body.get("success") is not None and not finite(body["success"]):
        raise ApiError("'success' must be a number", param="success")
    if not isinstance(body.get("truncated", False), bool):
        raise ApiError("'truncated' must be true or false", param="truncated")
    return body


def create_app(service: PolicyService, token: str | None = None) -> Any:
    """The FastAPI app serving `service` (see the module docstring for the API); with a
    `token`, every route but /health needs `Authorization: Bearer <token>`."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from starlette.concurrency import run_in_threadpool

    app = FastAPI(title="agentic-rl policy", description="OpenAI-compatible, records trajectories")
    limits = service.limits
    guard = Guard(limits.max_body_bytes, token, limits.max_inflight).install(app)

    @app.exception_handler(ApiError)
    async def api_error(_: Request, err: ApiError) -> Any:
        return JSONResponse(err.body(), status_code=err.status)

    async def body_of(request: Request) -> bytes:
        declared = request.headers.get("content-length", "")
        limit = service.limits.max_body_bytes
        if declared.isdigit() and int(declared) > limit:  # before reading it
            raise ApiError(f"body larger than {limit} bytes", 413)
        raw = await request.body()
        if len(raw) > limit:
            raise ApiError(f"body larger than {limit} bytes", 413)
        return raw

    def failure(exc: Exception) -> Any:
        err = ApiError(f"generation failed: {type(exc).__name__}: {exc}", 500)
        return JSONResponse(err.body(), status_code=500)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        summaries = service.recorder.summaries()
        return {
            "status": "ok",
            "model": service.model_name,
            **({"roles": list(service.roles)} if service.roles else {}),
            "policy_version": service.policy_version,
            "open_episodes": sum(s["status"] == "open" for s in summaries),
            "finished_episodes": len(service.recorder.finished),
            "ready_episodes": service.recorder.ready(),
            "expired_episodes": dict(service.recorder.expired),
            "updates": len(service.updates),
            "inflight": guard.inflight,
            "refused": dict(guard.refused),
        }

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        ids = service.roles or (service.model_name,)  # a team: one model id per role
        entries = [
            {"id": i, "object": "model", "created": 0, "owned_by": "agentic-rl"} for i in ids
        ]
        return {"object": "list", "data": entries}

    @app.post("/v1/chat/completions", openapi_extra=_body_openapi(CHAT_SCHEMA))
    async def chat(request: Request) -> Any:
        raw = await body_of(request)
        try:
            body = await service.chat(raw, request.headers.get("x-episode-id"))
        except ApiError:
            raise
        except Exception as exc:  # a generator failure: report it, keep serving
            return failure(exc)
        return JSONResponse(body, headers={"X-Episode-Id": body["episode_id"]})

    @app.post("/v1/episodes/{episode_id}/reward", openapi_extra=_body_openapi(REWARD_SCHEMA))
    async def reward(episode_id: str, request: Request) -> Any:
        raw = await body_of(request)
        try:  # may run a training update: off the event loop
            return await run_in_threadpool(service.finish, episode_id, raw)
        except ApiError:
            raise
        except Exception as exc:
            return failure(exc)

    @app.get("/v1/episodes")
    async def episodes() -> dict[str, Any]:
        return {"episodes": service.recorder.summaries()}

    @app.get("/v1/episodes/{episode_id}")
    async def episode(episode_id: str) -> dict[str, Any]:
        return service.episode(episode_id)

    @app.delete("/v1/episodes/{episode_id}")
    async def delete(episode_id: str) -> dict[str, Any]:
        service.recorder.discard(episode_id)
        return {"episode_id": episode_id, "deleted": True}

    return app
