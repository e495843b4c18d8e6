"""A seeded generator of jobs in the GFS release format, calibrated to the published figures.

The real ``job_info_df.csv`` (466,867 jobs) is not held beside the project; what is held are
its aggregates, copied into :mod:`stoker.traces.calibration`. This module builds jobs
that reproduce them: per-organization volumes (jobs, GPU demand, GPU-seconds, median
duration, GPU-model mix), HP/spot shares per day, per-model GPU requests (fractional ones
included) and worker counts, the day-by-day volume and the hour-of-day shape, and the jobs
already running when the trace opens. ``stoker traces check`` shows how close it comes.

Modelling choices that are ours (the aggregates do not pin them down) are the constants
marked "ours" below: the per-model request mixes, the burst sizes, the per-tenant
variations and the shape of the duration laws (spot: log-normal; HP: per organization and
model, a mixture of long single-worker jobs and short ones drawn from the published
buckets). docs/simulator.md shows its commands. Same seed, same jobs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from stoker.traces import calibration as cal
from stoker.traces.base import Trace, TraceJob, TraceNode
from stoker.traces.gfs_v2026 import v2026_calendar_notes
from stoker.units import DAY_S

# ours: per-model per-worker GPU request mixes, chosen to keep each model's published median
# request (demand_by_model.csv) and the share of fractional requests (bucket "0" of
# extra_bucket_gpu_demand.csv, about 10 % of jobs, mostly on the 1-GPU A10 nodes).
# 0.0 stands for "a fractional share", drawn from FRACTIONAL_REQUESTS.
REQUEST_MIX: dict[str, dict[float, float]] = {
    "A10": {0.0: 0.20, 1.0: 0.80},
    "A100-SXM4-80GB": {1.0: 0.6, 2.0: 0.1, 4.0: 0.1, 8.0: 0.2},
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
BURST_MEAN_JOBS = 2.0
IN_BURST_GAP_S = 20.0
# ours: each tenant's day-to-day volume varies around the published daily profile by a
# log-normal factor of this sigma, and its hour-of-day profile is the published one,
# shifted by up to this many hours and sharpened or flattened by an exponent in
# TENANT_HOUR_EXPONENT. So tenants differ and each has its own diurnal/weekly rhythm.
TENANT_DAY_SIGMA = 0.35
TENANT_HOUR_SHIFT = 2
TENANT_HOUR_EXPONENT = (0.7, 1.4)
# ours: bursts asking more GPUs than this follow the hour-of-day profile of GPU-seconds.
HEAVY_DEMAND_GPUS = 2.0
# ours: the jobs already running when the trace opens are single-worker HP jobs whose
# durations are log-uniform between one day and the longest real duration: their
# demand-weighted mean (3.0e6 s) matches hourly_summary.csv hour 0 (20.55e9 GPU-s over
# 6,855.6 GPUs).
INITIAL_MIN_DURATION_S = DAY_S
# ours: spot durations are log-normal through the published spot median and p90
# (job_type_summary.csv).
SPOT_SIGMA = math.log(cal.SPOT_P90_DURATION_S / cal.SPOT_MEDIAN_DURATION_S) / 1.2815515655446004
MIN_DURATION_S = 1.0
HP_JOB_SHARE = cal.HP_JOBS / cal.TOTAL_JOBS
HP_GPU_SECONDS_SHARE = cal.HP_GPU_SECONDS / cal.TOTAL_GPU_SECONDS
# ours: a tenant's short jobs are stretched by (its median / the trace's median) to this
# power (org_by_gpu_seconds.csv gives the medians; the full power would widen the mix of
# tenants far past the published duration buckets).
SHORT_MEDIAN_EXPONENT = 0.5
# ours: at most this share of a tenant's jobs on one model are long (over 3 days).
MAX_LONG_PROB = 0.9


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
    # the jobs running when the window opens (at t = 0): on day 0 the published opening
    # jobs, later the generated history's jobs still running then
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
    """A worker-count distribution with this mean, built from the published one.

    When the mean is within reach, one worker or a draw from the published multi-worker
    counts (so their shape is kept); above that, the multi-worker counts are tilted by
    w**beta until the mean is met.
    """
    values = np.array(list(cal.WORKER_COUNT_JOBS), dtype=float)
    counts = np.array(list(cal.WORKER_COUNT_JOBS.values()), dtype=float)
    multi = np.where(values > 1, counts, 0.0)
    multi_mean = float(multi @ values / multi.sum())
    if mean_workers <= multi_mean:
        q = max(mean_workers - 1.0, 0.0) / (multi_mean - 1.0)
        return np.where(values == 1, 1.0 - q, q * multi / multi.sum())
    counts = multi
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


def _short_knots() -> tuple[np.ndarray, np.ndarray]:
    """CDF knots (log duration, probability) of the published durations under 3 days."""
    buckets = [b for b in cal.DURATION_BUCKETS if math.isfinite(b[2])]
    counts = np.array([b[3] for b in buckets], dtype=float)
    edges = np.array([MIN_DURATION_S] + [b[2] for b in buckets])
    cdf = np.concatenate(([0.0], np.cumsum(counts) / counts.sum()))
    return np.log(edges), cdf


def _short_mean() -> float:
    """Mean of the short law (log-uniform inside each published bucket)."""
    log_edges, cdf = _short_knots()
    edges = np.exp(log_edges)
    per_bucket = (edges[1:] - edges[:-1]) / (log_edges[1:] - log_edges[:-1])
    return float(np.diff(cdf) @ per_bucket)


LONG_MIN_DURATION_S = 3 * DAY_S


def _long_mean() -> float:
    """Mean of the long law (log-uniform from 3 days to the longest real duration) as the
    release records it: cut at the trace's end, for a job submitted on a published day."""
    a, b = LONG_MIN_DURATION_S, cal.MAX_DURATION_S
    log_ratio = math.log(b / a)
    totals = np.array(cal.DAILY_HP_JOBS, dtype=float)
    means = []
    for day in range(len(totals)):
        c = max(cal.TRACE_SPAN_S - (day + 0.5) * DAY_S, 1.0)  # time left after submission
        if c <= a:
            means.append(c)
        else:
            c = min(c, b)
            means.append((c - a) / log_ratio + c * math.log(b / c) / log_ratio)
    return float(np.average(means, weights=totals))


