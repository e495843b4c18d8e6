"""Per-pod cgroups under this process's own cgroup, on cgroup v2 and on v1 (hybrid hosts).

A pod gets one child group per controller it needs (memory, pids, cpu). On v1 each controller is
its own hierarchy (``/sys/fs/cgroup/memory/<own path>/<name>``); on v2 there is one group
(``/sys/fs/cgroup/<own path>/<name>``) and the controllers must be enabled in the parent's
``cgroup.subtree_control``. Where a controller is missing or not writable the limit is simply
not applied and :attr:`PodCgroup.missing` says so, so a host without delegation still runs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("memory", "pids", "cpu")
_CPU_PERIOD_US = 100_000


class CgroupError(RuntimeError):
    """A cgroup could not be created or cleaned up."""


def _read_small(path: Path) -> bytes | None:
    """A small kernel file's bytes in one ``os.read`` (None if it cannot be read): the OOM
    counter is read at every bind, where a buffered text file object per read cost more
    than the read itself."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)


def _own_paths() -> tuple[str | None, dict[str, str]]:
    """(v2 path, {v1 controller: path}) of this process, from /proc/self/cgroup."""
    v2: str | None = None
    v1: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        if ctrls == "":
            v2 = path
        else:
            for c in ctrls.split(","):
                v1[c] = path
    return v2, v1


def _v1_dir(controller: str, path: str) -> Path | None:
    base = CGROUP_ROOT / controller
    if not (base / "cgroup.procs").exists():
        return None
    return base / path.lstrip("/")


def _v2_base() -> Path | None:
    """The v2 mount: /sys/fs/cgroup itself (pure v2) or /sys/fs/cgroup/unified (hybrid)."""
    for cand in (CGROUP_ROOT, CGROUP_ROOT / "unified"):
        if (cand / "cgroup.controllers").exists():
            return cand
    return None


