"""Envs and their tools on Ray actors (extra `agentic-rl[ray]`; Ray is imported only here).

With `ray.enabled=true` the trainer gets its envs from an `EnvPool`: `ray.num_env_workers`
`EnvWorker` actors, each running the env objects (and so the tools: retriever, sandbox client,
calculator...) of the episodes assigned to it, round-robin. The rollout loop sees `RemoteEnv`
proxies with the ordinary Env interface plus `start_step`, which lets the loop start the steps
of all live episodes before waiting for any (`rollout/loop.py step_envs`): slow tool calls on
different workers overlap. Model generation and training stay in the driver process.

Failures:
* a worker lost mid-episode (its process died, or a call outlived `ray.call_timeout_s`): the
  worker is replaced and the episode replayed on the new one (env reset with the same seed,
  the same actions applied again; envs are deterministic given both, which `check_env`
  checks), then the call is sent again. The episode's tokens do not change. Counted per step
  in the metrics `env_workers_lost` and `env_episodes_replayed`; after `ray.max_episode_retries`
  replays of one episode the run stops with a `RayError`.
* the cluster itself gone (its control store does not answer, checked every
  `CLUSTER_CHECK_S` while a call is waited for, and before a worker is replaced): `RayError`
  saying so, naming the last checkpoint; rerunning the same command resumes from it. The check
  runs while waiting, not only after `ray.call_timeout_s`, because Ray ends a driver that has
  lost its control store after its own reconnect timeout (60 s by default), with exit status 1
  and no word of which checkpoint to resume from: the run must speak first.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentic_rl.config.schema import Config
from agentic_rl.envs.base import Env
from agentic_rl.envs.from_config import env_kwargs
from agentic_rl.envs.registry import make_env
from agentic_rl.errors import UserInputError
from agentic_rl.types import Action, Observation, StepResult, Task

if TYPE_CHECKING:
    pass

CLUSTER_CHECK_S = 5.0
"""While a Ray call is waited for, the cluster's control store is checked this often."""


class RayError(UserInputError, RuntimeError):
    """Ray is missing, the cluster cannot be reached or died, or an episode kept losing its
    env worker."""


def import_ray() -> Any:
    """The ray module, or a RayError naming the extra to install."""
    try:
        import ray
    except ImportError as err:
        raise RayError(
            "ray.enabled=true needs Ray, which is not installed: pip install 'agentic-rl[ray]'"
        ) from err
    return ray


class EnvWorker:
    """Runs in a Ray actor: the env objects of the episodes assigned to it, by episode key."""

    def __init__(self, env_name: str) -> None:
        self.env_name = env_name
        self.envs: dict[str, Env] = {}

    def reset(self, key: str, kwargs: dict[str, Any], task: Task, seed: int) -> Observation:
        env = make_env(self.env_name, **kwargs)
        self.envs[key] = env
        return env.reset(task, seed)

    def replay(
        self, key: str, kwargs: dict[str, Any], task: Task, seed: int, actions: list[Action]
    ) -> None:
        """Rebuild an episode that was running on a lost worker."""
        self.reset(key, kwargs, task, seed)
        for action in actions:
            self.envs[key].step(action)

    def step(self, key: str, action: Action) -> StepResult:
        return self.envs[key].step(action)

    def expert_turn(self, key: str) -> str:
        return self.envs[key].expert_turn()

    def expert_mistake(self, key: str) -> str | None:
        return self.envs[key].expert_mistake()

    def release(self, keys: list[str]) -> None:
        for key in keys:
            self.envs.pop(key, None)

    def pid(self) -> int:
        return os.getpid()


class RemoteEnv:
    """Driver-side proxy of one episode's env on an `EnvWorker` (the Env interface)."""

    def __init__(self, pool: EnvPool, kwargs: dict[str, Any], slot: int) -> None:
        self.pool, self.kwargs, self.slot = pool, kwargs, slot
        self.key = uuid.uuid4().hex
        self.tools = pool.tools
        self.task: Task | None = None
        self.seed = 0
        self.actions: list[Action] = []  # replayed on a new worker if this one is lost
        self.replays = 0
        # The actor this episode lives on, in a list so the finalizer below (which must not
        # hold the proxy) sees a replacement; the pool releases the episode's env after that.
        self.home: list[Any] = [None]
        weakref.finalize(self, pool.released.append, (self.home, self.key))

    @property
    def worker(self) -> Any:
        return self.home[0]

    def reset(self, task: Task, seed: int) -> Observation:
        self.task, self.seed, self.actions = task, seed, []
        return self.pool.call(self, "reset", self.kwargs, task, seed)

    def start_step(self, action: Action) -> Callable[[], StepResult]:
        """Send the step to the worker now; the returned function waits for its result."""
        wait = self.pool.submit(self, "step", action)

        def finish() -> StepResult:
            result = wait()
            self.actions.append(action)
            return result

        return finish

    def step(self, action: Action) -> StepResult:
        return self.start_step(action)()

    def expert_turn(self) -> str:
        return self.pool.call(self, "expert_turn")

    def expert_mistake(self) -> str | None:
        return self.pool.call(self, "expert_mistake")


