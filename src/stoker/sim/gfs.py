"""Trace-driven evaluation of GFS and the baselines (``stoker sim gfs``).

The driver carries out the scheduler's actions on a virtual clock: a started gang ends at
its ``finish_at`` unless evicted first; every ``query_every_min`` minutes it asks the
forecaster for each tenant's HP peaks ahead, sums them per pool and hands the scheduler a
:class:`ForecastUpdated`; every ``refit_every_min`` minutes it refits the forecaster.

HP demand per tenant and pool is recorded every minute (:class:`DemandRecorder`); the
trace's HP history before the simulated span warms the forecaster; metrics count jobs
submitted inside the measured window.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

from stoker.core.gfs import (
    ForecastUpdated,
    GangCompleted,
    GangSpec,
    GangSubmitted,
    GFSScheduler,
    PolicySpec,
    StartGang,
    Tick,
)
from stoker.core.gfs.quota import guaranteed_hours
from stoker.core.model import GPU, Cluster, Node
from stoker.forecast.base import Cadence, Forecaster, ForecastError, SeriesKey
from stoker.forecast.registry import DEFAULT_FORECASTER, make_forecaster
from stoker.forecast.series import Calendar, demand_series
from stoker.traces.base import Trace, TraceJob, TraceNode
from stoker.traces.scale import capacity_scale, keep_nodes, time_scale

LOADS: dict[str, float] = {"low": 0.5, "medium": 1.0, "high": 1.5}
# a copied spot job (load above 1) is submitted this long after its original, at most
LOAD_JITTER_S = 3600.0
DAY_S = 86400.0


class SimGFSError(ValueError):
    """Bad simulation input (the message names the field)."""


@dataclass(frozen=True, slots=True)
class Window:
    """Simulated span and measured window, in trace seconds. Jobs submitted before
    ``sim_start`` only warm the forecaster; those in ``[start, end)`` are measured."""

    sim_start: float
    start: float
    end: float

    def __post_init__(self) -> None:
        if not self.sim_start <= self.start < self.end:
            raise SimGFSError("window: need sim_start <= start < end")


@dataclass
class SimResult:
    """Per-policy metrics and the quota timeline."""

    policy: str
    metrics: dict[str, object]
    timeline: dict[str, list[float]] = field(default_factory=dict)


def scale_spot_load(jobs: list[TraceJob], factor: float, seed: int) -> list[TraceJob]:
    """Spot arrivals times ``factor``: each spot job is kept ``floor(factor)`` times plus once
    more with probability ``factor - floor(factor)``; the copies beyond the first are
    submitted up to ``LOAD_JITTER_S`` later (seeded), under new names. HP jobs are untouched."""
    if not factor > 0:
        raise SimGFSError(f"load: factor must be > 0, got {factor}")
    if factor == 1.0:
        return list(jobs)
    rng = np.random.default_rng(seed)
    out: list[TraceJob] = []
    whole = math.floor(factor)
    frac = factor - whole
    for job in jobs:
        if job.job_class != "spot":
            out.append(job)
            continue
        copies = whole + (1 if rng.random() < frac else 0)
        for c in range(copies):
            if c == 0:
                out.append(job)
                continue
            shift = float(rng.uniform(0.0, LOAD_JITTER_S))
            out.append(
                TraceJob(
                    name=f"{job.name}~{c}",
                    tenant=job.tenant,
                    gpu_model=job.gpu_model,
                    gpu_request=job.gpu_request,
                    worker_num=job.worker_num,
                    submit_time=job.submit_time + shift,
                    duration=job.duration,
                    job_class="spot",
                    cpu_request=job.cpu_request,
                )
            )
    out.sort(key=lambda j: (j.submit_time, j.name))
    return out


def build_cluster(nodes: list[TraceNode]) -> Cluster:
    """The core's Cluster from a trace's node list (one pool per GPU model)."""
    built = []
    for n in nodes:
        gpus = [GPU(f"{n.name}/{i}", n.name, i, n.gpu_model) for i in range(n.gpus)]
        built.append(Node(n.name, n.gpu_model, gpus, n.cpu))
    return Cluster(built)


def _spec(job: TraceJob) -> GangSpec:
    return GangSpec(
        id=job.name,
        tenant=job.tenant,
        pool=job.gpu_model,
        job_class=job.job_class,
        gpu_request=job.gpu_request,
        worker_num=job.worker_num,
        duration=job.duration,
    )


def _p(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else 0.0


class DemandRecorder:
    """HP GPU demand (queued + running) per tenant and pool, one column per minute.

    The minutes before the simulated span come from the trace (each HP job's request from
    submission to submission + duration, :func:`demand_series`), the rest are recorded as
    the simulation runs, so forecasts follow what the scheduler really sees.
    """

    def __init__(self, trace: Trace, start_min: int) -> None:
        warm = demand_series(trace.jobs, end_min=start_min) if start_min > 0 else {}
        keys = sorted(
            {SeriesKey(j.tenant, j.gpu_model) for j in trace.jobs if j.job_class == "hp"}
            | set(warm),
            key=lambda k: (k.pool, k.tenant),
        )
        self.keys = keys
        self.row = {(k.tenant, k.pool): i for i, k in enumerate(keys)}
        self.data = np.zeros((len(keys), max(start_min, 1) + 1440))
        for i, k in enumerate(keys):
            if k in warm:
                self.data[i, :start_min] = warm[k]
        self.minutes = start_min
        self.current = np.zeros(len(keys))

    def add(self, tenant: str, pool: str, gpus: float) -> None:
        self.current[self.row[(tenant, pool)]] += gpus

    def record_until(self, minute: int) -> None:
        """Write the current demand into every minute up to ``minute`` (exclusive)."""
        if minute <= self.minutes:
            return
        if minute > self.data.shape[1]:
            grown = np.zeros((len(self.keys), max(minute, 2 * self.data.shape[1])))
            grown[:, : self.minutes] = self.data[:, : self.minutes]
            self.data = grown
        self.data[:, self.minutes : minute] = np.maximum(self.current, 0.0)[:, None]
        self.minutes = minute

    def history(self, key_index: int) -> np.ndarray:
        return self.data[key_index, : self.minutes]

    def histories(self) -> np.ndarray:
        """Every series' record so far, one row per key (a view, not a copy)."""
        return self.data[:, : self.minutes]


