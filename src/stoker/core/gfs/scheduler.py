"""hp and spot jobs in the one core (GFS): queues, spot quota, placement, preemption.

A part of :class:`stoker.core.Core`, called only from its ``handle``. An hp or spot job is
a job with ``workers`` (each with its GPU request) placed all or nothing; it runs in one pod
per worker, started cold for it (``StartPod``), bound when every pod is ready
(``BindJob``), stopped when it ends. HP jobs never become victims. An HP job that fits
nowhere reclaims in one chain, cheapest first: idle standby and warm pods (free; on any
node, for any shape), then spot jobs chosen by the victim policy (GFS: eviction-rate
increase plus lost work), with the idle pods on the chosen node taken first. The room is
taken once the stopped pods are gone (their shares are held until the runtime confirms).
An evicted spot job is killed (``KillJob`` preempted, with the configured grace), its pods
stopped and the job re-queued (``JobRequeued``): it runs again, nothing is lost.
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING

import numpy as np

from stoker.core.actions import Action, BindJob, JobRequeued, KillJob, StartPod, StopPod
from stoker.core.gfs import passes
from stoker.core.gfs.admission import SpotAdmission
from stoker.core.gfs.asreleased import demand_gpus, fewest_workers, on_submit, shorten, unshorten
from stoker.core.gfs.config import GFSConfig
from stoker.core.gfs.invariants import check_books
from stoker.core.gfs.jobs import GuaranteeLedger, restart_overhead
from stoker.core.gfs.leases import Leases
from stoker.core.gfs.memo import SearchMemo
from stoker.core.gfs.nodes import NodeIndex
from stoker.core.gfs.passes import Attempt, Code, QueuePass
from stoker.core.gfs.periods import GuaranteePeriods
from stoker.core.gfs.placement import GangPlan, NodeInfo
from stoker.core.gfs.queues import QUEUE_ORDERS, ClassQueue, gpu_pool_queues
from stoker.core.gfs.reclaim import AwaitedRoom, ReclaimPlan, ReclaimPlanner
from stoker.core.gfs.reservations import Reservations
from stoker.core.model import EPS, Failure, Job, JobClass, JobState, Node, Pod, PodState
from stoker.core.shares import TenantShares
from stoker.core.waiting import GpuWait, SpotQuotaWait

if TYPE_CHECKING:
    from stoker.core.books import Books
    from stoker.core.ports import IdleRoom

_HP, _SPOT = JobClass.HP, JobClass.SPOT


# ---------------------------------------------------------------- the scheduler


def _per_node(place: list[tuple[str, str, float]]) -> dict[str, tuple[list[str], list[float]]]:
    """A placement's cards and shares per node, nodes in placement order (one pass: a gang
    of many workers made a scan of the placement per node quadratic)."""
    out: dict[str, tuple[list[str], list[float]]] = {}
    for node, gid, share in place:
        entry = out.get(node)
        if entry is None:
            entry = out[node] = ([], [])
        entry[0].append(gid)
        entry[1].append(share)
    return out


class HpSpotScheduler:
    """hp and spot jobs over the core's cluster; see the module docstring."""

    def __init__(
        self,
        books: Books,
        idle: IdleRoom,
        config: GFSConfig,
        start: float = 0.0,
        shares: TenantShares | None = None,
    ) -> None:
        self.books = books
        self.shares = shares  # tenants' fair order and HP guarantees (None: off)
        self.idle = idle  # the warm pools' idle pods, room HP may take
        self.cluster = books.cluster
        self.config = config
        self.jobs = books.jobs
        self.pods = books.pods
        # the nodes and GPU pools as this part reads them (the index's, shared)
        self.index = NodeIndex(books, config)
        self.nodes = self.index.nodes
        self.gpu_pools = self.index.gpu_pools
        self.node_jobs = self.index.node_jobs
        self._epoch = self.index.epoch
        self._grown = self.index.grown
        self.capacity: dict[str, int] = {}
        self.queues: dict[str, dict[str, ClassQueue]] = {}
        self.used: dict[str, dict[str, float]] = {}
        self.ledgers: dict[str, GuaranteeLedger] = {}
        self.running_spot: dict[str, dict[str, None]] = {}
        self.placement: dict[str, list[tuple[str, str, float]]] = {}  # job -> (node, gpu, share)
        self._dirty: dict[str, None] = {}
        self.memo = SearchMemo(self.index, idle, config)
        # the last failed free-room plan of an HP job: (job, now, GPU pool epoch, the plan of
        # its first workers, the worker that found no room)
        self._free_prefix: tuple[str, float, int, GangPlan, int] | None = None
        # HP jobs waiting for the pods stopped to make their room, and the reverse index
        self.awaited = AwaitedRoom()
        self.awaiting = self.awaited.jobs
        # ``hp_evict_after_s``: when HP jobs that found no room without evicting may evict
        # (a heap of (time, job); each job once, while it is in ``_evict_due``)
        self._evict_wake: list[tuple[float, str]] = []
        self._evict_due: set[str] = set()
        # GPU pools whose running HP GPUs changed since the core last asked (:meth:`hp_moved`)
        self._hp_moved: dict[str, None] = {}
        self._round_due = False
        self._round_at = -math.inf
        self._active = False  # an hp or spot job was ever submitted: the clocks run
        self._gate_seen = -math.inf  # the window's edges passed so far
        self.allocated = 0.0  # GPUs held by hp and spot jobs now
        # the parts: spot admission, the reclaim planner (reads, plans), the reservations
        # and Chronus's leases
        self.admission = SpotAdmission(self, config)
        self.periods = GuaranteePeriods(self, config, start)
        self.quota = self.admission.quota  # per GPU pool, the forecast's spot quota
        self.hp_reserve = self.admission.hp_reserve
        self.planner = ReclaimPlanner(self, idle, self.cluster, config)
        self.reservations = Reservations(books, self.gpu_pools, config)
        self.leases = Leases(self, config, start)
        self.passes = QueuePass(self, config)
        for node in self.cluster.nodes.values():
            self._add(node)
        for gpu_pool in self.gpu_pools:
            self._resize(gpu_pool)

    # ------------------------------------------------------------ the cluster

    def add_node(self, node: Node) -> None:
        """A node joined the cluster: its GPU pool gets its cards, and a GPU pool seen for the
        first time its queues and spot quota."""
        self._add(node)
        self._resize(node.gpu_model)
        self._grown[node.gpu_model] += 1  # room a failed search did not see

    def _add(self, node: Node) -> None:
        gpu_pool = node.gpu_model
        if self.index.add(node):  # a GPU pool seen for the first time
            order = QUEUE_ORDERS[self.config.queue]
            self.queues[gpu_pool] = gpu_pool_queues(order, gpu_pool, self.shares, self.capacity)
            self.used[gpu_pool] = {_HP: 0.0, _SPOT: 0.0}
            self.ledgers[gpu_pool] = GuaranteeLedger()
            self.running_spot[gpu_pool] = {}

    def remove_node(self, name: str) -> None:
        """A node left the cluster (nothing of hp or spot is placed there any more: the core
        failed its pods first)."""
        info = self.index.remove(name)
        held = self.reservations.held.get(info.gpu_pool)
        if held is not None and name in held[1]:
            self.unreserve(self.jobs[held[0]])  # the next failed search reserves afresh
        self._resize(info.gpu_pool)
        self._grown[info.gpu_pool] += 1

    def resize_node(self, name: str) -> None:
        """A node's cards changed in place (the core failed the pods on the cards it lost
        first, so those carried no share): the work on the cards it kept stays, its GPU pool's
        index and capacity follow, and new cards are room a failed search did not see."""
        info = self.nodes[name]
        held = self.reservations.held.get(info.gpu_pool)
        if held is not None and name in held[1]:
            self.unreserve(self.jobs[held[0]])  # its drain time was the old node's
        self.index.resize(info)
        self._resize(info.gpu_pool)

    def _resize(self, gpu_pool: str) -> None:
        """The GPU pool's capacity changed: its spot quota follows (from its forecast, if any)."""
        self.capacity[gpu_pool] = self.cluster.capacity.get(gpu_pool, 0)
        self.admission.set_quota(gpu_pool, self.capacity[gpu_pool])
        self._dirty[gpu_pool] = None

    # ------------------------------------------------------------ called by the core

    def hp_moved(self) -> list[str]:
        """The GPU pools whose running HP GPUs (:attr:`used`) changed since the last call (the
        warm budget's HP cap follows them: ``Core._follow_hp_cap``)."""
        moved = list(self._hp_moved)
        self._hp_moved.clear()
        return moved

    def submit(self, job: Job, now: float) -> None:
        """A new hp or spot job (the core checked that its shape fits its GPU pool)."""
        spec = job.spec
        gpu_pool = self.gpu_pool_of(job)
        self._active = True
        job.remaining = spec.duration or 0.0
        job.queued_since = now
        on_submit(job, self.config)  # ``gang_rule``: the workers it runs with
        self.queues[gpu_pool][job.job_class].push(job, now)
        self._dirty[gpu_pool] = None

    def withdraw(self, job: Job) -> None:
        """Take a queued job out of its queue: it can start nowhere on its GPU pool as it
        is now (the core sets it aside, :attr:`JobState.SET_ASIDE`)."""
        self.awaited.clear(job.id)  # what is stopping for it goes to whoever fits
        self.memo.forget(job.id)
        self.unreserve(job)
        gpu_pool = self.gpu_pool_of(job)
        self.queues[gpu_pool][job.job_class].drop(job)
        self._dirty[gpu_pool] = None

    def restore(self, job: Job) -> None:
        """A withdrawn job fits again: back in its queue where it stood (its submit time,
        or its re-queue time where the order queues re-queued jobs at the back)."""
        gpu_pool = self.gpu_pool_of(job)
        self.queues[gpu_pool][job.job_class].push(job, job.queued_since, requeue=True)
        self._dirty[gpu_pool] = None

    def queued_ids(self) -> list[str]:
        """Queued hp and spot job ids (every GPU pool and class; in no particular order)."""
        return [
            jid
            for classes in self.queues.values()
            for queue in classes.values()
            for entries in queue.buckets.values()
            for _, jid in entries
        ]

    def gpu_pool_of(self, job: Job) -> str:
        """The job's GPU pool (GPU model)."""
        return self.books.gpu_pool(job.spec)

    def reserved_nodes(self, gpu_pool: str) -> frozenset[str]:
        """The nodes of ``gpu_pool`` reserved for a waiting HP job (none without a
        reservation): until it starts, no other job's pod is placed there."""
        return self.reservations.nodes(gpu_pool)

    def freeing_room(self, gpu_pool: str) -> bool:
        """Whether pods are stopping in ``gpu_pool`` to make room for a waiting job: what they
        free is that job's, so nothing else (a spot job, a spare pod) may take it first."""
        return self._freeing_for(gpu_pool) is not None

    def _freeing_for(self, gpu_pool: str) -> str | None:
        """The first waiting job of ``gpu_pool`` that pods are stopping for (None: none)."""
        return self.awaited.freeing_for(gpu_pool, lambda j: self.gpu_pool_of(self.jobs[j]))

    def waiting(self, job: Job, now: float) -> SpotQuotaWait | GpuWait:
        """Why queued ``job`` has not started, by the tests :meth:`_try_start` makes, in
        its order (a pure read: nothing is searched or changed): pods stopping to make room
        for it or (for spot) for another job, the spot quota, else no room on its GPU pool's
        cards (beside a reservation for another HP job, if one holds nodes back from it)."""
        gpu_pool = self.gpu_pool_of(job)
        freeing = job.id if job.id in self.awaiting else None
        if freeing is None and job.job_class is _SPOT:
            freeing = self._freeing_for(gpu_pool)
        return self.admission.waiting(job, gpu_pool, freeing, now)

    def cancel(self, job: Job, now: float, out: list[Action]) -> None:
        self.leases.closed.pop(job.id, None)
        if job.state is JobState.QUEUED:
            self.awaited.clear(job.id)
            self.memo.forget(job.id)
            self.unreserve(job)
            self.queues[self.gpu_pool_of(job)][job.job_class].drop(job)
            self.books.end_job(job, Failure.CANCELLED, None, now, out)
            self._dirty[self.gpu_pool_of(job)] = None
        elif job.state is JobState.PLACED:
            self.release(job)
            self._stop_pods(job, "cancelled", now, out)
            self.books.end_job(job, Failure.CANCELLED, None, now, out)
        else:
            out.append(KillJob(job.id, Failure.CANCELLED))

    def pod_ready(self, pod: Pod, now: float, out: list[Action]) -> None:
        if pod.state is not PodState.STARTING or pod.pending_job is None:
            return
        job = self.jobs[pod.pending_job]
        pod.pending_job = None
        pod.job = job.id
        self._grown[self.gpu_pool_of(job)] += 1  # a ready pod's job may be a victim now
        self.books.move_pod(pod, PodState.ACTIVE, now)
        if job.state is JobState.PLACED and all(
            self.pods[p].state is PodState.ACTIVE for p in job.pods
        ):
            self.books.move_job(job, JobState.BINDING, now)
            job.pod_ready = now
            out.append(BindJob(job.id, tuple(job.pods)))

    def pod_failed(
        self, pod: Pod, reason: Failure, now: float, out: list[Action], retried: bool = True
    ) -> None:
        """A pod died: before its job ran the job is re-queued (not an eviction) if the
        failure is ``retried``; a running job, or one whose failure is not, ends with the
        typed reason."""
        job_id = pod.pending_job or pod.job
        self._gone(pod, now)
        if job_id is None:
            return
        job = self.jobs[job_id]
        unstarted = job.state in (JobState.PLACED, JobState.BINDING) and not job.ranks_started
        if retried and unstarted:
            self.release(job)
            self._stop_pods(job, "gang_failed", now, out)
            self.requeue(job, reason, now, out)
        elif job.state is not JobState.FINISHED and job.state is not JobState.QUEUED:
            self.finish(job, -1, reason, now, out)

    def pod_gone(self, pod: Pod, now: float) -> None:
        self._gone(pod, now)

    def unfit(self, pod: Pod, now: float, out: list[Action]) -> None:
        """A pod the runtime could not bind into: stopped (its job ends through the core).
        The job's run is over (its other ranks are killed), so its books go now, not when
        its last rank exits: once this pod is gone its cards would count both as free and
        as the job's (reclaim room, HP shares), and a dying spot job would be a victim."""
        if pod.job is not None:
            job = self.jobs[pod.job]
            self.release(job)
            self._dirty[self.gpu_pool_of(job)] = None
        self.stop_pod(pod, "bind_failed", now, out)

    def started(self, job: Job, now: float) -> None:
        """Every rank runs: the run's clock starts (guarantee periods, lost work)."""
        job.run_start = now
        self._grown[self.gpu_pool_of(job)] += 1  # a running spot job is a victim by its age

    def finish(
        self, job: Job, exit_code: int, failure: Failure | None, now: float, out: list[Action]
    ) -> None:
        """The run ended (every rank exited, or its pod died): settle its periods, end it,
        stop its pods."""
        gpu_pool = self.gpu_pool_of(job)
        self.release(job)
        if job.job_class is _SPOT and failure is None:
            ran = now - job.run_start
            last = ran - (ran // self.config.guarantee_s) * self.config.guarantee_s
            self.periods.settle_ok(job, now, self.periods.earned(job, now), last)
        self.periods.forget(job.id)
        self.leases.closed.pop(job.id, None)
        job.remaining = 0.0
        self._stop_pods(job, "job_ended", now, out)
        self.books.end_job(job, failure, exit_code, now, out)
        self._dirty[gpu_pool] = None

    def set_forecast(self, gpu_pool: str, mean: np.ndarray, var: np.ndarray) -> None:
        """The summed HP forecast of a GPU pool changed: a new spot quota."""
        self.admission.forecast[gpu_pool] = (mean, var)
        if gpu_pool in self.gpu_pools:
            self._resize(gpu_pool)

    def tick(self, now: float, out: list[Action]) -> None:
        edges = self._gate_edges()
        if edges and now + EPS >= edges[0]:
            self._gate_seen = now
            self._dirty.update(dict.fromkeys(self.gpu_pools))
        while self._evict_wake and self._evict_wake[0][0] <= now + EPS:
            _, jid = heapq.heappop(self._evict_wake)
            self._evict_due.discard(jid)
            job = self.jobs.get(jid)
            if job is not None and job.state.waiting:
                self._dirty[self.gpu_pool_of(job)] = None  # it may evict now
        if now + EPS >= self.periods.next_eta:
            self._dirty.update(dict.fromkeys(self.periods.feedback(now)))
        leases = self.config.leases
        if leases is not None and now + EPS >= self.leases.next_round:
            self.leases.next_round = now + leases.round_s
            self._round_due = True
            self._round_at = now
            gate = self.config.window
            in_window = gate is None or now >= gate[0]
            if now + EPS >= self.leases.next_lease and in_window:
                self.leases.next_lease = now + leases.lease_s
                self.leases.flush(now, out)
            self._dirty.update(dict.fromkeys(self.gpu_pools))

    def schedule(self, now: float, out: list[Action]) -> None:
        """The scheduling pass after every event (Chronus decides only in its rounds)."""
        self.sync()
        if self.config.leases is not None:
            # Chronus decides in its rounds; room freed at the round's instant (a lease
            # returned, its pods gone) is still that round's
            if not self._round_due and now > self._round_at + EPS:
                return
            self._round_due = False
        dirty, self._dirty = self._dirty, {}
        for gpu_pool in sorted(dirty):
            self.passes.run(gpu_pool, now, out)
        if self.leases.parked:
            self.leases.stop_parked(now, out)

    def next_deadline(self) -> float | None:
        """When the next Tick is due (eta feedback, the next Chronus round); None before any
        hp or spot job."""
        if not self._active:
            return None
        due = self.periods.next_eta
        if self._evict_wake:
            due = min(due, self._evict_wake[0][0])
        if self.config.leases is not None:
            due = min(due, self.leases.next_round)
        edges = self._gate_edges()
        return min(due, edges[0]) if edges else due

    def _gate_edges(self) -> list[float]:
        """The window's edges still ahead (the quota changes there: a pass is due)."""
        gate = self.config.window
        if gate is None:
            return []
        return [t for t in gate if t > self._gate_seen]

    def queued(self, gpu_pool: str | None = None) -> int:
        gpu_pools = [gpu_pool] if gpu_pool else list(self.gpu_pools)
        return sum(q.size for p in gpu_pools for q in self.queues[p].values())

    def eta(self, gpu_pool: str) -> float:
        """The GPU pool's eta (the spot quota's scale, moved by the eviction feedback)."""
        return self.config.quota.eta(gpu_pool)

    def spot_quota(self, gpu_pool: str) -> float:
        """The GPU pool's spot quota in force (:meth:`SpotAdmission.spot_quota`)."""
        return self.admission.spot_quota(gpu_pool)

    @property
    def spot_ok_gpu_s(self) -> float:
        """Spot GPU-seconds of the guarantee periods that succeeded so far (the authors'
        ``record_spot_succeed``)."""
        return self.periods.spot_ok_gpu_s

    @property
    def busy_cards(self) -> int:
        """Cards holding any share now (the authors' allocation metric)."""
        return self.index.busy_cards

    def frac_cards(self, info: NodeInfo) -> frozenset[str]:
        """A node's cards fractional spot work alone holds (:meth:`NodeIndex.frac_cards`)."""
        return self.index.frac_cards(info)

    def check(self) -> None:
        """Raise if an invariant fails (tests call it after every event)."""
        check_books(self)

    # ------------------------------------------------------------ the pass

    def try_start(self, job: Job, now: float, out: list[Action], evict: bool = True) -> Attempt:
        """Start ``job`` if it may and fits; else why not (:class:`~.passes.Code`: over the
        spot quota, room freed for an HP job, its tenant's share, no room; with a reason).
        Without ``evict`` an HP job takes free room and idle pods only."""
        gpu_pool = self.gpu_pool_of(job)
        if job.job_class is _HP and self.shares is not None:
            free = self.capacity[gpu_pool] - self.used[gpu_pool][_HP]
            queued = self.queues[gpu_pool][_HP].tenants
            if self.shares.borrows_wanted(job, gpu_pool, self.books.demand.current, queued, free):
                return passes.OVER_SHARE
        if job.job_class is _SPOT:
            if self.freeing_room(gpu_pool):
                return passes.HOLD  # room is being freed for a job: no other spot job takes it
            if self.admission.over_quota(job, gpu_pool, now):
                return passes.OVER_QUOTA
            state = self.memo.state(gpu_pool, now)
            if self.memo.failed(job.id, state):
                return passes.NO_ROOM_STILL
            plan = self._plan_free(job, now)
            if plan is None:
                # a card held only by standby pods is free for the asking: standby pods have
                # no keep-alive, so without this a spot job could wait behind them forever
                self._reclaim(job, now, out, standby_only=True)
                self._remember(job, gpu_pool, state, now)
                return passes.NO_ROOM
            self._start(job, plan, now, out)
            return passes.STARTED
        result = self._try_start_hp(job, gpu_pool, now, out, evict)
        if result.code is Code.NO_ROOM and self.may_reserve(job, now):
            first = self.reservations.candidates.setdefault(gpu_pool, job)
            # smaller HP jobs first: whether one waits is known only after the HP pass
            reserving = self.config.reservation
            later = reserving is not None and reserving.smaller_first
            if gpu_pool not in self.reservations.held and not later:
                self.reserve(first, gpu_pool)
        return result

    def _try_start_hp(
        self, job: Job, gpu_pool: str, now: float, out: list[Action], evict: bool = True
    ) -> Attempt:
        """An HP job's start: free room, else reclaim (``NO_ROOM`` while pods stop for it
        or nothing makes its room); without ``evict``, idle pods only."""
        if job.id in self.awaiting:
            return passes.AWAITING  # pods are stopping for it: nothing more goes meanwhile
        after = self.config.hp_evict_after_s
        if evict and after is not None and now - job.queued_since < after - EPS:
            evict = False  # not yet: a pass is due when it may
            if job.id not in self._evict_due:
                self._evict_due.add(job.id)
                wake = (job.queued_since + after, job.id)
                heapq.heappush(self._evict_wake, wake)
        state = self.memo.state(gpu_pool, now)
        if self.memo.failed(job.id, state, evict):
            return passes.NO_ROOM_STILL
        if self.gpu_pools[gpu_pool].hp_slots(job.per_worker) < fewest_workers(
            job, self.config
        ) or self.memo.no_room(job, gpu_pool):
            # too little room for its workers (cards without HP; free cards and those spot
            # work alone holds): every search fails until that grows
            self._remember(job, gpu_pool, state, now)
            return passes.TOO_FEW_SLOTS
        if (
            evict
            and self.config.hp_preempt_first
            and not job.fractional
            and job.workers == 1
            and self._reclaim(job, now, out, free_first=False)
        ):
            return passes.AWAITING
        plan = self._plan_free(job, now)
        if plan is not None:
            self._start(job, plan, now, out)
            return passes.STARTED
        shortened = shorten(job, self._free_prefix, self.config)  # ``partial``: one more
        reclaimed = self._reclaim(job, now, out, preempt=evict)
        if not reclaimed and shortened:
            unshorten(job, self.config)
        self._free_prefix = None  # read by that reclaim only
        self._remember(job, gpu_pool, state, now, evict)
        return passes.AWAITING if reclaimed else passes.NO_ROOM

    def _remember(
        self, job: Job, gpu_pool: str, state: tuple[int, int, bool], now: float, evict: bool = True
    ) -> None:
        """A search changed nothing (:meth:`SearchMemo.remember`), unless pods stop for it."""
        if job.id not in self.awaiting:
            self.memo.remember(job.id, gpu_pool, state, now, evict)

    # ------------------------------------------------------------ reservations

    def may_reserve(self, job: Job, now: float) -> bool:
        """Whether ``job`` may reserve now (:meth:`Reservations.may_reserve`), unless pods
        stop for it."""
        return self.reservations.may_reserve(job, now) and job.id not in self.awaiting

    def reserve(self, job: Job, gpu_pool: str) -> None:
        """Reserve nodes for ``job`` (:meth:`Reservations.reserve`); the GPU pool's books move."""
        if self.reservations.reserve(job, gpu_pool):
            self._epoch[gpu_pool] += 1

    def unreserve(self, job: Job) -> None:
        """``job`` started or left the queue: its reservation (if any) ends, and what it
        held back is room for the searches that failed meanwhile."""
        gpu_pool = self.reservations.release(job)
        if gpu_pool is None:
            return
        self._epoch[gpu_pool] += 1
        self._grown[gpu_pool] += 1
        self._dirty[gpu_pool] = None

    # ------------------------------------------------------------ placement

    def _plan_free(self, job: Job, now: float) -> list[tuple[str, tuple[str, ...], float]] | None:
        """(node, cards, share) for every worker on free capacity, or None; an HP gang that
        finds no room leaves the workers it placed for the reclaim that follows."""
        gpu_pool = self.gpu_pool_of(job)
        plan, failed = self.index.plan_free(job, gpu_pool, now, self.reservations.blocked(job, now))
        if failed is not None and job.job_class is _HP:
            self._free_prefix = (job.id, now, self._epoch[gpu_pool], *failed)
        return plan

    def _start(
        self,
        job: Job,
        plan: list[tuple[str, tuple[str, ...], float]],
        now: float,
        out: list[Action],
    ) -> None:
        """One pod per worker, started cold for this job (rank i in the i-th)."""
        gpu_pool = self.gpu_pool_of(job)
        cls = job.job_class
        self.books.move_job(job, JobState.PLACED, now)
        self.memo.forget(job.id)
        self.unreserve(job)
        job.placed = now
        job.queue_s += now - job.queued_since
        job.run_start = now
        if (fair := self.queues[gpu_pool][cls].fair) is not None:
            fair.served(job)
        if job.id in self.leases.closed:
            self.leases.charge_closed(job, now)
        if job.first_start is None:
            job.first_start = now
        place: list[tuple[str, str, float]] = []
        kept = self.leases.kept_pods(job, plan, now, out)
        for i, (node, cards, share) in enumerate(plan):
            if kept:
                pod = self.leases.hold_again(kept[i], share)
            else:
                pod = self.books.new_pod(job.spec.profile, node, cards, share, now, cls)
                pod.pending_job = job.id
                out.append(StartPod(pod.id, job.spec.profile, node, cards, share=share))
            job.pods.append(pod.id)
            place.extend((node, gid, share) for gid in cards)
        self.placement[job.id] = place
        self.allocated += job.gpus
        self.used[gpu_pool][cls] += job.gpus
        if cls is _HP:
            self._hp_moved[gpu_pool] = None
            # the demand the forecaster learns is running HP GPUs (the authors' recorder)
            self.books.demand.add(job.spec.tenant, gpu_pool, demand_gpus(job, self.config))
            for _, gid, share in place:
                self.gpu_pools[gpu_pool].add_hp(gid, share)
        for node, (cards, shares) in _per_node(place).items():
            info = self.nodes[node]
            info.used[cls] += sum(shares)
            if cls is _SPOT:
                self.node_jobs[node][job.id] = cards
                if not job.fractional:
                    info.spot_cards += len(cards)
        # every node of the plan was touched (its cards taken): one refresh each, with the
        # books above, in the order the cards were taken (the node index's tie order)
        self.sync()
        if cls is _SPOT:
            self._grown[gpu_pool] += 1  # spot work: a victim an HP job may take
            self.running_spot[gpu_pool][job.id] = None
        if kept:
            self.leases.restart_in_place(job, now, out)

    def release(self, job: Job, refresh: bool = True) -> None:
        """The job's books: it no longer counts as hp or spot usage (its pods hold their
        shares until they are gone). ``refresh=False``: its nodes are refreshed by the
        caller (a lease return frees the cards at once)."""
        self.leases.rebind.pop(job.id, None)
        place = self.placement.pop(job.id, None)
        if place is None:
            return
        gpu_pool = self.gpu_pool_of(job)
        cls = job.job_class
        self.allocated -= job.gpus
        self.used[gpu_pool][cls] -= job.gpus
        if cls is _HP:
            self._hp_moved[gpu_pool] = None
            self.books.demand.add(job.spec.tenant, gpu_pool, -demand_gpus(job, self.config, True))
            for _, gid, share in place:
                self.gpu_pools[gpu_pool].add_hp(gid, -share)
        if abs(self.used[gpu_pool][cls]) < 1e-9:
            self.used[gpu_pool][cls] = 0.0
        for node, (cards, shares) in _per_node(place).items():
            info = self.nodes[node]
            info.used[cls] -= sum(shares)
            if abs(info.used[cls]) < 1e-9:
                info.used[cls] = 0.0
            if cls is _SPOT:
                del self.node_jobs[node][job.id]
                if not job.fractional:
                    info.spot_cards -= len(cards)
            if refresh:
                self.index.refresh(info)
        self.running_spot[gpu_pool].pop(job.id, None)

    def sync(self) -> None:
        """Refresh the nodes whose shares changed since the last look (by any part); a GPU pool
        where cards were freed is due a pass."""
        for gpu_pool in self.index.sync():
            self._dirty[gpu_pool] = None

    # ------------------------------------------------------------ pods

    def _stop_pods(self, job: Job, reason: str, now: float, out: list[Action]) -> None:
        for pid in job.pods:
            pod = self.pods[pid]
            pod.job = None
            pod.pending_job = None
            self.stop_pod(pod, reason, now, out)
        job.pods = []

    def stop_pod(self, pod: Pod, reason: str, now: float, out: list[Action]) -> None:
        if pod.state in (PodState.STOPPING, PodState.GONE):
            return
        self.books.move_pod(pod, PodState.STOPPING, now)
        out.append(StopPod(pod.id, reason))

    def _gone(self, pod: Pod, now: float) -> None:
        if pod.state is PodState.GONE:
            return
        self.books.move_pod(pod, PodState.GONE, now)
        for gid in pod.gpus:
            self.cluster.release(gid, pod.id)
        self.idle.refresh_cards(pod.gpus)
        self.sync()
        self.reclaimed(pod.id)

    def reclaimed(self, pod_id: str) -> None:
        """A pod stopped for an HP job is gone: when its last one is, the job may go."""
        job_id = self.awaited.gone(pod_id)
        if job_id is not None:
            self._dirty[self.gpu_pool_of(self.jobs[job_id])] = None

    # ------------------------------------------------------------ reclaim

    def _reclaim(
        self,
        job: Job,
        now: float,
        out: list[Action],
        *,
        standby_only: bool = False,
        free_first: bool = True,
        preempt: bool = True,
    ) -> bool:
        """The one chain for an HP job that fits nowhere: idle pods alone if they make the
        room, else the cheapest mix of idle pods and spot victims. A spot job (with
        ``standby_only``) takes only cards held by idle standby pods, never a warm pod or
        another spot job. Without ``free_first`` (``hp_preempt_first``) free nodes and spot
        nodes are one set of candidates for the victim chooser. What is stopped is awaited;
        the job starts on the pass after the last pod is gone. Without ``preempt`` no spot
        job is a victim. True when something stops."""
        idle = self.idle.idle_cards(self.gpu_pool_of(job))
        if standby_only:
            idle = {n: [c for c in cards if c[0][0] == 0] for n, cards in idle.items()}
            idle = {n: cards for n, cards in idle.items() if cards}
        gate = self.config.window
        preempt = preempt and self.config.preempt and (gate is None or now >= gate[0])
        if free_first:
            plan = self._plan_reclaim(job, idle, now, spot=False)
            if plan is None and not standby_only and preempt:
                plan = self._plan_reclaim(job, idle, now, spot=True)
        else:
            plan = self._plan_reclaim(job, idle, now, spot=True, free_first=False)
            if plan is not None and not (plan.idle_pods or plan.victims):
                return False  # the chooser took free room: place as usual
        if plan is None:
            return False
        idle_pods, victims = plan.idle_pods, plan.victims
        stopping: set[str] = set()
        for victim in sorted(victims.values(), key=lambda j: j.id):
            stopping.update(victim.pods)
            self._evict(victim, now, out)
        if victims:
            # the preempting job restarts too (``preempt``: ``job["remain"] += overhead``)
            job.overhead = restart_overhead(job.per_worker)
        for pod in idle_pods:
            self.idle.reclaim(pod, now, out)
            stopping.add(pod.id)
        stopping = {p for p in stopping if self.pods[p].state is not PodState.GONE}
        if not stopping:
            self._dirty[self.gpu_pool_of(job)] = None
            return False
        self.awaited.wait(job.id, stopping)
        return True

    def _plan_reclaim(
        self,
        job: Job,
        idle: dict[str, list[tuple[tuple[int, float], str]]],
        now: float,
        *,
        spot: bool,
        free_first: bool = True,
    ) -> ReclaimPlan | None:
        """The planner's plan for ``job``, from the free-room plan that just failed for it
        at this instant (if any) and clear of nodes reserved for another job."""
        prefix = self._free_prefix
        gpu_pool = self.gpu_pool_of(job)
        known = None
        if prefix is not None and prefix[:3] == (job.id, now, self._epoch[gpu_pool]):
            known = (prefix[3], prefix[4])
        blocked = self.reservations.blocked(job, now)
        return self.planner.plan(
            job, idle, now, spot=spot, blocked=blocked, free_first=free_first, prefix=known
        )

    def _evict(self, job: Job, now: float, out: list[Action]) -> None:
        """Evict a spot job whole and re-queue it: work since the last checkpoint and a
        restart overhead (on its per-worker request, ``Policy.preempt_overhead``) are owed
        again; one failed guarantee period."""
        if job.job_class is not _SPOT:
            raise AssertionError(f"{job.job_class} job {job.id} chosen as a victim")
        gpu_pool = self.gpu_pool_of(job)
        nodes = list(dict.fromkeys(n for n, _, _ in self.placement.get(job.id, ())))
        useful = job.useful_since_start(now)
        ckpt = job.last_checkpoint(now, self.config.checkpoint_s)
        saved = min(useful, max(0.0, ckpt - job.run_start - job.overhead))
        job.remaining = max(0.0, job.remaining - saved)
        job.lost_s += useful - saved
        job.overhead = restart_overhead(job.per_worker)
        self.periods.settle_ok(job, now, self.periods.earned(job, now))
        self.release(job)
        self.ledgers[gpu_pool].record(now, failed=1)
        self.periods.forget(job.id)
        for node in nodes:
            self.nodes[node].evictions.append(now)
        job.evictions += 1
        out.append(KillJob(job.id, Failure.PREEMPTED, self.config.grace_s))
        self._stop_pods(job, "preempted", now, out)
        self.requeue(job, Failure.PREEMPTED, now, out)

    def old_rank_exited(self, job: Job, rank: int, now: float, out: list[Action]) -> None:
        """A rank of a placed job's previous run exited (:meth:`Leases.old_rank_exited`)."""
        self.leases.old_rank_exited(job, rank, now, out)

    def requeue(
        self, job: Job, reason: Failure, now: float, out: list[Action], *, lease: bool = False
    ) -> None:
        self.books.move_job(job, JobState.QUEUED, now, lease=lease)
        job.queued_since = now
        job.ranks_started.clear()
        job.ranks_exited.clear()
        gpu_pool = self.gpu_pool_of(job)
        self.queues[gpu_pool][job.job_class].push(job, now, requeue=True)
        self._dirty[gpu_pool] = None
        out.append(JobRequeued(job.id, reason))
