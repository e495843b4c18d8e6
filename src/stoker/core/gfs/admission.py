"""Spot admission: the spot quota each GPU pool holds spot work to, and why a job waits.

The quota is the :class:`~stoker.core.gfs.quota.QuotaPolicy`'s, from the pool's summed HP
forecast and its capacity, scaled by eta (GFS); with ``lend_idle`` (stoker's ``gfs-lend``)
and no HP job waiting, spot may also borrow that share of what HP does not hold. With the
authors' window, no spot job starts before it opens and none is held back after it closes.
"""

from __future__ import annotations

import math

import numpy as np

from stoker.core.gfs.config import GFSConfig
from stoker.core.gfs.quota import guaranteed_hours
from stoker.core.gfs.view import HpSpotView
from stoker.core.model import EPS, Job, JobClass
from stoker.core.waiting import GpuWait, SpotQuotaWait
from stoker.units import HOUR_S

_HP, _SPOT = JobClass.HP, JobClass.SPOT


class SpotAdmission:
    """Per GPU pool: the forecast's spot quota, the HP GPUs it keeps from spot, the summed
    forecast it came from; and the tests a spot job passes before it is placed."""

    def __init__(self, view: HpSpotView, config: GFSConfig) -> None:
        self.view = view
        self.config = config
        self.quota: dict[str, float] = {}
        # per pool, the HP GPUs its quota keeps from spot by the forecast (None: it reads
        # none): what a spot job the quota holds back is told
        self.hp_reserve: dict[str, float | None] = {}
        self.forecast: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # per pool, summed

    def set_quota(self, pool: str, capacity: int) -> None:
        """The pool's capacity or forecast changed: its quota follows (no forecast yet: an
        HP demand of zero)."""
        zero = np.zeros(max(1, math.ceil(self.config.guarantee_s / HOUR_S)))
        mean, var = self.forecast.get(pool, (zero, zero))
        self.quota[pool] = self.config.quota.quota(pool, mean, var, capacity)
        self.hp_reserve[pool] = self.config.quota.hp_reserve(mean, var, capacity)

    def room(self, pool: str, now: float) -> float:
        """Spot GPUs the pool's quota still admits (none before the window, any after)."""
        gate = self.config.window
        if gate is not None and now < gate[0]:
            return -math.inf
        if gate is not None and now >= gate[1]:
            return math.inf
        return self.spot_quota(pool) - self.view.used[pool][_SPOT]

    def spot_quota(self, pool: str) -> float:
        """The pool's spot quota in force inside the window: the forecast's, or with
        ``lend_idle`` and no HP job waiting there, at least the loan (:meth:`lent`)."""
        lent = self.lent(pool)
        return self.quota[pool] if lent is None else max(self.quota[pool], lent)

    def lent(self, pool: str) -> float | None:
        """With ``lend_idle`` and no HP job waiting in the pool, that share (times eta) of
        the GPUs HP does not hold now; else None (nothing is lent)."""
        lend = self.config.lend_idle
        if lend <= 0 or self.view.queues[pool][_HP].size:
            return None
        used = self.view.used[pool][_HP]
        return lend * self.config.quota.eta(pool) * (self.view.capacity[pool] - used)

    def over_quota(self, job: Job, pool: str, now: float) -> bool:
        """Whether the spot quota holds spot job ``job`` back now (before the window, every
        spot job)."""
        gate = self.config.window
        if gate is not None and now < gate[0]:
            return True  # before the window no spot job starts
        used = self.view.used[pool][_SPOT]
        quota = math.inf if gate is not None and now >= gate[1] else self.spot_quota(pool)
        return used + job.gpus > quota + EPS

    def waiting(
        self, job: Job, pool: str, freeing: str | None, now: float
    ) -> SpotQuotaWait | GpuWait:
        """Why queued ``job`` has not started, by the tests a start attempt makes, in its
        order (a pure read): pods stopping to make room (``freeing``: for this job or, for
        spot, another), the spot quota, else no room on its pool's cards (beside a
        reservation for another HP job, if one holds nodes back from it)."""
        view = self.view
        free = view.cluster.free_gpus(pool)
        if freeing is None and job.job_class is _SPOT and self.over_quota(job, pool, now):
            return self.quota_wait(job, pool, free, now)
        blocked = view.reservations.blocked(job, now)
        held = view.reservations.held.get(pool) if blocked else None
        return GpuWait(
            pool=pool,
            workers=job.spec.workers,
            per_worker=job.per_worker,
            free_gpus=free,
            capacity=view.capacity[pool],
            freeing_for=freeing,
            reserved_for=None if held is None else held[0],
        )

    def quota_wait(self, job: Job, pool: str, free: float, now: float) -> SpotQuotaWait:
        """Why the quota holds spot job ``job`` back, in the figures a user can check."""
        gate = self.config.window
        used = self.view.used[pool]
        return SpotQuotaWait(
            pool=pool,
            quota=self.spot_quota(pool),
            spot_gpus=used[_SPOT],
            gpus=job.gpus,
            capacity=self.view.capacity[pool],
            free_gpus=free,
            hp_gpus=used[_HP],
            eta=self.config.quota.eta(pool),
            forecast_hp=self.hp_reserve[pool],
            guaranteed_h=guaranteed_hours(self.config.guarantee_s),
            lent=self.lent(pool),
            hp_queued=self.view.queues[pool][_HP].size,
            opens_at=gate[0] if gate is not None and now < gate[0] else None,
        )
