"""Trace-driven evaluation of GFS and the baselines (``stoker sim gfs``) on the one core and
the one engine.

The trace's jobs are submitted to :class:`~stoker.core.Core` as hp and spot jobs (one pod per
worker; the virtual runtime starts and stops trace pods in no time, since a trace duration
already covers its job's start). Every ``query_every_min`` minutes the driver asks the
forecaster for each tenant's HP peaks ahead, from the core's own demand meter, and hands
each answer to the core (``ForecastUpdated``); the core sums them per GPU pool. Every
``refit_every_min`` minutes it refits the forecaster. Nothing the live system could not
know is fed in: no oracle of demand.

The trace's HP history before the simulated span fills the meter first; metrics count jobs
submitted inside the measured window.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from stoker.core import Core, ForecastUpdated, JobClass, JobSpec, JobSubmitted, Profile
from stoker.core.gfs.quota import guaranteed_hours, quantile
from stoker.core.model import GPU, Cluster, Node
from stoker.core.registry import Preset
from stoker.core.shape import gpu_refusal, worker_cards
from stoker.forecast.base import Cadence, Forecaster, ForecastError, SeriesKey
from stoker.forecast.registry import DEFAULT_FORECASTER, make_forecaster
from stoker.forecast.series import Calendar, demand_series
from stoker.sim.engine import Simulator, Workload
from stoker.sim.metrics import tenant_jain
from stoker.sim.paired import JobOutcomes, job_metrics
from stoker.sim.virtual import VirtualRuntime
from stoker.traces.base import Trace, TraceJob, TraceNode
from stoker.traces.scale import (
    CapacityScale,
    capacity_scale,
    keep_nodes,
    time_scale,
)
from stoker.units import DAY_S

LOADS: dict[str, float] = {"low": 0.5, "medium": 1.0, "high": 1.5}
# when the spot quota and preemption apply: ``window`` (the authors': only inside the
# measured window, no spot before it, no quota after it) or ``always`` (stoker's)
GATES = ("window", "always")
# a copied spot job (load above 1) is submitted this long after its original, at most
LOAD_JITTER_S = 3600.0


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
class TraceResult:
    """Per-policy metrics, the quota timeline and the measured jobs' outcomes."""

    policy: str
    metrics: dict[str, object]
    jobs: JobOutcomes  # the measured jobs' outcomes the metrics count
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
                replace(
                    job,
                    name=f"{job.name}~{c}",
                    submit_time=job.submit_time + shift,
                    job_class="spot",
                )
            )
    out.sort(key=lambda j: (j.submit_time, j.name))
    return out


def build_cluster(
    nodes: list[TraceNode], relabel: set[str] | frozenset[str] = frozenset(), label: str = ""
) -> Cluster:
    """The core's Cluster from a trace's node list (one GPU pool per GPU model); nodes
    named in ``relabel`` join GPU pool ``label`` instead (a partitioned slice)."""
    built = []
    for n in nodes:
        model = label if n.name in relabel else n.gpu_model
        gpus = [GPU(f"{n.name}/{i}", n.name, i, model) for i in range(n.gpus)]
        built.append(Node(n.name, model, gpus, n.cpu))
    return Cluster(built)


def trace_profiles(nodes: list[TraceNode]) -> list[Profile]:
    """One profile per GPU model: a trace job's pods are of its GPU pool's profile."""
    return [Profile(m, gpu_model=m) for m in sorted({n.gpu_model for n in nodes})]


def trace_spec(job: TraceJob) -> JobSpec:
    """A trace job as the core's job: hp or spot, ``workers`` x ``gpus`` of its GPU pool."""
    return JobSpec(
        id=job.name,
        tenant=job.tenant,
        profile=job.gpu_model,
        job_class=JobClass(job.job_class),
        workers=job.worker_num,
        gpus=job.gpu_request,
        gpu_model=job.gpu_model,
        duration=job.duration,
    )


# at one instant: runtime news (ends free room) first, then the forecaster's clocks,
# submissions, the core's Tick, timeline samples
PRIO_CLOCK, PRIO_SUBMIT, PRIO_TICK, PRIO_SAMPLE = 1, 2, 3, 4


