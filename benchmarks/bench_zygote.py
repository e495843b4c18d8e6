"""Micro-benchmark: the CPU one trivial job (``python -c pass``) costs in a pod, without the
broker, its HTTP or its store.

- ``--through zygote``: the fork, run and reap of a job through the pod's zygote alone. This
  process plays the agent's part with :mod:`stoker.agent.zygote` itself (outside any
  sandbox): a spare from the zygote, the job handed to it, its output pipes read to their
  end, its exit report awaited; one job after another. CPU per job of this process (the
  agent's side of it) and of the zygote with what it forked and reaped (the spares, which
  become the jobs).
- ``--through pod``: the same jobs bound one after another into a real pod of the local
  runtime (bubblewrap, the agent, its sweep and scratch checks, the jobs' own uid): CPU per
  job of the pod's agent, of the rest of the pod (its init, the zygote and the jobs) and of
  this process (the runtime's side: the bind and the events).

With ``--preload torch`` the zygote holds torch (a torch-sized fork). CPU is read from
``/proc`` (clock ticks) and this process's own ``os.times``, around the timed jobs only.
To measure another tree, put its ``src`` first on ``PYTHONPATH`` (outside /tmp, where a
pod's agent would find files after every job).

    .venv/bin/python benchmarks/bench_zygote.py [--through zygote|pod] [--preload torch]
        [--jobs 400] [--rounds 1] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# only what the agent imports before it forks its zygote (the zygote of --through zygote is
# forked from this process): the rest is imported where --through pod needs it
from stoker.agent.binding import Entry
from stoker.agent.zygote import JobUser, Zygote, preload

TRIVIAL = ("python", "-c", "pass")
NOBODY = 65534


def _own_cpu() -> float:
    t = os.times()
    return t.user + t.system


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def _with_children(pid: int) -> tuple[float, int]:
    """CPU seconds process ``pid`` and the children it reaped have used so far, and their
    minor page faults (a fork's copy-on-write faults among them)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    faults = int(fields[7]) + int(fields[8])
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK"), faults


def through_zygote(jobs: int, modules: tuple[str, ...]) -> dict[str, Any]:
    """``jobs`` trivial jobs forked, run and reaped by a zygote of this process."""
    preload(modules)
    user = JobUser(NOBODY, NOBODY) if os.geteuid() == 0 else None
    exits: dict[int, int] = {}
    zygote = Zygote(user, on_exit=lambda pid, status: exits.__setitem__(pid, status))
    ws = Path(tempfile.mkdtemp(prefix="stoker-bench-zygote-", dir="/var/tmp"))
    ws.chmod(0o777)
    entry = Entry("code", "pass", ("-c",))
    env = dict(os.environ)
    try:

        def one() -> float:
            t0 = time.perf_counter()
            spare = zygote.spare()
            spare.start(entry, env, str(ws), ())
            for fd in (spare.stdout, spare.stderr):
                while os.read(fd, 1 << 16):
                    pass
                os.close(fd)
            while spare.pid not in exits:
                select.select([zygote.sock], [], [])
                zygote.readable()
            if exits.pop(spare.pid) != 0:
                raise RuntimeError("the trivial job failed")
            return time.perf_counter() - t0

        for _ in range(20):  # warm-up: the zygote's first forks, the page cache
            one()
        (z0, f0), a0 = _with_children(zygote.pid), _own_cpu()
        walls = [one() for _ in range(jobs)]
        (z1, f1), a1 = _with_children(zygote.pid), _own_cpu()
    finally:
        zygote.close()
        shutil.rmtree(ws, ignore_errors=True)
    return {
        "agent_cpu_ms_per_job": (a1 - a0) * 1e3 / jobs,
        "zygote_job_cpu_ms_per_job": (z1 - z0) * 1e3 / jobs,
        "zygote_job_minor_faults_per_job": (f1 - f0) / jobs,
        "wall_ms_p50": _median(walls) * 1e3,
    }


async def _through_pod(jobs: int, modules: tuple[str, ...]) -> dict[str, Any]:
    from stoker.broker.bench import pod_cpu_seconds, pod_cpu_used
    from stoker.runtime.base import JobBinding, JobExited, PodUp, RuntimeProfile
    from stoker.runtime.calibrate import until_event
    from stoker.runtime.local import LocalRuntime

    with tempfile.TemporaryDirectory(prefix="stoker-bench-zygote-") as tmp:
        rt = LocalRuntime(Path(tmp) / "state", gpu_slots=1)
        events = rt.events()
        try:
            await rt.start_pod("p0", RuntimeProfile("bench", preload=modules), ("vgpu0",), False)
            await until_event(events, PodUp, "p0")

            async def one(i: int) -> float:
                t0 = time.perf_counter()
                await rt.bind("p0", JobBinding(job=f"j{i}", argv=TRIVIAL))
                while True:
                    ev = await anext(events)
                    if isinstance(ev, JobExited) and ev.job == f"j{i}":
                        if ev.exit_code != 0:
                            raise RuntimeError(f"the trivial job failed: {ev}")
                        return time.perf_counter() - t0

            for i in range(20):
                await one(-1 - i)
            p0, r0 = pod_cpu_seconds(os.getpid()), _own_cpu()
            walls = [await one(i) for i in range(jobs)]
            p1, r1 = pod_cpu_seconds(os.getpid()), _own_cpu()
        finally:
            await rt.stop_all()
            await rt.close()
    used = pod_cpu_used(p0, p1)
    return {
        "agent_cpu_ms_per_job": used["agent"] * 1e3 / jobs,
        "zygote_job_cpu_ms_per_job": used["jobs"] * 1e3 / jobs,
        "runtime_cpu_ms_per_job": (r1 - r0) * 1e3 / jobs,
        "wall_ms_p50": _median(walls) * 1e3,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--through", choices=("zygote", "pod"), default="zygote")
    ap.add_argument("--preload", default="", help="comma-separated modules the zygote imports")
    ap.add_argument("--jobs", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--out", type=Path, help="write the rounds' figures as JSON")
    args = ap.parse_args()
    modules = tuple(m for m in args.preload.split(",") if m)
    rows = []
    for _ in range(args.rounds):
        load0 = os.getloadavg()[0]
        if args.through == "zygote":
            row = through_zygote(args.jobs, modules)
        else:
            import asyncio

            row = asyncio.run(_through_pod(args.jobs, modules))
        row = {
            "through": args.through,
            "preload": list(modules),
            "jobs": args.jobs,
            **{k: round(v, 3) for k, v in row.items()},
            "loadavg_1m": [load0, os.getloadavg()[0]],
            "src": str(Path(sys.modules["stoker"].__file__ or "").parent),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
