"""Envs on Ray actors, on a real local Ray cluster (no mocks): same numbers as in-process,
overlapping slow steps, a killed worker's episode replayed and counted, a dead cluster
reported and the run resumed from its checkpoint."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from agentic_rl.checkpoint.layout import latest_checkpoint
from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError
from agentic_rl.envs.from_config import make_envs, make_tasks
from agentic_rl.rollout.actors import policy_actor
from agentic_rl.rollout.loop import run_episodes, step_envs
from agentic_rl.scale.ray_generator import RayGenerator
from agentic_rl.scale.ray_pool import EnvPool, RayError, import_ray
from agentic_rl.train.setup import Setup, build
from agentic_rl.train.stages import train_recipe
from agentic_rl.types import Action

# A tiny random model on a few short turns: the numbers compared are exact either way.
FAST = [
    "model.name=tiny",
    "warm_start.num_tasks=0",
    "trainer.eval_before=false",
    "trainer.progress=false",
    "trainer.tensorboard=false",
    "env.num_eval_tasks=1",
    "rollout.tasks_per_step=1",
    "rollout.max_turns=2",
    "rollout.max_tokens_per_turn=4",
    "algo.entropy_coef=0.01",  # every step updates, so step 2 depends on step 1's update
]
# costs of the run, not results: timings, and the in-process generator's KV reuse (a Ray
# generator actor does not report it)
TIMING = ("seconds", "time", "tokens_per_s", "reused_prompt_tokens")


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_missing_ray_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # what an environment without Ray has
    with pytest.raises(RayError, match=r"pip install 'agentic-rl\[ray\]'"):
        import_ray()
    cfg = load_config("calculator_grpo", ["ray.enabled=true"])
    with pytest.raises(RayError, match="ray.enabled=true needs Ray"):
        EnvPool(cfg)


def test_ray_settings_are_validated():
    with pytest.raises(ConfigError, match="ray.num_env_workers is set but does nothing"):
        load_config(None, ["ray.num_env_workers=4"])
    with pytest.raises(ConfigError, match="ray.call_timeout_s"):
        load_config(None, ["ray.enabled=true", "ray.call_timeout_s=5", "env.tool_timeout_s=10"])
    with pytest.raises(ConfigError, match="ray.num_cpus sizes a local cluster"):
        load_config(None, ["ray.enabled=true", "ray.num_cpus=2", "ray.address=auto"])


@pytest.mark.slow
def test_smoke_recipe_through_ray_matches_in_process_run(cluster, tmp_path):
    """Envs on Ray workers and the generator in its own actor (the weights sent to it after
    every update): every logged number of the run equals the in-process run's."""
    runs = {}
    generator = ["ray.generator_actor=true", "ray.generator_cpus=0.5"]
    for name, extra in (("local", []), ("ray", ["ray.enabled=true", *generator])):
        cfg = load_config(
            "calculator_grpo", [*FAST, f"trainer.out_dir={tmp_path / name}", *extra], True
        )
        train_recipe(cfg)
        lines = (tmp_path / name / "calculator_grpo" / "metrics.jsonl").read_text().splitlines()
        runs[name] = [json.loads(line) for line in lines]
    assert len(runs["local"]) == len(runs["ray"]) == 3  # 2 steps + the final eval
    for local, remote in zip(runs["local"], runs["ray"], strict=True):
        same = {k: v for k, v in local.items() if not any(t in k for t in TIMING)}
        assert same == {k: remote[k] for k in same}
    steps = [m for m in runs["ray"] if "train/reward" in m]
    assert all(m["train/env_workers_lost"] == 0 for m in steps)
    assert all(m["train/loss"] != 0 for m in steps)  # the updates ran


def _ray_setup(extra: list[str]) -> tuple[Setup, Setup]:
    local = build(load_config("calculator_grpo", FAST, smoke=True))
    remote = build(load_config("calculator_grpo", [*FAST, "ray.enabled=true", *extra], True))
    return local, remote


