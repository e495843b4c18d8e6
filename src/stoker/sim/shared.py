"""One cluster for warm pools and hp/spot work (``stoker sim shared``), run two ways on the
one core and the one engine.

The cluster is the v2026 node list (or a share of each GPU model's nodes). It carries the
generated v2026 hp/spot jobs (what ``stoker sim gfs`` runs) and, on one GPU model, agent
and RL loops in warm pools (the production-like mix of ``stoker sim firepool``, spread over
the measured window). Two ways:

- ``partitioned``: the warm pools get a fixed slice of that model's nodes, sized for the
  peak GPUs the loops hold when they run alone on the model's nodes (warm, standby and
  active pods together); hp/spot run on the rest. One core, the slice's nodes labelled
  as their own GPU pool, so neither side can use the other's cards.
- ``shared``: every node carries both; idle standby pods, then idle warm pods are the
  first room an HP job reclaims, and the warm budget is bounded by the HP forecast (the
  default rule: what HP is not forecast to need within the keep-alive, beyond what it
  holds now).

Same policies (the ``gfs`` preset: Firepool's warm-pool and GFS's hp/spot defaults), same
jobs, same runtime durations; only the node labels differ. Every
figure comes from this module's own records of the jobs that ended (not from the core's
registries), plus the jobs still open when the run stops, which are counted as
unfinished: nothing is dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from stoker.core import Core, Job, JobClass, Profile
from stoker.core.gfs.quota import guaranteed_hours
from stoker.core.model import HitPath
from stoker.core.registry import preset
from stoker.forecast.base import Cadence
from stoker.sim.engine import Simulator
from stoker.sim.gfs import (
    DAY_S,
    Setup,
    SimGFSError,
    TraceWorkload,
    Window,
    build_cluster,
    policy_forecaster,
    prefill_meter,
    prepare_trace,
    scale_spot_load,
    simulated_jobs,
    trace_profiles,
    trace_simulator,
)
from stoker.sim.metrics import json_safe, percentile, tenant_jain
from stoker.sim.params import RuntimeParams
from stoker.sim.virtual import VirtualRuntime
from stoker.sim.workloads import CallerPlan, LoopWorkload, MixSpec, mix
from stoker.traces.base import Trace, TraceJob, TraceNode
from stoker.units import HOUR_S

LOOP_PROFILE = "loop"
LOOP_PREFIX = "loop-"
POLICY = "gfs"  # Firepool's warm-pool and GFS's hp/spot defaults: one preset
MODES = ("partitioned", "shared")


class SimSharedError(ValueError):
    """Bad input of the shared-cluster simulation (the message names the field)."""


@dataclass(frozen=True, slots=True)
class SharedConfig:
    """Everything the experiment depends on; the CLI sets its fields."""

    seed: int = 0
    # share of each GPU model's nodes kept, and of the generated hp/spot jobs
    scale: float = 0.05
    # then this share of each model's nodes, every job kept (more contention): 0.7 leaves
    # the warm pools' GPU model contended but not saturated (docs/evaluation/firepool.md)
    capacity_scale: float = 0.7
    days: float = 1.0  # the measured window
    warm_days: float = 7.0  # HP history before it (the forecaster's first fit)
    burn_in_days: float = 0.5  # simulated before the window, to fill the cluster
    tail_days: float = 1.0  # simulated after it; jobs still open then are unfinished
    pool_model: str | None = None  # the warm pools' GPU model (None: the largest model)
    sessions_per_hour: float = 120.0  # loop sessions arriving per hour of the window
    tenants: int = 12
    spot_load: float = 3.0  # spot arrivals x this (``stoker sim gfs --load``)
    query_every_min: int = 15
    refit_every_min: int = 1440
    forecaster: str = "ridge"
    # an active pod's share of its GPU and the zero-VRAM standby beside it
    share: float = 0.9
    standby_share: float = 0.1
    runtime: RuntimeParams = field(default_factory=RuntimeParams)

    def __post_init__(self) -> None:
        if not self.sessions_per_hour > 0:
            raise SimSharedError(f"sessions_per_hour: must be > 0, got {self.sessions_per_hour}")
        if self.tail_days < 0:
            raise SimSharedError(f"tail_days: must be >= 0, got {self.tail_days}")
        if self.tenants < 1:
            raise SimSharedError(f"tenants: must be >= 1, got {self.tenants}")

    def setup(self) -> Setup:
        return Setup(
            self.days,
            self.warm_days,
            self.burn_in_days,
            self.scale,
            self.seed,
            capacity_scale=self.capacity_scale,
        )

    def settings(self) -> dict[str, Any]:
        """The settings for results.json (the runtime's table is listed apart)."""
        out = asdict(self)
        del out["runtime"]
        out["policy"] = POLICY
        return out


@dataclass(frozen=True, slots=True)
class Record:
    """What a job's end leaves in this simulation's records."""

    job_class: JobClass
    tenant: str
    submitted: float
    started: float | None
    finished: float
    path: HitPath | None
    failure: bool
    queue_s: float
    evictions: int
    periods_ok: int

    @staticmethod
    def of(job: Job, now: float) -> Record:
        return Record(
            job.job_class,
            job.spec.tenant,
            job.submitted,
            job.started,
            job.finished if job.finished is not None else now,
            job.path,
            job.failure is not None,
            job.queue_s,
            job.evictions,
            job.periods_ok,
        )


class SharedWorkload:
    """The trace's hp/spot jobs (with the forecaster's clocks) and the loops, in one run;
    records every job's end."""

    def __init__(self, trace: TraceWorkload | None, loops: LoopWorkload | None) -> None:
        self.trace = trace
        self.loops = loops
        self.records: dict[str, Record] = {}

    @property
    def done(self) -> bool:
        return (self.trace is None or self.trace.done) and (self.loops is None or self.loops.done)

    def begin(self, sim: Simulator) -> None:
        if self.trace is not None:
            self.trace.begin(sim)
        if self.loops is not None:
            self.loops.begin(sim)

    def job_done(self, sim: Simulator, job_id: str) -> None:
        # read the end now: the core need not keep a finished job (the driver stores it)
        self.records[job_id] = Record.of(sim.core.jobs[job_id], sim.now)
        if self.loops is not None and self.loops.owns(job_id):
            self.loops.job_done(sim, job_id)
        elif self.trace is not None:
            self.trace.job_done(sim, job_id)

    def run_s(self, sim: Simulator, job_id: str) -> float:
        assert self.trace is not None  # loop jobs are planned: the engine never asks
        return self.trace.run_s(sim, job_id)


@dataclass
class Accounting:
    """GPU-seconds inside the measured window, by what holds the cards (one accounting for
    both modes: the whole cluster)."""

    start: float
    end: float
    total_gpus: int
    free: float = 0.0
    idle_pods: float = 0.0  # idle warm and standby pods
    hpspot: float = 0.0  # hp and spot workers
    peak_pool: float = 0.0  # most GPUs pool pods held at once (any state, whole run)

    def advance(self, core: Core, a: float, b: float) -> None:
        used = core.cluster.used_total
        self.peak_pool = max(self.peak_pool, used - core.hpspot.allocated)
        lo, hi = max(a, self.start), min(b, self.end)
        if hi <= lo:
            return
        dt = hi - lo
        self.free += (self.total_gpus - used) * dt
        self.idle_pods += core.idle_gpus * dt
        self.hpspot += core.hpspot.allocated * dt


def _nodes_of(trace_nodes: list[TraceNode], model: str) -> list[TraceNode]:
    return [n for n in trace_nodes if n.gpu_model == model]


def pick_model(nodes: list[TraceNode], asked: str | None) -> str:
    """The warm pools' GPU model: the one asked for, else the model with the most GPUs."""
    gpus: dict[str, int] = {}
    for n in nodes:
        gpus[n.gpu_model] = gpus.get(n.gpu_model, 0) + n.gpus
    if asked is not None:
        if asked not in gpus:
            raise SimSharedError(f"pool_model: no node of {asked!r}; known: {', '.join(gpus)}")
        return asked
    return max(sorted(gpus), key=lambda m: gpus[m])


def slice_label(model: str) -> str:
    """The GPU pool name the partitioned warm-pool slice is labelled with."""
    return f"{model}/warm-slice"


def loop_plans(cfg: SharedConfig, window: Window) -> list[CallerPlan]:
    """The mix of ``stoker sim firepool`` at ``sessions_per_hour``, with its bursts at the
    same rate (6 an hour), over the measured window."""
    span = window.end - window.start
    hours = span / HOUR_S
    spec = MixSpec(
        sessions=max(1, round(cfg.sessions_per_hour * hours)),
        tenants=cfg.tenants,
        duration_s=span,
        bursts=max(1, round(6 * hours)),
        profile=LOOP_PROFILE,
    )
    return [replace(p, start_s=p.start_s + window.start) for p in mix(spec, cfg.seed).plans]


@dataclass
class Prepared:
    """The trace, its window, the loops' plans and the warm pools' GPU model: the same for
    every run."""

    trace: Trace
    window: Window
    plans: list[CallerPlan]
    model: str


def prepare(cfg: SharedConfig) -> Prepared:
    """Load the nodes and generate the hp/spot jobs and the loops (once for every run)."""
    try:
        trace, window = prepare_trace("v2026", None, cfg.setup())
    except SimGFSError as exc:
        raise SimSharedError(str(exc)) from exc
    jobs = scale_spot_load(trace.jobs, cfg.spot_load, cfg.seed)
    trace = Trace(trace.name, trace.nodes, jobs, trace.source, dict(trace.notes))
    model = pick_model(trace.nodes, cfg.pool_model)
    return Prepared(trace, window, loop_plans(cfg, window), model)


@dataclass
class RunResult:
    """One mode's figures and what the run saw."""

    metrics: dict[str, Any]
    accounting: Accounting


def run_mode(
    cfg: SharedConfig,
    prep: Prepared,
    *,
    slice_nodes: list[str] | None,
    policy: str = POLICY,
    with_trace: bool = True,
    progress: Callable[[float], None] | None = None,
) -> RunResult:
    """One run of the preset ``policy``: ``slice_nodes`` (partitioned) are the warm pools'
    own GPU pool, None (shared) lets both use every node of the model;
    ``with_trace=False`` runs the loops alone (the partition's sizing run)."""
    window = prep.window
    spec = preset(policy)
    relabel = set(slice_nodes or ())
    loop_model = slice_label(prep.model) if slice_nodes else prep.model
    nodes = prep.trace.nodes if with_trace else _nodes_of(prep.trace.nodes, prep.model)
    cluster = build_cluster(nodes, relabel, loop_model)
    trace_profs = trace_profiles(prep.trace.nodes) if with_trace else []
    loop = Profile(
        LOOP_PROFILE, gpu_model=loop_model, share=cfg.share, standby_share=cfg.standby_share
    )
    t0 = window.sim_start
    core = Core(cluster, [*trace_profs, loop], spec.policies, start=t0)
    trace_wl = None
    jobs: list[TraceJob] = []
    if with_trace:
        jobs = simulated_jobs(prep.trace, window, set(cluster.capacity))
        cadence = Cadence(refit_every_min=cfg.refit_every_min, query_every_min=cfg.query_every_min)
        forecaster = policy_forecaster(spec.forecaster, cadence, cfg.forecaster, prep.trace.notes)
        if forecaster is not None:
            prefill_meter(core, prep.trace, t0)
        config = spec.policies.hpspot
        trace_wl = TraceWorkload(
            jobs,
            forecaster,
            cadence,
            guaranteed_hours(config.guarantee_s),
            config.g,
            3600.0,
            None,
            POLICY,
        )
    loops = LoopWorkload(prep.plans, prefix=LOOP_PREFIX)
    workload = SharedWorkload(trace_wl, loops)
    limit = window.end + cfg.tail_days * DAY_S
    acct = Accounting(window.start, window.end, cluster.total_gpus)
    step = (limit - t0) / 200  # progress told at most 200 times
    told = [t0]

    def advance(a: float, b: float) -> None:
        acct.advance(core, a, b)
        if progress is not None and b - told[0] >= step:
            told[0] = b
            progress(min(1.0, (b - t0) / (limit - t0)))

    prepulled = [(n.name, LOOP_PROFILE) for n in nodes if n.gpu_model == prep.model]
    runtime = VirtualRuntime(
        cfg.runtime, cfg.seed, prepulled, instant=[p.name for p in trace_profs]
    )
    sim = trace_simulator(core, workload, runtime, t0, advance)
    result = sim.run(max_time=limit)
    if progress is not None:
        progress(1.0)
    metrics = _metrics(core, workload, jobs, loops, window, acct, result.end, prep.model)
    metrics["events"] = result.events
    return RunResult(metrics, acct)


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def _class_metrics(
    core: Core,
    recs: dict[str, Record],
    cls: JobClass,
    jobs: list[TraceJob],
    end: float,
    key: str,
) -> dict[str, Any]:
    """Queueing, JCT and (spot) evictions of ``jobs`` of class ``cls``, under ``key.``;
    a job still open at ``end`` counts as unfinished with its queueing and time so far
    (lower bounds), so a mode that finishes fewer of them is not flattered."""
    done = [recs[j.name] for j in jobs if j.name in recs]
    open_jobs = [core.jobs[j.name] for j in jobs if j.name not in recs]
    queue = [r.queue_s for r in done] + [
        j.queue_s + (end - j.queued_since if j.state.waiting else 0.0) for j in open_jobs
    ]
    jct = [r.finished - r.submitted for r in done] + [end - j.submitted for j in open_jobs]
    tenants = [r.tenant for r in done] + [j.spec.tenant for j in open_jobs]
    out: dict[str, Any] = {
        f"{key}.jobs": len(jobs),
        f"{key}.finished": len(done),
        f"{key}.unfinished": len(open_jobs),
        f"{key}.mean_queue_s": _mean(queue),
        f"{key}.jain_tenants": tenant_jain(zip(tenants, queue, jct, strict=True)),
    }
    if cls is JobClass.HP:
        out[f"{key}.p99_jct_s"] = percentile(np.array(jct), 99)
    else:
        failed = sum(r.evictions for r in done) + sum(j.evictions for j in open_jobs)
        ok = sum(r.periods_ok for r in done) + sum(j.periods_ok for j in open_jobs)
        out[f"{key}.eviction_rate"] = failed / (failed + ok) if failed + ok else 0.0
        out[f"{key}.evictions"] = failed
        out[f"{key}.mean_jct_s"] = _mean(jct)
    return out


def _metrics(
    core: Core,
    workload: SharedWorkload,
    jobs: list[TraceJob],
    loops: LoopWorkload,
    window: Window,
    acct: Accounting,
    end: float,
    model: str,
) -> dict[str, Any]:
    recs = workload.records
    out: dict[str, Any] = {}
    # pool jobs: every job the loops planned (a loop starved at the end submits no more)
    pool = [r for r in recs.values() if r.job_class is JobClass.POOL]
    ran = [r for r in pool if not r.failure and r.started is not None]
    n = len(ran) or 1
    frac = {p: sum(1 for r in ran if r.path is p) / n for p in HitPath}
    lat = [r.started - r.submitted for r in ran if r.started is not None]
    out["pool.requests"] = loops.requests
    out["pool.finished"] = len(pool)
    out["pool.failed"] = len(pool) - len(ran)
    out["pool.unfinished"] = loops.requests - len(pool)
    out["pool.warm_or_standby_fraction"] = frac[HitPath.WARM] + frac[HitPath.STANDBY]
    out["pool.warm_fraction"] = frac[HitPath.WARM]
    out["pool.standby_fraction"] = frac[HitPath.STANDBY]
    out["pool.cold_fraction"] = frac[HitPath.COLD]
    out["pool.start_p50_s"] = percentile(np.array(lat), 50)
    out["pool.start_p90_s"] = percentile(np.array(lat), 90)
    out["pool.start_p99_s"] = percentile(np.array(lat), 99)
    # hp and spot jobs submitted inside the window; one still open at the end counts as
    # unfinished, its queueing and time so far included (lower bounds)
    for cls in (JobClass.HP, JobClass.SPOT):
        window_jobs = [
            j
            for j in jobs
            if j.job_class == cls.value and window.start <= j.submit_time < window.end
        ]
        out.update(_class_metrics(core, recs, cls, window_jobs, end, cls.value))
        # the same on the warm pools' GPU model alone: the only GPU pool the modes differ on
        on_model = [j for j in window_jobs if j.gpu_model == model]
        out.update(_class_metrics(core, recs, cls, on_model, end, f"{cls.value}.pool_model"))
    trace_names = {j.name for j in jobs}
    out["trace.jobs"] = len(jobs)
    out["trace.finished"] = sum(1 for nm in trace_names if nm in recs)
    out["trace.unfinished"] = len(jobs) - out["trace.finished"]
    span = acct.end - acct.start
    idle = acct.free + acct.idle_pods
    out["idle_gpu_hours"] = idle / HOUR_S
    out["idle.free_gpu_hours"] = acct.free / HOUR_S
    out["idle.warm_standby_gpu_hours"] = acct.idle_pods / HOUR_S
    out["gpu_allocation_rate"] = (
        (acct.total_gpus * span - acct.free) / (acct.total_gpus * span) if span > 0 else 0.0
    )
    out["hp_spot_gpu_hours"] = acct.hpspot / HOUR_S
    out["end_s"] = end
    return out


def slice_for_peak(prep: Prepared, peak_gpus: float) -> list[str]:
    """The last nodes of the warm pools' GPU model whose GPUs cover ``peak_gpus`` (at least
    one node, at most all but one, so hp/spot keep a node of the model)."""
    nodes = _nodes_of(prep.trace.nodes, prep.model)
    picked: list[str] = []
    gpus = 0
    for n in reversed(nodes):
        if gpus >= peak_gpus - 1e-9 and picked:
            break
        if len(picked) == len(nodes) - 1:
            break
        picked.append(n.name)
        gpus += n.gpus
    return picked


STEPS = ("sizing", *MODES)


def run_all(
    cfg: SharedConfig,
    prep: Prepared,
    progress: Callable[[str, float], None] | None = None,
) -> dict[str, Any]:
    """The sizing run (loops alone on the warm pools' GPU model's nodes), then every mode on the
    input :func:`prepare` made; the results document (no wall-clock figure in it: same
    seed, same file). ``progress`` hears (step of :data:`STEPS`, fraction of its
    simulated span done)."""
    tell = progress or (lambda _s, _f: None)
    alone = run_mode(
        cfg, prep, slice_nodes=None, with_trace=False, progress=lambda f: tell("sizing", f)
    )
    peak = alone.accounting.peak_pool
    slice_nodes = slice_for_peak(prep, peak)
    runs = {
        "partitioned": run_mode(
            cfg, prep, slice_nodes=slice_nodes, progress=lambda f: tell("partitioned", f)
        ),
        "shared": run_mode(cfg, prep, slice_nodes=None, progress=lambda f: tell("shared", f)),
    }
    by_name = {n.name: n for n in prep.trace.nodes}
    model_gpus = sum(n.gpus for n in _nodes_of(prep.trace.nodes, prep.model))
    doc: dict[str, Any] = {
        "meta": {
            "settings": cfg.settings(),
            "trace_source": prep.trace.source,
            "nodes": len(prep.trace.nodes),
            "gpus": sum(n.gpus for n in prep.trace.nodes),
            "pool_model": prep.model,
            "pool_model_gpus": model_gpus,
            "window": asdict(prep.window),
            "loop_sessions": len(prep.plans),
            "jobs_left_out_too_large": int(prep.trace.notes.get("left_out_too_large", "0")),
            "runtime": cfg.runtime.table(),
        },
        "partition": {
            "pool_alone.peak_gpus": peak,
            "pool_alone.warm_or_standby_fraction": alone.metrics["pool.warm_or_standby_fraction"],
            "pool_alone.start_p90_s": alone.metrics["pool.start_p90_s"],
            "slice_nodes": len(slice_nodes),
            "slice_gpus": sum(by_name[n].gpus for n in slice_nodes),
        },
        **{mode: run.metrics for mode, run in runs.items()},
    }
    doc["comparison"] = comparison(doc)
    return json_safe(doc)


COMPARED = (
    "pool.warm_or_standby_fraction",
    "pool.start_p90_s",
    "hp.mean_queue_s",
    "hp.p99_jct_s",
    "hp.pool_model.mean_queue_s",
    "spot.eviction_rate",
    "spot.evictions",
    "spot.mean_queue_s",
    "spot.pool_model.mean_queue_s",
    "idle_gpu_hours",
    "pool.unfinished",
    "hp.unfinished",
    "spot.unfinished",
)


def comparison(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per headline figure: partitioned, shared and the change in percent."""
    out = {}
    a, b = doc["partitioned"], doc["shared"]
    for key in COMPARED:
        x, y = a.get(key), b.get(key)
        change = None
        if isinstance(x, int | float) and isinstance(y, int | float) and x:
            change = 100.0 * (y - x) / abs(x)
        out[key] = {"partitioned": x, "shared": y, "change_pct": change}
    return out
