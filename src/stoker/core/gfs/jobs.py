"""GFS's bookkeeping for hp and spot jobs: restart overheads and the guarantee-period
ledger.

Work is tracked in seconds of run time still owed (``Job.remaining``), so an eviction adds
back the work since the last hourly checkpoint and a restart overhead.
"""

from __future__ import annotations

import bisect
import math

from stoker.core.model import EPS

# the authors' ``Policy.preempt_overhead``: restart overhead 40 s, 60 s for a per-worker
# request above 8 GPUs; checkpoints every hour
RESTART_S = 40.0
RESTART_LARGE_S = 60.0
LARGE_JOB_GPUS = 8.0
CHECKPOINT_S = 3600.0


def restart_overhead(per_worker: float) -> float:
    """Seconds a restarted job (of ``per_worker`` GPUs a worker) spends before doing useful
    work again."""
    return RESTART_LARGE_S if per_worker > LARGE_JOB_GPUS + EPS else RESTART_S


class GuaranteeLedger:
    """Successful and failed guarantee periods of one GPU pool, with the time each was settled.

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
