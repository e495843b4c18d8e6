"""The HP demand meter: HP GPUs running per tenant and GPU pool, one value
per minute, kept by the core from its own events.

The driver reads a tenant's history from here to fit and query its forecaster and hands the
answer back as ``ForecastUpdated``; the forecaster itself stays in :mod:`stoker.forecast`.
The scheduler adds a job's GPUs when it is placed and takes them off when it is released,
as the authors' recorder does (queued HP demand is not seen). The history is kept as change points
(the minute a value starts) and laid out per minute only when read, so a meter no one
reads costs nothing per minute.
"""

from __future__ import annotations

import numpy as np


class DemandMeter:
    """Per (tenant, GPU pool): the current HP GPUs and the per-minute history.

    Minute ``m`` is absolute (minute 0 is time 0); the history starts at ``origin`` (the
    first minute the meter saw, or 0 when the driver filled earlier minutes with
    :meth:`prefill`) and ends at ``minutes`` (exclusive).
    """

    def __init__(self) -> None:
        self.keys: list[tuple[str, str]] = []
        self.current: dict[tuple[str, str], float] = {}
        # per key: the minutes a new value starts at, and the values
        self._at: dict[tuple[str, str], list[int]] = {}
        self._value: dict[tuple[str, str], list[float]] = {}
        self._prefilled: dict[tuple[str, str], np.ndarray] = {}
        self.minutes: int | None = None
        self.origin = 0

    def _key(self, key: tuple[str, str]) -> None:
        if key not in self.current:
            self.keys.append(key)
            self.current[key] = 0.0
            start = self.minutes if self.minutes is not None else self.origin
            self._at[key] = [start]
            self._value[key] = [0.0]

    def prefill(self, series: dict[tuple[str, str], np.ndarray], end_min: int) -> None:
        """History before the meter runs: each series holds the minutes from 0 up to
        ``end_min`` (exclusive)."""
        if self.minutes is not None:
            raise ValueError("prefill: the meter has already recorded")
        self.origin = 0
        for key in sorted(series, key=lambda k: (k[1], k[0])):
            values = np.zeros(end_min)
            given = np.asarray(series[key], float)[:end_min]
            values[: len(given)] = given
            self._prefilled[key] = values
            self._key(key)
            self._at[key] = [end_min]
            self._value[key] = [0.0]
        self.minutes = end_min

    def add(self, tenant: str, pool: str, gpus: float) -> None:
        """HP demand of ``tenant`` in ``pool`` changes by ``gpus`` from this minute on."""
        key = (tenant, pool)
        self._key(key)
        self.current[key] += gpus
        minute = self.minutes if self.minutes is not None else self.origin
        at, value = self._at[key], self._value[key]
        if at[-1] == minute:
            value[-1] = max(self.current[key], 0.0)
        else:
            at.append(minute)
            value.append(max(self.current[key], 0.0))

    def record_until(self, now: float) -> None:
        """Every minute before ``now``'s is recorded (the values hold until they change)."""
        minute = int(now // 60)
        if self.minutes is None:
            self.origin = self.minutes = minute
            for key in self.keys:
                self._at[key][0] = minute
        elif minute > self.minutes:
            self.minutes = minute

    def history(self, key: tuple[str, str]) -> np.ndarray:
        """One (tenant, pool)'s recorded minutes, from ``origin`` to ``minutes``."""
        if key not in self.current or self.minutes is None:
            return np.zeros(0)
        end = self.minutes
        at = [*self._at[key], end]
        parts = [self._prefilled[key]] if key in self._prefilled else []
        if at[0] > self.origin and not parts:
            parts.append(np.zeros(at[0] - self.origin))
        lengths = np.diff(np.asarray(at))
        parts.append(np.repeat(np.asarray(self._value[key]), np.maximum(lengths, 0)))
        return np.concatenate(parts) if len(parts) > 1 else parts[0]
