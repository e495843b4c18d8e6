"""The scheduling loop: API calls and runtime events in, core events out, actions carried out.

Everything that touches the core runs on one asyncio event loop and never awaits while it
does (``_feed`` is synchronous), so the core sees one totally ordered stream of events: the
same stream that is logged to the store and replayed into a fresh core after a restart.
Runtime calls (start, bind, stop, ...) run as tasks; their outcomes come back as runtime
events through :meth:`Runtime.events`, which one reader task turns into core events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from stoker.broker.config import BrokerConfig, BrokerProfile
from stoker.broker.events_log import waiting_words
from stoker.broker.forecasting import HPForecasts
from stoker.broker.metrics import BrokerMetrics
from stoker.broker.secrets import SecretBox
from stoker.broker.storage import BUDGET_NOTE, OutputBudget
from stoker.broker.store import Batch, Deposed, Store, StoredEvent
from stoker.core import (
    GPU,
    Action,
    AgentReport,
    BindFailed,
    BindJob,
    Cluster,
    Core,
    Event,
    Failure,
    ForecastUpdated,
    FoundPod,
    JobCancelled,
    JobClass,
    JobEnded,
    JobForgotten,
    JobRequeued,
    JobSpec,
    JobState,
    JobSubmitted,
    KeepAliveRenewed,
    KillJob,
    Node,
    NodeAdded,
    NodeChanged,
    NodeRemoved,
    NodeShape,
    Outcome,
    PodFailed,
    PodForgotten,
    PodGone,
    PodReady,
    PodsFound,
    PodStartFailed,
    PodState,
    PodStopFailed,
    PromoteStandby,
    RankExited,
    RankStarted,
    Reconciled,
    RecyclePod,
    Refusal,
    StartFault,
    StartPod,
    StopPod,
    TenantRevoked,
    Tick,
)
from stoker.core.actions import executor
from stoker.core.gfs.quota import quantile
from stoker.core.reconcile import implied_node, node_change, node_events, replay_into
from stoker.forecast import DEFAULT_FORECASTER
from stoker.runtime.base import (
    MASTER_PORT_BASE,
    MASTER_PORT_COUNT,
    BindRefused,
    JobBinding,
    JobExited,
    JobOutput,
    JobRunning,
    NodeDown,
    NodeUp,
    PodDown,
    PodUp,
    Runtime,
    StartFailed,
    Topology,
    start_fault,
)

log = logging.getLogger("stoker.broker")
# what an output listener receives: a chunk, a notice (re-queued), or None (finished)
_Notice = tuple[int, str, bytes] | dict[str, Any] | None
_NODE = "local"
_CLOSE_CALLS_S = 10.0  # how long a closing loop waits for runtime calls in flight
# group commit: a turn whose writes nobody waits for (a job now running, output, a tick,
# forgetting) is committed this much later, with whatever comes meanwhile (most often the
# job's end), instead of at once in a transaction of its own
LAZY_COMMIT_S = 0.05
# finished jobs' rows and output kept in memory after their commit, so the reply that
# carries a job's end (and the reads right after it) need not read the store
RECENT_S = 5.0
RECENT_JOBS = 256
RECENT_OUTPUT_BYTES = 64 * 1024  # a job that printed more is read from the store


@dataclass(frozen=True, slots=True)
class JobRequest:
    """A validated submit (the API has checked every field)."""

    profile: str
    argv: tuple[str, ...]
    reuse_tag: str
    code_digest: str | None = None
    deps: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    secrets: tuple[str, ...] = ()  # tenant secrets injected as env at bind
    timeout_s: float = 3600.0
    job_class: str = "pool"
    workers: int = 1
    gpus: float | None = None  # per worker; None: the profile's
    guarantee_s: float | None = None  # spot only; None: the core's default
    labels: dict[str, str] = field(default_factory=dict)


_NODE_KINDS = {NodeAdded: "node_added", NodeChanged: "node_changed"}


def encode_event(event: Event) -> tuple[str, dict[str, Any]]:
    """A core event as (kind, JSON fields) for the store's log."""
    match event:
        case JobSubmitted(spec):
            return "submitted", {
                "id": spec.id,
                "tenant": spec.tenant,
                "profile": spec.profile,
                "reuse_tag": spec.reuse_tag,
                "job_class": spec.job_class.value,
                "workers": spec.workers,
                "gpus": spec.gpus,
                "gpu_model": spec.gpu_model,
                "guarantee_s": spec.guarantee_s,
            }
        case JobCancelled(job):
            return "cancelled", {"job": job}
        case PodReady(pod):
            return "pod_ready", {"pod": pod}
        case PodFailed(pod, reason):
            return "pod_failed", {"pod": pod, "reason": reason.value}
        case PodStartFailed(pod, fault, detail):
            return "pod_start_failed", {"pod": pod, "fault": fault.value, "detail": detail}
        case PodsFound(found):
            return "pods_found", {"pods": [_found_fields(f) for f in found]}
        case PodGone(pod):
            return "pod_gone", {"pod": pod}
        case PodStopFailed(pod, reason):
            return "pod_stop_failed", {"pod": pod, "reason": reason}
        case RankStarted(job, rank, pod):
            return "rank_started", {"job": job, "rank": rank, "pod": pod}
        case RankExited(job, rank, exit_code, failure, pod):
            return "rank_exited", {
                "job": job,
                "rank": rank,
                "exit_code": exit_code,
                "failure": failure.value if failure else None,
                "pod": pod,
            }
        case BindFailed(job, pod, reason, infra):
            return "bind_failed", {"job": job, "pod": pod, "reason": reason, "infra": infra}
        case ForecastUpdated(tenant, gpu_model, mean, var):
            return "forecast", {
                "tenant": tenant,
                "gpu_model": gpu_model,
                "mean": list(mean),
                "var": list(var),
            }
        case KeepAliveRenewed(tenant, tag, profile, keepalive_s):
            return "renewed", {
                "tenant": tenant,
                "reuse_tag": tag,
                "profile": profile,
                "keepalive_s": keepalive_s,
            }
        case TenantRevoked(tenant):
            return "tenant_revoked", {"tenant": tenant}
        case JobForgotten(job):
            return "job_forgotten", {"job": job}
        case PodForgotten(pod):
            return "pod_forgotten", {"pod": pod}
        case NodeShape(name, gpu_model, gpus, cpu, memory_gb, gpu_ids):
            return _NODE_KINDS[type(event)], {
                "name": name,
                "gpu_model": gpu_model,
                "gpus": gpus,
                "cpu": cpu,
                "memory_gb": memory_gb,
                "gpu_ids": list(gpu_ids),
            }
        case NodeRemoved(name):
            return "node_removed", {"name": name}
        case Tick():
            return "tick", {}
    raise ValueError(f"cannot encode {event!r}")