@dataclass
class PodCgroup:
    """The cgroups of one pod: ``dirs`` maps a controller (or "v2") to its group directory."""

    name: str
    dirs: dict[str, Path] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)  # controller -> why not applied

    @classmethod
    def create(
        cls, name: str, memory_mb: int | None, pids_max: int | None, cpus: float | None = None
    ) -> PodCgroup:
        """Create the pod's groups and write its limits (best effort per controller).

        ``name`` must be unique on the host (several runtimes may share it): a group that
        exists already is never joined, since stopping a pod kills all of its group.
        """
        cg = cls(name)
        v2path, v1paths = _own_paths()
        quota = None if cpus is None else max(1000, int(cpus * _CPU_PERIOD_US))
        want: dict[str, int | None] = {"memory": memory_mb, "pids": pids_max, "cpu": quota}
        v2base = _v2_base()
        for ctrl in CONTROLLERS:
            parent = _v1_dir(ctrl, v1paths[ctrl]) if ctrl in v1paths else None
            if parent is not None:
                d = parent / name
                try:
                    d.mkdir()  # never an existing group: it may hold another pod
                    if want[ctrl] is not None:
                        cg._write_v1_limit(ctrl, d, want[ctrl])
                    cg.dirs[ctrl] = d
                except OSError as exc:
                    cg.missing[ctrl] = f"v1 {ctrl} group {d}: {exc.strerror}"
            elif v2base is not None and v2path is not None:
                cg._v2_controller(v2base, v2path, ctrl, want[ctrl])
            else:
                cg.missing[ctrl] = f"no {ctrl} controller mounted"
        return cg

    @staticmethod
    def _write_v1_limit(ctrl: str, d: Path, value: int) -> None:
        if ctrl == "cpu":
            (d / "cpu.cfs_period_us").write_text(str(_CPU_PERIOD_US))
            (d / "cpu.cfs_quota_us").write_text(str(value))
        elif ctrl == "memory":
            (d / "memory.limit_in_bytes").write_text(str(value * 1024 * 1024))
            # no swap beyond the limit either, where swap accounting exists
            with contextlib.suppress(OSError):
                (d / "memory.memsw.limit_in_bytes").write_text(str(value * 1024 * 1024))
        else:
            (d / "pids.max").write_text(str(value))

    def _v2_controller(self, base: Path, own: str, ctrl: str, value: int | None) -> None:
        parent = base / own.lstrip("/")
        d = parent / self.name
        try:
            enabled = (parent / "cgroup.subtree_control").read_text().split()
            if ctrl not in enabled:
                (parent / "cgroup.subtree_control").write_text(f"+{ctrl}")
            d.mkdir()
            if value is not None:
                fname, text = {
                    "memory": ("memory.max", str(value * 1024 * 1024)),
                    "pids": ("pids.max", str(value)),
                    "cpu": ("cpu.max", f"{value} {_CPU_PERIOD_US}"),
                }[ctrl]
                (d / fname).write_text(text)
                if ctrl == "memory":
                    with contextlib.suppress(OSError):
                        (d / "memory.swap.max").write_text("0")
            self.dirs.setdefault("v2", d)
            self.dirs[ctrl] = d
        except OSError as exc:
            self.missing[ctrl] = f"v2 {ctrl} in {parent}: {exc.strerror}"

    def view(self) -> tuple[tuple[Path, str], ...]:
        """What the pod sees under /sys/fs/cgroup: its own groups only, (host dir, where)."""
        if "v2" in self.dirs:
            return ((self.dirs["v2"], ""),)
        return tuple((d, ctrl) for ctrl, d in sorted(self.dirs.items()))

    def attach(self, pid: int = 0) -> None:
        """Move ``pid`` (0: the caller) into every group."""
        for d in self._own_dirs():
            (d / "cgroup.procs").write_text(str(pid or os.getpid()))

    def exec_inside(self, argv: list[str]) -> list[str]:
        """``argv`` behind a shell that first joins the pod's groups, then execs it.

        The process is in its groups before it runs ``argv``, so nothing it starts escapes
        them; a shell instead of a preexec hook, because forking a threaded process and
        running Python before exec can deadlock.
        """
        procs = [str(d / "cgroup.procs") for d in self._own_dirs()]
        script = (
            'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'
        )
        return ["/bin/sh", "-c", script, "sh", *procs, "--", *argv]

    def _own_dirs(self) -> list[Path]:
        """The groups that are this pod's own: named after it (a state file that points
        elsewhere, say at a parent group, must never get its processes killed)."""
        ok = self.name.startswith("stoker-")
        return [d for d in dict.fromkeys(self.dirs.values()) if ok and d.name == self.name]

    def pids(self) -> list[int]:
        """Every process now in the pod's groups."""
        out: dict[int, None] = {}
        for d in self._own_dirs():
            with contextlib.suppress(OSError):
                for line in (d / "cgroup.procs").read_text().split():
                    out[int(line)] = None
        return sorted(out)

    def oom_kills(self) -> int:
        """How many times the kernel's OOM killer struck in the pod (-1: not known)."""
        d = self.dirs.get("memory")
        if d is None:
            return -1
        # read at every bind: only the file of the group's hierarchy (v2's or v1's)
        fname = "memory.events" if d == self.dirs.get("v2") else "memory.oom_control"
        for line in (_read_small(d / fname) or b"").splitlines():
            key, _, val = line.partition(b" ")
            if key == b"oom_kill":
                return int(val)
        # old v1 kernels have no oom_kill counter: hitting the limit is the next best sign
        failcnt = _read_small(d / "memory.failcnt")
        return -1 if failcnt is None else int(failcnt)

    def kill_all(self, timeout_s: float = 5.0) -> None:
        """SIGKILL every process in the pod until the groups are empty (cgroup.kill on v2)."""
        v2 = self.dirs.get("v2")
        if v2 is not None and v2 in self._own_dirs() and (v2 / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                (v2 / "cgroup.kill").write_text("1")
        deadline = time.monotonic() + timeout_s
        while True:
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                raise CgroupError(f"pod cgroup {self.name} still holds {pids}")
            time.sleep(0.005)

    def remove(self) -> None:
        """Delete the (empty) groups; a v1 group may linger a moment after its last exit."""
        seen: set[str] = set()
        for d in self.dirs.values():
            if str(d) in seen:
                continue
            seen.add(str(d))
            for _ in range(200):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.005)

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "dirs": {k: str(v) for k, v in self.dirs.items()},
            "missing": self.missing,
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> PodCgroup:
        dirs = data.get("dirs", {})
        missing = data.get("missing", {})
        assert isinstance(dirs, dict) and isinstance(missing, dict)
        return cls(
            str(data["name"]),
            {str(k): Path(str(v)) for k, v in dirs.items()},
            {str(k): str(v) for k, v in missing.items()},
        )
