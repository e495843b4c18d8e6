"""Per-pool node indexes, queue order and node scores (where a worker goes).

Nodes of a pool are indexed by their count of fully free GPUs, so "nodes with room for r
whole GPUs, tightest first" never scans the pool. Scores are policies behind
:class:`NodeScorer`: GFS's (tight packing, same-class affinity, eviction score), a plain
best fit for YARN-CS and FGD's fragmentation-growth rule.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Protocol

from stoker.core.model import JobClass

DAY_S = 86400.0
HOUR_S = 3600.0
# how many nodes of one free-count bucket a score looks at before taking the best seen: the
# bucket already fixes the packing term, so the rest only breaks ties
SCAN_CAP = 64


def eviction_score(n_1h: int, n_24h: int) -> float:
    """GFS's node calm score E = 10000 * max(0, 1 - 0.01 * 2^(0.8 n_1h + 0.2 n_24h))."""
    return 10000.0 * max(0.0, 1.0 - 0.01 * 2.0 ** (0.8 * n_1h + 0.2 * n_24h))


_CALM = eviction_score(0, 0)  # a node without a spot eviction in the last day


@dataclass(slots=True)
class NodeInfo:
    """What the scheduler keeps per node beside the Cluster's shares."""

    name: str
    pool: str
    ordinal: int
    total: int
    full_free: int = 0
    used: dict[str, float] = field(default_factory=lambda: {"hp": 0.0, "spot": 0.0})
    evictions: deque[float] = field(default_factory=deque)  # spot eviction times, last 24 h

    def recent_evictions(self, now: float) -> tuple[int, int]:
        """(evictions in the last hour, in the last day)."""
        ev = self.evictions
        while ev and ev[0] < now - DAY_S:
            ev.popleft()
        n_24h = len(ev)
        n_1h = n_24h - bisect.bisect_left(ev, now - HOUR_S)
        return n_1h, n_24h

    def score_e(self, now: float) -> float:
        if not self.evictions:
            return _CALM  # most nodes, most of the time: no need to count
        return eviction_score(*self.recent_evictions(now))


class PoolIndex:
    """Nodes of one pool bucketed by fully free GPU count; spot-holding nodes apart."""

    def __init__(self, pool: str, max_gpus: int) -> None:
        self.pool = pool
        self.max_gpus = max_gpus
        self.by_free: list[dict[str, None]] = [{} for _ in range(max_gpus + 1)]
        self.spot_nodes: dict[str, None] = {}
        self.nodes: dict[str, NodeInfo] = {}

    def add(self, info: NodeInfo) -> None:
        self.nodes[info.name] = info
        self.by_free[info.full_free][info.name] = None

    def move(self, info: NodeInfo, full_free: int) -> None:
        if full_free != info.full_free:
            del self.by_free[info.full_free][info.name]
            self.by_free[full_free][info.name] = None
            info.full_free = full_free
        if info.used["spot"] > 1e-9:
            self.spot_nodes[info.name] = None
        else:
            self.spot_nodes.pop(info.name, None)


class NodeScorer(Protocol):
    """Picks the node for one whole-GPU worker of ``need`` GPUs (None: nowhere fits now).

    ``taken`` holds GPUs already planned on a node for earlier workers of the same gang.
    """

    name: str

    def choose(
        self, index: PoolIndex, job_class: JobClass, need: int, taken: dict[str, int], now: float
    ) -> str | None: ...


def free_buckets(
    index: PoolIndex, need: int, taken: dict[str, int], order: range
) -> Iterator[tuple[int, list[str]]]:
    """(free count, up to SCAN_CAP nodes) per nonempty bucket in ``order``; nodes already in
    the plan count with their GPUs left after it."""
    by_free = index.by_free
    if not taken:  # the common case (a single worker, a gang's first): no plan to skip
        for f in order:
            names = by_free[f]
            if names:
                yield f, list(islice(names, SCAN_CAP))
        return
    # the planned nodes by what they have left, once per call (a many-worker gang asks once
    # per worker: a scan of the plan per bucket made its planning quadratic in workers)
    rest: dict[int, list[str]] = {}
    for name, t in taken.items():
        rest.setdefault(index.nodes[name].full_free - t, []).append(name)
    for f in order:
        bucket: list[str] = []
        for name in by_free[f]:
            if name not in taken:
                bucket.append(name)
                if len(bucket) >= SCAN_CAP:
                    break
        planned = rest.get(f)
        if planned:
            bucket.extend(planned)
        if bucket:
            yield f, bucket


class GFSScorer:
    """Fewest fully free GPUs left (tight packing), then most GPUs of the same class on the
    node, then the eviction score: spot prefers calm nodes, HP recently disturbed ones."""

    name = "gfs"

    def choose(
        self, index: PoolIndex, job_class: JobClass, need: int, taken: dict[str, int], now: float
    ) -> str | None:
        spot = job_class == "spot"
        nodes = index.nodes
        for _, bucket in free_buckets(index, need, taken, range(need, index.max_gpus + 1)):
            best = None
            best_key = None
            for name in bucket:
                info = nodes[name]
                e = info.score_e(now)
                key = (-info.used[job_class], -e if spot else e, info.ordinal)
                if best_key is None or key < best_key:
                    best, best_key = name, key
            return best
        return None


# FGD's typical pod sizes in GPUs and their shares (``fgd.py``'s ``typicalPods``)
FGD_SIZES: dict[int, float] = {1: 0.35, 2: 0.10, 4: 0.05, 8: 0.50}


def fragmentation(free: int, sizes: dict[int, float] = FGD_SIZES) -> float:
    """FGD's fragmentation of ``free`` GPUs (``fgd.py``, ``frag_func``): per typical pod
    size s of share p, p * (free - free // s)."""
    return sum(p * (free - free // s) for s, p in sizes.items())


def fgd_frag_delta(free: int, need: int) -> float:
    """How much FGD's fragmentation grows when ``need`` of ``free`` GPUs are taken."""
    return fragmentation(free - need) - fragmentation(free)


class FGDScorer:
    """FGD (``gpu_select``): the node whose fragmentation grows least, the first such node
    in node order."""

    name = "fgd"

    def choose(
        self, index: PoolIndex, job_class: JobClass, need: int, taken: dict[str, int], now: float
    ) -> str | None:
        best = None
        best_key = None
        for f, bucket in free_buckets(index, need, taken, range(need, index.max_gpus + 1)):
            node = min(bucket, key=lambda n: index.nodes[n].ordinal)
            key = (fgd_frag_delta(f, need), index.nodes[node].ordinal)
            if best_key is None or key < best_key:
                best, best_key = node, key
        return best


class BestFitScorer:
    """YARN-CS's placement (``policy/placer/consolidate.py``): the first node with the
    fewest free GPUs that fit."""

    name = "best-fit"

    def choose(
        self, index: PoolIndex, job_class: JobClass, need: int, taken: dict[str, int], now: float
    ) -> str | None:
        for _, bucket in free_buckets(index, need, taken, range(need, index.max_gpus + 1)):
            return min(bucket, key=lambda n: index.nodes[n].ordinal)
        return None