def decode_event(ev: StoredEvent) -> Event:
    """The inverse of :func:`encode_event`."""
    d = ev.data
    match ev.kind:
        case "submitted":
            return JobSubmitted(
                JobSpec(
                    d["id"],
                    d["tenant"],
                    d["profile"],
                    d["reuse_tag"],
                    JobClass(d.get("job_class", "pool")),
                    int(d.get("workers", d.get("replicas", 1))),
                    d.get("gpus"),
                    d.get("gpu_model"),
                    d.get("guarantee_s"),
                )
            )
        case "cancelled":
            return JobCancelled(d["job"])
        case "pod_ready":
            return PodReady(d["pod"])
        case "pod_failed":
            return PodFailed(d["pod"], Failure(d["reason"]))
        case "pod_start_failed":
            return PodStartFailed(d["pod"], StartFault(d["fault"]), d["detail"])
        case "pods_found":
            return PodsFound(tuple(_found_pod(f) for f in d["pods"]))
        case "pod_gone":
            return PodGone(d["pod"])
        case "pod_stop_failed":
            return PodStopFailed(d["pod"], d["reason"])
        case "rank_started":
            return RankStarted(d["job"], int(d["rank"]), d.get("pod"))
        case "rank_exited":
            failure = Failure(d["failure"]) if d["failure"] else None
            return RankExited(d["job"], int(d["rank"]), int(d["exit_code"]), failure, d.get("pod"))
        case "bind_failed":
            return BindFailed(d["job"], d["pod"], d["reason"], bool(d["infra"]))
        case "forecast":
            return ForecastUpdated(
                d["tenant"],
                d["gpu_model"],
                tuple(float(x) for x in d["mean"]),
                tuple(float(x) for x in d["var"]),
            )
        case "renewed":
            return KeepAliveRenewed(
                d["tenant"], d["reuse_tag"], d["profile"], float(d["keepalive_s"])
            )
        case "tenant_revoked":
            return TenantRevoked(d["tenant"])
        case "job_forgotten":
            return JobForgotten(d["job"])
        case "pod_forgotten":
            return PodForgotten(d["pod"])
        case "node_added" | "node_changed":
            return (NodeAdded if ev.kind == "node_added" else NodeChanged)(
                d["name"],
                d["gpu_model"],
                int(d["gpus"]),
                float(d["cpu"]),
                float(d.get("memory_gb", 0.0)),  # none in events logged before it was
                tuple(d.get("gpu_ids", ())),
            )
        case "node_removed":
            return NodeRemoved(d["name"])
        case "tick":
            return Tick()
    raise ValueError(f"stored event {ev.seq}: unknown kind {ev.kind!r}")


def _found_fields(found: FoundPod) -> dict[str, Any]:
    """A live pod of :class:`PodsFound` as JSON fields."""
    agent = found.agent
    return {
        "pod": found.pod,
        "standby": found.standby,
        "running": agent.running,
        "outcomes": {
            job: [o.exit_code, o.failure.value if o.failure else None]
            for job, o in agent.outcomes.items()
        },
        "held": sorted(agent.held),
    }


def _found_pod(d: dict[str, Any]) -> FoundPod:
    """The inverse of :func:`_found_fields`."""
    outcomes = {
        job: Outcome(int(code), Failure(failure) if failure else None)
        for job, (code, failure) in d["outcomes"].items()
    }
    agent = AgentReport(d["running"], outcomes, frozenset(d["held"]))
    return FoundPod(d["pod"], bool(d["standby"]), agent)