@dataclass(frozen=True, slots=True)
class _OrgModel:
    """The per-organization laws derived from the calibration.

    HP durations are a mixture: with probability ``long_prob[m]`` (per GPU model m) a long
    job, log-uniform from 3 days to the longest real duration; else a short one from the
    published duration buckets under 3 days, stretched by ``short_factor[m]``. The long
    probabilities are solved so that each (organization, model) gets its published
    GPU-seconds; the stretch follows the organization's published median.
    """

    name: str
    regular_jobs: float
    initial_weights: np.ndarray
    model_probs: np.ndarray
    long_prob: np.ndarray
    short_factor: np.ndarray


def _org_models() -> list[_OrgModel]:
    models = cal.MODEL_ORDER
    per_job_gs = np.array(
        [cal.DEMAND_BY_MODEL[m].gpu_seconds / cal.DEMAND_BY_MODEL[m].jobs for m in models]
    )
    per_job_demand = np.array(
        [cal.DEMAND_BY_MODEL[m].gpu_demand / cal.DEMAND_BY_MODEL[m].jobs for m in models]
    )
    mean_request = np.array([_mean_request(m) for m in models])
    initial_share = cal.INITIAL_GPU_SECONDS / cal.TOTAL_GPU_SECONDS
    short_mean, long_mean = _short_mean(), _long_mean()
    global_median = cal.DURATION_QUANTILES_S[0.5]
    # the mixes are shares of GPU-seconds; turn them into shares of jobs per model, with a
    # per-model factor fitted (iterative proportional fitting) so the organizations'
    # jobs add up to each model's published job count
    mix = np.array([o.model_gpu_seconds_share for o in cal.ORGANIZATIONS]) / per_job_gs
    org_jobs = np.array([o.jobs for o in cal.ORGANIZATIONS], dtype=float)
    model_jobs = np.array([cal.DEMAND_BY_MODEL[m].jobs for m in models], dtype=float)
    factor_m = np.ones(len(models))
    for _ in range(50):
        job_probs = mix * factor_m
        job_probs /= job_probs.sum(axis=1, keepdims=True)
        factor_m *= model_jobs / (org_jobs @ job_probs)
    out: list[_OrgModel] = []
    for row, org in enumerate(cal.ORGANIZATIONS):
        shares = np.array(org.model_gpu_seconds_share)
        probs = job_probs[row]
        org_share = org.gpu_seconds / cal.TOTAL_GPU_SECONDS
        regular = max(org.jobs - cal.INITIAL_JOBS * org_share, 1.0)
        # demand-weighted mean duration each (org, model) needs for its GPU-seconds; the
        # HP law carries the HP share of them over the HP share of the jobs (spot jobs
        # follow their own law)
        jobs_m = regular * probs * HP_JOB_SHARE
        with np.errstate(divide="ignore", invalid="ignore"):
            target = np.where(
                jobs_m > 0,
                org.gpu_seconds
                * shares
                * HP_GPU_SECONDS_SHARE
                * (1 - initial_share)
                / (jobs_m * per_job_demand),
                0.0,
            )
        stretch = (org.median_duration / global_median) ** SHORT_MEDIAN_EXPONENT
        factor = np.minimum(stretch, np.maximum(target, MIN_DURATION_S) / short_mean)
        short = factor * short_mean
        # long jobs are single-worker (a service), so they carry the mean request only:
        # (1 - p) * demand * short + p * request * long = demand * target
        long_prob = np.clip(
            per_job_demand * (target - short) / (mean_request * long_mean - per_job_demand * short),
            0.0,
            MAX_LONG_PROB,
        )
        out.append(
            _OrgModel(
                name=org.name,
                regular_jobs=regular,
                initial_weights=org.gpu_seconds * shares / mean_request,
                model_probs=probs,
                long_prob=long_prob,
                short_factor=factor,
            )
        )
    return out


