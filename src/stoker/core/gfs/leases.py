"""Chronus's leases (``chronus.py``): every running job holds its cards for one lease.

At each lease boundary every running job, HP and spot, hands its lease back and the
round's pass re-places both queues; a job re-placed on the very cards its pods hold keeps
those pods and restarts in them (no pod stop, start or bind beyond the re-bind). This part
keeps the rounds' clocks and the returned jobs' pods; the scheduler's pass places.
"""

from __future__ import annotations

import math
from typing import Protocol

from stoker.core.actions import Action, BindJob, KillJob
from stoker.core.books import Books
from stoker.core.gfs.config import GFSConfig
from stoker.core.gfs.periods import GuaranteePeriods
from stoker.core.model import EPS, Cluster, Failure, Job, JobClass, JobState, Pod
from stoker.core.ports import IdleRoom

_HP, _SPOT = JobClass.HP, JobClass.SPOT


class LeaseHost(Protocol):
    """What the leases ask of the hp/spot scheduler."""

    books: Books
    cluster: Cluster
    idle: IdleRoom
    jobs: dict[str, Job]
    pods: dict[str, Pod]
    gpu_pools: dict
    placement: dict[str, list[tuple[str, str, float]]]
    periods: GuaranteePeriods

    def gpu_pool_of(self, job: Job) -> str: ...

    def queued(self, gpu_pool: str | None = None) -> int: ...

    def release(self, job: Job, refresh: bool = True) -> None: ...

    def sync(self) -> None: ...

    def requeue(
        self, job: Job, reason: Failure, now: float, out: list[Action], *, lease: bool = False
    ) -> None: ...

    def stop_pod(self, pod: Pod, reason: str, now: float, out: list[Action]) -> None: ...


