"""The seccomp filter every pod runs under: a small classic-BPF program bwrap loads
(``bwrap --seccomp FD``) before it starts the agent, so the agent, its spare and every job
inherit it and none can remove it.

It refuses what a job could use to reach another process or leave its sandbox:

- ``ptrace``, ``process_vm_readv``/``writev``, ``pidfd_getfd``: reading or writing another
  process's memory or stealing its fds (the agent's spare holds the next job's spec);
- a new user namespace (``clone``/``unshare`` with ``CLONE_NEWUSER``; ``clone3`` answers
  ENOSYS, since its flags sit behind a pointer BPF cannot follow, and libc falls back to
  ``clone``): inside one, a job would hold every capability again (``unshare -Ur``);
- the kernel keyrings (``keyctl``, ``add_key``, ``request_key``): a uid's user keyring is not
  namespaced, so it would carry one tenant's data to the next pod of that uid;
- ``userfaultfd``, a staple of kernel exploits and needed by no job.

Everything else is allowed. A syscall of a foreign ABI (i386 or x32 on an x86_64 host, whose
numbers differ) kills the process: the table below would not match it.

Why a hand-built program: it is a dozen instructions, known at import time, and bwrap takes
the compiled form directly. libseccomp's Python bindings exist only as Debian's package for
the system interpreter (pods run the profile's interpreter, often another) or as an
unmaintained ctypes wrapper (pyseccomp, last release 2021); neither is worth a dependency for
a fixed list of syscalls. The program is checked by tests in which jobs try each call.
"""

from __future__ import annotations

import errno
import os
import platform
import struct

# struct seccomp_data: int nr; u32 arch; u64 ip; u64 args[6] (little-endian hosts only)
_OFF_NR, _OFF_ARCH, _OFF_ARG0 = 0, 4, 16
# classic BPF opcodes (linux/bpf_common.h)
_LD_W_ABS = 0x00 | 0x00 | 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x05 | 0x10  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x05 | 0x30  # BPF_JMP | BPF_JGE | BPF_K
_JSET = 0x05 | 0x40  # BPF_JMP | BPF_JSET | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
# return values (linux/seccomp.h)
_KILL_PROCESS = 0x80000000
_ERRNO = 0x00050000
_ALLOW = 0x7FFF0000
CLONE_NEWUSER = 0x10000000
_X32_BIT = 0x40000000


# per architecture: its AUDIT_ARCH value and the numbers of the syscalls named above
_ARCHES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (
        0xC000003E,
        {
            "ptrace": 101,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "pidfd_getfd": 438,
            "keyctl": 250,
            "add_key": 248,
            "request_key": 249,
            "userfaultfd": 323,
            "clone": 56,
            "unshare": 272,
            "clone3": 435,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "ptrace": 117,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "pidfd_getfd": 438,
            "keyctl": 219,
            "add_key": 217,
            "request_key": 218,
            "userfaultfd": 282,
            "clone": 220,
            "unshare": 97,
            "clone3": 435,
        },
    ),
}
DENIED = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "keyctl",
    "add_key",
    "request_key",
    "userfaultfd",
)


class SeccompUnsupported(RuntimeError):
    """No syscall table for this machine's architecture."""


def _ins(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def program(machine: str | None = None) -> bytes:
    """The compiled filter (``struct sock_filter[]``) for ``machine`` (default: this one)."""
    machine = machine or platform.machine()
    if machine not in _ARCHES:
        raise SeccompUnsupported(f"no seccomp syscall table for {machine!r}")
    arch, nr = _ARCHES[machine]
    eperm = _ERRNO | errno.EPERM
    prog = [
        _ins(_LD_W_ABS, _OFF_ARCH),
        _ins(_JEQ, arch, jt=1),  # our ABI: go on; any other: killed
        _ins(_RET, _KILL_PROCESS),
        _ins(_LD_W_ABS, _OFF_NR),
    ]
    if machine == "x86_64":  # x32 calls carry this bit and a table of their own
        prog += [_ins(_JGE, _X32_BIT, jf=1), _ins(_RET, _KILL_PROCESS)]
    for name in DENIED:  # equal: fall through to the refusal; else skip it
        prog += [_ins(_JEQ, nr[name], jf=1), _ins(_RET, eperm)]
    prog += [_ins(_JEQ, nr["clone3"], jf=1), _ins(_RET, _ERRNO | errno.ENOSYS)]
    # clone and unshare: refused only with CLONE_NEWUSER in their first argument (the flags
    # on both ABIs; the flag sits in the low 32 bits, which are what BPF loads here)
    prog += [
        _ins(_JEQ, nr["clone"], jt=1),
        _ins(_JEQ, nr["unshare"], jf=3),
        _ins(_LD_W_ABS, _OFF_ARG0),
        _ins(_JSET, CLONE_NEWUSER, jf=1),
        _ins(_RET, eperm),
        _ins(_RET, _ALLOW),
    ]
    return b"".join(prog)


def program_fd() -> int:
    """A readable fd holding :func:`program` (a memfd), for ``bwrap --seccomp FD``."""
    fd = os.memfd_create("stoker-seccomp", 0)
    data = program()
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
