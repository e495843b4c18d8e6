"""Warm pools: how the one core serves ``pool`` jobs (Firepool).

A job takes, in order: an idle warm pod of its own (tenant, reuse tag) (warm hit); a
standby pod on a GPU it can take over now (standby hit); free capacity, reclaimed from
idle pods if need be (cold start); else it waits in its profile's queue. A pod that ran
one (tenant, tag) never runs another: changing hands means a new pod (recycled in place
under a new id, or replaced). Idle warm and standby pods are also the first, free room an
HP job reclaims (:meth:`WarmPools.idle_cards`, :meth:`WarmPools.reclaim`).

Per profile (:class:`~stoker.core.core.ProfilePolicies`): its own keep-alive, and a
minimum warm count: spare pods started ahead for callers not yet seen. A spare is a
standby pod that holds its profile's whole share (so taking it never stops another pod); it
has no keep-alive, counts against the warm budget, and is replaced when a job takes it.
CPU-only profiles (``gpus = 0``) take a node's CPU slots instead of GPU shares.

This is a part of :class:`stoker.core.Core`, called only from its ``handle``; pods and
jobs live in the shared :class:`~stoker.core.books.Books` and move through its transition
tables. What it asks of the hp/spot part goes through :class:`~stoker.core.ports.HpRoom`.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator
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
from stoker.core.model import (
    EPS,
    GPU,
    Cluster,
    Failure,
    HitPath,
    Job,
    JobClass,
    JobState,
    Pod,
    PodState,
    Profile,
)

if TYPE_CHECKING:
    from stoker.core.books import Books
    from stoker.core.config import Policies
    from stoker.core.policies import KeepAlive
    from stoker.core.ports import HpRoom

_IDLE = (PodState.WARM, PodState.STANDBY)
# a pod's states while it runs, or comes up for, a job of its caller
_BUSY = (PodState.STARTING, PodState.RECYCLING, PodState.ACTIVE)
# fits looked at for a node with the profile's image cached before the tightest fit is taken
_IMAGE_LOOKAHEAD = 64
# states a pod enters that may let a waiting job go: a new idle pod to reclaim, room freed
_ROOM = (PodState.WARM, PodState.STANDBY, PodState.STOPPING, PodState.GONE)


class WarmPools:
    """Pool jobs, warm and standby pods, the warm budget and keep-alive."""

    def __init__(self, books: Books, policies: Policies) -> None:
        self.books = books
        self.cluster = books.cluster
        self.profiles = books.profiles
        self.policies = policies
        self.jobs = books.jobs
        self.pods = books.pods
        # the hp/spot part's holds on room (wired by the core: :meth:`connect`)
        self.hp: HpRoom
        # per GPU model, the GPUs idle pods there may hold at most so HP demand finds its
        # room (the core sets it by the warm cap policy from that GPU pool's HP forecast:
        # what HP is not forecast to need); a model without an entry is not capped. Under a
        # policy that does not hold it, it bounds only new idle capacity (standby staging,
        # spares)
        self.hp_cap: dict[str, float] = {}
        self._queues: dict[str, dict[str, None]] = {p: {} for p in self.profiles}
        self._warm: dict[tuple[str, str, str], dict[str, None]] = {}
        self._standby: dict[str, dict[str, None]] = {p: {} for p in self.profiles}
        self._promotable: dict[str, dict[str, None]] = {p: {} for p in self.profiles}
        self._standby_on_gpu: dict[str, str] = {}
        self._idle: dict[str, None] = {}  # idle warm + standby (+ starting standby) pods
        self._idle_gpus = 0.0
        self._idle_by_model: dict[str, float] = {}  # the same, per GPU model
        # bumped on every pool pod's state change: what an HP reclaim finds among idle pods
        # may differ (the gang scheduler searches again only after a change)
        self.epoch = 0
        self._queued_gpus = 0.0
        self._deadlines: list[tuple[float, int, str]] = []
        # per GPU model, warm pods' keep-alive deadlines: how long idle pods there may yet
        # hold their cards (the keepalive warm cap's horizon)
        self._warm_until: dict[str, dict[str, float]] = {}
        self._reclaim: dict[str, set[str]] = {}  # job -> pods stopping to make room for it
        self._reclaim_by_pod: dict[str, str] = {}  # reclaim victim -> the job it stops for
        # queued jobs per (profile, tenant, tag), and the keys whose pods just turned warm:
        # a pod turning warm serves a queued job of its own caller before any reclaim
        self._queued_pairs: dict[tuple[str, str, str], dict[str, None]] = {}
        self._fresh: dict[tuple[str, str, str], None] = {}
        # set when something changed that may let a blocked queue move (see _ROOM); a busy
        # cluster with a waiting queue then pays for placement only when it can succeed
        self._dirty = True
        # nodes where a pod of the profile has started: its image is cached there, so a cold
        # start on one of them skips the image pull
        self._image_nodes: dict[str, dict[str, None]] = {p: {} for p in self.profiles}
        self._heap_seq = 0  # deadline heap tie-break
        # spare pods per profile (starting or standby): kept ready for its minimum warm count
        self._spare: dict[str, dict[str, None]] = {p: {} for p in self.profiles}
        # (profile, tenant, tag) -> time its keep-alive was renewed until (Renewed)
        self._renewed: dict[tuple[str, str, str], float] = {}
        # per GPU model, the longest keep-alive a new caller of its GPU profiles gets (the
        # profiles and their keep-alive policies are fixed: read once, not on every pass)
        self._first_ttl: dict[str, float] = {}
        for p in self.profiles.values():
            if p.gpus:
                ttl = self.keepalive(p.name).first_ttl_s
                self._first_ttl[p.gpu_model] = max(ttl, self._first_ttl.get(p.gpu_model, ttl))

    # ------------------------------------------------------------------ public API

    def connect(self, hp: HpRoom) -> None:
        """Wire the hp/spot part's port (once, by the core)."""
        self.hp = hp

    def after(self, now: float, out: list[Action]) -> None:
        """After every event: place what can go, hold the warm budget, then start the spare
        pods a profile's minimum warm count asks for (within the budget)."""
        self._drain(now, out)
        self._enforce_budget(now, out)
        self._replenish(now, out)

    def keepalive(self, profile: str) -> KeepAlive:
        """The keep-alive policy of a profile: its own, else the core's."""
        own = self.policies.profiles.get(profile)
        if own is None or own.keepalive is None:
            return self.policies.keepalive
        return own.keepalive

    def renew(self, key: tuple[str, str, str], until: float) -> None:
        """Keep the pods of (profile, tenant, tag) until ``until`` at least: warm ones now,
        a busy one when its job ends (:meth:`finish`)."""
        self._renewed[key] = max(until, self._renewed.get(key, until))
        for pid in self._warm.get(key, {}):
            pod = self.pods[pid]
            if until > pod.deadline:
                pod.deadline = until
                heapq.heappush(self._deadlines, (until, self._seq_next(), pid))
                self._note_deadline(pod)

    def is_spare(self, pod_id: str) -> bool:
        """Whether a pod was started for its profile's minimum warm count (and not yet taken)."""
        pod = self.pods.get(pod_id)
        return pod is not None and pod_id in self._spare.get(pod.profile, {})

    def held(self, key: tuple[str, str, str]) -> list[str]:
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

    def refresh_cards(self, gpus: list[str]) -> None:
        """Another part's pod took or left these cards: a standby there may no longer (or
        may now) be promotable."""
        if not self._standby_on_gpu:
            return  # no standby anywhere (hp and spot alone: every card, every time)
        for gid in gpus:
            self._refresh_gpu(gid)

    def room_freed(self) -> None:
        """Another part's pod left the cluster: a waiting pool job may fit now."""
        self._dirty = True

    def next_deadline(self) -> float | None:
        """The earliest keep-alive deadline (when a Tick would stop a warm pod)."""
        while self._deadlines:
            if self._armed(self._deadlines[0]):
                return self._deadlines[0][0]
            heapq.heappop(self._deadlines)
        return None

    def keepalive_left(self, model: str, now: float) -> float:
        """How long idle pods of GPU model ``model`` may yet hold their cards by keep-alive:
        the latest deadline of a warm pod there, from ``now`` (``inf`` under always-on);
        with none warm, the longest keep-alive a new caller of the model's profiles gets
        (what a pod turning warm next would hold)."""
        until = self._warm_until.get(model)
        if until:
            return max(0.0, max(until.values()) - now)
        return self._first_ttl.get(model, 0.0)

    def timed_models(self) -> list[str]:
        """The GPU models with a warm pod's keep-alive deadline: their
        :meth:`keepalive_left` runs down with time (the others' is fixed)."""
        return [model for model, until in self._warm_until.items() if until]

    def _note_deadline(self, pod: Pod) -> None:
        if pod.gpus:  # a CPU-only pod holds no card a GPU pool's HP could need
            self._warm_until.setdefault(self._model_of(pod), {})[pod.id] = pod.deadline

    def _armed(self, entry: tuple[float, int, str]) -> bool:
        """Whether a keep-alive deadline still holds (its pod waits warm until then)."""
        pod = self.pods.get(entry[2])
        return pod is not None and pod.state is PodState.WARM and pod.deadline == entry[0]

    @property
    def idle_gpus(self) -> float:
        """GPUs held by idle warm and standby pods (what the warm budget caps)."""
        return self._idle_gpus

    def budget_limit(self) -> float:
        """GPUs idle pods may hold now.

        The budget's queue-driven limit, except that standby pods staged beside busy pods
        count against the base cap alone: stopping one frees a sliver of a busy GPU that no
        queued job can use, and promoting it is the fastest way to serve the queue once that
        GPU's job ends.
        """
        base = self._budget_base()
        limit = min(
            self._hp_total(),
            self.policies.budget.limit(self.cluster.total_gpus, self._queued_gpus),
        )
        if self._idle_gpus <= limit + EPS or limit >= base:
            return limit
        return min(base, limit + sum(self._staged_standby().values()))

    def _budget_base(self) -> float:
        return min(self._hp_total(), self.policies.budget.limit(self.cluster.total_gpus, 0.0))

    def _hp_total(self) -> float:
        """GPUs idle pods may hold under the HP forecast, every GPU model together (each
        model is held to its own cap: :meth:`_enforce_hp_cap`)."""
        caps = self.hp_cap
        if not caps:
            return math.inf
        return sum(min(caps.get(m, math.inf), c) for m, c in self.cluster.capacity.items())

    def _model_of(self, pod: Pod) -> str:
        # a CPU-only pod holds no card: its profile's GPU model (its share there is 0)
        if not pod.gpus:
            return self.profiles[pod.profile].gpu_model
        return self.cluster.gpus[pod.gpus[0]].model

    def _staged_standby(self) -> dict[str, float]:
        """Standby pods (ready or starting) sharing their GPU with a pod that is not idle,
        with their shares."""
        staged: dict[str, float] = {}
        for gid, sid in self._standby_on_gpu.items():
            allocs = self.cluster.gpus[gid].allocs
            if any(o != sid and o not in self._idle for o in allocs):
                staged[sid] = allocs.get(sid, 0.0)
        return staged

    def idle_cards(self, model: str) -> dict[str, list[tuple[tuple[int, float], str]]]:
        """Per node of GPU model ``model``: the cards held by idle pods alone (freed whole
        by stopping them), each with its cost, cheapest first: standby-only cards (0), then
        warm ones by the budget's value (least valuable first)."""
        budget = self.policies.budget
        now = self.books.now
        cards: dict[str, dict[str, tuple[int, float]]] = {}
        for pid in self._idle:
            pod = self.pods[pid]
            if pod.state not in _IDLE:
                continue
            for gid in pod.gpus:
                gpu = self.cluster.gpus[gid]
                if gpu.model != model:
                    continue
                owners = [self.pods.get(o) for o in gpu.allocs]
                if any(o is None or o.state not in _IDLE for o in owners):
                    continue
                standby_only = all(o.state is PodState.STANDBY for o in owners)  # type: ignore[union-attr]
                value = max(budget.value(o, now) for o in owners)  # type: ignore[arg-type]
                cards.setdefault(pod.node, {})[gid] = (0 if standby_only else 1, value)
        return {
            node: sorted(((cost, gid) for gid, cost in by_gpu.items()))
            for node, by_gpu in sorted(cards.items())
        }

    def idle_nodes(self, model: str) -> list[str]:
        """Nodes of GPU model ``model`` where idle warm or standby pods are, in name order."""
        nodes = {
            self.pods[p].node
            for p in self._idle
            if self.pods[p].state in _IDLE
            and self.pods[p].gpus
            and self.cluster.gpus[self.pods[p].gpus[0]].model == model
        }
        return sorted(nodes)

    def idle_share(self, gid: str) -> tuple[float, list[Pod]]:
        """The share idle pods hold on one card, and those pods (cheapest first)."""
        budget = self.policies.budget
        pods = [
            self.pods[o]
            for o in self.cluster.gpus[gid].allocs
            if o in self.pods and self.pods[o].state in _IDLE
        ]
        pods.sort(key=lambda p: (p.state is not PodState.STANDBY, budget.value(p, self.books.now)))
        return sum(self.cluster.gpus[gid].allocs[p.id] for p in pods), pods

    def reclaim(self, pod: Pod, now: float, out: list[Action]) -> None:
        """Stop an idle pod for HP demand (free of cost); its share is held until PodGone."""
        self._stop(pod, "reclaim_hp", now, out)

    def queued(self, profile: str | None = None) -> list[str]:
        """Queued job ids, in queue order."""
        names = [profile] if profile else list(self._queues)
        return [j for name in names for j in self._queues.get(name, {})]

    def check(self) -> None:
        """Raise if an invariant does not hold (used by tests after every event)."""
        self.cluster.check()
        idle = 0.0
        by_model: dict[str, float] = {}
        for pod in self.pods.values():
            if pod.state is PodState.GONE or pod.job_class is not JobClass.POOL:
                continue
            if pod.id in self._idle:
                share = self._pod_share(pod)
                idle += share
                model = self._model_of(pod)
                by_model[model] = by_model.get(model, 0.0) + share
        if abs(idle - self._idle_gpus) > 1e-6:
            raise AssertionError(f"idle GPUs {self._idle_gpus} != {idle}")
        for model in by_model.keys() | self._idle_by_model.keys():
            held = self._idle_by_model.get(model, 0.0)
            if abs(held - by_model.get(model, 0.0)) > 1e-6:
                raise AssertionError(f"idle GPUs of {model}: {held} != {by_model.get(model)}")
        for job in self.jobs.values():
            if job.job_class is not JobClass.POOL:
                continue
            queued = job.id in self._queues[job.spec.profile]
            aside = job.id in self.books.set_aside  # queued, in no queue
            if (job.state is JobState.QUEUED) != (queued or aside) or (queued and aside):
                raise AssertionError(f"job {job.id} state {job.state} but queued={queued}")
        for (profile, *pair), pods in self._warm.items():
            for pid in pods:
                pod = self.pods[pid]
                if pod.state is not PodState.WARM or (pod.profile, pod.owner) != (
                    profile,
                    tuple(pair),
                ):
                    raise AssertionError(f"warm index holds {pid} ({pod.state}, {pod.owner})")
        for pod in self.pods.values():
            if pod.state is PodState.STANDBY and pod.id in self._spare[pod.profile]:
                if pod.id not in self._promotable[pod.profile]:
                    raise AssertionError(f"spare {pod.id} not promotable")
            elif pod.state is PodState.STANDBY:
                # the promotable index must match the GPU: stale entries would stop busy pods
                gpu = self.cluster.gpus[pod.gpus[0]]
                ok = all(self._is_warm_pod(o) for o in gpu.allocs if o != pod.id)
                if ok != (pod.id in self._promotable[pod.profile]):
                    held = {o: self.pods[o].state.value for o in gpu.allocs if o in self.pods}
                    raise AssertionError(
                        f"standby {pod.id} promotable index stale: {gpu.id} holds {held}"
                    )
        for job_id, victims in self._reclaim.items():
            if self.jobs[job_id].state is not JobState.QUEUED:
                raise AssertionError(f"reclaim for job {job_id} in state {self.jobs[job_id].state}")
            for pid in victims:
                if self.pods[pid].state is not PodState.STOPPING:
                    raise AssertionError(f"reclaim victim {pid} is {self.pods[pid].state}")

    # ------------------------------------------------------------------ events

    def submit(self, job: Job, now: float, out: list[Action]) -> None:
        """A new pool job (the core checked its fields and registered it)."""
        spec = job.spec
        self.keepalive(spec.profile).observe_submit(job.pair, now)
        self._enqueue(job)
        # try at once, ahead of older queued jobs only if those are waiting on capacity
        # that this job would not take (a warm hit uses no new capacity)
        queue = self._queues[spec.profile]
        head = next(iter(queue))
        if head == job.id or len(self._warm_pods(job)) >= spec.workers:
            self._try_place(job, now, out)
        elif head in self._reclaim:
            self._dirty = True  # the head waits on its reclaim: this job may start its own

    def withdraw(self, job: Job) -> None:
        """Take a queued job out of its profile's queue, still queued: it can start nowhere
        as the cluster is now (:attr:`Core.unplaceable`)."""
        self._dequeue(job)

    def restore(self, job: Job) -> None:
        """A withdrawn job fits again: back at its profile's queue's tail."""
        self._enqueue(job)
        self._dirty = True

    def cancel(self, job: Job, now: float, out: list[Action]) -> None:
        if job.state is JobState.QUEUED:
            self._dequeue(job)
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
        pod = self.pods.get(pod_id)
        if pod is None or pod.state not in (PodState.STARTING, PodState.RECYCLING):
            return
        job_id = pod.pending_job
        if job_id is None:
            if pod.owner is None and pod.id in self._spare[pod.profile]:
                self._set_state(pod, PodState.STANDBY, now)
                self._standby[pod.profile][pod.id] = None
                self._promotable[pod.profile][pod.id] = None  # it holds its whole share
            elif pod.owner is None and pod.gpus and self._is_standby_slot(pod):
                self._set_state(pod, PodState.STANDBY, now)
                self._standby[pod.profile][pod.id] = None
                self._refresh_gpu(pod.gpus[0])
            else:
                self._orphan(pod, now, out)
            return
        pod.pending_job = None
        self._set_state(pod, PodState.ACTIVE, now)
        pod.job = job_id
        self._refresh_gpus(pod)
        self._stage_standby(pod, now, out)
        job = self.jobs[job_id]
        if all(
            self.pods[p].state is PodState.ACTIVE and self.pods[p].pending_job is None
            for p in job.pods
        ):
            self._bind(job, now, out)

    def pod_failed(self, pod_id: str, reason: Failure, now: float, out: list[Action]) -> None:
        pod = self.pods.get(pod_id)
        if pod is None or pod.state is PodState.GONE:
            return
        job_id = pod.pending_job or pod.job
        self._gone(pod, now)
        if job_id is None:
            return
        job = self.jobs[job_id]
        if job.state in (JobState.PLACED, JobState.BINDING) and job.started is None:
            # an infrastructure failure before the job ran: it goes back to the queue
            self._release_gang(job, pod_id, now, out)
            self.books.move_job(job, JobState.QUEUED, now)
            job.pods, job.placed, job.pod_ready, job.path = [], None, None, None
            job.ranks_started.clear()
            job.ranks_exited.clear()
            self._enqueue(job, front=True)
            out.append(JobRequeued(job.id, reason))
        elif job.state is not JobState.FINISHED:
            self._release_gang(job, pod_id, now, out)
            self._end(job, reason, now, out)

    def pod_gone(self, pod_id: str, now: float, out: list[Action]) -> None:
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
        keepalive = self.keepalive(job.spec.profile)
        ttl = keepalive.ttl(job.pair)
        # one end per job, as one submit per job: a gang's pods do not count as several pauses
        keepalive.observe_end(job.pair, now)
        renewed = self._renewed.get((job.spec.profile, *job.pair))
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
            self._make_warm(pod, ttl, now)

    def tick(self, now: float, out: list[Action]) -> None:
        """Stop warm pods whose keep-alive ran out (and forget renewals that ran out)."""
        for key in [k for k, until in self._renewed.items() if until <= now + EPS]:
            del self._renewed[key]
        while self._deadlines and self._deadlines[0][0] <= now + EPS:
            entry = heapq.heappop(self._deadlines)
            if self._armed(entry):
                self._stop(self.pods[entry[2]], "keepalive", now, out)

    # ------------------------------------------------------------------ placement

    def _try_place(self, job: Job, now: float, out: list[Action]) -> bool:
        """Place ``job`` if it can be placed now; start reclaiming idle pods if that would
        make room. Returns True when the job left the queue."""
        profile = self.profiles[job.spec.profile]
        need = job.spec.workers
        warm = self._warm_pods(job)
        picked: list[tuple[HitPath, str]] = []
        matching = self.policies.matching
        while warm and len(picked) < need:
            pid = matching.pick_warm(warm)
            if pid is None:
                break
            picked.append((HitPath.WARM, pid))
            if len(picked) < need:  # a one-pod job (the common case) copies nothing
                warm = {p: None for p in warm if p != pid}
        standby = []
        if matching.standby and len(picked) < need:
            # promoting stops the warm pods on the standby's GPU: never one this job takes
            mine = {g for _, pid in picked for g in self.pods[pid].gpus}
            for pid in self._promotable[profile.name]:
                if mine.intersection(self.pods[pid].gpus):
                    continue
                standby.append(pid)
                if len(picked) + len(standby) == need:
                    break
        missing = need - len(picked) - len(standby)
        taken = {pid for _, pid in picked} | set(standby)
        # a promoted standby grows to a full share on its GPU and the idle pods there go: a
        # cold pod of this plan may share that GPU only in what is left
        busy = {gid for pid in standby for gid in self.pods[pid].gpus}
        growth = {
            gid: 0.0 if pid in self._spare[profile.name] else self._promotion_growth(gid, profile)
            for pid in standby
            for gid in self.pods[pid].gpus
        }
        slots = self._find_capacity(profile, missing, set(), growth) if missing else []
        if len(slots) < missing:
            if job.id in self._reclaim:
                return False  # room is already being freed for it
            if self._own_pods_busy(job):
                # its caller's pods are busy and turn warm for it when their jobs end: it
                # waits for one (a warm hit) rather than stop another pod for a cold start,
                # so a caller's concurrent jobs on one tag keep one bounded set of pods
                return False
            if not slots and self._can_recycle(
                profile, missing, taken, job, now, out, picked, standby
            ):
                return True
            # reclaim only the shortfall, around the slots that are free already
            busy.update(g for _, gpus in slots for g in gpus)
            self._start_reclaim(job, profile, missing - len(slots), taken, busy, now, out)
            return False
        self._dequeue(job)
        self.books.move_job(job, JobState.PLACED, now)
        job.placed = now
        path = HitPath.WARM
        for _, pid in picked:
            pod = self.pods[pid]
            self._unwarm(pod)
            self._set_state(pod, PodState.ACTIVE, now)
            pod.job = job.id
            job.pods.append(pid)
        for pid in standby:
            self._promote(self.pods[pid], job, now, out)
            path = HitPath.STANDBY
        for node, gpus in slots:
            pod = self._new_pod(profile, node, gpus, profile.share, now)
            pod.pending_job = job.id
            job.pods.append(pod.id)
            self._image_nodes[profile.name][node] = None
            out.append(StartPod(pod.id, profile.name, node, tuple(gpus)))
            path = HitPath.COLD
        job.path = path
        for pid in job.pods:
            self._refresh_gpus(self.pods[pid])
            if self.pods[pid].state is PodState.ACTIVE:
                self._stage_standby(self.pods[pid], now, out)
        if all(self.pods[p].pending_job is None for p in job.pods):
            self._bind(job, now, out)
        return True

    def _own_pods_busy(self, job: Job) -> bool:
        """Whether a pod of ``job``'s own (tenant, tag) is running or starting for another
        of its jobs (with reuse: it turns warm for this caller when that job ends)."""
        if not self.policies.matching.reuse:
            return False
        profile = job.spec.profile
        return any(
            pod.profile == profile and pod.state in _BUSY and self._pair_of(pod) == job.pair
            for pod in self.pods.values()
        )

    def _tenant_pods(self, profile: str) -> dict[str, int]:
        """Pods of ``profile`` each tenant holds (idle, busy or starting for its job)."""
        held: dict[str, int] = {}
        for pod in self.pods.values():
            if pod.profile != profile or pod.job_class is not JobClass.POOL:
                continue
            if pod.state in (PodState.STOPPING, PodState.GONE, PodState.STANDBY):
                continue
            tenant = self._tenant_of(pod)
            if tenant is not None:
                held[tenant] = held.get(tenant, 0) + 1
        return held

    def _pair_of(self, pod: Pod) -> tuple[str, str] | None:
        """The (tenant, tag) a pod serves: its owner, or the job it starts for."""
        if pod.owner is not None:
            return pod.owner
        job = self.jobs.get(pod.pending_job or pod.job or "")
        return None if job is None else job.pair

    def _tenant_of(self, pod: Pod) -> str | None:
        pair = self._pair_of(pod)
        return None if pair is None else pair[0]

    def _takeable(self, job: Job, profile: Profile, pods: list[Pod]) -> list[Pod]:
        """The idle pods of ``pods`` ``job`` may stop for room (:meth:`Matching.may_reclaim`);
        a pod of another profile is left to its own profile's split."""
        held = self._tenant_pods(profile.name)
        mine = held.get(job.spec.tenant, 0)
        may = self.policies.matching.may_reclaim
        out = []
        for pod in pods:
            owner = self._tenant_of(pod)
            if owner is None or pod.profile != profile.name:
                out.append(pod)  # a spare or standby, or another profile's (split per profile)
            elif may(mine, held.get(owner, 0), owner == job.spec.tenant):
                out.append(pod)
        return out

    def _warm_pods(self, job: Job) -> dict[str, None]:
        if not self.policies.matching.reuse:
            return {}
        return self._warm.get((job.spec.profile, *job.pair), {})

    def _promotion_growth(self, gid: str, profile: Profile) -> float:
        """How much more of GPU ``gid`` is held once its standby is promoted (negative when
        the idle warm pods stopped for it held more than the standby grows)."""
        gpu = self.cluster.gpus[gid]
        sid = self._standby_on_gpu[gid]
        others = sum(share for owner, share in gpu.allocs.items() if owner != sid)
        return profile.share - gpu.allocs.get(sid, 0.0) - others

    def _find_capacity(
        self,
        profile: Profile,
        count: int,
        exclude: set[str],
        planned: dict[str, float] | None = None,
    ) -> list[tuple[str, list[str]]]:
        """Free GPU slots for up to ``count`` pods (node, gpus each), best fit first, never on
        the GPUs in ``exclude`` nor on nodes reserved for a waiting HP job (what frees
        there is that job's); fewer than ``count`` when the cluster is short."""
        extra: dict[str, float] = dict(planned or {})  # shares this plan takes per GPU
        slots: list[tuple[str, list[str]]] = []
        if profile.cpu_only:
            return self._find_cpu_slots(profile, count)
        reserved = self.hp.reserved_nodes(profile.gpu_model)
        if reserved:  # its cards are left out like excluded ones (gfs-reserve presets only)
            nodes = self.cluster.nodes
            exclude = exclude | {gpu.id for name in reserved for gpu in nodes[name].gpus}
        if profile.gpus == 1:
            cached = self._image_nodes[profile.name]
            for _ in range(count):
                pick = None
                for seen, gpu in enumerate(self._fitting(profile, exclude, extra), 1):
                    if gpu.node in cached:
                        pick = gpu
                        break
                    # else the tightest fit, after a bounded look for a node with the image
                    # cached, so a start stays cheap on a large cluster
                    pick = pick or gpu
                    if seen >= _IMAGE_LOOKAHEAD:
                        break
                if pick is None:
                    return slots
                extra[pick.id] = extra.get(pick.id, 0.0) + profile.share
                slots.append((pick.node, [pick.id]))
            return slots
        for _ in range(count):
            by_node: dict[str, list[str]] = {}
            found = None
            for gpu in self._fitting(profile, exclude, extra):
                ids = by_node.setdefault(gpu.node, [])
                ids.append(gpu.id)
                if len(ids) == profile.gpus:
                    found = (gpu.node, ids)
                    break
            if found is None:
                return slots
            for gid in found[1]:
                extra[gid] = extra.get(gid, 0.0) + profile.share
            slots.append(found)
        return slots

    def _fitting(
        self, profile: Profile, exclude: set[str], extra: dict[str, float]
    ) -> Iterator[GPU]:
        """The cluster's cards with room for one of ``profile``'s pods, best fit first, but
        those in ``exclude`` and those the plan's ``extra`` shares already fill."""
        share = profile.share
        for gpu in self.cluster.gpus_with_room(profile.gpu_model, share):
            if gpu.id not in exclude and gpu.free - extra.get(gpu.id, 0.0) >= share - EPS:
                yield gpu

    def _find_cpu_slots(self, profile: Profile, count: int) -> list[tuple[str, list[str]]]:
        """CPU slots for up to ``count`` pods of a CPU-only profile (node, no GPUs each),
        filling one node before the next."""
        slots: list[tuple[str, list[str]]] = []
        taken: dict[str, int] = {}
        for node in self.cluster.nodes_with_cpu(profile.cpu, profile.memory_gb):
            free_cpu, free_mem = self.cluster.cpu_free(node)
            fits = _cpu_fits(free_cpu, free_mem, profile)
            while taken.get(node, 0) < fits and len(slots) < count:
                taken[node] = taken.get(node, 0) + 1
                slots.append((node, []))
            if len(slots) == count:
                break
        return slots

    def _victims(
        self,
        job: Job,
        profile: Profile,
        count: int,
        exclude: set[str],
        busy: set[str],
        now: float,
    ) -> list[list[Pod]] | None:
        """Idle pods (not in ``exclude``) whose stopping frees ``count`` slots for ``profile``
        on GPUs not in ``busy`` (CPU slots for a CPU-only profile), lowest value first."""
        budget = self.policies.budget
        candidates = sorted(
            self._takeable(
                job,
                profile,
                [
                    self.pods[p]
                    for p in self._idle
                    if p not in exclude
                    and self.pods[p].state in _IDLE
                    and _same_slots(self.cluster, self.pods[p], profile)
                ],
            ),
            key=lambda pod: (budget.value(pod, now), pod.id),
        )
        if profile.cpu_only:
            return self._cpu_victims(profile, count, candidates)
        freed: dict[str, float] = {}
        per_node: dict[str, list[Pod]] = {}
        groups: list[list[Pod]] = []
        used_gpus = set(busy)
        for victim in candidates:
            for gid in victim.gpus:
                freed[gid] = freed.get(gid, 0.0) + self.cluster.gpus[gid].allocs.get(victim.id, 0)
            per_node.setdefault(victim.node, []).append(victim)
            node = self.cluster.nodes[victim.node]
            room = [
                g.id
                for g in node.gpus
                if g.id not in used_gpus and g.free + freed.get(g.id, 0.0) >= profile.share - EPS
            ]
            if len(room) >= profile.gpus:
                chosen = set(room[: profile.gpus])
                used_gpus.update(chosen)
                # only the victims on the chosen GPUs go; the rest of the node's candidates
                # (a standby beside an active pod, say) stay for a later slot or keep running
                pending = per_node.pop(victim.node)
                groups.append([v for v in pending if chosen.intersection(v.gpus)])
                rest = [v for v in pending if not chosen.intersection(v.gpus)]
                if rest:
                    per_node[victim.node] = rest
                if len(groups) == count:
                    return groups
        return None

    def _cpu_victims(
        self, profile: Profile, count: int, candidates: list[Pod]
    ) -> list[list[Pod]] | None:
        """Idle CPU-only pods whose CPU slots, with what is free, make ``count`` slots for
        ``profile``, in the order given."""
        room: dict[str, tuple[float, float]] = {}  # per node: free + freed - promised
        pending: dict[str, list[Pod]] = {}
        groups: list[list[Pod]] = []
        for victim in candidates:
            node, cpu, mem = self.cluster.cpu_allocs[victim.id]
            free_cpu, free_mem = room.get(node) or self.cluster.cpu_free(node)
            room[node] = (free_cpu + cpu, free_mem + mem)
            pending.setdefault(node, []).append(victim)
            if _cpu_fits(*room[node], profile) >= 1:
                groups.append(pending.pop(node))
                room[node] = (room[node][0] - profile.cpu, room[node][1] - profile.memory_gb)
                if len(groups) == count:
                    return groups
        return None

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
        groups = self._victims(job, profile, count, taken, busy, now)
        if groups is None:
            return
        stopping: set[str] = set()
        for group in groups:
            for victim in group:
                self._stop(victim, "reclaim", now, out)
                stopping.add(victim.id)
                self._reclaim_by_pod[victim.id] = job.id
        self._reclaim[job.id] = stopping

    def _can_recycle(
        self,
        profile: Profile,
        count: int,
        taken: set[str],
        job: Job,
        now: float,
        out: list[Action],
        picked: list[tuple[HitPath, str]],
        standby: list[str],
    ) -> bool:
        """For profiles that may be scrubbed in place, recycle idle pods of the same profile
        into fresh pods for this job instead of stopping and starting new ones."""
        if not profile.recyclable or picked or standby or count != job.spec.workers:
            return False
        victims = self._takeable(
            job,
            profile,
            [
                self.pods[p]
                for p in self._idle
                if p not in taken
                and self.pods[p].state is PodState.WARM
                and self.pods[p].profile == profile.name
            ],
        )
        if len(victims) < count:
            return False
        budget = self.policies.budget
        victims.sort(key=lambda pod: (budget.value(pod, now), pod.id))
        self._dequeue(job)
        self.books.move_job(job, JobState.PLACED, now)
        job.placed, job.path = now, HitPath.COLD
        for old in victims[:count]:
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
        if pod.id in self._spare[pod.profile]:
            del self._spare[pod.profile][pod.id]
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
            self._standby_on_gpu.pop(gid, None)
        self._standby[pod.profile].pop(pod.id, None)
        self._promotable[pod.profile].pop(pod.id, None)
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
        """Place queued jobs: first those whose own caller's pods just turned warm (a warm
        hit takes no new room, so it jumps the queue), then each profile in submit order;
        a one-pod job with room being reclaimed for it lets the next one try (it found no
        free slot, so the next finds none to take from it and can only start its own
        reclaim); any other job that cannot go holds its profile's queue, so a gang keeps
        the free slots its plan counts on."""
        while self._fresh:
            key = next(iter(self._fresh))
            del self._fresh[key]
            for job_id in list(self._queued_pairs.get(key, ())):
                job = self.jobs[job_id]
                if len(self._warm_pods(job)) < job.spec.workers:
                    break
                self._try_place(job, now, out)
        if not self._dirty:
            return
        self._dirty = False
        for queue in self._queues.values():
            if not queue:
                continue
            for job_id in list(queue):
                job = self.jobs[job_id]
                if job.state is not JobState.QUEUED:
                    continue
                if self._try_place(job, now, out):
                    continue
                if job.id not in self._reclaim or job.spec.workers > 1:
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
        self._refresh_gpus(pod)
        return pod

    def _is_standby_slot(self, pod: Pod) -> bool:
        return self._standby_on_gpu.get(pod.gpus[0]) == pod.id

    def _stage_standby(self, active: Pod, now: float, out: list[Action]) -> None:
        """Stage a standby pod beside an active pod when policy and budget allow."""
        profile = self.profiles[active.profile]
        if not self.policies.matching.standby or not profile.standby_enabled:
            return
        gid = active.gpus[0]
        if gid in self._standby_on_gpu:
            return
        if not self.policies.standby.wants(profile, len(self._standby[profile.name])):
            return
        gpu = self.cluster.gpus[gid]
        if gpu.free < profile.standby_share - EPS:
            return
        if self._idle_gpus + profile.standby_share > self._budget_base() + EPS:
            return  # a standby beside a busy pod is bounded by the base cap (budget_limit)
        held = self._idle_by_model.get(gpu.model, 0.0)
        if held + profile.standby_share > self.hp_cap.get(gpu.model, math.inf) + EPS:
            return  # its GPU pool's HP forecast leaves idle pods no more room
        pod = self._new_pod(profile, active.node, [gid], profile.standby_share, now)
        self._standby_on_gpu[gid] = pod.id
        self._idle[pod.id] = None
        self._add_idle(pod, profile.standby_share)
        self._standby[profile.name][pod.id] = None
        self._image_nodes[profile.name][active.node] = None
        out.append(StartPod(pod.id, profile.name, active.node, (gid,), standby=True))

    def _make_warm(self, pod: Pod, ttl: float, now: float) -> None:
        self._set_state(pod, PodState.WARM, now)
        pod.idle_since = now
        pod.deadline = now + ttl
        assert pod.owner is not None
        key = (pod.profile, *pod.owner)
        self._warm.setdefault(key, {})[pod.id] = None
        if key in self._queued_pairs:
            self._fresh[key] = None
        self._note_deadline(pod)
        if not math.isinf(pod.deadline):
            heapq.heappush(self._deadlines, (pod.deadline, self._seq_next(), pod.id))
            if len(self._deadlines) > 2 * len(self._idle) + 64:
                # a deadline that no longer holds leaves lazily, from the top: under a long
                # keep-alive one per job ended within it would pile up (amortised O(1))
                self._deadlines = [e for e in self._deadlines if self._armed(e)]
                heapq.heapify(self._deadlines)
        self._refresh_gpus(pod)

    def _unwarm(self, pod: Pod) -> None:
        if pod.gpus:
            until = self._warm_until.get(self._model_of(pod))
            if until is not None:
                until.pop(pod.id, None)
        if pod.owner is not None:
            key = (pod.profile, *pod.owner)
            pods = self._warm.get(key)
            if pods is not None:
                pods.pop(pod.id, None)
                if not pods:
                    del self._warm[key]

    def _orphan(self, pod: Pod, now: float, out: list[Action]) -> None:
        """A fresh pod came up for a job that is gone: give it to the first queued one-pod job
        of its profile (in submit order), else stop it."""
        self._set_state(pod, PodState.ACTIVE, now)
        for job_id in self._queues[pod.profile]:
            job = self.jobs[job_id]
            if job.spec.workers == 1:
                self._dequeue(job)
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
        self._forget_standby(pod)
        self._set_state(pod, PodState.STOPPING, now)
        self._refresh_gpus(pod)
        out.append(StopPod(pod.id, reason))

    def _gone(self, pod: Pod, now: float) -> None:
        self._forget_standby(pod)
        self._set_state(pod, PodState.GONE, now)
        for gid in pod.gpus:
            self.cluster.release(gid, pod.id)
        self.cluster.release_cpu(pod.id)
        self._refresh_gpus(pod)
        # a reclaim victim ends by PodGone or PodFailed alike: either way its room is free
        job_id = self._reclaim_by_pod.pop(pod.id, None)
        pods = self._reclaim.get(job_id) if job_id is not None else None
        if pods is not None:
            pods.discard(pod.id)
            if not pods:
                del self._reclaim[job_id]

    def _forget_standby(self, pod: Pod) -> None:
        """Take a pod out of the warm and standby indexes (it stops or is gone)."""
        self._unwarm(pod)
        if pod.gpus and self._standby_on_gpu.get(pod.gpus[0]) == pod.id:
            del self._standby_on_gpu[pod.gpus[0]]
        self._standby[pod.profile].pop(pod.id, None)
        self._promotable[pod.profile].pop(pod.id, None)
        self._spare[pod.profile].pop(pod.id, None)

    def _release_gang(self, job: Job, failed: str, now: float, out: list[Action]) -> None:
        """Stop the other pods of a gang whose pod failed (their state is half-bound)."""
        for pid in job.pods:
            if pid != failed:
                pod = self.pods[pid]
                pod.pending_job = None
                pod.job = None
                self._stop(pod, "gang_failed", now, out)

    def _refresh_gpus(self, pod: Pod) -> None:
        for gid in pod.gpus:
            self._refresh_gpu(gid)

    def _refresh_gpu(self, gid: str) -> None:
        """A GPU's standby is promotable when nothing but idle warm pods shares its GPU."""
        sid = self._standby_on_gpu.get(gid)
        if sid is None:
            return
        standby = self.pods[sid]
        if standby.state is not PodState.STANDBY:
            return
        gpu = self.cluster.gpus[gid]
        profile = self.profiles[standby.profile]
        others = [o for o in gpu.allocs if o != sid]
        ok = all(self._is_warm_pod(o) for o in others)
        room = gpu.free + sum(gpu.allocs[o] for o in others) + gpu.allocs.get(sid, 0.0)
        if ok and room >= profile.share - EPS:
            self._promotable[standby.profile][sid] = None
        else:
            self._promotable[standby.profile].pop(sid, None)

    def _is_warm_pod(self, owner: str) -> bool:
        """Whether a GPU share's owner is an idle warm pod of this core (a share held by
        anything else, a GFS worker say, is busy)."""
        pod = self.pods.get(owner)
        return pod is not None and pod.state is PodState.WARM

    def _set_state(self, pod: Pod, state: PodState, now: float) -> None:
        """Every state change of a pool pod goes through here: it accrues GPU-seconds per
        state and keeps the idle total the budget caps, then moves the pod through the
        core's transition table."""
        share = self._pod_share(pod)
        key = pod.state.value
        pod.held[key] = pod.held.get(key, 0.0) + share * (now - pod.since)
        was_idle = pod.id in self._idle
        is_idle = state in _IDLE
        self.epoch += 1
        if was_idle and not is_idle:
            del self._idle[pod.id]
            self._add_idle(pod, -share)
        elif is_idle and not was_idle:
            self._idle[pod.id] = None
            self._add_idle(pod, share)
        if state in _ROOM:
            self._dirty = True
        self.books.move_pod(pod, state, now)
        pod.since = now

    def _add_idle(self, pod: Pod, share: float) -> None:
        """The idle totals (all, and per GPU model) move by ``share``."""
        model = self._model_of(pod)
        self._idle_gpus += share
        held = self._idle_by_model.get(model, 0.0) + share
        self._idle_by_model[model] = 0.0 if abs(held) < 1e-9 else held
        if abs(self._idle_gpus) < 1e-9:
            self._idle_gpus = 0.0

    def _pod_share(self, pod: Pod) -> float:
        gpus = self.cluster.gpus
        return sum(gpus[g].allocs.get(pod.id, 0.0) for g in pod.gpus)

    # ------------------------------------------------------------------ budget

    def _enforce_budget(self, now: float, out: list[Action]) -> None:
        if not self._idle:
            return  # no idle pod to stop (the hp/spot-only case: skip reading the limits)
        self._enforce_hp_cap(now, out)
        limit = self.budget_limit()
        if self._idle_gpus <= limit + EPS:
            return
        budget = self.policies.budget
        # over the queue-driven limit only: staged standby pods are not what stands in the
        # queue's way (see budget_limit); over the base cap, every idle pod may go
        keep = self._staged_standby() if self._idle_gpus <= self._budget_base() + EPS else {}
        # CPU-only pods hold no GPU: stopping them frees nothing the budget counts
        ready = [self.pods[p] for p in self._idle if p not in keep and self.pods[p].gpus]
        ready.sort(key=lambda pod: (budget.value(pod, now), pod.id))
        for pod in ready:
            if self._idle_gpus <= limit + EPS:
                break
            self._stop(pod, "budget", now, out)

    def _replenish(self, now: float, out: list[Action]) -> None:
        """Start spare pods up to each profile's minimum warm count, while its queue is
        empty (queued jobs take the room first), no job waits for room being freed in its
        GPU pool (a spare on a card reclaimed for it would be reclaimed again, without end),
        capacity is free and the warm budget has room for them."""
        for name, own in self.policies.profiles.items():
            spare = self._spare.get(name)
            if spare is None or len(spare) >= own.min_warm or self._queues[name]:
                continue
            profile = self.profiles[name]
            if profile.gpu_demand and self._freeing_room(profile.gpu_model):
                continue
            cap = self.hp_cap.get(profile.gpu_model, math.inf)
            while len(spare) < own.min_warm:
                if self._idle_gpus + profile.gpu_demand > self.budget_limit() + EPS:
                    break
                held = self._idle_by_model.get(profile.gpu_model, 0.0)
                if profile.gpu_demand and held + profile.gpu_demand > cap + EPS:
                    break  # its GPU pool's HP forecast leaves idle pods no more room
                slots = self._find_capacity(profile, 1, set())
                if not slots:
                    break
                node, gpus = slots[0]
                pod = self._new_pod(profile, node, gpus, profile.share, now)
                spare[pod.id] = None
                self._idle[pod.id] = None
                self._add_idle(pod, profile.gpu_demand)
                self._image_nodes[name][node] = None
                out.append(StartPod(pod.id, name, node, tuple(gpus), standby=True))

    def _freeing_room(self, model: str) -> bool:
        """Whether idle pods of GPU model ``model`` are stopping to make room for a waiting
        job, pool (this part's reclaim) or HP (the gang scheduler's)."""
        if self.hp.freeing_room(model):
            return True
        return any(
            self.profiles[self.jobs[j].spec.profile].gpu_model == model for j in self._reclaim
        )

    def _enforce_hp_cap(self, now: float, out: list[Action]) -> None:
        """Per GPU model: idle pods over what its HP forecast leaves them go, least
        valuable first."""
        budget = self.policies.budget
        for model, cap in self.hp_cap.items():
            if self._idle_by_model.get(model, 0.0) <= cap + EPS:
                continue
            ready = [
                self.pods[p]
                for p in self._idle
                if self.pods[p].gpus and self._model_of(self.pods[p]) == model
            ]
            ready.sort(key=lambda pod: (budget.value(pod, now), pod.id))
            for pod in ready:
                if self._idle_by_model.get(model, 0.0) <= cap + EPS:
                    break
                self._stop(pod, "budget", now, out)

    # ------------------------------------------------------------------ queues

    def _enqueue(self, job: Job, front: bool = False) -> None:
        """Queue a job at the tail, or at the head when it is put back (its place was
        taken before the jobs queued behind it)."""
        profile = job.spec.profile
        key = (profile, *job.pair)
        if front:
            self._queues[profile] = {job.id: None, **self._queues[profile]}
            self._queued_pairs[key] = {job.id: None, **self._queued_pairs.get(key, {})}
            self._dirty = True
        else:
            self._queues[profile][job.id] = None
            self._queued_pairs.setdefault(key, {})[job.id] = None
        self._queued_gpus += self.profiles[job.spec.profile].gpu_demand * job.spec.workers

    def _dequeue(self, job: Job) -> None:
        queue = self._queues[job.spec.profile]
        head = next(iter(queue), None)
        if queue.pop(job.id, False) is None:
            self._queued_gpus -= self.profiles[job.spec.profile].gpu_demand * job.spec.workers
            if self._queued_gpus < 1e-9:
                self._queued_gpus = 0.0
            if queue and (head == job.id or head in self._reclaim):
                # the job may have held the queue: those behind it may go now
                self._dirty = True
            key = (job.spec.profile, *job.pair)
            same = self._queued_pairs[key]
            del same[job.id]
            if not same:
                del self._queued_pairs[key]
        self._hand_on_reclaim(job)

    def _hand_on_reclaim(self, job: Job) -> None:
        """A job left the queue with victims still stopping for it (placed elsewhere or
        cancelled): their room goes to the next queued job of its profile without a reclaim
        of its own, else to whoever takes it first."""
        pods = self._reclaim.pop(job.id, None)
        if not pods:
            return
        for job_id in self._queues[job.spec.profile]:
            if job_id not in self._reclaim:
                self._reclaim[job_id] = pods
                for pid in pods:
                    self._reclaim_by_pod[pid] = job_id
                return
        for pid in pods:
            del self._reclaim_by_pod[pid]

    def _end(self, job: Job, failure: Failure, now: float, out: list[Action]) -> None:
        self.books.end_job(job, failure, None, now, out)

    def _seq_next(self) -> int:
        self._heap_seq += 1
        return self._heap_seq


def _cpu_fits(free_cpu: float, free_mem: float, profile: Profile) -> int:
    """How many pods of a CPU-only profile fit in this much free CPU and memory."""
    return int(min((free_cpu + EPS) / profile.cpu, (free_mem + EPS) / profile.memory_gb))


def _same_slots(cluster: Cluster, pod: Pod, profile: Profile) -> bool:
    """Whether stopping ``pod`` frees room a pod of ``profile`` can take: CPU slots for a
    CPU-only profile, else GPUs of its model."""
    if profile.cpu_only:
        return pod.id in cluster.cpu_allocs
    return bool(pod.gpus) and cluster.gpus[pod.gpus[0]].model == profile.gpu_model
