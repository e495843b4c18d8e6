"""The decision log: one structured event per decision of the core, with its reason.

The scheduling loop hands every (event, actions, now) of the core to :meth:`DecisionLog.record`.
From the actions and the core's state right after, it writes what was decided and why: a
job queued (no free GPU, room being reclaimed), placed (warm hit on its own pod; standby
promoted; cold start because its reuse tag had no idle warm pod and no standby pod was
ready, with what happened to its last pod), started, finished; a pod started, promoted,
recycled or stopped (keep-alive, budget, reclaim, ...). The same pass moves the Prometheus
counters and histograms, so the log and ``/metrics`` cannot disagree.

Events go to a JSON-lines file in the data directory (the structured log; one object per
line) and to a bounded ring in memory that ``GET /v1/events`` reads; a restarted broker
reloads the ring from the file's tail. Explaining reads the core; it decides nothing.
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stoker.broker.metrics import BrokerMetrics
from stoker.core import (
    BindFailed,
    BindJob,
    Core,
    CpuWait,
    Event,
    Failure,
    GpuWait,
    JobCancelled,
    JobClass,
    JobEnded,
    JobRequeued,
    JobState,
    JobSubmitted,
    KeepAliveRenewed,
    KillJob,
    PodFailed,
    PodGone,
    PodStartFailed,
    PodState,
    PromoteStandby,
    RankExited,
    RankStarted,
    Reconciled,
    RecyclePod,
    Refusal,
    SpotQuotaWait,
    StartPod,
    StopPod,
    Waiting,
)
from stoker.core.model import START_FAULTS

_RING = 2_000  # events kept in memory for the API (about 0.6 MB; a job's older ones: the file)
_ROTATE_BYTES = 64 * 1024 * 1024  # the file is renamed to .1 past this size
_PAIRS = 50_000  # (tenant, tag) pairs whose last pod stop is remembered
_ENDED = 50_000  # pods whose end was logged (so a second news of it is not a second end)
_POD_ENDS = ("pod.stopped", "pod.recycled", "pod.failed")  # one of them per pod, once
_DETAIL = 500  # characters of a runtime's words on a failed start kept in its event
# what a stop reason means, for the message (the reason itself is the core's word, or the
# broker's for the stops it makes on its own: shutdown, orphan)
_STOP_WHY = {
    "keepalive": "its keep-alive ran out",
    "budget": "the warm budget is full",
    "reclaim": "a queued job needs its GPU",
    "reclaim_hp": "an HP job needs its GPU",
    "handover": "a standby pod on its GPU was promoted",
    "yield": "HP demand takes its GPU",
    "retry": "its stop is asked again",
    "shutdown": "the broker shut down and stopped its pods",
    "orphan": "the broker found it running and no record of it",
}


@dataclass(slots=True)
class _Seen:
    """What the log last said about a live job."""

    state: str
    path: str | None
    started: bool
    pods: tuple[str, ...]


def outcome(exit_code: int | None, failure: str | None) -> str:
    """A finished job's outcome label: ``ok`` or its typed failure."""
    if failure:
        return failure
    return "ok" if exit_code == 0 else Failure.USER_ERROR.value


def waiting_words(wait: Waiting) -> tuple[str, str]:
    """A queued job's wait (:meth:`Core.waiting`) as (reason, message): the ``job.queued``
    event's, and the message the job's ``waiting_reason``."""
    match wait:
        case Refusal(field, reason):
            return "no_node_fits", f"no node fits: {reason} ({field})"
        case SpotQuotaWait():
            return "spot_quota", _quota_words(wait)
        case CpuWait():
            return "cpu_slots", (
                f"no CPU slots for {wait.pods} pod(s) of {wait.profile} ({wait.cpu:g} CPU and "
                f"{wait.memory_gb:g} GB each, on one node): {wait.free_cpu:g} CPUs and "
                f"{wait.free_memory_gb:g} GB free of {wait.total_cpu:g} and "
                f"{wait.total_memory_gb:g} GB"
            )
        case GpuWait():
            return _gpu_words(wait)
    raise TypeError(f"unknown wait {wait!r}")


