"""Compare a job file's statistics with the published aggregates of the GFS trace.

The published side comes from ``../shared/data/alibaba-spot-v2026/aggregates`` when that
folder is at hand, else from the copies in :mod:`stoker.traces.calibration`; both are
read into one :class:`Published` record, and the same code turns it into the compared
figures. Counts are compared per window and per unit of ``scale``: a 35-day run at scale
0.25 is held against a quarter of the published first 35 days.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from stoker.traces import calibration as cal
from stoker.traces.base import TraceJob
from stoker.traces.gfs_v2026 import TraceFormatError
from stoker.units import DAY_S, HOUR_S


@dataclass(frozen=True, slots=True)
class Published:
    """The published tables the check needs (from the aggregate files or the calibration)."""

    source: str
    daily_hp_jobs: tuple[int, ...]
    daily_spot_jobs: tuple[int, ...]
    daily_gpu_seconds: tuple[float, ...]
    daily_mean_concurrent_gpus: tuple[float, ...]
    concurrency_hour_of_day_swing: float
    concurrency_daily_swing_median: float
    hp_gpu_seconds: float
    spot_gpu_seconds: float
    hp_median_duration: float
    spot_median_duration: float
    hp_p90_duration: float
    spot_p90_duration: float
    duration_quantiles: dict[float, float]
    duration_buckets: dict[str, int]
    worker_buckets: dict[str, int]
    gpu_demand_buckets: dict[str, int]
    model_jobs: dict[str, int]
    model_gpu_seconds: dict[str, float]
    model_median_request: dict[str, float]
    model_mean_concurrent_gpus: dict[str, float]
    org_jobs: dict[str, int]
    org_gpu_seconds: dict[str, float]
    hour_of_day_jobs: tuple[int, ...]
    inter_arrival_quantiles: dict[float, float]
    initial_jobs: int
    initial_gpu_demand: float


def published_from_calibration() -> Published:
    """The published figures as copied into the project."""
    return Published(
        source="embedded calibration (stoker.traces.calibration)",
        daily_hp_jobs=cal.DAILY_HP_JOBS,
        daily_spot_jobs=cal.DAILY_SPOT_JOBS,
        daily_gpu_seconds=tuple(float(v) for v in cal.DAILY_GPU_SECONDS),
        daily_mean_concurrent_gpus=cal.DAILY_MEAN_CONCURRENT_GPUS,
        concurrency_hour_of_day_swing=cal.CONCURRENCY_HOUR_OF_DAY_SWING,
        concurrency_daily_swing_median=cal.CONCURRENCY_DAILY_SWING_MEDIAN,
        hp_gpu_seconds=cal.HP_GPU_SECONDS,
        spot_gpu_seconds=cal.SPOT_GPU_SECONDS,
        hp_median_duration=cal.HP_MEDIAN_DURATION_S,
        spot_median_duration=cal.SPOT_MEDIAN_DURATION_S,
        hp_p90_duration=cal.HP_P90_DURATION_S,
        spot_p90_duration=cal.SPOT_P90_DURATION_S,
        duration_quantiles=dict(cal.DURATION_QUANTILES_S),
        duration_buckets={b[0]: b[3] for b in cal.DURATION_BUCKETS},
        worker_buckets={b[0]: b[3] for b in cal.WORKER_BUCKETS},
        gpu_demand_buckets={b[0]: b[3] for b in cal.GPU_DEMAND_BUCKETS},
        model_jobs={m: d.jobs for m, d in cal.DEMAND_BY_MODEL.items()},
        model_gpu_seconds={m: d.gpu_seconds for m, d in cal.DEMAND_BY_MODEL.items()},
        model_median_request={m: d.median_gpu_request for m, d in cal.DEMAND_BY_MODEL.items()},
        model_mean_concurrent_gpus=dict(cal.MEAN_CONCURRENT_GPUS_BY_MODEL),
        org_jobs={o.name: o.jobs for o in cal.ORGANIZATIONS},
        org_gpu_seconds={o.name: o.gpu_seconds for o in cal.ORGANIZATIONS},
        hour_of_day_jobs=cal.HOUR_OF_DAY_JOBS,
        inter_arrival_quantiles=dict(cal.INTER_ARRIVAL_QUANTILES_S),
        initial_jobs=cal.INITIAL_JOBS,
        initial_gpu_demand=cal.INITIAL_GPU_DEMAND,
    )


def _rows(folder: Path, name: str, columns: Sequence[str]) -> list[dict[str, str]]:
    file = folder / name
    if not file.is_file():
        raise TraceFormatError(f"{file}: no such file")
    with file.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceFormatError(f"{file}: missing column(s) {', '.join(missing)}")
        return list(reader)


def published_from_aggregates(folder: str | Path) -> Published:
    """Read the published figures from the aggregate files themselves."""
    agg = Path(folder)
    daily = _rows(agg, "daily_summary.csv", ("submit_day", "hp_jobs", "spot_jobs", "gpu_seconds"))
    hourly = _rows(agg, "extra_hourly_concurrency.csv", ("hour", "gpus_active_requested"))
    gpus = np.array([float(r["gpus_active_requested"]) for r in hourly])
    n_days = math.ceil(len(gpus) / 24)
    hour_swing, day_swing = _swings(gpus)
    types = {
        r["job_type"]: r
        for r in _rows(agg, "job_type_summary.csv", ("job_type", "gpu_seconds", "median_duration"))
    }
    quant = _rows(agg, "duration_quantiles.csv", ("duration_seconds",))
    models = _rows(agg, "demand_by_model.csv", ("gpu_model", "jobs", "gpu_seconds"))
    top = _rows(agg, "extra_hourly_concurrency_top_models.csv", ("hour",))
    orgs = _rows(agg, "org_by_gpu_seconds.csv", ("organization", "jobs", "gpu_seconds"))
    hod = _rows(agg, "extra_hour_of_day_patterns.csv", ("hour_of_day", "jobs"))
    inter = _rows(agg, "extra_inter_arrival_quantiles.csv", ("quantile", "seconds"))
    first_hour = _rows(agg, "hourly_summary.csv", ("submit_hour", "jobs", "gpu_demand"))[0]

    def buckets(name: str, key: str) -> dict[str, int]:
        return {r[key]: int(r["jobs"]) for r in _rows(agg, name, (key, "jobs"))}

    return Published(
        source=str(agg),
        daily_hp_jobs=tuple(int(r["hp_jobs"]) for r in daily),
        daily_spot_jobs=tuple(int(r["spot_jobs"]) for r in daily),
        daily_gpu_seconds=tuple(float(r["gpu_seconds"]) for r in daily),
        daily_mean_concurrent_gpus=tuple(
            float(gpus[d * 24 : (d + 1) * 24].mean()) for d in range(n_days)
        ),
        concurrency_hour_of_day_swing=hour_swing,
        concurrency_daily_swing_median=day_swing,
        hp_gpu_seconds=float(types["HP"]["gpu_seconds"]),
        spot_gpu_seconds=float(types["Spot"]["gpu_seconds"]),
        hp_median_duration=float(types["HP"]["median_duration"]),
        spot_median_duration=float(types["Spot"]["median_duration"]),
        hp_p90_duration=float(types["HP"]["p90_duration"]),
        spot_p90_duration=float(types["Spot"]["p90_duration"]),
        duration_quantiles={float(r[""]): float(r["duration_seconds"]) for r in quant},
        duration_buckets=buckets("extra_bucket_duration.csv", "duration_bucket"),
        worker_buckets=buckets("extra_bucket_worker_num.csv", "worker_bucket"),
        gpu_demand_buckets=buckets("extra_bucket_gpu_demand.csv", "gpu_demand_bucket"),
        model_jobs={r["gpu_model"]: int(r["jobs"]) for r in models},
        model_gpu_seconds={r["gpu_model"]: float(r["gpu_seconds"]) for r in models},
        model_median_request={r["gpu_model"]: float(r["median_gpu_req"]) for r in models},
        model_mean_concurrent_gpus={
            m: float(np.mean([float(r[m]) for r in top])) for m in top[0] if m != "hour"
        },
        org_jobs={r["organization"]: int(r["jobs"]) for r in orgs},
        org_gpu_seconds={r["organization"]: float(r["gpu_seconds"]) for r in orgs},
        hour_of_day_jobs=tuple(int(r["jobs"]) for r in hod),
        inter_arrival_quantiles={float(r["quantile"]): float(r["seconds"]) for r in inter},
        initial_jobs=int(first_hour["jobs"]),
        initial_gpu_demand=float(first_hour["gpu_demand"]),
    )


def published(aggregates: str | Path | None) -> Published:
    """From the aggregate folder when it exists, else from the embedded calibration."""
    if aggregates is not None and Path(aggregates).is_dir():
        return published_from_aggregates(aggregates)
    return published_from_calibration()


@dataclass(frozen=True, slots=True)
class Row:
    """One compared figure. ``scope`` says what part of the published trace it covers."""

    section: str
    name: str
    published: float
    generated: float
    scope: str

    @property
    def rel_error(self) -> float:
        """(generated - published) / |published|; NaN where published is 0."""
        if self.published == 0:
            return math.nan
        return (self.generated - self.published) / abs(self.published)


def _swings(hourly: np.ndarray) -> tuple[float, float]:
    """Diurnal swings of an hourly series over its whole days: (max - min) / mean of the
    hour-of-day means, and the median over days of each day's (max - min) / mean."""
    whole = len(hourly) // 24
    days = hourly[: whole * 24].reshape(whole, 24)
    by_hour = days.mean(axis=0)
    per_day = (days.max(axis=1) - days.min(axis=1)) / np.maximum(days.mean(axis=1), 1e-9)
    return float((by_hour.max() - by_hour.min()) / by_hour.mean()), float(np.median(per_day))


