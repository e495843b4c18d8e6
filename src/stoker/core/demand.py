"""The HP demand meter: HP GPUs asked (queued + running) per tenant and GPU pool, one value
per minute, kept by the core from its own events.

The driver reads a tenant's history from here to fit and query its forecaster and hands the
answer back as ``ForecastUpdated``; the forecaster itself stays in :mod:`stoker.forecast`.
Queued demand counts as well as running (what was asked, not what was granted), so a
forecast sees demand the cluster could not serve.
"""

from __future__ import annotations

import numpy as np

_GROW = 1440  # minutes added at a time


class DemandMeter:
    """Per (tenant, GPU pool): the current HP GPUs and one column per recorded minute.

    Minute ``m`` of the history is absolute (minute 0 is time 0): a driver that starts late
    (a trace window) fills the earlier minutes with :meth:`prefill`.
    """

    def __init__(self) -> None:
        self.keys: list[tuple[str, str]] = []
        self.row: dict[tuple[str, str], int] = {}
        self.current = np.zeros(0)
        self.data = np.zeros((0, _GROW))
        self.minutes: int | None = None  # minutes recorded (None: not started)
        self.origin = 0  # the first minute the history holds

    def _row(self, key: tuple[str, str]) -> int:
        i = self.row.get(key)
        if i is None:
            i = self.row[key] = len(self.keys)
            self.keys.append(key)
            self.current = np.append(self.current, 0.0)
            self.data = np.vstack([self.data, np.zeros((1, self.data.shape[1]))])
        return i

    def prefill(self, series: dict[tuple[str, str], np.ndarray], end_min: int) -> None:
        """History before the meter runs: each series holds the minutes up to ``end_min``
        (exclusive), starting at minute 0."""
        if self.minutes is not None:
            raise ValueError("prefill: the meter has already recorded")
        self.origin = 0
        self._grow(end_min)
        for key, values in series.items():
            i = self._row(key)
            self.data[i, : min(end_min, len(values))] = values[:end_min]
        self.minutes = end_min

    def add(self, tenant: str, pool: str, gpus: float) -> None:
        """HP demand of ``tenant`` in ``pool`` changes by ``gpus`` from now on."""
        i = self._row((tenant, pool))
        self.current[i] += gpus

    def record_until(self, now: float) -> None:
        """Write the current demand into every minute up to ``now``'s (exclusive)."""
        minute = int(now // 60)
        if self.minutes is None:
            self.origin = self.minutes = minute
            return
        if minute <= self.minutes:
            return
        self._grow(minute)
        lo, hi = self.minutes - self.origin, minute - self.origin
        self.data[:, lo:hi] = np.maximum(self.current, 0.0)[:, None]
        self.minutes = minute

    def _grow(self, minute: int) -> None:
        need = minute - self.origin
        if need > self.data.shape[1]:
            grown = np.zeros((self.data.shape[0], max(need, 2 * self.data.shape[1])))
            grown[:, : self.data.shape[1]] = self.data
            self.data = grown

    def history(self, key: tuple[str, str]) -> np.ndarray:
        """One (tenant, pool)'s recorded minutes (from ``origin``)."""
        i = self.row.get(key)
        if i is None or self.minutes is None:
            return np.zeros(0)
        return self.data[i, : self.minutes - self.origin]
