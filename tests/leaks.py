"""What a test left behind under a directory of its own: sandboxes and other processes whose
command line names it, pod cgroups of the runtimes whose state dirs lie in it, and mounts
(a pod's workspace tmpfs) below it.

Only what lives under ``root`` is counted, so tests running beside ours (other checkouts,
other suites) never count."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from stoker.runtime.cgroups import CGROUP_ROOT
from stoker.runtime.local import cgroup_prefix


@dataclass(frozen=True)
class Leftovers:
    processes: tuple[str, ...]  # "pid cmdline"
    cgroups: tuple[str, ...]
    mounts: tuple[str, ...] = ()

    @property
    def sandboxes(self) -> int:
        return sum(1 for p in self.processes if "bwrap" in p.split(" ", 2)[1])

    def __bool__(self) -> bool:
        return bool(self.processes or self.cgroups or self.mounts)


def leftovers(root: Path) -> Leftovers:
    """Live processes, pod cgroups and mounts that belong to ``root``."""
    root = Path(root).resolve()
    me = os.getpid()
    procs = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == me:
            continue
        try:
            raw = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if str(root).encode() in raw:
            cmd = raw.replace(b"\0", b" ").decode(errors="replace")[:200]
            procs.append(f"{proc.name} {cmd}")
    prefixes = tuple(cgroup_prefix(d.parent) for d in root.rglob("pods") if d.is_dir())
    cgroups = []
    if prefixes:
        for dirpath, dirnames, _ in os.walk(CGROUP_ROOT):
            for name in dirnames:
                if name.startswith(prefixes):
                    cgroups.append(os.path.join(dirpath, name))
    return Leftovers(tuple(sorted(procs)), tuple(sorted(cgroups)), _mounts_below(root))


def _mounts_below(root: Path) -> tuple[str, ...]:
    """Mount points under ``root`` in this mount namespace (/proc/self/mountinfo's fifth
    field, octal escapes undone)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split(" ")[4].encode().decode("unicode_escape")
        if point.startswith(f"{root}/"):
            found.append(point)
    return tuple(sorted(found))


def reap(left: Leftovers, timeout_s: float = 10.0) -> None:
    """Stop what a failed test left (its processes and their cgroups' members killed, the
    cgroups removed, the mounts detached), so that a test that fails leaks nothing past the
    run: the failure is still reported, from ``left``."""
    for line in left.processes:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(int(line.split(" ", 1)[0]), signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    # deepest first: a v2 group is removed only once its children are
    for group in sorted(left.cgroups, key=lambda g: g.count("/"), reverse=True):
        path = Path(group)
        kill = path / "cgroup.kill"
        with contextlib.suppress(OSError):
            kill.write_text("1")
        while time.monotonic() < deadline:
            try:
                pids = [int(p) for p in (path / "cgroup.procs").read_text().split()]
            except OSError:
                break
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)
        while time.monotonic() < deadline:
            try:
                path.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.01)
    for point in sorted(left.mounts, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)
