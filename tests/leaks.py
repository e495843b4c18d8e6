"""What a test left behind under a directory of its own: sandboxes and other processes whose
command line names it, pod cgroups of the runtimes whose state dirs lie in it, and mounts
(a pod's workspace tmpfs) below it.

Only what lives under ``root`` is counted, so tests running beside ours (other checkouts,
other suites) never count."""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from stoker.runtime.cgroups import CGROUP_ROOT, CgroupError, PodCgroup
from stoker.runtime.local import cgroup_prefix, unmount


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
    """Stop what a failed test left (its processes killed, its pods' cgroups emptied and
    removed as the runtime does it, :class:`PodCgroup`, the mounts detached), so that a
    test that fails leaks nothing past the run: the failure is still reported, from
    ``left``."""
    for line in left.processes:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(int(line.split(" ", 1)[0]), signal.SIGKILL)
    pods: dict[str, PodCgroup] = {}  # a pod's groups: v2's, or one per v1 controller
    for group in map(Path, left.cgroups):
        pod = pods.setdefault(group.name, PodCgroup(group.name))
        v2 = (group / "cgroup.controllers").exists()
        pod.dirs["v2" if v2 else str(group.parent)] = group
    for pod in pods.values():
        with contextlib.suppress(CgroupError):
            pod.kill_all(timeout_s)
        pod.remove()
    for point in sorted(left.mounts, key=len, reverse=True):
        unmount(Path(point))
