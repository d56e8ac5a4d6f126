"""Operating-system isolation for the sandbox: namespaces, a read-only file system, rlimits,
an unprivileged uid, a seccomp filter and sweeping leftover processes.

Standard library only, imported by the worker as a top-level module (not through the
agentic_rl package, whose imports would bloat every forked child). Under bubblewrap most of
this is bwrap's work and the worker only drops privileges, sets rlimits and sweeps; the
namespace and mount helpers here are the root-only path used where bwrap is missing. Each
mechanism is tried and its outcome recorded in `isolation` (see the package docstring).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import resource
import shutil
import signal
import sys
import time
from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC = 32, 4096, 16384
MS_NOATIME, MS_NODIRATIME, MS_PRIVATE, MS_RELATIME = 1024, 2048, 1 << 18, 1 << 21
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
IPC_RMID = 0
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
# statvfs flags -> mount flags: a bind remount replaces the per-mount flags, so keep these.
_KEEP_FLAGS = {
    os.ST_NOSUID: MS_NOSUID,
    os.ST_NODEV: MS_NODEV,
    os.ST_NOEXEC: MS_NOEXEC,
    os.ST_NOATIME: MS_NOATIME,
    os.ST_NODIRATIME: MS_NODIRATIME,
    os.ST_RELATIME: MS_RELATIME,
}
LOCK_DIR = "/tmp/agentic-rl-sandbox-uids"

_libc: ctypes.CDLL | None = None


def libc() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
        _libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
    return _libc


def _check(ret: int, what: str) -> None:
    if ret != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def _b(value: str | None) -> bytes | None:
    return None if value is None else os.fsencode(value)


def unshare(flags: int) -> None:
    # os.unshare only exists from Python 3.12; the libc call works on every version.
    _check(libc().unshare(ctypes.c_int(flags)), "unshare")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    _check(
        libc().mount(_b(source), _b(target), _b(fstype), flags, _b(data) if data else None),
        f"mount {target}",
    )


def prctl(option: int, arg: int, arg3: int = 0) -> None:
    _check(libc().prctl(option, arg, arg3, 0, 0), f"prctl {option}")


def close_fds_from(low: int) -> None:
    """Close every descriptor >= low (close_range(2), else a /proc/self/fd scan)."""
    try:
        if libc().close_range(ctypes.c_uint(low), ctypes.c_uint(0xFFFFFFFF), 0) == 0:
            return
    except AttributeError:
        pass
    for name in os.listdir("/proc/self/fd"):
        if int(name) >= low:
            with contextlib.suppress(OSError):
                os.close(int(name))


# -- the worker's one-time setup -------------------------------------------------------------


def _mount_points() -> list[str]:
    points = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            raw = line.split()[4]  # spaces and friends are octal escapes (\040)
            points.append(raw.encode().decode("unicode_escape").encode("latin-1").decode())
    return points


def blocked_ancestor(path: str) -> str | None:
    """The highest ancestor of `path` that others may not traverse (mode without o+x)."""
    parts = path.strip("/").split("/")
    for i in range(len(parts)):
        ancestor = "/" + "/".join(parts[:i])
        if ancestor != "/" and not os.stat(ancestor).st_mode & 0o001:
            return ancestor
    return None


def _needed_paths(extra: list[str]) -> list[str]:
    """Directories the unprivileged child must read: the interpreter, its prefixes, sys.path."""
    candidates = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    candidates += [os.path.dirname(os.path.realpath(sys.executable)), *sys.path, *extra]
    found = {os.path.realpath(p) for p in candidates if p and os.path.isdir(p)}
    # Keep only the outermost: binding a parent already brings its children along.
    return sorted(p for p in found if not any(p.startswith(q + "/") for q in found if q != p))


def _expose_hidden(paths: list[str]) -> list[str]:
    """Cover each directory others cannot traverse (e.g. /root, mode 0700, holding pyenv) with an
    empty tmpfs and bind only the needed paths back: the child can import Python and nothing
    else from there. Returns the covered directories."""
    groups: dict[str, list[str]] = {}
    for path in paths:
        ancestor = blocked_ancestor(path)
        if ancestor is not None:
            groups.setdefault(ancestor, []).append(path)
    for ancestor, inside in groups.items():
        handles = {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p in inside}  # before covering
        try:
            mount("tmpfs", ancestor, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
            for path, fd in handles.items():
                os.makedirs(path, mode=0o755, exist_ok=True)
                mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        finally:
            for fd in handles.values():
                os.close(fd)
    return sorted(groups)


def _remount_readonly() -> list[str]:
    """Bind-remount every mount read-only except /proc and /sys. Returns the failures."""
    failed = []
    for point in _mount_points():
        if point in ("/proc", "/sys") or point.startswith(("/proc/", "/sys/")):
            continue
        try:
            current = os.statvfs(point).f_flag
            keep = sum(ms for st, ms in _KEEP_FLAGS.items() if current & st)
            mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep)
        except OSError:
            failed.append(point)
    return failed


def setup_worker(
    base_dir: str, disk_mb: int, extra_paths: list[str], namespaces: bool = True
) -> dict[str, Any]:
    """Once per worker, as early as possible: network and mount namespaces, a read-only view of
    the file system with a private tmpfs at `base_dir`. Returns what took effect.
    `namespaces=False` skips both namespaces (to exercise the fallbacks)."""
    info: dict[str, Any] = {"root": os.geteuid() == 0, "netns": False, "private_shm": False}
    try:
        prctl(PR_SET_CHILD_SUBREAPER, 1)  # orphaned grandchildren come to us to be reaped
        info["subreaper"] = True
    except OSError:
        info["subreaper"] = False
    info.update(mountns=False, readonly_fs=False, hidden_dirs=[])
    if not namespaces:
        return info
    try:
        unshare(CLONE_NEWNET)  # a fresh namespace has only a loopback, and it is down
        info["netns"] = True
    except OSError as exc:
        info["netns_error"] = str(exc)
    try:
        unshare(CLONE_NEWNS)
        mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we do leaks to the host
        info["mountns"] = True
    except OSError as exc:
        info["mountns_error"] = str(exc)
        return info
    try:
        info["hidden_dirs"] = _expose_hidden(_needed_paths(extra_paths))
    except OSError as exc:
        info["hidden_error"] = str(exc)
    failed = _remount_readonly()
    info["readonly_fs"] = "/" not in failed
    info["readonly_failed"] = failed
    try:  # a private, wiped /dev/shm: multiprocessing's semaphores live there
        mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=1777,size=16m")
        info["private_shm"] = True
    except OSError:
        info["private_shm"] = False
    options = f"size={int(disk_mb)}m,mode=0711,nr_inodes={max(1024, int(disk_mb) * 64)}"
    try:
        mount("tmpfs", base_dir, "tmpfs", MS_NOSUID | MS_NODEV, options)
        info["tmpfs"] = True
    except OSError as exc:
        info["tmpfs"], info["tmpfs_error"] = False, str(exc)
        mount(base_dir, base_dir, None, MS_BIND)  # at least keep the base writable
        mount(None, base_dir, None, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV)
    return info


def acquire_uid(base: int, count: int, preferred: int) -> tuple[int, int]:
    """Lock a uid from [base, base + count) for one worker; returns (uid, lock fd).

    The pool holds the lock while the worker lives and the kernel drops it if the pool dies, so
    a crashed pool never leaks uids; a uid's next owner finds nothing left of its last one
    (under bwrap everything died with the PID namespace; otherwise the worker sweeps it).
    """
    os.makedirs(LOCK_DIR, mode=0o700, exist_ok=True)
    for i in range(count):
        uid = base + (preferred + i) % count
        fd = os.open(f"{LOCK_DIR}/{uid}.lock", os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return uid, fd
        except BlockingIOError:
            os.close(fd)
    raise RuntimeError(f"all {count} sandbox uids from {base} are in use")


# -- per execution ----------------------------------------------------------------------------


def apply_rlimits(limits: dict[str, Any], cpu_s: int) -> None:
    """Set the child's rlimits (soft = hard, so the code cannot raise them back)."""
    mb = 1 << 20
    wanted = {
        resource.RLIMIT_CPU: (cpu_s, cpu_s + 1),  # SIGXCPU at the soft limit, SIGKILL at hard
        resource.RLIMIT_AS: int(limits["memory_mb"]) * mb,
        resource.RLIMIT_NPROC: int(limits["nproc"]),
        resource.RLIMIT_FSIZE: int(limits["fsize_mb"]) * mb,
        resource.RLIMIT_NOFILE: int(limits["nofile"]),
        resource.RLIMIT_CORE: 0,
    }
    for which, value in wanted.items():
        soft, hard = value if isinstance(value, tuple) else (value, value)
        _, current_hard = resource.getrlimit(which)
        if current_hard != resource.RLIM_INFINITY:  # unprivileged: cannot go above the hard
            soft, hard = min(soft, current_hard), min(hard, current_hard)
        resource.setrlimit(which, (soft, hard))


