"""Request limits of the policy server and the queue that batches concurrent calls."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentic_rl.types import SamplingParams


@dataclass(frozen=True)
class ServeLimits:
    """Per-request limits; a request outside them gets a 4xx, never a crash."""

    default_max_tokens: int = 256
    """New tokens of a call that names no max_tokens."""
    max_context: int = 2048
    """Prompt plus new tokens of one call (the model's context window)."""
    max_body_bytes: int = 8 << 20
    """Largest request body accepted."""
    max_batch: int = 32
    """Concurrent calls generated together in one batch."""
    max_inflight: int = 128
    """Requests in flight at once (queued calls included); more get 503 (0: unbounded)."""


class GenerationQueue:
    """Calls that arrive while a batch is generating are generated together in the next one,
    so N agents running at once cost about one batched decode, not N sequential ones. When a
    batch fails, each of its calls is generated alone: a failure stays with the call that
    caused it. The queue is bounded by the server's in-flight limit (tools/http_guard.py).

    A team server generates each role with that role's policy: a batch holds the calls of one
    role (`run(prompts, params, role)`), the role of the oldest waiting call first, so no role
    waits behind another's stream of calls for more than one batch."""

    def __init__(self, run: Callable[[list, list, str], Any], max_batch: int) -> None:
        self.run = run
        self.max_batch = max_batch
        self._pending: list[tuple[list[int], SamplingParams, asyncio.Future, str]] = []
        self._worker: asyncio.Task | None = None

    async def submit(self, prompt: list[int], params: SamplingParams, role: str = "") -> Any:
        future = asyncio.get_running_loop().create_future()
        self._pending.append((prompt, params, future, role))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.ensure_future(self._drain())
        return await future

    async def _drain(self) -> None:
        from starlette.concurrency import run_in_threadpool

        while self._pending:
            role = self._pending[0][3]
            batch = [item for item in self._pending if item[3] == role][: self.max_batch]
            taken = {id(item) for item in batch}
            self._pending = [item for item in self._pending if id(item) not in taken]
            live = [item for item in batch if not item[2].done()]  # clients gone: skip
            if not live:
                continue
            try:
                results = await run_in_threadpool(
                    self.run, [item[0] for item in live], [item[1] for item in live], role
                )
            except Exception as exc:
                if len(live) == 1:  # the failure is this call's own; the server stays up
                    if not live[0][2].done():
                        live[0][2].set_exception(exc)
                    continue
                # One bad call must not fail the others batched with it: each alone.
                for item in live:
                    await self._run_alone(item)
                continue
            for (_, _, future, _), result in zip(live, results, strict=True):
                if not future.done():
                    future.set_result(result)

    async def _run_alone(self, item: tuple[list[int], SamplingParams, asyncio.Future, str]) -> None:
        from starlette.concurrency import run_in_threadpool

        prompt, params, future, role = item
        if future.done():
            return
        try:
            (result,) = await run_in_threadpool(self.run, [prompt], [params], role)
        except Exception as exc:
            if not future.done():
                future.set_exception(exc)
            return
        if not future.done():
            future.set_result(result)
