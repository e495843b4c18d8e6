"""Per-GPU-pool node indexes, queue order and node scores (where a worker goes).

Nodes of a GPU pool are indexed by their count of fully free GPUs, so "nodes with room for r
whole GPUs, tightest first" never scans the GPU pool, and the nodes holding spot work by the
room evicting it would make, so a reclaim's "fewest cards carrying no HP first" does not
scan every spot node either. Scores are policies behind
:class:`NodeScorer`: GFS's (tight packing, same-class affinity, eviction score), a plain
best fit for YARN-CS and FGD's fragmentation-growth rule.
"""

from __future__ import annotations

import bisect
import functools
import math
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from stoker.core.model import JobClass
from stoker.units import DAY_S, HOUR_S

# how many nodes of one free-count bucket a score looks at before taking the best seen: the
# bucket already fixes the packing term, so the rest only breaks ties
SCAN_CAP = 64


def eviction_score(n_1h: int, n_24h: int) -> float:
    """GFS's node calm score E = 10000 * max(0, 1 - 0.01 * 2^(0.8 n_1h + 0.2 n_24h))."""
    return 10000.0 * max(0.0, 1.0 - 0.01 * 2.0 ** (0.8 * n_1h + 0.2 * n_24h))


_CALM = eviction_score(0, 0)  # a node without a spot eviction in the last day
# a card's HP share is counted in twentieths, rounded down (a card counted at b/20 has at
# most 1 - b/20 for another HP share)
HP_SHARE_STEPS = 20
# slack on a share's rounding (shares are sums of floats): a bound must never come out short
_SLACK = 1e-6


@dataclass(slots=True)
class NodeInfo:
    """What the scheduler keeps per node beside the Cluster's shares."""

    name: str
    gpu_pool: str
    ordinal: int
    total: int
    full_free: int = 0
    # cards a planned HP job may at most get here: the cards carrying no HP share (every
    # other holder is free room, idle or spot, or at least not known to be HP)
    no_hp: int = 0
    used: dict[str, float] = field(default_factory=lambda: {"hp": 0.0, "spot": 0.0})
    # cards held by whole-GPU spot jobs (the victims a whole-GPU worker may take here)
    spot_cards: int = 0
    # cards holding fractional spot work and nothing else: a whole-GPU worker evicts every
    # spot job on one to take it (the authors' "cards carrying no HP")
    frac_cards: frozenset[str] = frozenset()
    # the node's reclaim room while it holds spot work: full_free + victim_cards (-1: none)
    room: int = -1
    # full_free + victim_cards on every node: the most a whole-GPU HP worker may take here
    # while no idle pod is in the GPU pool (:meth:`GpuPoolIndex.reclaim_slots`)
    reach: int = 0
    evictions: deque[float] = field(default_factory=deque)  # spot eviction times, last 24 h

    def recent_evictions(self, now: float) -> tuple[int, int]:
        """(evictions in the last hour, in the last day)."""
        ev = self.evictions
        while ev and ev[0] < now - DAY_S:
            ev.popleft()
        n_24h = len(ev)
        n_1h = n_24h - bisect.bisect_left(ev, now - HOUR_S)
        return n_1h, n_24h

    @property
    def victim_cards(self) -> int:
        """The cards a whole-GPU HP worker may take here by evicting spot work."""
        return self.spot_cards + len(self.frac_cards)

    def score_e(self, now: float) -> float:
        if not self.evictions:
            return _CALM  # most nodes, most of the time: no need to count
        return eviction_score(*self.recent_evictions(now))


def no_hp_cards(info: NodeInfo) -> int:
    """The node's cards carrying no HP share, at most: its HP shares cover at least
    ceil(their sum) cards (less a margin, so a sum's rounding never makes it fewer)."""
    return info.total - math.ceil(info.used["hp"] - _SLACK)