def test_killed_worker_episode_is_replayed_identically_and_counted(cluster):
    """Generation in the generator actor, env steps on the env workers; one worker killed."""
    generator = ["ray.generator_actor=true", "ray.generator_cpus=0.5"]
    local, remote = _ray_setup(["ray.max_episode_retries=1", *generator])
    pool = remote.env_pool
    try:
        assert isinstance(remote.generator, RayGenerator) and remote.generator.pid != os.getpid()
        assert os.getpid() not in pool.worker_pids()
        tasks = local.train_tasks[:2]
        cfg = remote.cfg.rollout

        def killing_actor(victim_slot: int, turns: tuple[int, ...]):
            base = policy_actor(remote.generator, remote.fmt, cfg, seed=3)

            def act(episodes, budgets, turn):
                if turn in turns:  # mid-episode: after a step, before the next one
                    os.kill(pool.worker_pids()[victim_slot], signal.SIGKILL)
                return base(episodes, budgets, turn)

            return act

        envs = pool.make(2)
        out = run_episodes(
            envs, tasks, ["g", "g"], killing_actor(envs[0].slot, (1,)), remote.fmt,
            remote.tokenizer, cfg, 3,
        )  # fmt: skip
        assert pool.take_metrics() == {"env_workers_lost": 1.0, "env_episodes_replayed": 1.0}
        envs_local = make_envs(local.cfg, 2)
        act = policy_actor(local.generator, local.fmt, local.cfg.rollout, seed=3)
        expected = run_episodes(
            envs_local, tasks, ["g", "g"], act, local.fmt, local.tokenizer, local.cfg.rollout, 3
        )
        assert all(len(t.turn_spans) == 2 for t in out)  # the kill really was mid-episode
        for got, want in zip(out, expected, strict=True):
            assert got.token_ids == want.token_ids and got.reward == want.reward

        # An episode that loses its worker more than ray.max_episode_retries times stops the run.
        envs = pool.make(1)
        with pytest.raises(RayError, match=r"lost its env worker 2 times.*max_episode_retries=1"):
            run_episodes(
                envs, tasks[:1], ["g"], killing_actor(envs[0].slot, (0, 1)), remote.fmt,
                remote.tokenizer, cfg, 3,
            )  # fmt: skip
    finally:
        pool.close()


def test_slow_steps_on_different_workers_overlap(cluster):
    """The point of the pool: the steps of a turn run at the same time on different workers."""
    cfg = load_config("calculator_grpo", ["ray.enabled=true", "env.options={step_latency_s: 1.0}"])
    pool = EnvPool(cfg)
    try:
        envs = pool.make(2)
        for env, task in zip(envs, make_tasks(cfg, "eval")[:2], strict=True):
            env.reset(task, seed=0)
        t0 = time.perf_counter()
        results = step_envs(envs, [Action(kind="answer", text="1")] * 2)
        elapsed = time.perf_counter() - t0
        assert all(r.terminated for r in results)
        assert elapsed < 1.9, f"two 1 s steps took {elapsed:.2f} s: they did not overlap"
    finally:
        pool.close()


def test_a_wait_reports_a_gone_cluster_long_before_its_call_timeout(cluster, monkeypatch):
    """A call being waited for checks the cluster every CLUSTER_CHECK_S: once the control store
    stops answering, the run says the cluster is gone (and which checkpoint to resume from) in
    seconds, not after ray.call_timeout_s, because Ray itself ends a driver that lost its
    control store after a minute, with exit status 1 and no such word. The store's silence is
    what is simulated here (the killed cluster is the slow test below); the call is real."""
    from agentic_rl.scale import ray_pool

    cfg = load_config(
        "calculator_grpo",
        ["ray.enabled=true", "ray.call_timeout_s=600", "env.options={step_latency_s: 30.0}"],
    )
    pool = EnvPool(cfg)
    (env,) = pool.make(1)
    env.reset(make_tasks(cfg, "eval")[0], seed=0)
    slow = env.worker.step.remote(env.key, Action(kind="answer", text="1"))  # a 30 s env step
    try:
        monkeypatch.setattr(ray_pool, "CLUSTER_CHECK_S", 0.5)
        # A live cluster: the slices add up to the call timeout, then the worker counts as lost.
        monkeypatch.setattr(pool.cfg.ray, "call_timeout_s", 2.0)
        start = time.monotonic()
        with pytest.raises(ray_pool._WorkerLost, match="GetTimeoutError"):
            pool._wait(slow, "wait for a slow call", lost_ok=True)
        assert 1.9 < time.monotonic() - start < 10
        assert not pool.cluster_lost
        monkeypatch.setattr(pool.cfg.ray, "call_timeout_s", 600.0)
        monkeypatch.setattr(pool, "cluster_alive", lambda: False)
        start = time.monotonic()
        with pytest.raises(RayError, match="the Ray cluster is gone.*no answer while trying"):
            pool._wait(slow, "wait for a slow call", lost_ok=True)
        assert time.monotonic() - start < 10, "the gone cluster was not noticed while waiting"
        assert pool.cluster_lost
    finally:
        pool.cluster_lost = False  # the cluster is alive: let close stop the workers
        monkeypatch.undo()
        pool.close()


