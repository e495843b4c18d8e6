"""A seeded generator of jobs in the GFS release format, calibrated to the published figures.

The real ``job_info_df.csv`` (466,867 jobs) is not held beside the project; what is held are
its aggregates, copied into :mod:`stoker.sim.traces.calibration`. This module builds jobs
that reproduce them: per-organization volumes (jobs, GPU demand, GPU-seconds, median
duration, GPU-model mix), HP/spot shares per day, per-model GPU requests (fractional ones
included) and worker counts, the day-by-day volume and the hour-of-day shape, and the jobs
already running when the trace opens. ``stoker traces check`` shows how close it comes.

Modelling choices that are ours (the aggregates do not pin them down) are the constants
marked "ours" below: the per-model request mixes, the burst sizes, the per-tenant
variations and the duration law (a per-organization log-normal, capped at the longest real
duration). Same seed, same jobs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from stoker.sim.traces import calibration as cal
from stoker.sim.traces.base import Trace, TraceJob, TraceNode

DAY_S = 86_400.0

# ours: per-model per-worker GPU request mixes, chosen to keep each model's published median
# request (demand_by_model.csv) and the share of fractional requests (bucket "0" of
# extra_bucket_gpu_demand.csv, about 10 % of jobs, mostly on the 1-GPU A10 nodes).
# 0.0 stands for "a fractional share", drawn from FRACTIONAL_REQUESTS.
REQUEST_MIX: dict[str, dict[float, float]] = {
    "A10": {0.0: 0.20, 1.0: 0.80},
    "A100-SXM4-80GB": {1.0: 0.55, 2.0: 0.07, 4.0: 0.08, 8.0: 0.30},
    "A800-SXM4-80GB": {1.0: 0.30, 2.0: 0.30, 4.0: 0.20, 8.0: 0.20},
    "GPU-series-1": {0.0: 0.08, 1.0: 0.77, 2.0: 0.05, 4.0: 0.05, 8.0: 0.05},
    "GPU-series-2": {1.0: 0.25, 2.0: 0.10, 4.0: 0.20, 8.0: 0.45},
    "H800": {1.0: 0.15, 2.0: 0.05, 4.0: 0.05, 8.0: 0.75},
}
# ours: the shares a fractional request takes (uniform over these values).
FRACTIONAL_REQUESTS: tuple[float, ...] = (0.01, 0.05, 0.1, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.75)
# ours: jobs come in bursts of one shape (a sweep, a retry storm); burst size is geometric
# with this mean, and jobs inside a burst follow each other by exponential gaps (s). They
# give the hourly arrivals their published over-dispersion (summary_extra.txt, Fano ~90)
# and the inter-arrival quantiles (extra_inter_arrival_quantiles.csv, median 16 s).
BURST_MEAN_JOBS = 3.0
IN_BURST_GAP_S = 6.0
# ours: each tenant's day-to-day volume varies around the published daily profile by a
# log-normal factor of this sigma, and its hour-of-day profile is the published one,
# shifted by up to this many hours and sharpened or flattened by an exponent in
# TENANT_HOUR_EXPONENT. So tenants differ and each has its own diurnal/weekly rhythm.
TENANT_DAY_SIGMA = 0.35
TENANT_HOUR_SHIFT = 2
TENANT_HOUR_EXPONENT = (0.7, 1.4)
# ours: jobs already running at the window's start are single-worker HP jobs whose
# durations are log-uniform between one day and the longest real duration: their
# demand-weighted mean (3.0e6 s) matches hourly_summary.csv hour 0 (20.55e9 GPU-s over
# 6,855.6 GPUs).
INITIAL_MIN_DURATION_S = DAY_S
# ours: spot durations are log-normal through the published spot median and p90
# (job_type_summary.csv).
SPOT_SIGMA = math.log(cal.SPOT_P90_DURATION_S / cal.SPOT_MEDIAN_DURATION_S) / 1.2815515655446004
MIN_DURATION_S = 1.0


@dataclass(frozen=True, slots=True)
class GeneratorConfig:
    """What to generate.

    ``days`` and ``start_day`` pick a window of the 184-day published profile (day 0 is the
    trace's first day; spot jobs appear from about day 28). ``scale`` multiplies every
    job count (arrivals and the jobs running at the start), not durations or sizes, so
    ``scale=0.1`` is a tenth of the load on the same fleet.
    """

    seed: int = 0
    days: float = cal.TRACE_DAYS
    start_day: int = 0
    scale: float = 1.0
    initial_jobs: bool = True

    def __post_init__(self) -> None:
        if not 0 < self.days <= cal.TRACE_DAYS:
            raise ValueError(f"days: must be in (0, {cal.TRACE_DAYS}], got {self.days}")
        if self.start_day < 0 or self.start_day + self.days > cal.TRACE_DAYS + 1e-9:
            raise ValueError(
                f"start_day: window {self.start_day}+{self.days} days leaves the "
                f"{cal.TRACE_DAYS}-day trace"
            )
        if not self.scale > 0:
            raise ValueError(f"scale: must be above 0, got {self.scale}")


def fleet_nodes() -> list[TraceNode]:
    """The real fleet (4,278 nodes, 10,412 GPUs) rebuilt from the published node counts.

    Node names are ``0..4277`` in the groups' order; the real file's names and order are
    not part of the calibration, its shapes are.
    """
    nodes: list[TraceNode] = []
    for group in cal.FLEET:
        for _ in range(group.count):
            nodes.append(TraceNode(str(len(nodes)), group.gpu_model, group.gpus, float(group.cpu)))
    return nodes


def _window_day_weights(cfg: GeneratorConfig) -> np.ndarray:
    """Each published day's share of all non-initial submissions, zero outside the window,
    and the fraction of a partial day kept at the window's end."""
    totals = np.array(cal.DAILY_HP_JOBS, dtype=float) + np.array(cal.DAILY_SPOT_JOBS, dtype=float)
    totals[0] -= cal.INITIAL_JOBS
    # the last published day is 0.06 of a day long; weights are per day as published
    weights = totals / totals.sum()
    keep = np.zeros_like(weights)
    end = cfg.start_day + cfg.days
    for day in range(len(weights)):
        keep[day] = max(0.0, min(day + 1.0, end) - max(float(day), float(cfg.start_day)))
    return weights * keep


def _worker_distribution_for(mean_workers: float) -> np.ndarray:
    """The published worker-count distribution tilted by w**beta to have this mean."""
    values = np.array(list(cal.WORKER_COUNT_JOBS), dtype=float)
    counts = np.array(list(cal.WORKER_COUNT_JOBS.values()), dtype=float)
    logs = np.log(values)

    def tilted(beta: float) -> np.ndarray:
        w = counts * np.exp(beta * logs - (beta * logs).max())
        return w / w.sum()

    lo, hi = -30.0, 30.0
    for _ in range(80):  # bisection: the tilted mean rises monotonically with beta
        mid = (lo + hi) / 2
        if float(tilted(mid) @ values) < mean_workers:
            lo = mid
        else:
            hi = mid
    return tilted((lo + hi) / 2)


def _mean_request(model: str) -> float:
    frac = float(np.mean(FRACTIONAL_REQUESTS))
    return sum(p * (frac if v == 0.0 else v) for v, p in REQUEST_MIX[model].items())


def _capped_lognormal_mean(mu: float, sigma: float, cap: float) -> float:
    """E[min(X, cap)] for X log-normal(mu, sigma)."""
    z = (math.log(cap) - mu) / sigma
    phi = 0.5 * math.erfc(-(z - sigma) / math.sqrt(2))  # Phi(z - sigma)
    tail = 0.5 * math.erfc(z / math.sqrt(2))  # 1 - Phi(z)
    return math.exp(mu + sigma**2 / 2) * phi + cap * tail


def _sigma_for_mean(median: float, mean: float, cap: float) -> float:
    """The log-normal sigma whose capped mean is ``mean`` (bounded to [0.3, 6])."""
    mu = math.log(max(median, MIN_DURATION_S))
    lo, hi = 0.3, 6.0
    if _capped_lognormal_mean(mu, lo, cap) >= mean:
        return lo
    if _capped_lognormal_mean(mu, hi, cap) <= mean:
        return hi
    for _ in range(60):
        mid = (lo + hi) / 2
        if _capped_lognormal_mean(mu, mid, cap) < mean:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass(frozen=True, slots=True)
class _OrgModel:
    """The per-organization laws derived from the calibration."""

    name: str
    regular_jobs: float
    initial_weight: float
    model_probs: np.ndarray
    duration_mu: float
    duration_sigma: float


def _org_models() -> list[_OrgModel]:
    models = cal.MODEL_ORDER
    per_job_gs = np.array(
        [cal.DEMAND_BY_MODEL[m].gpu_seconds / cal.DEMAND_BY_MODEL[m].jobs for m in models]
    )
    per_job_demand = np.array(
        [cal.DEMAND_BY_MODEL[m].gpu_demand / cal.DEMAND_BY_MODEL[m].jobs for m in models]
    )
    initial_share = cal.INITIAL_GPU_SECONDS / cal.TOTAL_GPU_SECONDS
    out: list[_OrgModel] = []
    for org in cal.ORGANIZATIONS:
        # the mix is a share of GPU-seconds; turn it into a share of jobs per model
        weights = np.array(org.model_gpu_seconds_share) / per_job_gs
        probs = weights / weights.sum()
        org_share = org.gpu_seconds / cal.TOTAL_GPU_SECONDS
        regular = max(org.jobs - cal.INITIAL_JOBS * org_share, 1.0)
        mean_demand = float(probs @ per_job_demand)
        mean_duration = org.gpu_seconds * (1 - initial_share) / (regular * mean_demand)
        sigma = _sigma_for_mean(org.median_duration, mean_duration, cal.MAX_DURATION_S)
        out.append(
            _OrgModel(
                name=org.name,
                regular_jobs=regular,
                initial_weight=org_share,
                model_probs=probs,
                duration_mu=math.log(max(org.median_duration, MIN_DURATION_S)),
                duration_sigma=sigma,
            )
        )
    return out


class _ShapeSampler:
    """Draws (gpu_request, worker_num, cpu_request) for a GPU model."""

    def __init__(self) -> None:
        worker_values = np.array(list(cal.WORKER_COUNT_JOBS), dtype=np.int64)
        self.worker_values = worker_values
        self.worker_probs: dict[str, np.ndarray] = {}
        for model in cal.MODEL_ORDER:
            d = cal.DEMAND_BY_MODEL[model]
            target = max(1.0, d.gpu_demand / d.jobs / _mean_request(model))
            self.worker_probs[model] = _worker_distribution_for(target)
        cpu = np.array(cal.CPU_PER_GPU_BUCKETS, dtype=float)
        self.cpu_lo = np.maximum(cpu[:, 0], 0.5)
        self.cpu_hi = cpu[:, 1]
        self.cpu_probs = cpu[:, 2] / cpu[:, 2].sum()

    def draw(
        self, rng: np.random.Generator, model: str, n: int, workers: bool = True
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        mix = REQUEST_MIX[model]
        values = np.array(list(mix), dtype=float)
        req = rng.choice(values, size=n, p=np.array(list(mix.values())))
        frac = req == 0.0
        req[frac] = rng.choice(np.array(FRACTIONAL_REQUESTS), size=int(frac.sum()))
        if workers:
            w = rng.choice(self.worker_values, size=n, p=self.worker_probs[model])
        else:
            w = np.ones(n, dtype=np.int64)
        bucket = rng.choice(len(self.cpu_probs), size=n, p=self.cpu_probs)
        lo, hi = self.cpu_lo[bucket], self.cpu_hi[bucket]
        per_gpu = np.exp(rng.uniform(np.log(lo), np.log(hi)))
        cpu = np.maximum(1.0, np.round(per_gpu * req))
        return req, w, cpu


def _tenant_hour_profile(rng: np.random.Generator) -> np.ndarray:
    base = np.array(cal.HOUR_OF_DAY_JOBS, dtype=float)
    base[0] -= cal.INITIAL_JOBS  # hour 0 of the profile holds the opening batch
    base /= base.mean()
    shift = int(rng.integers(-TENANT_HOUR_SHIFT, TENANT_HOUR_SHIFT + 1))
    exponent = float(rng.uniform(*TENANT_HOUR_EXPONENT))
    prof = np.roll(base, shift) ** exponent
    return prof / prof.sum()


def generate_jobs(cfg: GeneratorConfig) -> list[TraceJob]:
    """Generate the window's jobs, sorted by submit time and named ``0..N-1``.

    Submit times are seconds from the window's start; jobs whose burst spills past the
    window's end are left out.
    """
    rng = np.random.default_rng(cfg.seed)
    day_weights = _window_day_weights(cfg)
    hp_days = np.array(cal.DAILY_HP_JOBS, dtype=float)
    spot_days = np.array(cal.DAILY_SPOT_JOBS, dtype=float)
    all_days = hp_days + spot_days
    spot_share = np.divide(spot_days, all_days, out=np.zeros_like(all_days), where=all_days > 0)
    shapes = _ShapeSampler()
    window_s = cfg.days * DAY_S
    offset_s = cfg.start_day * DAY_S
    days = np.arange(len(day_weights), dtype=float)

    cols: dict[str, list[np.ndarray]] = {
        k: [] for k in ("tenant", "model", "req", "w", "cpu", "t", "dur", "spot")
    }

    def emit(tenant: int, model_idx, req, w, cpu, t, dur, spot) -> None:
        cols["tenant"].append(np.full(len(t), tenant))
        cols["model"].append(np.asarray(model_idx))
        cols["req"].append(req)
        cols["w"].append(w)
        cols["cpu"].append(cpu)
        cols["t"].append(t)
        cols["dur"].append(dur)
        cols["spot"].append(spot)

    orgs = _org_models()
    for idx, org in enumerate(orgs):
        hour_prof = _tenant_hour_profile(rng)
        noise = rng.lognormal(-(TENANT_DAY_SIGMA**2) / 2, TENANT_DAY_SIGMA, size=len(days))
        expected_jobs = org.regular_jobs * cfg.scale * day_weights * noise
        bursts_per_day = rng.poisson(expected_jobs / BURST_MEAN_JOBS)
        n_bursts = int(bursts_per_day.sum())
        if n_bursts == 0:
            continue
        burst_day = np.repeat(days, bursts_per_day)
        hour = rng.choice(24, size=n_bursts, p=hour_prof)
        start = burst_day * DAY_S + (hour + rng.random(n_bursts)) * 3600.0 - offset_s
        size = rng.geometric(1.0 / BURST_MEAN_JOBS, size=n_bursts)
        is_spot = rng.random(n_bursts) < spot_share[burst_day.astype(np.int64)]
        model_idx = rng.choice(len(cal.MODEL_ORDER), size=n_bursts, p=org.model_probs)
        req = np.empty(n_bursts)
        w = np.empty(n_bursts, dtype=np.int64)
        cpu = np.empty(n_bursts)
        for m, model in enumerate(cal.MODEL_ORDER):
            sel = model_idx == m
            if sel.any():
                req[sel], w[sel], cpu[sel] = shapes.draw(rng, model, int(sel.sum()))
        # expand bursts into jobs: the first at the burst's start, the rest after gaps
        n_jobs = int(size.sum())
        first = np.repeat(np.cumsum(size) - size, size)
        gaps = rng.exponential(IN_BURST_GAP_S, size=n_jobs)
        gaps[first] = 0.0  # the first job of each burst has no gap
        csum = np.cumsum(gaps)
        t = np.repeat(start, size) + csum - csum[first]
        job_spot = np.repeat(is_spot, size)
        dur = np.where(
            job_spot,
            rng.lognormal(math.log(cal.SPOT_MEDIAN_DURATION_S), SPOT_SIGMA, size=n_jobs),
            rng.lognormal(org.duration_mu, org.duration_sigma, size=n_jobs),
        )
        emit(
            idx,
            np.repeat(model_idx, size),
            np.repeat(req, size),
            np.repeat(w, size),
            np.repeat(cpu, size),
            t,
            dur,
            job_spot,
        )

    if cfg.initial_jobs:
        n_init = int(rng.poisson(cal.INITIAL_JOBS * cfg.scale))
        weights = np.array([o.initial_weight for o in orgs])
        tenant_of = rng.choice(len(orgs), size=n_init, p=weights / weights.sum())
        for idx in np.unique(tenant_of):
            n = int((tenant_of == idx).sum())
            model_idx = rng.choice(len(cal.MODEL_ORDER), size=n, p=orgs[idx].model_probs)
            req = np.empty(n)
            w = np.empty(n, dtype=np.int64)
            cpu = np.empty(n)
            for m, model in enumerate(cal.MODEL_ORDER):
                sel = model_idx == m
                if sel.any():
                    req[sel], w[sel], cpu[sel] = shapes.draw(
                        rng, model, int(sel.sum()), workers=False
                    )
            log_lo, log_hi = math.log(INITIAL_MIN_DURATION_S), math.log(cal.MAX_DURATION_S)
            dur = np.exp(rng.uniform(log_lo, log_hi, size=n))
            emit(int(idx), model_idx, req, w, cpu, np.zeros(n), dur, np.zeros(n, dtype=bool))

    if not cols["t"]:
        return []
    tenant = np.concatenate(cols["tenant"])
    model = np.concatenate(cols["model"])
    req = np.concatenate(cols["req"])
    w = np.concatenate(cols["w"])
    cpu = np.concatenate(cols["cpu"])
    t = np.floor(np.concatenate(cols["t"]))
    dur = np.clip(np.round(np.concatenate(cols["dur"])), MIN_DURATION_S, cal.MAX_DURATION_S)
    spot = np.concatenate(cols["spot"])
    keep = (t >= 0) & (t < window_s)
    order = np.lexsort((np.arange(len(t)), t))
    order = order[keep[order]]
    tenant_names = [o.name for o in orgs]
    jobs = [
        TraceJob(
            name=str(i),
            tenant=tenant_names[tenant[k]],
            gpu_model=cal.MODEL_ORDER[model[k]],
            gpu_request=float(req[k]),
            worker_num=int(w[k]),
            submit_time=float(t[k]),
            duration=float(dur[k]),
            job_class="spot" if spot[k] else "hp",
            cpu_request=float(cpu[k]),
        )
        for i, k in enumerate(order.tolist())
    ]
    return jobs


def generate_trace(cfg: GeneratorConfig, nodes: list[TraceNode] | None = None) -> Trace:
    """Generated jobs on ``nodes`` (default: the fleet rebuilt from the calibration)."""
    jobs = generate_jobs(cfg)
    trace = Trace(
        name="v2026",
        nodes=nodes if nodes is not None else fleet_nodes(),
        jobs=jobs,
        source=f"generated (seed={cfg.seed}, days={cfg.days}, start_day={cfg.start_day}, "
        f"scale={cfg.scale})",
    )
    trace.notes["generator"] = "stoker.sim.traces.generator (calibrated to GFS aggregates)"
    return trace