def simulate(
    trace: Trace,
    spec: PolicySpec,
    window: Window,
    *,
    forecaster: Forecaster | None = None,
    cadence: Cadence | None = None,
    timeline_every_s: float = 3600.0,
    progress: Callable[[str], None] | None = None,
    tail_limit_s: float = 400 * DAY_S,
) -> SimResult:
    """Run one policy over the trace's jobs submitted in ``[window.sim_start, window.end)``
    until every one has finished (nothing is dropped; a job still queued ``tail_limit_s``
    after the window is an error, not a silent loss).

    HP jobs submitted before the span and still running at its start are carried in: they
    are submitted at the span's start with the rest of their duration (not measured).
    """
    wall0 = time.perf_counter()
    t0 = window.sim_start
    cluster = build_cluster(trace.nodes)
    sched = GFSScheduler(cluster, spec.config, start=t0)
    pools = sorted(sched.pools)
    jobs = [j for j in trace.jobs if t0 <= j.submit_time < window.end]
    carried = [
        TraceJob(
            name=f"{j.name}@carry",
            tenant=j.tenant,
            gpu_model=j.gpu_model,
            gpu_request=j.gpu_request,
            worker_num=j.worker_num,
            submit_time=t0,
            duration=j.submit_time + j.duration - t0,
            job_class=j.job_class,
        )
        for j in trace.jobs
        if j.submit_time < t0 < j.submit_time + j.duration and j.job_class == "hp"
    ]
    jobs = carried + jobs
    if not jobs:
        raise SimGFSError("the window holds no jobs")
    unknown = sorted({j.gpu_model for j in jobs} - set(pools))
    if unknown:
        raise SimGFSError(f"gpu_model {unknown[0]!r}: no node of that model in the trace")
    hours = guaranteed_hours(spec.config.guarantee_s)
    cadence = cadence or (forecaster.cadence if forecaster else Cadence())
    recorder = DemandRecorder(trace, int(t0 // 60)) if forecaster is not None else None
    by_pool: dict[str, list[int]] = {p: [] for p in pools}
    if recorder is not None:
        for i, key in enumerate(recorder.keys):
            if key.pool in by_pool:
                by_pool[key.pool].append(i)

    heap: list[tuple[float, int, int, object]] = []
    seq = 0

    def push(at: float, prio: int, item: object) -> None:
        nonlocal seq
        heapq.heappush(heap, (at, prio, seq, item))
        seq += 1

    # at one instant: completions free room first, then clocks, submissions, samples
    for job in jobs:
        push(job.submit_time, 2, GangSubmitted(_spec(job)))
    step_q = cadence.query_every_min * 60.0
    step_fit = cadence.refit_every_min * 60.0
    if forecaster is not None:
        push(t0, 1, "refit")
        push(t0, 1, "query")
    push(min(sched.next_deadline(), t0), 3, Tick())
    push(t0, 4, "sample")
    timeline: dict[str, list[float]] = {
        k: [] for k in ("t", "quota", "hp_used", "spot_used", "hp_forecast_u", "capacity")
    }
    z_g = NormalDist().inv_cdf(spec.config.g)
    last_upper = 0.0
    alloc_window = 0.0  # GPU-s allocated inside the measured window
    alloc_total = 0.0  # GPU-s allocated over the whole run
    last_t = t0
    events = 0
    remaining = len(jobs)
    give_up = window.end + tail_limit_s
    subs_left = len(jobs)

    def active() -> bool:
        # once every job is in and none waits, nothing can be queued again (only a queued
        # HP job evicts), so the clocks stop and the running jobs play out to their ends
        return subs_left > 0 or sched.queued() > 0

    while heap and remaining > 0:
        at, _prio, _, item = heapq.heappop(heap)
        if at > give_up:
            break
        if at > last_t:
            alloc_total += sched.allocated * (at - last_t)
            lo, hi = max(last_t, window.start), min(at, window.end)
            if hi > lo:
                alloc_window += sched.allocated * (hi - lo)
            last_t = at
        events += 1
        last_at_instant = not heap or heap[0][0] > at
        event = None
        if item == "refit" or item == "query":
            assert forecaster is not None and recorder is not None
            now_min = int(at // 60)
            recorder.record_until(now_min)
            if item == "refit":
                forecaster.fit(
                    {k: recorder.history(i) for i, k in enumerate(recorder.keys)}, now_min
                )
                if subs_left > 0:
                    push(at + step_fit, 1, "refit")
            else:
                last_upper = 0.0
                # one call for every series (the forecasters vectorise it); once every job
                # is in, HP demand can only fall from here, so the future is known (today's
                # demand, no spread), no guess needed
                if subs_left > 0:
                    f = forecaster.predict_many(recorder.keys, recorder.histories(), now_min, hours)
                    f_mean, f_var = f.mean[:, :hours], f.std[:, :hours] ** 2
                else:
                    f_mean = np.repeat(recorder.current[:, None], hours, axis=1)
                    f_var = np.zeros_like(f_mean)
                for pool in pools:
                    rows = by_pool[pool]
                    mean = f_mean[rows].sum(axis=0)
                    var = f_var[rows].sum(axis=0)
                    last_upper += float(mean[0] + z_g * math.sqrt(var[0]))
                    sched.handle(ForecastUpdated(pool, tuple(mean), tuple(var)), at, schedule=False)
                if active():
                    push(at + step_q, 1, "query")
        elif item == "sample":
            timeline["t"].append(at)
            timeline["quota"].append(float(sum(sched.quota.values())))
            timeline["hp_used"].append(float(sum(sched.used[p]["hp"] for p in pools)))
            timeline["spot_used"].append(float(sum(sched.used[p]["spot"] for p in pools)))
            timeline["hp_forecast_u"].append(last_upper)
            timeline["capacity"].append(float(cluster.total_gpus))
            if active():
                push(at + timeline_every_s, 4, "sample")
        else:
            event = item
        if event is None:
            if not last_at_instant:
                continue
            actions = sched.schedule(at)
        else:
            if recorder is not None:
                recorder.record_until(int(at // 60))
            actions = sched.handle(event, at, schedule=last_at_instant)
            if isinstance(event, Tick):
                if active():
                    push(max(sched.next_deadline(), at + 1e-6), 3, Tick())
            elif isinstance(event, GangSubmitted):
                subs_left -= 1
                if recorder is not None and event.spec.job_class == "hp":
                    recorder.add(event.spec.tenant, event.spec.pool, event.spec.gpus)
            elif (
                isinstance(event, GangCompleted)
                and event.job in sched.finished
                and sched.finished[event.job].finished == at
            ):
                remaining -= 1
                done = sched.finished[event.job].spec
                if recorder is not None and done.job_class == "hp":
                    recorder.add(done.tenant, done.pool, -done.gpus)
        # an evicted run's completion stays queued; the scheduler ignores it as stale
        for action in actions:
            if isinstance(action, StartGang):
                push(action.finish_at, 0, GangCompleted(action.job))
        if progress is not None and events % 200_000 == 0:
            progress(f"{spec.name}: t={at / DAY_S:.2f} d, {remaining} jobs left")
    if remaining:
        raise SimGFSError(f"{spec.name}: {remaining} jobs never finished")
    wall = time.perf_counter() - wall0
    metrics = _metrics(sched, jobs, window, alloc_window, alloc_total, cluster.total_gpus)
    metrics["events"] = events
    metrics["wall_s"] = round(wall, 3)
    metrics["events_per_s"] = round(events / wall, 1) if wall > 0 else 0.0
    return SimResult(spec.name, metrics, timeline)


def _metrics(
    sched: GFSScheduler,
    jobs: list[TraceJob],
    window: Window,
    alloc_window: float,
    alloc_total: float,
    total_gpus: int,
) -> dict[str, object]:
    measured = [j for j in jobs if window.start <= j.submit_time < window.end]
    spot = [sched.finished[j.name] for j in measured if j.job_class == "spot"]
    hp = [sched.finished[j.name] for j in measured if j.job_class == "hp"]
    failed = sum(g.evictions for g in spot)
    ok = sum(g.periods_ok for g in spot)
    useful = sum(g.spec.gpus * g.spec.duration for g in sched.finished.values())
    span = window.end - window.start
    return {
        "spot.jobs": len(spot),
        "spot.eviction_rate": failed / (failed + ok) if failed + ok else 0.0,
        "spot.mean_queue_s": _mean([g.queue_s for g in spot]),
        "spot.mean_jct_s": _mean([g.finished - g.submitted for g in spot]),
        "hp.jobs": len(hp),
        "hp.mean_queue_s": _mean([g.queue_s for g in hp]),
        "hp.p99_jct_s": _p([g.finished - g.submitted for g in hp], 99),
        "gpu_allocation_rate": alloc_window / (total_gpus * span),
        "useful_gpu_time_rate": useful / alloc_total if alloc_total else 0.0,
        "preemptions_per_spot_job": failed / len(spot) if spot else 0.0,
    }


# ---------------------------------------------------------------- experiments

V2026_WINDOW_DAY = 35  # ours: the measured month starts on published day 35 (spot from ~28)


@dataclass(frozen=True, slots=True)
class Setup:
    """How a trace is cut for the evaluation (days) and scaled down for quick runs."""

    window_days: float = 30.0
    warm_days: float = 28.0
    burn_in_days: float = 2.0
    scale: float = 1.0
    seed: int = 0
    capacity_scale: float = 1.0
    time_scale: float = 1.0

    def __post_init__(self) -> None:
        if not self.window_days > 0:
            raise SimGFSError(f"days: must be > 0, got {self.window_days}")
        if not 0 < self.scale <= 1:
            raise SimGFSError(f"scale: must be in (0, 1], got {self.scale}")
        if not 0 < self.capacity_scale <= 1:
            raise SimGFSError(f"capacity_scale: must be in (0, 1], got {self.capacity_scale}")
        if not self.time_scale > 0:
            raise SimGFSError(f"time_scale: must be > 0, got {self.time_scale}")
        if self.warm_days < 0 or self.burn_in_days < 0:
            raise SimGFSError("warm_days and burn_in_days must be >= 0")


def prepare_trace(kind: str, path: str | None, setup: Setup) -> tuple[Trace, Window]:
    """Load (or generate) the trace and place the measured window in it.

    v2026 without a path: jobs are generated for published days
    ``[V2026_WINDOW_DAY - warm_days, V2026_WINDOW_DAY + window_days)``; the first
    ``warm_days`` only warm the forecaster (minus ``burn_in_days`` simulated to fill the
    cluster). A real trace: the window is its last ``window_days`` (but it starts no
    earlier than ``min(warm_days, 40 % of the span)``); what comes before is history.
    ``scale < 1`` keeps that share of each model's nodes and, for generated jobs,
    generates that share of the jobs (a real trace keeps a seeded sample).
    ``capacity_scale`` keeps that share of each model's nodes and every job
    (:func:`~stoker.traces.scale.capacity_scale`); ``time_scale`` compresses a real trace's
    inter-arrival times (:func:`~stoker.traces.scale.time_scale`; generated jobs come at
    the published rate, so there it is an error: raise ``--load`` instead).
    """
    from stoker.traces import load_trace  # heavy; on use

    if kind == "v2026" and path is None:
        if setup.time_scale != 1.0:
            raise SimGFSError("time_scale: generated v2026 jobs come at the published rate")
        warm = min(setup.warm_days, V2026_WINDOW_DAY)
        trace = load_trace(
            "v2026",
            None,
            setup.seed,
            days=warm + setup.window_days,
            start_day=int(V2026_WINDOW_DAY - warm),
            scale=setup.scale,
        )
        start = warm * DAY_S
    else:
        trace = time_scale(load_trace(kind, path, setup.seed), setup.time_scale)
        if setup.scale < 1.0:
            rng = np.random.default_rng(setup.seed)
            keep = rng.random(len(trace.jobs)) < setup.scale
            trace = Trace(
                trace.name,
                trace.nodes,
                [j for j, k in zip(trace.jobs, keep, strict=True) if k],
                trace.source,
                dict(trace.notes),
            )
        if not trace.jobs:
            raise SimGFSError(f"{kind}: the trace holds no jobs")
        # the measured window is the last ``window_days`` of the trace (openb's jobs are
        # mostly in its last weeks), leaving at least 40 % of a short trace as history
        span_days = trace.jobs[-1].submit_time / DAY_S
        start = max(span_days - setup.window_days, min(setup.warm_days, 0.4 * span_days))
        start = min(start, 0.9 * span_days) * DAY_S
    trace = capacity_scale(trace, setup.capacity_scale)
    nodes = keep_nodes(trace.nodes, setup.scale)
    # a job asking more than its (scaled) pool holds could never run: leave it out of the
    # trace, and say how many
    capacity: dict[str, int] = {}
    for n in nodes:
        capacity[n.gpu_model] = capacity.get(n.gpu_model, 0) + n.gpus
    per_node = {n.gpu_model: 0 for n in nodes}
    for n in nodes:
        per_node[n.gpu_model] = max(per_node[n.gpu_model], n.gpus)

    def fits(j: TraceJob) -> bool:
        if j.gpu_model not in capacity:
            return False
        per_worker = j.gpu_request if j.gpu_request < 1 else math.ceil(j.gpu_request - 1e-9)
        if j.gpu_request >= 1 and per_worker > per_node[j.gpu_model]:
            return False
        return per_worker * j.worker_num <= capacity[j.gpu_model] + 1e-9

    jobs = [j for j in trace.jobs if fits(j)]
    notes = dict(trace.notes)
    notes["left_out_too_large"] = str(len(trace.jobs) - len(jobs))
    trace = Trace(trace.name, nodes, jobs, trace.source, notes)
    end = start + setup.window_days * DAY_S
    last = trace.jobs[-1].submit_time if trace.jobs else 0.0
    end = min(end, last + 1.0)
    sim_start = max(0.0, start - setup.burn_in_days * DAY_S)
    return trace, Window(sim_start=sim_start, start=start, end=end)


def policy_forecaster(
    name: str | None,
    cadence: Cadence,
    default: str = DEFAULT_FORECASTER,
    notes: dict[str, str] | None = None,
) -> Forecaster | None:
    """The forecaster a policy asks for: ``default`` (``default``: ridge, numpy only, unless
    told otherwise, e.g. ``orglinear``), a named one (the ablation's ``naive``), or none.
    ``notes``: the trace's, whose epoch and holidays give the forecaster its calendar
    (a trace without dates, such as openb, gets none)."""
    if name is None:
        return None
    try:
        calendar = Calendar.of_trace(notes) if notes and "epoch" in notes else None
        return make_forecaster(
            default if name == "default" else name, cadence=cadence, calendar=calendar
        )
    except ForecastError as exc:
        raise SimGFSError(f"forecaster: {exc}") from exc
