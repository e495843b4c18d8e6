"""Demand series from jobs, hourly peaks, and the calendar features forecasters use.

All vectorised with numpy: per-minute demand comes from difference arrays (+g at a job's
first minute, -g after its last, then a cumulative sum), hourly peaks from a reshape.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime

import numpy as np

from stoker.forecast.base import (
    MINUTES_PER_DAY,
    MINUTES_PER_HOUR,
    ForecastError,
    SeriesKey,
    check_demand,
)
from stoker.traces.base import JobClass, TraceJob


def demand_series(
    jobs: Iterable[TraceJob],
    *,
    job_class: JobClass = "hp",
    end_min: int | None = None,
    cluster: str = "default",
) -> dict[SeriesKey, np.ndarray]:
    """Each tenant's GPU demand per GPU pool (``gpu_model``) per minute, for one job class.

    A job asks ``gpu_request * worker_num`` GPUs from its submit time for its duration and
    counts in every minute it touches: minutes ``floor(submit/60)`` up to
    ``ceil((submit+duration)/60)`` (exclusive), at least one minute. That is the demand the
    tenant puts on the GPU pool (whether or not it was served at once), and, counted in every
    minute touched, its per-minute peak, so short jobs are not lost between samples.

    The series run from minute 0 (the trace's start) to ``end_min`` (exclusive; default:
    one past the last submit minute of the class, so demand after the trace stops
    submitting is not made up of long jobs draining away). Keys come out sorted.
    """
    selected = [j for j in jobs if j.job_class == job_class]
    if not selected:
        return {}
    submit = np.fromiter((j.submit_time for j in selected), float, len(selected))
    duration = np.fromiter((j.duration for j in selected), float, len(selected))
    gpus = np.fromiter((j.gpu_request * j.worker_num for j in selected), float, len(selected))
    if not np.all(np.isfinite(submit)) or np.any(submit < 0):
        raise ForecastError("submit_time must be finite and >= 0")
    if not np.all(np.isfinite(duration)) or np.any(duration < 0):
        raise ForecastError("duration must be finite and >= 0")
    if not np.all(np.isfinite(gpus)) or np.any(gpus < 0):
        raise ForecastError("gpu_request * worker_num must be finite and >= 0")
    start = np.floor(submit / MINUTES_PER_HOUR).astype(np.int64)
    stop = np.maximum(start + 1, np.ceil((submit + duration) / MINUTES_PER_HOUR).astype(np.int64))
    if end_min is None:
        end_min = int(start.max()) + 1
    if end_min < 0:
        raise ForecastError(f"end_min must be >= 0, got {end_min}")
    names = sorted({(j.tenant, j.gpu_model) for j in selected})
    index = {name: i for i, name in enumerate(names)}
    row = np.fromiter((index[(j.tenant, j.gpu_model)] for j in selected), np.int64, len(selected))
    start = np.minimum(start, end_min)
    stop = np.minimum(stop, end_min)
    diff = np.zeros((len(names), end_min + 1))
    np.add.at(diff, (row, start), gpus)
    np.add.at(diff, (row, stop), -gpus)
    demand = np.cumsum(diff[:, :end_min], axis=1)
    # float sums of +g/-g leave tiny residues; demand is a sum of requests, never below 0
    demand = np.where(np.abs(demand) < 1e-9, 0.0, demand)
    return {
        SeriesKey(tenant=t, gpu_pool=p, cluster=cluster): demand[i]
        for i, (t, p) in enumerate(names)
    }


def hourly_peaks(history: np.ndarray, n_hours: int | None = None) -> np.ndarray:
    """Peaks of consecutive 60-minute blocks that end at the history's end.

    ``result[-1]`` is the peak of the last 60 minutes. With ``n_hours`` the result has
    exactly that many blocks; blocks before the record count as zero demand. Without it,
    every whole block the history holds is returned (a partial first block is dropped).
    """
    history = check_history(history)
    return hourly_peaks_many(history[None, :], n_hours)[0]


def hourly_peaks_many(histories: np.ndarray, n_hours: int | None = None) -> np.ndarray:
    """:func:`hourly_peaks` of each row of a 2-D array (rows: series, columns: minutes)."""
    if n_hours is None:
        n_hours = histories.shape[1] // MINUTES_PER_HOUR
    if n_hours < 0:
        raise ForecastError(f"n_hours must be >= 0, got {n_hours}")
    need = n_hours * MINUTES_PER_HOUR
    tail = histories[:, histories.shape[1] - min(need, histories.shape[1]) :]
    if tail.shape[1] < need:
        tail = np.concatenate([np.zeros((len(tail), need - tail.shape[1])), tail], axis=1)
    return tail.reshape(len(tail), n_hours, MINUTES_PER_HOUR).max(axis=2)


def check_history(history: np.ndarray, field_name: str = "history") -> np.ndarray:
    """A 1-D float array of finite, non-negative per-minute demand, or ForecastError."""
    arr = np.asarray(history, dtype=float)
    if arr.ndim != 1:
        raise ForecastError(f"{field_name} must be 1-D (one value per minute), got {arr.ndim}-D")
    return check_demand(arr, field_name)


def us_federal_holidays(years: Iterable[int]) -> frozenset[date]:
    """US federal holidays for the given years (Philly ran in the US), from the maintained
    ``holidays`` package: each holiday's date and, where it falls on a weekend, the
    weekday the Office of Personnel Management observes it on (both are days off).
    """
    import holidays

    return frozenset(holidays.country_holidays("US", years=list(years), observed=True))


def china_days(years: Iterable[int]) -> tuple[frozenset[date], frozenset[date]]:
    """China's official holidays and its weekend days made workdays (调休), per year.

    From the ``chinese_calendar`` package (the State Council's announcements, as the GFS
    authors' forecaster uses it); years it does not cover are left out, not invented.
    """
    import chinese_calendar

    holidays: set[date] = set()
    workdays: set[date] = set()
    for y in years:
        try:
            start, end = date(y, 1, 1), date(y, 12, 31)
            holidays.update(chinese_calendar.get_holidays(start, end, include_weekends=False))
            workdays.update(
                d
                for d in chinese_calendar.get_workdays(start, end, include_weekends=True)
                if d.weekday() >= 5
            )
        except NotImplementedError:  # a year the package has no announcement for
            continue
    return frozenset(holidays), frozenset(workdays)


HOLIDAY_CALENDARS = ("none", "us", "china")
_DEFAULT_EPOCH = datetime(2024, 1, 1, tzinfo=UTC)  # a Monday, 00:00 UTC


@dataclass(frozen=True)
class Calendar:
    """Maps a minute since the series' epoch to hour of day, weekday, holiday and workday.

    ``epoch``: the date and time of minute 0, timezone-aware; hours and dates are read in
    the epoch's own time zone (the trace's local time: UTC for Philly, China for the GFS
    trace). ``holidays``: holiday dates (default none); ``workdays``: weekend dates that are
    working days (China's swapped days). Build one for a trace with :meth:`from_iso`.
    """

    epoch: datetime = _DEFAULT_EPOCH
    holidays: frozenset[date] = field(default_factory=frozenset)
    workdays: frozenset[date] = field(default_factory=frozenset)
    _epoch_minute_of_week: int = field(init=False, repr=False, compare=False, default=0)
    _epoch_day: np.datetime64 = field(
        init=False, repr=False, compare=False, default=np.datetime64("1970-01-01", "D")
    )
    _holiday_days: np.ndarray = field(
        init=False, repr=False, compare=False, default_factory=lambda: np.array([], "M8[D]")
    )
    _work_days: np.ndarray = field(
        init=False, repr=False, compare=False, default_factory=lambda: np.array([], "M8[D]")
    )

    def __post_init__(self) -> None:
        epoch = self.epoch
        if epoch.tzinfo is None:
            raise ForecastError("Calendar.epoch must be timezone-aware")
        minute_of_week = epoch.weekday() * MINUTES_PER_DAY + epoch.hour * 60 + epoch.minute
        object.__setattr__(self, "_epoch_minute_of_week", minute_of_week)
        object.__setattr__(self, "_epoch_day", np.datetime64(epoch.date(), "D"))
        days = np.array(sorted(self.holidays), dtype="datetime64[D]")
        object.__setattr__(self, "_holiday_days", days)
        work = np.array(sorted(self.workdays), dtype="datetime64[D]")
        object.__setattr__(self, "_work_days", work)

    @classmethod
    def from_iso(cls, epoch: str, holidays: str = "none") -> Calendar:
        """A calendar whose minute 0 is the given ISO-8601 time (UTC if no offset).

        ``holidays``: ``none``, ``us`` (US federal holidays) or ``china`` (China's holidays
        and swapped workdays), for the years around the epoch.
        """
        try:
            when = datetime.fromisoformat(epoch)
        except ValueError as exc:
            raise ForecastError(f"epoch is not an ISO-8601 time: {epoch!r}") from exc
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        years = range(when.year - 1, when.year + 3)
        if holidays == "none":
            return cls(epoch=when)
        if holidays == "us":
            return cls(epoch=when, holidays=us_federal_holidays(years))
        if holidays == "china":
            off, on = china_days(years)
            return cls(epoch=when, holidays=off, workdays=on)
        raise ForecastError(
            f"holidays must be one of {', '.join(HOLIDAY_CALENDARS)}, got {holidays!r}"
        )

    @classmethod
    def of_trace(cls, notes: dict[str, str]) -> Calendar:
        """The calendar a trace's notes name: ``epoch`` (ISO) and ``holidays`` (default none)."""
        if "epoch" not in notes:
            raise ForecastError("the trace's notes have no epoch: its calendar is unknown")
        return cls.from_iso(notes["epoch"], notes.get("holidays", "none"))

    def _days(self, m: np.ndarray) -> np.ndarray:
        epoch_minute_of_day = self._epoch_minute_of_week % MINUTES_PER_DAY
        return (self._epoch_day + (m + epoch_minute_of_day) // MINUTES_PER_DAY).astype(
            "datetime64[D]"
        )

    def features(self, minutes: Sequence[int] | np.ndarray) -> tuple[np.ndarray, ...]:
        """(hour of day 0-23, weekday 0-6 with Monday 0, holiday 0/1) of each minute."""
        m = np.asarray(minutes, dtype=np.int64)
        minute_of_week = (m + self._epoch_minute_of_week) % (7 * MINUTES_PER_DAY)
        hour = (minute_of_week % MINUTES_PER_DAY) // 60
        weekday = minute_of_week // MINUTES_PER_DAY
        holiday = np.isin(self._days(m), self._holiday_days).astype(np.int64)
        return hour, weekday, holiday

    def workday(self, minutes: Sequence[int] | np.ndarray) -> np.ndarray:
        """1 where the minute's date is a working day (a weekday and no holiday, or a
        weekend date made a workday), else 0."""
        m = np.asarray(minutes, dtype=np.int64)
        _, weekday, holiday = self.features(m)
        swapped = np.isin(self._days(m), self._work_days)
        return (((weekday < 5) & (holiday == 0)) | swapped).astype(np.int64)
