"""Events the drivers hand to the core: API calls and what the runtime reports.

Every event is a frozen value; the core's answer to an event depends only on the events
before it and the ``now`` passed with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from stoker.core.model import Failure, JobSpec


@dataclass(frozen=True, slots=True)
class JobSubmitted:
    """A caller asks for a job to run."""

    spec: JobSpec


@dataclass(frozen=True, slots=True)
class JobCancelled:
    """A caller (or the broker on a timeout in the queue) withdraws a job."""

    job: str


@dataclass(frozen=True, slots=True)
class PodReady:
    """A started, promoted or recycled pod is ready to bind a job (or to stand by)."""

    pod: str


@dataclass(frozen=True, slots=True)
class PodFailed:
    """A pod could not start or died; its job (if any) fails with ``reason``."""

    pod: str
    reason: Failure = Failure.POD_DIED


@dataclass(frozen=True, slots=True)
class PodGone:
    """The runtime finished stopping a pod; its GPU share is free again."""

    pod: str


@dataclass(frozen=True, slots=True)
class JobStarted:
    """The job's process is running in its pod(s)."""

    job: str


@dataclass(frozen=True, slots=True)
class JobFinished:
    """The job exited: ``exit_code`` and, when it did not end cleanly, a typed failure."""

    job: str
    exit_code: int = 0
    failure: Failure | None = None


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed: keep-alive deadlines, budget updates and standby replenishment."""


Event = (
    JobSubmitted | JobCancelled | PodReady | PodFailed | PodGone | JobStarted | JobFinished | Tick
)
