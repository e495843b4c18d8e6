"""Spot admission: the spot quota each GPU pool holds spot work to, and why a job waits.

The quota is the :class:`~stoker.core.gfs.quota.QuotaPolicy`'s, from the GPU pool's summed HP
forecast and its capacity, scaled by eta (GFS); with ``lend_idle`` (stoker's ``gfs-lend``)
and no HP job waiting, spot may also borrow that share of what HP does not hold. With the
authors' window, no spot job starts before it opens and none is held back after it closes.
"""

from __future__ import annotations

import math

import numpy as np

from stoker.core.gfs.asreleased import quota_used
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
        # per GPU pool, the HP GPUs its quota keeps from spot by the forecast (None: it reads
        # none): what a spot job the quota holds back is told
        self.hp_reserve: dict[str, float | None] = {}
        self.forecast: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # per GPU pool, summed

    def set_quota(self, gpu_pool: str, capacity: int) -> None:
        """The GPU pool's capacity or forecast changed: its quota follows (no forecast yet: an
        HP demand of zero)."""
        zero = np.zeros(max(1, math.ceil(self.config.guarantee_s / HOUR_S)))
        mean, var = self.forecast.get(gpu_pool, (zero, zero))
        self.quota[gpu_pool] = self.config.quota.quota(gpu_pool, mean, var, capacity)
        self.hp_reserve[gpu_pool] = self.config.quota.hp_reserve(mean, var, capacity)

    def room(self, gpu_pool: str, now: float) -> float:
        """Spot GPUs the GPU pool's quota still admits (none before the window, any after)."""
        gate = self.config.window
        if gate is not None and now < gate[0]:
            return -math.inf
        if gate is not None and now >= gate[1]:
            return math.inf
        if self._closed(now):
            return 0.0
        return self.spot_quota(gpu_pool) - quota_used(self.view, gpu_pool, self.config)

    def _closed(self, now: float) -> bool:
        """Inside the window and before ``quota_opens`` (the authors' forecaster cold
        start): the spot quota is 0."""
        opens = self.config.quota_opens
        return opens is not None and now < opens

    def spot_quota(self, gpu_pool: str) -> float:
        """The GPU pool's spot quota in force inside the window: the forecast's, or with
        ``lend_idle`` and no HP job waiting there, at least the loan (:meth:`lent`)."""
        lent = self.lent(gpu_pool)
        return self.quota[gpu_pool] if lent is None else max(self.quota[gpu_pool], lent)

    def lent(self, gpu_pool: str) -> float | None:
        """With ``lend_idle`` and no HP job waiting in the GPU pool, that share (times eta) of
        the GPUs HP does not hold now; else None (nothing is lent)."""
        lend = self.config.lend_idle
        if lend is None or self.view.queues[gpu_pool][_HP].size:
            return None
        used = self.view.used[gpu_pool][_HP]
        return lend * self.config.quota.eta(gpu_pool) * (self.view.capacity[gpu_pool] - used)

    def over_quota(self, job: Job, gpu_pool: str, now: float) -> bool:
        """Whether the spot quota holds spot job ``job`` back now (before the window, every
        spot job)."""
        gate = self.config.window
        if gate is not None and now < gate[0]:
            return True  # before the window no spot job starts
        if gate is not None and now >= gate[1]:
            return False
        if self._closed(now):
            return True
        used = quota_used(self.view, gpu_pool, self.config)
        return used + job.gpus > self.spot_quota(gpu_pool) + EPS

    def waiting(
        self, job: Job, gpu_pool: str, freeing: str | None, now: float
    ) -> SpotQuotaWait | GpuWait:
        """Why queued ``job`` has not started, by the tests a start attempt makes, in its
        order (a pure read): pods stopping to make room (``freeing``: for this job or, for
        spot, another), the spot quota, else no room on its GPU pool's cards (beside a
        reservation for another HP job, if one holds nodes back from it)."""
        view = self.view
        free = view.cluster.free_gpus(gpu_pool)
        if freeing is None and job.job_class is _SPOT and self.over_quota(job, gpu_pool, now):
            return self.quota_wait(job, gpu_pool, free, now)
        blocked = view.reservations.blocked(job, now)
        held = view.reservations.held.get(gpu_pool) if blocked else None
        return GpuWait(
            gpu_pool=gpu_pool,
            workers=job.workers,
            per_worker=job.per_worker,
            free_gpus=free,
            capacity=view.capacity[gpu_pool],
            freeing_for=freeing,
            reserved_for=None if held is None else held[0],
        )

    def quota_wait(self, job: Job, gpu_pool: str, free: float, now: float) -> SpotQuotaWait:
        """Why the quota holds spot job ``job`` back, in the figures a user can check."""
        gate = self.config.window
        used = self.view.used[gpu_pool]
        return SpotQuotaWait(
            gpu_pool=gpu_pool,
            quota=self.spot_quota(gpu_pool),
            spot_gpus=used[_SPOT],
            gpus=job.gpus,
            capacity=self.view.capacity[gpu_pool],
            free_gpus=free,
            hp_gpus=used[_HP],
            eta=self.config.quota.eta(gpu_pool),
            forecast_hp=self.hp_reserve[gpu_pool],
            guaranteed_h=guaranteed_hours(self.config.guarantee_s),
            lent=self.lent(gpu_pool),
            hp_queued=self.view.queues[gpu_pool][_HP].size,
            opens_at=gate[0] if gate is not None and now < gate[0] else None,
        )