def _gini(values: np.ndarray) -> float:
    v = np.sort(values.astype(float))
    n = len(v)
    if n == 0 or v.sum() == 0:
        return 0.0
    return float((2 * np.arange(1, n + 1) - n - 1) @ v / (n * v.sum()))


def _bucket_counts(values: np.ndarray, edges: Sequence[tuple[str, float, float]]) -> list[int]:
    return [int(((values >= lo) & (values < hi)).sum()) for _, lo, hi in edges]


def _hourly_concurrency(start: np.ndarray, dur: np.ndarray, gpus: np.ndarray, hours: int):
    """GPUs requested by jobs running at any time in each hour [h, h+1) of the window."""
    first = np.floor(start / HOUR_S).astype(np.int64)
    last = np.ceil((start + np.maximum(dur, 1e-9)) / HOUR_S).astype(np.int64)
    first = np.clip(first, 0, hours)
    last = np.clip(last, 0, hours)
    diff = np.zeros(hours + 1)
    np.add.at(diff, first, gpus)
    np.add.at(diff, last, -gpus)
    return np.cumsum(diff)[:hours]


def compare(
    jobs: Sequence[TraceJob],
    pub: Published,
    *,
    days: float = cal.TRACE_DAYS,
    start_day: int = 0,
    scale: float = 1.0,
    capacity_gpus: int = cal.FLEET_GPUS,
) -> list[Row]:
    """The generated-vs-published rows for ``jobs`` covering ``days`` from ``start_day``."""
    if not jobs:
        raise ValueError("jobs: empty; nothing to compare")
    t = np.array([j.submit_time for j in jobs])
    dur = np.array([j.duration for j in jobs])
    req = np.array([j.gpu_request for j in jobs])
    workers = np.array([j.worker_num for j in jobs], dtype=float)
    spot = np.array([j.job_class == "spot" for j in jobs])
    models = np.array([j.gpu_model for j in jobs])
    tenants = np.array([j.tenant for j in jobs])
    demand = req * workers
    gs = demand * dur
    rows: list[Row] = []
    full, window = "full trace", f"days {start_day}-{start_day + days:g}"

    def add(section: str, name: str, p: float, g: float, scope: str = full) -> None:
        rows.append(Row(section, name, float(p), float(g), scope))

    # volumes in the window, per unit of scale
    lo_day, hi_day = start_day, start_day + days
    keep = [
        max(0.0, min(d + 1.0, hi_day) - max(float(d), lo_day))
        for d in range(len(pub.daily_hp_jobs))
    ]
    pub_hp = float(np.dot(keep, pub.daily_hp_jobs))
    pub_spot = float(np.dot(keep, pub.daily_spot_jobs))
    add("volume", "jobs (per unit scale)", pub_hp + pub_spot, len(jobs) / scale, window)
    add("volume", "HP share of jobs", pub_hp / (pub_hp + pub_spot), 1 - spot.mean(), window)
    add(
        "volume",
        "HP share of GPU-seconds",
        pub.hp_gpu_seconds / (pub.hp_gpu_seconds + pub.spot_gpu_seconds),
        gs[~spot].sum() / gs.sum(),
    )
    add(
        "volume",
        "GPU-seconds of the jobs submitted (per unit scale)",
        float(np.dot(keep, pub.daily_gpu_seconds)),
        # past day 0, the jobs running at the window's start were submitted before it
        (gs.sum() if start_day == 0 else gs[t > 0].sum()) / scale,
        window,
    )
    if start_day == 0:  # later windows open on the generated history, not on these
        add("volume", "jobs at t=0 (per unit scale)", pub.initial_jobs, (t == 0).sum() / scale)
        add(
            "volume",
            "GPU demand at t=0 (per unit scale)",
            pub.initial_gpu_demand,
            demand[t == 0].sum() / scale,
        )
    add("volume", "tenants", len(pub.org_jobs), len(set(tenants.tolist())))

    # durations
    for q, v in sorted(pub.duration_quantiles.items()):
        add("duration", f"p{round(q * 100)} (s)", v, np.quantile(dur, q))
    for cls, mask, med, p90 in (
        ("HP", ~spot, pub.hp_median_duration, pub.hp_p90_duration),
        ("Spot", spot, pub.spot_median_duration, pub.spot_p90_duration),
    ):
        if mask.any():
            add("duration", f"{cls} median (s)", med, np.median(dur[mask]))
            add("duration", f"{cls} p90 (s)", p90, np.quantile(dur[mask], 0.9))
    total = sum(pub.duration_buckets.values())
    edges = [(b[0], b[1], b[2]) for b in cal.DURATION_BUCKETS]
    for (name, _, _), g in zip(edges, _bucket_counts(dur, edges), strict=True):
        add("duration share", name, pub.duration_buckets[name] / total, g / len(jobs))

    # shapes
    total = sum(pub.worker_buckets.values())
    wedges = [(b[0], float(b[1]), b[2] + 1.0) for b in cal.WORKER_BUCKETS]
    for (name, _, _), g in zip(wedges, _bucket_counts(workers, wedges), strict=True):
        add("worker_num share", name, pub.worker_buckets[name] / total, g / len(jobs))
    total = sum(pub.gpu_demand_buckets.values())
    dedges = [(b[0], b[1], b[2]) for b in cal.GPU_DEMAND_BUCKETS]
    for (name, _, _), g in zip(dedges, _bucket_counts(demand, dedges), strict=True):
        add("GPU demand share", name, pub.gpu_demand_buckets[name] / total, g / len(jobs))

    # GPU models
    total_jobs = sum(pub.model_jobs.values())
    total_gs = sum(pub.model_gpu_seconds.values())
    for model in cal.MODEL_ORDER:
        sel = models == model
        add("model job share", model, pub.model_jobs[model] / total_jobs, sel.mean())
        add(
            "model GPU-s share",
            model,
            pub.model_gpu_seconds[model] / total_gs,
            gs[sel].sum() / gs.sum(),
        )
        if sel.any():
            add("model median request", model, pub.model_median_request[model], np.median(req[sel]))

    # tenants
    pub_gs = np.array(list(pub.org_gpu_seconds.values()))
    gen_gs = {name: 0.0 for name in pub.org_gpu_seconds}
    for name, value in zip(tenants.tolist(), gs.tolist(), strict=True):
        gen_gs[name] = gen_gs.get(name, 0.0) + value
    gen_arr = np.array(list(gen_gs.values()))
    add("tenants", "Gini of GPU-seconds", _gini(pub_gs), _gini(gen_arr))
    top = sorted(pub.org_gpu_seconds, key=pub.org_gpu_seconds.__getitem__, reverse=True)[:5]
    for name in top:
        add(
            "tenant GPU-s share",
            f"org {name}",
            pub.org_gpu_seconds[name] / pub_gs.sum(),
            gen_gs[name] / gen_arr.sum(),
        )
    pub_org_jobs = np.array([pub.org_jobs[n] for n in pub.org_gpu_seconds], dtype=float)
    gen_org_jobs = np.array([(tenants == n).sum() for n in pub.org_gpu_seconds], dtype=float)
    add(
        "tenants",
        "corr. of per-tenant job counts",
        1.0,
        np.corrcoef(np.log1p(pub_org_jobs), np.log1p(gen_org_jobs))[0, 1],
    )

    # time shape: submissions (the t=0 batch left out of the hour-of-day shape)
    hod_pub = np.array(pub.hour_of_day_jobs, dtype=float)
    hod_pub[0] -= pub.initial_jobs
    arriving = t > 0
    hod_gen = np.bincount(((t[arriving] % DAY_S) // HOUR_S).astype(np.int64), minlength=24)
    add(
        "time shape",
        "hour-of-day peak/trough",
        hod_pub.max() / hod_pub.min(),
        hod_gen.max() / max(hod_gen.min(), 1),
    )
    add("time shape", "hour-of-day corr.", 1.0, np.corrcoef(hod_pub, hod_gen)[0, 1])
    n_days = math.ceil(days - 1e-9)
    day_idx = np.clip((t[arriving] // DAY_S).astype(np.int64), 0, n_days - 1)
    daily_gen = np.bincount(day_idx, minlength=n_days).astype(float)
    daily_pub = (np.array(pub.daily_hp_jobs) + np.array(pub.daily_spot_jobs))[
        start_day : start_day + n_days
    ].astype(float)
    if start_day == 0:
        daily_pub[0] -= pub.initial_jobs
    if n_days > 2:
        add(
            "time shape",
            "daily submissions corr.",
            1.0,
            np.corrcoef(daily_pub, daily_gen)[0, 1],
            window,
        )
    if scale == 1.0:  # gaps inside bursts do not scale, so only compare at scale 1
        gaps = np.diff(np.sort(t[arriving]))
        for q, v in sorted(pub.inter_arrival_quantiles.items()):
            add("inter-arrival", f"p{round(q * 100)} (s)", v, np.quantile(gaps, q))

    # load: GPUs requested by running jobs, hourly, against the fleet
    hours = math.ceil(days * 24)
    conc = _hourly_concurrency(t, dur, demand, hours)
    pub_days = np.array(pub.daily_mean_concurrent_gpus)[start_day : start_day + n_days]
    add(
        "load",
        "mean concurrent GPUs (per unit scale)",
        pub_days.mean(),
        conc.mean() / scale,
        window,
    )
    add(
        "load",
        "mean concurrent / capacity (per unit scale)",
        pub_days.mean() / capacity_gpus,
        conc.mean() / scale / capacity_gpus,
        window,
    )
    if hours >= 48:
        hour_swing, day_swing = _swings(conc)
        add("load", "diurnal swing of concurrency", pub.concurrency_hour_of_day_swing, hour_swing)
        add(
            "load",
            "median daily swing of concurrency",
            pub.concurrency_daily_swing_median,
            day_swing,
        )
    gen_days = conc[: n_days * 24].reshape(-1, 24).mean(axis=1) if hours >= n_days * 24 else conc
    if n_days > 2 and len(gen_days) == len(pub_days):
        add(
            "load",
            "daily mean concurrency corr.",
            1.0,
            np.corrcoef(pub_days, gen_days)[0, 1],
            window,
        )
    for model in cal.MODEL_ORDER:
        sel = models == model
        mc = _hourly_concurrency(t[sel], dur[sel], demand[sel], hours)
        add(
            "load by model",
            f"{model} mean GPUs (per unit scale)",
            pub.model_mean_concurrent_gpus[model],
            mc.mean() / scale,
        )
    return rows


def render(rows: Sequence[Row], title: str) -> object:
    """A rich table of the rows (published, generated, relative error, scope)."""
    from rich.table import Table

    table = Table(title=title)
    for col, justify in (
        ("section", "left"),
        ("statistic", "left"),
        ("published", "right"),
        ("generated", "right"),
        ("rel. error", "right"),
        ("scope", "left"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        err = r.rel_error
        table.add_row(
            r.section,
            r.name,
            _fmt(r.published),
            _fmt(r.generated),
            "-" if math.isnan(err) else f"{err:+.1%}",
            r.scope,
        )
    return table


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1e5:
        return f"{v:.3e}"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.4g}"
