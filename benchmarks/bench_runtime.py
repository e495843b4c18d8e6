"""Benchmark: the local runtime's own latencies on this host (no broker, no HTTP).

For a plain profile and, where torch is importable, one whose agent preloads torch:

- ``cold_start_ms``: ``start_pod`` called to ``PodUp`` (new sandbox, interpreter, preload);
- ``warm_bind_to_running_ms``: ``bind`` called to ``JobRunning`` in an idle pod, for a zygote
  job (``python -c pass``, a fork of the preloaded agent) and a plain one (``true``, fork+exec);
- ``warm_bind_to_exit_ms``: ``bind`` to ``JobExited`` for the same trivial jobs;
- ``throughput``: trivial zygote jobs back to back on all the cold-started pods at once;
- ``promote_ms``: ``promote`` of a standby pod to ``PodUp``;
- ``recycle_ms_scrub``: ``recycle`` to ``PodUp`` of the new pod, scrubbed in place (all other
  processes killed, workspace, /tmp, /dev/shm and IPC emptied, the clean zygote kept);
- ``recycle_ms_restart``: the same with a whole new sandbox and agent.

Medians and p90 over the repeats; writes JSON (the simulator's runtime parameters cite it).

    .venv/bin/python benchmarks/bench_runtime.py [--out stoker-results/bench_runtime.json]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import platform
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np

from stoker.runtime.base import (
    JobBinding,
    JobExited,
    JobRunning,
    PodUp,
    RuntimeEvent,
    RuntimeProfile,
)
from stoker.runtime.calibrate import until_event
from stoker.runtime.local import LocalRuntime


def _stats(samples: list[float]) -> dict[str, float]:
    arr = np.array(samples)
    return {
        "p50": round(float(np.percentile(arr, 50)), 3),
        "p90": round(float(np.percentile(arr, 90)), 3),
        "n": len(samples),
    }


async def _throughput(
    rt: LocalRuntime, events: AsyncIterator[RuntimeEvent], pods: list[str], jobs: int
) -> dict[str, float]:
    """Trivial zygote jobs back to back on every warm pod at once: jobs per second."""
    done = 0
    started = 0
    t0 = time.perf_counter()
    for pod in pods:
        await rt.bind(pod, JobBinding(job=f"tp-{started}", argv=("python", "-c", "pass")))
        started += 1
    while done < jobs:
        ev = await anext(events)
        if isinstance(ev, JobExited):
            done += 1
            if started < jobs:
                await rt.bind(
                    ev.pod, JobBinding(job=f"tp-{started}", argv=("python", "-c", "pass"))
                )
                started += 1
    wall = time.perf_counter() - t0
    return {"jobs": jobs, "pods": len(pods), "jobs_per_s": round(jobs / wall, 1)}


async def bench_profile(rt: LocalRuntime, profile: RuntimeProfile, repeats: int) -> dict:
    events = rt.events()
    out: dict[str, object] = {"preload": list(profile.preload)}
    cold: list[float] = []
    pods: list[str] = []
    for i in range(max(3, repeats // 10)):
        pod = f"{profile.name}-c{i}"
        t0 = time.perf_counter()
        await rt.start_pod(pod, profile, ("vgpu0",), False)
        cold.append((await until_event(events, PodUp, pod) - t0) * 1e3)
        pods.append(pod)
    out["cold_start_ms"] = _stats(cold)
    pod = pods[0]
    for kind, argv in (("zygote", ("python", "-c", "pass")), ("exec", ("true",))):
        running: list[float] = []
        exited: list[float] = []
        for i in range(repeats):
            job = f"{kind}-{i}"
            t0 = time.perf_counter()
            await rt.bind(pod, JobBinding(job=job, argv=argv))
            running.append((await until_event(events, JobRunning, job) - t0) * 1e3)
            exited.append((await until_event(events, JobExited, job) - t0) * 1e3)
        out[f"warm_bind_to_running_ms_{kind}"] = _stats(running)
        out[f"warm_bind_to_exit_ms_{kind}"] = _stats(exited)
    out["throughput"] = await _throughput(rt, events, pods, repeats * 10)
    promote: list[float] = []
    for i in range(max(3, repeats // 10)):
        sb = f"{profile.name}-s{i}"
        await rt.start_pod(sb, profile, ("vgpu1",), True)
        await until_event(events, PodUp, sb)
        t0 = time.perf_counter()
        await rt.promote(sb)
        promote.append((await until_event(events, PodUp, sb) - t0) * 1e3)
        await rt.stop_pod(sb)
    out["promote_ms"] = _stats(promote)
    current = pods[-1]
    for mode in ("scrub", "restart"):
        rt.recycle_mode = mode
        recycle: list[float] = []
        for i in range(max(3, repeats // 10)):
            new = f"{profile.name}-{mode}{i}"
            t0 = time.perf_counter()
            await rt.recycle(current, new)
            recycle.append((await until_event(events, PodUp, new) - t0) * 1e3)
            current = new
        out[f"recycle_ms_{mode}"] = _stats(recycle)
    await rt.stop_all()
    return out


async def main_async(repeats: int) -> dict:
    profiles = [RuntimeProfile("plain")]
    if importlib.util.find_spec("torch") is not None:
        profiles.append(RuntimeProfile("torch-cpu", preload=("torch",)))
    results: dict[str, object] = {
        "host": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "euid": os.geteuid(),
        },
        "repeats": repeats,
        "profiles": {},
    }
    with tempfile.TemporaryDirectory(prefix="stoker-bench-") as tmp:
        rt = LocalRuntime(Path(tmp) / "state", gpu_slots=2)
        for profile in profiles:
            results["profiles"][profile.name] = await bench_profile(rt, profile, repeats)  # type: ignore[index]
        await rt.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("stoker-results/bench_runtime.json"))
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    results = asyncio.run(main_async(args.repeats))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
