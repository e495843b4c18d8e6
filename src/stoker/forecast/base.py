"""The forecaster interface: per tenant and GPU pool, HP GPU demand ahead, as a distribution.

How a caller (the simulator, the broker's quota loop) uses a forecaster:

- It records each tenant's HP GPU demand per GPU pool once a minute (see
  :func:`stoker.forecast.series.demand_series` for a trace's series).
- Every ``cadence.refit_every_min`` minutes (daily) it calls ``fit(histories, now_min)``.
- Every ``cadence.query_every_min`` minutes (5) it calls
  ``predict_many(keys, histories, now_min, horizon_h)`` once for all series (one row of
  ``histories`` per key) and gets the peak demand of each of the next ``horizon_h`` hours of
  each series as a Normal (mean, std). ``predict`` is the same for one series. A caller
  that keeps the hourly peaks itself as its clock passes (the simulator's demand meter)
  calls ``predict_peaks`` with them instead: every forecaster here reads only the peaks of
  the last ``query_hours`` hours, so the answers are the same.

Time is in whole minutes since the series' epoch (minute 0; its calendar date lives in the
forecaster's :class:`~stoker.forecast.series.Calendar`). A ``history`` is a 1-D array with one
value per minute that *ends at* ``now_min``: ``history[-1]`` is minute ``now_min - 1`` and
``history[i]`` is minute ``now_min - len(history) + i``. Passing the whole record is fine
(only the tail a forecaster needs is read); minutes before the record count as zero demand.
Hour ``k`` ahead (k = 0 .. horizon_h - 1) is the block ``[now_min + 60 k, now_min + 60 (k+1))``
and its peak is the maximum per-minute demand inside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

MINUTES_PER_HOUR = 60
MINUTES_PER_DAY = 1440
MINUTES_PER_WEEK = 7 * MINUTES_PER_DAY


class ForecastError(ValueError):
    """Bad input to a forecaster (the message names the field)."""


class NotFittedError(ForecastError):
    """``predict`` was called on a learned forecaster before any ``fit``."""


class ForecastDependencyError(ImportError):
    """A forecaster needs an optional dependency that is not installed."""


@dataclass(frozen=True, slots=True)
class SeriesKey:
    """Whose demand: a tenant's HP GPUs in one GPU pool (GPU model) of one cluster."""

    tenant: str
    gpu_pool: str
    cluster: str = "default"


@dataclass(frozen=True, slots=True)
class Forecast:
    """Hourly peak HP demand for the next ``len(mean)`` hours: Normal(mean[k], std[k]**2)."""

    mean: np.ndarray
    std: np.ndarray


@dataclass(frozen=True, slots=True)
class Cadence:
    """How often a caller refits and queries a forecaster (the paper: daily and 5 minutes)."""

    refit_every_min: int = MINUTES_PER_DAY
    query_every_min: int = 5

    def __post_init__(self) -> None:
        if self.refit_every_min < 1:
            raise ForecastError(f"refit_every_min must be >= 1, got {self.refit_every_min}")
        if self.query_every_min < 1:
            raise ForecastError(f"query_every_min must be >= 1, got {self.query_every_min}")


@dataclass(frozen=True, slots=True)
class Forecasts:
    """One query's answer for many series: row ``i`` of ``mean`` and ``std`` (n, hours) is
    the Normal of ``keys[i]``'s hourly peaks ahead."""

    keys: tuple[SeriesKey, ...]
    mean: np.ndarray
    std: np.ndarray

    def __getitem__(self, i: int) -> Forecast:
        return Forecast(mean=self.mean[i], std=self.std[i])


def check_histories(
    keys: Sequence[SeriesKey], histories: np.ndarray, field_name: str = "histories"
) -> np.ndarray:
    """A 2-D float array, one row per key, of finite non-negative demand, or ForecastError."""
    arr = np.asarray(histories, dtype=float)
    if arr.ndim != 2:
        raise ForecastError(f"{field_name} must be 2-D (one row per series), got {arr.ndim}-D")
    if arr.shape[0] != len(keys):
        raise ForecastError(f"{field_name} has {arr.shape[0]} rows for {len(keys)} keys")
    return check_demand(arr, field_name)


def check_demand(arr: np.ndarray, field_name: str) -> np.ndarray:
    """``arr`` when every value is finite and >= 0 (GPUs demanded), else ForecastError."""
    if not np.all(np.isfinite(arr)):
        raise ForecastError(f"{field_name} must be finite (no NaN or inf)")
    if np.any(arr < 0):
        raise ForecastError(f"{field_name} must be >= 0 (GPUs demanded)")
    return arr


