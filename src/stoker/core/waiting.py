"""Why a queued job has not started: the core's facts, for a driver to put in words.

:meth:`stoker.core.Core.waiting` answers it for a queued job from the core's state as it
stands after the scheduling pass that left the job queued: the same tests the pass made,
read again, never a guess from outside. One kind per cause: set aside (no node fits it
now, :class:`~stoker.core.shape.Refusal`), a spot job over its GPU pool's spot quota, no
room on the GPUs, no room in the CPU slots (a CPU-only pool job).
"""

from __future__ import annotations

from dataclasses import dataclass

from stoker.core.model import Refusal


@dataclass(frozen=True, slots=True)
class SpotQuotaWait:
    """A spot job the spot quota of its GPU pool holds back.

    ``quota``: the quota in force (GPUs): eta times what the forecast leaves free, or the
    loan where the policy lends and it is larger. ``forecast_hp``: the HP GPUs the forecast
    keeps from spot (its g-quantile at its largest over the ``guaranteed_h`` hours ahead;
    None: the quota reads no forecast). ``lent``: the loan in force (None: the policy
    lends nothing, or ``hp_queued`` HP jobs wait there, which stops it). ``opens_at``:
    before a simulator's window, when spot may start (None: no window)."""

    gpu_pool: str
    quota: float
    spot_gpus: float
    gpus: float
    capacity: int
    free_gpus: int
    hp_gpus: float
    eta: float
    forecast_hp: float | None
    guaranteed_h: int
    lent: float | None
    hp_queued: int
    opens_at: float | None = None


@dataclass(frozen=True, slots=True)
class GpuWait:
    """No room on the GPU pool's cards for every worker at once (``free_gpus``: whole
    cards nothing holds). ``freeing_for``: pods are stopping to make room for a waiting
    job (this one's id, or the one that takes that room first); ``reserved_for``: nodes
    held back for a waiting HP job's reservation."""

    gpu_pool: str
    workers: int
    per_worker: float
    free_gpus: int
    capacity: int
    freeing_for: str | None = None
    reserved_for: str | None = None


@dataclass(frozen=True, slots=True)
class CpuWait:
    """A CPU-only pool job whose pods (``cpu`` CPUs and ``memory_gb`` each, on one node)
    find no room in the nodes' CPU slots: what is free there, and what they hold in all."""

    profile: str
    pods: int
    cpu: float
    memory_gb: float
    free_cpu: float
    free_memory_gb: float
    total_cpu: float
    total_memory_gb: float


Waiting = Refusal | SpotQuotaWait | GpuWait | CpuWait
"""Every answer of :meth:`stoker.core.Core.waiting`."""
