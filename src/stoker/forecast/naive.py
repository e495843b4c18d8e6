"""The paper's ablation: next hour's peak is the same hour's peak one week ago."""

from __future__ import annotations

import numpy as np

from stoker.forecast.base import (
    MINUTES_PER_HOUR,
    MINUTES_PER_WEEK,
    Cadence,
    Forecast,
    SeriesKey,
)
from stoker.forecast.features import MIN_STD, check_now
from stoker.forecast.series import check_history, hourly_peaks

_WEEK_H = MINUTES_PER_WEEK // MINUTES_PER_HOUR


class NaiveLastWeek:
    """ "Last week's peak": hour k ahead is forecast as the peak of that hour a week earlier.

    Its std is the root mean square of the same rule's errors over the last ``error_h``
    hours of the series (default 4 weeks): each past hour's peak minus the peak a week
    before it. It is one number per series, the same for every hour ahead, since the
    rule's error does not depend on how far ahead it looks. It needs no fitting: ``fit`` only
    checks its input. Before the record (a young series) demand counts as zero.
    """

    name = "naive"

    def __init__(self, *, error_h: int = 4 * _WEEK_H, cadence: Cadence | None = None) -> None:
        self.error_h = error_h
        self.cadence = cadence or Cadence()

    def fit(self, histories: dict[SeriesKey, np.ndarray], now_min: int) -> None:
        """Nothing to learn; checks the input so bad data fails here as in the others."""
        check_now(now_min)
        for key, history in histories.items():
            check_history(history, f"histories[{key}]")

    def predict(
        self, key: SeriesKey, history: np.ndarray, now_min: int, horizon_h: int
    ) -> Forecast:
        """Mean: the peaks of the hours one week before each hour ahead; std: past RMS error."""
        check_now(now_min, horizon_h)
        history = check_history(history)
        peaks = hourly_peaks(history, self.error_h + _WEEK_H)
        # the last week's blocks; hour k ahead reads the same hour of the week, and past a
        # week ahead the latest one seen (k mod one week)
        last_week = peaks[len(peaks) - _WEEK_H :]
        mean = last_week[np.arange(horizon_h) % _WEEK_H]
        errors = peaks[_WEEK_H:] - peaks[:-_WEEK_H]
        in_record = min(len(errors), len(history) // MINUTES_PER_HOUR)
        errors = errors[len(errors) - in_record :]
        rms = float(np.sqrt(np.mean(errors**2))) if in_record else 0.0
        return Forecast(mean=mean.astype(float), std=np.full(horizon_h, max(rms, MIN_STD)))
