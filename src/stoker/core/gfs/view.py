"""What the hp/spot scheduler's read-only parts read of its books (they write none of it)."""

from __future__ import annotations

from typing import Protocol

from stoker.core.gfs.jobs import GuaranteeLedger
from stoker.core.gfs.placement import GpuPoolIndex, NodeInfo
from stoker.core.gfs.queues import ClassQueue
from stoker.core.gfs.reservations import Reservations
from stoker.core.model import Cluster, Job, Pod


class HpSpotView(Protocol):
    """The hp/spot books: jobs and pods, per node and per GPU pool indexes, placements."""

    cluster: Cluster
    jobs: dict[str, Job]
    pods: dict[str, Pod]
    nodes: dict[str, NodeInfo]
    gpu_pools: dict[str, GpuPoolIndex]
    queues: dict[str, dict[str, ClassQueue]]
    used: dict[str, dict[str, float]]
    node_jobs: dict[str, dict[str, list[str]]]
    running_spot: dict[str, dict[str, None]]
    placement: dict[str, list[tuple[str, str, float]]]
    ledgers: dict[str, GuaranteeLedger]
    capacity: dict[str, int]
    reservations: Reservations

    def gpu_pool_of(self, job: Job) -> str:
        """The GPU pool ``job``'s workers take."""
        ...

    def frac_cards(self, info: NodeInfo) -> frozenset[str]:
        """A node's cards that fractional spot work alone holds, from the books."""
        ...
