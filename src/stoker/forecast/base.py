"""The forecaster interface: per tenant and pool, HP GPU demand ahead, as a distribution."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass(frozen=True, slots=True)
class SeriesKey:
    """Whose demand: a tenant's HP GPUs in one pool (GPU model) of one cluster."""

    tenant: str
    pool: str
    cluster: str = "default"


@dataclass(frozen=True, slots=True)
class Forecast:
    """Hourly peak HP demand for the next ``len(mean)`` hours: Normal(mean[k], std[k]**2)."""

    mean: np.ndarray
    std: np.ndarray


class Forecaster(Protocol):
    """Fitted on minute-level history (GPUs per minute), queried for hourly peaks ahead.

    ``history`` holds one value per minute ending at ``now_min`` (minutes since the epoch
    of the series, so hour-of-day and weekday can be derived).
    """

    name: str

    def fit(self, histories: dict[SeriesKey, np.ndarray], now_min: int) -> None: ...

    def predict(
        self, key: SeriesKey, history: np.ndarray, now_min: int, horizon_h: int
    ) -> Forecast: ...
