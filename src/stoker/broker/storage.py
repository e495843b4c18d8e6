"""Bounded storage: what the broker keeps of finished jobs, and how much disk it may fill.

Three bounds, from the config's ``[storage]`` table (:class:`StorageConfig`):

- a **budget** of stored output per tenant (``output_budget_mb``): output past it is not
  stored; the job's stderr gets one line naming the budget instead, and the job runs on
  (nothing acknowledged is lost: the job, its state and the output stored before stay);
- **retention** (``keep_days``, ``keep_jobs``): finished jobs older than ``keep_days`` and
  a tenant's finished jobs beyond its newest ``keep_jobs`` are deleted with their output,
  in the background every ``prune_every_s``, one transaction per batch, never a job that
  has not finished;
- a **disk floor** (``min_free_fraction``): while the data dir's filesystem has less free,
  new submits get a 503 naming the disk, rather than a write failing half-way.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from stoker.units import DAY_S

# the note a job's stderr gets when its output meets its tenant's budget
BUDGET_NOTE = (
    "stoker: output not stored past here: tenant {tenant}'s stored output is at its budget"
    " of {budget} bytes (storage.output_budget_mb); older jobs' output frees it as it is pruned\n"
)


@dataclass(frozen=True, slots=True)
class Retention:
    """What the broker keeps (see the module docstring); None: no bound."""

    output_budget_bytes: int | None = 1024 * 1024 * 1024
    keep_s: float | None = 30 * DAY_S
    keep_jobs: int | None = 100_000
    prune_every_s: float = 60.0
    min_free_fraction: float = 0.05


@dataclass
class OutputBudget:
    """Per tenant, its stored output bytes (read from the store at start, then kept as
    output is stored and pruned), and which jobs already met the budget."""

    budget: int | None
    stored: dict[str, int] = field(default_factory=dict)
    over: set[str] = field(default_factory=set)  # jobs whose output met the budget

    def admit(self, tenant: str, job: str, size: int) -> bool | None:
        """True: store ``size`` bytes of ``job``'s output; False: the budget is met, say
        so once (the caller writes :data:`BUDGET_NOTE`); None: drop it quietly (said)."""
        if job in self.over:
            return None
        used = self.stored.get(tenant, 0)
        if self.budget is not None and used + size > self.budget:
            self.over.add(job)
            return False
        self.stored[tenant] = used + size
        return True

    def freed(self, per_tenant: dict[str, int]) -> None:
        """Pruning removed this many bytes of each tenant's output."""
        for tenant, size in per_tenant.items():
            self.stored[tenant] = max(0, self.stored.get(tenant, 0) - size)

    def ended(self, job: str) -> None:
        self.over.discard(job)


def disk_refusal(path: Path, min_free_fraction: float) -> str | None:
    """Why new jobs are refused now (the filesystem of ``path`` nearly full), or None."""
    usage = shutil.disk_usage(path)
    free = usage.free / usage.total if usage.total else 1.0
    if free >= min_free_fraction:
        return None
    return (
        f"disk: the data dir's filesystem ({path}) has {free:.1%} free, under"
        f" storage.min_free_fraction ({min_free_fraction:.1%}); new jobs are refused until"
        " space is freed"
    )
