"""The authors' rules kept as options (``GFSConfig.gang_rule``, ``GFSConfig.demand``): how
an HP gang is placed and what a running job counts for in the demand books, as their
released simulator does it. Every default is stoker's corrected rule; the
``*-as-released`` presets (``stoker.core.registry``) set theirs.

The rules only decide how many workers a job runs with (:attr:`Job.run_workers`) and what
it counts for; placement, reclaim and the books stay the scheduler's.
"""

from __future__ import annotations

from typing import Any

from stoker.core.gfs.config import DemandCount, GangRule, GFSConfig
from stoker.core.gfs.view import HpSpotView
from stoker.core.model import Job, JobClass

_HP, _SPOT = JobClass.HP, JobClass.SPOT


def _gang(job: Job) -> bool:
    """An HP job of several whole-GPU workers: what a gang rule applies to (the authors'
    fractional HP path places one share; spot gangs go all or nothing in every policy)."""
    return job.job_class is _HP and job.spec.workers > 1 and not job.fractional


def on_submit(job: Job, config: GFSConfig) -> None:
    """``one-worker``: an HP gang runs with one worker (``fifo_spot.py`` and ``fgd.py`` send
    HP straight to ``place_with_preemption``, which places one)."""
    if config.gang_rule is GangRule.ONE_WORKER and _gang(job):
        job.run_workers = 1


def fewest_workers(job: Job, config: GFSConfig) -> int:
    """The fewest workers an HP start attempt needs room for: ``partial`` starts a gang with
    the free room's workers plus one by eviction, so one worker's room is enough to try."""
    if config.gang_rule is GangRule.PARTIAL and _gang(job) and job.run_workers is None:
        return 1
    return job.workers


def shorten(job: Job, prefix: tuple[Any, ...] | None, config: GFSConfig) -> bool:
    """``partial``: the gang's free-room plan that just failed (``prefix``: the scheduler's
    ``_free_prefix``, (job, now, epoch, plan, workers placed)) placed some workers before
    one found no room; it runs with one more, so the reclaim that follows evicts for one
    worker only (``policy/gfs.py``: ``job_placer`` keeps what it placed,
    ``place_with_preemption`` adds one worker, ``run_guar`` runs it). True when the job
    was shortened."""
    if config.gang_rule is not GangRule.PARTIAL or not _gang(job) or prefix is None:
        return False
    if prefix[0] != job.id or job.run_workers is not None:
        return False  # shortened already: it waits for that one worker's room
    job.run_workers = int(prefix[4]) + 1
    return True


def unshorten(job: Job, config: GFSConfig) -> None:
    """``partial``: nothing could be evicted for the shortened gang's extra worker; it asks
    for every worker again (the authors' job waits; we hold nothing for it meanwhile)."""
    if config.gang_rule is GangRule.PARTIAL and _gang(job):
        job.run_workers = None


def demand_gpus(job: Job, config: GFSConfig, ends: bool = False) -> float:
    """GPUs an HP job adds to the demand the forecaster learns when it starts, or takes off
    it when it ``ends``: every worker's (ours), one worker's (the authors'
    ``guar_request_dict``), nothing taken off (``cumulative``: the baselines')."""
    if config.demand is DemandCount.EVERY_WORKER:
        return job.gpus
    if ends and config.demand is DemandCount.CUMULATIVE:
        return 0.0
    return job.per_worker


def quota_used(view: HpSpotView, gpu_pool: str, config: GFSConfig) -> float:
    """Spot GPUs the GPU pool's quota counts as used (``one-worker-spot``: one worker per
    running spot job, ``SpotScheduler.run_spot``'s ``gpu_request_dict``)."""
    if config.demand is not DemandCount.ONE_WORKER_SPOT:
        return view.used[gpu_pool][_SPOT]
    jobs = view.jobs
    return sum(jobs[j].per_worker for j in view.running_spot[gpu_pool])
