"""Tenant shares: each tenant's weight, guaranteed HP GPUs per GPU pool, and caps.

A shared cluster's answer to one tenant flooding it (as Kueue's ClusterQueues and YARN's
fair scheduler give platform teams), as one core policy at two extension points:

- **queue order**: every queue (a profile's pool jobs, a GPU pool's hp and spot jobs) is
  served in dominant-resource fair order across tenants: start-time fair queueing tags
  (Goyal et al., SIGCOMM 1996) whose cost is a job's dominant share of the cluster over its
  tenant's weight, as DRFQ (Ghodsi et al., SIGCOMM 2012). A tenant's thirtieth queued job
  stands behind another tenant's first; within a tenant, its own submit order holds.
- **admission**: an HP job that would put its tenant past its guaranteed GPUs of the GPU pool
  borrows; it starts only on room that the other tenants' unused guarantees, while they have
  HP work queued for it, do not need (idle quota is lent, wanted quota is not). Borrowed HP
  runs to its end: stoker does not preempt HP work, so a guarantee is kept by not lending
  what is wanted, not by reclaiming what was lent (Kueue's ``reclaimWithinCohort: Never``).
  At submit: a cap on a tenant's queued jobs and on its job's time limit
  (:meth:`TenantShares.limit`); at a job's end, a cap on the warm pods it keeps idle.

None of it is on unless the core's :class:`~stoker.core.config.Policies` has ``shares``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from stoker.core.model import EPS, Cluster, Job, JobSpec, Profile, Refusal


@dataclass(frozen=True, slots=True)
class Share:
    """One tenant's share. ``weight``: its part of what is fair-shared (2 gets twice what 1
    gets); ``hp_gpus``: GPUs of each GPU pool guaranteed to its HP work; ``max_queued``: jobs
    it may have queued at once; ``max_warm_pods``: warm pods it may keep idle; ``max_timeout_s``:
    the longest time limit of its jobs (None: no cap of its own)."""

    weight: float = 1.0
    hp_gpus: Mapping[str, float] = field(default_factory=dict)
    max_queued: int | None = None
    max_warm_pods: int | None = None
    max_timeout_s: float | None = None

    def __post_init__(self) -> None:
        if not (self.weight > 0 and math.isfinite(self.weight)):
            raise ValueError(f"weight: must be > 0, got {self.weight}")
        for gpu_pool, gpus in self.hp_gpus.items():
            if not (gpus >= 0 and math.isfinite(gpus)):
                raise ValueError(f"hp_gpus.{gpu_pool}: must be >= 0, got {gpus}")
        for name in ("max_queued", "max_warm_pods"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name}: must be >= 0, got {value}")
        if self.max_timeout_s is not None and not self.max_timeout_s > 0:
            raise ValueError(f"max_timeout_s: must be > 0, got {self.max_timeout_s}")


@dataclass(frozen=True, slots=True)
class TenantShares:
    """Every tenant's :class:`Share`: ``tenants`` by name, ``default`` for any other."""

    tenants: Mapping[str, Share] = field(default_factory=dict)
    default: Share = field(default_factory=Share)

    def of(self, tenant: str) -> Share:
        """The share of ``tenant``."""
        return self.tenants.get(tenant, self.default)

    def guaranteed(self, tenant: str, gpu_pool: str) -> float:
        """HP GPUs of ``gpu_pool`` guaranteed to ``tenant``."""
        return self.of(tenant).hp_gpus.get(gpu_pool, 0.0)

    def limit(self, spec: JobSpec, queued: int) -> Refusal | None:
        """Whether ``spec`` is over one of its tenant's caps now (``queued``: the tenant's
        jobs queued at present), or None. Unlike a shape refusal, a cap on queued jobs may
        pass later: :attr:`Refusal.retry`."""
        share = self.of(spec.tenant)
        cap = share.max_timeout_s
        if cap is not None and spec.timeout_s is not None and spec.timeout_s > cap:
            return Refusal(
                "timeout_s",
                f"{spec.timeout_s:g} s is over tenant {spec.tenant}'s cap of {cap:g} s",
            )
        if share.max_queued is not None and queued >= share.max_queued:
            return Refusal(
                "tenant",
                f"tenant {spec.tenant} has {queued} jobs queued, its cap (max_queued)",
                retry=True,
            )
        return None

    def may_reclaim(self, taker: str, mine: int, owner: str, theirs: int) -> bool:
        """Whether a queued job of ``taker`` (holding ``mine`` pods of a full profile) may
        stop an idle pod of ``owner`` (holding ``theirs``) for room: its own always, another
        tenant's while that one holds more by weight. The fair order has already said the
        job's turn came, so tenants with work queued take turns on the profile's pods, where
        the equal split without shares would leave a tenant of one pod to keep it."""
        if taker == owner:
            return True
        return mine / self.of(taker).weight < theirs / self.of(owner).weight

    def borrows_wanted(
        self,
        job: Job,
        gpu_pool: str,
        running: Mapping[tuple[str, str], float],
        queued: Mapping[str, float],
        free: float,
    ) -> bool:
        """Whether HP ``job`` would borrow room another tenant's guarantee wants now: it
        takes its tenant past its guaranteed GPUs of ``gpu_pool``, and the GPU pool's room not
        held by HP (``free``) less its GPUs would not cover what the other tenants with HP
        work queued there (``queued``: GPUs per tenant) are still owed (``running``: HP GPUs
        per (tenant, GPU pool))."""
        tenant = job.spec.tenant

        def owed(who: str) -> float:
            return self.guaranteed(who, gpu_pool) - running.get((who, gpu_pool), 0.0)

        if job.gpus <= owed(tenant) + EPS:
            return False  # within its own guarantee
        wanted = sum(min(g, max(0.0, owed(o))) for o, g in queued.items() if o != tenant)
        return free - job.gpus < wanted - EPS