def _kill_tree(procs: list[psutil.Process]) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()


@pytest.mark.slow
def test_dead_cluster_is_reported_and_a_rerun_resumes(tmp_path):
    """The trainer starts its own local cluster; it is killed after the first checkpoint."""
    cmd = [
        sys.executable, "-m", "agentic_rl.cli", "train", "calculator_grpo", "--smoke", *FAST,
        f"trainer.out_dir={tmp_path}", "rollout.max_turns=1", "ray.enabled=true",
        # 120 s: the first env call waits for Ray to start its workers, which took over 30 s
        # on a 2-core machine shared with a model run and other tests, and over 60 s with a
        # model run and the whole suite; a dead cluster is still noticed within a slice of the
        # wait (ray_pool.py CLUSTER_CHECK_S), well within the 240 s the test waits.
        "ray.num_cpus=2", "ray.call_timeout_s=120", "env.tool_timeout_s=5",
        # Steps left after the first checkpoint, so the kill lands mid-run even on a slow
        # machine (with 2 steps a loaded machine could finish before the kill took effect).
        "trainer.steps=6",
    ]  # fmt: skip
    run = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run_dir = tmp_path / "calculator_grpo"
    cluster_procs: list[psutil.Process] = []
    try:
        deadline = time.time() + 300
        while latest_checkpoint(run_dir) is None and run.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert run.poll() is None, (run.returncode, run.communicate())
        assert latest_checkpoint(run_dir) is not None
        cluster_procs = psutil.Process(run.pid).children(recursive=True)
        _kill_tree(cluster_procs)  # every Ray process of the run: GCS, raylet, workers
        _, err = run.communicate(timeout=240)
    finally:
        if run.poll() is None:
            run.kill()
        _kill_tree(cluster_procs)
    assert run.returncode == 2, err[-4000:]  # the run's own account of what it met
    assert "the Ray cluster is gone" in err, err[-4000:]
    # The run may have saved another step before the kill reached every process: the message
    # names whichever checkpoint is the last one, and the rerun resumes from that one.
    last = latest_checkpoint(tmp_path / "calculator_grpo")
    assert last is not None and last.name < "step_000006"
    assert "resume from the last checkpoint" in err and last.name in err
    assert not (tmp_path / "calculator_grpo" / "summary.json").exists()

    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert "resuming from" in rerun.stdout and last.name in rerun.stdout
    summary = json.loads((tmp_path / "calculator_grpo" / "summary.json").read_text())
    assert summary["steps"] == 6


def test_generator_actor_sees_the_pictures(cluster, tiny_vlm_dir, tmp_path):
    """A vision-language policy in the generator actor: pictures travel as references and the
    actor's tokens and logprobs are the in-process generator's for the same pictures (and
    another picture changes them)."""
    from PIL import Image

    from agentic_rl.backends.hf import HFGenerator
    from agentic_rl.config.rollout import ModelConfig
    from agentic_rl.model.images import save_image
    from agentic_rl.model.load import load_policy
    from agentic_rl.model.tokens import encode_prompt
    from agentic_rl.model.vision import image_placeholder
    from agentic_rl.types import SamplingParams

    policy, tok = load_policy(ModelConfig(name=str(tiny_vlm_dir)))
    red = save_image(Image.new("RGB", (32, 32), (255, 0, 0)), tmp_path)
    blue = save_image(Image.new("RGB", (32, 32), (0, 0, 255)), tmp_path)
    ids = encode_prompt(tok, [{"role": "user", "content": "Colour?" + image_placeholder(tok)(red)}])
    cfg = load_config(None, [f"model.name={tiny_vlm_dir}"])
    remote = RayGenerator(cfg, policy, tok)
    params = SamplingParams(max_new_tokens=4, temperature=1.0, seed=3)
    got = remote.generate([ids, ids], params, images=[[red], [blue]])
    want = HFGenerator(policy, tok, max_batch_size=remote.max_batch_size).generate(
        [ids, ids], params, images=[[red], [blue]]
    )
    assert [c.token_ids for c in got] == [c.token_ids for c in want]
    for a, b in zip(got, want, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
    assert got[0].logprobs[0] != pytest.approx(got[1].logprobs[0], abs=1e-6)  # the pixels act
