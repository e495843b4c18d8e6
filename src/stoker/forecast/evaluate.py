"""Walk-forward evaluation of forecasters on demand series: MAE and 0.9-quantile coverage.

The protocol: warm up on the first ``warmup_min`` minutes (4 weeks), then refit every
``refit_every_min`` (daily) on all history so far, and between refits query at every
``origin_every_min`` (hourly) origin for the next ``horizon_h`` hours. Every query is scored
against the actual hourly peaks; the series' last ``horizon_h`` hours only serve as targets.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import norm

from stoker.forecast.base import (
    MINUTES_PER_DAY,
    MINUTES_PER_HOUR,
    MINUTES_PER_WEEK,
    Forecaster,
    ForecastError,
    SeriesKey,
)


def coverage(actual: np.ndarray, mean: np.ndarray, std: np.ndarray, q: float = 0.9) -> float:
    """Fraction of ``actual`` at or below the forecast q-quantile ``mean + z_q * std``."""
    actual, mean, std = (np.asarray(a, dtype=float) for a in (actual, mean, std))
    if not (actual.shape == mean.shape == std.shape):
        raise ForecastError(
            f"actual, mean and std must have one shape, got {actual.shape}, {mean.shape}, "
            f"{std.shape}"
        )
    if not 0.0 < q < 1.0:
        raise ForecastError(f"q must be in (0, 1), got {q}")
    if np.any(std < 0):
        raise ForecastError("std must be >= 0")
    if actual.size == 0:
        raise ForecastError("actual is empty: nothing to score")
    return float(np.mean(actual <= mean + norm.ppf(q) * std))


def mae(actual: np.ndarray, mean: np.ndarray) -> float:
    """Mean absolute error of the forecast means."""
    actual, mean = np.asarray(actual, dtype=float), np.asarray(mean, dtype=float)
    if actual.shape != mean.shape or actual.size == 0:
        raise ForecastError("actual and mean must be non-empty and of one shape")
    return float(np.mean(np.abs(actual - mean)))


@dataclass(slots=True)
class SeriesScore:
    """One forecaster's score on one series."""

    mae: float
    coverage: float
    mean_actual: float
    n: int


@dataclass(slots=True)
class ForecasterScore:
    """One forecaster's scores per series, pooled over all, and its time spent."""

    name: str
    per_series: dict[SeriesKey, SeriesScore]
    per_gpu_pool: dict[str, SeriesScore]
    overall: SeriesScore
    per_horizon_mae: list[float]
    fit_s: float
    predict_s: float
    extra: dict[str, float] = field(default_factory=dict)


def walk_forward(
    series: dict[SeriesKey, np.ndarray],
    forecaster: Forecaster,
    *,
    warmup_min: int = 4 * MINUTES_PER_WEEK,
    refit_every_min: int = MINUTES_PER_DAY,
    origin_every_min: int = MINUTES_PER_HOUR,
    horizon_h: int = 4,
    q: float = 0.9,
) -> ForecasterScore:
    """Score ``forecaster`` on ``series`` (all of one length, minute 0 = their epoch).

    Per series, and per GPU pool: the GPU pool's forecast is the sum of its series' (means
    added, variances added, as the spot quota adds them), scored against the hourly peaks
    of the GPU pool's summed demand. Each origin is one ``predict_many`` call for all series.
    """
    if not series:
        raise ForecastError("series is empty: nothing to evaluate")
    keys = sorted(series, key=lambda k: (k.tenant, k.gpu_pool, k.cluster))
    length = {len(series[k]) for k in keys}
    if len(length) != 1:
        raise ForecastError("series must all have one length")
    total = length.pop()
    last_origin = total - horizon_h * MINUTES_PER_HOUR
    if warmup_min < 0 or warmup_min > last_origin:
        raise ForecastError(
            f"warmup_min must be in [0, {last_origin}] for series of {total} minutes, "
            f"got {warmup_min}"
        )
    if refit_every_min < 1 or origin_every_min < 1:
        raise ForecastError("refit_every_min and origin_every_min must be >= 1")
    origins = np.arange(warmup_min, last_origin + 1, origin_every_min)
    matrix = np.stack([np.asarray(series[k], dtype=float) for k in keys])
    gpu_pools = sorted({k.gpu_pool for k in keys})
    members = [[i for i, k in enumerate(keys) if k.gpu_pool == p] for p in gpu_pools]
    gpu_pool_matrix = np.stack([matrix[rows].sum(axis=0) for rows in members])
    n = len(origins)
    means = np.zeros((len(keys), n, horizon_h))
    stds = np.zeros_like(means)
    fit_s = predict_s = 0.0
    next_refit = warmup_min
    for j, origin in enumerate(origins):
        if origin >= next_refit:
            t0 = time.perf_counter()
            forecaster.fit({k: matrix[i, :origin] for i, k in enumerate(keys)}, int(origin))
            fit_s += time.perf_counter() - t0
            next_refit = origin + refit_every_min
        t0 = time.perf_counter()
        f = forecaster.predict_many(keys, matrix[:, :origin], int(origin), horizon_h)
        predict_s += time.perf_counter() - t0
        means[:, j] = f.mean
        stds[:, j] = f.std

    def peaks_ahead(rows: np.ndarray) -> np.ndarray:
        """(rows, origins, horizon) actual hourly peaks after each origin."""
        idx = origins[:, None] + np.arange(horizon_h * MINUTES_PER_HOUR)[None, :]
        return rows[:, idx].reshape(len(rows), n, horizon_h, MINUTES_PER_HOUR).max(axis=3)

    actual = peaks_ahead(matrix)
    gpu_pool_actual = peaks_ahead(gpu_pool_matrix)
    gpu_pool_means = np.stack([means[rows].sum(axis=0) for rows in members])
    gpu_pool_stds = np.stack([np.sqrt((stds[rows] ** 2).sum(axis=0)) for rows in members])

    def score(a: np.ndarray, m: np.ndarray, s: np.ndarray) -> SeriesScore:
        return SeriesScore(mae(a, m), coverage(a, m, s, q), float(a.mean()), int(a.size))

    per_series = {k: score(actual[i], means[i], stds[i]) for i, k in enumerate(keys)}
    per_gpu_pool = {
        p: score(gpu_pool_actual[i], gpu_pool_means[i], gpu_pool_stds[i])
        for i, p in enumerate(gpu_pools)
    }
    overall = score(actual, means, stds)
    per_h = [mae(actual[:, :, h], means[:, :, h]) for h in range(horizon_h)]
    return ForecasterScore(
        forecaster.name, per_series, per_gpu_pool, overall, per_h, fit_s, predict_s
    )