class EnvPool:
    """`ray.num_env_workers` env worker actors and the proxies the rollout loop steps."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.ray = import_ray()
        self.owns_cluster = connect(cfg)
        self.tools = make_env(cfg.env.name, **env_kwargs(cfg)).tools  # schemas for the parsers
        options = {"num_cpus": cfg.ray.env_worker_cpus, "max_restarts": 0}
        self._actor_class = self.ray.remote(**options)(EnvWorker)
        self._lock = threading.Lock()
        self._next = 0  # round-robin slot of the next episode
        self.released: list[tuple[list[Any], str]] = []  # ([worker], key) of dropped proxies
        self.counters = {"env_workers_lost": 0.0, "env_episodes_replayed": 0.0}
        self.gcs_address = _gcs_address(self.ray)
        self.cluster_lost = False
        self.others: list[Any] = []  # other actors of the run (the generator), stopped with it
        self.workers = [self._new_worker() for _ in range(cfg.ray.num_env_workers)]
        self._wait(self.workers[0].pid.remote(), "start the env workers")

    def _new_worker(self) -> Any:
        return self._actor_class.remote(self.cfg.env.name)

    def make(self, n: int, progress: float | None = None) -> list[Env]:
        """`n` fresh env proxies, spread over the workers."""
        kwargs = env_kwargs(self.cfg, progress)
        with self._lock:
            # Popped one by one: finalizers may append meanwhile (from any thread).
            released = [self.released.pop() for _ in range(len(self.released))]
            start, self._next = self._next, self._next + n
        by_worker: dict[int, tuple[Any, list[str]]] = {}
        for home, key in released:
            if home[0] is not None:
                by_worker.setdefault(id(home[0]), (home[0], []))[1].append(key)
        for worker, keys in by_worker.values():
            worker.release.remote(keys)  # fire and forget: a lost worker took them anyway
        slots = [(start + i) % len(self.workers) for i in range(n)]
        return [RemoteEnv(self, kwargs, slot) for slot in slots]  # type: ignore[misc]

    def submit(self, env: RemoteEnv, method: str, *args: Any) -> Callable[[], Any]:
        """Start `method` of env's worker; the returned function waits for the result,
        replacing a lost worker and replaying the episode on the new one."""
        if env.worker is None:
            env.home[0] = self.workers[env.slot]
        ref = getattr(env.worker, method).remote(env.key, *args)

        def wait() -> Any:
            nonlocal ref
            while True:
                try:
                    return self._wait(ref, f"{method} on an env worker", lost_ok=True)
                except _WorkerLost as lost:
                    self._recover(env, lost.reason)
                    ref = getattr(env.worker, method).remote(env.key, *args)

        return wait

    def call(self, env: RemoteEnv, method: str, *args: Any) -> Any:
        return self.submit(env, method, *args)()

    def _recover(self, env: RemoteEnv, reason: str) -> None:
        """Move `env`'s episode to a working worker and rebuild it there."""
        task_id = env.task.task_id if env.task is not None else "?"
        if env.replays >= self.cfg.ray.max_episode_retries:
            raise RayError(
                f"the episode of task {task_id} lost its env worker {env.replays + 1} times "
                f"(ray.max_episode_retries={self.cfg.ray.max_episode_retries}; last: {reason}). "
                + resume_hint(self.cfg)
            )
        if not self.cluster_alive():
            # Checked before anything else talks to the cluster: Ray calls that need its
            # control store (GCS) block, and Ray ends the process after a minute without it.
            raise self._cluster_gone(reason)
        with self._lock:
            if self.workers[env.slot] is env.worker:  # the first to notice replaces it
                self._kill(env.worker)
                self.workers[env.slot] = self._new_worker()
                self.counters["env_workers_lost"] += 1
            env.home[0] = self.workers[env.slot]
            self.counters["env_episodes_replayed"] += 1
        env.replays += 1
        if env.task is not None:
            ref = env.worker.replay.remote(env.key, env.kwargs, env.task, env.seed, env.actions)
            try:
                self._wait(ref, "replay an episode on a new env worker", lost_ok=True)
            except _WorkerLost as lost:
                raise RayError(
                    f"the Ray cluster stopped responding: a new env worker could not be started "
                    f"({lost.reason}). " + resume_hint(self.cfg)
                ) from None

    def _wait(self, ref: Any, what: str, lost_ok: bool = False) -> Any:
        """`ray.get(ref)` within `ray.call_timeout_s`, in slices of `CLUSTER_CHECK_S` with the
        cluster checked between them. A lost actor or the timeout is `_WorkerLost` (when
        `lost_ok`, so the caller replaces the worker) or a `RayError`; a gone cluster is always
        a `RayError`."""
        exceptions = self.ray.exceptions
        deadline = time.monotonic() + self.cfg.ray.call_timeout_s
        while True:
            left = deadline - time.monotonic()
            try:
                return self.ray.get(ref, timeout=max(0.01, min(CLUSTER_CHECK_S, left)))
            except exceptions.GetTimeoutError as err:
                if not self.cluster_alive():
                    raise self._cluster_gone(f"no answer while trying to {what}") from None
                if time.monotonic() < deadline:
                    continue
                failure: Exception = err
            except (exceptions.RayActorError, exceptions.ObjectLostError) as err:
                if not self.cluster_alive():  # the actor died with its cluster
                    raise self._cluster_gone(
                        f"{type(err).__name__} while trying to {what}"
                    ) from None
                failure = err
            except exceptions.RayError as err:
                # An env's own exception (RayTaskError) is the env's to tell; any other Ray
                # failure is named as the cluster's loss when that is what it is.
                if isinstance(err, exceptions.RayTaskError) or self.cluster_alive():
                    raise
                raise self._cluster_gone(f"{type(err).__name__} while trying to {what}") from None
            reason = f"{type(failure).__name__} while trying to {what}"
            if lost_ok:
                raise _WorkerLost(reason) from failure
            raise RayError(
                f"Ray could not {what}: {failure}. " + resume_hint(self.cfg)
            ) from failure

    def _cluster_gone(self, reason: str) -> RayError:
        self.cluster_lost = True
        return RayError(
            f"the Ray cluster is gone: its control store at {self.gcs_address} does not "
            f"answer ({reason}). " + resume_hint(self.cfg)
        )

    def take_metrics(self) -> dict[str, float]:
        """Counters since the previous call (lost workers, replayed episodes)."""
        with self._lock:
            out, self.counters = self.counters, dict.fromkeys(self.counters, 0.0)
        return out

    def worker_pids(self) -> list[int]:
        return [self._wait(w.pid.remote(), "reach an env worker") for w in self.workers]

    def cluster_alive(self) -> bool:
        """Does the cluster's GCS accept connections? (a plain socket, so it cannot block)"""
        if not self.gcs_address:
            return True  # address unknown (Ray client mode): let Ray's own errors speak
        host, _, port = self.gcs_address.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=5):
                return True
        except OSError:
            return False

    def _kill(self, worker: Any) -> None:
        with contextlib.suppress(Exception):  # already gone, or the cluster with it
            self.ray.kill(worker, no_restart=True)

    def close(self) -> None:
        """Stop the workers (and the local cluster, if this pool started it)."""
        if self.cluster_lost:
            return  # nothing left to stop, and Ray calls would block on the missing GCS
        for worker in self.workers + self.others:
            self._kill(worker)
        if self.owns_cluster:
            self.ray.shutdown()


