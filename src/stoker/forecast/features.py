"""Training windows and query inputs shared by the learned forecasters (ridge, OrgLinear).

A sample is one origin minute: its input is the hourly peaks of the ``lookback_h`` hours
before the origin, its targets the peaks of the ``horizon_h`` hours after it, both divided
by its series' scale (the series' mean hourly peak over what the fit reads, at least 1 GPU),
so one model serves tenants of any size. The scale is the series', not the window's: a
window's own mean (RevIN's instance normalisation, stoker's first choice) is near zero
where a tenant was idle for a week, and the jump that ends such a week then reads as a
target of hundreds of scales; on the generated v2026 series 3 % of the samples were such
jumps and carried 99.8 % of the squared error, so the least-squares fit followed them and
forecast the largest, steadiest tenant at four times its level. Calendar features (hour of
day, weekday, holiday) are those of each target hour's first minute.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from stoker.forecast.base import MINUTES_PER_HOUR, ForecastError, SeriesKey, check_peaks
from stoker.forecast.series import Calendar, check_history, hourly_peaks

# a series' peak is at most this many of its scales: a mostly idle series with one burst
# would otherwise still carry most of the fit's squared error
PEAK_SCALES = 10.0
MIN_STD = 1e-3  # GPUs: keeps every Normal proper when a series never moved


@dataclass(frozen=True, slots=True)
class Vocab:
    """Integer ids for the tenants, GPU pools and clusters seen at fit time (0 = unseen)."""

    tenants: dict[str, int]
    gpu_pools: dict[str, int]
    clusters: dict[str, int]

    @classmethod
    def of(cls, keys: list[SeriesKey]) -> Vocab:
        def ids(names: set[str]) -> dict[str, int]:
            return {name: i + 1 for i, name in enumerate(sorted(names))}

        return cls(
            tenants=ids({k.tenant for k in keys}),
            gpu_pools=ids({k.gpu_pool for k in keys}),
            clusters=ids({k.cluster for k in keys}),
        )

    def ids(self, key: SeriesKey) -> tuple[int, int, int]:
        """(tenant, GPU pool, cluster) ids of a key; 0 where the fit never saw the name."""
        return (
            self.tenants.get(key.tenant, 0),
            self.gpu_pools.get(key.gpu_pool, 0),
            self.clusters.get(key.cluster, 0),
        )


@dataclass(frozen=True, slots=True)
class Samples:
    """Normalised windows: ``x`` (n, lookback), ``y`` (n, horizon) and their features."""

    x: np.ndarray
    y: np.ndarray
    scale: np.ndarray  # (n,) GPUs
    hour: np.ndarray  # (n, horizon) int
    weekday: np.ndarray  # (n, horizon) int
    holiday: np.ndarray  # (n, horizon) int
    ids: np.ndarray  # (n, 3) int: tenant, GPU pool, cluster

    def __len__(self) -> int:
        return len(self.x)


def check_now(now_min: int, horizon_h: int | None = None) -> None:
    """ForecastError unless ``now_min`` (and ``horizon_h``, if given) are sane."""
    if int(now_min) != now_min or now_min < 0:
        raise ForecastError(f"now_min must be a whole minute >= 0, got {now_min}")
    if horizon_h is not None and (int(horizon_h) != horizon_h or horizon_h < 1):
        raise ForecastError(f"horizon_h must be a whole number >= 1, got {horizon_h}")


def _calendar_of(
    calendar: Calendar, origins: np.ndarray, horizon_h: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    minutes = origins[:, None] + MINUTES_PER_HOUR * np.arange(horizon_h)[None, :]
    return calendar.features(minutes)


def series_scales(
    histories: Mapping[SeriesKey, np.ndarray], n_hours: int
) -> dict[SeriesKey, float]:
    """Each series' scale: the mean of its recorded hourly peaks in the last ``n_hours``
    (the minutes before its record are not counted), at least 1 GPU."""
    out = {}
    for key, history in histories.items():
        recorded = np.asarray(history)[-n_hours * MINUTES_PER_HOUR :]
        peaks = hourly_peaks(recorded)
        out[key] = (
            max(1.0, float(peaks.mean()), float(peaks.max()) / PEAK_SCALES) if len(peaks) else 1.0
        )
    return out


def training_samples(
    histories: dict[SeriesKey, np.ndarray],
    now_min: int,
    *,
    calendar: Calendar,
    vocab: Vocab,
    lookback_h: int,
    horizon_h: int,
    train_h: int,
    scales: Mapping[SeriesKey, float],
    max_samples: int | None = None,
) -> Samples:
    """Every hourly origin of the last ``train_h`` hours before ``now_min``, for each series,
    in units of its ``scales`` entry (:func:`series_scales`).

    Origins are ``now_min - 60 j`` (so windows line up with the hours the caller will query
    at the refit minute); an origin whose targets reach before a series' record is skipped.
    With ``max_samples``, origins are thinned to every ``s``-th hour (the newest kept), ``s``
    the smallest stride that keeps the count within it, so many series cost no more to fit
    than a few. Series are taken in sorted key order, so samples do not depend on dict order.
    """
    check_now(now_min, horizon_h)
    n_blocks = train_h + lookback_h + horizon_h - 1
    stride = 1
    if max_samples is not None:
        if max_samples < 1:
            raise ForecastError(f"max_samples must be >= 1, got {max_samples}")
        stride = max(1, -(-len(histories) * train_h // max_samples))
    newest_first = np.arange(train_h)[::-1]
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    for key in sorted(histories, key=lambda k: (k.tenant, k.gpu_pool, k.cluster)):
        history = check_history(histories[key], f"histories[{key}]")
        peaks = hourly_peaks(history, n_blocks)
        windows = sliding_window_view(peaks, lookback_h + horizon_h)  # (train_h, L+H)
        # origin of window t: its targets start at block t + lookback_h
        origins = now_min - MINUTES_PER_HOUR * (n_blocks - lookback_h - np.arange(len(windows)))
        keep = (origins >= now_min - len(history)) & (newest_first % stride == 0)
        if not keep.any():
            continue
        n = int(keep.sum())
        ids = np.tile(np.array(vocab.ids(key), dtype=np.int64), (n, 1))
        parts.append((windows[keep], origins[keep], ids, np.full(n, scales[key])))
    if not parts:
        empty = np.zeros((0, horizon_h), dtype=np.int64)
        return Samples(
            x=np.zeros((0, lookback_h)),
            y=np.zeros((0, horizon_h)),
            scale=np.zeros(0),
            hour=empty,
            weekday=empty,
            holiday=empty,
            ids=np.zeros((0, 3), dtype=np.int64),
        )
    windows = np.concatenate([p[0] for p in parts])
    origins = np.concatenate([p[1] for p in parts])
    ids = np.concatenate([p[2] for p in parts])
    scale = np.concatenate([p[3] for p in parts])
    x, y = windows[:, :lookback_h], windows[:, lookback_h:]
    hour, weekday, holiday = _calendar_of(calendar, origins, horizon_h)
    return Samples(x / scale[:, None], y / scale[:, None], scale, hour, weekday, holiday, ids)


def query_samples(
    keys: Sequence[SeriesKey],
    peaks: np.ndarray,
    now_min: int,
    *,
    calendar: Calendar,
    vocab: Vocab,
    lookback_h: int,
    horizon_h: int,
    scales: Mapping[SeriesKey, float],
) -> Samples:
    """The samples a query at ``now_min`` feeds the model, one per key (targets are zeros).

    ``peaks``: one row per key, the ``lookback_h`` hourly peaks ending at ``now_min`` (see
    :meth:`~stoker.forecast.base.Forecaster.predict_peaks`). A key has its ``scales`` entry
    (from the fit); one the fit never saw, its input window's mean (at least 1 GPU).
    """
    check_now(now_min, horizon_h)
    x = check_peaks(keys, peaks, lookback_h)
    own = np.maximum(1.0, x.mean(axis=1))
    scale = np.array([scales.get(k, own[i]) for i, k in enumerate(keys)], dtype=float)
    # every key's targets are the same hours: their calendar is worked out once
    once = _calendar_of(calendar, np.array([now_min]), horizon_h)
    hour, weekday, holiday = (np.repeat(f, len(keys), axis=0) for f in once)
    ids = np.array([vocab.ids(k) for k in keys], dtype=np.int64).reshape(len(keys), 3)
    return Samples(
        x / scale[:, None], np.zeros((len(keys), horizon_h)), scale, hour, weekday, holiday, ids
    )