def drop_privileges(uid: int) -> None:
    """Become `uid` for good (real, effective and saved ids; no supplementary groups)."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise RuntimeError("could not drop privileges")


def no_new_privs() -> None:
    """Setuid binaries cannot raise the child's privileges after this."""
    with contextlib.suppress(OSError):
        prctl(PR_SET_NO_NEW_PRIVS, 1)


def set_dumpable(flag: bool) -> None:
    """Not dumpable: processes of the same uid (the sandboxed code, under bwrap) can neither
    ptrace this one nor open its /proc files (memory, fds, environment)."""
    prctl(PR_SET_DUMPABLE, int(flag))


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def load_bpf(program: bytes) -> None:
    """Install a seccomp filter (a compiled BPF program, 8 bytes per instruction) on this
    process and its future children; needs no_new_privs (or CAP_SYS_ADMIN) first."""
    buffer = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog))


def nproc_per_user_namespace() -> bool:
    """Whether RLIMIT_NPROC counts a user namespace's processes apart (Linux 5.14+ ucounts):
    then, under bwrap's user namespace, it bounds the execution's own processes only."""
    try:
        major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (5, 14)


def sweep_namespace() -> None:
    """As PID 1 of a PID namespace: kill every other process in it (kill(-1) spares only us)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(-1, signal.SIGKILL)


def block_sockets() -> None:
    """Fallback where network namespaces are not permitted: make socket creation in this
    interpreter raise. Weaker than a namespace: ctypes or an exec'd program can still reach the
    network. Subclasses (not plain functions) keep `class X(socket.socket)` in ssl working."""
    import _socket
    import socket

    def deny(*_args: Any, **_kwargs: Any) -> Any:
        raise PermissionError(errno.EACCES, "network access is disabled in this sandbox")

    class BlockedSocket(socket.socket):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            deny()

    class BlockedRawSocket(_socket.socket):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            deny()

    socket.socket = socket.SocketType = BlockedSocket  # type: ignore[misc]
    _socket.socket = _socket.SocketType = BlockedRawSocket  # type: ignore[misc]
    for name in ("create_connection", "create_server", "socketpair", "fromfd"):
        setattr(socket, name, deny)
    _socket.socketpair = deny  # type: ignore[attr-defined]


def sweep_uid(uid: int) -> None:
    """Kill every process running as `uid` (kill(-1) from a helper that becomes that uid):
    catches daemonised children and fork bombs that left the process group."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)  # all processes we may signal, except ourselves
        except BaseException:
            pass
        os._exit(0)
    os.waitpid(pid, 0)


