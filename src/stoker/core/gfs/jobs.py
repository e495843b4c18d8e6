"""HP and spot gang jobs and the guarantee-period ledger (GFS job classes in the core).

A job has ``worker_num`` workers, each asking ``gpu_request`` GPUs of one pool (GPU model):
below 1 a share of one card, otherwise whole cards on one node. A gang is placed and evicted
all or nothing. Work is tracked in seconds of run time still owed (``remaining``), so an
eviction adds back the work since the last hourly checkpoint and a restart overhead.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

from stoker.core.model import EPS

JobClass = Literal["hp", "spot"]

# the paper: restart overhead 40 s, 60 s for jobs above 8 GPUs; checkpoints every hour
RESTART_S = 40.0
RESTART_LARGE_S = 60.0
LARGE_JOB_GPUS = 8.0
CHECKPOINT_S = 3600.0


class GangState(StrEnum):
    """Queued (never started or evicted) or running; finished jobs leave the scheduler."""

    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"


class GFSJobError(ValueError):
    """A job the scheduler cannot accept (the message names the field)."""


@dataclass(frozen=True, slots=True)
class GangSpec:
    """What a submitter asks for."""

    id: str
    tenant: str
    pool: str
    job_class: JobClass
    gpu_request: float
    worker_num: int
    duration: float

    def __post_init__(self) -> None:
        if self.job_class not in ("hp", "spot"):
            raise GFSJobError(f"job {self.id}: job_class must be hp or spot, got {self.job_class}")
        if not self.gpu_request > 0:
            raise GFSJobError(f"job {self.id}: gpu_request must be > 0, got {self.gpu_request}")
        if self.worker_num < 1:
            raise GFSJobError(f"job {self.id}: worker_num must be >= 1, got {self.worker_num}")
        if not self.duration >= 0 or not math.isfinite(self.duration):
            raise GFSJobError(f"job {self.id}: duration must be finite and >= 0")

    @property
    def per_worker(self) -> float:
        """GPUs one worker holds: a share below 1, else whole cards (a request of 1.5 takes 2)."""
        return (
            self.gpu_request
            if self.gpu_request < 1.0 - EPS
            else float(math.ceil(self.gpu_request - EPS))
        )

    @property
    def fractional(self) -> bool:
        return self.gpu_request < 1.0 - EPS

    @property
    def gpus(self) -> float:
        """GPUs the whole gang holds."""
        return self.per_worker * self.worker_num


def restart_overhead(gpus: float) -> float:
    """Seconds a restarted job spends before doing useful work again."""
    return RESTART_LARGE_S if gpus > LARGE_JOB_GPUS + EPS else RESTART_S


@dataclass(slots=True)
class Gang:
    """A submitted job and its timeline; every metric is computed from these records."""

    spec: GangSpec
    submitted: float
    state: GangState = GangState.QUEUED
    remaining: float = 0.0  # useful run time still owed, s
    overhead: float = 0.0  # restart overhead owed before useful work resumes, s
    queued_since: float = 0.0
    queue_s: float = 0.0  # total time waiting (first start and every re-queue)
    run_start: float = 0.0  # start of the current run
    first_start: float | None = None
    finished: float | None = None
    evictions: int = 0  # failed guarantee periods
    periods_ok: int = 0  # successful guarantee periods
    lost_s: float = 0.0  # useful work lost to evictions, s (per worker-GPU: x gpus)
    placement: list[tuple[str, str, float]] = field(default_factory=list)  # (node, gpu, share)
    lease_start: float = 0.0

    @property
    def id(self) -> str:
        return self.spec.id

    def useful_since_start(self, now: float) -> float:
        """Useful work done in the current run (after its restart overhead)."""
        return max(0.0, now - self.run_start - self.overhead)

    def last_checkpoint(self, now: float, every: float = CHECKPOINT_S) -> float:
        """Time of the last hourly checkpoint of the current run (its start if none yet)."""
        ran = max(0.0, now - self.run_start)
        return self.run_start + math.floor(ran / every) * every

    def lost_work(self, now: float, every: float = CHECKPOINT_S) -> float:
        """GPU-seconds an eviction now would lose (GPUs x time since the last checkpoint)."""
        return self.spec.gpus * (now - self.last_checkpoint(now, every))

    def finish_at(self) -> float:
        """When the current run ends if nothing interrupts it."""
        return self.run_start + self.overhead + self.remaining


class GuaranteeLedger:
    """Successful and failed guarantee periods of one pool, with the time each was settled.

    A running spot job earns one success per uninterrupted guaranteed duration and one at
    completion; an eviction is one failure. ``rate(since)`` is failed / (failed + successful)
    over the periods settled at or after ``since``; ``failed``/``succeeded`` cover the run.
    """

    def __init__(self) -> None:
        self._times: list[float] = []
        self._cum_failed: list[int] = []  # running totals after each record
        self._cum_ok: list[int] = []
        self.failed = 0
        self.succeeded = 0

    def record(self, now: float, *, failed: int = 0, succeeded: int = 0) -> None:
        """Settle periods at ``now`` (times must not decrease)."""
        if failed == 0 and succeeded == 0:
            return
        self.failed += failed
        self.succeeded += succeeded
        self._times.append(now)
        self._cum_failed.append(self.failed)
        self._cum_ok.append(self.succeeded)

    def counts(self, since: float) -> tuple[int, int]:
        """(failed, successful) periods settled at or after ``since``."""
        i = bisect.bisect_left(self._times, since)
        if i == 0:
            return self.failed, self.succeeded
        return self.failed - self._cum_failed[i - 1], self.succeeded - self._cum_ok[i - 1]

    def rate(self, since: float = -math.inf) -> float | None:
        """Eviction rate over periods settled since ``since``; None when there are none."""
        failed, ok = self.counts(since)
        total = failed + ok
        return failed / total if total else None

    def rate_after(self, since: float, extra_failed: int) -> float:
        """The rate if ``extra_failed`` more evictions were settled now (preemption cost)."""
        failed, ok = self.counts(since)
        failed += extra_failed
        total = failed + ok
        return failed / total if total else 0.0
