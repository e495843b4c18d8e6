"""What a test left behind under a directory of its own: sandboxes and other processes whose
command line names it, and pod cgroups of the runtimes whose state dirs lie in it.

Only what lives under ``root`` is counted, so tests running beside ours (other checkouts,
other suites) never count."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from stoker.runtime.cgroups import CGROUP_ROOT
from stoker.runtime.local import cgroup_prefix


@dataclass(frozen=True)
class Leftovers:
    processes: tuple[str, ...]  # "pid cmdline"
    cgroups: tuple[str, ...]

    @property
    def sandboxes(self) -> int:
        return sum(1 for p in self.processes if "bwrap" in p.split(" ", 2)[1])

    def __bool__(self) -> bool:
        return bool(self.processes or self.cgroups)


def leftovers(root: Path) -> Leftovers:
    """Live processes and pod cgroups that belong to ``root``."""
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
    return Leftovers(tuple(sorted(procs)), tuple(sorted(cgroups)))
