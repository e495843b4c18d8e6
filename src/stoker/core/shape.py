"""Whether a job's shape can ever start on a cluster: the core's shape refusal.

A job whose workers cannot all be placed at once on the cluster, even empty, would wait
in its queue for ever, and at a queue's head hold back the jobs behind it. The core
refuses such a job at submit (:meth:`stoker.core.Core.refusal`); the broker answers it
with a 422 naming the field, the simulator leaves it out of a trace. These functions are
that one decision, over counts of nodes by size (never a walk over the nodes): a
worker's GPUs are all on one node and its cards hold whole shares, so a node of ``s``
cards, each taking ``per_card`` workers' shares, holds ``s * per_card // cards``
workers of ``cards`` cards each.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from stoker.core.model import EPS, Refusal, per_worker


def worker_cards(gpus: float) -> tuple[int, float]:
    """(cards, share of each) of an hp or spot worker asking ``gpus``: below 1 a share of
    one card, else whole cards (a request of 1.5 takes 2)."""
    demand = per_worker(gpus)
    return (1, demand) if demand < 1.0 - EPS else (int(demand), 1.0)


def gpu_refusal(
    gpu_pool: str,
    sizes: Mapping[int, int],
    cards: int,
    share: float,
    workers: int,
    *,
    shape_field: str = "gpus",
    gpu_pool_field: str = "gpu_model",
) -> Refusal | None:
    """Whether ``workers`` workers, each of ``cards`` cards on one node at ``share`` of
    each card, can never all be placed on GPU pool ``gpu_pool`` whose nodes are counted by
    size in ``sizes`` (GPUs per node -> nodes). None: they fit on the empty GPU pool.

    A whole-GPU worker needs a node slot of its own (``share`` 1: a node of ``s`` cards
    holds ``s // cards`` of them); a fractional one a card with room (a card holds
    ``1 // share`` of them). ``shape_field`` names the field a worker's shape comes from
    (``gpus``, or ``profile`` for a profile's shape), ``gpu_pool_field`` the GPU pool's."""
    capacity = sum(s * n for s, n in sizes.items())
    if capacity == 0:
        return Refusal(gpu_pool_field, f"GPU pool {gpu_pool} has no GPUs")
    largest = max(s for s, n in sizes.items() if n)
    if cards > largest:
        return Refusal(
            shape_field,
            f"a worker takes {cards} GPUs on one node; the largest node of GPU pool {gpu_pool}"
            f" has {largest}",
        )
    total = workers * cards * share
    if total > capacity + EPS:
        return Refusal(
            "workers",
            f"{workers} workers x {cards * share:g} GPUs = {total:g} GPUs; GPU pool {gpu_pool}"
            f" has {capacity}",
        )
    per_card = math.floor((1.0 + EPS) / share)
    slots = sum(n * (s * per_card // cards) for s, n in sizes.items() if s >= cards)
    if slots < workers:
        if share >= 1.0 - EPS:
            need = f"a node slot of {cards} GPUs each"
        else:
            need = f"room for {share:g} of a card each"
        return Refusal(
            "workers",
            f"{workers} workers need {need}; GPU pool {gpu_pool}'s nodes hold {slots} at once",
        )
    return None


def cpu_refusal(
    shapes: Mapping[tuple[float, float], int],
    cpu: float,
    memory_gb: float,
    workers: int,
    *,
    shape_field: str = "profile",
) -> Refusal | None:
    """Whether ``workers`` CPU-only pods of ``cpu`` CPUs and ``memory_gb`` each, each on
    one node's CPU slots, can never all run at once on nodes counted by the shape of their
    CPU slots in ``shapes`` ((CPUs, GB) -> nodes). None: they fit on the empty nodes."""

    def fits(node_cpu: float, node_mem: float) -> int:
        return int(min((node_cpu + EPS) / cpu, (node_mem + EPS) / memory_gb))

    slots = sum(n * fits(c, m) for (c, m), n in shapes.items())
    if slots >= workers:
        return None
    if not any(fits(c, m) for c, m in shapes):
        return Refusal(
            shape_field,
            f"a CPU-only pod takes {cpu:g} CPUs and {memory_gb:g} GB; no node's CPU slots"
            " have both",
        )
    return Refusal("workers", f"{workers} CPU-only pods; the nodes' CPU slots hold {slots} at once")
