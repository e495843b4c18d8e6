"""The paper's ablation: next hour's peak is the same hour's peak one week ago."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stoker.forecast.base import (
    MINUTES_PER_HOUR,
    MINUTES_PER_WEEK,
    BatchPredictor,
    Cadence,
    Forecasts,
    SeriesKey,
    check_peaks,
)
from stoker.forecast.features import MIN_STD, check_now
from stoker.forecast.series import check_history

_WEEK_H = MINUTES_PER_WEEK // MINUTES_PER_HOUR


class NaiveLastWeek(BatchPredictor):
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

    @property
    def query_hours(self) -> int:
        """Last week's hours and the ``error_h`` hours its error is measured over."""
        return self.error_h + _WEEK_H

    @property
    def fit_minutes(self) -> int:
        """``fit`` only checks its input: as much as a query reads."""
        return self.query_minutes

    def fit(self, histories: dict[SeriesKey, np.ndarray], now_min: int) -> None:
        """Nothing to learn; checks the input so bad data fails here as in the others."""
        check_now(now_min)
        for key, history in histories.items():
            check_history(history, f"histories[{key}]")

    def predict_peaks(
        self,
        keys: Sequence[SeriesKey],
        peaks: np.ndarray,
        now_min: int,
        horizon_h: int,
        recorded_min: int | None = None,
    ) -> Forecasts:
        """Mean: the peaks of the hours one week before each hour ahead; std: the past RMS
        error, over the hours the record holds (``recorded_min``)."""
        check_now(now_min, horizon_h)
        peaks = check_peaks(keys, peaks, self.query_hours)
        record = self.query_minutes if recorded_min is None else recorded_min
        # the last week's blocks; hour k ahead reads the same hour of the week, and past a
        # week ahead the latest one seen (k mod one week)
        last_week = peaks[:, peaks.shape[1] - _WEEK_H :]
        mean = last_week[:, np.arange(horizon_h) % _WEEK_H]
        errors = peaks[:, _WEEK_H:] - peaks[:, :-_WEEK_H]
        in_record = min(errors.shape[1], record // MINUTES_PER_HOUR)
        errors = errors[:, errors.shape[1] - in_record :]
        rms = np.sqrt(np.mean(errors**2, axis=1)) if in_record else np.zeros(len(keys))
        std = np.repeat(np.maximum(rms, MIN_STD)[:, None], horizon_h, axis=1)
        return Forecasts(keys=tuple(keys), mean=mean.astype(float), std=std)
