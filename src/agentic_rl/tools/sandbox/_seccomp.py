"""The sandbox's seccomp filter, compiled once per process by libseccomp (parent side).

libseccomp is reached through `pyseccomp` (PyPI, ctypes over Debian's `libseccomp2`, which apt
itself depends on). The official binding, Debian's `python3-seccomp`, is a C extension built for
Debian's own python3 and installed outside any virtualenv, so a venv on another interpreter
(pyenv, conda, uv) cannot import it; it is used where importable. The
filter allows everything except what sandboxed code never needs and what an escape or an
attack on its neighbours would use, each answered with EPERM (a denylist in the spirit of
Docker's default profile, whose allowlist would break ordinary programs more often):

- debugging other processes: ptrace, process_vm_readv/writev, kcmp;
- new namespaces and mounts: unshare, setns, clone with a CLONE_NEW* flag, mount, umount2,
  pivot_root, chroot and the new mount API (open_tree, move_mount, fsopen, fsmount, ...);
  clone3 answers ENOSYS (its flags sit in memory a filter cannot read), so libc falls back to
  clone, whose flags are checked;
- kernel attack surface: bpf, perf_event_open, userfaultfd, io_uring, keyctl and the key
  syscalls, open_by_handle_at, module loading, kexec, reboot, swap, quotas, clock setting,
  acct, syslog, ioperm/iopl, TIOCSTI (typing into a terminal).

Foreign system-call ABIs (i386 or x32 calls from an x86-64 process) kill the process
(libseccomp's default for a foreign architecture). The compiled BPF program is handed to
bubblewrap (`--add-seccomp-fd`) or loaded by the worker's child with prctl (`load_bpf` in
_isolation.py) on the other paths.
"""

from __future__ import annotations

import errno
import functools
import os
from typing import Any

CLONE_NEW_FLAGS = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
    0x00000080,  # CLONE_NEWTIME
)
TIOCSTI = 0x5412
DENIED = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "keyctl",
    "add_key",
    "request_key",
    "open_by_handle_at",
    "name_to_handle_at",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "quotactl",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "acct",
    "syslog",
    "ioperm",
    "iopl",
    "lookup_dcookie",
    "vhangup",
    "uselib",
)


def _library() -> Any:
    try:
        import seccomp  # the official binding (Debian: python3-seccomp)

        return seccomp
    except ImportError:
        import pyseccomp  # ctypes over libseccomp.so.2; raises if the library is missing

        return pyseccomp


@functools.lru_cache(maxsize=1)
def filter_bpf() -> tuple[bytes | None, str]:
    """(compiled BPF program, "") or (None, why not). Built once per process."""
    try:
        sc = _library()
    except (ImportError, OSError, RuntimeError) as exc:
        return None, f"no libseccomp binding ({type(exc).__name__}: {exc}); pip install pyseccomp"
    try:
        deny = sc.ERRNO(errno.EPERM)
        filt = sc.SyscallFilter(sc.ALLOW)
        skipped = []
        for name in DENIED:
            try:
                filt.add_rule(deny, name)
            except (OSError, ValueError, RuntimeError):
                skipped.append(name)  # not a system call on this architecture
        for flag in CLONE_NEW_FLAGS:
            filt.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
        filt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        filt.add_rule(deny, "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, TIOCSTI))
        fd = os.memfd_create("agentic-rl-seccomp", os.MFD_CLOEXEC)
        try:

            class _File:
                def fileno(self) -> int:
                    return fd

            filt.export_bpf(_File())
            os.lseek(fd, 0, os.SEEK_SET)
            chunks = []
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
        finally:
            os.close(fd)
    except Exception as exc:  # a broken libseccomp must not stop the sandbox; it is reported
        return None, f"libseccomp failed: {type(exc).__name__}: {exc}"
    bpf = b"".join(chunks)
    if not bpf or len(bpf) % 8:
        return None, f"libseccomp exported an invalid program ({len(bpf)} bytes)"
    return bpf, ""
