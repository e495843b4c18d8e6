"""The broker's HP demand forecaster: fitted on the demand history in the store, queried on
a timer, its answers handed to the core as ``ForecastUpdated`` events.

Fitting and querying run in worker threads (``asyncio.to_thread``), never on the scheduling
loop; this class only reads the store and the forecaster, so the loop goes on meanwhile.
The store keeps minutes since the Unix epoch; the forecaster sees minutes since its
calendar's epoch (2024-01-01, a Monday, UTC), so hour-of-day and weekday features are the
wall clock's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stoker.broker.config import ForecastConfig
from stoker.broker.store import Store
from stoker.forecast import Calendar, Forecaster, SeriesKey, make_forecaster
from stoker.forecast.series import us_federal_holidays

_CALENDAR = Calendar(holidays=us_federal_holidays(range(2023, 2101)))
_EPOCH_MIN = round(_CALENDAR.epoch.timestamp() / 60.0)  # the calendar's minute 0, Unix


def minute_of(now_s: float) -> int:
    """The whole minute (since the calendar's epoch) that ``now_s`` (Unix seconds) falls in."""
    return int(now_s // 60) - _EPOCH_MIN  # the core's demand meter counts minutes so too


def _end_of(now_s: float) -> int:
    """Where the history the forecaster sees ends: after the minute under way, which counts
    at its demand so far (a broker that just restarted has stored it, and nothing since)."""
    return minute_of(now_s) + 1


@dataclass(frozen=True, slots=True)
class TenantForecast:
    """One tenant's forecast hourly HP peaks in one GPU pool, per hour ahead."""

    tenant: str
    gpu_model: str
    mean: tuple[float, ...]
    var: tuple[float, ...]


class HPForecasts:
    """Refit and query one forecaster (by name, from :mod:`stoker.forecast`'s registry) on
    the store's HP demand history. Not thread-safe by itself: the broker runs
    one refit or query at a time, from one timer task."""

    def __init__(self, cfg: ForecastConfig, store: Store, forecaster: str) -> None:
        self.cfg = cfg
        self.store = store
        self.forecaster: Forecaster = make_forecaster(forecaster, calendar=_CALENDAR)
        self.fitted = False
        self._history_min = max(1, round(cfg.history_days * 1440))

    def histories(self, now_min: int) -> dict[SeriesKey, np.ndarray]:
        """Each (tenant, GPU pool)'s per-minute demand over the history window ending at
        ``now_min`` (exclusive); minutes with nothing recorded count as zero demand."""
        start = now_min - self._history_min
        out: dict[SeriesKey, np.ndarray] = {}
        for model, tenant, unix_min, gpus in self.store.hp_demand(start + _EPOCH_MIN):
            at = unix_min - _EPOCH_MIN
            if at >= now_min:
                continue
            key = SeriesKey(tenant=tenant, gpu_pool=model)
            series = out.setdefault(key, np.zeros(self._history_min))
            series[at - start] = max(series[at - start], gpus)
        return dict(sorted(out.items(), key=lambda kv: (kv[0].gpu_pool, kv[0].tenant)))

    def refit(self, now_s: float) -> int:
        """Refit on the stored history; returns the series fitted (0: nothing to fit on)."""
        now_min = _end_of(now_s)
        hist = self.histories(now_min)
        if not hist:
            return 0
        self.forecaster.fit(hist, now_min)
        self.fitted = True
        return len(hist)

    def query(self, now_s: float) -> list[TenantForecast]:
        """Every series' forecast for the next ``cfg.horizon_h`` hours (none before the first
        fit; a tenant first seen since the last fit is forecast with the unseen-tenant id)."""
        if not self.fitted:
            return []
        now_min = _end_of(now_s)
        hist = self.histories(now_min)
        if not hist:
            return []
        keys = tuple(hist)
        # one call per query time for every series (vectorised inside the forecaster)
        fc = self.forecaster.predict_many(
            keys, np.stack([hist[k] for k in keys]), now_min, self.cfg.horizon_h
        )
        return [
            TenantForecast(
                key.tenant,
                key.gpu_pool,
                tuple(float(m) for m in fc.mean[i]),
                tuple(float(s) ** 2 for s in fc.std[i]),
            )
            for i, key in enumerate(keys)
        ]
