"""Forecasters by name, for the CLI and the simulator's policy configurations."""

from __future__ import annotations

from typing import Any

from stoker.forecast.base import Cadence, Forecaster, ForecastError
from stoker.forecast.series import Calendar

FORECASTERS = ("naive", "ridge", "orglinear")
DEFAULT_FORECASTER = "ridge"  # the base install's default; forecasts best without torch


def make_forecaster(
    name: str,
    *,
    calendar: Calendar | None = None,
    seed: int = 0,
    cadence: Cadence | None = None,
    **options: Any,
) -> Forecaster:
    """Build forecaster ``name`` (one of :data:`FORECASTERS`); ``options`` go to its class.

    ``orglinear`` raises :class:`~stoker.forecast.base.ForecastDependencyError` without torch.
    """
    if name == "naive":
        from stoker.forecast.naive import NaiveLastWeek

        return NaiveLastWeek(cadence=cadence, **options)
    if name == "ridge":
        from stoker.forecast.ridge import RidgeLinear

        return RidgeLinear(calendar=calendar, cadence=cadence, **options)
    if name == "orglinear":
        from stoker.forecast.orglinear import OrgLinear

        return OrgLinear(calendar=calendar, seed=seed, cadence=cadence, **options)
    raise ForecastError(f"forecaster must be one of {', '.join(FORECASTERS)}, got {name!r}")