class BatchPredictor:
    """Mixin for forecasters that read only the hourly peaks of the last ``query_hours``
    hours: ``predict_many`` (per-minute histories) lays those out and calls
    ``predict_peaks``; ``predict`` for one series is ``predict_many`` of a batch of one."""

    query_hours: int

    @property
    def query_minutes(self) -> int:
        """The most recent minutes a query reads: ``query_hours`` whole hours."""
        return self.query_hours * MINUTES_PER_HOUR

    def predict_peaks(
        self,
        keys: Sequence[SeriesKey],
        peaks: np.ndarray,
        now_min: int,
        horizon_h: int,
        recorded_min: int | None = None,
    ) -> Forecasts:
        raise NotImplementedError

    def predict_many(
        self, keys: Sequence[SeriesKey], histories: np.ndarray, now_min: int, horizon_h: int
    ) -> Forecasts:
        """Hourly peak mean and std of every series for the next ``horizon_h`` hours, from
        one row of per-minute history per key (see the module's docstring)."""
        from stoker.forecast.series import hourly_peaks_many  # series imports this module

        arr = np.asarray(histories)
        # only the input window is read, so only it is checked (a simulator may pass the
        # whole record)
        tail = check_histories(keys, arr[..., -self.query_minutes :])
        peaks = hourly_peaks_many(tail, self.query_hours)
        return self.predict_peaks(keys, peaks, now_min, horizon_h, recorded_min=arr.shape[-1])

    def predict(
        self, key: SeriesKey, history: np.ndarray, now_min: int, horizon_h: int
    ) -> Forecast:
        """Hourly peak mean and std of one series (see :meth:`predict_many`)."""
        arr = np.asarray(history, dtype=float)
        if arr.ndim != 1:
            raise ForecastError(f"history must be 1-D (one value per minute), got {arr.ndim}-D")
        return self.predict_many((key,), arr[None, :], now_min, horizon_h)[0]


def check_peaks(
    keys: Sequence[SeriesKey], peaks: np.ndarray, hours: int, field_name: str = "peaks"
) -> np.ndarray:
    """A 2-D float array of ``hours`` finite non-negative hourly peaks per key, or
    ForecastError."""
    arr = check_histories(keys, peaks, field_name)
    if arr.shape[1] != hours:
        raise ForecastError(f"{field_name} has {arr.shape[1]} hours, expected {hours}")
    return arr


class Forecaster(Protocol):
    """Fitted on minute-level history (GPUs per minute), queried for hourly peaks ahead.

    ``fit`` may be called any number of times (each call retrains from ``histories``, which
    all end at ``now_min``); ``predict_many`` answers a query for many series at once (one
    call per query time, vectorised inside), ``predict`` for one. Same seed and same inputs
    give the same forecast.
    """

    name: str
    cadence: Cadence

    @property
    def query_minutes(self) -> int:
        """The most recent minutes ``predict_many`` reads: a caller may pass only these."""
        ...

    @property
    def query_hours(self) -> int:
        """The hourly peaks ``predict_peaks`` reads (``query_minutes`` laid out in hours)."""
        ...

    @property
    def fit_minutes(self) -> int | None:
        """The most recent minutes ``fit`` reads (None: the whole record)."""
        ...

    def fit(self, histories: dict[SeriesKey, np.ndarray], now_min: int) -> None: ...

    def predict(
        self, key: SeriesKey, history: np.ndarray, now_min: int, horizon_h: int
    ) -> Forecast: ...

    def predict_many(
        self, keys: Sequence[SeriesKey], histories: np.ndarray, now_min: int, horizon_h: int
    ) -> Forecasts: ...

    def predict_peaks(
        self,
        keys: Sequence[SeriesKey],
        peaks: np.ndarray,
        now_min: int,
        horizon_h: int,
        recorded_min: int | None = None,
    ) -> Forecasts:
        """``predict_many`` from what it reads: per key, the peaks of the ``query_hours``
        60-minute blocks that end at ``now_min`` (oldest first; blocks before the record
        are zero). ``recorded_min``: how many minutes the record holds (None: at least
        ``query_minutes``). A caller that keeps hourly peaks as its clock passes (the
        simulator's demand meter) queries so without laying out a week of minutes."""
        ...