class _WorkerLost(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def connect(cfg: Config) -> bool:
    """Join `ray.address`, or start a local cluster; True if this call started one. A driver
    that is already connected (ray.init called before) keeps its cluster."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
    try:
        if cfg.ray.address:
            ray.init(address=cfg.ray.address, **options)
            return False
        ray.init(num_cpus=cfg.ray.num_cpus or None, **options)
    except (ConnectionError, RuntimeError, ValueError) as err:
        where = f"the Ray cluster at {cfg.ray.address}" if cfg.ray.address else "a local cluster"
        raise RayError(f"could not start or join {where}: {err}") from err
    return True


def _gcs_address(ray: Any) -> str:
    try:
        return str(ray.get_runtime_context().gcs_address)
    except Exception:  # Ray client mode has no local GCS address
        return ""


def resume_hint(cfg: Config) -> str:
    """Where the run can be resumed from: its last complete checkpoint."""
    from agentic_rl.checkpoint.layout import latest_checkpoint

    out = Path(cfg.trainer.out_dir) / (cfg.trainer.run_name or cfg.recipe)
    last = latest_checkpoint(out) if out.exists() else None
    if last is None:
        return "No checkpoint was saved yet: rerunning the command starts over."
    return f"Rerun the same command to resume from the last checkpoint, {last}."
