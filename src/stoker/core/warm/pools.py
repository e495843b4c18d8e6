"""Warm pools: how the one core serves ``pool`` jobs (Firepool).

A job takes, in order: an idle warm pod of its own (tenant, reuse tag) (warm hit); a
standby pod on a GPU it can take over now (standby hit); free capacity, reclaimed from
idle pods if need be (cold start); else it waits in its profile's queue. A pod that ran
one (tenant, tag) never runs another: changing hands means a new pod (recycled in place
under a new id, or replaced). Idle warm and standby pods are also the first, free room an
HP job reclaims (:meth:`WarmPools.idle_cards`, :meth:`WarmPools.reclaim`).

Per profile (:class:`~stoker.core.config.ProfilePolicies`): its own keep-alive, and a
minimum warm count: spare pods started ahead for callers not yet seen. A spare is a
standby pod that holds its profile's whole share (so taking it never stops another pod); it
has no keep-alive, counts against the warm budget, and is replaced when a job takes it.
CPU-only profiles (``gpus = 0``) take a node's CPU slots instead of GPU shares.

This is a part of :class:`stoker.core.Core`, called only from its ``handle``; pods and
jobs live in the shared :class:`~stoker.core.books.Books` and move through its transition
tables. What it asks of the hp/spot part goes through :class:`~stoker.core.ports.HpRoom`.
It is composed of four parts, each with its own state: the index of idle pods
(:class:`~stoker.core.warm.idle.IdlePods`), the queues
(:class:`~stoker.core.warm.queues.PoolQueues`), the read-only room planner
(:class:`~stoker.core.warm.planner.RoomPlanner`) and the warm budget
(:class:`~stoker.core.warm.budget.BudgetKeeper`); it takes the events, applies what the
planner and the budget return, and is the one place a pool pod moves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stoker.core.actions import (
    Action,
    BindJob,
    JobRequeued,
    KillJob,
    PromoteStandby,
    RecyclePod,
    StartPod,
    StopPod,
)
from stoker.core.model import EPS, Failure, HitPath, Job, JobClass, JobState, Pod, PodState, Profile
from stoker.core.warm.budget import BudgetKeeper
from stoker.core.warm.idle import IdlePods, Key
from stoker.core.warm.planner import Plan, RoomPlanner
from stoker.core.warm.queues import PoolQueues

if TYPE_CHECKING:
    from stoker.core.books import Books
    from stoker.core.config import Policies
    from stoker.core.policies import KeepAlive
    from stoker.core.ports import HpRoom

# states a pod enters that may let a waiting job go: a new idle pod to reclaim, room freed
_ROOM = (PodState.WARM, PodState.STANDBY, PodState.STOPPING, PodState.GONE)


class WarmPools:
    """Pool jobs, warm and standby pods, the warm budget and keep-alive: events in, actions
    out. ``idle``, ``queues``, ``planner`` and ``budget`` are its parts."""

    def __init__(self, books: Books, policies: Policies) -> None:
        self.books = books
        self.cluster = books.cluster
        self.profiles = books.profiles
        self.policies = policies
        self.jobs = books.jobs
        self.pods = books.pods
        self.idle = IdlePods(books, policies, self.keepalive)
        self.queues = PoolQueues(books, policies.shares)
        self.planner = RoomPlanner(books, self.idle, policies)
        self.budget = BudgetKeeper(books, self.idle, self.queues, self.planner, policies)
        self.warm_held: dict[str, int] = {}  # per tenant, its idle warm pods

    # ------------------------------------------------------------------ public API

    def connect(self, hp: HpRoom) -> None:
        """Wire the hp/spot part's port (once, by the core)."""
        self.planner.hp = self.budget.hp = hp

    def after(self, now: float, out: list[Action]) -> None:
        """After every event: place what can go, hold the warm budget, then start the spare
        pods a profile's minimum warm count asks for (within the budget)."""
        self._drain(now, out)
        for pod in self.budget.over_budget(now):
            self._stop(pod, "budget", now, out)
        for profile, node, gpus in self.budget.spares():
            pod = self._new_pod(profile, node, gpus, profile.share, now)
            self.idle.add_spare(pod, profile.gpu_demand)
            self.planner.started(profile.name, node)
            out.append(StartPod(pod.id, profile.name, node, tuple(gpus), standby=True))

    @property
    def hp_cap(self) -> dict[str, float]:
        """Per GPU model, the GPUs idle pods there may hold (:attr:`BudgetKeeper.hp_cap`)."""
        return self.budget.hp_cap

    @hp_cap.setter
    def hp_cap(self, cap: dict[str, float]) -> None:
        self.budget.hp_cap = cap

    @property
    def idle_gpus(self) -> float:
        """GPUs held by idle warm and standby pods (what the warm budget caps)."""
        return self.idle.idle_gpus

    def budget_limit(self) -> float:
        """GPUs idle pods may hold now (:meth:`BudgetKeeper.limit`)."""
        return self.budget.limit()

    def keepalive(self, profile: str) -> KeepAlive:
        """The keep-alive policy of a profile: its own, else the core's."""
        own = self.policies.profiles.get(profile)
        if own is None or own.keepalive is None:
            return self.policies.keepalive
        return own.keepalive

    def renew(self, key: Key, until: float) -> None:
        """Keep the pods of (profile, tenant, tag) until ``until`` at least: warm ones now,
        a busy one when its job ends (:meth:`finish`)."""
        self.idle.renew(key, until)

    def is_spare(self, pod_id: str) -> bool:
        """Whether a pod was started for its profile's minimum warm count (and not yet taken)."""
        pod = self.pods.get(pod_id)
        return pod is not None and pod_id in self.idle.spare.get(pod.profile, {})

    def held(self, key: Key) -> list[str]:
        """The pods (profile, tenant, tag) holds now, warm or running its job."""
        profile, *pair = key
        return sorted(
            pod.id
            for pod in self.pods.values()
            if pod.profile == profile
            and pod.owner == tuple(pair)
            and pod.state in (PodState.WARM, PodState.ACTIVE)
            and pod.job_class is JobClass.POOL
        )

    def room_freed(self) -> None:
        """Another part's pod left the cluster: a waiting pool job may fit now."""
        self.queues.dirty = True

    def next_deadline(self) -> float | None:
        """The earliest keep-alive deadline (when a Tick would stop a warm pod)."""
        return self.idle.next_deadline()

    def keepalive_left(self, model: str, now: float) -> float:
        """How long idle pods of GPU model ``model`` may yet hold their cards by keep-alive
        (:meth:`IdlePods.keepalive_left`)."""
        return self.idle.keepalive_left(model, now)

    def timed_models(self) -> list[str]:
        """The GPU models whose :meth:`keepalive_left` runs down with time."""
        return self.idle.timed_models()

    def queued(self, profile: str | None = None) -> list[str]:
        """Queued job ids, in queue order."""
        return self.queues.queued(profile)

    def check(self) -> None:
        """Raise if an invariant does not hold (used by tests after every event)."""
        self.cluster.check()
        self.idle.check()
        self.queues.check(self.jobs, self.pods)

    # ------------------------------------------------------------------ IdleRoom port

    @property
    def epoch(self) -> int:
        """Moves on whenever the idle pods change anywhere (:attr:`IdlePods.epoch`)."""
        return self.idle.epoch

    def idle_cards(self, model: str) -> dict[str, list[tuple[tuple[int, float], str]]]:
        """Per node of GPU model ``model``: the cards idle pods alone hold, cheapest first."""
        return self.idle.idle_cards(model)

    def idle_nodes(self, model: str) -> list[str]:
        """Nodes of GPU model ``model`` where idle warm or standby pods are, in name order."""
        return self.idle.idle_nodes(model)

    def idle_share(self, gid: str) -> tuple[float, list[Pod]]:
        """The share idle pods hold on one card, and those pods (cheapest first)."""
        return self.idle.idle_share(gid)

    def refresh_cards(self, gpus: list[str]) -> None:
        """Another part's pod took or left these cards (:meth:`IdlePods.refresh_cards`)."""
        self.idle.refresh_cards(gpus)

    def reclaim(self, pod: Pod, now: float, out: list[Action]) -> None:
        """Stop an idle pod for HP demand (free of cost); its share is held until PodGone."""
        self._stop(pod, "reclaim_hp", now, out)

    # ------------------------------------------------------------------ events

    def submit(self, job: Job, now: float, out: list[Action]) -> None:
        """A new pool job (the core checked its fields and registered it)."""
        spec = job.spec
        self.keepalive(spec.profile).observe_submit(job.pair, now)
        self.queues.enqueue(job)
        # try at once, ahead of older queued jobs only if those are waiting on capacity
        # that this job would not take (a warm hit uses no new capacity)
        head = self.queues.head(spec.profile)
        if head == job.id or len(self.planner.warm_pods(job)) >= spec.workers:
            self._try_place(job, now, out)
        elif head in self.queues.reclaim:
            self.queues.dirty = True  # the head waits on its reclaim: this job may start its own

    def withdraw(self, job: Job) -> None:
        """Take a queued job out of its profile's queue: it can start nowhere as the cluster
        is now (the core sets it aside, :attr:`JobState.SET_ASIDE`)."""
        self.queues.dequeue(job)

    def restore(self, job: Job) -> None:
        """A withdrawn job fits again: back at its profile's queue's tail."""
        self.queues.enqueue(job)
        self.queues.dirty = True

    def cancel(self, job: Job, now: float, out: list[Action]) -> None:
        """A caller cancelled ``job``: out of its queue, its coming pods detached, or killed."""
        if job.state is JobState.QUEUED:
            self.queues.dequeue(job)
            self._end(job, Failure.CANCELLED, now, out)
        elif job.state is JobState.PLACED:
            # pods still coming up: detach them; ready ones turn orphan and are reused or stopped
            for pid in job.pods:
                pod = self.pods[pid]
                if pod.pending_job == job.id:
                    pod.pending_job = None
                if pod.state is PodState.ACTIVE and pod.job == job.id:
                    pod.job = None
                    self._stop(pod, "cancelled", now, out)
            self._end(job, Failure.CANCELLED, now, out)
        else:
            out.append(KillJob(job.id, Failure.CANCELLED))

    def pod_ready(self, pod_id: str, now: float, out: list[Action]) -> None:
        """A pod came up: standby, spare, its job's (bound once the whole gang is), or orphan."""
        pod = self.pods.get(pod_id)
        if pod is None or pod.state not in (PodState.STARTING, PodState.RECYCLING):
            return
        job_id = pod.pending_job
        if job_id is None:
            if pod.owner is None and pod.id in self.idle.spare[pod.profile]:
                self._set_state(pod, PodState.STANDBY, now)
                self.idle.standby[pod.profile][pod.id] = None
                self.idle.promotable[pod.profile][pod.id] = None  # it holds its whole share
            elif pod.owner is None and pod.gpus and self.idle.is_standby_slot(pod):
                self._set_state(pod, PodState.STANDBY, now)
                self.idle.standby[pod.profile][pod.id] = None
                self.idle.refresh_gpu(pod.gpus[0])
            else:
                self._orphan(pod, now, out)
            return
        pod.pending_job = None
        self._set_state(pod, PodState.ACTIVE, now)
        pod.job = job_id
        self.idle.refresh_pod(pod)
        self._stage_standby(pod, now, out)
        job = self.jobs[job_id]
        if all(
            self.pods[p].state is PodState.ACTIVE and self.pods[p].pending_job is None
            for p in job.pods
        ):
            self._bind(job, now, out)

    def pod_failed(
        self, pod_id: str, reason: Failure, now: float, out: list[Action], retried: bool = True
    ) -> None:
        """A pod failed: its job goes back to the queue if it had not run (and the failure
        is ``retried``), else ends."""
        pod = self.pods.get(pod_id)
        if pod is None or pod.state is PodState.GONE:
            return
        job_id = pod.pending_job or pod.job
        self._gone(pod, now)
        if job_id is None:
            return
        job = self.jobs[job_id]
        if retried and job.state in (JobState.PLACED, JobState.BINDING) and job.started is None:
            # an infrastructure failure before the job ran: it goes back to the queue
            self._release_gang(job, pod_id, now, out)
            self.books.move_job(job, JobState.QUEUED, now)
            job.pods, job.placed, job.pod_ready, job.path = [], None, None, None
            job.ranks_started.clear()
            job.ranks_exited.clear()
            self.queues.enqueue(job, front=True)
            out.append(JobRequeued(job.id, reason))
        elif job.state is not JobState.FINISHED:
            self._release_gang(job, pod_id, now, out)
            self._end(job, reason, now, out)

    def pod_gone(self, pod_id: str, now: float, out: list[Action]) -> None:
        """A pod left the cluster (asked to, or lost by the runtime: then it failed)."""
        pod = self.pods.get(pod_id)
        if pod is None or pod.state is PodState.GONE:
            return
        if pod.state is not PodState.STOPPING:
            # gone without being asked (the runtime lost it): its job must not wait on it
            self.pod_failed(pod_id, Failure.POD_DIED, now, out)
            return
        self._gone(pod, now)

    def unfit(self, pod: Pod, now: float, out: list[Action]) -> None:
        """A pod the runtime could not bind into is not fit to serve again: stop it."""
        pod.job = None
        self._stop(pod, "bind_failed", now, out)

    def finish(
        self, job: Job, exit_code: int, failure: Failure | None, now: float, out: list[Action]
    ) -> None:
        """Every rank has exited (the core typed the end): its pods turn warm for their
        caller, or stop."""
        self.books.end_job(job, failure, exit_code, now, out)
        job_id = job.id
        revoked = job_id in self.books.revoked
        self.books.revoked.discard(job_id)
        keepalive = self.keepalive(job.spec.profile)
        ttl = keepalive.ttl(job.pair)
        # one end per job, as one submit per job: a gang's pods do not count as several pauses
        keepalive.observe_end(job.pair, now)
        renewed = self.idle.renewed_until((job.spec.profile, *job.pair))
        if renewed is not None and ttl > 0:
            ttl = max(ttl, renewed - now)
        for pid in job.pods:
            pod = self.pods[pid]
            if pod.state is not PodState.ACTIVE or pod.job != job_id:
                continue
            pod.job = None
            pod.jobs_run += 1
            if failure is Failure.POD_DIED or ttl <= 0:
                self._stop(
                    pod, "pod_died" if failure is Failure.POD_DIED else "keepalive", now, out
                )
                continue
            if revoked or self._at_warm_cap(job.spec.tenant):
                self._stop(pod, "revoked" if revoked else "warm_cap", now, out)
                continue
            self._make_warm(pod, ttl, now)

    def tick(self, now: float, out: list[Action]) -> None:
        """Stop warm pods whose keep-alive ran out (and forget renewals that ran out)."""
        for pod in self.idle.expired(now):
            self._stop(pod, "keepalive", now, out)

    # ------------------------------------------------------------------ placement

    def _try_place(self, job: Job, now: float, out: list[Action]) -> bool:
        """Place ``job`` if it can be placed now (by the planner's :class:`Plan`); start
        reclaiming idle pods if that would make room. Returns True when the job left the
        queue."""
        profile = self.profiles[job.spec.profile]
        plan = self.planner.plan(job)
        slots, missing = plan.slots, plan.missing
        if len(slots) < missing:
            if job.id in self.queues.reclaim:
                return False  # room is already being freed for it
            if self.planner.own_pods_busy(job):
                # its caller's pods are busy and turn warm for it when their jobs end: it
                # waits for one (a warm hit) rather than stop another pod for a cold start,
                # so a caller's concurrent jobs on one tag keep one bounded set of pods
                return False
            if not slots and self._recycle(plan, profile, job, now, out):
                return True
            # reclaim only the shortfall, around the slots that are free already
            busy = plan.busy | {g for _, gpus in slots for g in gpus}
            self._start_reclaim(job, profile, missing - len(slots), plan.taken, busy, now, out)
            return False
        self.queues.dequeue(job, served=True)
        self.books.move_job(job, JobState.PLACED, now)
        job.placed = now
        path = HitPath.WARM
        for pid in plan.warm:
            pod = self.pods[pid]
            self.idle.unwarm(pod)
            self._set_state(pod, PodState.ACTIVE, now)
            pod.job = job.id
            job.pods.append(pid)
        for pid in plan.standby:
            self._promote(self.pods[pid], job, now, out)
            path = HitPath.STANDBY
        for node, gpus in slots:
            pod = self._new_pod(profile, node, gpus, profile.share, now)
            pod.pending_job = job.id
            job.pods.append(pod.id)
            self.planner.started(profile.name, node)
            out.append(StartPod(pod.id, profile.name, node, tuple(gpus)))
            path = HitPath.COLD
        job.path = path
        for pid in job.pods:
            self.idle.refresh_pod(self.pods[pid])
            if self.pods[pid].state is PodState.ACTIVE:
                self._stage_standby(self.pods[pid], now, out)
        if all(self.pods[p].pending_job is None for p in job.pods):
            self._bind(job, now, out)
        return True

    def _start_reclaim(
        self,
        job: Job,
        profile: Profile,
        count: int,
        taken: set[str],
        busy: set[str],
        now: float,
        out: list[Action],
    ) -> None:
        """Stop the idle pods the planner names to free ``count`` slots for ``job``."""
        groups = self.planner.victims(job, profile, count, taken, busy, now)
        if groups is None:
            return
        stopping: set[str] = set()
        for group in groups:
            for victim in group:
                self._stop(victim, "reclaim", now, out)
                stopping.add(victim.id)
        self.queues.start_reclaim(job.id, stopping)

    def _recycle(
        self, plan: Plan, profile: Profile, job: Job, now: float, out: list[Action]
    ) -> bool:
        """For profiles that may be scrubbed in place, recycle idle pods of the same profile
        into fresh pods for this job instead of stopping and starting new ones (a plan that
        takes a warm or standby pod is not recycled)."""
        count = plan.missing
        if not profile.recyclable or plan.warm or plan.standby or count != job.spec.workers:
            return False
        victims = self.planner.recyclable(job, profile, count, plan.taken, now)
        if victims is None:
            return False
        self.queues.dequeue(job, served=True)
        self.books.move_job(job, JobState.PLACED, now)
        job.placed, job.path = now, HitPath.COLD
        for old in victims:
            # retire the old pod while it still holds its share, so its warm GPU-seconds and
            # the idle total are accounted; the new pod takes the same GPUs at once
            self._gone(old, now)
            new = self._new_pod(profile, old.node, list(old.gpus), profile.share, now)
            self._set_state(new, PodState.RECYCLING, now)
            new.pending_job = job.id
            job.pods.append(new.id)
            out.append(RecyclePod(old.id, new.id))
        return True

    def _promote(self, pod: Pod, job: Job, now: float, out: list[Action]) -> None:
        """Give a standby pod its GPU: stop the idle pods there and take their share (a
        spare holds its whole share already: it only leaves the spare set)."""
        profile = self.profiles[pod.profile]
        spare = self.idle.spare[pod.profile]
        if pod.id in spare:
            del spare[pod.id]
            self._set_state(pod, PodState.STARTING, now)
        else:
            gid = pod.gpus[0]
            gpu = self.cluster.gpus[gid]
            for other in list(gpu.allocs):
                if other != pod.id:
                    victim = self.pods[other]
                    # its processes are killed before the promotion; the share moves at once
                    self._stop(victim, "handover", now, out)
                    self.cluster.release(gid, victim.id)
            self._set_state(pod, PodState.STARTING, now)  # leaves the idle set first
            self.cluster.release(gid, pod.id)
            self.cluster.allocate(gid, pod.id, profile.share)
            self.idle.standby_on_gpu.pop(gid, None)
        self.idle.standby[pod.profile].pop(pod.id, None)
        self.idle.promotable[pod.profile].pop(pod.id, None)
        pod.pending_job = job.id
        job.pods.append(pod.id)
        out.append(PromoteStandby(pod.id))

    def _bind(self, job: Job, now: float, out: list[Action]) -> None:
        self.books.move_job(job, JobState.BINDING, now)
        job.pod_ready = now
        for pid in job.pods:
            pod = self.pods[pid]
            if pod.owner is None:
                pod.owner = job.pair
        out.append(BindJob(job.id, tuple(job.pods)))

    def _drain(self, now: float, out: list[Action]) -> None:
        """Place queued jobs: those whose own caller's pods just turned warm (a warm hit
        takes no new room, so it jumps the queue) and each profile's queue in order; with
        tenant shares the queues go first, so a pod turning warm is room the queue's turn
        (another tenant's job) may reclaim before its caller's next job takes it back."""
        if self.queues.fair is not None:
            self._drain_queues(now, out)
            self._drain_fresh(now, out)
        else:
            self._drain_fresh(now, out)
            self._drain_queues(now, out)

    def _drain_fresh(self, now: float, out: list[Action]) -> None:
        """The queued jobs of callers whose pods just turned warm take them (warm hits)."""
        queues = self.queues
        while queues.fresh:
            key = next(iter(queues.fresh))
            del queues.fresh[key]
            for job_id in list(queues.pairs.get(key, ())):
                job = self.jobs[job_id]
                if len(self.planner.warm_pods(job)) < job.spec.workers:
                    break
                self._try_place(job, now, out)

    def _drain_queues(self, now: float, out: list[Action]) -> None:
        """Each profile's queue in order: a one-pod job with room being reclaimed for it
        lets the next one try (it found no free slot, so the next finds none to take from
        it and can only start its own reclaim); any other job that cannot go holds its
        profile's queue, so a gang keeps the free slots its plan counts on."""
        queues = self.queues
        if not queues.dirty:
            return
        queues.dirty = False
        for queue in queues.queues.values():
            if not queue:
                continue
            for job_id in list(queue):
                job = self.jobs[job_id]
                if job.state is not JobState.QUEUED:
                    continue
                if self._try_place(job, now, out):
                    continue
                if job.id not in queues.reclaim or job.spec.workers > 1:
                    break  # later jobs of this profile wait their turn

    # ------------------------------------------------------------------ pods

    def _new_pod(
        self, profile: Profile, node: str, gpus: list[str], share: float, now: float
    ) -> Pod:
        pod = Pod(
            id=self.books.new_pod_id(),
            profile=profile.name,
            node=node,
            gpus=list(gpus),
            state=PodState.STARTING,
            since=now,
            created=now,
        )
        self.pods[pod.id] = pod
        for gid in gpus:
            if share:
                self.cluster.allocate(gid, pod.id, share)
        if profile.cpu_only:
            self.cluster.allocate_cpu(node, pod.id, profile.cpu, profile.memory_gb)
        # a standby of another profile on these cards may no longer be promotable
        self.idle.refresh_pod(pod)
        return pod

    def _stage_standby(self, active: Pod, now: float, out: list[Action]) -> None:
        """Stage a standby pod beside an active pod when policy and budget allow."""
        profile = self.profiles[active.profile]
        if not self.policies.matching.standby or not profile.standby_enabled:
            return
        gid = active.gpus[0]
        if gid in self.idle.standby_on_gpu:
            return
        if not self.policies.standby.wants(profile, len(self.idle.standby[profile.name])):
            return
        gpu = self.cluster.gpus[gid]
        if gpu.free < profile.standby_share - EPS:
            return
        if not self.budget.room_for_standby(gpu.model, profile.standby_share):
            return
        pod = self._new_pod(profile, active.node, [gid], profile.standby_share, now)
        self.idle.add_staged(pod, gid, profile.standby_share)
        self.planner.started(profile.name, active.node)
        out.append(StartPod(pod.id, profile.name, active.node, (gid,), standby=True))

    def stop_idle_of(self, tenant: str, now: float, out: list[Action]) -> None:
        """Stop every idle warm pod ``tenant`` holds (it was revoked)."""
        for pid in sorted(self.idle.idle):
            pod = self.pods[pid]
            if pod.state is PodState.WARM and pod.owner is not None and pod.owner[0] == tenant:
                self._stop(pod, "revoked", now, out)

    def _at_warm_cap(self, tenant: str) -> bool:
        """Whether ``tenant`` keeps as many idle warm pods as its share allows."""
        shares = self.policies.shares
        cap = shares.of(tenant).max_warm_pods if shares is not None else None
        return cap is not None and self.warm_held.get(tenant, 0) >= cap

    def _make_warm(self, pod: Pod, ttl: float, now: float) -> None:
        self._set_state(pod, PodState.WARM, now)
        pod.idle_since = now
        pod.deadline = now + ttl
        assert pod.owner is not None
        self.queues.note_warm((pod.profile, *pod.owner))
        self.idle.add_warm(pod)

    def _orphan(self, pod: Pod, now: float, out: list[Action]) -> None:
        """A fresh pod came up for a job that is gone: give it to the first queued one-pod job
        of its profile (in submit order), else stop it."""
        self._set_state(pod, PodState.ACTIVE, now)
        for job_id in self.queues.queues[pod.profile]:
            job = self.jobs[job_id]
            if job.spec.workers == 1:
                self.queues.dequeue(job, served=True)
                self.books.move_job(job, JobState.PLACED, now)
                job.placed, job.path = now, HitPath.COLD
                job.pods.append(pod.id)
                pod.job = job.id
                self._bind(job, now, out)
                self._stage_standby(pod, now, out)
                return
        self._stop(pod, "orphaned", now, out)

    def _stop(self, pod: Pod, reason: str, now: float, out: list[Action]) -> None:
        if pod.state in (PodState.STOPPING, PodState.GONE):
            return
        self.idle.forget(pod)
        self._set_state(pod, PodState.STOPPING, now)
        self.idle.refresh_pod(pod)
        out.append(StopPod(pod.id, reason))

    def _gone(self, pod: Pod, now: float) -> None:
        self.idle.forget(pod)
        self._set_state(pod, PodState.GONE, now)
        for gid in pod.gpus:
            self.cluster.release(gid, pod.id)
        self.cluster.release_cpu(pod.id)
        self.idle.refresh_pod(pod)
        # a reclaim victim ends by PodGone or PodFailed alike: either way its room is free
        self.queues.victim_gone(pod.id)

    def _release_gang(self, job: Job, failed: str, now: float, out: list[Action]) -> None:
        """Stop the other pods of a gang whose pod failed (their state is half-bound)."""
        for pid in job.pods:
            if pid != failed:
                pod = self.pods[pid]
                pod.pending_job = None
                pod.job = None
                self._stop(pod, "gang_failed", now, out)

    def _set_state(self, pod: Pod, state: PodState, now: float) -> None:
        """Every state change of a pool pod goes through here: it accrues GPU-seconds per
        state and keeps the idle index, then moves the pod through the core's transition
        table."""
        share = self.idle.pod_share(pod)
        key = pod.state.value
        pod.held[key] = pod.held.get(key, 0.0) + share * (now - pod.since)
        self.idle.moved(pod, state, share)
        if (pod.state is PodState.WARM) != (state is PodState.WARM) and pod.owner is not None:
            tenant = pod.owner[0]
            self.warm_held[tenant] = self.warm_held.get(tenant, 0) + (
                1 if state is PodState.WARM else -1
            )
        if state in _ROOM:
            self.queues.dirty = True
        self.books.move_pod(pod, state, now)
        pod.since = now

    def _end(self, job: Job, failure: Failure, now: float, out: list[Action]) -> None:
        self.books.end_job(job, failure, None, now, out)
