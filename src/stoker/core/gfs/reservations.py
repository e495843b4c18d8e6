"""Reservations: room held for a waiting HP gang while the nodes it needs drain.

stoker's own (``gfs-reserve-patient-lend``; GFS never reserves): a whole-GPU HP job that
has queued ``reservation.after_s`` and finds no room, free or by eviction, reserves the nodes
closest to holding it; no other hp or spot job (nor a warm pool's new pod) is placed there,
nor reclaims there, unless it ends before they drain (EASY backfill). One reservation per
GPU pool at a time (Slurm's backfill with a reservation for the top job, Kubernetes'
nominated node). The scheduler decides when to reserve and release; this part keeps the
reservations and answers what they block.
"""

from __future__ import annotations

import bisect
import math

from stoker.core.books import Books
from stoker.core.gfs.config import GFSConfig
from stoker.core.gfs.placement import GpuPoolIndex, NodeInfo
from stoker.core.gfs.queues import ClassQueue
from stoker.core.model import EPS, Job, JobClass


def ends_by(job: Job, now: float, until: float) -> bool:
    """Whether ``job``, started now, ends by ``until`` by its known run time (its restart
    overhead and the work left; unknown, as live: no)."""
    return job.spec.duration is not None and now + job.overhead + job.remaining <= until + EPS


class Reservations:
    """Per GPU pool, the HP job holding its reservation; see the module docstring.

    ``held``: per GPU pool, (job, the nodes reserved for it, when they will have drained for
    it). ``candidates``: per GPU pool, the first HP job of the current pass (queue order) that
    may reserve.
    """

    def __init__(self, books: Books, gpu_pools: dict[str, GpuPoolIndex], config: GFSConfig) -> None:
        self.books = books
        self.gpu_pools = gpu_pools
        self.config = config
        self.held: dict[str, tuple[str, frozenset[str], float]] = {}
        self.candidates: dict[str, Job] = {}

    def nodes(self, gpu_pool: str) -> frozenset[str]:
        """The nodes reserved in ``gpu_pool`` (none: no reservation)."""
        held = self.held.get(gpu_pool)
        return frozenset() if held is None else held[1]

    def blocked(self, job: Job, now: float) -> frozenset[str]:
        """The nodes reserved in ``job``'s GPU pool for another job, unless ``job`` would end
        before they drain for it by its known run time (EASY backfill; none: no
        reservation)."""
        if not self.held:
            return frozenset()
        held = self.held.get(self.books.gpu_pool(job.spec))
        if held is None or held[0] == job.id or ends_by(job, now, held[2]):
            return frozenset()
        return held[1]

    def may_reserve(self, job: Job, now: float) -> bool:
        """An HP job of more than one whole card (what smaller jobs backfilling can starve)
        that found no room may reserve once it has queued ``after_s`` (never without a
        :class:`~stoker.core.gfs.config.ReservationConfig`)."""
        c = self.config.reservation
        return (
            c is not None
            and now - job.queued_since >= c.after_s - EPS
            and not job.fractional
            and job.gpus >= 2.0 - EPS
            and job.per_worker >= c.min_worker - EPS
            and job.workers >= c.min_workers
        )

    def smaller_waits(self, job: Job, queue: ClassQueue) -> bool:
        """With ``smaller_first``: whether an HP job of a smaller per-worker request
        than ``job``'s waits in its GPU pool's HP ``queue`` (after the pass: it found no room)."""
        if self.config.reservation is None or not self.config.reservation.smaller_first:
            return False
        # the skip rule's HP buckets are -request, ascending: a smaller request's is later
        return bisect.bisect_right(queue.keys, queue.bucket(job) + EPS) < len(queue.keys)

    def reserve(self, job: Job, gpu_pool: str) -> bool:
        """Reserve for ``job`` the nodes that will hold it soonest (:meth:`plan`), in node
        order among equals, until they hold every worker; they drain for it by the latest
        of their times. False when the GPU pool's nodes cannot hold it."""
        planned = self.plan(job, gpu_pool)
        if planned is None:
            return False
        nodes, ready = planned
        self.held[gpu_pool] = (job.id, nodes, ready)
        return True

    def release(self, job: Job) -> str | None:
        """``job`` started or left the queue: its reservation ends; the GPU pool it held, or
        None when it held none."""
        if not self.held:
            return None
        gpu_pool = self.books.gpu_pool(job.spec)
        held = self.held.get(gpu_pool)
        if held is None or held[0] != job.id:
            return None
        del self.held[gpu_pool]
        return gpu_pool

    def plan(self, job: Job, gpu_pool: str) -> tuple[frozenset[str], float] | None:
        """The nodes that will hold ``job`` soonest and when they will have drained for it
        (None: the GPU pool's nodes cannot hold it): its workers' slots soonest first
        (:meth:`slots_ready`), in node order among equals."""
        need = int(job.per_worker)
        ranked = sorted(
            (ready, info.ordinal, k, info.name)
            for info in self.gpu_pools[gpu_pool].nodes.values()
            if info.total >= need
            for k, ready in enumerate(self.slots_ready(info, need))
        )
        chosen = ranked[: job.workers]
        if len(chosen) < job.workers:
            return None
        return frozenset(name for *_, name in chosen), chosen[-1][0]

    def slots_ready(self, info: NodeInfo, need: int) -> list[float]:
        """When each of a node's ``need``-card slots will carry nothing a whole-GPU HP worker
        cannot reclaim (an HP share; a fractional spot job's without
        ``evict_shared_cards``), by those jobs' known run times (inf if one is unknown: a
        live job runs until it exits): the k-th slot when k x ``need`` of its cards have.
        Each slot has its own time: a node half held by a long HP job holds a worker now
        and a second one only when that job ends."""
        pods, jobs = self.books.pods, self.books.jobs
        until = []
        for gpu in self.books.cluster.nodes[info.name].gpus:
            end = -math.inf
            for owner in gpu.allocs:
                pod = pods.get(owner)
                jid = None if pod is None else pod.job or pod.pending_job
                if jid is None:
                    continue  # an idle pod: reclaimed for the asking
                held = jobs[jid]
                if held.job_class is JobClass.SPOT and (
                    not held.fractional or self.config.evict_shared_cards
                ):
                    continue  # a victim
                known = held.spec.duration is not None
                ran = held.run_start + held.overhead + held.remaining if known else math.inf
                end = max(end, ran)
            until.append(end)
        until.sort()
        return until[need - 1 :: need]
