"""The scheduling pass over one GPU pool's queues, and what a start attempt comes to.

HP then spot, each class in its queue's order (:class:`~stoker.core.gfs.queues.QueueOrder`):
GFS's skip rule (a failed request's bucket is skipped, smaller ones still tried) or the
baselines' stop rule (the first failure ends the class's pass), with EASY backfill beside a
reservation. Each job is tried by the scheduler (:meth:`PassHost.try_start`), which answers
with an :class:`Attempt`: a code, the part that decided, a reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Protocol

from stoker.core.actions import Action
from stoker.core.gfs.admission import SpotAdmission
from stoker.core.gfs.config import GFSConfig
from stoker.core.gfs.queues import ClassQueue
from stoker.core.gfs.reservations import Reservations, ends_by
from stoker.core.model import EPS, Job, JobClass, JobState

_HP, _SPOT = JobClass.HP, JobClass.SPOT


class Code(Enum):
    """What one start attempt came to (the Kubernetes framework's ``Status`` code)."""

    STARTED = "started"
    QUOTA = "quota"  # over the spot quota
    NO_ROOM = "no-room"  # no room now (pods may be stopping to make it)
    HOLD = "hold"  # room is being freed for a job, no spot job takes it
    SHARE = "share"  # HP past its tenant's guarantee, on room another tenant wants


class Part(StrEnum):
    """The part of the hp/spot scheduler that decided an attempt."""

    ADMISSION = "admission"
    PLACEMENT = "placement"
    RECLAIM = "reclaim"


@dataclass(frozen=True, slots=True, eq=False)
class Attempt:
    """What one start attempt came to, which part decided it, and why in a few words (as
    the Kubernetes scheduling framework's ``Status``). The outcomes are the constants
    below, made once: a pass tries thousands of jobs, so none is built per attempt, and
    the pass compares codes by identity (``eq=False``)."""

    code: Code
    part: Part
    reason: str


STARTED = Attempt(Code.STARTED, Part.PLACEMENT, "placed on free room")
OVER_QUOTA = Attempt(Code.QUOTA, Part.ADMISSION, "over its GPU pool's spot quota")
OVER_SHARE = Attempt(
    Code.SHARE, Part.ADMISSION, "past its tenant's guarantee, on room another tenant wants"
)
HOLD = Attempt(Code.HOLD, Part.RECLAIM, "room is being freed for another job")
AWAITING = Attempt(Code.NO_ROOM, Part.RECLAIM, "pods are stopping to make its room")
NO_ROOM_STILL = Attempt(Code.NO_ROOM, Part.PLACEMENT, "no room: nothing changed since it failed")
TOO_FEW_SLOTS = Attempt(Code.NO_ROOM, Part.PLACEMENT, "too little room for its workers")
NO_ROOM = Attempt(Code.NO_ROOM, Part.PLACEMENT, "no room now")


def _order(item: tuple[float, tuple[tuple[float, ...], str]]) -> tuple[tuple[float, ...], str]:
    return item[1]  # a queue's order: by entry, whatever its bucket


class PassHost(Protocol):
    """What the pass asks of the hp/spot scheduler."""

    jobs: dict[str, Job]
    queues: dict[str, dict[str, ClassQueue]]
    reservations: Reservations
    admission: SpotAdmission
    awaiting: dict[str, set[str]]

    def gpu_pool_of(self, job: Job) -> str: ...

    def try_start(self, job: Job, now: float, out: list[Action], evict: bool = True) -> Attempt: ...

    def may_reserve(self, job: Job, now: float) -> bool: ...

    def reserve(self, job: Job, gpu_pool: str) -> None: ...

    def unreserve(self, job: Job) -> None: ...


class QueuePass:
    """One pass over a GPU pool's HP and spot queues (:meth:`run`)."""

    def __init__(self, host: PassHost, config: GFSConfig) -> None:
        self.s = host
        self.config = config

    def run(self, gpu_pool: str, now: float, out: list[Action]) -> None:
        """HP then spot, each class in its queue's order (failures do not cross classes).
        With a reservation policy the pass's first HP job in queue order that may reserve
        does, as soon as the GPU pool holds no reservation: at once, or after the HP pass
        where the holder started in it (the reservation goes to the queue's head, not to
        whichever job failed after the holder started); with ``smaller_first``
        after the HP pass, and not while a smaller HP job waits."""
        for cls in (_HP, _SPOT):
            queue = self.s.queues[gpu_pool][cls]
            if queue.order.stop:
                self._stop(queue, gpu_pool, now, out)
            else:
                self._skip(queue, now, out)
            if cls is _HP and self.s.reservations.candidates:
                job = self.s.reservations.candidates.pop(gpu_pool, None)
                if (
                    job is not None
                    and gpu_pool not in self.s.reservations.held
                    and not self.s.reservations.smaller_waits(job, queue)
                ):
                    self.s.reserve(job, gpu_pool)
        held = self.s.reservations.held.get(gpu_pool)
        if held is not None and self.s.reservations.smaller_waits(
            self.s.jobs[held[0]], self.s.queues[gpu_pool][_HP]
        ):
            # held only while no smaller HP job waits: given up after the pass, so the next
            # pass offers the nodes to HP first (the holder reserves again once none waits)
            self.s.unreserve(self.s.jobs[held[0]])

    def _skip(self, queue: ClassQueue, now: float, out: list[Action]) -> None:
        """GFS's skip rule: a job that cannot start skips the rest of its request's bucket
        (they would fail alike: spot of one request by fewer workers first, so later ones
        ask at least as much of the quota), smaller requests are still tried."""
        for k in list(queue.keys):
            while k in queue.buckets:
                entry = queue.buckets[k][0]
                job = self.s.jobs[entry[1]]
                if job.state is not JobState.QUEUED:
                    queue.remove(k, entry)  # cancelled while queued
                    continue
                result = self.s.try_start(job, now, out)
                if result.code is Code.STARTED:
                    queue.remove(k, entry)
                    continue
                if result.code is Code.HOLD:
                    return
                if result.code is Code.SHARE:
                    later = [(k, e) for e in queue.buckets[k][1:]]
                    self._other_tenants(queue, later, job, now, out)
                if self.s.reservations.held:
                    self._backfill(queue, k, job, now, out)
                break

    def _other_tenants(
        self,
        queue: ClassQueue,
        later: list[tuple[float, tuple[tuple[float, ...], str]]],
        head: Job,
        now: float,
        out: list[Action],
    ) -> None:
        """``head`` was held back by its tenant's share, not by room: the ``later`` jobs
        (bucket, entry) of other tenants may still go, in order, until one fails otherwise
        (with the skip rule, the rest of its bucket would fail alike; with the stop rule,
        that failure ends the pass)."""
        held_back = {head.spec.tenant}
        for k, entry in later:
            job = self.s.jobs[entry[1]]
            if job.state is not JobState.QUEUED or job.spec.tenant in held_back:
                continue
            result = self.s.try_start(job, now, out)
            if result.code is Code.STARTED:
                queue.remove(k, entry)
            elif result.code is Code.SHARE:
                held_back.add(job.spec.tenant)
            else:
                return

    def _backfill(
        self, queue: ClassQueue, k: float, head: Job, now: float, out: list[Action]
    ) -> None:
        """The skip rule's premise (a bucket's later jobs fail as its head did) does not
        hold beside a reservation: a later job that ends before the reserved nodes drain
        may go there. Try those (by their known run times) in the bucket's order.

        Every job tried here sees the same nodes (none reserved against it) and the same
        quota, so once one fails acting on nothing, a later one asking as much fails alike
        and is not tried: as many workers where it found no room, as many GPUs where it
        was over the quota. An HP job
        that could be the pass's reservation candidate is tried still. Spot jobs of a
        bucket go by their workers, so the first such failure ends the spot bucket
        (Philly: thousands of 1-GPU HP and spot jobs were tried one by one at every
        pass)."""
        gpu_pool = self.s.gpu_pool_of(head)
        held = self.s.reservations.held.get(gpu_pool)
        if held is None:
            return
        no_room = over_quota = math.inf  # the fewest workers, the fewest GPUs that failed
        for entry in queue.buckets[k][1:]:
            job = self.s.jobs[entry[1]]
            if job.state is not JobState.QUEUED or not ends_by(job, now, held[2]):
                continue
            if job.workers >= no_room or job.gpus >= over_quota - EPS:
                if job.job_class is _SPOT and queue.fewer_workers:
                    return  # the later ones ask at least as much
                if job.job_class is _SPOT:
                    continue
                if gpu_pool in self.s.reservations.candidates or not self.s.may_reserve(job, now):
                    if no_room <= 1 and gpu_pool in self.s.reservations.candidates:
                        return  # every later job fails alike
                    continue
            acted = len(out)
            reserving = self.config.reservation
            free_only = reserving is not None and reserving.backfill_free
            result = self.s.try_start(job, now, out, evict=not free_only)
            if result.code is Code.STARTED:
                queue.remove(k, entry)
            elif result.code is Code.HOLD:
                return  # room is being freed for a job: no spot job starts
            elif len(out) == acted and job.id not in self.s.awaiting:
                if result.code is Code.NO_ROOM:
                    no_room = min(no_room, job.workers)
                else:  # over the spot quota
                    over_quota = min(over_quota, job.gpus)

    def _stop(self, queue: ClassQueue, gpu_pool: str, now: float, out: list[Action]) -> None:
        """The queue's order among the jobs within the spot quota (every job for HP); the
        first that cannot be placed ends the pass."""
        while queue.size:
            room = (
                self.s.admission.room(gpu_pool, now)
                if queue is self.s.queues[gpu_pool][_SPOT]
                else math.inf
            )
            best = queue.first(room)
            if best is None:
                return
            k, entry = best
            job = self.s.jobs[entry[1]]
            if job.state is not JobState.QUEUED:
                queue.remove(k, entry)
                continue
            result = self.s.try_start(job, now, out)
            if result.code is Code.SHARE:  # not a failure of room: the other tenants' jobs go
                later = sorted(((b, e) for b in queue.keys for e in queue.buckets[b]), key=_order)
                self._other_tenants(queue, later[later.index((k, entry)) + 1 :], job, now, out)
            if result.code is not Code.STARTED:
                return
            queue.remove(k, entry)
