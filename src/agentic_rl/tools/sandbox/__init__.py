"""A Python sandbox for model-written code: separate processes under OS limits, a warm pool.

Each worker is started once, isolated, and forks a fresh child per execution (`pool.py` keeps
them warm, `worker_process.py` starts and talks to one, `_worker.py` runs inside it). How it is
isolated depends on what the machine allows, tried in this order
(`SandboxPool.isolation["mode"]` says which one is in force, with a flag per mechanism):

1. "bwrap": bubblewrap (Debian's `bubblewrap`; `_bwrap.py`) with new user (when not root),
   PID, network, IPC, UTS, cgroup and mount namespaces; the worker is PID 1 of its namespace.
2. "namespaces": root without a working bwrap: network and mount namespaces the worker makes
   itself, and a uid of its own per worker (`_isolation.py`).
3. Nothing: then the pool refuses to start (SandboxUnavailableError, saying how to get
   isolation) unless the user sets `SandboxLimits(allow_unisolated=True)`,
   `agentic-rl serve-sandbox --allow-unisolated` or AGENTIC_RL_SANDBOX_ALLOW_UNISOLATED=1;
   "none" then runs the code as the trainer's own user with only the rlimits below.

What holds where ("trainer" = the process that owns the pool, and its user):

| | bwrap, not root | bwrap, root | root, no bwrap | none (allowed) |
|---|---|---|---|---|
| runs as | the trainer's uid inside a user namespace, no capabilities | a uid of its own per worker (`uid_base`..) | a uid of its own per worker | the trainer's uid |
| trainer's files (home, project, checkpoints, .venv) | absent: only /usr, /etc and Python are bound, read-only | absent | visible read-only, as permissions allow others (0600 files unreadable) | read and write |
| writable | private tmpfs /sandbox, /tmp, /dev/shm (`disk_mb`), wiped after each run | same | private tmpfs working dirs and /dev/shm; the rest read-only | everything the user may write |
| network | own namespace, loopback only: nothing outside reachable, ctypes and subprocesses included | same | same | sockets blocked inside Python only (ctypes, subprocesses get through) |
| host processes | invisible (own PID namespace); the trainer cannot be signalled | same | listed in /proc (command lines; not environ or memory: another uid); cannot be signalled | visible, can be signalled |
| the worker | PID 1 (code cannot kill it), not dumpable (no ptrace, no /proc/1/mem) | same | another uid (root) | same uid: code can kill it (the pool restarts it) |
| system calls | seccomp filter (`_seccomp.py`): EPERM for ptrace, mount, unshare/setns, namespaces in clone, bpf, io_uring, keyctl, perf, module and clock calls; no nested user namespace | seccomp filter | seccomp filter on the child | seccomp filter on the child |
| processes | RLIMIT_NPROC, counted per user namespace (Linux 5.14+; before, the user's processes) | RLIMIT_NPROC on the worker's uid | RLIMIT_NPROC on the worker's uid | RLIMIT_NPROC counts all the user's processes |
| memory | RLIMIT_AS per process; plus cgroup v2 memory.max and pids.max over the worker where a delegated cgroup is writable (`_cgroup.py`) | same | same | same |
| time, files | RLIMIT_CPU (SIGXCPU, SIGKILL 1 s later), wall-time kill, RLIMIT_FSIZE, RLIMIT_NOFILE, no core dumps | same | same | same |
| leftovers | kill(-1) from PID 1 after each run; the namespace dies with the worker | same | kill(-1) as the sandbox uid | process group and reparented orphans (a process that escaped both survives) |
| SysV IPC | own IPC namespace, emptied after each run | same | the sandbox uid's objects removed after each run | - |
| environment | empty: the parent's variables never reach the worker; children get a minimal one | same | same | same |

Not covered anywhere: kernel bugs (the kernel is shared; a VM or gVisor is the next step),
world-readable files under /etc, and CPU or memory within the limits given. The seccomp filter
needs libseccomp (`pyseccomp`, a dependency; Debian's `libseccomp2`); without it
`isolation["seccomp"]` is False and the namespaces stand alone. cgroup limits need a cgroup v2
subtree delegated to the trainer (e.g. `systemd-run --user --scope -p Delegate=yes ...`, or
AGENTIC_RL_SANDBOX_CGROUP=<dir>); elsewhere `isolation["cgroup_error"]` says why not.

As a service (`serve-sandbox`, `server.py`), `/run` is remote code execution by design: bound to
a non-loopback address it refuses to start without a bearer token (`--auth-token` or
AGENTIC_RL_API_TOKEN; `SandboxClient` sends it), bodies are size-checked before they are read,
deeply nested JSON is a 400, and at most `--max-inflight` requests (default 8 per worker) are
queued before the next gets 503 (tools/http_guard.py). A service that is unreachable, failing
or busy raises `SandboxUnreachable`, an infrastructure error: the episode is replayed or
dropped, never trained on (train/collect.py).
"""

from agentic_rl.tools.sandbox.client import PythonTool, SandboxClient, format_result
from agentic_rl.tools.sandbox.limits import ExecutionResult, SandboxLimits
from agentic_rl.tools.sandbox.pool import SandboxPool
from agentic_rl.tools.sandbox.server import SandboxServer, serve_sandbox
from agentic_rl.tools.sandbox.worker_process import SandboxUnavailableError

__all__ = [
    "ExecutionResult",
    "PythonTool",
    "SandboxClient",
    "SandboxLimits",
    "SandboxPool",
    "SandboxServer",
    "SandboxUnavailableError",
    "format_result",
    "serve_sandbox",
]
