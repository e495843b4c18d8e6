"""Guarantee periods and eta feedback: how the spot quota learns from evictions (GFS).

A running spot job earns one guarantee period per ``guarantee_s`` it runs; an eviction
fails the period in progress. Every ``eta_every_s`` the periods earned are settled in each
GPU pool's :class:`~stoker.core.gfs.jobs.GuaranteeLedger` and the quota policy takes one eta
step from the GPU pool's eviction rate since the last step.
"""

from __future__ import annotations

from stoker.core.gfs.config import GFSConfig
from stoker.core.gfs.view import HpSpotView
from stoker.core.model import Job, JobClass, JobState
from stoker.units import HOUR_S


class GuaranteePeriods:
    """Per running spot job, the periods already settled in its current run; the spot
    GPU-seconds of the periods that succeeded (the authors' ``record_spot_succeed``); the
    eta feedback's clock."""

    def __init__(self, view: HpSpotView, config: GFSConfig, start: float) -> None:
        self.view = view
        self.config = config
        self.settled: dict[str, int] = {}
        self.spot_ok_gpu_s = 0.0
        self.last_eta = start
        self.next_eta = start + config.eta_every_s

    def earned(self, job: Job, now: float) -> int:
        """Guarantee periods earned in the current run and not yet settled."""
        if job.state is not JobState.RUNNING:
            return 0
        total = int((now - job.run_start) // self.config.guarantee_s)
        return total - self.settled.get(job.id, 0)

    def settle_ok(self, job: Job, now: float, periods: int, last_s: float | None = None) -> None:
        """``periods`` whole guarantee periods of a spot job succeeded (and, with
        ``last_s``, its final partial one of that length, at completion)."""
        count = periods + (0 if last_s is None else 1)
        if not count:
            return
        self.view.ledgers[self.view.gpu_pool_of(job)].record(now, succeeded=count)
        job.periods_ok += count
        self.spot_ok_gpu_s += job.gpus * (periods * self.config.guarantee_s + (last_s or 0.0))

    def forget(self, job_id: str) -> None:
        """The job's run ended (finished, evicted or its lease returned)."""
        self.settled.pop(job_id, None)

    def feedback(self, now: float) -> list[str]:
        """Settle running spot jobs' earned periods, then one eta step per GPU pool; the GPU pools
        (each due a pass: its quota moved)."""
        view = self.view
        for gpu_pool in view.gpu_pools:
            ledger = view.ledgers[gpu_pool]
            for jid in view.running_spot[gpu_pool]:
                job = view.jobs[jid]
                earned = self.earned(job, now)
                if earned:
                    self.settle_ok(job, now, earned)
                    self.settled[jid] = self.settled.get(jid, 0) + earned
            queue = view.queues[gpu_pool][JobClass.SPOT]
            waited = any(
                view.jobs[jid].state is JobState.QUEUED
                and now - view.jobs[jid].queued_since > HOUR_S
                for jid in queue.heads()
            )
            self.config.quota.feedback(gpu_pool, ledger.rate(self.last_eta), waited)
        self.last_eta = now
        self.next_eta = now + self.config.eta_every_s
        return list(view.gpu_pools)
