"""Metrics computed only from the core's records: job timestamps and paths, pod GPU-seconds
per state (``Pod.held``) plus the still-open state accrued up to the end of the run."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from stoker.core import Core, HitPath, Job, JobState, PodState
from stoker.core.shares import jain
from stoker.sim.engine import SimResult


def finished_jobs(core: Core) -> list[Job]:
    """Jobs that ran (started and finished, no failure), in submit order."""
    return [
        j
        for j in core.jobs.values()
        if j.state is JobState.FINISHED and j.started is not None and j.failure is None
    ]


def start_latencies(core: Core) -> np.ndarray:
    """Submit-to-running seconds of every job that ran."""
    return np.array([j.started - j.submitted for j in finished_jobs(core)], dtype=float)


def percentile(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def loop_times(core: Core) -> dict[str, float]:
    """Per tenant (one loop), first submit to last finish."""
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for j in core.jobs.values():
        t = j.spec.tenant
        first[t] = min(first.get(t, j.submitted), j.submitted)
        if j.finished is not None:
            last[t] = max(last.get(t, j.finished), j.finished)
    return {t: last[t] - first[t] for t in first if t in last}


def tenant_jain(jobs: Iterable[tuple[str, float, float]]) -> float:
    """Jain's index over tenants' mean slowdowns, from (tenant, queueing, JCT) per job: a
    job's slowdown is its JCT over its time not queued (1 s at least), so each tenant's
    queueing counts against the work it asked for (1: every tenant waits alike)."""
    per: dict[str, list[float]] = {}
    for tenant, queue_s, jct_s in jobs:
        per.setdefault(tenant, []).append(jct_s / max(jct_s - queue_s, 1.0))
    return jain([float(np.mean(v)) for v in per.values()])


def hit_fractions(core: Core) -> dict[str, float]:
    """Share of jobs that ran on each path (warm, standby, cold)."""
    jobs = finished_jobs(core)
    n = len(jobs) or 1
    return {p.value: sum(1 for j in jobs if j.path is p) / n for p in HitPath}


def handovers(core: Core) -> np.ndarray:
    """Per GPU: a job of one caller ends, a job of another caller that was already waiting
    is the next to run on that GPU: the time from the first's end to the second running."""
    by_gpu: dict[str, list[Job]] = {}
    for j in finished_jobs(core):
        for pid in j.pods:
            for gid in core.pods[pid].gpus:
                by_gpu.setdefault(gid, []).append(j)
    out = []
    for jobs in by_gpu.values():
        jobs.sort(key=lambda j: (j.started, j.id))
        for prev, nxt in itertools.pairwise(jobs):
            assert prev.finished is not None and nxt.started is not None
            if (
                nxt.pair != prev.pair
                and nxt.submitted <= prev.finished
                and nxt.started >= prev.finished
            ):
                out.append(nxt.started - prev.finished)
    return np.array(out, dtype=float)


@dataclass(frozen=True, slots=True)
class Held:
    """GPU-seconds held per pod state over the run, and the run's length."""

    by_state: dict[str, float]
    end: float

    @property
    def total(self) -> float:
        return sum(self.by_state.values())

    @property
    def mean_gpus(self) -> float:
        return self.total / self.end if self.end > 0 else 0.0


def held(result: SimResult) -> Held:
    """GPU-seconds per state from ``Pod.held``, plus each live pod's open state to the end."""
    core, end = result.core, result.end
    by_state: dict[str, float] = {s.value: 0.0 for s in PodState if s is not PodState.GONE}
    for pod in core.pods.values():
        for state, secs in pod.held.items():
            by_state[state] = by_state.get(state, 0.0) + secs
        if pod.state is not PodState.GONE:
            share = sum(core.cluster.gpus[g].allocs.get(pod.id, 0.0) for g in pod.gpus)
            by_state[pod.state.value] += share * max(0.0, end - pod.since)
    return Held(by_state, end)


def held_series(result: SimResult, step_s: float) -> tuple[np.ndarray, np.ndarray]:
    """GPUs held by all pods, every ``step_s``: the engine's record of the core's allocation
    after each event, read as a step function."""
    times = np.array([t for t, _, _ in result.held])
    values = np.array([h for _, h, _ in result.held])
    grid = np.arange(0.0, result.end + step_s, step_s)
    idx = np.searchsorted(times, grid, side="right") - 1
    return grid, np.where(idx >= 0, values[np.maximum(idx, 0)], 0.0)


def summary(result: SimResult) -> dict[str, float]:
    """The standard numbers of one run."""
    lat = start_latencies(result.core)
    hits = hit_fractions(result.core)
    h = held(result)
    return {
        "jobs": float(len(lat)),
        "start_p50_s": percentile(lat, 50),
        "start_p90_s": percentile(lat, 90),
        "start_p99_s": percentile(lat, 99),
        "warm_fraction": hits["warm"],
        "standby_fraction": hits["standby"],
        "cold_fraction": hits["cold"],
        "held_gpu_s": h.total,
        "mean_held_gpus": h.mean_gpus,
        "end_s": result.end,
        "events": float(result.events),
    }


def json_safe(value: Any) -> Any:
    """JSON-safe: NaN and infinities become None; numpy scalars become plain numbers."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, float | np.floating):
        f = float(value)
        return f if math.isfinite(f) else None
    if isinstance(value, np.integer):
        return int(value)
    return value
