"""The HP demand meter: each tenant's HP GPU demand per GPU pool, as per-minute peaks.

A job's demand counts from its submission to its end, whether or not it was served at once
(what the tenant asked of the pool, as :func:`stoker.forecast.series.demand_series` counts a
trace), so the forecaster is fitted on demand rather than on what the scheduler allowed.
Pure: the driver tells it of changes with ``now`` (seconds) and takes the finished minutes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from stoker.core.model import EPS

MINUTE_S = 60.0


def minute(now: float) -> int:
    """The whole minute ``now`` falls in."""
    return math.floor(now / MINUTE_S)


@dataclass
class _Series:
    first: int  # the first minute not taken yet
    level: float = 0.0  # demand now
    start: float = 0.0  # the level ``first`` began with
    # minutes not taken yet in which the level changed: (peak, level at the minute's end)
    changed: dict[int, tuple[float, float]] = field(default_factory=dict)


class HPDemandMeter:
    """HP demand per (GPU pool, tenant) now, and its peak in every minute not yet taken."""

    def __init__(self) -> None:
        self._series: dict[tuple[str, str], _Series] = {}

    def level(self, gpu_model: str, tenant: str) -> float:
        """The demand now."""
        s = self._series.get((gpu_model, tenant))
        return 0.0 if s is None else s.level

    def change(self, gpu_model: str, tenant: str, gpus: float, now: float) -> None:
        """Demand rises (a job arrives: ``gpus`` > 0) or falls (it ends: ``gpus`` < 0)."""
        m = minute(now)
        s = self._series.setdefault((gpu_model, tenant), _Series(first=m))
        after = max(0.0, s.level + gpus)
        after = 0.0 if after < EPS else after
        peak, _ = s.changed.get(m, (s.level, s.level))
        s.changed[m] = (max(peak, s.level, after), after)
        s.level = after

    def take(self, now: float) -> list[tuple[str, str, int, float]]:
        """(gpu model, tenant, minute, peak GPUs) for every minute that ended by ``now`` and
        was not taken before, with demand in it; those minutes are forgotten."""
        end = minute(now)  # the minute ``now`` falls in is still open
        out: list[tuple[str, str, int, float]] = []
        for (model, tenant), s in sorted(self._series.items()):
            level = s.start
            for m in range(s.first, end):
                peak, level = s.changed.pop(m, (level, level))
                if peak > EPS:
                    out.append((model, tenant, m, peak))
            if end > s.first:
                s.first, s.start = end, level
        return out
