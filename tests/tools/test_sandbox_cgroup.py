"""cgroup v2 limits for sandbox workers, on a fake cgroup tree (hosts with a delegated cgroup v2
are rare in CI; the kernel side is the kernel's). The worker cgroup gets memory, swap and pids
limits, and the worker's pid is moved in."""

from __future__ import annotations

import os

from agentic_rl.tools.sandbox import _cgroup


def test_worker_cgroup_under_a_delegated_parent(tmp_path, monkeypatch):
    parent = tmp_path / "delegated"
    parent.mkdir()
    (parent / "cgroup.subtree_control").write_text("cpu memory pids\n")
    monkeypatch.setenv(_cgroup.CGROUP_ENV, str(parent))
    found, why = _cgroup.find_parent()
    assert (found, why) == (str(parent), "")
    group = _cgroup.WorkerCgroup(found, "w0", memory_mb=256, pids=20)
    limit = (256 + _cgroup.WORKER_OVERHEAD_MB) << 20
    assert (parent / "w0" / "memory.max").read_text() == str(limit)
    assert (parent / "w0" / "memory.swap.max").read_text() == "0"
    assert (parent / "w0" / "pids.max").read_text() == "20"
    group.add(os.getpid())
    assert (parent / "w0" / "cgroup.procs").read_text() == str(os.getpid())


def test_no_usable_cgroup_is_reported_not_fatal(tmp_path, monkeypatch):
    parent = tmp_path / "plain"
    parent.mkdir()
    (parent / "cgroup.subtree_control").write_text("cpu\n")  # memory, pids not enabled
    monkeypatch.setenv(_cgroup.CGROUP_ENV, str(parent))
    found, why = _cgroup.find_parent()
    assert found is None and "could not enable memory, pids" in why
    monkeypatch.setenv(_cgroup.CGROUP_ENV, str(tmp_path / "missing"))
    found, why = _cgroup.find_parent()
    assert found is None and "no delegated cgroup v2" in why
