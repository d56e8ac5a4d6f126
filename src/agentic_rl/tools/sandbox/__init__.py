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
| file system | a mount namespace: every mount re-bound read-only, a private tmpfs (disk_mb) for the working dirs; directories others cannot enter (e.g. /root) are covered by an empty tmpfs with only Python bound back | the unprivileged uid still cannot write root's files, but world-writable places (/tmp, /dev/shm) stay writable |
| environment | workers are exec'd with an empty environment; children get a minimal one | - |
| leftovers | kill(-1) as the sandbox uid after every execution; the worker is a subreaper | not root: the process group and reparented orphans are killed; a process that escaped both survives |

No seccomp filter and no PID namespace: sandboxed code can list host processes in /proc (but not
read their environment or memory, being another uid).
"""

from agentic_rl.tools.sandbox.limits import ExecutionResult, SandboxLimits
from agentic_rl.tools.sandbox.pool import SandboxPool

__all__ = ["ExecutionResult", "SandboxLimits", "SandboxPool"]