def _quota_words(wait: SpotQuotaWait) -> str:
    """``spot quota 0 GPU of A100, ... (forecast HP 2.0 of 2 GPUs over the guaranteed 1 h,
    ...; 2 GPUs free)``."""
    head = (
        f"spot quota {wait.quota:g} GPU of {wait.gpu_pool}, {wait.spot_gpus:g} held by spot, "
        f"the job asks {wait.gpus:g}"
    )
    if wait.opens_at is not None:
        return f"{head} (no spot job starts before the window opens at {wait.opens_at:g} s)"
    if wait.forecast_hp is None:
        basis = f"a quota of the {wait.capacity} GPUs that reads no forecast"
    else:
        basis = (
            f"forecast HP {wait.forecast_hp:.1f} of {wait.capacity} GPUs over the guaranteed "
            f"{wait.guaranteed_h} h, eta {wait.eta:.2f}"
        )
    idle = wait.capacity - wait.hp_gpus
    if wait.lent is not None:
        basis += f"; lent {wait.lent:g} of the {idle:g} GPUs HP does not hold"
    elif wait.hp_queued:
        basis += f"; nothing lent while {wait.hp_queued} HP job(s) wait"
    return f"{head} ({basis}; {wait.free_gpus} GPUs free)"


def _gpu_words(wait: GpuWait) -> tuple[str, str]:
    words = (
        f"no room on {wait.gpu_pool} for {wait.workers} worker(s) of {wait.per_worker:g} GPU: "
        f"{wait.free_gpus} of {wait.capacity} GPUs free"
    )
    if wait.freeing_for is not None:
        return "reclaim", f"{words}; pods are stopping to make room for job {wait.freeing_for}"
    if wait.reserved_for is not None:
        return "reserved", f"{words}; nodes are reserved for HP job {wait.reserved_for}"
    return "no_capacity", words


def job_latencies_ms(row: dict[str, Any]) -> tuple[float | None, float | None]:
    """A job record's (start latency, queue wait) in ms: placed -> running, and submitted
    -> placed (None where a time is missing: not placed yet, or stored before placements
    were)."""
    placed, started = row.get("placed"), row.get("started")
    start = None if placed is None or started is None else (started - placed) * 1000.0
    wait = None if placed is None else (placed - row["submitted"]) * 1000.0
    return start, wait


