"""One implementation per name at each named extension point, for a driver's configuration.

A preset (:mod:`stoker.core.registry`) sets every policy at once; a driver may then swap
single ones by name: ``keepalive`` (fixed, fitted, always-on), ``warm_budget``
(queue-driven, static), ``standby`` (beside-active, none) and ``spot_quota`` (forecast,
none). Each call builds fresh policy objects.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stoker.core.gfs.quota import ForecastQuota, StaticQuota
from stoker.core.policies import (
    AlwaysOn,
    BesideActive,
    FittedKeepAlive,
    FixedKeepAlive,
    NoStandby,
    QueueDrivenBudget,
    StaticBudget,
)
from stoker.core.policies.keepalive import FIXED_KEEPALIVE_S


@dataclass(frozen=True, slots=True)
class Knobs:
    """The numbers a named policy is built with: the fixed keep-alive (also the fitted one's
    fallback before it has seen enough pauses), the spot quota's g and guaranteed duration."""

    keepalive_s: float = FIXED_KEEPALIVE_S
    g: float = 0.9
    guarantee_s: float = 3600.0


_Build = Callable[[Knobs], Any]
# extension point -> (where it lives on Policies, name -> builder)
POINTS: dict[str, tuple[str, dict[str, _Build]]] = {
    "keepalive": (
        "keepalive",
        {
            "fixed": lambda k: FixedKeepAlive(k.keepalive_s),
            "fitted": lambda k: FittedKeepAlive(fallback_s=k.keepalive_s),
            "always-on": lambda k: AlwaysOn(),
        },
    ),
    "warm_budget": (
        "budget",
        {"queue-driven": lambda k: QueueDrivenBudget(), "static": lambda k: StaticBudget()},
    ),
    "standby": (
        "standby",
        {"beside-active": lambda k: BesideActive(), "none": lambda k: NoStandby()},
    ),
    "spot_quota": (
        "hpspot.quota",
        {
            "forecast": lambda k: ForecastQuota(k.g, k.guarantee_s),
            "none": lambda k: StaticQuota(1.0),
        },
    ),
}


def build(point: str, name: str, knobs: Knobs) -> Any:
    """A fresh policy of one extension point by name; ValueError naming the point and the
    known names for anything unknown."""
    entry = POINTS.get(point)
    if entry is None:
        raise ValueError(f"{point}: not an extension point; known: {', '.join(POINTS)}")
    builder = entry[1].get(name)
    if builder is None:
        raise ValueError(f"{point}: unknown {name!r}; known: {', '.join(entry[1])}")
    return builder(knobs)


def apply(policies: Any, overrides: dict[str, str], knobs: Knobs) -> None:
    """Swap the named policies into ``policies`` (a :class:`~stoker.core.core.Policies`);
    ValueError naming the point and the known names for anything unknown."""
    for point, name in overrides.items():
        policy = build(point, name, knobs)
        *path, attr = POINTS[point][0].split(".")
        owner = policies
        for part in path:
            owner = getattr(owner, part)
        setattr(owner, attr, policy)