class Leases:
    """The rounds and leases of Chronus (:class:`~stoker.core.gfs.config.LeaseConfig`;
    none without it).

    ``closed``: HP jobs whose remaining lease returns are charged at their next start.
    ``parked``: a lease flush's returned jobs, the pods each keeps until the round's pass
    re-places it (on the same cards: it restarts in them; else they stop), and the ranks of
    its returned run still to report their exit. ``rebind``: jobs re-placed in the pods they
    kept, waiting for those ranks before the re-bind.
    """

    def __init__(self, host: LeaseHost, config: GFSConfig, start: float) -> None:
        self.s = host
        self.config = config
        self.next_round = start
        self.next_lease = start + (config.leases.lease_s if config.leases else 0.0)
        self.closed: dict[str, None] = {}
        self.parked: dict[str, tuple[list[str], set[int]]] = {}
        self.rebind: dict[str, set[int]] = {}

    def flush(self, now: float, out: list[Action]) -> None:
        """Chronus (``chronus.py``, "Flush All Lease"): every running job, HP and spot, gives
        its lease back at each lease boundary and the round re-places both queues.

        After the last arrival, in a GPU pool where nothing is queued, the HP jobs return this
        lease and are charged every later one at their start (:meth:`charge_closed`):
        nothing can queue there any more, so each later return re-places every job at once,
        and flushing them again and again (every 20 minutes, for the months the longest HP
        jobs run past the window) would change nothing but the simulation's cost."""
        end = self.config.arrivals_end
        quiet = set()
        if end is not None and now + EPS >= end and self.closable():
            quiet = {gpu_pool for gpu_pool in self.s.gpu_pools if not self.s.queued(gpu_pool)}
        closed = self.closed
        # the closed jobs of the tail are left out before the sort (thousands, every lease)
        for jid in sorted(j for j in self.s.placement if j not in closed):
            job = self.s.jobs[jid]
            if job.state is JobState.RUNNING:
                if job.job_class is _HP and self.s.gpu_pool_of(job) in quiet:
                    self.closed[jid] = None
                self.return_lease(job, now, out)

    def closable(self) -> bool:
        """Leases flushed exactly every ``lease_s`` (a whole number of rounds), each
        return costing less than a round: the closed form of :meth:`charge_closed`."""
        c = self.config.leases
        assert c is not None  # only under leases
        rounds = c.lease_s / c.round_s
        return abs(rounds - round(rounds)) < 1e-9 and c.restart_s < c.round_s

    def charge_closed(self, job: Job, now: float) -> None:
        """A job whose lease returns are charged at once starts now: it owes the restart
        of every lease boundary it will run across (``restart_s`` each, the next at
        ``next_lease``), so its run is what returning each lease would have made it."""
        c = self.config.leases
        assert c is not None  # only under leases
        lease, restart = c.lease_s, c.restart_s
        work = job.remaining
        # the first lease: from now to the next boundary, less this start's restart
        first = self.next_lease - now - restart
        if work <= first:
            return
        # every later lease does ``lease - restart`` of work (integral seconds here: exact)
        rest = work - first
        job.overhead += restart * math.ceil(rest / (lease - restart))

    def return_lease(self, job: Job, now: float, out: list[Action]) -> None:
        """Chronus: a running job (HP or spot) hands its lease back and is re-queued; its
        work is kept, it owes the lease restart. Not an eviction: no failed period (the
        spot periods it earned are settled as successes)."""
        job.remaining = max(0.0, job.remaining - job.useful_since_start(now))
        job.overhead = self.config.leases.restart_s if self.config.leases else 0.0
        if job.job_class is _SPOT:
            self.s.periods.settle_ok(job, now, self.s.periods.earned(job, now))
            self.s.periods.forget(job.id)
        self.s.release(job, refresh=False)
        out.append(KillJob(job.id, Failure.PREEMPTED, self.config.grace_s))
        # as the authors' ``release_resource``: the cards are free for the round's pass at
        # once (its pods' shares with them); the pods stay until the pass has re-placed it
        running = set(range(job.workers)) - set(job.ranks_exited)
        for pid in job.pods:
            pod = self.s.pods[pid]
            pod.job = None
            for gid in pod.gpus:
                self.s.cluster.release(gid, pid)
            self.s.idle.refresh_cards(pod.gpus)
        self.parked[job.id] = (job.pods, running)
        job.pods = []
        # the node index follows each return in turn (the order its ties are broken in):
        # the job's nodes, touched by its freed cards, refreshed once with the books above
        self.s.sync()
        self.s.requeue(job, Failure.PREEMPTED, now, out, lease=True)

    def kept_pods(
        self,
        job: Job,
        plan: list[tuple[str, tuple[str, ...], float]],
        now: float,
        out: list[Action],
    ) -> list[Pod] | None:
        """A returned job re-placed on the very cards its pods hold (each worker on its
        own; the share is the job's, so the same) keeps those pods; placed elsewhere, they
        stop."""
        parked = self.parked.pop(job.id, None)
        if parked is None:
            return None
        pods = [self.s.pods[pid] for pid in parked[0]]
        if len(pods) == len(plan) and all(
            pod.node == node and tuple(pod.gpus) == cards
            for pod, (node, cards, _) in zip(pods, plan, strict=True)
        ):
            self.rebind[job.id] = parked[1]
            return pods
        for pod in pods:
            self.s.stop_pod(pod, "lease_returned", now, out)
        return None

    def hold_again(self, pod: Pod, share: float) -> Pod:
        """A kept pod takes its cards back (its job's run restarts in it)."""
        for gid in pod.gpus:
            self.s.cluster.allocate(gid, pod.id, share)
        self.s.idle.refresh_cards(pod.gpus)
        return pod

    def restart_in_place(self, job: Job, now: float, out: list[Action]) -> None:
        """A job re-placed in the pods it kept binds into them again once the ranks of its
        returned run have exited (at once when none is left)."""
        for pid in job.pods:
            self.s.pods[pid].job = job.id
        if not self.rebind[job.id]:
            self._bind_again(job, now, out)

    def old_rank_exited(self, job: Job, rank: int, now: float, out: list[Action]) -> None:
        """A rank of a placed job's previous run exited: a job restarting in the pods it
        kept binds into them when the last one has."""
        waiting = self.rebind.get(job.id)
        if waiting is None:
            return
        waiting.discard(rank)
        if not waiting:
            self._bind_again(job, now, out)

    def _bind_again(self, job: Job, now: float, out: list[Action]) -> None:
        del self.rebind[job.id]
        self.s.books.move_job(job, JobState.BINDING, now)
        job.pod_ready = now
        out.append(BindJob(job.id, tuple(job.pods)))

    def stop_parked(self, now: float, out: list[Action]) -> None:
        """After the round's pass: the pods of returned jobs it did not re-place stop."""
        for pods, _ in self.parked.values():
            for pid in pods:
                self.s.stop_pod(self.s.pods[pid], "lease_returned", now, out)
        self.parked.clear()