class DecisionLog:
    """Turns the core's decisions into events (file + ring) and metrics."""

    def __init__(
        self, core: Callable[[], Core], metrics: BrokerMetrics, path: Path | None = None
    ) -> None:
        self._core = core
        self.metrics = metrics
        self.path = path
        self.ring: deque[dict[str, Any]] = deque(maxlen=_RING)
        self.seq = 0
        self._live: dict[str, _Seen] = {}
        self._last_stop: dict[tuple[str, str], tuple[str, str, float]] = {}  # pair -> pod, why, at
        self._ended: dict[str, None] = {}  # pods whose end is logged, oldest first
        self._gpu_end: dict[str, tuple[float, tuple[str, str]]] = {}  # gpu -> (job end, pair)
        self._file: Any = None
        if path is not None:
            self._load(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            # mode 600: the log names tenants, labels and argv (held open, closed in close())
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            self._file = open(fd, "a", encoding="utf-8")  # noqa: SIM115

    def _load(self, path: Path) -> None:
        """Reload the ring (and the sequence) from the file's tail after a restart."""
        if not path.exists():
            return
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8 * 1024 * 1024))
            tail = f.read().splitlines()[1:] if f.tell() > 8 * 1024 * 1024 else None
        if tail is None:
            tail = path.read_bytes().splitlines()
        for line in tail:
            try:
                ev = json.loads(line)
            except ValueError:
                continue  # a line cut by a crash
            self.ring.append(ev)
            self.seq = max(self.seq, int(ev.get("seq", 0)))
            if ev["kind"] in _POD_ENDS:
                self._mark_ended(ev["pod"])
                if ev.get("reuse_tag") is not None:
                    pair = (ev["tenant"], ev["reuse_tag"])
                    self._remember(pair, ev["pod"], ev["reason"], ev["at"])

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    # ------------------------------------------------------------------ reading

    def held(self) -> dict[str, int]:
        """Entries the log holds per job (a job it follows until it ends), by map."""
        return {"decision_log.live": len(self._live)}

    def query(
        self,
        tenant: str | None,
        job: str | None = None,
        after: int = 0,
        limit: int = 100,
        kind: str | None = None,
    ) -> list[dict[str, Any]]:
        """Events in order, oldest first: a tenant's own (``tenant`` None: all), of one job;
        with a cursor ``after`` (a sequence number) the first ``limit`` after it, so a
        follower that pages on from the last it saw misses none; without one the last
        ``limit`` (the log's tail)."""

        def keep(ev: dict[str, Any]) -> bool:
            return (
                ev["seq"] > after
                and (tenant is None or ev.get("tenant") == tenant)
                and (job is None or ev.get("job") == job)
                and (kind is None or ev["kind"].startswith(kind))
            )

        out = [ev for ev in self.ring if keep(ev)]
        if job is not None and not any(ev["kind"] == "job.submitted" for ev in out):
            # an old job: its events have left the ring; read them back from the files
            out = [ev for ev in self._from_files() if keep(ev)]
        return out[:limit] if after else out[-limit:]

    def _from_files(self) -> Iterator[dict[str, Any]]:
        if self.path is None:
            return
        if self._file is not None:
            self._file.flush()
        for p in (self.path.with_suffix(self.path.suffix + ".1"), self.path):
            if not p.exists():
                continue
            with open(p, encoding="utf-8") as f:
                for line in f:
                    try:
                        yield json.loads(line)
                    except ValueError:
                        continue

    # ------------------------------------------------------------------ writing

    def _emit(self, at: float, kind: str, message: str, **fields: Any) -> None:
        self.seq += 1
        ev = {"seq": self.seq, "at": round(at, 6), "kind": kind, **fields, "message": message}
        self.ring.append(ev)
        if self._file is not None:
            self._file.write(json.dumps(ev, separators=(",", ":")) + "\n")
            self._file.flush()  # a crash loses no decision already carried out
            if self._file.tell() > _ROTATE_BYTES and self.path is not None:
                self._file.close()
                os.replace(self.path, self.path.with_suffix(self.path.suffix + ".1"))
                self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115

    def record(self, event: Event, actions: list[Any], now: float) -> None:
        """Log what the core decided on ``event`` (its ``actions``) and why."""
        core = self._core()
        touched: dict[str, None] = {}
        match event:
            case JobSubmitted(spec):
                self._emit(
                    now,
                    "job.submitted",
                    f"{spec.job_class} job: {spec.workers} worker(s) of {spec.profile} asked",
                    job=spec.id,
                    tenant=spec.tenant,
                    profile=spec.profile,
                    job_class=spec.job_class.value,
                    reuse_tag=spec.reuse_tag,
                )
                touched[spec.id] = None
            case (
                RankStarted(job=job) | RankExited(job=job) | JobCancelled(job) | BindFailed(job=job)
            ):
                touched[job] = None
            case PodFailed(pod, reason):
                self._failed(core, pod, reason, now)
                touched.update(self._jobs_on(pod))
            case PodStartFailed(pod, fault, detail):
                reason = START_FAULTS[fault].failure
                why = f"pod {pod} did not start: {fault.value}"
                self._failed(
                    core, pod, reason, now, why, fault=fault.value, detail=detail[:_DETAIL]
                )
                touched.update(self._jobs_on(pod))
            case PodGone(pod) if self._died(core, pod):
                # gone unasked (the runtime lost it): the core fails it as pod_died
                self._failed(core, pod, Failure.POD_DIED, now)
                touched.update(self._jobs_on(pod))
            case KeepAliveRenewed(tenant, tag, profile, keepalive_s):
                self._emit(
                    now,
                    "keepalive.renewed",
                    f"its warm pod of {profile} is kept {keepalive_s:g} s from now at least",
                    tenant=tenant,
                    profile=profile,
                    reuse_tag=tag,
                )
        for action in actions:
            match action:
                case StartPod(pod, profile, _node, gpus, standby):
                    p = core.pods[pod]
                    if standby:
                        why = (
                            f"spare pod {pod} started for {profile}'s minimum warm count"
                            if core.warm.is_spare(pod)
                            else f"standby pod {pod} staged beside the active pod on {gpus[0]}"
                        )
                        self._emit(
                            now,
                            "pod.started",
                            why,
                            pod=pod,
                            profile=profile,
                            reason="standby",
                            gpus=list(gpus),
                        )
                    elif p.pending_job is not None:
                        touched[p.pending_job] = None
                case RecyclePod(old, new):
                    self._recycled(core, old, new, now)
                    if (job := core.pods[new].pending_job) is not None:
                        touched[job] = None
                case PromoteStandby(pod):
                    if (job := core.pods[pod].pending_job) is not None:
                        touched[job] = None
                case BindJob(job=job) | JobEnded(job=job):
                    touched[job] = None
                case StopPod(pod, reason):
                    self.stopped(pod, reason, now)
                case KillJob(job, reason, grace_s):
                    j = core.jobs[job]
                    self._emit(
                        now,
                        "job.kill",
                        f"its running ranks are stopped ({reason.value}; {grace_s:g} s grace)",
                        job=job,
                        tenant=j.spec.tenant,
                        reason=reason.value,
                    )
                case JobRequeued(job, reason):
                    self._requeued(core, job, reason, now)
                    touched[job] = None
                case Reconciled():
                    self._reconciled(core, action, now)
                    touched.update(dict.fromkeys(action.jobs))
                    for pod in action.lost:
                        touched.update(self._jobs_on(pod))
        for job_id in touched:
            self._job(core, job_id, actions, now)

    def _jobs_on(self, pod: str) -> dict[str, None]:
        """The live jobs the log last saw on ``pod``."""
        return {j: None for j, s in self._live.items() if pod in s.pods}

    def _reconciled(self, core: Core, did: Reconciled, now: float) -> None:
        """A restart's reconciliation: what it found, and each lost pod that was not
        stopping (the core failed it ``pod_died``)."""
        for pod in did.lost:
            if self._died(core, pod):
                self._failed(core, pod, Failure.POD_DIED, now)
        if not (did.adopted or did.lost or did.orphans):
            return  # a first start, or one with nothing left running: nothing to tell
        self._emit(
            now,
            "broker.reconciled",
            f"restart: {len(did.adopted)} live pod(s) adopted, {len(did.lost)} lost, "
            f"{len(did.orphans)} orphan(s) stopped; {len(did.rebound)} job(s) bound again, "
            f"{len(did.jobs_lost)} lost with their pods",
            adopted=list(did.adopted),
            lost=list(did.lost),
            orphans=list(did.orphans),
            rebound=list(did.rebound),
            jobs_lost=list(did.jobs_lost),
        )

    @staticmethod
    def _owner(pod: Any) -> dict[str, Any]:
        if pod is None:
            return {}
        out: dict[str, Any] = {"profile": pod.profile}
        if pod.owner is not None:
            out["tenant"] = pod.owner[0]
        return out

    def _remember(self, pair: tuple[str, str], pod_id: str, reason: str, at: float) -> None:
        """The last pod of a (tenant, tag) pair and why it went: a cold start's answer."""
        self._last_stop.pop(pair, None)
        self._last_stop[pair] = (pod_id, reason, at)
        if len(self._last_stop) > _PAIRS:
            del self._last_stop[next(iter(self._last_stop))]

    def _mark_ended(self, pod_id: str) -> None:
        self._ended[pod_id] = None
        if len(self._ended) > _ENDED:
            del self._ended[next(iter(self._ended))]

    def _died(self, core: Core, pod_id: str) -> bool:
        """The core's pod went gone on this PodGone without having been asked to stop."""
        pod = core.pods.get(pod_id)
        if pod is None or pod.state is not PodState.GONE or not pod.history:
            return False
        return pod.history[-1][2] != PodState.STOPPING.value  # (at, to, from)

    def _pod_end(
        self, kind: str, pod_id: str, pod: Any, reason: str, message: str, now: float, **fields: Any
    ) -> None:
        """A pod's end (stopped, recycled or failed): one event and one count per pod, the
        first news of it; a later one (a stop asked again, a successor finding a pod gone
        that this log saw stopped at shutdown) is the same end."""
        if pod_id in self._ended:
            return
        self._mark_ended(pod_id)
        owner = pod.owner if pod is not None else None
        if pod is not None:
            self.metrics.pod_stops.labels(pod.profile, reason).inc()
        if owner is not None:
            self._remember(owner, pod_id, reason, now)
        self._emit(
            now,
            kind,
            message,
            pod=pod_id,
            reason=reason,
            **fields,
            reuse_tag=owner[1] if owner else None,
            **self._owner(pod),
        )

    def stopped(self, pod_id: str, reason: str, now: float) -> None:
        """Log a pod's stop: the core's StopPod, or one the broker makes on its own (every
        pod at shutdown, an orphan found on start; such a pod may be unknown to the core)."""
        pod = self._core().pods.get(pod_id)
        why = _STOP_WHY.get(reason, reason)
        self._pod_end("pod.stopped", pod_id, pod, reason, f"pod {pod_id} stopped: {why}", now)

    def _recycled(self, core: Core, old: str, new: str, now: float) -> None:
        pod = core.pods[old]
        tag = f" (reuse tag {pod.owner[1]!r})" if pod.owner else ""
        job = core.pods[new].pending_job
        msg = f"pod {old}{tag} scrubbed in place and back as {new} for job {job}"
        self._pod_end("pod.recycled", old, pod, "recycle", msg, now, new_pod=new, for_job=job)

    def _failed(
        self,
        core: Core,
        pod_id: str,
        reason: Failure,
        now: float,
        why: str | None = None,
        **fields: Any,
    ) -> None:
        """A pod's end by failure (``why``: the message, if not just its failure)."""
        pod = core.pods.get(pod_id)
        msg = why or f"pod {pod_id} failed: {reason.value}"
        self._pod_end("pod.failed", pod_id, pod, reason.value, msg, now, **fields)

    def _job(self, core: Core, job_id: str, actions: list[Any], now: float) -> None:
        """What changed for one job since the log last looked: queued, placed (a run's pods
        chosen), started (its first run, with the start latency; a later run after a
        requeue), finished."""
        job = core.jobs.get(job_id)
        if job is None:
            return
        seen = self._live.get(job_id)
        state = job.state.shown  # one set aside is queued here, as its tenant sees it
        spec = job.spec
        cls = spec.job_class.value
        base = {"job": job_id, "tenant": spec.tenant, "profile": spec.profile}
        path = job.path.value if job.path else None
        if seen is None:
            seen = _Seen(JobState.QUEUED.value, None, False, ())
            self._live[job_id] = seen
            if state is JobState.QUEUED:
                reason, msg = self._why_queued(core, job, actions)
                self._emit(now, "job.queued", msg, reason=reason, **base)
        since = max(job.submitted, job.queued_since)  # this run's time in the queue
        placed = job.placed is not None and job.placed >= since  # (not a cancel in the queue)
        if seen.state == JobState.QUEUED.value and state is not JobState.QUEUED and placed:
            wait = job.placed - since
            self.metrics.queue_wait.labels(spec.profile, cls, path or "none").observe(wait)
            reasons, msg = self._why_path(core, job)
            self._emit(
                now,
                "job.placed",
                msg,
                path=path,
                reasons=reasons,
                pods=list(job.pods),
                wait_s=round(wait, 6),
                **base,
            )
        if job.started is not None and not seen.started:
            # from its placement (it stopped waiting) to running: the path's own cost; the
            # queue's share is the queue wait, observed at placement
            latency = job.started - (job.placed if job.placed is not None else job.submitted)
            labels = (spec.profile, cls, path or "none")
            self.metrics.started.labels(*labels).inc()
            self.metrics.start_latency.labels(*labels).observe(latency)
            self._handover(core, job)
            how = path or f"{cls} job"
            self._emit(
                now,
                "job.started",
                f"running {latency * 1000:.1f} ms after its placement ({how})",
                path=path,
                latency_s=round(latency, 6),
                **base,
            )
        elif state is JobState.RUNNING and seen.state != JobState.RUNNING.value:
            # a run after a requeue: running again, its first start already counted
            self._emit(now, "job.started", "running again after its requeue", **base)
        if state is JobState.FINISHED:
            out = outcome(job.exit_code, job.failure.value if job.failure else None)
            self.metrics.finished.labels(spec.profile, cls, path or "none", out).inc()
            if job.started is not None:
                for pid in job.pods:
                    for gid in core.pods[pid].gpus:
                        self._gpu_end[gid] = (job.finished or now, job.pair)
            warm = [p for p in job.pods if core.pods[p].state is PodState.WARM]
            after = f"; pod {warm[0]} kept warm for its reuse tag" if warm else ""
            self._emit(
                now,
                "job.finished",
                f"{out} (exit {job.exit_code}){after}",
                outcome=out,
                exit_code=job.exit_code,
                path=path,
                **base,
            )
            del self._live[job_id]
            return
        self._live[job_id] = _Seen(state.value, path, job.started is not None, tuple(job.pods))

    def _requeued(self, core: Core, job_id: str, reason: Failure, now: float) -> None:
        job = core.jobs[job_id]
        spec = job.spec
        if reason is Failure.PREEMPTED:
            model = spec.gpu_model or core.profiles[spec.profile].gpu_model
            self.metrics.preemptions.labels(model).inc()
            msg = "evicted for HP demand: back in the queue, runs again"
        else:
            msg = f"its pod failed before it ran ({reason.value}): back in the queue"
        self._live[job_id] = _Seen(JobState.QUEUED.value, None, job.started is not None, ())
        self._emit(
            now,
            "job.requeued",
            msg,
            reason=reason.value,
            job=job_id,
            tenant=spec.tenant,
            profile=spec.profile,
        )

    def _handover(self, core: Core, job: Any) -> None:
        """Observe a handover once per job: the GPU's previous job (another caller's) ended
        while this one waited, and this one runs there now (as stoker.sim.metrics counts)."""
        for pid in job.pods:
            for gid in core.pods[pid].gpus:
                prev = self._gpu_end.pop(gid, None)
                if prev is None:
                    continue
                end, pair = prev
                if pair != job.pair and job.submitted <= end <= job.started:
                    self.metrics.handover.labels(job.spec.profile).observe(job.started - end)
                    return

    def _why_queued(self, core: Core, job: Any, actions: list[Any]) -> tuple[str, str]:
        """Why a job stays queued as it is submitted: the core's answer
        (:meth:`Core.waiting`) in words, and the pods this very decision stops to make
        room for it, or the pool jobs of its profile queued ahead of it."""
        wait = core.waiting(job.id)
        if wait is None:  # asked for queued jobs only, and the core answers for each
            raise AssertionError(f"job {job.id} is queued and the core says it waits for nothing")
        reason, words = waiting_words(wait)
        reclaim = sum(1 for a in actions if isinstance(a, StopPod) and a.reason == "reclaim")
        if reclaim:
            return "reclaim", f"{words}; {reclaim} idle pod(s) stopping to make room for it"
        if job.spec.job_class is JobClass.POOL and job.state is not JobState.SET_ASIDE:
            ahead = len(core.queued(job.spec.profile)) - 1
            if ahead > 0:
                return "behind_queue", (
                    f"waits behind {ahead} queued job(s) of {job.spec.profile}; {words}"
                )
        return reason, words

    def _why_path(self, core: Core, job: Any) -> tuple[list[str], str]:
        """Why the job took its path: for a cold start, what the warm and standby paths
        lacked, and what became of its reuse tag's last pod."""
        pods = ", ".join(job.pods)
        if job.spec.job_class is not JobClass.POOL or job.path is None:
            # hp and spot jobs do not take warm pools' paths: their pods are their own
            cls = job.spec.job_class.value
            return [f"{cls}_placed"], f"{cls} job placed on {pods}"
        path = job.path.value
        if path == "warm":
            return ["warm_pod_of_tag"], f"warm hit: idle warm pod {pods} of its reuse tag"
        reasons: list[str] = []
        words: list[str] = []
        busy = [
            p.id
            for p in core.pods.values()
            if p.owner == job.pair and p.state is PodState.ACTIVE and p.job != job.id
        ]
        last = self._last_stop.get(job.pair)
        if busy:
            reasons.append("warm_pod_busy")
            words.append(f"its reuse tag's pods are busy ({', '.join(busy[:3])})")
        elif last is not None:
            pod_id, why, at = last
            reasons.append(f"last_pod_{why}")
            ago = job.submitted - at
            words.append(f"its last pod {pod_id} was stopped ({why}) {ago:.1f} s before")
        else:
            reasons.append("new_reuse_tag")
            words.append("no pod has run its reuse tag yet")
        if path == "standby":
            return ["no_warm_pod", *reasons, "standby_promoted"], (
                f"standby hit: no idle warm pod of its reuse tag ({words[0]}); "
                f"promoted standby pod {pods}"
            )
        profile = core.profiles[job.spec.profile]
        standby = [
            p
            for p in core.pods.values()
            if p.profile == profile.name and p.state is PodState.STANDBY
        ]
        if not profile.standby_enabled:
            reasons.append("standby_disabled")
            words.append(f"profile {profile.name} stages no standby pods")
        elif standby:
            reasons.append("standby_not_promotable")
            words.append(f"its {len(standby)} standby pod(s) share GPUs with busy pods")
        elif core.idle_gpus + profile.standby_share > core.budget_limit():
            reasons.append("budget_full")
            words.append(
                f"no standby pod: the warm budget is full ({core.idle_gpus:g} of "
                f"{core.budget_limit():g} GPUs held idle)"
            )
        else:
            reasons.append("no_standby")
            words.append("no standby pod was ready")
        return ["no_warm_pod", *reasons], f"cold start on {pods}: " + "; ".join(words)