class TraceWorkload:
    """Submits a trace's jobs at their times, runs the forecaster's clocks and samples the
    timeline; done when every job has finished."""

    def __init__(
        self,
        jobs: list[TraceJob],
        forecaster: Forecaster | None,
        cadence: Cadence,
        hours: int,
        g: float,
        timeline_every_s: float,
        progress: Callable[[str], None] | None,
        name: str,
        clocks_until: float = math.inf,
        cold_from: float | None = None,
    ) -> None:
        """``clocks_until``: the forecaster's clocks and the timeline stop there (the end
        of the window where the spot quota holds: after it no forecast changes anything).
        ``cold_from`` (the authors' cold start): the forecaster reads no history before it
        and first fits and answers a day after it."""
        self.jobs = jobs
        self.clocks_until = clocks_until
        self.cold_from = cold_from
        self.forecaster = forecaster
        self.cadence = cadence
        self.hours = hours
        self.g = g  # the forecast quantile the timeline plots
        self.timeline_every_s = timeline_every_s
        self.progress = progress
        self.name = name
        self.remaining = len(jobs)
        self.next_sub = 0
        self.timeline: dict[str, list[float]] = {
            k: [] for k in ("t", "quota", "hp_used", "spot_used", "hp_forecast_u", "capacity")
        }

    @property
    def done(self) -> bool:
        return self.remaining == 0

    def begin(self, sim: Simulator) -> None:
        t0 = sim.now
        self._next_submission(sim)
        if self.forecaster is not None:
            # cold: ``policy/gfs.py`` trains at the day boundaries inside the window, on
            # what its recorder saw there: the first fit is a day in
            first = t0 if self.cold_from is None else max(t0, self.cold_from + DAY_S)
            sim.at(first, self._refit, sim, prio=PRIO_CLOCK)
            sim.at(first, self._query, sim, prio=PRIO_CLOCK)
        sim.at(t0, self._sample, sim, prio=PRIO_SAMPLE)

    def _again(
        self, sim: Simulator, every_s: float, fn: Callable[[Simulator], None], prio: int
    ) -> None:
        """Run a clock's ``fn`` again ``every_s`` from now, while it can still matter: once
        every job is in and none waits, nothing can be queued again (only a queued HP job
        evicts), so the clocks stop and the running jobs play out to their ends; and
        none runs at or after ``clocks_until``."""
        busy = self.next_sub < len(self.jobs) or sim.core.hpspot.queued() > 0
        if busy and sim.now + every_s < self.clocks_until:
            sim.after(every_s, fn, sim, prio=prio)

    def _next_submission(self, sim: Simulator) -> None:
        # one submission in the heap at a time keeps the heap small on a long trace
        if self.next_sub < len(self.jobs):
            job = self.jobs[self.next_sub]
            sim.at(job.submit_time, self._submit, sim, job, prio=PRIO_SUBMIT)

    def _submit(self, sim: Simulator, job: TraceJob) -> None:
        self.next_sub += 1
        self._next_submission(sim)
        sim.deliver(JobSubmitted(trace_spec(job)))

    def job_done(self, sim: Simulator, job_id: str) -> None:
        self.remaining -= 1
        if self.progress is not None and self.remaining % 20_000 == 0:
            self.progress(f"{self.name}: t={sim.now / DAY_S:.2f} d, {self.remaining} jobs left")

    def run_s(self, sim: Simulator, job_id: str) -> float:
        """A trace job runs what it still owes: the core's record of its remaining work
        and the restart overhead of this run (GFS's checkpoint model)."""
        job = sim.core.jobs[job_id]
        return job.overhead + job.remaining

    def _refit(self, sim: Simulator) -> None:
        assert self.forecaster is not None
        meter = sim.core.demand
        meter.record_until(sim.now)
        keys = sorted(meter.keys, key=lambda k: (k[1], k[0]))
        last = self.forecaster.fit_minutes
        if self.cold_from is not None:
            seen = max(1, int((sim.now - self.cold_from) // 60))
            last = seen if last is None else min(last, seen)
        self.forecaster.fit(
            {SeriesKey(t, p): meter.history((t, p), last) for t, p in keys}, int(sim.now // 60)
        )
        self._again(sim, self.cadence.refit_every_min * 60.0, self._refit, PRIO_CLOCK)

    def _query(self, sim: Simulator) -> None:
        assert self.forecaster is not None
        meter = sim.core.demand
        meter.record_until(sim.now)
        now_min = int(sim.now // 60)
        gpu_pools = sim.core.hpspot.gpu_pools
        # only the hourly peaks the forecaster reads, kept by the meter as the clock passes
        keys, peaks, recorded = meter.peaks(self.forecaster.query_hours)
        rows = [i for i, k in enumerate(keys) if k[1] in gpu_pools]
        if len(rows) < len(keys):
            keys, peaks = [keys[i] for i in rows], peaks[rows]
        if keys:
            # one call for every series (the forecasters vectorise it)
            f = self.forecaster.predict_peaks(
                [SeriesKey(t, p) for t, p in keys], peaks, now_min, self.hours, recorded
            )
            means = f.mean[:, : self.hours].tolist()
            variances = (f.std[:, : self.hours] ** 2).tolist()
            # one query's answers reach the core together: the quota follows their sum
            sim.deliver_all(
                [
                    ForecastUpdated(tenant, gpu_pool, tuple(means[i]), tuple(variances[i]))
                    for i, (tenant, gpu_pool) in enumerate(keys)
                ]
            )
        self._again(sim, self.cadence.query_every_min * 60.0, self._query, PRIO_CLOCK)

    def _sample(self, sim: Simulator) -> None:
        core = sim.core
        hpspot = core.hpspot
        upper = 0.0
        for mean, var in core.forecast.values():
            upper += float(quantile(mean[:1], var[:1], self.g)[0])
        tl = self.timeline
        tl["t"].append(sim.now)
        tl["quota"].append(float(sum(hpspot.quota.values())))
        tl["hp_used"].append(float(sum(u[JobClass.HP] for u in hpspot.used.values())))
        tl["spot_used"].append(float(sum(u[JobClass.SPOT] for u in hpspot.used.values())))
        tl["hp_forecast_u"].append(upper)
        tl["capacity"].append(float(core.cluster.total_gpus))
        self._again(sim, self.timeline_every_s, self._sample, PRIO_SAMPLE)


def simulate(
    trace: Trace,
    spec: Preset,
    window: Window,
    *,
    forecaster: Forecaster | None = None,
    cadence: Cadence | None = None,
    timeline_every_s: float = 3600.0,
    progress: Callable[[str], None] | None = None,
    tail_limit_s: float = 400 * DAY_S,
    gate: str = "window",
) -> TraceResult:
    """Run one preset over the trace's jobs submitted in ``[window.sim_start, window.end)``
    until every one has finished (nothing is dropped; a job still queued ``tail_limit_s``
    after the window is an error, not a silent loss).

    HP jobs submitted before the span and still running at its start are carried in: they
    are submitted at the span's start with the rest of their duration (not measured).
    ``gate``: one of :data:`GATES`.
    """
    if gate not in GATES:
        raise SimGFSError(f"gate: expected one of {', '.join(GATES)}, got {gate!r}")
    wall0 = time.perf_counter()
    t0 = window.sim_start
    cluster = build_cluster(trace.nodes)
    profiles = trace_profiles(trace.nodes)
    core = Core(cluster, profiles, spec.policies, start=t0)
    jobs = simulated_jobs(trace, window, set(core.hpspot.gpu_pools))
    config = spec.policies.hpspot
    # the node cost's lost-work term is over the evaluation window (the authors' timespan)
    config.cost_window_s = window.end - window.start + 1.0
    config.window = (window.start, window.end) if gate == "window" else None
    config.arrivals_end = window.end  # the trace's jobs are those submitted before it
    cadence = cadence or (forecaster.cadence if forecaster else Cadence())
    # the authors' forecaster cold start (a preset's ``cold_start``, with the window's
    # gate): no history before the window, and no spot quota until the first fit
    cold = spec.cold_start and gate == "window" and forecaster is not None
    if cold:
        config.quota_opens = window.start + DAY_S
    elif forecaster is not None:
        prefill_meter(core, trace, t0)
    workload = TraceWorkload(
        jobs,
        forecaster,
        cadence,
        guaranteed_hours(config.guarantee_s),
        config.g,
        timeline_every_s,
        progress,
        spec.name,
        # the authors' forecaster runs only inside the window (``policy/gfs.py``); with the
        # window's gate the quota does not hold after it, so no forecast there changes a
        # decision
        window.end if gate == "window" else math.inf,
        window.start if cold else None,
    )
    alloc = {"window": 0.0, "total": 0.0, "cards": 0.0, "hp": 0.0}
    # GPU-s held by hp and spot workers in the window, per GPU pool
    by_gpu_pool: dict[str, float] = {}
    # the spot GPU-seconds of succeeded periods when the window opened and closed
    ok_at: dict[str, float] = {}

    def advance(a: float, b: float) -> None:
        hpspot = core.hpspot
        held = hpspot.allocated
        alloc["total"] += held * (b - a)
        lo, hi = max(a, window.start), min(b, window.end)
        if hi > lo:
            alloc["window"] += held * (hi - lo)
            alloc["cards"] += hpspot.busy_cards * (hi - lo)
            alloc["hp"] += sum(u[JobClass.HP] for u in hpspot.used.values()) * (hi - lo)
            for gpu_pool, u in hpspot.used.items():
                held_s = (u[JobClass.HP] + u[JobClass.SPOT]) * (hi - lo)
                by_gpu_pool[gpu_pool] = by_gpu_pool.get(gpu_pool, 0.0) + held_s
        for edge, at in (("start", window.start), ("end", window.end)):
            if edge not in ok_at and a <= at <= b:
                ok_at[edge] = hpspot.spot_ok_gpu_s

    runtime = VirtualRuntime(instant=[p.name for p in profiles])
    sim = trace_simulator(core, workload, runtime, t0, advance)
    result = sim.run(max_time=window.end + tail_limit_s)
    if workload.remaining:
        raise SimGFSError(f"{spec.name}: {workload.remaining} jobs never finished")
    wall = time.perf_counter() - wall0
    metrics, outcomes = _metrics(
        core, jobs, window, alloc["window"], alloc["total"], cluster.total_gpus
    )
    # the authors' definitions (``Recorder.log_output``), beside ours
    capacity_s = cluster.total_gpus * (window.end - window.start)
    spot_ok = ok_at.get("end", core.hpspot.spot_ok_gpu_s) - ok_at.get("start", 0.0)
    metrics["authors.gpu_allocation_rate"] = alloc["cards"] / capacity_s
    metrics["authors.useful_gpu_time_rate"] = (alloc["hp"] + spot_ok) / capacity_s
    # which GPU pools the allocation comes from (a contended trace's idle GPU pools show here)
    for gpu_pool, gpus in sorted(cluster.capacity.items()):
        held = by_gpu_pool.get(gpu_pool, 0.0)
        metrics[f"pool_allocation_rate.{gpu_pool}"] = held / (gpus * (window.end - window.start))
    metrics["events"] = result.events
    metrics["wall_s"] = round(wall, 3)
    metrics["events_per_s"] = round(result.events / wall, 1) if wall > 0 else 0.0
    return TraceResult(spec.name, metrics, outcomes, workload.timeline)


def trace_simulator(
    core: Core,
    workload: Workload,
    runtime: VirtualRuntime,
    start: float,
    on_advance: Callable[[float, float], None],
) -> Simulator:
    """The engine as a trace run drives it: no GPUs-held timeline (a long run), the core's
    Tick after the submissions of an instant, ``on_advance`` told of every clock step, gone
    hp and spot pods forgotten (a long run's registry holds only the pods still there)."""
    return Simulator(
        core,
        workload,
        runtime,
        start=start,
        record_held=False,
        tick_prio=PRIO_TICK,
        on_advance=on_advance,
        forget_gone=True,
    )


def simulated_jobs(trace: Trace, window: Window, gpu_pools: set[str]) -> list[TraceJob]:
    """The trace's jobs submitted in ``[window.sim_start, window.end)``, after the HP jobs
    submitted earlier and still running at ``sim_start``, carried in (submitted then, with
    the rest of their duration; named ``NAME@carry``). Raises when there are none, or a job
    names a GPU model outside ``gpu_pools``."""
    t0 = window.sim_start
    jobs = [j for j in trace.jobs if t0 <= j.submit_time < window.end]
    carried = [
        replace(j, name=f"{j.name}@carry", submit_time=t0, duration=j.submit_time + j.duration - t0)
        for j in trace.jobs
        if j.submit_time < t0 < j.submit_time + j.duration and j.job_class == "hp"
    ]
    jobs = carried + jobs
    if not jobs:
        raise SimGFSError("the window holds no jobs")
    unknown = sorted({j.gpu_model for j in jobs} - gpu_pools)
    if unknown:
        raise SimGFSError(f"gpu_model {unknown[0]!r}: no node of that model in the trace")
    return jobs


def prefill_meter(core: Core, trace: Trace, t0: float) -> None:
    """Fill the core's HP demand meter with the trace's HP history before ``t0``: what the
    meter would hold had it run (the forecaster's first fit reads it)."""
    if t0 < 60:
        return
    start_min = int(t0 // 60)
    warm = demand_series(trace.jobs, end_min=start_min)
    core.demand.prefill({(k.tenant, k.gpu_pool): v for k, v in warm.items()}, start_min)


def _metrics(
    core: Core,
    jobs: list[TraceJob],
    window: Window,
    alloc_window: float,
    alloc_total: float,
    total_gpus: int,
) -> tuple[dict[str, object], JobOutcomes]:
    """The run's metrics and the measured jobs' outcomes they count (jobs submitted in the
    window)."""
    measured = [j for j in jobs if window.start <= j.submit_time < window.end]
    outcomes = JobOutcomes.of((core.jobs[j.name], j.gpu_model) for j in measured)
    useful = sum(g.gpus * (g.spec.duration or 0.0) for g in core.jobs.values())
    span = window.end - window.start
    ran = [core.jobs[j.name] for j in measured]
    return {
        **job_metrics(outcomes),
        "tenants.jain_slowdown": tenant_jain(
            (j.spec.tenant, j.queue_s, (j.finished or 0.0) - j.submitted) for j in ran
        ),
        "gpu_allocation_rate": alloc_window / (total_gpus * span),
        "useful_gpu_time_rate": useful / alloc_total if alloc_total else 0.0,
    }, outcomes


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
    # a fraction of every GPU model's nodes, or a CapacityScale (per model, or fill:TARGET)
    capacity_scale: float | CapacityScale = 1.0
    time_scale: float = 1.0

    def __post_init__(self) -> None:
        if not self.window_days > 0:
            raise SimGFSError(f"days: must be > 0, got {self.window_days}")
        if not 0 < self.scale <= 1:
            raise SimGFSError(f"scale: must be in (0, 1], got {self.scale}")
        if not isinstance(self.capacity_scale, CapacityScale):
            try:
                CapacityScale.parse(self.capacity_scale)
            except ValueError as exc:
                raise SimGFSError(str(exc)) from None
        if not self.time_scale > 0:
            raise SimGFSError(f"time_scale: must be > 0, got {self.time_scale}")
        if self.warm_days < 0 or self.burn_in_days < 0:
            raise SimGFSError("warm_days and burn_in_days must be >= 0")


def runnable(jobs: list[TraceJob], nodes: list[TraceNode]) -> list[TraceJob]:
    """The jobs that could start on ``nodes`` with the cluster empty, by the core's own
    shape refusal (:func:`~stoker.core.shape.gpu_refusal`): a 125 x 8-GPU job on a GPU pool
    with 77 8-GPU nodes never starts (the core would refuse it at submit)."""
    sizes: dict[str, dict[int, int]] = {}
    for n in nodes:
        per = sizes.setdefault(n.gpu_model, {})
        per[n.gpus] = per.get(n.gpus, 0) + 1
    refused: dict[tuple[str, float, int], bool] = {}  # (model, request, workers) -> refused

    def fits(j: TraceJob) -> bool:
        key = (j.gpu_model, j.gpu_request, j.worker_num)
        if key not in refused:
            gpu_pool_sizes = sizes.get(j.gpu_model, {})
            cards, share = worker_cards(j.gpu_request)
            refused[key] = (
                gpu_refusal(j.gpu_model, gpu_pool_sizes, cards, share, j.worker_num) is not None
            )
        return not refused[key]

    return [j for j in jobs if fits(j)]


def prepare_trace(kind: str, path: str | None, setup: Setup) -> tuple[Trace, Window]:
    """Load (or generate) the trace and place the measured window in it.

    v2026 without a path: jobs are generated for published days
    ``[V2026_WINDOW_DAY - warm_days, V2026_WINDOW_DAY + window_days)``; the first
    ``warm_days`` only warm the forecaster (minus ``burn_in_days`` simulated to fill the
    cluster). A real trace: the window is its last ``window_days`` (but it starts no
    earlier than ``min(warm_days, 40 % of the span)``); what comes before is history.
    ``scale < 1`` keeps that share of each model's nodes and, for generated jobs,
    generates that share of the jobs (a real trace keeps a seeded sample).
    ``capacity_scale`` keeps that share of each model's nodes (or per model, or sized to
    each model's mean demand over the measured window) and every job
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
    # fill:TARGET sizes each GPU pool to its demand over the window (its end as below,
    # before jobs too large for the kept nodes are left out)
    last = trace.jobs[-1].submit_time if trace.jobs else 0.0
    demand_end = min(start + setup.window_days * DAY_S, last + 1.0)
    models = {n.gpu_model for n in trace.nodes}
    trace = capacity_scale(trace, setup.capacity_scale, start, max(demand_end, start + 1.0))
    nodes = keep_nodes(trace.nodes, setup.scale)
    # a job that could never start on the (scaled) GPU pool: leave it out, and say how many
    jobs = runnable(trace.jobs, nodes)
    notes = dict(trace.notes)
    # a GPU model the capacity scale left out (a share of 0) takes its jobs with it
    kept = {n.gpu_model for n in nodes}
    dropped = sum(1 for j in trace.jobs if j.gpu_model in models and j.gpu_model not in kept)
    notes["left_out_model_dropped"] = str(dropped)
    notes["left_out_too_large"] = str(len(trace.jobs) - len(jobs) - dropped)
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