def _children_of(parent: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if int(fields[1]) == parent:
            found.append(int(name))
    return found


def kill_descendants(group: int) -> None:
    """Unprivileged sweep: kill the child's process group and every process reparented to us
    (we are a subreaper). Processes that escaped both can survive: a documented weakness."""
    for _ in range(3):
        with contextlib.suppress(OSError):
            os.killpg(group, signal.SIGKILL)
        children = _children_of(os.getpid())
        for pid in children:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if not children:
            return


def wipe_dir(path: str) -> None:
    """Delete everything inside `path` (the private /dev/shm after each execution)."""
    for name in os.listdir(path):
        full = os.path.join(path, name)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(full)


def remove_sysv_ipc(uid: int | None) -> None:
    """Delete the System V shared memory segments, message queues and semaphore sets that
    `uid` owns (None: every one in our IPC namespace): they outlive processes, so one run
    could otherwise leave data for the next."""
    lib = libc()
    for kind, call in (("shm", lib.shmctl), ("msg", lib.msgctl), ("sem", lib.semctl)):
        try:
            with open(f"/proc/sysvipc/{kind}", encoding="ascii") as f:
                rows = [line.split() for line in f.readlines()[1:]]
        except OSError:
            continue
        header = {"shm": 7, "msg": 7, "sem": 4}[kind]  # column of the owner's uid
        for row in rows:
            if len(row) > header and (uid is None or int(row[header]) == uid):
                if kind == "sem":
                    call(ctypes.c_int(int(row[1])), 0, IPC_RMID)
                else:
                    call(ctypes.c_int(int(row[1])), IPC_RMID, None)


def has_children() -> bool:
    """Whether any child (running or a zombie) remains. We are a subreaper, so every live
    descendant of a finished execution is our child or below one: none left means no sweep."""
    try:
        os.waitpid(-1, os.WNOHANG)  # may reap one zombie: then there were children
    except ChildProcessError:
        return False
    return True


def reap(deadline_s: float = 0.5) -> None:
    """Collect every exited child (the killed leftovers) so zombies do not count toward NPROC."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if time.monotonic() > end:
                return
            time.sleep(0.002)
