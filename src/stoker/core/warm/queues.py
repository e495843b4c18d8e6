"""The warm pools' queues: pool jobs waiting per profile, and the room being freed for them.

One :class:`PoolQueues` per :class:`~stoker.core.warm.WarmPools`: each profile's queue in
submit order (a job put back goes to the head), the queued jobs of each (profile, tenant,
tag), the GPUs they ask for (what the queue-driven warm budget reads), the idle pods
stopping to make room for a queued job (its reclaim), and whether something changed that
may let a blocked queue move (``dirty``). With tenant shares a profile's queue is in fair
order across tenants (:class:`~stoker.core.shares.FairQueue`) instead of submit order.
"""

from __future__ import annotations

from collections.abc import Mapping

from stoker.core.books import Books
from stoker.core.model import Job, JobClass, JobState, Pod, PodState
from stoker.core.shares import FairQueue, TenantShares, dominant_share

Key = tuple[str, str, str]  # (profile, tenant, reuse tag)


class PoolQueues:
    """Queued pool jobs per profile, and the reclaims under way for them.

    ``queues``: per profile, its queued job ids in order; ``pairs``: the same per (profile,
    tenant, tag); ``fresh``: the keys whose pods just turned warm while a job of theirs is
    queued (a pod turning warm serves a queued job of its own caller before any reclaim);
    ``queued_gpus``: the GPUs the queued jobs ask for; ``reclaim``: job -> the pods stopping
    to make room for it (``reclaim_by_pod`` the other way). ``dirty``: set when something
    changed that may let a blocked queue move; a busy cluster with a waiting queue then pays
    for placement only when it can succeed. ``fair``: per profile, the fair queueing tags
    when tenants have shares (a job put back keeps its tag, so its place).
    """

    def __init__(self, books: Books, shares: TenantShares | None) -> None:
        self.books = books
        self.profiles = profiles = books.profiles
        # per profile, its fair queueing tags (None: submit order)
        self.fair = {p: FairQueue(shares) for p in profiles} if shares is not None else None
        self.queues: dict[str, dict[str, None]] = {p: {} for p in profiles}
        self.pairs: dict[Key, dict[str, None]] = {}
        self.fresh: dict[Key, None] = {}
        self.queued_gpus = 0.0
        self.reclaim: dict[str, set[str]] = {}
        self.reclaim_by_pod: dict[str, str] = {}
        self.dirty = True

    def queued(self, profile: str | None = None) -> list[str]:
        """Queued job ids, in queue order."""
        names = [profile] if profile else list(self.queues)
        return [j for name in names for j in self.queues.get(name, {})]

    def head(self, profile: str) -> str | None:
        """The first queued job of ``profile``."""
        return next(iter(self.queues[profile]), None)

    def enqueue(self, job: Job, front: bool = False) -> None:
        """Queue a job at the tail, or at the head when it is put back (its place was
        taken before the jobs queued behind it)."""
        profile = job.spec.profile
        key = (profile, *job.pair)
        if self.fair is not None:
            if job.fair_tag is None:
                spec = self.profiles[profile]
                cost = dominant_share(job, spec, spec.gpu_model, self.books.cluster)
                self.fair[profile].tag(job, cost)
            self.queues[profile] = self._in_order(self.queues[profile], job)
            self.pairs[key] = self._in_order(self.pairs.get(key, {}), job)
            self.dirty = True
        elif front:
            self.queues[profile] = {job.id: None, **self.queues[profile]}
            self.pairs[key] = {job.id: None, **self.pairs.get(key, {})}
            self.dirty = True
        else:
            self.queues[profile][job.id] = None
            self.pairs.setdefault(key, {})[job.id] = None
        self.queued_gpus += self.profiles[job.spec.profile].gpu_demand * job.spec.workers

    def _in_order(self, queue: dict[str, None], job: Job) -> dict[str, None]:
        """``queue`` with ``job`` in its place by fair tag (after equal tags)."""
        last = next(reversed(queue), None)
        if last is None or self._tag(last) <= self._tag(job.id):
            queue[job.id] = None
            return queue
        return dict.fromkeys(sorted([*queue, job.id], key=self._tag))

    def _tag(self, job_id: str) -> float:
        tag = self.books.jobs[job_id].fair_tag
        assert tag is not None  # every job of a fair queue is tagged as it is queued
        return tag

    def dequeue(self, job: Job, served: bool = False) -> None:
        """Take a job out of its queue (``served``: placed; else cancelled or set aside);
        room being freed for it goes on to the next (:meth:`_hand_on_reclaim`)."""
        if served and self.fair is not None:
            self.fair[job.spec.profile].served(job)
        queue = self.queues[job.spec.profile]
        head = next(iter(queue), None)
        if queue.pop(job.id, False) is None:
            self.queued_gpus -= self.profiles[job.spec.profile].gpu_demand * job.spec.workers
            if self.queued_gpus < 1e-9:
                self.queued_gpus = 0.0
            if queue and (head == job.id or head in self.reclaim):
                # the job may have held the queue: those behind it may go now
                self.dirty = True
            key = (job.spec.profile, *job.pair)
            same = self.pairs[key]
            del same[job.id]
            if not same:
                del self.pairs[key]
        self._hand_on_reclaim(job)

    def note_warm(self, key: Key) -> None:
        """A pod of (profile, tenant, tag) turned warm: a queued job of its may take it."""
        if key in self.pairs:
            self.fresh[key] = None

    def start_reclaim(self, job_id: str, pods: set[str]) -> None:
        """``pods`` are stopping to make room for queued job ``job_id``."""
        for pid in pods:
            self.reclaim_by_pod[pid] = job_id
        self.reclaim[job_id] = pods

    def victim_gone(self, pod_id: str) -> None:
        """A pod left the cluster: if it was a reclaim victim, its room is free."""
        job_id = self.reclaim_by_pod.pop(pod_id, None)
        pods = self.reclaim.get(job_id) if job_id is not None else None
        if pods is not None:
            pods.discard(pod_id)
            if not pods:
                del self.reclaim[job_id]  # type: ignore[arg-type]

    def _hand_on_reclaim(self, job: Job) -> None:
        """A job left the queue with victims still stopping for it (placed elsewhere or
        cancelled): their room goes to the next queued job of its profile without a reclaim
        of its own, else to whoever takes it first."""
        pods = self.reclaim.pop(job.id, None)
        if not pods:
            return
        for job_id in self.queues[job.spec.profile]:
            if job_id not in self.reclaim:
                self.reclaim[job_id] = pods
                for pid in pods:
                    self.reclaim_by_pod[pid] = job_id
                return
        for pid in pods:
            del self.reclaim_by_pod[pid]

    def check(self, jobs: Mapping[str, Job], pods: Mapping[str, Pod]) -> None:
        """Raise if the queues disagree with the jobs' states (tests, after every event):
        every queued pool job in its profile's queue, no other (one set aside is in none)."""
        for job in jobs.values():
            if job.job_class is not JobClass.POOL:
                continue
            queued = job.id in self.queues[job.spec.profile]
            if (job.state is JobState.QUEUED) != queued:
                raise AssertionError(f"job {job.id} state {job.state} but queued={queued}")
        for job_id, victims in self.reclaim.items():
            if jobs[job_id].state is not JobState.QUEUED:
                raise AssertionError(f"reclaim for job {job_id} in state {jobs[job_id].state}")
            for pid in victims:
                if pods[pid].state is not PodState.STOPPING:
                    raise AssertionError(f"reclaim victim {pid} is {pods[pid].state}")
