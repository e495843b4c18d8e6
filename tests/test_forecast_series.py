"""Demand series, hourly peaks and the calendar, on hand-made jobs and dates."""

from __future__ import annotations

from datetime import UTC, date, datetime

import numpy as np
import pytest

from stoker.forecast import Calendar, ForecastError, SeriesKey, demand_series, hourly_peaks
from stoker.forecast.series import us_federal_holidays
from stoker.traces.base import TraceJob


def job(
    tenant: str,
    submit: float,
    duration: float,
    gpus: float = 1,
    workers: int = 1,
    gpu_pool: str = "A100",
    cls: str = "hp",
) -> TraceJob:
    return TraceJob(
        f"{tenant}-{submit}-{duration}", tenant, gpu_pool, gpus, workers, submit, duration, cls
    )  # type: ignore[arg-type]


def test_demand_counts_every_minute_a_job_touches() -> None:
    jobs = [
        job("t1", 30, 90, gpus=1, workers=2),  # [30 s, 120 s): minutes 0 and 1, 2 GPUs
        job("t1", 60, 0),  # zero length: still its own minute (1)
        job("t1", 180, 120, gpus=0.5),  # [180, 300): minutes 3 and 4
        job("t1", 0, 1000, gpus=8, cls="spot"),  # other class: not counted
        job("t2", 120, 60, gpus=4, gpu_pool="H100"),  # minute 2 exactly
    ]
    series = demand_series(jobs, end_min=6)
    assert list(series) == [SeriesKey("t1", "A100"), SeriesKey("t2", "H100")]
    np.testing.assert_allclose(series[SeriesKey("t1", "A100")], [2, 3, 0, 0.5, 0.5, 0])
    np.testing.assert_allclose(series[SeriesKey("t2", "H100")], [0, 0, 4, 0, 0, 0])


def test_demand_default_end_and_truncation() -> None:
    jobs = [job("t", 0, 600), job("t", 120, 30)]
    # default end: one past the last submit minute (2), long jobs are cut there
    np.testing.assert_allclose(demand_series(jobs)[SeriesKey("t", "A100")], [1, 1, 2])
    spot = demand_series(jobs, job_class="spot")
    assert spot == {}
    keyed = demand_series(jobs, cluster="c1")
    assert list(keyed) == [SeriesKey("t", "A100", "c1")]


def test_demand_matches_a_plain_loop() -> None:
    rng = np.random.default_rng(3)
    jobs = [
        job(
            f"t{rng.integers(3)}",
            float(rng.uniform(0, 5000)),
            float(rng.exponential(900)),
            gpus=float(rng.choice([0.5, 1, 2])),
            workers=int(rng.integers(1, 3)),
        )
        for _ in range(200)
    ]
    series = demand_series(jobs, end_min=100)
    for key, values in series.items():
        expect = np.zeros(100)
        for j in jobs:
            if j.tenant != key.tenant:
                continue
            first = int(np.floor(j.submit_time / 60))
            last = max(first + 1, int(np.ceil((j.submit_time + j.duration) / 60)))
            expect[first : min(last, 100)] += j.gpu_request * j.worker_num
        np.testing.assert_allclose(values, expect, atol=1e-9)


def test_demand_rejects_bad_jobs() -> None:
    with pytest.raises(ForecastError, match="submit_time"):
        demand_series([job("t", -1, 10)])
    with pytest.raises(ForecastError, match="duration"):
        demand_series([job("t", 1, float("nan"))])
    with pytest.raises(ForecastError, match="gpu_request"):
        demand_series([job("t", 1, 10, gpus=-1)])


def test_hourly_peaks_end_at_the_history_end() -> None:
    history = np.arange(150, dtype=float)  # 2 whole hours plus 30 minutes in front
    np.testing.assert_allclose(hourly_peaks(history), [89, 149])
    np.testing.assert_allclose(hourly_peaks(history, 4), [0, 29, 89, 149])
    assert hourly_peaks(np.zeros(0), 2).tolist() == [0, 0]
    assert hourly_peaks(history, 0).shape == (0,)