class GpuPoolIndex:
    """Nodes of one GPU pool bucketed by fully free GPU count; spot-holding nodes apart, and
    bucketed by their reclaim room (free cards and cards held by spot work alone), each
    bucket in node order; the nodes counted by cards carrying no HP and the cards by their
    HP share (what bounds an HP job's room: :meth:`hp_slots`), and by their free and
    spot cards (:meth:`reclaim_slots`)."""

    def __init__(self, gpu_pool: str, max_gpus: int) -> None:
        self.gpu_pool = gpu_pool
        self.max_gpus = max_gpus
        self.by_free: list[dict[str, None]] = [{} for _ in range(max_gpus + 1)]
        self.by_no_hp: list[int] = [0] * (max_gpus + 1)
        self.hp_share: dict[str, float] = {}  # card -> HP share placed there (none: 0)
        self.by_hp_share: list[int] = [0] * (HP_SHARE_STEPS + 1)  # cards per twentieths
        self.spot_nodes: dict[str, None] = {}
        # per reclaim room: the spot-holding nodes, as sorted (ordinal, name). Up to twice
        # a node's cards: a spot job's card whose pod is gone while the job still holds it
        # (a worker's failed bind: the others are killed and exit later) counts as free and
        # as the job's meanwhile, as a reclaim's own count of the node has it
        self.by_room: list[list[tuple[int, str]]] = [[] for _ in range(2 * max_gpus + 1)]
        self.by_reach: list[int] = [0] * (2 * max_gpus + 1)  # nodes per NodeInfo.reach
        self.nodes: dict[str, NodeInfo] = {}

    def grow(self, max_gpus: int) -> None:
        """Make room for nodes of up to ``max_gpus`` GPUs."""
        extra = max_gpus - self.max_gpus
        if extra > 0:
            self.by_free += [{} for _ in range(extra)]
            self.by_no_hp += [0] * extra
            self.by_room += [[] for _ in range(2 * extra)]
            self.by_reach += [0] * (2 * extra)
            self.max_gpus = max_gpus

    def add(self, info: NodeInfo) -> None:
        self.grow(info.total)
        self.nodes[info.name] = info
        self.by_free[info.full_free][info.name] = None
        info.no_hp = no_hp_cards(info)
        self.by_no_hp[info.no_hp] += 1
        info.reach = info.full_free + info.victim_cards
        self.by_reach[info.reach] += 1
        self.by_hp_share[0] += info.total  # HP comes to a node only once it is here

    def remove(self, name: str) -> NodeInfo:
        info = self.nodes.pop(name)
        del self.by_free[info.full_free][name]
        self.by_no_hp[info.no_hp] -= 1
        self.by_reach[info.reach] -= 1
        self.by_hp_share[0] -= info.total  # nothing of HP is placed there any more
        self.spot_nodes.pop(name, None)
        self._rebucket(info, -1)
        return info

    def resize(self, info: NodeInfo, total: int) -> None:
        """The node has ``total`` cards now (the ones it lost carried no HP share); its
        free-count and no-HP buckets follow at the next :meth:`move`."""
        self.grow(total)
        self.by_hp_share[0] += total - info.total
        info.total = total

    def move(self, info: NodeInfo, full_free: int) -> None:
        """The node's free cards or its books changed: re-bucket it."""
        if full_free != info.full_free:
            del self.by_free[info.full_free][info.name]
            self.by_free[full_free][info.name] = None
            info.full_free = full_free
        no_hp = no_hp_cards(info)
        if no_hp != info.no_hp:
            self.by_no_hp[info.no_hp] -= 1
            self.by_no_hp[no_hp] += 1
            info.no_hp = no_hp
        reach = full_free + info.victim_cards
        if reach != info.reach:
            self.by_reach[info.reach] -= 1
            self.by_reach[reach] += 1
            info.reach = reach
        if info.used["spot"] > 1e-9:
            self.spot_nodes[info.name] = None
            self._rebucket(info, full_free + info.victim_cards)
        else:
            self.spot_nodes.pop(info.name, None)
            self._rebucket(info, -1)

    def _rebucket(self, info: NodeInfo, room: int) -> None:
        """Keep a spot-holding node in its reclaim-room bucket (-1: in none)."""
        if room == info.room:
            return
        key = (info.ordinal, info.name)
        if info.room >= 0:
            bucket = self.by_room[info.room]
            del bucket[bisect.bisect_left(bucket, key)]
        if room >= 0:
            bisect.insort(self.by_room[room], key)
        info.room = room

    def add_hp(self, card: str, share: float) -> None:
        """An HP share was placed on ``card`` (negative: released)."""
        old = self.hp_share.get(card, 0.0)
        new = old + share
        if new < 1e-9:
            self.hp_share.pop(card, None)
            new = 0.0
        else:
            self.hp_share[card] = new
        self.by_hp_share[_steps(old)] -= 1
        self.by_hp_share[_steps(new)] += 1

    def hp_slots(self, need: float) -> int:
        """How many HP workers of ``need`` GPUs the GPU pool could hold at most if all room
        not taken by HP were theirs (free, idle and spot alike): for whole GPUs the nodes'
        cards carrying no HP, for a share the cards' room beside their HP share. A gang of
        more workers cannot be placed, however its search goes."""
        if need >= 1.0:
            whole = int(need)
            return sum(n * (cards // whole) for cards, n in enumerate(self.by_no_hp) if n)
        return sum(
            n * math.floor((1.0 - b / HP_SHARE_STEPS + _SLACK) / need)
            for b, n in enumerate(self.by_hp_share)
            if n
        )

    def reclaim_slots(self, need: int) -> int:
        """How many whole-GPU workers of ``need`` GPUs the GPU pool could hold at most from its
        free cards and the cards its spot work alone holds (a reclaim's room; idle pods
        aside): a node holds at most (free + spot cards) // need of them. Unlike
        :meth:`hp_slots` it does not count cards held by the pods of an ended job until
        they are gone."""
        reach = self.by_reach
        return sum(reach[r] * (r // need) for r in range(need, len(reach)))


def _steps(share: float) -> int:
    """A card's HP share in whole twentieths, rounded down (above it by the slack at most)."""
    return min(HP_SHARE_STEPS, int(share * HP_SHARE_STEPS + _SLACK))


class GangPlan:
    """The nodes a gang's earlier workers are planned on, over a GPU pool's index: the next
    worker's candidates per free count, kept up to date as workers are planned.

    ``buckets`` yields, per free count, up to SCAN_CAP unplanned nodes of that bucket (in
    the bucket's order) and then the planned nodes left with that many GPUs (in the order
    they were first planned). Kept incrementally (``take``), a gang of many workers plans
    in time linear in its workers: rebuilt for every worker it was quadratic. The GPU pool's
    index must not change while a plan is used (planning changes nothing). Nodes in
    ``exclude`` (reserved for another job) are never candidates.
    """

    __slots__ = ("_heads", "_iters", "_rest", "_seq", "exclude", "index", "taken")

    def __init__(
        self,
        index: GpuPoolIndex,
        taken: dict[str, int] | None = None,
        exclude: frozenset[str] = frozenset(),
    ) -> None:
        self.index = index
        self.exclude = exclude
        self.taken: dict[str, int] = {}  # node -> GPUs planned there, in first-plan order
        # per free count: the first unplanned nodes of the bucket seen so far, and where
        # the walk over the bucket stands
        self._heads: dict[int, list[str]] = {}
        self._iters: dict[int, Iterator[str]] = {}
        # per GPUs left: the planned nodes, as (first-plan order, name)
        self._rest: dict[int, list[tuple[int, str]]] = {}
        self._seq: dict[str, int] = {}
        for name, count in (taken or {}).items():
            self.take(name, count)

    def take(self, name: str, count: int) -> None:
        """Plan ``count`` more GPUs on node ``name``."""
        nodes = self.index.nodes
        before = self.taken.get(name)
        if before is None:
            self._seq[name] = len(self._seq)
            head = self._heads.get(nodes[name].full_free)
            if head is not None and name in head:
                head.remove(name)
            before = 0
        else:
            rest = self._rest[nodes[name].full_free - before]
            del rest[bisect.bisect_left(rest, (self._seq[name], name))]
        self.taken[name] = before + count
        left = nodes[name].full_free - before - count
        bisect.insort(self._rest.setdefault(left, []), (self._seq[name], name))

    def _head(self, free: int) -> list[str]:
        head = self._heads.get(free)
        if head is None:
            head = self._heads[free] = []
            self._iters[free] = iter(self.index.by_free[free])
        if len(head) < SCAN_CAP:
            taken = self.taken
            exclude = self.exclude
            for name in self._iters[free]:
                if name not in taken and name not in exclude:
                    head.append(name)
                    if len(head) >= SCAN_CAP:
                        break
        return head

    def buckets(self, order: range) -> Iterator[tuple[int, list[str]]]:
        """(free count, candidate nodes) per nonempty bucket in ``order``."""
        for f in order:
            head = self._head(f)
            planned = self._rest.get(f)
            if planned:
                yield f, head + [name for _, name in planned]
            elif head:
                yield f, head


class NodeScorer(Protocol):
    """Picks the node for one whole-GPU worker of ``need`` GPUs (None: nowhere fits now).

    ``plan`` holds the GPU pool's index and the GPUs already planned for earlier workers of
    the same gang.
    """

    name: str

    def choose(self, plan: GangPlan, job_class: JobClass, need: int, now: float) -> str | None: ...


class GFSScorer:
    """Fewest fully free GPUs left (tight packing), then most GPUs of the same class on the
    node, then the eviction score: spot prefers calm nodes, HP recently disturbed ones."""

    name = "gfs"

    def choose(self, plan: GangPlan, job_class: JobClass, need: int, now: float) -> str | None:
        spot = job_class == "spot"
        nodes = plan.index.nodes
        for _, bucket in plan.buckets(range(need, plan.index.max_gpus + 1)):
            best = None
            best_key = None
            for name in bucket:
                info = nodes[name]
                # a calm node's score is a constant (Chronus never evicts: every node is)
                e = info.score_e(now) if info.evictions else _CALM
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


@functools.cache
def fgd_frag_delta(free: int, need: int) -> float:
    """How much FGD's fragmentation grows when ``need`` of ``free`` GPUs are taken."""
    return fragmentation(free - need) - fragmentation(free)


class FGDScorer:
    """FGD (``gpu_select``): the node whose fragmentation grows least, the first such node
    in node order."""

    name = "fgd"

    def choose(self, plan: GangPlan, job_class: JobClass, need: int, now: float) -> str | None:
        nodes = plan.index.nodes
        found = [
            (fgd_frag_delta(f, need), bucket)
            for f, bucket in plan.buckets(range(need, plan.index.max_gpus + 1))
        ]
        if not found:
            return None
        # the growth is the bucket's: only the buckets of the least growth are searched
        least = min(delta for delta, _ in found)
        return min(
            (n for delta, bucket in found if delta == least for n in bucket),
            key=lambda n: nodes[n].ordinal,
        )


class BestFitScorer:
    """YARN-CS's placement (``policy/placer/consolidate.py``): the first node with the
    fewest free GPUs that fit."""

    name = "best-fit"

    def choose(self, plan: GangPlan, job_class: JobClass, need: int, now: float) -> str | None:
        nodes = plan.index.nodes
        for _, bucket in plan.buckets(range(need, plan.index.max_gpus + 1)):
            return min(bucket, key=lambda n: nodes[n].ordinal)
        return None
