"""Actions the core asks its driver (broker or simulator) to carry out, for every class.

Drivers only execute these; every decision about which pod, when and why is the core's.
hp and spot jobs run in pods like pool jobs (one pod per worker, started cold for the job,
stopped when it ends or is evicted), so one runtime carries out every class.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from stoker.core.model import Failure


@dataclass(frozen=True, slots=True)
class StartPod:
    """Start a pod of ``profile`` on ``node`` with ``gpus``; ``standby`` starts it without
    CUDA. ``share`` is what it holds of each card (below 1 shares the card; None: the
    profile's share)."""

    pod: str
    profile: str
    node: str
    gpus: tuple[str, ...]
    standby: bool = False
    share: float | None = None


@dataclass(frozen=True, slots=True)
class PromoteStandby:
    """Give a standby pod its GPU: initialise CUDA, then report PodReady."""

    pod: str


@dataclass(frozen=True, slots=True)
class RecyclePod:
    """Scrub a pod in place (kill every process, wipe the workspace, restart the agent) and
    bring it back as ``new_pod``: a pod never changes hands under the same id."""

    pod: str
    new_pod: str


@dataclass(frozen=True, slots=True)
class StopPod:
    """Stop a pod and release its GPUs; report PodGone when done (PodStopFailed if not)."""

    pod: str
    reason: str


@dataclass(frozen=True, slots=True)
class BindJob:
    """Bind a job into its pods: code, dependencies, topology (rank i runs in ``pods[i]``)."""

    job: str
    pods: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class KillJob:
    """Stop every running rank of a job: SIGTERM, then SIGKILL after ``grace_s`` (so an
    evicted spot job may checkpoint). ``reason`` types the end its ranks report."""

    job: str
    reason: Failure = Failure.CANCELLED
    grace_s: float = 0.0


@dataclass(frozen=True, slots=True)
class JobEnded:
    """The job is finished, for good: ``failure`` None and ``exit_code`` 0 when it ran to a
    clean end; else the typed failure (an infrastructure failure is never ``user_error``)."""

    job: str
    failure: Failure | None = None
    exit_code: int | None = None


@dataclass(frozen=True, slots=True)
class JobRequeued:
    """A job goes back to its queue and will run again (nothing lost): an evicted spot job
    (``preempted``), or a job whose pod failed before it ran."""

    job: str
    reason: Failure


@dataclass(frozen=True, slots=True)
class Reconciled:
    """What the core made of a restart's :class:`~stoker.core.events.PodsFound` (the
    first of its actions; nothing to carry out, a driver reports it): its pods found
    alive (``adopted``) and not (``lost``), live pods it had no record of (``orphans``,
    stopped), the jobs bound to adopted pods (``jobs``), of them those bound again
    (``rebound``) and those lost with their pods (``jobs_lost``)."""

    adopted: tuple[str, ...] = ()
    lost: tuple[str, ...] = ()
    orphans: tuple[str, ...] = ()
    jobs: tuple[str, ...] = ()
    rebound: tuple[str, ...] = ()
    jobs_lost: tuple[str, ...] = ()


Action = (
    StartPod
    | PromoteStandby
    | RecyclePod
    | StopPod
    | BindJob
    | KillJob
    | JobEnded
    | JobRequeued
    | Reconciled
)


class Executor(Protocol):
    """A driver's hands: one method per action, each told the action itself (the broker's
    against a runtime and its store, the simulator's against its clock). :func:`executor`
    hands every action to its method, so each driver carries out the same set of actions
    in the same shape, and a new action is a missing method in each until it is handled."""

    def start_pod(self, action: StartPod) -> None: ...

    def promote_standby(self, action: PromoteStandby) -> None: ...

    def recycle_pod(self, action: RecyclePod) -> None: ...

    def stop_pod(self, action: StopPod) -> None: ...

    def bind_job(self, action: BindJob) -> None: ...

    def kill_job(self, action: KillJob) -> None: ...

    def job_ended(self, action: JobEnded) -> None: ...

    def job_requeued(self, action: JobRequeued) -> None: ...

    def reconciled(self, action: Reconciled) -> None: ...


# each action's method on an Executor
_METHODS: dict[type, str] = {
    StartPod: "start_pod",
    PromoteStandby: "promote_standby",
    RecyclePod: "recycle_pod",
    StopPod: "stop_pod",
    BindJob: "bind_job",
    KillJob: "kill_job",
    JobEnded: "job_ended",
    JobRequeued: "job_requeued",
    Reconciled: "reconciled",
}


def executor(hands: Executor) -> Callable[[Action], None]:
    """One call that carries out an action through ``hands``' method for its kind (the
    methods looked up once: the simulator carries out millions); a TypeError names an
    action no method takes."""
    methods: dict[type, Callable[[Action], None]] = {
        kind: getattr(hands, name) for kind, name in _METHODS.items()
    }

    def carry_out(action: Action) -> None:
        method = methods.get(type(action))
        if method is None:
            raise TypeError(f"no driver method carries out {action!r}")
        method(action)

    return carry_out
