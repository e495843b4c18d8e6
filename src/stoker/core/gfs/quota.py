"""Spot quota per GPU pool from the forecast HP demand, and eta fed back from evictions.

GFS: every 5 minutes, per GPU pool, sum the tenants' forecast means and variances of the hourly
HP peak, take the g-quantile U_k of that Normal for each hour k ahead,
``free_k = capacity - clip(floor(U_k), 0, capacity)`` and
``quota = eta * min(free_k for the hours of the guaranteed duration)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Protocol

import numpy as np

from stoker.units import HOUR_S


def guaranteed_hours(guarantee_s: float) -> int:
    """Hours ahead a spot job admitted now must be safe for (at least one)."""
    return max(1, math.ceil(guarantee_s / HOUR_S - 1e-9))


def quantile(mean: np.ndarray, var: np.ndarray, g: float) -> np.ndarray:
    """The g-quantile of N(mean_k, var_k) per hour ahead (a negative variance read as 0):
    the one definition of a forecast's upper bound."""
    z = NormalDist().inv_cdf(g)
    return np.asarray(mean, float) + z * np.sqrt(np.maximum(np.asarray(var, float), 0.0))


def free_per_hour(mean: np.ndarray, var: np.ndarray, capacity: int, g: float) -> np.ndarray:
    """``capacity - clip(floor(U_k), 0, capacity)`` with U_k the g-quantile of N(mean_k, var_k)."""
    upper = quantile(mean, var, g)
    return capacity - np.clip(np.floor(upper), 0, capacity)


def forecast_hp(mean: np.ndarray, var: np.ndarray, capacity: int, g: float, hours: int) -> float:
    """The HP GPUs the forecast keeps from spot: ``clip(floor(U_k), 0, capacity)`` at its
    largest over the first ``hours`` hours ahead (capacity less the least free)."""
    if len(mean) < hours:
        raise ValueError(f"forecast covers {len(mean)} h, the guaranteed duration needs {hours}")
    free = free_per_hour(mean[:hours], var[:hours], capacity, g)
    return capacity - float(free.min())


def forecast_quota(
    mean: np.ndarray, var: np.ndarray, capacity: int, g: float, eta: float, hours: int
) -> float:
    """eta x the least free capacity over the first ``hours`` hours ahead."""
    return eta * (capacity - forecast_hp(mean, var, capacity, g, hours))


@dataclass(slots=True)
class EtaController:
    """eta follows the measured eviction rate e (GFS's feedback, with a correct growth rule).

    Shrink ``eta *= (1-g)/e`` when ``e >= 1.5 (1-g)``; grow when ``e <= 0.5 (1-g)`` and spot
    jobs have waited over an hour, by ``(1-g)/e`` but at most ``max_step`` a step and never
    above 1 (the forecast's free capacity). (The released code multiplies by ``e/(1-g)`` on growth,
    which shrinks eta; we do not copy that.) ``floor`` keeps eta from collapsing to zero on
    a bad window.
    """

    g: float = 0.9
    eta: float = 1.0
    max_step: float = 1.5
    floor: float = 0.05
    fixed: bool = False

    def update(self, e: float | None, spot_waited_long: bool) -> float:
        """Apply one feedback step for eviction rate ``e`` (None: no periods, no change)."""
        if self.fixed:
            return self.eta
        if e is None:
            # no period settled in the window: nothing was evicted; if spot is waiting,
            # that is the best case of the growth rule (e = 0), else no evidence either way
            if not spot_waited_long:
                return self.eta
            e = 0.0
        target = 1.0 - self.g
        if e >= 1.5 * target:
            self.eta = max(self.floor, self.eta * target / e)
        elif e <= 0.5 * target and spot_waited_long:
            step = self.max_step if e <= 0 else min(self.max_step, target / e)
            self.eta = min(1.0, self.eta * step)
        return self.eta


class QuotaPolicy(Protocol):
    """Turns a GPU pool's summed HP forecast into its spot quota (GPUs)."""

    name: str

    def quota(self, gpu_pool: str, mean: np.ndarray, var: np.ndarray, capacity: int) -> float: ...

    def hp_reserve(self, mean: np.ndarray, var: np.ndarray, capacity: int) -> float | None:
        """The HP GPUs the quota keeps from spot by the forecast (None: it reads none)."""
        ...

    def feedback(self, gpu_pool: str, e: float | None, spot_waited_long: bool) -> None: ...

    def eta(self, gpu_pool: str) -> float: ...


class ForecastQuota:
    """GFS's quota: the forecast g-quantile over the guaranteed duration, scaled by eta."""

    name = "forecast"

    def __init__(
        self,
        g: float = 0.9,
        guarantee_s: float = 3600.0,
        fixed_eta: bool = False,
    ):
        if not 0.0 < g < 1.0:
            raise ValueError(f"g must be in (0, 1), got {g}")
        self.g = g
        self.hours = guaranteed_hours(guarantee_s)
        self.fixed_eta = fixed_eta
        self._eta: dict[str, EtaController] = {}

    def _ctl(self, gpu_pool: str) -> EtaController:
        ctl = self._eta.get(gpu_pool)
        if ctl is None:
            ctl = self._eta[gpu_pool] = EtaController(g=self.g, fixed=self.fixed_eta)
        return ctl

    def quota(self, gpu_pool: str, mean: np.ndarray, var: np.ndarray, capacity: int) -> float:
        return forecast_quota(mean, var, capacity, self.g, self._ctl(gpu_pool).eta, self.hours)

    def hp_reserve(self, mean: np.ndarray, var: np.ndarray, capacity: int) -> float:
        return forecast_hp(mean, var, capacity, self.g, self.hours)

    def feedback(self, gpu_pool: str, e: float | None, spot_waited_long: bool) -> None:
        self._ctl(gpu_pool).update(e, spot_waited_long)

    def eta(self, gpu_pool: str) -> float:
        return self._ctl(gpu_pool).eta


class StaticQuota:
    """A fixed share of each GPU pool's capacity, blind to the forecast (a baseline).

    ``share=1`` is "no quota": spot may take everything HP leaves (YARN-CS, Chronus, Lyra, FGD).
    """

    def __init__(self, share: float = 1.0) -> None:
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"share must be in [0, 1], got {share}")
        self.share = share
        self.name = "none" if share >= 1.0 else f"static-{share:g}"

    def quota(self, gpu_pool: str, mean: np.ndarray, var: np.ndarray, capacity: int) -> float:
        return self.share * capacity

    def hp_reserve(self, mean: np.ndarray, var: np.ndarray, capacity: int) -> None:
        return None

    def feedback(self, gpu_pool: str, e: float | None, spot_waited_long: bool) -> None:
        return None

    def eta(self, gpu_pool: str) -> float:
        return 1.0
