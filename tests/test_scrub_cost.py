"""A warm trivial job's cost in a real sandbox, against the same interpreter running ``pass``
directly: a guard on the order of magnitude, not a timing test.

The pod's interpreter here is a venv under /tmp (where many a first try keeps its checkout
and venv), which the sandbox binds read-only at the same path inside the pod's own /tmp. A
scrub that walked into it tried to unlink every file of the venv after every job: hundreds of
CPU-ms a job for ``python -c pass``. CPU is counted, not wall time: the pod's processes' own
and reaped children's CPU (from /proc), which a loaded machine does not inflate.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import stoker
from leaks import leftovers
from runtime_rig import Rig
from stoker.agent.agent import Kept, kept_mounts
from stoker.broker.bench import cpu_seconds
from stoker.runtime.base import RuntimeProfile
from stoker.runtime.cgroups import PodCgroup

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) not installed"),
    pytest.mark.timeout(120),
]

#: files in the stand-in venv's site-packages (a torch venv holds 50,000 and more)
VENV_FILES = 60_000
JOBS = 10
RATIO = 10.0  # an order of magnitude


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def venv_under_tmp() -> Iterator[Path]:
    """A venv under /tmp whose site-packages holds :data:`VENV_FILES` small files."""
    root = Path(tempfile.mkdtemp(prefix="stoker-venv-", dir="/tmp"))
    try:
        venv = root / "venv"
        subprocess.run(
            [sys._base_executable, "-m", "venv", "--without-pip", str(venv)],  # type: ignore[attr-defined]
            check=True,
        )
        site = next((venv / "lib").glob("python*/site-packages"))
        for i in range(VENV_FILES // 100):
            pkg = site / f"pkg{i}"
            pkg.mkdir()
            for j in range(100):
                (pkg / f"m{j}.py").touch()
        os.chmod(root, 0o755)  # the pod's uid must pass through
        yield venv
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _pod_cpu_s(pids: list[int]) -> float:
    """CPU seconds the pod's processes used, with the children they reaped."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            total += cpu_seconds(pid, children=True)
    return total


def _direct_cpu_s(python: str, runs: int) -> float:
    """CPU seconds of one ``python -c pass`` run directly (the mean of ``runs``)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(runs):
        subprocess.run([python, "-c", "pass"], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / runs


async def test_a_warm_trivial_job_costs_no_more_than_running_pass(
    tmp_path: Path, venv_under_tmp: Path
) -> None:
    python = str(venv_under_tmp / "bin" / "python")
    async with Rig.open(tmp_path / "state", gpu_slots=1, base_python=python) as rig:
        pod = await rig.pod(RuntimeProfile("plain"))
        info = rig.rt.pod_info(pod)
        cg = PodCgroup(info.cgroup, info.cgroup_dirs)  # the pod's group, to read its pids
        await rig.run(pod, [python, "-c", "pass"])  # the first job forks the spare's way in
        before = _pod_cpu_s(cg.pids())
        for _ in range(JOBS):
            res = await rig.run(pod, [python, "-c", "pass"])
            assert res.exit.exit_code == 0
        pod_s = (_pod_cpu_s(cg.pids()) - before) / JOBS
        # a job tries to leave files beside the bound venv and to remove the venv itself
        holder, site = venv_under_tmp.parent, f"{venv_under_tmp}/lib/*/site-packages"
        attack = f"touch {holder}/left {site}/left; mkdir -p /tmp/d/e; touch /tmp/d/e/f; "
        attack += f"rm -rf {site}/pkg0 2>/dev/null; ls {site} | wc -l"
        res = await rig.run(pod, ["sh", "-c", attack])
        assert int(res.stdout) == VENV_FILES // 100  # read-only: nothing of it went
        # the next job finds nothing the last one left, and the venv whole
        res = await rig.run(pod, ["sh", "-c", f"find /tmp -name left; ls /tmp; ls {site} | wc -l"])
        # what /tmp holds: the venv's holder, and the checkout or interpreter where they lie
        # under /tmp too (a clone there: each is bound back read-only)
        bound = (holder, Path(stoker.__file__).parents[1], Path(sys.prefix), Path(sys.base_prefix))
        tops = {p.resolve().relative_to("/tmp").parts[0] for p in bound if _under_tmp(p)}
        assert res.stdout.decode().split() == [*sorted(tops), str(VENV_FILES // 100)]
    direct_s = _direct_cpu_s(python, JOBS)
    floor = max(direct_s, 0.005)  # never compare against a clock tick's 0
    print(f"warm job in the pod {pod_s * 1000:.1f} CPU-ms, directly {direct_s * 1000:.1f}")
    assert pod_s <= RATIO * floor, (
        f"a warm `python -c pass` costs the pod {pod_s * 1000:.0f} CPU-ms (mean of {JOBS}), "
        f"{pod_s / floor:.0f}x running it directly ({direct_s * 1000:.0f} ms): "
        "something in the pod's job path scales with what the pod sees"
    )
    assert not leftovers(tmp_path)


def test_kept_mounts_names_binds_below_the_scratch_dirs_and_their_holders(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(
        "128 70 0:47 / /tmp rw - tmpfs tmpfs rw\n"
        "130 128 254:0 /h /tmp/a\\040b/venv ro - ext4 /dev/vda rw\n"
        "131 128 254:0 /h /tmp/a\\040b/venv/lib ro - ext4 /dev/vda rw\n"
        "132 70 254:0 /s /stoker/sock rw - ext4 /dev/vda rw\n"
        "134 70 0:40 / /workspace rw - tmpfs ws rw\n"
        "135 70 254:0 /c /tmpx/c ro - ext4 /dev/vda rw\n"
    )
    kept = kept_mounts(("/tmp", "/dev/shm", "/workspace"), str(info))
    assert kept.mounts == {"/tmp/a b/venv", "/tmp/a b/venv/lib"}
    assert kept.holders == {"/tmp/a b"}
    assert kept_mounts(("/tmp",), str(tmp_path / "missing")) == Kept()


def _under_tmp(p: Path) -> bool:
    return p.resolve().is_relative_to("/tmp")