class FairQueue:
    """Start-time fair queueing tags for one queue: a job's tag is where it stands in the
    queue's order; the virtual time is the tag of the last job served.

    A job's tag is its tenant's last finish tag, or the virtual time if that is later (a
    tenant gains no credit for having queued nothing); its finish tag adds its cost (its
    dominant share of the cluster) over its tenant's weight. So tenants' queued jobs
    interleave in proportion to their weights, and a tenant's own stay in submit order.
    """

    def __init__(self, shares: TenantShares) -> None:
        self.shares = shares
        self.virtual = 0.0
        self._finish: dict[str, float] = {}

    def tag(self, job: Job, cost: float) -> float:
        """Give ``job`` its tag (kept on the job: put back, it keeps its place)."""
        tenant = job.spec.tenant
        start = max(self.virtual, self._finish.get(tenant, 0.0))
        self._finish[tenant] = start + cost / self.shares.of(tenant).weight
        job.fair_tag = start
        return start

    def served(self, job: Job) -> None:
        """``job`` left the queue to run: the virtual time moves up to its tag."""
        if job.fair_tag is not None and job.fair_tag > self.virtual:
            self.virtual = job.fair_tag


def dominant_share(job: Job, profile: Profile, gpu_pool: str, cluster: Cluster) -> float:
    """The largest share of one of the cluster's resources that ``job`` holds while it runs:
    its GPUs of its GPU pool's, or for a CPU-only profile its CPUs or memory of the CPU
    slots' (DRF's dominant share; 1 where the cluster has none of it)."""
    if profile.cpu_only:
        cpu = sum(c * n for (c, _), n in cluster.cpu_shapes.items())
        memory = sum(m * n for (_, m), n in cluster.cpu_shapes.items())
        if cpu <= 0 or memory <= 0:
            return 1.0
        return job.spec.workers * max(profile.cpu / cpu, profile.memory_gb / memory)
    capacity = cluster.capacity.get(gpu_pool, 0)
    return job.gpus / capacity if capacity else 1.0


def jain(values: list[float]) -> float:
    """Jain's fairness index of ``values`` (1: all equal, 1/n: one holds everything; 1 for
    none or all zero)."""
    total = sum(values)
    squares = sum(v * v for v in values)
    if not values or squares == 0:
        return 1.0
    return total * total / (len(values) * squares)
