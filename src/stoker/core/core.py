"""The one core: ``Core.handle(event, now) -> actions`` for pool, hp and spot jobs.

Pure: no I/O, no wall clock, no randomness; every call takes ``now`` and the same events
give the same actions. The core owns the registries (jobs and pods of every class), moves
them only through its transition tables, and hands each event to the part that serves its
class: :class:`~stoker.core.warm.WarmPools` (pool jobs, warm and standby pods) or
:class:`~stoker.core.gfs.scheduler.HpSpotScheduler` (hp and spot jobs). The decisions a
driver must not make are here: when a job has started, which rank's exit ends it and how
it is typed, what a failed bind or a failed stop means. It also keeps the HP demand meter
and sums the tenants' forecasts per GPU pool, which bound both the spot quota and the warm
budget.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from statistics import NormalDist

import numpy as np

from stoker.core import restart
from stoker.core.actions import Action, BindJob, KillJob, Reconciled, StopPod
from stoker.core.books import Books
from stoker.core.config import Policies
from stoker.core.events import (
    AgentReport,
    BindFailed,
    Event,
    ForecastUpdated,
    FoundPod,
    JobCancelled,
    JobForgotten,
    JobSubmitted,
    KeepAliveRenewed,
    NodeChanged,
    NodeRemoved,
    NodeShape,
    PodFailed,
    PodForgotten,
    PodGone,
    PodReady,
    PodsFound,
    PodStartFailed,
    PodStopFailed,
    RankExited,
    RankStarted,
    TenantRevoked,
    Tick,
)
from stoker.core.gfs.scheduler import HpSpotScheduler
from stoker.core.model import (
    EPS,
    GPU,
    START_FAULTS,
    Cluster,
    CoreError,
    Failure,
    Job,
    JobClass,
    JobSpec,
    JobState,
    Node,
    PodState,
    Profile,
    Refusal,
    per_worker,
)
from stoker.core.shape import cpu_refusal, gpu_refusal, worker_cards
from stoker.core.waiting import CpuWait, GpuWait, Waiting
from stoker.core.warm import WarmPools

# seconds before a stop the runtime could not carry out is asked again
STOP_RETRY_S = 30.0


class Core:
    """The decision core over a :class:`Cluster` of GPUs, for every job class."""

    def __init__(
        self,
        cluster: Cluster,
        profiles: Iterable[Profile],
        policies: Policies | None = None,
        start: float = 0.0,
    ) -> None:
        self.policies = policies or Policies()
        self.books = Books(cluster, profiles, start)
        # the books' registries, read by drivers and tests
        self.cluster = cluster
        self.profiles = self.books.profiles
        self.jobs = self.books.jobs
        self.pods = self.books.pods
        self.demand = self.books.demand
        self.warm = WarmPools(self.books, self.policies)
        self.hpspot = HpSpotScheduler(
            self.books, self.warm, self.policies.hpspot, start, self.policies.shares
        )
        self.warm.connect(self.hpspot)
        self.books.on_cards = self.warm.refresh_cards
        # per GPU pool, each tenant's latest forecast (mean, var per hour ahead)
        self._forecasts: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
        self.forecast: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # summed per GPU pool
        # GPU pools whose summed forecast changed and whose quota and warm cap do not yet
        # follow it: set once after a run of forecasts (one query brings every tenant's)
        self._forecast_gpu_pools: dict[str, None] = {}
        # GPU pools whose warm cap (:meth:`_follow_hp_cap`) may have moved since it was
        # last set: a new forecast or a node joining or leaving there; and the GPU pools whose
        # cap ran on a warm pod's keep-alive deadline then (it runs down with time)
        self._cap_stale: dict[str, None] = {}
        self._cap_timed: list[str] = []
        # pods whose stop failed: they hold their share until the runtime confirms; the stop
        # is asked again at the time given here
        self._stop_retry: dict[str, float] = {}
        self._z = NormalDist().inv_cdf(self.policies.hpspot.g)  # the warm cap's quantile

    # ------------------------------------------------------------------ the entry point

    def handle(self, event: Event, now: float) -> list[Action]:
        """Apply one event at time ``now`` and return the actions to carry out, in order."""
        return self.handle_all((event,), now)

    def handle_all(self, events: Iterable[Event], now: float) -> list[Action]:
        """Apply events of one instant in order, then one scheduling pass (e.g. every
        tenant's forecast of one query: the spot quota is set from their sum, not from
        each partial sum on the way)."""
        if now + EPS < self.books.now:
            raise CoreError(f"time went backwards: {now} < {self.books.now}")
        self.books.now = now
        self.demand.record_until(now)
        out: list[Action] = []
        for event in events:
            if self._forecast_gpu_pools and not isinstance(event, ForecastUpdated):
                self._settle_forecasts()
            self._apply(event, now, out)
        self._settle_forecasts()
        # hp and spot first (guaranteed work before loop jobs take free room), then the warm pools
        self.hpspot.schedule(now, out)
        # the warm cap may follow what HP holds now: set after HP's placements
        self._follow_hp_cap(now)
        self.warm.after(now, out)
        return out

    def _apply(self, event: Event, now: float, out: list[Action]) -> None:
        match event:
            case JobSubmitted(spec):
                self._submit(spec, now, out)
            case JobCancelled(job):
                self._cancel(job, now, out)
            case PodReady(pod):
                self._pod_event(pod, now, out, ready=True)
            case PodFailed(pod, reason):
                self._pod_event(pod, now, out, failed=reason)
            case PodStartFailed(pod, fault):
                typed = START_FAULTS[fault]
                self._pod_event(pod, now, out, failed=typed.failure, retried=typed.retried)
            case PodsFound(found):
                self._pods_found(found, now, out)
            case PodGone(pod):
                self._pod_gone(pod, now, out)
            case PodStopFailed(pod):
                self._stop_failed(pod, now)
            case RankStarted(job, rank, pod) if self._current(job, pod):
                self._rank_started(job, rank, now)
            case RankExited(job, rank, exit_code, failure, pod) if self._current(job, pod):
                self._rank_exited(job, rank, exit_code, failure, now, out)
            case RankStarted() | RankExited():
                pass  # news of an earlier run of the job: its current run stands
            case BindFailed(job, pod, _reason, infra):
                self._bind_failed(job, pod, infra, now, out)
            case ForecastUpdated(tenant, gpu_model, mean, var):
                self._forecast(tenant, gpu_model, mean, var)
            case KeepAliveRenewed(tenant, tag, profile, keepalive_s):
                self._profile(profile)
                if not (keepalive_s > 0 and math.isfinite(keepalive_s)):
                    raise CoreError(f"keepalive_s: must be finite and > 0, got {keepalive_s}")
                self.warm.renew((profile, tenant, tag), now + keepalive_s)
            case TenantRevoked(tenant):
                self._revoke(tenant, now, out)
            case JobForgotten(job):
                self._forget_job(job)
            case PodForgotten(pod):
                self._forget_pod(pod)
            case NodeShape(name, gpu_model, gpus, cpu, memory_gb, gpu_ids):
                ids = list(gpu_ids) or [f"{name}/{i}" for i in range(gpus)]
                if len(ids) != gpus:
                    raise CoreError(f"node {name}: {gpus} GPUs, {len(ids)} GPU ids")
                node = Node(name, gpu_model, [], cpu, memory_gb)
                self._node_added(node, ids, now, out, in_place=isinstance(event, NodeChanged))
            case NodeRemoved(name):
                self._node_removed(name, now, out)
            case Tick():
                self.warm.tick(now, out)
                self.hpspot.tick(now, out)
                self._retry_stops(now, out)
            case _:
                raise CoreError(f"unknown event {event!r}")

    # ------------------------------------------------------------------ views

    def next_deadline(self) -> float | None:
        """The earliest time a Tick would change something (a keep-alive deadline, an eta
        step or Chronus round, a stop to ask again)."""
        times = [self.warm.next_deadline(), self.hpspot.next_deadline()]
        times.append(min(self._stop_retry.values(), default=None))
        present = [t for t in times if t is not None]
        return min(present) if present else None

    @property
    def idle_gpus(self) -> float:
        """GPUs held by idle warm and standby pods (what the warm budget caps)."""
        return self.warm.idle_gpus

    def budget_limit(self) -> float:
        """GPUs idle pods may hold now (see :meth:`WarmPools.budget_limit`)."""
        return self.warm.budget_limit()

    def queued(self, profile: str | None = None) -> list[str]:
        """Queued pool job ids, in queue order."""
        return self.warm.queued(profile)

    def waiting(self, job_id: str) -> Waiting | None:
        """Why a queued job has not started, as the core stands now (None: not queued, or
        unknown): one set aside, its refusal (:attr:`Job.refusal`); an hp or spot job by
        :meth:`HpSpotScheduler.waiting` (the spot quota, pods stopping for room, no room);
        a pool job, no room for its pods: the CPU slots of a CPU-only profile, else the
        cards of its GPU model (it took none of the paths :meth:`WarmPools._try_place`
        tries, each of which needs free room or an idle pod of its own)."""
        job = self.jobs.get(job_id)
        if job is None:
            return None
        if job.state is JobState.SET_ASIDE:
            return job.refusal
        if job.state is not JobState.QUEUED:
            return None
        if job.job_class is not JobClass.POOL:
            return self.hpspot.waiting(job, self.books.now)
        profile = self.profiles[job.spec.profile]
        if profile.cpu_only:
            nodes = self.cluster.nodes
            free = [self.cluster.cpu_free(name) for name in nodes]
            return CpuWait(
                profile=profile.name,
                pods=job.workers,
                cpu=profile.cpu,
                memory_gb=profile.memory_gb,
                free_cpu=sum(c for c, _ in free),
                free_memory_gb=sum(m for _, m in free),
                total_cpu=sum(n.cpu for n in nodes.values()),
                total_memory_gb=sum(n.memory_gb for n in nodes.values()),
            )
        model = profile.gpu_model
        return GpuWait(
            gpu_pool=model,
            workers=job.workers,
            per_worker=profile.gpu_demand,
            free_gpus=self.cluster.free_gpus(model),
            capacity=self.cluster.capacity.get(model, 0),
        )

    def check(self) -> None:
        """Raise if an invariant does not hold (tests call it after every event)."""
        self.cluster.check()
        self.warm.check()
        self.hpspot.check()
        for jid in self.books.set_aside:
            job = self.jobs[jid]
            if job.state is not JobState.SET_ASIDE or self.refusal(job.spec) != job.refusal:
                raise AssertionError(f"job {jid} set aside as {job.refusal}, now {job.state}")
        for job in self.jobs.values():
            if (job.state is JobState.SET_ASIDE) != (job.id in self.books.set_aside):
                raise AssertionError(f"job {job.id} is {job.state}, set aside: {job.refusal}")
            if (job.state is JobState.SET_ASIDE) != (job.refusal is not None):
                raise AssertionError(f"job {job.id} is {job.state} with refusal {job.refusal}")
        for pod in self.pods.values():
            if pod.state is PodState.GONE:
                continue
            if pod.job is not None and pod.pending_job is not None:
                raise AssertionError(f"pod {pod.id} both runs {pod.job} and waits for another")

    def _part(self, job_class: JobClass) -> WarmPools | HpSpotScheduler:
        return self.warm if job_class is JobClass.POOL else self.hpspot

    def _job(self, job_id: str) -> Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise CoreError(f"unknown job {job_id!r}")
        return job

    # ------------------------------------------------------------------ jobs

    def refusal(self, spec: JobSpec) -> Refusal | None:
        """Why ``spec`` could never start on the cluster as it is now, even with every
        job gone, or None: the one authority on it. A submitted job the core refuses is
        an error (:class:`CoreError`), so no driver queues a job that never starts (the
        broker answers it with a 422 naming the field, the simulator leaves such trace
        jobs out). Raises :class:`CoreError` for an unknown profile."""
        profile = self._profile(spec.profile)
        if profile.cpu_only:
            if spec.job_class is not JobClass.POOL:
                return Refusal(
                    "job_class",
                    f"profile {profile.name} is CPU-only; hp and spot jobs need a GPU profile",
                )
            return cpu_refusal(
                self.cluster.cpu_shapes, profile.cpu, profile.memory_gb, spec.workers
            )
        if spec.job_class is JobClass.POOL:  # a pod of the profile per worker
            sizes = self.cluster.sizes.get(profile.gpu_model, {})
            return gpu_refusal(
                profile.gpu_model,
                sizes,
                profile.gpus,
                profile.share,
                spec.workers,
                shape_field="profile",
                gpu_pool_field="profile",
            )
        gpu_pool = self.books.gpu_pool(spec)
        cards, share = worker_cards(spec.gpus if spec.gpus is not None else profile.gpu_demand)
        return gpu_refusal(
            gpu_pool,
            self.cluster.sizes.get(gpu_pool, {}),
            cards,
            share,
            spec.workers,
            shape_field="profile" if spec.gpus is None else "gpus",
            gpu_pool_field="profile" if spec.gpu_model is None else "gpu_model",
        )

    def limit(self, spec: JobSpec) -> Refusal | None:
        """Whether ``spec`` is over one of its tenant's caps now (:mod:`stoker.core.shares`:
        its time limit, its jobs queued), or None. A driver asks it before it submits (the
        broker answers a 429 or 422); unlike :meth:`refusal` it is not checked again on
        ``JobSubmitted``, so a restart's replay of jobs admitted under older caps holds."""
        shares = self.policies.shares
        if shares is None:
            return None
        return shares.limit(spec, self.books.queued.get(spec.tenant, 0))

    def timeout_cap(self, tenant: str) -> float | None:
        """The longest time limit ``tenant``'s jobs may have (None: no cap of its own); a
        driver's default time limit stays under it."""
        shares = self.policies.shares
        return None if shares is None else shares.of(tenant).max_timeout_s

    def _profile(self, name: str) -> Profile:
        """The profile of this name; :class:`CoreError` for one the core does not know."""
        profile = self.profiles.get(name)
        if profile is None:
            raise CoreError(f"unknown profile {name!r}")
        return profile

    def _submit(self, spec: JobSpec, now: float, out: list[Action]) -> None:
        profile = self._profile(spec.profile)
        if spec.id in self.jobs:
            raise CoreError(f"duplicate job id {spec.id!r}")
        if spec.job_class is JobClass.POOL:
            if spec.gpus is not None and abs(spec.gpus - profile.gpu_demand) > EPS:
                raise CoreError(
                    f"job {spec.id}: gpus: a pool job takes its profile's "
                    f"({profile.gpu_demand:g}), got {spec.gpus:g}"
                )
            demand = profile.gpu_demand
        else:
            demand = per_worker(spec.gpus if spec.gpus is not None else profile.gpu_demand)
        refused = self.refusal(spec)
        if refused is not None:
            raise CoreError(f"job {spec.id}: {refused}")
        job = Job(spec=spec, state=JobState.QUEUED, submitted=now, per_worker=demand)
        self.books.add_job(job)
        if spec.job_class is JobClass.POOL:
            self.warm.submit(job, now, out)
        else:
            self.hpspot.submit(job, now)

    def _cancel(self, job_id: str, now: float, out: list[Action]) -> None:
        job = self._job(job_id)
        if job.state is JobState.SET_ASIDE:
            self.books.end_job(job, Failure.CANCELLED, None, now, out)  # in no queue
        elif job.state is not JobState.FINISHED:
            self._part(job.job_class).cancel(job, now, out)

    def _revoke(self, tenant: str, now: float, out: list[Action]) -> None:
        """Cancel every unfinished job of ``tenant`` (in id order) and stop its idle warm
        pods; the pods its cancelled jobs leave are stopped as they come free."""
        doomed = sorted(
            j.id
            for j in self.jobs.values()
            if j.spec.tenant == tenant and j.state is not JobState.FINISHED
        )
        self.books.revoked.update(doomed)
        for job_id in doomed:
            self._cancel(job_id, now, out)
        self.warm.stop_idle_of(tenant, now, out)

    def _forget_job(self, job_id: str) -> None:
        """Drop a finished job (the driver keeps its record); nothing else names it by
        then (its part let go of it when it finished)."""
        self.books.job_moves.forget(self._job(job_id))
        del self.jobs[job_id]

    def _forget_pod(self, pod_id: str) -> None:
        """Drop a gone pod: its share is free and no unfinished job points at it (a job
        whose pod goes is re-queued or ended on that event)."""
        pod = self.pods.get(pod_id)
        if pod is None:
            raise CoreError(f"unknown pod {pod_id!r}")
        self.books.pod_moves.forget(pod)
        del self.pods[pod_id]

    def _current(self, job_id: str, pod: str | None) -> bool:
        """Whether rank news is of the job's current run (unknown pod: assumed so)."""
        return pod is None or pod in self._job(job_id).pods

    def _rank_started(self, job_id: str, rank: int, now: float) -> None:
        job = self._job(job_id)
        if job.state not in (JobState.BINDING, JobState.RUNNING):
            return  # late news of a run the core moved on from
        job.ranks_started.add(rank)
        # the job runs once every rank does (a gang's ranks meet before any work)
        if job.state is JobState.BINDING and len(job.ranks_started) == job.workers:
            self.books.move_job(job, JobState.RUNNING, now)
            if job.started is None:
                job.started = now
            if job.job_class is not JobClass.POOL:
                self.hpspot.started(job, now)

    def _rank_exited(
        self,
        job_id: str,
        rank: int,
        exit_code: int,
        failure: Failure | None,
        now: float,
        out: list[Action],
    ) -> None:
        """One rank exited. A failed rank ends the run: the others are killed (the job's
        end waits for their exits). The job ends when every rank has exited, typed by the
        first infrastructure failure among them, else the first non-zero exit (a user error
        unless the runtime said otherwise)."""
        job = self._job(job_id)
        if job.state is JobState.PLACED and job.job_class is not JobClass.POOL:
            # a job re-placed in the pods it kept (a Chronus lease) waits for these
            self.hpspot.old_rank_exited(job, rank, now, out)
            return
        if job.state not in (JobState.BINDING, JobState.RUNNING) or rank in job.ranks_exited:
            # late news of a run the core already moved on from (its pod failed and the job
            # was re-queued, evicted, or ended): the job's current state stands
            return
        if exit_code != 0 and failure is None:
            failure = Failure.USER_ERROR
        first_failure = all(code == 0 for code, _ in job.ranks_exited.values())
        job.ranks_exited[rank] = (exit_code, failure)
        left = job.workers - len(job.ranks_exited)
        if exit_code != 0 and first_failure and left > 0:
            out.append(KillJob(job.id, failure or Failure.USER_ERROR))
        if left > 0:
            return
        ends = list(job.ranks_exited.values())
        code, why = next(
            ((c, f) for c, f in ends if f is not None and f.infrastructure),
            next(((c, f) for c, f in ends if c != 0), (0, None)),
        )
        if job.started is None:
            job.started = now  # it ran, however briefly
        self._part(job.job_class).finish(job, code, why, now, out)

    def _bind_failed(
        self, job_id: str, pod_id: str, infra: bool, now: float, out: list[Action]
    ) -> None:
        """A bind failed. The job's own code or dependencies: a user error of that rank. The
        runtime's fault: the pod is not fit to serve again (stopped), and the rank ends
        typed ``bind_failed`` (infrastructure), never as a user error."""
        job = self._job(job_id)
        if job.state not in (JobState.BINDING, JobState.RUNNING) or pod_id not in job.pods:
            return
        rank = job.pods.index(pod_id)
        if infra:
            self._part(job.job_class).unfit(self.pods[pod_id], now, out)
        why = Failure.BIND_FAILED if infra else Failure.USER_ERROR
        self._rank_exited(job_id, rank, 1, why, now, out)

    # ------------------------------------------------------------------ pods

    def _pod_event(
        self,
        pod_id: str,
        now: float,
        out: list[Action],
        *,
        ready: bool = False,
        failed: Failure | None = None,
        retried: bool = True,
    ) -> None:
        """A pod is ready, or failed (``retried``: its job goes back to its queue if it
        never ran; else it ends with ``failed``)."""
        pod = self.pods.get(pod_id)
        if pod is None or pod.state is PodState.GONE:
            return
        self._stop_retry.pop(pod_id, None)
        pool = pod.job_class is JobClass.POOL
        if ready:
            if pool:
                self.warm.pod_ready(pod_id, now, out)
            else:
                self.hpspot.pod_ready(pod, now, out)
        elif failed is not None:
            if pool:
                self.warm.pod_failed(pod_id, failed, now, out, retried)
                self.hpspot.reclaimed(pod_id)  # gone all the same: its room is free
            else:
                self.hpspot.pod_failed(pod, failed, now, out, retried)
                self.warm.room_freed()

    def _pods_found(self, found: tuple[FoundPod, ...], now: float, out: list[Action]) -> None:
        """After a driver's restart, the pods the runtime has alive: the pods are made to
        agree first (:func:`restart.pod_steps`), then each job bound to adopted pods is
        settled by its agents' reports (:func:`restart.reconcile_job`); the answer begins
        with what was found (:class:`Reconciled`)."""
        at = len(out)
        seen = restart.Found()
        for step in restart.pod_steps(self.pods, found, seen):
            if isinstance(step, PodReady | PodFailed | PodGone):
                self._apply(step, now, out)
            else:
                out.append(step)
        reports = {f.pod: f.agent for f in found}
        rebound: list[str] = []
        lost: list[str] = []
        for job_id in seen.bound:
            job = self.jobs[job_id]
            if job.state not in (JobState.BINDING, JobState.RUNNING):
                continue  # a lost pod of its gang settled it already
            ranks = {p: reports.get(p, AgentReport()) for p in job.pods}
            decision = restart.reconcile_job(job_id, job.state, ranks)
            for event in restart.rank_events(job, ranks, decision):
                self._apply(event, now, out)
            if isinstance(decision, restart.Rebind):
                rebound.append(job_id)
                out.append(BindJob(job_id, tuple(job.pods)))  # agents refuse a job run twice
            elif isinstance(decision, restart.Lost):
                lost.append(job_id)
        did = (seen.adopted, seen.lost, seen.orphans, seen.bound, rebound, lost)
        out.insert(at, Reconciled(*map(tuple, did)))

    def _pod_gone(self, pod_id: str, now: float, out: list[Action]) -> None:
        pod = self.pods.get(pod_id)
        if pod is None or pod.state is PodState.GONE:
            return
        self._stop_retry.pop(pod_id, None)
        if pod.state is not PodState.STOPPING:
            # gone without being asked (the runtime lost it): its job must not wait on it
            self._pod_event(pod_id, now, out, failed=Failure.POD_DIED)
            return
        if pod.job_class is JobClass.POOL:
            self.warm.pod_gone(pod_id, now, out)
            self.hpspot.reclaimed(pod_id)  # an idle pod stopped for an HP job
        else:
            self.hpspot.pod_gone(pod, now)
            self.warm.room_freed()

    def _stop_failed(self, pod_id: str, now: float) -> None:
        pod = self.pods.get(pod_id)
        if pod is None or pod.state is not PodState.STOPPING:
            return
        # the share stays held (the pod may still run): ask again later
        self._stop_retry[pod_id] = now + STOP_RETRY_S

    def _retry_stops(self, now: float, out: list[Action]) -> None:
        for pid, at in list(self._stop_retry.items()):
            if at > now + EPS:
                continue
            del self._stop_retry[pid]
            if self.pods[pid].state is PodState.STOPPING:
                out.append(StopPod(pid, "retry"))

    # ------------------------------------------------------------------ nodes

    def _node_added(
        self, node: Node, gpus: list[str], now: float, out: list[Action], in_place: bool
    ) -> None:
        """A node joined with these GPU ids, or one the core has changed shape: in place
        (``in_place``, NodeChanged, the same GPU model) or, as NodeAdded says it, with other
        GPUs the old node goes first, as if removed, and other CPU slots alone change in
        place while its CPU-only pods fit them."""
        old = self.cluster.nodes.get(node.name)
        if old is not None:
            same_gpus = (old.gpu_model, [g.id for g in old.gpus]) == (node.gpu_model, gpus)
            if same_gpus and (old.cpu, old.memory_gb) == (node.cpu, node.memory_gb):
                return  # the same node, said again
            if in_place and old.gpu_model == node.gpu_model:
                self._node_changed(node, gpus, now, out)
                return
            if same_gpus and self.cluster.set_cpu_slots(node.name, node.cpu, node.memory_gb):
                self.warm.room_freed()
                # every queued job (the set-aside too): CPU-only ones may fit, or not
                self._sort_out(self._queued_ids(), now)
                return
            self._node_removed(node.name, now, out)
        node.gpus = [GPU(g, node.name, i, node.gpu_model) for i, g in enumerate(gpus)]
        self._cap_stale[node.gpu_model] = None
        self.cluster.add_node(node)
        self.hpspot.add_node(node)
        self.warm.room_freed()
        self._sort_out(list(self.books.set_aside), now)  # a job set aside may fit again

    def _node_changed(self, node: Node, gpus: list[str], now: float, out: list[Action]) -> None:
        """The node (the core has it, of the same GPU model) takes these cards and CPU
        slots in place: the pods on the cards it keeps stay, with their jobs; a pod on a
        card it lost fails, and so do its CPU-only pods beyond its new slots, the newest
        first; new cards and slots are free room."""
        name = node.name
        lost = {g.id for g in self.cluster.nodes[name].gpus}.difference(gpus)
        on_node = [p for p in self.pods.values() if p.node == name and p.state is not PodState.GONE]
        cut_off = [p.id for p in on_node if lost.intersection(p.gpus)]
        self._fail_pods(cut_off, "node_changed", now, out)
        if [g.id for g in self.cluster.nodes[name].gpus] != gpus:
            self.cluster.set_gpus(name, gpus)
            self.hpspot.resize_node(name)
            self._cap_stale[node.gpu_model] = None
        cpu_pods = sorted(
            (p for p in on_node if p.id in self.cluster.cpu_allocs), key=lambda p: (p.created, p.id)
        )
        while not self.cluster.set_cpu_slots(name, node.cpu, node.memory_gb):
            newest = cpu_pods.pop()
            if newest.state is not PodState.GONE:
                self._fail_pods([newest.id], "node_changed", now, out)
        self.warm.room_freed()
        # every queued job: those set aside may fit now, others may no longer
        self._sort_out(self._queued_ids(), now)

    def _node_removed(self, name: str, now: float, out: list[Action]) -> None:
        """A node left: each pod on it fails (its job typed ``pod_died``: re-queued if it
        never ran) and is stopped, in case it still runs; then its cards leave the model."""
        if name not in self.cluster.nodes:
            return
        on_node = [
            p.id for p in self.pods.values() if p.node == name and p.state is not PodState.GONE
        ]
        self._fail_pods(on_node, "node_removed", now, out)
        self._cap_stale[self.cluster.nodes[name].gpu_model] = None
        self.hpspot.remove_node(name)
        self.cluster.remove_node(name)
        # every queued job, the ones just re-queued from this node's pods too
        self._sort_out(self._queued_ids(), now)

    def _fail_pods(self, pods: list[str], reason: str, now: float, out: list[Action]) -> None:
        """Pods whose node (or cards) went: each fails (``pod_died``; its job typed so, or
        re-queued if it never ran) and is stopped, in case it still runs."""
        for pid in pods:
            if self.pods[pid].state is not PodState.GONE:  # a gang's pod may have gone
                self._pod_event(pid, now, out, failed=Failure.POD_DIED)
        stopping = {a.pod for a in out if isinstance(a, StopPod)}
        out.extend(StopPod(pid, reason) for pid in pods if pid not in stopping)

    def _queued_ids(self) -> list[str]:
        """Every queued job's id, those set aside included."""
        return [j.id for j in self.jobs.values() if j.state.waiting]

    def _sort_out(self, queued: list[str], now: float) -> None:
        """After a node joined or left: of these queued jobs (set aside or not), those that
        can start nowhere now are set aside (:attr:`JobState.SET_ASIDE`, with the refusal as
        the cluster is now), and those set aside that fit again go back to their queue."""
        for jid in queued:
            job = self.jobs[jid]
            why = self.refusal(job.spec)
            aside = job.state is JobState.SET_ASIDE
            if why is not None:
                if not aside:
                    self._part(job.job_class).withdraw(job)
                self.books.move_job(job, JobState.SET_ASIDE, now, refusal=why)
            elif aside:
                self.books.move_job(job, JobState.QUEUED, now)
                self._part(job.job_class).restore(job)

    # ------------------------------------------------------------------ forecasts

    def _forecast(
        self, tenant: str, gpu_model: str, mean: tuple[float, ...], var: tuple[float, ...]
    ) -> None:
        """Sum the tenants' forecasts of a GPU pool (means and variances add: tenants are
        taken as independent); its spot quota and the warm budget's HP cap follow
        (:meth:`_settle_forecasts`)."""
        if len(mean) != len(var) or not mean:
            raise CoreError("forecast: mean and var need the same, nonzero length")
        per = self._forecasts.setdefault(gpu_model, {})
        new = (np.asarray(mean, float), np.asarray(var, float))
        total = self.forecast.get(gpu_model)
        old = per.get(tenant)
        if (
            total is None
            or len(total[0]) != len(mean)
            or (old is not None and len(old[0]) != len(mean))
        ):
            per[tenant] = new
            total_mean = np.sum([m for m, _ in per.values()], axis=0)
            total_var = np.sum([v for _, v in per.values()], axis=0)
        else:
            # one tenant's answer changed: the sums move by its difference (O(hours))
            total_mean, total_var = total[0] + new[0], total[1] + new[1]
            if old is not None:
                total_mean -= old[0]
                total_var -= old[1]
            per[tenant] = new
        self.forecast[gpu_model] = (total_mean, total_var)
        self._forecast_gpu_pools[gpu_model] = None
        self._cap_stale[gpu_model] = None

    def _settle_forecasts(self) -> None:
        """The spot quota follows the GPU pools' summed forecasts (once per GPU pool for a query's
        many tenants: nothing reads them in between); the warm budget's cap is set after
        every scheduling pass (:meth:`handle_all`)."""
        if not self._forecast_gpu_pools:
            return
        for gpu_pool in self._forecast_gpu_pools:
            self.hpspot.set_forecast(gpu_pool, *self.forecast[gpu_pool])
        self._forecast_gpu_pools = {}

    def _follow_hp_cap(self, now: float) -> None:
        """Set the warm budget's HP cap (:meth:`_hp_cap`) after a scheduling pass, GPU pool by
        GPU pool for the GPU pools whose inputs may have moved since the last pass: a new forecast,
        a node joining or leaving, the HP GPUs running there, a warm pod's keep-alive
        deadline (before or now). The others keep their cap: it is a function of those
        inputs alone, so the result is :meth:`_hp_cap`'s (a test compares them after every
        event); a GPU pool whose cap appears or goes rebuilds the whole map in forecast order
        (the order in which :meth:`WarmPools._enforce_hp_cap` walks it)."""
        stale = self._cap_stale
        stale.update(dict.fromkeys(self.hpspot.hp_moved()))
        timed = self.warm.timed_models()
        stale.update(dict.fromkeys(self._cap_timed))
        stale.update(dict.fromkeys(timed))
        self._cap_timed = timed
        if not stale:
            return
        cap = self.warm.hp_cap
        for model in stale:
            if model not in self.forecast:
                continue
            bound = self._cap_of(model, now)
            if (bound is None) != (model not in cap):
                self.warm.hp_cap = self._hp_cap(now)
                break
            if bound is not None:
                cap[model] = bound
        stale.clear()

    def _hp_cap(self, now: float) -> dict[str, float]:
        """Per GPU pool with a forecast, the GPUs idle pods there may hold so that HP
        finds its room, by the warm cap policy (from the GPU pool's capacity, the HP GPUs
        running there, the forecast of the next hour, and how long idle pods there may
        yet hold their cards by keep-alive). A GPU pool without a forecast (or
        under a policy with no bound) is not capped; one GPU pool's slack never lets idle pods
        hold another GPU pool's HP room."""
        cap: dict[str, float] = {}
        for model in self.forecast:
            bound = self._cap_of(model, now)
            if bound is not None:
                cap[model] = bound
        return cap

    def _cap_of(self, model: str, now: float) -> float | None:
        """The warm cap of one GPU pool with a forecast (None: not capped)."""
        gpus = self.cluster.capacity.get(model)
        if gpus is None:
            return None
        mean, var = self.forecast[model]
        used = self.hpspot.used.get(model)
        hp_used = used[JobClass.HP] if used is not None else 0.0
        sd = math.sqrt(max(float(var[0]), 0.0))
        horizon = self.warm.keepalive_left(model, now)
        return self.policies.warm_cap.cap(gpus, hp_used, float(mean[0]), sd, self._z, horizon)
