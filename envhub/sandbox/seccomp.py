"""The seccomp filter the local backend hands to bubblewrap (`--seccomp FD`).

Hand-written rather than built with libseccomp: it is a fixed deny-list of about forty x86-64 system
calls (a few dozen BPF instructions), and libseccomp's Python bindings are not published on PyPI in a
maintained form. Denied calls fail with EPERM, so well-behaved programs that probe for a feature
(e.g. io_uring) fall back instead of dying; a foreign architecture or the x32 ABI kills the process.
"""

from __future__ import annotations

import os
import platform
import struct

AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000
EPERM = 1

_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06

DENIED_X86_64: dict[str, int] = {
    "ptrace": 101,
    "syslog": 103,
    "personality": 135,
    "vhangup": 153,
    "pivot_root": 155,
    "acct": 163,
    "mount": 165,
    "umount2": 166,
    "swapon": 167,
    "swapoff": 168,
    "reboot": 169,
    "iopl": 172,
    "ioperm": 173,
    "init_module": 175,
    "delete_module": 176,
    "quotactl": 179,
    "lookup_dcookie": 212,
    "kexec_load": 246,
    "add_key": 248,
    "request_key": 249,
    "keyctl": 250,
    "unshare": 272,
    "perf_event_open": 298,
    "name_to_handle_at": 303,
    "open_by_handle_at": 304,
    "setns": 308,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "finit_module": 313,
    "kexec_file_load": 320,
    "bpf": 321,
    "userfaultfd": 323,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "pidfd_getfd": 438,
    "mount_setattr": 442,
}
"""Calls untrusted code has no business making: debugging other processes, namespaces and mounts,
kernel keyrings, eBPF, module loading, and io_uring (which bypasses the filter for the calls it wraps)."""


def supported() -> bool:
    return platform.machine() == "x86_64"


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program() -> bytes:
    """The compiled filter: check the architecture, refuse x32 and the deny-list, allow the rest."""
    denied = sorted(set(DENIED_X86_64.values()))
    # Layout: [ld arch][jeq x86_64][ret kill][ld nr][jge x32][jeq n]*k [ret allow][ret errno]
    out = [
        _insn(_LD_W_ABS, 4),
        _insn(_JEQ_K, AUDIT_ARCH_X86_64, jt=1, jf=0),
        _insn(_RET_K, SECCOMP_RET_KILL_PROCESS),
        _insn(_LD_W_ABS, 0),
    ]
    errno_at = 4 + 1 + len(denied) + 1
    out.append(_insn(_JGE_K, X32_SYSCALL_BIT, jt=errno_at - 5, jf=0))
    for i, nr in enumerate(denied):
        here = 5 + i
        out.append(_insn(_JEQ_K, nr, jt=errno_at - here - 1, jf=0))
    out.append(_insn(_RET_K, SECCOMP_RET_ALLOW))
    out.append(_insn(_RET_K, SECCOMP_RET_ERRNO | EPERM))
    return b"".join(out)


_PROGRAM: bytes | None = None


def memfd() -> int:
    """A fresh, rewound memfd holding the filter, for `--seccomp FD` (bwrap reads it to the end)."""
    global _PROGRAM
    if _PROGRAM is None:
        _PROGRAM = program()
    fd = os.memfd_create("envhub-seccomp", 0)
    os.write(fd, _PROGRAM)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
