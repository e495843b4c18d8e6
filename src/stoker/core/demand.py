"""The HP demand meter: HP GPUs running per tenant and GPU pool, one value
per minute, kept by the core from its own events.

The driver reads a tenant's history from here to fit and query its forecaster and hands the
answer back as ``ForecastUpdated``; the forecaster itself stays in :mod:`stoker.forecast`.
The scheduler adds a job's GPUs when it is placed and takes them off when it is released,
as the authors' recorder does (queued HP demand is not seen). The history is kept as change points
(the minute a value starts) and laid out per minute only when read, so a meter no one
reads costs nothing per minute. A reader that asks for the recent minutes again and again
(the forecast query, every 5 minutes) gets them from a ring of the last minutes kept as the
clock moves (:meth:`DemandMeter.recent`), not laid out again from the change points.
"""

from __future__ import annotations

import bisect

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
        self._ring: _Ring | None = None

    def _key(self, key: tuple[str, str]) -> None:
        if key not in self.current:
            self.keys.append(key)
            self.current[key] = 0.0
            start = self.minutes if self.minutes is not None else self.origin
            self._at[key] = [start]
            self._value[key] = [0.0]
            if self._ring is not None and self.minutes is not None:
                self._ring.add(key, self._ring_rows(key), self.minutes, 0.0)

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
        if self._ring is not None:
            self._ring.values[self._ring.row[key]] = max(self.current[key], 0.0)
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
            if self._ring is not None:
                # the minutes passed since hold the values as they are now (they change
                # only at events, and every event records first)
                self._ring.advance(self.minutes, minute)
            self.minutes = minute

    def history(self, key: tuple[str, str], last: int | None = None) -> np.ndarray:
        """One (tenant, pool)'s recorded minutes, from ``origin`` to ``minutes``; with
        ``last``, only the last ``last`` of them (a forecaster's fit reads no more)."""
        if key not in self.current or self.minutes is None:
            return np.zeros(0)
        end = self.minutes
        start = self.origin if last is None else max(self.origin, end - last)
        return self._span(key, start, end)

    def _span(self, key: tuple[str, str], start: int, end: int) -> np.ndarray:
        """Minutes ``[start, end)`` of one series (``origin <= start <= end <= minutes``)."""
        at, value = self._at[key], self._value[key]
        parts = []
        prefilled = self._prefilled.get(key)
        if start < at[0]:
            stop = min(at[0], end)
            parts.append(prefilled[start:stop] if prefilled is not None else np.zeros(stop - start))
        # the change points from the one in force at ``start`` on
        first = max(0, bisect.bisect_right(at, start) - 1)
        bounds = np.asarray([max(start, a) for a in at[first:]] + [end])
        lengths = np.maximum(np.diff(np.minimum(bounds, end)), 0)
        parts.append(np.repeat(np.asarray(value[first:]), lengths))
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def recent(self, minutes: int) -> tuple[list[tuple[str, str]], np.ndarray]:
        """The last ``minutes`` recorded minutes of every series (fewer while the record is
        shorter): the keys, sorted by (pool, tenant), and one row per key.

        The first call starts a ring of that many minutes, kept up as the clock moves, so
        later calls cost no more than a view of it (the array is read-only and changes
        with the meter: copy it to keep it).
        """
        if self.minutes is None:
            return [], np.zeros((0, 0))
        if self._ring is None or self._ring.size < minutes:
            self._ring = _Ring(minutes)
            for key in self.keys:
                self._ring.add(key, self._ring_rows(key), self.minutes, self.current[key])
        have = min(minutes, self.minutes - self.origin)
        return list(self._ring.keys), self._ring.last(self.minutes, have)

    def _ring_rows(self, key: tuple[str, str]) -> np.ndarray:
        assert self._ring is not None and self.minutes is not None
        start = max(self.origin, self.minutes - self._ring.size)
        return self._span(key, start, self.minutes)


class _Ring:
    """The last ``size`` minutes of many series, each minute ``m`` written twice (at
    ``m % size`` and ``m % size + size``), so the last ``size`` minutes are always one
    contiguous slice: a read is a view, never a copy. Rows in (pool, tenant) order."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"minutes must be >= 1, got {size}")
        self.size = size
        self.keys: list[tuple[str, str]] = []
        self.row: dict[tuple[str, str], int] = {}
        self.data = np.zeros((0, 2 * size))
        self.values = np.zeros(0)  # each series' value now (at least 0), kept by the meter

    def add(self, key: tuple[str, str], minutes: np.ndarray, end: int, value: float) -> None:
        """A new series whose minutes ``[end - len(minutes), end)`` are ``minutes`` and
        whose value now is ``value``."""
        # rare (a tenant's first HP job in a pool): the rows stay in order at a copy's cost
        at = bisect.bisect_left([(p, t) for t, p in self.keys], (key[1], key[0]))
        self.keys.insert(at, key)
        self.row = {k: i for i, k in enumerate(self.keys)}
        self.data = np.insert(self.data, at, 0.0, axis=0)
        self.values = np.insert(self.values, at, max(value, 0.0))
        slots = np.arange(end - len(minutes), end) % self.size
        self.data[at, slots] = minutes
        self.data[at, slots + self.size] = minutes

    def advance(self, start: int, end: int) -> None:
        """Minutes ``[start, end)`` hold each series' value now."""
        values = self.values
        if end - start == 1:
            slot = start % self.size
            self.data[:, slot] = values
            self.data[:, slot + self.size] = values
            return
        slots = np.arange(max(start, end - self.size), end) % self.size
        self.data[:, slots] = values[:, None]
        self.data[:, slots + self.size] = values[:, None]

    def last(self, end: int, n: int) -> np.ndarray:
        """A read-only view of minutes ``[end - n, end)`` (``n <= size``), one row per key."""
        stop = end % self.size + self.size
        view = self.data[:, stop - n : stop]
        view.flags.writeable = False
        return view