def _hp_durations(
    rng: np.random.Generator, org: _OrgModel, model_idx: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """HP durations for jobs on these models, and which of them are long."""
    n = len(model_idx)
    log_edges, cdf = _short_knots()
    short = np.exp(np.interp(rng.random(n), cdf, log_edges)) * org.short_factor[model_idx]
    log_lo, log_hi = math.log(LONG_MIN_DURATION_S), math.log(cal.MAX_DURATION_S)
    long = np.exp(rng.uniform(log_lo, log_hi, size=n))
    is_long = rng.random(n) < org.long_prob[model_idx]
    return np.where(is_long, long, short), is_long


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


def _hour_profiles() -> tuple[np.ndarray, np.ndarray]:
    """Hour-of-day profiles of light and heavy bursts.

    Heavy bursts (over HEAVY_DEMAND_GPUS) follow the published GPU-seconds by hour, which
    swings far more than the job count (daytime jobs are bigger); light ones take what is
    left of the published job count, so all jobs together keep its shape.
    """
    jobs = np.array(cal.HOUR_OF_DAY_JOBS, dtype=float)
    jobs[0] -= cal.INITIAL_JOBS  # hour 0 of the profiles holds the opening batch
    gs = np.array(cal.HOUR_OF_DAY_GPU_SECONDS, dtype=float)
    gs[0] -= cal.INITIAL_GPU_SECONDS
    heavy = gs / gs.sum()
    # the heavy share of jobs, to the published buckets' resolution (those above the line)
    share = sum(b[3] for b in cal.GPU_DEMAND_BUCKETS if b[1] > HEAVY_DEMAND_GPUS) / cal.TOTAL_JOBS
    light = np.maximum(jobs / jobs.sum() - share * heavy, 0.0)
    return light / light.sum(), heavy


def _hour_duration_stretch() -> np.ndarray:
    """Per hour of submission, the published median duration over its job-weighted mean.

    Hour 0's published median includes the jobs running at t = 0; it is taken as the mean
    of hours 23 and 1 (ours).
    """
    med = np.array(cal.HOUR_OF_DAY_MEDIAN_DURATION_S, dtype=float)
    med[0] = (med[23] + med[1]) / 2
    jobs = np.array(cal.HOUR_OF_DAY_JOBS, dtype=float)
    jobs[0] -= cal.INITIAL_JOBS
    return med / float(np.average(med, weights=jobs))


def _tenant_hour_profiles(
    rng: np.random.Generator, profiles: tuple[np.ndarray, ...]
) -> list[np.ndarray]:
    """The profiles with one tenant's shift and sharpening applied to each."""
    shift = int(rng.integers(-TENANT_HOUR_SHIFT, TENANT_HOUR_SHIFT + 1))
    exponent = float(rng.uniform(*TENANT_HOUR_EXPONENT))
    out = []
    for base in profiles:
        prof = np.roll(base / base.mean(), shift) ** exponent
        out.append(prof / prof.sum())
    return out


def generate_jobs(cfg: GeneratorConfig) -> list[TraceJob]:
    """Generate the window's jobs, sorted by submit time and named ``0..N-1``.

    Submit times are seconds from the window's start; jobs whose burst spills past the
    window's end are left out. The history before the window is generated too: the jobs
    still running when the window opens enter it at t = 0 with what is left of their
    duration (on day 0, the published jobs running at the trace's start play that part).
    """
    rng = np.random.default_rng(cfg.seed)
    history = GeneratorConfig(
        seed=cfg.seed, days=cfg.start_day + cfg.days, start_day=0, scale=cfg.scale
    )
    day_weights = _window_day_weights(history)
    hp_days = np.array(cal.DAILY_HP_JOBS, dtype=float)
    spot_days = np.array(cal.DAILY_SPOT_JOBS, dtype=float)
    all_days = hp_days + spot_days
    spot_share = np.divide(spot_days, all_days, out=np.zeros_like(all_days), where=all_days > 0)
    shapes = _ShapeSampler()
    window_s = cfg.days * DAY_S
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
    hour_profiles = _hour_profiles()
    hour_stretch = _hour_duration_stretch()
    for idx, org in enumerate(orgs):
        light_prof, heavy_prof = _tenant_hour_profiles(rng, hour_profiles)
        noise = rng.lognormal(-(TENANT_DAY_SIGMA**2) / 2, TENANT_DAY_SIGMA, size=len(days))
        day_probs = day_weights * noise
        expected = org.regular_jobs * cfg.scale * day_weights.sum()
        # the tenant's job count: its published volume in the window, rounded at random
        n_target = math.floor(expected + rng.random())
        if n_target == 0:
            continue
        size = rng.geometric(1.0 / BURST_MEAN_JOBS, size=n_target)
        size = size[: int(np.searchsorted(np.cumsum(size), n_target)) + 1]
        size[-1] -= int(size.sum()) - n_target
        n_bursts = len(size)
        burst_day = rng.choice(days, size=n_bursts, p=day_probs / day_probs.sum())
        is_spot = rng.random(n_bursts) < spot_share[burst_day.astype(np.int64)]
        model_idx = rng.choice(len(cal.MODEL_ORDER), size=n_bursts, p=org.model_probs)
        req = np.empty(n_bursts)
        w = np.empty(n_bursts, dtype=np.int64)
        cpu = np.empty(n_bursts)
        for m, model in enumerate(cal.MODEL_ORDER):
            sel = model_idx == m
            if sel.any():
                req[sel], w[sel], cpu[sel] = shapes.draw(rng, model, int(sel.sum()))
        heavy = req * w > HEAVY_DEMAND_GPUS
        hour = np.where(
            heavy,
            rng.choice(24, size=n_bursts, p=heavy_prof),
            rng.choice(24, size=n_bursts, p=light_prof),
        )
        start = burst_day * DAY_S + (hour + rng.random(n_bursts)) * 3600.0
        # expand bursts into jobs: the first at the burst's start, the rest after gaps
        n_jobs = int(size.sum())
        first = np.repeat(np.cumsum(size) - size, size)
        gaps = rng.exponential(IN_BURST_GAP_S, size=n_jobs)
        gaps[first] = 0.0  # the first job of each burst has no gap
        csum = np.cumsum(gaps)
        t = np.repeat(start, size) + csum - csum[first]
        job_spot = np.repeat(is_spot, size)
        hp_dur, is_long = _hp_durations(rng, org, np.repeat(model_idx, size))
        # short jobs submitted by day run longer, as the published medians by hour say
        hp_dur = np.where(is_long, hp_dur, hp_dur * hour_stretch[np.repeat(hour, size)])
        dur = np.where(
            job_spot,
            rng.lognormal(math.log(cal.SPOT_MEDIAN_DURATION_S), SPOT_SIGMA, size=n_jobs),
            hp_dur,
        )
        job_w = np.where(is_long & ~job_spot, 1, np.repeat(w, size))
        emit(
            idx,
            np.repeat(model_idx, size),
            np.repeat(req, size),
            job_w,
            np.repeat(cpu, size),
            t,
            dur,
            job_spot,
        )

    if cfg.initial_jobs:  # the jobs running when the published trace opens
        n_init = int(rng.poisson(cal.INITIAL_JOBS * cfg.scale))
        # (tenant, model) pairs in proportion to their published GPU-seconds over the
        # model's mean request, so each pair's share of the opening load is its share of
        # the GPU-seconds (what _org_models took off every pair)
        weights = np.concatenate([o.initial_weights for o in orgs])
        pair = rng.choice(len(weights), size=n_init, p=weights / weights.sum())
        n_models = len(cal.MODEL_ORDER)
        tenant_of, model_of = pair // n_models, pair % n_models
        for idx in np.unique(tenant_of):
            model_idx = model_of[tenant_of == idx]
            n = len(model_idx)
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
    # the release records durations inside its 184 days: a job still running at the end is
    # cut there (the longest real duration is the whole span)
    dur = np.minimum(dur, np.maximum(cal.TRACE_SPAN_S - t, MIN_DURATION_S))
    opens = cfg.start_day * DAY_S
    end = t + dur
    carried = (t < opens) & (end > opens)
    if not cfg.initial_jobs:
        carried[:] = False
    dur = np.where(carried, end - opens, dur)
    t = np.where(carried, 0.0, t - opens)
    keep = carried | ((t >= 0) & (t < window_s))
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
    trace.notes["generator"] = "stoker.traces.generator (calibrated to GFS aggregates)"
    trace.notes.update(v2026_calendar_notes(cfg.start_day))
    return trace
