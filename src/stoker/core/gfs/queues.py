"""Queue orders and the per-class queues of the hp/spot scheduler (one per GPU pool)."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from stoker.core.model import EPS, Job, JobClass
from stoker.core.shares import FairQueue, TenantShares

_SPOT = JobClass.SPOT


@dataclass(frozen=True, slots=True)
class QueueOrder:
    """Which queued job of one class a pass tries first, and what a failure does.

    ``by_size``: the largest per-worker request first; ``fewer_workers``: among spot jobs
    of one request, fewer workers first (GFS and Chronus; HP ties go by time);
    ``stop``: the first job that cannot be placed ends its class's pass (Lyra, YARN-CS,
    FGD), else only the jobs of its request are skipped and smaller ones still tried (GFS's
    skip rule); ``at_back``: a re-queued job queues at its re-queue time (the authors'
    lists that are appended to and never sorted by submit time), else at its submit time.
    A spot job over the quota is passed
    over, never a failure (as in every policy of the authors').
    """

    name: str
    by_size: bool
    fewer_workers: bool
    stop: bool
    at_back: bool


QUEUE_ORDERS: dict[str, QueueOrder] = {
    # GFS and Chronus (policy/gfs.py, chronus.py): HP (-request, submit), spot (-request,
    # workers, submit), a failed request skipped
    "size": QueueOrder("size", by_size=True, fewer_workers=True, stop=False, at_back=False),
    # Lyra (lyra.py): -request only, stable over the list's order; the first failure stops
    "size-stop": QueueOrder(
        "size-stop", by_size=True, fewer_workers=False, stop=True, at_back=True
    ),
    # YARN-CS and FGD (fifo_spot.py, fgd.py): arrival order, the first failure stops
    "fifo": QueueOrder("fifo", by_size=False, fewer_workers=False, stop=True, at_back=True),
    # FGD as released (fgd.py): FIFO, an evicted spot job back at its submit time
    "fifo-submit": QueueOrder(
        "fifo-submit", by_size=False, fewer_workers=False, stop=True, at_back=False
    ),
}


class ClassQueue:
    """One class's queue in one GPU pool, in buckets of sorted entries.

    With the skip rule a bucket is one per-worker request (largest first; later jobs of a
    bucket fail as its first did, so a failure skips the bucket); with ``stop`` a bucket is
    one total GPU count, so the jobs within a spot quota are the heads of the buckets at or
    below it, and a pass takes the first of those heads in the queue's order. The heads
    are kept sorted in that order (:meth:`first`), so a pass (after every event) does not
    merge every bucket's head: an HP backlog holds hundreds of sizes.

    With tenant shares (``fair``, and ``cost``: a job's dominant share) a job's fair tag
    stands where its submit time would (:class:`~stoker.core.shares.FairQueue`): the
    order's size rule still comes first, tenants interleave within it. ``tenants``: the
    GPUs each tenant has queued here (what an HP guarantee wanted now is).
    """

    def __init__(
        self,
        order: QueueOrder,
        job_class: JobClass,
        fair: FairQueue | None = None,
        cost: Callable[[Job], float] | None = None,
    ) -> None:
        self.order = order
        self.fair = fair
        self.cost = cost
        self.tenants: dict[str, float] = {}
        self._queued: dict[str, tuple[str, float]] = {}  # job -> (tenant, GPUs)
        self.fewer_workers = order.fewer_workers and job_class is _SPOT
        self.buckets: dict[float, list[tuple[tuple[float, ...], str]]] = {}
        self.keys: list[float] = []
        self.size = 0
        # (head entry, bucket) per bucket, in the queue's order
        self._heads: list[tuple[tuple[tuple[float, ...], str], float]] = []

    def bucket(self, job: Job) -> float:
        return job.gpus if self.order.stop else -job.per_worker

    def entry(self, job: Job, at: float) -> tuple[tuple[float, ...], str]:
        rank = -job.per_worker if self.order.by_size else 0.0
        workers = float(job.workers) if self.fewer_workers else 0.0
        return (rank, workers, at), job.id

    def push(self, job: Job, now: float, requeue: bool = False) -> None:
        """Queue by submit time, or a re-queued job at ``now`` where the order says so (by
        fair tag, given at its first push or then, with tenant shares)."""
        at = now if requeue and self.order.at_back else job.submitted
        if self.fair is not None and self.cost is not None:
            tag = job.fair_tag
            if tag is None or (requeue and self.order.at_back):
                tag = self.fair.tag(job, self.cost(job))
            at = tag
        tenant = job.spec.tenant
        self._queued[job.id] = (tenant, job.gpus)
        self.tenants[tenant] = self.tenants.get(tenant, 0.0) + job.gpus
        k = self.bucket(job)
        entry = self.entry(job, at)
        entries = self.buckets.get(k)
        if entries is None:
            entries = self.buckets[k] = []
            bisect.insort(self.keys, k)
        elif entry < entries[0]:
            self._unhead(entries[0], k)
        else:
            bisect.insort(entries, entry)
            self.size += 1
            return
        entries.insert(0, entry)
        bisect.insort(self._heads, (entry, k))
        self.size += 1

    def remove(self, k: float, entry: tuple[tuple[float, ...], str]) -> None:
        tenant, gpus = self._queued.pop(entry[1])
        left = self.tenants[tenant] - gpus
        if left < EPS:
            del self.tenants[tenant]
        else:
            self.tenants[tenant] = left
        entries = self.buckets[k]
        i = bisect.bisect_left(entries, entry)
        del entries[i]
        self.size -= 1
        if i == 0:
            self._unhead(entry, k)
            if entries:
                bisect.insort(self._heads, (entries[0], k))
        if not entries:
            del self.buckets[k]
            self.keys.remove(k)

    def _unhead(self, entry: tuple[tuple[float, ...], str], k: float) -> None:
        del self._heads[bisect.bisect_left(self._heads, (entry, k))]

    def first(self, room: float) -> tuple[float, tuple[tuple[float, ...], str]] | None:
        """The first queued job, in the queue's order, of a bucket at most ``room`` (a spot
        pass: the GPUs its quota still admits), as (bucket, entry); None if none."""
        for entry, k in self._heads:
            if k <= room + EPS:
                return k, entry
        return None

    def drop(self, job: Job) -> None:
        """Take a cancelled job out (O(its bucket)): a finished job may be forgotten, so
        none may wait here for a pass to drop it."""
        k = self.bucket(job)
        self.remove(k, next(e for e in self.buckets[k] if e[1] == job.id))

    def heads(self) -> list[str]:
        return [self.buckets[k][0][1] for k in self.keys]

    def check(self) -> None:
        """Raise if the heads kept in order are not the buckets' heads."""
        if self._heads != sorted((entries[0], k) for k, entries in self.buckets.items()):
            raise AssertionError(f"queue heads {self._heads} are stale")


def gpu_pool_queues(
    order: QueueOrder, gpu_pool: str, shares: TenantShares | None, capacity: Mapping[str, int]
) -> dict[JobClass, ClassQueue]:
    """A new GPU pool's HP and spot queues; with tenant shares in fair order, a job's cost
    its share of the GPU pool's GPUs (``capacity``: GPUs per GPU pool, read when a job is
    queued)."""
    if shares is None:
        return {cls: ClassQueue(order, cls) for cls in (JobClass.HP, _SPOT)}

    def cost(job: Job) -> float:
        return job.gpus / max(capacity.get(gpu_pool, 0), 1)

    return {cls: ClassQueue(order, cls, FairQueue(shares), cost) for cls in (JobClass.HP, _SPOT)}