class Refused(Exception):
    """A job the core refuses: it could never start on this cluster (``refusal`` names
    the field and says why). Nothing of it was stored."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(str(refusal))
        self.refusal = refusal


class BrokerLoop:
    """Runs one :class:`Core` against one :class:`Runtime`, with the store as its memory."""

    def __init__(
        self,
        cfg: BrokerConfig,
        store: Store,
        runtime: Runtime,
        gpus: list[str],
        metrics: BrokerMetrics | None = None,
        clock: Callable[[], float] = time.time,
        box: SecretBox | None = None,
    ) -> None:
        self.cfg = cfg
        self.store = store
        self.box = box or SecretBox(cfg.secret_key_path)
        self.runtime = runtime
        self.metrics = metrics or BrokerMetrics()
        self.clock = clock
        self.profiles: dict[str, BrokerProfile] = {p.name: p for p in cfg.profiles}
        self.gpus = list(gpus)
        self.preset = cfg.build_policies()
        self.core = self._new_core()
        self._execute = executor(self)
        self._now = 0.0
        self._batch = Batch()
        self._flush_handle: asyncio.Handle | None = None
        self._flush_lazy = False  # the pending flush is a lazy one (a timer)
        self._urgent = False  # a job finished since the last flush: someone may wait
        # group commit: runtime calls the last events asked for, carried out only once the
        # batch that logged those events is committed (write-ahead: a crash never leaves a
        # pod doing what the store does not know of), and the submits waiting for it
        self._after_commit: list[Callable[[], Coroutine[Any, Any, None]]] = []
        self._committed: list[asyncio.Future[None]] = []
        self._new_keys: dict[tuple[str, str], dict[str, Any]] = {}  # (tenant, key) -> row
        self._tasks: set[asyncio.Task[Any]] = set()
        self._service: set[asyncio.Task[Any]] = set()  # the reader and forecaster, not calls
        self._requests: dict[str, dict[str, Any]] = {}  # unfinished job id -> its row
        self._synced: dict[str, tuple[Any, ...]] = {}  # job id -> last written core view
        self._stopping: set[str] = set()  # pods we asked to stop (their PodDown is a PodGone)
        self._done: dict[str, asyncio.Event] = {}
        self._listeners: dict[str, list[asyncio.Queue[_Notice]]] = {}
        self._requeued: list[str] = []  # jobs re-queued since the last flush
        self._out_seq: dict[str, int] = {}
        # the committed output of the jobs submitted to this loop (None: over the bound, or
        # read from the store), and finished jobs' committed rows and output for a while
        self._chunks: dict[str, list[tuple[int, str, bytes]] | None] = {}
        self._finishing: dict[str, dict[str, Any]] = {}  # finished, not yet committed
        # job id -> (exited, drained) as its pod's agent told them (the job record's end)
        self._ends: dict[str, tuple[float | None, float | None]] = {}
        self._recent: dict[str, tuple[float, dict[str, Any], list[Any] | None]] = {}
        self._recent_timer: asyncio.TimerHandle | None = None
        self._demand_stored = store.last_hp_demand_minute() + 1  # the core meter's next
        # bounded storage: each tenant's stored output against its budget, and retention
        self.retention = cfg.storage.build()
        self.output_budget = OutputBudget(self.retention.output_budget_bytes, store.output_bytes())
        # the forecaster: the configured one, else the preset's (None: it reads no forecast)
        name = cfg.forecast.forecaster or self.preset.forecaster
        name = DEFAULT_FORECASTER if name == "default" else name
        self.forecasts = None if name is None else HPForecasts(cfg.forecast, store, name)
        # the core's next keep-alive deadline: a Tick then (armed once the loop has started)
        self._ticking = False
        self._tick_handle: asyncio.TimerHandle | None = None
        self._port = 0
        self.ready = False
        self._closing = False
        # whether this broker may touch the runtime now: set by a replica to "it leads", so
        # a leader that was frozen and resumes deposed never starts or stops a pod
        self.may_act: Callable[[], bool] = lambda: True
        self.started_at = 0.0
        # called with (event, actions, now) after each decision (the decision log)
        self.on_decision: list[Callable[[Event, list[Any], float], None]] = []
        # called with (pod, reason, now) for each pod this loop stops on its own, not on
        # the core's StopPod: every pod at shutdown, an orphan found on start
        self.on_pod_stop: list[Callable[[str, str, float], None]] = []

    def _new_core(self) -> Core:
        """The core with the configured policies (a preset from the core's registry, single
        policies swapped by name) over no node yet: the nodes come as logged events (this
        host's one node as its config says, :meth:`_local_node`; a runtime's own cluster,
        Kubernetes', as ``discover`` finds it), so a replay rebuilds the cluster each past
        event saw (:func:`stoker.core.reconcile.node_events`)."""
        profiles = [
            replace(p.core, gpu_model=p.gpu_model or self.cfg.gpu_model)
            for p in self.profiles.values()
        ]
        return Core(Cluster(), profiles, self.preset.policies)

    def _local_node(self) -> Node:
        """This host as the core's one node: its GPUs (the runtime's device ids, which the
        core's placements name), one GPU pool, and the CPU slots for CPU-only pods."""
        model = self.cfg.gpu_model
        gpus = [GPU(g, _NODE, i, model) for i, g in enumerate(self.gpus)]
        slots = self.cfg.cpu_slots
        return Node(_NODE, model, gpus, slots.cpus, slots.memory_mb / 1024)

    def _replay(self, stored: list[StoredEvent], local: Node | None) -> NodeAdded | None:
        """Replay the logged events into the fresh core (their actions were carried out
        before). A store written before the local node was logged begins with other
        events: its node is taken as there from the start, the one the first broker after
        that change logged, or, on that first start, the one the log implies
        (:func:`stoker.core.reconcile.implied_node`), which is returned: still to be logged."""
        events = [(decode_event(ev), ev.at) for ev in stored]
        implied: Event | None = None
        unlogged: NodeAdded | None = None
        if local is not None and stored and stored[0].kind != "node_added":
            first = next(
                (e for e in stored if e.kind == "node_added" and e.data["name"] == _NODE), None
            )
            if first is None:
                rows = self.store.unfinished_jobs()
                implied = unlogged = implied_node(self._new_core, local, events, rows, self._now)
            else:
                implied = decode_event(first)
        self._now = replay_into(self.core, implied, events, self._now)
        return unlogged

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> dict[str, int]:
        """Rebuild the core from the store, reconcile it with the runtime's live pods, and
        start the reader and timer tasks. Returns what the reconciliation did."""
        stored = list(self.store.events())
        discover = getattr(self.runtime, "discover", None)
        local = None if discover is not None else self._local_node()
        unlogged = self._replay(stored, local)
        if forget := self._forgettable(self.core.jobs):
            # what a broker that stopped before its next flush had not forgotten yet: as
            # the replay, no action is carried out (none follows from forgetting)
            self.core.handle_all(forget, self._now)
        for row in self.store.unfinished_jobs():
            self._requests[row["id"]] = row
            self._out_seq[row["id"]] = self.store.last_output_seq(row["id"])
        if unlogged is not None:
            self._feed(unlogged)  # the node the replay took: logged from now on
        # nodes that joined, left or changed while no broker ran (the core's answer): the
        # cluster's, or this host's as configured now (fewer GPUs, other CPU slots)
        seen = [local] if local is not None else await discover()
        for event in node_events(self.core.cluster.nodes, seen):
            self._feed(event)
        report = await self._reconcile()
        report["replayed"] = len(stored)
        if any(p.min_warm for p in self.preset.policies.profiles.values()):
            self._feed(Tick())  # the core starts the spare pods the minimums ask for now
            self._flush()
        for service in (self._read_runtime(), self._forecast_loop(), self._prune_loop()):
            self._service.add(self._spawn(service))
        self._ticking = True
        self._arm_timer()
        self.started_at = self.clock()
        self.ready = True
        return report

    async def _reconcile(self) -> dict[str, int]:
        """Tell the replayed core which pods the runtime has alive, with what their agents
        said (:class:`PodsFound`); the core decides what follows (adopt, stop, bind again,
        lose) and says what it found, which is returned, as counts."""
        info = getattr(self.runtime, "pod_info", None)
        found = []
        for pod in sorted(await self.runtime.live_pods()):
            if info is None:  # a runtime that cannot ask its agents
                found.append(FoundPod(pod))
                continue
            try:
                seen = info(pod)
            except KeyError:
                continue  # gone since it was listed: not alive
            found.append(_found(pod, seen))
        actions = self._feed(PodsFound(tuple(found)))
        self._flush()
        did = next(a for a in actions if isinstance(a, Reconciled))
        return {
            "adopted": len(did.adopted),
            "lost": len(did.lost),
            "orphans_stopped": len(did.orphans),
            "rebound": len(did.rebound),
            "jobs_lost": len(did.jobs_lost),
        }

    async def close(self, stop_pods: bool = False) -> None:
        """Stop the loop; pods keep running for the next broker unless ``stop_pods``."""
        self.ready = False
        self._closing = True  # from here on no new runtime call starts (see _carry_out)
        try:
            with contextlib.suppress(Deposed):  # a deposed leader's last writes are refused
                self._flush()
                # the HP demand so far, the open minute too (the next broker's peak there
                # merges)
                self.store.record_hp_demand(self._new_demand(open_minute=True))
        finally:  # a store that fails now (busy, gone) must not keep the pods running
            await self._close_runtime(stop_pods)
        with contextlib.suppress(Deposed):
            self._flush()
        if self._recent_timer is not None:
            self._recent_timer.cancel()

    async def _close_runtime(self, stop_pods: bool) -> None:
        """End the runtime calls and tasks, stop every pod with ``stop_pods``, and close
        the runtime."""
        # runtime calls in flight finish first (bounded): a start cancelled halfway leaves a
        # sandbox the runtime never recorded, which no stop_all can find
        calls = [t for t in self._tasks if t not in self._service]
        for task in self._service:
            task.cancel()
        self._ticking = False
        if self._tick_handle is not None:
            self._tick_handle.cancel()
        if calls:
            await asyncio.wait(calls, timeout=_CLOSE_CALLS_S)
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if stop_pods:
            stop_all = getattr(self.runtime, "stop_all", None)
            if stop_all is not None:
                for pod in self.core.pods.values():
                    if pod.state is not PodState.GONE:
                        self._stopped_here(pod.id, "shutdown")
                await stop_all()
        await self.runtime.close()

    # ------------------------------------------------------------------ API calls

    async def submit(
        self, tenant: str, req: JobRequest, key: str | None, digest: str | None = None
    ) -> tuple[dict[str, Any], bool]:
        """Store and submit a job; returns (row, created) once the job is committed (with
        whatever else the loop wrote in the same turn: one transaction for them all). A
        repeated idempotency key gives the job it created the first time (``digest``, the
        request's keyed digest, is stored so the caller can tell a retry from another job
        under the same key). Env values are stored sealed."""
        if key is not None:
            row = self._new_keys.get((tenant, key))
            if row is not None:  # submitted in this very turn: answered once it is stored
                await self._commit()
                return self._current(row) if row["id"] in self._requests else row, False
            row = self.store.job_by_key(tenant, key, loop=True)
            if row is not None:
                return row, False
        job_id = "j-" + uuid.uuid4().hex[:20]
        spec = JobSpec(  # the GPU pool is the profile's: this host's gpu_model
            job_id,
            tenant,
            req.profile,
            req.reuse_tag,
            JobClass(req.job_class),
            workers=req.workers,
            gpus=req.gpus,
            guarantee_s=req.guarantee_s,
            timeout_s=req.timeout_s,
        )
        if (refusal := self.core.refusal(spec) or self.core.limit(spec)) is not None:
            raise Refused(refusal)  # before anything is stored
        now = self._tick_now()
        row = {
            "id": job_id,
            "tenant": tenant,
            "idempotency_key": key,
            "profile": req.profile,
            "reuse_tag": req.reuse_tag,
            "job_class": req.job_class,
            "workers": req.workers,
            "gpus": req.gpus,  # the core resolves a profile's shape, below
            "guarantee_s": req.guarantee_s,
            "requeues": 0,
            "requeue_reason": None,
            "waiting_reason": None,
            "guarantee_succeeded": 0,
            "guarantee_failed": 0,
            "argv": list(req.argv),
            "code_digest": req.code_digest,
            "deps": list(req.deps),
            "env": self.box.seal_env(req.env),
            "secrets": list(req.secrets),
            "request_mac": digest,
            "labels": dict(req.labels),
            "timeout_s": req.timeout_s,
            "state": JobState.QUEUED.value,
            "path": None,
            "pods": [],
            "submitted": now,
            "placed": None,
            "started": None,
            "exited": None,
            "drained": None,
            "finished": None,
            "committed": None,
            "exit_code": None,
            "failure": None,
        }
        self._batch.new_jobs.append(row)
        self._requests[job_id] = row
        self._chunks[job_id] = []
        if key is not None:
            self._new_keys[(tenant, key)] = row
        self._feed(JobSubmitted(spec), now)
        row["gpus"] = self.core.jobs[job_id].per_worker  # written with the row, in the batch
        await self._commit()  # the caller hears of its job only once it is stored
        return self._current(row) if job_id in self._requests else self.job(job_id), True

    def _commit(self) -> asyncio.Future[None]:
        """Done when everything written so far is committed (by this turn's flush); the
        flush's error (Deposed: the lead is lost) if it failed."""
        fut = asyncio.get_running_loop().create_future()
        self._committed.append(fut)
        self._schedule_flush()
        return fut

    def cancel(self, job_id: str) -> None:
        job = self.core.jobs.get(job_id)
        if job is not None and job.state is not JobState.FINISHED:
            self._feed(JobCancelled(job_id))
            self._flush()

    def cancel_tenant(self, tenant: str) -> int:
        """Tell the core ``tenant`` is revoked (it cancels the tenant's jobs and stops its
        warm pods); how many of its jobs were unfinished."""
        unfinished = sum(
            j.spec.tenant == tenant and j.state is not JobState.FINISHED
            for j in self.core.jobs.values()
        )
        self._feed(TenantRevoked(tenant))
        self._flush()
        return unfinished

    def forget_tenant(self, tenant: str) -> None:
        """A tenant's history was purged: no read serves its jobs from memory either."""
        for job_id in [j for j, (_, row, _) in self._recent.items() if row["tenant"] == tenant]:
            del self._recent[job_id]

    def tenant_busy(self, tenant: str) -> bool:
        """Whether ``tenant`` has a job the core has not finished, or one not yet stored."""
        return any(
            j.spec.tenant == tenant and j.state is not JobState.FINISHED
            for j in self.core.jobs.values()
        ) or any(row["tenant"] == tenant for row in self._requests.values())

    def renew(
        self, tenant: str, reuse_tag: str, profile: str, keepalive_s: float
    ) -> tuple[float, list[str]]:
        """Keep (tenant, tag)'s pod of ``profile`` ``keepalive_s`` from now at least (the
        caller checked the bound). Returns until when, and the pods it holds now."""
        now = self._tick_now()
        self._feed(KeepAliveRenewed(tenant, reuse_tag, profile, keepalive_s), now)
        self._flush()
        return now + keepalive_s, self.core.warm.held((profile, tenant, reuse_tag))

    def session(self, tenant: str, reuse_tag: str, profile: str) -> tuple[list[str], float | None]:
        """The pods (tenant, tag) holds of ``profile`` now, and until when the warm ones
        wait (wall clock; None: none waits)."""
        pods = self.core.warm.held((profile, tenant, reuse_tag))
        deadlines = [
            self.core.pods[p].deadline for p in pods if self.core.pods[p].state is PodState.WARM
        ]
        finite = [d for d in deadlines if math.isfinite(d)]
        return pods, (max(finite) - self._now + time.time()) if finite else None

    def held(self) -> dict[str, int]:
        """Entries the loop and its core hold per job or pod, by map: what is live, not what
        ran, so a broker that has run for months holds as much as one just started with the
        same work in flight (``stoker_broker_held_entries``; the memory test reads it)."""
        return {
            "core.jobs": len(self.core.jobs),
            "core.pods": len(self.core.pods),
            "requests": len(self._requests),
            "synced": len(self._synced),
            "stopping": len(self._stopping),
            "done": len(self._done),
            "listeners": len(self._listeners),
            "out_seq": len(self._out_seq),
            "chunks": len(self._chunks),
            "finishing": len(self._finishing),
            "ends": len(self._ends),
            "recent": len(self._recent),  # a finished job's row, kept RECENT_S
        }

    def job(self, job_id: str) -> dict[str, Any] | None:
        """A job's row: an unfinished job's from the core, a finished one's as committed
        (from memory for a while after its commit, then the store). A job reads finished
        only once that is stored; no read waits for (or forces) a commit."""
        row = self._requests.get(job_id)
        if row is not None:
            return self._current(row)
        recent = self._recent.get(job_id)
        if recent is not None:
            return dict(recent[1])
        return self.store.get_job(job_id)

    def list_jobs(
        self, tenant: str | None, states: tuple[str, ...], limit: int, labels: dict[str, str]
    ) -> list[dict[str, Any]]:
        """Jobs as the store has them: everything committed (a job whose wait returned, or
        whose submit was answered, is there), never forcing a commit on a read (the
        dashboard polls this)."""
        return self.store.list_jobs(tenant, states, limit, labels)

    def output_of(self, job_id: str) -> list[tuple[int, str, bytes]]:
        """A job's committed output: from memory for a job that ended a moment ago (the
        reply of a submit that waited for it), else from the store."""
        recent = self._recent.get(job_id)
        if recent is not None and recent[2] is not None:
            return list(recent[2])
        return self.store.output(job_id)

    def _current(self, row: dict[str, Any]) -> dict[str, Any]:
        """An unfinished job's row with the core's view of it (what the store holds)."""
        job = self.core.jobs[row["id"]]
        return {
            **row,
            "state": job.state.shown.value,
            "path": job.path.value if job.path else None,
            "pods": list(job.pods),
            "placed": self._placed(row, job),
            "started": job.started,
            "finished": job.finished,
            "exit_code": job.exit_code,
            "failure": job.failure.value if job.failure else None,
            "guarantee_succeeded": job.periods_ok,
            "guarantee_failed": job.evictions,
            "waiting_reason": self._waiting_reason(job.id),
        }

    @staticmethod
    def _placed(row: dict[str, Any], job: Any) -> float | None:
        """When the core placed the job's run: the first run that started (the one its start
        latency is of), else the current run's (a job back in its queue keeps its last)."""
        if row.get("started") is not None or job.placed is None:
            return row.get("placed")
        return job.placed

    def _waiting_reason(self, job_id: str) -> str | None:
        """Why a queued job waits, in words: the core's answer (:meth:`Core.waiting`), or
        None for a job that does not wait."""
        wait = self.core.waiting(job_id)
        return None if wait is None else waiting_words(wait)[1]

    async def wait(self, job_id: str, timeout_s: float) -> dict[str, Any] | None:
        """The job's row once finished or re-queued (preempted), or as it is when
        ``timeout_s`` passes."""
        if job_id not in self._requests and job_id not in self._finishing:
            return self.job(job_id)  # finished and committed (or unknown)
        done = self._done.setdefault(job_id, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), timeout_s)
        return self.job(job_id)

    async def output(
        self, job_id: str, follow: bool
    ) -> AsyncIterator[tuple[int, str, bytes] | dict[str, Any]]:
        """The job's output from the start; with ``follow``, until the job finishes, with a
        notice (``{"requeued": ...}``) each time it is preempted and re-queued meanwhile."""
        queue: asyncio.Queue[_Notice] = asyncio.Queue()
        if follow:
            self._listeners.setdefault(job_id, []).append(queue)
        try:
            last = -1
            # what is committed now; chunks committed after this come through the queue
            for chunk in self.output_of(job_id):
                last = chunk[0]
                yield chunk
            row = self.job(job_id)
            if not follow or row is None or row["state"] == JobState.FINISHED.value:
                return
            while (chunk := await queue.get()) is not None:
                if isinstance(chunk, dict) or chunk[0] > last:
                    yield chunk
        finally:
            if follow:
                waiting = self._listeners.get(job_id, [queue])
                waiting.remove(queue)
                if not waiting:
                    self._listeners.pop(job_id, None)  # an entry per job would pile up

    def pods(self, tenant: str | None) -> list[dict[str, Any]]:
        """Live pods; a tenant sees only the pods that run (or ran) its own jobs."""
        out = []
        for pod in self.core.pods.values():
            if pod.state is PodState.GONE:
                continue
            # a pool pod's owner is its (tenant, tag); an hp or spot pod's, its job's tenant
            job = self.core.jobs.get(pod.job or pod.pending_job or "")
            owner = pod.owner[0] if pod.owner else job.spec.tenant if job else None
            if tenant is not None and owner != tenant:
                continue
            out.append(
                {
                    "id": pod.id,
                    "profile": pod.profile,
                    "state": pod.state.value,
                    "gpus": list(pod.gpus),
                    "tenant": owner,
                    "reuse_tag": pod.owner[1] if pod.owner else None,
                    "job": pod.job,
                    "jobs_run": pod.jobs_run,
                    "keepalive_deadline": pod.deadline if pod.state is PodState.WARM else None,
                }
            )
        return out

    def gpu_pools(self) -> list[dict[str, Any]]:
        """Per GPU pool, the core's view: capacity, what hp and spot jobs hold, the spot
        quota and its eta, the eviction rate of the last day, the summed HP forecast (mean,
        variance and g-quantile per hour ahead) and the queued hp and spot jobs."""
        hpspot = self.core.hpspot
        g = self.core.policies.hpspot.g
        now = self._tick_now()
        out = []
        for model in sorted(hpspot.gpu_pools):
            forecast = None
            if model in self.core.forecast:
                mean, var = self.core.forecast[model]
                forecast = {
                    "hours": list(range(len(mean))),
                    "mean": [float(m) for m in mean],
                    "var": [float(v) for v in var],
                    "quantile": [float(q) for q in quantile(mean, var, g)],
                    "g": g,
                }
            rate = hpspot.ledgers[model].rate(since=now - 86400.0)
            out.append(
                {
                    "gpu_model": model,
                    "capacity": float(hpspot.capacity[model]),
                    "hp_gpus": round(hpspot.used[model][JobClass.HP], 9),
                    "spot_gpus": round(hpspot.used[model][JobClass.SPOT], 9),
                    "spot_quota": float(hpspot.spot_quota(model)),  # the loan's, if larger
                    "eta": float(hpspot.eta(model)),
                    "eviction_rate_1d": 0.0 if rate is None else float(rate),
                    "forecast": forecast,
                    "queued": {
                        cls.value: sum(
                            1
                            for j in self._requests
                            if (job := self.core.jobs.get(j)) is not None
                            and job.job_class is cls
                            and job.state.waiting
                            and hpspot.gpu_pool_of(job) == model
                        )
                        for cls in (JobClass.HP, JobClass.SPOT)
                    },
                }
            )
        return out

    # ------------------------------------------------------------------ the core

    def _tick_now(self) -> float:
        self._now = max(self._now, self.clock())
        return self._now

    def _feed(self, event: Event, now: float | None = None) -> list[Action]:
        """Hand one event to the core, log it, sync the job rows it changed, and carry out
        the actions, which are returned. Synchronous on purpose: nothing else touches the
        core meanwhile."""
        at = self._tick_now() if now is None else now
        actions = self.core.handle(event, at)
        for listener in self.on_decision:
            listener(event, actions, at)
        kind, data = encode_event(event)
        self._batch.event(at, kind, data)
        for action in actions:
            self._carry_out(action)
        self._sync_jobs()
        self._arm_timer()
        self._schedule_flush()
        return actions

    def _sync_jobs(self) -> None:
        for job_id in list(self._requests):
            job = self.core.jobs.get(job_id)
            if job is None:
                continue
            view = (
                job.state,
                job.path,
                tuple(job.pods),
                job.placed,
                job.started,
                job.finished,
                job.periods_ok,
                job.evictions,
                self.core.waiting(job_id),  # a queued job's row follows why it waits
            )
            if self._synced.get(job_id) == view:
                continue
            self._synced[job_id] = view
            values: dict[str, Any] = {
                "state": job.state.shown.value,
                "path": job.path.value if job.path else None,
                "pods": list(job.pods),
                "started": job.started,
                "guarantee_succeeded": job.periods_ok,
                "guarantee_failed": job.evictions,
                "waiting_reason": self._waiting_reason(job_id),
            }
            row = self._requests[job_id]
            values["placed"] = row["placed"] = self._placed(row, job)
            if job.started is not None and row.get("started") is None:
                row["started"] = job.started
            if job.state is JobState.FINISHED:
                exited, drained = self._ends.pop(job_id, (None, None))
                values.update(
                    exited=exited,
                    drained=drained,
                    finished=job.finished,
                    exit_code=job.exit_code,
                    failure=job.failure.value if job.failure else None,
                )
                self._on_finished(job_id, job)
            self._batch.update_job(job_id, **values)

    def _on_finished(self, job_id: str, job: Any) -> None:
        row = self._requests.pop(job_id, None)
        if row is not None:
            self._finishing[job_id] = row
        self._urgent = True  # its caller may be waiting for the commit
        self._synced.pop(job_id, None)
        self._out_seq.pop(job_id, None)

    def _schedule_flush(self) -> None:
        """Commit at the end of this turn when anyone waits for it (a submit, a runtime
        call, a finished job's caller, a preempted job's), else LAZY_COMMIT_S later."""
        urgent = bool(self._urgent or self._committed or self._after_commit or self._requeued)
        handle = self._flush_handle
        if handle is not None and (not self._flush_lazy or not urgent):
            return  # one is pending already, soon enough
        if handle is not None:
            handle.cancel()  # a lazy one: this turn needs it now
        loop = asyncio.get_running_loop()
        self._flush_lazy = not urgent
        self._flush_handle = (
            loop.call_soon(self._flush_soon)
            if urgent
            else loop.call_later(LAZY_COMMIT_S, self._flush_soon)
        )

    def _flush_soon(self) -> None:
        with contextlib.suppress(Deposed):  # the lead is lost: the broker steps down
            self._flush()

    def _flush(self) -> None:
        """Commit what the last events wrote (one transaction), then carry out the runtime
        calls they asked for and wake who waits on them. A deposed leader's flush does
        neither: nothing of it was stored, and the pods are the next leader's."""
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        self._urgent = False
        finished = [j for j, v in self._batch.job_updates.items() if v.get("state") == "finished"]
        committed = time.time()  # the transaction that writes their final rows begins
        for job_id in finished:
            self._batch.job_updates[job_id]["committed"] = committed
        final = {j: self._batch.job_updates[j] for j in finished}
        chunks = list(self._batch.output)
        requeued, self._requeued = self._requeued, []
        waiting, self._committed = self._committed, []
        try:
            self._batch.commit(self.store)
        except Exception as exc:
            if isinstance(exc, Deposed):
                self._after_commit.clear()
            else:  # the batch stays for the next flush: its calls wait with it
                self._requeued[:0] = requeued
            for fut in waiting:
                if not fut.done():
                    fut.set_exception(exc)
            raise
        self._new_keys.clear()
        self._remember(chunks, final)
        calls, self._after_commit = self._after_commit, []
        for call in calls:
            self._spawn(call())
        for fut in waiting:
            if not fut.done():
                fut.set_result(None)
        for c in chunks:
            for q in self._listeners.get(c["job"], ()):
                q.put_nowait((c["seq"], c["stream"], c["data"]))
        for job_id in requeued:
            row = self._requests.get(job_id)
            if row is None:
                continue
            done = self._done.pop(job_id, None)
            if done is not None:
                done.set()  # a caller waiting on the job hears of its preemption at once
            notice = {k: row[k] for k in ("id", "requeues", "requeue_reason")}
            for q in self._listeners.get(job_id, ()):
                q.put_nowait({"requeued": notice})
        for job_id in finished:
            done = self._done.pop(job_id, None)
            if done is not None:
                done.set()
            for q in self._listeners.get(job_id, ()):
                q.put_nowait(None)
        for event in self._forgettable(finished):
            if isinstance(event, PodForgotten):
                self._stopping.discard(event.pod)  # a stop that failed as "no such pod"
            self._feed(event)  # logged at the next flush

    def _remember(self, chunks: list[dict[str, Any]], final: dict[str, dict[str, Any]]) -> None:
        """After a commit: keep the committed output of this loop's jobs (bounded), and the
        final rows of the jobs that finished, for RECENT_S (at most RECENT_JOBS of them)."""
        for c in chunks:
            kept = self._chunks.get(c["job"])
            if kept is None:
                continue
            kept.append((c["seq"], c["stream"], c["data"]))
            if sum(len(d) for _, _, d in kept) > RECENT_OUTPUT_BYTES:
                self._chunks[c["job"]] = None  # too much to hold: the store has it
        expires = time.monotonic() + RECENT_S
        for job_id, values in final.items():
            row = self._finishing.pop(job_id, None)
            out = self._chunks.pop(job_id, None)
            if row is not None:
                self._recent[job_id] = (expires, {**row, **values}, out)
        while len(self._recent) > RECENT_JOBS:
            del self._recent[next(iter(self._recent))]
        if self._recent and self._recent_timer is None:
            self._recent_timer = asyncio.get_running_loop().call_later(
                RECENT_S, self._expire_recent
            )

    def _expire_recent(self) -> None:
        self._recent_timer = None
        now = time.monotonic()
        for job_id in [j for j, (at, _, _) in self._recent.items() if at <= now]:
            del self._recent[job_id]
        if self._recent:  # the oldest left expires first (kept in order of finishing)
            first = next(iter(self._recent.values()))[0]
            self._recent_timer = asyncio.get_running_loop().call_later(
                max(0.0, first - now), self._expire_recent
            )

    def _forgettable(self, finished: Iterable[str]) -> list[Event]:
        """The core may drop these finished jobs (their final rows are committed: reads go
        to the store) and every gone pod (no unfinished job points at one)."""
        jobs, pods = self.core.jobs, self.core.pods
        out: list[Event] = [
            JobForgotten(j)
            for j in finished
            if (job := jobs.get(j)) and job.state is JobState.FINISHED
        ]
        out += [PodForgotten(p.id) for p in pods.values() if p.state is PodState.GONE]
        return out

    # ------------------------------------------------------------------ actions

    def _checkpoint_of(self, pod: str) -> tuple[str, int] | None:
        """The (job, rank) an hp or spot pod is started for: rank i runs in the job's i-th
        pod (see :meth:`_bind`). None for a pool pod, which serves many jobs."""
        rec = self.core.pods[pod]
        job = self.core.jobs.get(rec.pending_job or "")
        if rec.job_class is JobClass.POOL or job is None or pod not in job.pods:
            return None
        return job.id, job.pods.index(pod)

    def _carry_out(self, action: Action) -> None:
        if self._closing or not self.may_act():
            return  # shutting down or deposed: what the core asks is the next leader's
        self._execute(action)

    # the actions' Executor methods (stoker.core.actions): runtime calls made once the
    # events that asked for them are committed, and the job rows they change

    def start_pod(self, action: StartPod) -> None:
        pod, gpus, standby = action.pod, tuple(action.gpus), action.standby
        shape = self.profiles[action.profile].runtime
        cls = self.core.pods[pod].job_class.value  # a cluster ranks pods by it
        ckpt = self._checkpoint_of(pod)
        start = self.runtime.start_pod
        self._later(
            lambda: self._call(
                start(pod, shape, gpus, standby, job_class=cls, checkpoint=ckpt), pod=pod
            )
        )

    def promote_standby(self, action: PromoteStandby) -> None:
        pod = action.pod
        self._later(lambda: self._call(self.runtime.promote(pod), pod=pod))

    def recycle_pod(self, action: RecyclePod) -> None:
        pod, new_pod = action.pod, action.new_pod
        self._later(lambda: self._call(self.runtime.recycle(pod, new_pod), pod=new_pod))

    def stop_pod(self, action: StopPod) -> None:
        self._stop(action.pod)

    def bind_job(self, action: BindJob) -> None:
        self._bind(action.job, action.pods)

    def kill_job(self, action: KillJob) -> None:
        job, reason, grace_s = action.job, action.reason, action.grace_s
        self._later(lambda: self._call(self.runtime.kill_job(job, reason, grace_s)))

    def job_requeued(self, action: JobRequeued) -> None:
        job = action.job
        row = self._requests[job]
        row["requeues"] = int(row.get("requeues") or 0) + 1
        row["requeue_reason"] = action.reason.value
        self._batch.update_job(job, requeues=row["requeues"], requeue_reason=row["requeue_reason"])
        self._requeued.append(job)

    def job_ended(self, action: JobEnded) -> None:
        job = action.job
        self.output_budget.ended(job)  # the core finished it; _sync_jobs writes it
        ended = self.core.jobs.get(job)
        # the class tells a cluster which volume (if any) holds the job's checkpoints
        cls = ended.job_class.value if ended is not None else None
        self._later(lambda: self._call(self.runtime.drop_checkpoint(job, job_class=cls)))

    def reconciled(self, action: Reconciled) -> None:
        """What a restart's PodsFound found: start() reports it; nothing to carry out."""

    def _later(self, call: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Carry out a runtime call once the events that asked for it are committed."""
        self._after_commit.append(call)
        self._schedule_flush()

    def _stop(self, pod: str) -> None:
        self._stopping.add(pod)
        self._later(lambda: self._call(self.runtime.stop_pod(pod), pod=pod, gone_on_error=True))

    def _stopped_here(self, pod: str, reason: str) -> None:
        """Tell the listeners of a stop this loop makes without the core asking."""
        now = self._tick_now()
        for listener in self.on_pod_stop:
            listener(pod, reason, now)

    def _bind(self, job_id: str, pods: tuple[str, ...]) -> None:
        row = self._requests[job_id]
        world = len(pods)
        port = 0
        if world > 1:
            self._port = (self._port + 1) % MASTER_PORT_COUNT
            port = MASTER_PORT_BASE + self._port
        for rank, pod in enumerate(pods):
            topology = Topology(rank, world, "127.0.0.1", port or MASTER_PORT_BASE, pods[0])
            self._later(
                lambda pod=pod, topology=topology: self._call(
                    self._bind_rank(row, pod, topology), job=job_id, pod=pod
                )
            )

    async def _bind_rank(self, row: dict[str, Any], pod: str, topology: Topology) -> None:
        """Bind one rank: the job's env and its tenant's secrets opened only now, in memory."""
        env = self.box.open_env(row["env"])
        names = list(row.get("secrets") or ())
        sealed = self.store.sealed_secrets(row["tenant"], names) if names else {}
        if missing := [n for n in names if n not in sealed]:
            raise BindRefused(f"secrets: {missing[0]!r} was deleted after the submit")
        env.update({n: self.box.open(sealed[n]) for n in names})
        binding = JobBinding(
            job=row["id"],
            argv=tuple(row["argv"]),
            code_digest=row["code_digest"],
            deps=tuple(row["deps"]),
            env=env,
            timeout_s=float(row["timeout_s"]),
            topology=topology,
            tenant=row["tenant"],
            run=int(row.get("requeues") or 0) + 1,
        )
        await self.runtime.bind(pod, binding)

    async def _call(
        self,
        coro: Coroutine[Any, Any, None],
        *,
        pod: str | None = None,
        job: str | None = None,
        gone_on_error: bool = False,
    ) -> None:
        """Run one runtime call; a failure becomes the event the runtime could not send."""
        try:
            await coro
        except Exception as exc:  # every failure is turned into a typed event below
            log.warning("runtime call failed (pod=%s job=%s): %s", pod, job, exc)
            if job is not None and pod is not None:
                text = f"stoker: could not bind: {exc}\n".encode()
                self._on_runtime(JobOutput(job, pod, "stderr", text))
                if job in self.core.jobs:
                    # a fact for the core to type: the job's own fault, or the runtime's
                    infra = not isinstance(exc, BindRefused)
                    self._feed(BindFailed(job, pod, str(exc), infra=infra))
            elif pod is not None and pod in self.core.pods:
                state = self.core.pods[pod].state
                if state is PodState.GONE:
                    return
                if gone_on_error:
                    # a pod the runtime does not know is gone; any other failure keeps its
                    # share held until the runtime confirms (the core asks again)
                    gone = isinstance(exc, KeyError)
                    self._feed(PodGone(pod) if gone else PodStopFailed(pod, str(exc)))
                else:
                    # a start, promotion or recycle that failed: the runtime's word on why
                    self._feed(PodStartFailed(pod, start_fault(exc), str(exc)))

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ------------------------------------------------------------------ runtime events

    async def _read_runtime(self) -> None:
        async for event in self.runtime.events():
            try:
                self._on_runtime(event)
            except Exception:  # one bad event must not stop the loop
                log.exception("runtime event %r", event)

    def _on_runtime(self, event: Any) -> None:
        core = self.core
        match event:
            case PodUp(pod):
                self._feed(PodReady(pod))
            case PodDown(pod, failure):
                asked = pod in self._stopping
                self._stopping.discard(pod)  # also for an orphan's stop (not in the core)
                if pod not in core.pods or core.pods[pod].state is PodState.GONE:
                    return
                if failure is None or asked:
                    self._feed(PodGone(pod))
                else:
                    self._feed(PodFailed(pod, failure))
            case StartFailed(pod, fault, detail):
                if pod in core.pods and core.pods[pod].state is not PodState.GONE:
                    self._feed(PodStartFailed(pod, fault, detail))
            case JobRunning(job, pod):
                rank = self._rank(job, pod)
                if rank is not None:
                    self._feed(RankStarted(job, rank, pod))
            case JobOutput(job, _pod, stream, data):
                row = self._requests.get(job)
                if row is None:
                    return
                tenant = row["tenant"]
                admitted = self.output_budget.admit(tenant, job, len(data))
                if admitted is None:
                    return  # past the budget, and said so
                if not admitted:
                    self.metrics.storage_refused.labels("budget").inc()
                    budget = self.output_budget.budget
                    stream, data = "stderr", BUDGET_NOTE.format(tenant=tenant, budget=budget)
                    data = data.encode()
                seq = self._out_seq.get(job, -1) + 1
                self._out_seq[job] = seq
                self._batch.output.append({"job": job, "seq": seq, "stream": stream, "data": data})
                self._schedule_flush()
            case JobExited():
                self._job_exited(event)
            case NodeUp(node):
                # the core's answer: a new node added, a known one changed in place
                if (change := node_change(core.cluster.nodes.get(node.name), node)) is not None:
                    self._feed(change)
            case NodeDown(name):
                self._feed(NodeRemoved(name))

    def _job_exited(self, ev: JobExited) -> None:
        rank = self._rank(ev.job, ev.pod)
        if rank is not None:
            self._ends[ev.job] = (ev.exited_at, ev.drained_at)  # the job's end: its last rank's
            self._feed(RankExited(ev.job, rank, ev.exit_code, ev.failure, ev.pod))

    def _rank(self, job_id: str, pod: str) -> int | None:
        """The rank a pod runs for a job the core has bound (None: stale news)."""
        job = self.core.jobs.get(job_id)
        if job is None or job.state not in (JobState.BINDING, JobState.RUNNING):
            return None
        return job.pods.index(pod) if pod in job.pods else None

    def _new_demand(self, open_minute: bool = False) -> list[tuple[str, str, int, float]]:
        """The core HP demand meter's minutes not stored yet, as store rows (GPU pool,
        tenant, minute, GPUs); minutes without demand are left out. ``open_minute`` adds
        the minute under way at its current demand (on close: the next broker's rows for
        that minute merge with it, keeping the larger)."""
        meter = self.core.demand
        if meter.minutes is None:
            return []
        start = max(self._demand_stored, meter.origin)
        rows = []
        for tenant, gpu_pool in meter.keys:
            values = meter.history((tenant, gpu_pool))[start - meter.origin :]
            rows += [(gpu_pool, tenant, start + i, float(g)) for i, g in enumerate(values) if g > 0]
            if open_minute and meter.current[(tenant, gpu_pool)] > 0:
                rows.append(
                    (gpu_pool, tenant, meter.minutes, float(meter.current[(tenant, gpu_pool)]))
                )
        self._demand_stored = max(self._demand_stored, meter.minutes)
        return rows

    async def _prune_loop(self) -> None:
        """Every ``storage.prune_every_s``: delete what retention no longer keeps (in worker
        threads, batched); a failed round is logged and the next one tries again."""
        r = self.retention
        while True:
            await asyncio.sleep(r.prune_every_s)
            if r.keep_s is None and r.keep_jobs is None:
                continue
            try:
                pruned = await asyncio.to_thread(
                    self.store.prune, time.time(), r.keep_s, r.keep_jobs
                )
            except Exception:  # retention must never stop the broker
                log.exception("storage: pruning failed")
                continue
            self.output_budget.freed({t: size for t, (_, size) in pruned.items()})
            for tenant, (n, size) in pruned.items():
                self.metrics.pruned_jobs.labels(tenant).inc(n)
                self.metrics.pruned_bytes.labels(tenant).inc(size)

    async def _forecast_loop(self) -> None:
        """Every ``forecast.query_every_s``: bring the core's HP demand meter up to now (a
        Tick), store the minutes it metered, refit the forecaster when ``refit_every_s`` has
        passed (and until its first fit), query it, and hand each tenant's forecast to the
        core. Store and forecaster work runs in worker threads, never on the scheduling
        loop; a failed round is logged and the next one tries again."""
        next_refit = 0.0
        while True:
            if self.core.demand.keys:  # an HP job was ever seen: meter up to now
                self._feed(Tick())
            try:
                next_refit = await self._forecast_round(self._now, next_refit)
            except Deposed:
                pass  # the lead is lost: the broker closes this loop
            except Exception:  # the forecaster must never stop the broker
                log.exception("HP demand forecast round failed")
            await asyncio.sleep(self.cfg.forecast.query_every_s)

    async def _forecast_round(self, now: float, next_refit: float) -> float:
        """One round (see :meth:`_forecast_loop`); returns when the next refit is due."""
        await asyncio.to_thread(self.store.record_hp_demand, self._new_demand())
        forecasts = self.forecasts
        if forecasts is None:  # the preset reads no forecast: only meter and store
            return next_refit
        if now >= next_refit or not forecasts.fitted:
            await asyncio.to_thread(forecasts.refit, now)
            next_refit = now + self.cfg.forecast.refit_every_s
        for a in await asyncio.to_thread(forecasts.query, now):
            self._feed(ForecastUpdated(a.tenant, a.gpu_model, a.mean, a.var))
        return next_refit

    def _arm_timer(self) -> None:
        """Tick the core at its next keep-alive deadline: one timer, re-armed after every
        event (a timer handle, not a task woken per event: that cost a task per event)."""
        if self._tick_handle is not None:
            self._tick_handle.cancel()
            self._tick_handle = None
        deadline = self.core.next_deadline() if self._ticking else None
        if deadline is None:
            return
        self._tick_handle = asyncio.get_running_loop().call_later(
            max(0.0, deadline - self.clock()), self._deadline_passed
        )

    def _deadline_passed(self) -> None:
        self._tick_handle = None
        self._feed(Tick())  # which arms the timer for the next deadline


def _found(pod: str, info: Any) -> FoundPod:
    """A live pod as the runtime's ``pod_info`` has it: whether it stands by, and what
    its agent said on its hello, in the core's terms."""
    outcomes = {
        job: Outcome(int(o["exit_code"]), Failure(o["failure"]) if o.get("failure") else None)
        for job, o in (getattr(info, "ran", None) or {}).items()
    }
    agent = AgentReport(info.job, outcomes, frozenset(getattr(info, "held", ()) or ()))
    return FoundPod(pod, bool(info.standby), agent)
