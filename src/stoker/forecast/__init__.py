"""stoker.forecast: HP GPU demand forecasters behind one interface (see ``base``).

``naive`` (last week's peak, the paper's ablation) and ``ridge`` (the base install's
default, closed-form DLinear-style) need numpy and scipy only; ``orglinear`` (the paper's
model) needs the ``forecast`` extra (PyTorch), imported only when one is built.
"""

from stoker.forecast.base import (
    Cadence,
    Forecast,
    ForecastDependencyError,
    Forecaster,
    ForecastError,
    NotFittedError,
    SeriesKey,
)
from stoker.forecast.registry import DEFAULT_FORECASTER, FORECASTERS, make_forecaster
from stoker.forecast.series import Calendar, demand_series, hourly_peaks

__all__ = [
    "DEFAULT_FORECASTER",
    "FORECASTERS",
    "Cadence",
    "Calendar",
    "Forecast",
    "ForecastDependencyError",
    "ForecastError",
    "Forecaster",
    "NotFittedError",
    "SeriesKey",
    "demand_series",
    "hourly_peaks",
    "make_forecaster",
]