def test_hourly_peaks_rejects_bad_history() -> None:
    with pytest.raises(ForecastError, match="1-D"):
        hourly_peaks(np.zeros((2, 60)))
    with pytest.raises(ForecastError, match="finite"):
        hourly_peaks(np.array([1.0, np.nan]))
    with pytest.raises(ForecastError, match=">= 0"):
        hourly_peaks(np.array([-1.0]))
    with pytest.raises(ForecastError, match="n_hours"):
        hourly_peaks(np.zeros(60), -1)


def test_calendar_features_on_the_philly_epoch() -> None:
    cal = Calendar.from_iso("2017-09-04T00:00:00+00:00", holidays="us")  # Monday, Labor Day
    minutes = [0, 1440 + 61, 6 * 1440 + 23 * 60 + 59, 80 * 1440 + 12 * 60]
    hour, weekday, holiday = cal.features(minutes)
    assert hour.tolist() == [0, 1, 23, 12]
    assert weekday.tolist() == [0, 1, 6, 3]  # 2017-11-23: Thanksgiving, a Thursday
    assert holiday.tolist() == [1, 0, 0, 1]
    assert cal.workday(minutes).tolist() == [0, 1, 0, 0]
    assert Calendar.from_iso("2017-09-04T00:00:00+00:00").features([0])[2].tolist() == [0]


def test_chinas_calendar_holidays_and_swapped_workdays_in_the_trace_local_time() -> None:
    cal = Calendar.from_iso("2024-03-01T00:00:00+08:00", holidays="china")
    days = np.arange(0, 75 * 1440, 1440)  # 2024-03-01 .. 05-14, at midnight Beijing time
    hour, weekday, holiday = cal.features(days)
    assert set(hour.tolist()) == {0} and weekday[0] == 4  # 03-01 is a Friday
    off = {int(d) + 1 for d in np.flatnonzero(holiday)}  # days of March 2024 and on
    # Qingming 04-04..06 and Labour Day 05-01..05 (the State Council's announcement)
    assert off == {35, 36, 37, 62, 63, 64, 65, 66}
    work = cal.workday(days)
    assert work[37] == 1 and work[58] == 1 and work[71] == 1  # Sun 04-07, Sun 04-28, Sat 05-11
    assert work[34] == 0 and work[9] == 0  # Thu 04-04 (Qingming), Sun 03-10
    with pytest.raises(ForecastError, match="holidays must be"):
        Calendar.from_iso("2024-03-01T00:00:00+08:00", holidays="mars")


def test_calendar_with_an_offset_epoch() -> None:
    cal = Calendar(
        epoch=datetime(2024, 1, 7, 22, 30, tzinfo=UTC), holidays=frozenset({date(2024, 1, 15)})
    )  # Sunday 22:30
    hour, weekday, holiday = cal.features([0, 90, 24 * 60 * 8])
    assert hour.tolist() == [22, 0, 22]
    assert weekday.tolist() == [6, 0, 0]
    assert holiday.tolist() == [0, 0, 1]  # 2024-01-15: Martin Luther King Jr. Day
    with pytest.raises(ForecastError, match="timezone"):
        Calendar(epoch=datetime(2024, 1, 1))
    with pytest.raises(ForecastError, match="ISO"):
        Calendar.from_iso("yesterday")


def test_us_federal_holidays_2017() -> None:
    days = us_federal_holidays([2017])
    expect = {
        date(2017, 1, 1),  # New Year on a Sunday...
        date(2017, 1, 2),  # ...observed Monday
        date(2017, 1, 16),
        date(2017, 2, 20),
        date(2017, 5, 29),
        date(2017, 7, 4),
        date(2017, 9, 4),
        date(2017, 10, 9),
        date(2017, 11, 10),  # Veterans: Sat -> observed Fri
        date(2017, 11, 11),
        date(2017, 11, 23),
        date(2017, 12, 25),
    }
    assert days == expect
