"""Measure, on this host and through the local runtime, the step durations the simulator
otherwise assumes: ``bind`` (a caller's first job into a fresh pod, its code placed),
``rebind`` (the caller's next job in its warm pod), ``recycle`` (a pod scrubbed in place
for a new caller), ``promote`` (a standby pod given its GPU) and ``stop`` (a pod stopped
until it is gone). Each is timed from the runtime call to the event that ends it
(``JobRunning``, ``PodUp``, ``PodDown``), as the broker sees it.

Not measured here: a pod's cold start (a GPU pod's start and image pull are the paper's
figures, not a sandbox's) and CUDA initialisation on promotion (no GPU is used).
"""

from __future__ import annotations

import asyncio
import io
import os
import platform
import tarfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from stoker.api.calibration import Calibration, Measured
from stoker.runtime.base import (
    JobBinding,
    JobExited,
    JobRunning,
    PodDown,
    PodUp,
    RuntimeEvent,
    RuntimeProfile,
)
from stoker.runtime.local import LocalRuntime

TRIVIAL = ("python", "-c", "pass")


def _archive() -> bytes:
    """A one-file code archive, so a first bind places code as a real job's does."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = b"print('calibration')\n"
        info = tarfile.TarInfo("main.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


async def until_event(events: AsyncIterator[RuntimeEvent], kind: type, key: str) -> float:
    """Seconds (perf_counter) at which an event of ``kind`` for ``key`` arrives."""
    while True:
        ev = await anext(events)
        if isinstance(ev, kind) and key in (getattr(ev, "job", None), getattr(ev, "pod", None)):
            return time.perf_counter()


async def measure(
    rt: LocalRuntime,
    profile: RuntimeProfile,
    repeats: int,
    step: Callable[[], None] | None = None,
) -> dict[str, list[float]]:
    """``repeats`` rounds of bind, rebind, recycle, promote and stop on ``rt``: samples in
    seconds per step. ``step`` is called after each round (a progress display)."""
    events = rt.events()
    code = await rt.put_code(_archive())
    out: dict[str, list[float]] = {k: [] for k in ("bind", "rebind", "recycle", "promote", "stop")}

    async def run(pod: str, job: str, key: str, **kw: object) -> None:
        t0 = time.perf_counter()
        await rt.bind(pod, JobBinding(job=job, argv=TRIVIAL, **kw))  # type: ignore[arg-type]
        out[key].append(await until_event(events, JobRunning, job) - t0)
        await until_event(events, JobExited, job)

    for i in range(repeats):
        pod = f"cal-{i}"
        await rt.start_pod(pod, profile, ("vgpu0",), False)
        await until_event(events, PodUp, pod)
        await run(pod, f"cal-{i}-bind", "bind", code_digest=code)
        await run(pod, f"cal-{i}-rebind", "rebind", code_digest=code)
        t0 = time.perf_counter()
        await rt.recycle(pod, f"{pod}-r")
        out["recycle"].append(await until_event(events, PodUp, f"{pod}-r") - t0)
        standby = f"{pod}-s"
        await rt.start_pod(standby, profile, ("vgpu1",), True)
        await until_event(events, PodUp, standby)
        t0 = time.perf_counter()
        await rt.promote(standby)
        out["promote"].append(await until_event(events, PodUp, standby) - t0)
        for gone in (f"{pod}-r", standby):
            t0 = time.perf_counter()
            await rt.stop_pod(gone)
            out["stop"].append(await until_event(events, PodDown, gone) - t0)
        if step is not None:
            step()
    return out


def calibrate(
    path: Path, work_dir: Path, repeats: int = 10, step: Callable[[], None] | None = None
) -> Calibration:
    """Measure on a fresh local runtime under ``work_dir`` and write ``path``; nothing it
    started is left running."""

    async def main() -> dict[str, list[float]]:
        rt = LocalRuntime(work_dir / "runtime", gpu_slots=2)
        try:
            return await measure(rt, RuntimeProfile("plain"), repeats, step)
        finally:
            await rt.stop_all()
            await rt.close()

    samples = asyncio.run(main())
    cal = Calibration(
        source="stoker bench local: the local sandbox runtime on this host",
        host={
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        },
        profile="plain",
        durations={k: Measured.of(v) for k, v in samples.items()},  # type: ignore[misc]
    )
    cal.write(path)
    return cal
