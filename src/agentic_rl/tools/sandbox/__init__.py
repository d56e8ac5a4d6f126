"""A Python sandbox for model-written code: separate processes under OS limits, a warm pool.

What is enforced, and how (each outcome is reported in `SandboxPool.isolation`):

| limit | mechanism | where it is not permitted |
|---|---|---|
| wall time | the worker kills the child's process group, then every process of its uid | - |
| CPU time | RLIMIT_CPU (SIGXCPU, SIGKILL one second later) | - |
| memory | RLIMIT_AS: allocations beyond it raise MemoryError | - |
| processes | RLIMIT_NPROC on a per-worker unprivileged uid (root ignores NPROC) | not root: the limit counts all of the user's processes |
| file size, open files | RLIMIT_FSIZE (EFBIG, not a kill), RLIMIT_NOFILE | - |
| network | a new network namespace per worker: only a loopback, and it is down | sockets are blocked inside the interpreter (weaker: ctypes or an exec'd program still connect) |
| file system | a mount namespace: every mount re-bound read-only, a private tmpfs (disk_mb) for the working dirs, a private /dev/shm wiped after each run (multiprocessing needs it); directories others cannot enter (e.g. /root, holding pyenv) are covered by an empty tmpfs with only Python bound back | the unprivileged uid still cannot write root's files, but world-writable places (/tmp, /dev/shm) stay writable, and a Python installed under such a directory can only use the preloaded modules |
| environment | workers are exec'd with an empty environment; children get a minimal one | - |
| leftovers | the worker is a subreaper: any child left after the cell means a kill(-1) as the sandbox uid; on a timeout always | not root: the process group and reparented orphans are killed; a process that escaped both survives |
| privileges | PR_SET_NO_NEW_PRIVS (setuid binaries cannot elevate), no supplementary groups | - |

Not done: no seccomp filter, no PID namespace (code can list host processes and read their
command lines in /proc, but not their environment or memory, being another uid), no cgroup
(RLIMIT_AS bounds each process, not the sum over NPROC processes).
"""

from agentic_rl.tools.sandbox.client import PythonTool, SandboxClient, format_result
from agentic_rl.tools.sandbox.limits import ExecutionResult, SandboxLimits
from agentic_rl.tools.sandbox.pool import SandboxPool
from agentic_rl.tools.sandbox.server import SandboxServer, serve_sandbox

__all__ = [
    "ExecutionResult",
    "PythonTool",
    "SandboxClient",
    "SandboxLimits",
    "SandboxPool",
    "SandboxServer",
    "format_result",
    "serve_sandbox",
]
