"""The core's HP demand meter: its change-point record and the hourly peaks kept as the
clock passes read exactly what a plain per-minute record of the same changes holds (the
peaks: what the forecasters made of the laid-out minutes, computed from scratch)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stoker.core.demand import DemandMeter
from stoker.forecast.series import hourly_peaks_many

KEYS = [("t1", "A"), ("t2", "A"), ("t1", "B"), ("t0", "B")]


class Plain:
    """The reference: one list of values per key, one value per minute, written as the
    clock passes each minute (the value at the minute's end)."""

    def __init__(self, start: int, prefill: dict[tuple[str, str], list[float]]) -> None:
        self.current = dict.fromkeys(KEYS, 0.0)
        self.minutes = start
        self.rows = {k: list(prefill.get(k, [0.0] * start)) for k in KEYS}

    def add(self, key: tuple[str, str], gpus: float) -> None:
        self.current[key] += gpus

    def record_until(self, minute: int) -> None:
        while self.minutes < minute:
            for k in KEYS:
                self.rows[k].append(max(self.current[k], 0.0))
            self.minutes += 1


steps = st.lists(
    st.tuples(
        # seconds to the next event: mostly within minutes, sometimes hours on
        st.one_of(st.integers(0, 200), st.integers(3000, 20_000)),
        st.sampled_from(range(len(KEYS))),
        st.sampled_from([-2.0, -1.0, -0.5, 0.5, 1.0, 3.0]),
        st.booleans(),  # query the peaks now
    ),
    max_size=120,
)


@settings(max_examples=60, deadline=None)
@given(
    steps=steps,
    prefilled=st.booleans(),
    hours=st.integers(1, 3),
    last=st.integers(1, 60),
)
def test_history_and_peaks_follow_a_plain_record(
    steps: list[tuple[int, int, float, bool]], prefilled: bool, hours: int, last: int
) -> None:
    start = 30
    prefill = {KEYS[0]: [float(i % 4) for i in range(start)]} if prefilled else {}
    meter = DemandMeter()
    if prefilled:
        meter.prefill({k: np.asarray(v) for k, v in prefill.items()}, start)
    plain = Plain(start if prefilled else 0, prefill)
    now = start * 60.0
    seen: set[tuple[str, str]] = set(prefill)
    for dt, k, gpus, read in steps:
        now += dt
        meter.record_until(now)
        if not prefilled and meter.origin and plain.minutes == 0:
            # the first record fixes the origin; the plain record starts there too
            plain.minutes = meter.origin
            plain.rows = {key: [] for key in KEYS}
        plain.record_until(int(now // 60))
        key = KEYS[k]
        meter.add(*key, gpus)
        plain.add(key, gpus)
        seen.add(key)
        if read:
            keys, peaks, have = meter.peaks(hours)
            assert keys == sorted(seen, key=lambda x: (x[1], x[0]))
            assert have == min(60 * hours, meter.minutes - meter.origin)
            # from scratch: the recorded minutes laid out, then the forecasters' peaks
            laid = np.array([meter.history(key) for key in keys])
            want = hourly_peaks_many(laid, hours)
            assert peaks.shape == (len(keys), hours)
            assert peaks.tolist() == want.tolist()
            for i, key in enumerate(keys):
                assert list(laid[i]) == plain.rows[key][len(plain.rows[key]) - laid.shape[1] :]
    for key in seen:
        full = meter.history(key)
        want = plain.rows[key]
        # a key first seen after the record began is zero before it
        assert list(full) == want[len(want) - len(full) :]
        assert len(full) == meter.minutes - meter.origin
        assert list(meter.history(key, last)) == list(full[max(0, len(full) - last) :])


def test_peaks_reject_an_empty_window() -> None:
    meter = DemandMeter()
    meter.record_until(120.0)
    meter.add("t", "A", 1.0)
    with pytest.raises(ValueError, match="hours"):
        meter.peaks(0)
