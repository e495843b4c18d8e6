"""The HP demand meter: HP GPUs running per tenant and GPU pool, one value
per minute, kept by the core from its own events.

The driver reads a tenant's history from here to fit and query its forecaster and hands the
answer back as ``ForecastUpdated``; the forecaster itself stays in :mod:`stoker.forecast`.
The scheduler adds a job's GPUs when it is placed and takes them off when it is released,
as the authors' recorder does (queued HP demand is not seen). The history is kept as change points
(the minute a value starts) and laid out per minute only when read, so a meter no one
reads costs nothing per minute. The forecast query (every 5 minutes) reads only the hourly
peaks of the last week or so: :meth:`DemandMeter.peaks` keeps a ring of the last minutes
with each hour's running maxima as the clock moves, so a query reads two numbers per hour
and series instead of laying out and scanning a week of minutes.
"""

from __future__ import annotations

import bisect

import numpy as np

MINUTES_PER_HOUR = 60


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
                self._ring.add([(key, self._ring_rows(key), 0.0)], self.minutes)

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

    def add(self, tenant: str, gpu_pool: str, gpus: float) -> None:
        """HP demand of ``tenant`` in ``gpu_pool`` changes by ``gpus`` from this minute on."""
        key = (tenant, gpu_pool)
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
        """One (tenant, GPU pool)'s recorded minutes, from ``origin`` to ``minutes``; with
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

    def peaks(self, hours: int) -> tuple[list[tuple[str, str]], np.ndarray, int]:
        """The peaks of the last ``hours`` 60-minute blocks ending at ``minutes`` of every
        series (oldest first; blocks before the record are zero), what
        :func:`~stoker.forecast.series.hourly_peaks_many` makes of the recorded minutes:
        the keys, sorted by (GPU pool, tenant), one row per key, and how many minutes are
        recorded (at most ``hours`` hours).

        The first call starts a ring of that many hours (and one more), kept up as the
        clock moves, so later calls cost two reads per block (a new array each time).
        """
        if self.minutes is None:
            return [], np.zeros((0, hours)), 0
        if self._ring is None or self._ring.hours < hours:
            self._ring = _Ring(hours)
            self._ring.add(
                [(key, self._ring_rows(key), self.current[key]) for key in self.keys],
                self.minutes,
            )
        have = min(hours * MINUTES_PER_HOUR, self.minutes - self.origin)
        return list(self._ring.keys), self._ring.peaks(self.minutes, hours), have

    def _ring_rows(self, key: tuple[str, str]) -> np.ndarray:
        assert self._ring is not None and self.minutes is not None
        start = max(self.origin, self.minutes - self._ring.size)
        return self._span(key, start, self.minutes)


class _Ring:
    """The last ``size`` minutes of many series (minute ``m`` at ``m % size``; ``size`` a
    whole number of hours, so each clock hour is one contiguous slice), and per minute the
    maximum of its clock hour up to it (``upto``) and from it to the hour's end
    (``onward``). Any 60-minute block ``[i, i + 60)`` spans at most two clock hours, so its
    peak is ``max(onward[i], upto[i + 59])`` (van Herk / Gil-Werman): a query of ``H``
    hourly peaks reads ``2 H`` numbers per series; each minute the clock passes extends its
    clock hour's ``upto`` by one column, and each clock hour's ``onward`` is written once,
    when the hour is whole. Rows in (GPU pool, tenant) order."""

    def __init__(self, hours: int) -> None:
        if hours < 1:
            raise ValueError(f"hours must be >= 1, got {hours}")
        self.hours = hours
        # one hour more than read: every clock hour a block touches is whole in the ring
        self.size = (hours + 1) * MINUTES_PER_HOUR
        self.keys: list[tuple[str, str]] = []
        self.row: dict[tuple[str, str], int] = {}
        self.data = np.zeros((0, self.size))
        self.upto = np.zeros((0, self.size))
        self.onward = np.zeros((0, self.size))
        self.values = np.zeros(0)  # each series' value now (at least 0), kept by the meter

    def add(self, series: list[tuple[tuple[str, str], np.ndarray, float]], end: int) -> None:
        """New series: each key, its minutes ``[end - len(minutes), end)`` and its value
        now."""
        # rare (a tenant's first HP job in a GPU pool): the rows stay in order at a copy's cost
        for key, minutes, value in series:
            at = bisect.bisect_left([(p, t) for t, p in self.keys], (key[1], key[0]))
            self.keys.insert(at, key)
            self.data = np.insert(self.data, at, 0.0, axis=0)
            self.values = np.insert(self.values, at, max(value, 0.0))
            self.data[at, np.arange(end - len(minutes), end) % self.size] = minutes
        self.row = {k: i for i, k in enumerate(self.keys)}
        self.upto = np.zeros_like(self.data)
        self.onward = np.zeros_like(self.data)
        self._maxima(end - self.size, end)

    def advance(self, start: int, end: int) -> None:
        """Minutes ``[start, end)`` hold each series' value now."""
        lo = max(start, end - self.size)
        if end - lo == 1:
            self.data[:, lo % self.size] = self.values
        else:
            self.data[:, np.arange(lo, end) % self.size] = self.values[:, None]
        self._maxima(lo, end)

    def _maxima(self, lo: int, end: int) -> None:
        """Bring the running maxima up to date after minutes ``[lo, end)`` were written.

        ``upto`` goes on over the new minutes from the one before ``lo`` when it is in the
        same clock hour (up to date: every minute before ``lo`` was written and brought up
        to date before), else from the hour's start; ``onward`` is written once a clock hour
        is whole, as it is not read before (the minutes of the newest hour from ``end`` on
        are stale until written: its ``upto`` before ``end`` does not read them)."""
        h = MINUTES_PER_HOUR
        first = max(lo // h, -(-(end - self.size) // h))  # the oldest hour whole in the ring
        for hour in range(first, (end - 1) // h + 1):
            s = hour * h % self.size
            i = max(lo, hour * h) % self.size
            stop = s + min(h, end - hour * h)
            upto = self.upto
            if i == s:
                np.maximum.accumulate(self.data[:, s:stop], axis=1, out=upto[:, s:stop])
            elif stop - i == 1:  # one minute passed (the common case)
                np.maximum(upto[:, i - 1], self.data[:, i], out=upto[:, i])
            else:
                np.maximum.accumulate(self.data[:, i:stop], axis=1, out=upto[:, i:stop])
                np.maximum(upto[:, i:stop], upto[:, i - 1 : i], out=upto[:, i:stop])
            if end >= (hour + 1) * h:
                block = self.data[:, s : s + h]
                self.onward[:, s : s + h] = np.maximum.accumulate(block[:, ::-1], axis=1)[:, ::-1]

    def peaks(self, end: int, hours: int) -> np.ndarray:
        """The peaks of the ``hours`` blocks ``[end - 60 k, end - 60 (k - 1))``, oldest
        first (``hours <= self.hours``)."""
        starts = end - MINUTES_PER_HOUR * np.arange(hours, 0, -1)
        return np.maximum(
            self.onward[:, starts % self.size],
            self.upto[:, (starts + MINUTES_PER_HOUR - 1) % self.size],
        )
