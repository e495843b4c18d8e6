"""Actions the core asks its driver (broker or simulator) to carry out.

Drivers only execute these; every decision about which pod, when and why is the core's.
"""

from __future__ import annotations

from dataclasses import dataclass

from stoker.core.model import Failure


@dataclass(frozen=True, slots=True)
class StartPod:
    """Start a pod of ``profile`` on ``node`` with ``gpus``; ``standby`` starts it without CUDA."""

    pod: str
    profile: str
    node: str
    gpus: tuple[str, ...]
    standby: bool = False


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
    """Stop a pod and release its GPUs; report PodGone when done."""

    pod: str
    reason: str


@dataclass(frozen=True, slots=True)
class BindJob:
    """Bind a job into its pods: code, dependencies, topology (rank i runs in ``pods[i]``)."""

    job: str
    pods: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class KillJob:
    """Stop a running job (cancelled)."""

    job: str


@dataclass(frozen=True, slots=True)
class JobEnded:
    """The core finished a job without it running to completion (cancelled in queue, failed)."""

    job: str
    failure: Failure


Action = StartPod | PromoteStandby | RecyclePod | StopPod | BindJob | KillJob | JobEnded
