"""The HP demand meter: per-minute peaks per (GPU pool, tenant), every minute once."""

from __future__ import annotations

from stoker.core.demand import HPDemandMeter


def test_peaks_per_minute_and_levels_carried_over_quiet_minutes() -> None:
    m = HPDemandMeter()
    m.change("a100", "t", 2.0, 60.0)  # minute 1: 2 GPUs
    m.change("a100", "t", 0.5, 70.0)  # 2.5
    m.change("a100", "t", -2.5, 100.0)  # back to 0 within minute 1: its peak is 2.5
    m.change("a100", "u", 1.0, 125.0)  # minute 2 on: u holds 1 GPU until minute 4
    assert m.take(150.0) == [("a100", "t", 1, 2.5)]  # minute 2 is still open
    m.change("a100", "u", -1.0, 250.0)
    assert m.take(400.0) == [("a100", "u", 2, 1.0), ("a100", "u", 3, 1.0), ("a100", "u", 4, 1.0)]
    assert m.take(1000.0) == []  # every minute once, and none without demand
    assert m.level("a100", "u") == 0.0


def test_a_job_that_comes_and_goes_within_a_minute_still_counts() -> None:
    m = HPDemandMeter()
    m.change("h100", "t", 4.0, 0.0)
    m.change("h100", "t", 0.25, 30.0)
    m.change("h100", "t", -0.25, 31.0)
    assert m.take(60.0) == [("h100", "t", 0, 4.25)]
    assert m.take(180.0) == [("h100", "t", 1, 4.0), ("h100", "t", 2, 4.0)]
    assert m.level("h100", "t") == 4.0
