"""What ``stoker bench local`` says beside its figures: the host they were measured on, the
steps of a warm job's end, and which step or process costs far more than the others.

A figure holds for the machine it was measured on; the same commit measured ~450 ms a warm
job with its venv under /tmp and ~12 ms elsewhere, so where the checkout and venv lie, and on
what filesystem, is part of the environment.
"""

from __future__ import annotations

import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import stoker
from stoker.agent.agent import read_mounts
from stoker.runtime import seccomp
from stoker.runtime.cgroups import CGROUP_ROOT

#: a warm job's steps, each from one job-record time to the next
END_STEPS = (
    ("queue_and_bind", "submitted", "started"),
    ("job", "started", "exited"),
    ("drain_and_clean", "exited", "drained"),
    ("report", "drained", "finished"),
    ("commit", "finished", "committed"),
)
#: a step or role this many times the median of its group is flagged (above a floor)
FLAG_RATIO = 10.0
FLAG_FLOOR_MS = 5.0


def _mount_of(path: Path) -> dict[str, str]:
    """The mount ``path`` lies on (its mount point and filesystem type): the deepest, the
    last mounted of equals (it hides the ones below)."""
    best = ("/", "?")
    target = str(path.resolve())
    for point, fstype in read_mounts():
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best[0]):
            best = (point, fstype)
    return {"path": target, "mount": best[0], "fstype": best[1]}


def _cgroup_version() -> str:
    v2 = (CGROUP_ROOT / "cgroup.controllers").exists()
    hybrid = (CGROUP_ROOT / "unified" / "cgroup.controllers").exists()
    return "v2" if v2 else ("hybrid (v1 + v2)" if hybrid else "v1")


def _bwrap_version() -> str | None:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None
    try:
        out = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def host_environment() -> dict[str, Any]:
    """The host as the figures depend on it: kernel, cgroups, seccomp, the open-file limit,
    the load, and where stoker's source and interpreter lie (a tmpfs or a path under /tmp
    inside every pod's view is worth knowing)."""
    try:
        seccomp.program()
        filt = "on"
    except seccomp.SeccompUnsupported as exc:
        filt = f"unavailable: {exc}"
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    source = Path(stoker.__file__).resolve().parent.parent
    return {
        "kernel": platform.release(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "cgroup": _cgroup_version(),
        "seccomp": filt,
        "bwrap": _bwrap_version(),
        "open_files": {"soft": soft, "hard": hard},
        # the machine may be shared: the figures mean little without its load
        "loadavg_1m_start": os.getloadavg()[0],
        "source": _mount_of(source),
        "venv": _mount_of(Path(sys.prefix)),
    }


def end_steps_ms(rows: list[dict[str, Any]]) -> dict[str, float]:
    """The median of each of :data:`END_STEPS` over ``rows`` (job records), in ms; a step
    some record lacks a time for is left out of that record."""
    out: dict[str, float] = {}
    for name, a, b in END_STEPS:
        took = sorted(
            (r[b] - r[a]) * 1000.0 for r in rows if r.get(a) is not None and r.get(b) is not None
        )
        if took:
            out[name] = took[len(took) // 2]
    return out


def outliers(values: dict[str, float]) -> list[str]:
    """The names in ``values`` (ms) at least :data:`FLAG_RATIO` times their median and above
    :data:`FLAG_FLOOR_MS`: where a cost hides (a scrub walking a venv, a slow commit)."""
    if len(values) < 2:
        return []
    median = statistics.median(values.values())
    return [
        k for k, v in values.items() if v > FLAG_FLOOR_MS and v >= FLAG_RATIO * max(median, 0.1)
    ]
