"""Starting a sandbox worker under bubblewrap (`bwrap`, Debian's `bubblewrap`), parent side.

The worker gets new user (when not root), PID, network, IPC, UTS and cgroup namespaces and a
file system of its own: an empty read-only root holding read-only binds of /usr, /etc, the
Python installation (prefixes, standard library, site-packages), this package's sandbox
modules and `SandboxLimits.ro_paths`; a fresh /proc and /dev; and size-limited tmpfs mounts for
/sandbox (the working directories), /tmp and /dev/shm. Nothing else of the host exists in
there: not the home directory, not the project, not the checkpoints, not /run.

The worker runs as PID 1 of its namespace (`--as-pid-1`): sandboxed code cannot kill it (the
kernel drops signals to a namespace's init from inside unless it handles them), every orphan
comes back to it, `kill(-1)` from it sweeps every leftover, and when it dies the kernel kills
whatever is left. `--die-with-parent` ends it with the pool, `--new-session` keeps it off the
caller's terminal.

Not root: bwrap runs as the caller, inside an unprivileged user namespace (`--disable-userns`
then stops the code from nesting another). Root: bwrap runs as root without a user namespace
and keeps only CAP_SETUID/CAP_SETGID, which the worker uses at once to become its own
unprivileged uid (one per worker, from `SandboxLimits.uid_base`).
"""

from __future__ import annotations

import functools
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import threading

SANDBOX_DIR = os.path.dirname(os.path.abspath(__file__))
WORK_DIR = "/sandbox"
SHM_BYTES = 16 << 20
PATH = "/usr/local/bin:/usr/bin:/bin"
_SYSTEM_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_probe_lock = threading.Lock()
_probes: dict[tuple, tuple[bool, str]] = {}


def find_bwrap() -> str | None:
    """Path of the bwrap executable, or None."""
    return shutil.which("bwrap", path=f"{os.environ.get('PATH', '')}:{PATH}:/usr/sbin:/sbin")


def _outermost(paths: set[str]) -> list[str]:
    return sorted(p for p in paths if not any(p.startswith(q + "/") for q in paths if q != p))


@functools.lru_cache(maxsize=8)
def python_binds(extra: tuple[str, ...] = ()) -> tuple[tuple[str, str], ...]:
    """(source, destination) pairs that make this interpreter and its packages importable.

    Each directory is bound at its real path and, where a symlink leads to it, at the path
    Python knows it by too. Directories under /usr and /etc are already there.
    """
    paths = sysconfig.get_paths()
    candidates = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    candidates += [os.path.dirname(os.path.realpath(sys.executable)), SANDBOX_DIR]
    candidates += [paths.get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    candidates += [*site.getsitepackages(), *extra]
    wanted: dict[str, str] = {}  # destination -> source
    for path in candidates:
        if not path or not os.path.isdir(path):
            continue
        real = os.path.realpath(path)
        for dest in {real, os.path.abspath(path)}:
            if not dest.startswith(("/usr/", "/etc/")) and dest not in ("/usr", "/etc"):
                wanted[dest] = real if dest == real else os.path.abspath(path)
    keep = _outermost(set(wanted))
    return tuple((wanted[dest], dest) for dest in keep)


def bwrap_argv(
    bwrap: str,
    command: list[str],
    *,
    as_root: bool,
    disk_mb: int,
    ro_paths: tuple[str, ...] = (),
    seccomp_fd: int | None = None,
    info_fd: int | None = None,
    disable_userns: bool = True,
) -> list[str]:
    """The bwrap command line that runs `command` in the sandbox (see the module docstring)."""
    args = [bwrap]
    if as_root:
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        args += ["--unshare-user"] + (["--disable-userns"] if disable_userns else [])
    args += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"]
    args += ["--unshare-cgroup-try", "--as-pid-1", "--die-with-parent", "--new-session"]
    args += ["--hostname", "sandbox", "--clearenv", "--setenv", "PATH", PATH]
    args += ["--setenv", "LANG", "C.UTF-8", "--ro-bind", "/usr", "/usr"]
    for name in _SYSTEM_LINKS:
        path = "/" + name
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    args += ["--ro-bind", "/etc", "/etc"]
    disk = str(int(disk_mb) << 20)
    # /tmp's tmpfs before Python's binds: a virtualenv that lives under /tmp (a clone there)
    # is bound on top of the tmpfs instead of being hidden by it.
    args += ["--perms", "1777", "--size", disk, "--tmpfs", "/tmp"]
    made = {"/", "/usr", "/etc", "/tmp"}
    for source, dest in python_binds(tuple(ro_paths)):
        # bwrap makes missing parents with the caller's umask (0700 under umask 077, which
        # the dropped uid could not traverse): make them 0555 explicitly, readable and
        # traversable but not writable (those under /tmp sit on its writable tmpfs).
        parts = dest.strip("/").split("/")
        for i in range(1, len(parts)):
            parent = "/" + "/".join(parts[:i])
            if parent not in made:
                made.add(parent)
                args += ["--perms", "0555", "--dir", parent]
        args += ["--ro-bind", source, dest]
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += ["--perms", "1777", "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm"]
    args += ["--perms", "1777", "--size", disk, "--tmpfs", WORK_DIR]
    # /dev stays a read-only tmpfs (its device nodes still work): not a place to keep files.
    args += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", WORK_DIR]
    if seccomp_fd is not None:
        args += ["--add-seccomp-fd", str(seccomp_fd)]
    if info_fd is not None:
        args += ["--info-fd", str(info_fd)]
    return [*args, "--", *command]


def probe(bwrap: str, as_root: bool, disk_mb: int, seccomp: bytes | None) -> tuple[bool, str]:
    """Whether bwrap can start Python in the sandbox here: (True, flags) or (False, why).
    Cached per process. Retries without --disable-userns (kernels before 5.? lack it)."""
    key = (bwrap, as_root, seccomp is not None)
    with _probe_lock:
        if key in _probes:
            return _probes[key]
        error = ""
        for disable_userns in (True, False) if not as_root else (False,):
            fds = []
            try:
                seccomp_fd = None
                if seccomp is not None:
                    seccomp_fd = seccomp_memfd(seccomp)
                    fds.append(seccomp_fd)
                argv = bwrap_argv(
                    bwrap,
                    [sys.executable, "-I", "-c", "import os; os.listdir('/sandbox')"],
                    as_root=as_root,
                    disk_mb=min(disk_mb, 16),
                    seccomp_fd=seccomp_fd,
                    disable_userns=disable_userns,
                )
                done = subprocess.run(argv, capture_output=True, pass_fds=fds, timeout=60)
                if done.returncode == 0:
                    _probes[key] = (True, "disable_userns" if disable_userns else "")
                    return _probes[key]
                error = done.stderr.decode(errors="replace").strip()[-500:]
            except (OSError, subprocess.SubprocessError) as exc:
                error = f"{type(exc).__name__}: {exc}"
            finally:
                for fd in fds:
                    os.close(fd)
        _probes[key] = (False, error or "bwrap failed")
        return _probes[key]


def seccomp_memfd(bpf: bytes) -> int:
    """A file descriptor holding the BPF program, at offset 0 (bwrap reads it to the end)."""
    fd = os.memfd_create("agentic-rl-seccomp")
    os.write(fd, bpf)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
