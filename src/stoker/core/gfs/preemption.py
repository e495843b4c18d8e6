"""Which spot jobs an HP worker evicts, and on which node (only HP preempts, only spot goes).

The scheduler hands a :class:`VictimChooser` the candidate targets: nodes whose cards
carrying no HP work (free, idle, or held by spot work alone, whole-GPU or fractional) cover
the request (for a fractional request: one card already carrying HP with room, or if there
is none, a node as for one whole GPU). The chooser returns the target and the
victims; every victim job is then evicted whole. The choosers follow the authors' simulator
(Xu-Sheng-lin/GFS-asplos-26): GFS's two-pointer walk (``policy/gfs.py``), YARN-CS's first
cards (``fifo_spot.py``), Lyra's costliest cards (``lyra.py``) and FGD's least
fragmenting node (``fgd.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from stoker.core.gfs.placement import fgd_frag_delta
from stoker.core.model import EPS, Job

# the paper's weight of lost work against the eviction-rate increase
LOST_WORK_WEIGHT = 5.0


# a card a reclaim may use and the spot jobs holding it (none: free, or idle pods)
Card = tuple[str, tuple[str, ...]]


@dataclass(slots=True)
class Candidate:
    """A target for one HP worker: a node (whole GPUs) or one card (``gpu``, fractional).

    ``holds`` (a node): each victim's cards there that carry no HP. Fractional spot jobs
    may share a card, and a card is room only once every job on it goes, so a node's room
    is a set of cards, not a sum (the authors' ``candidate_gpus - job_gpus``). ``cards``:
    the node's whole cards carrying no HP work, in card order, each with the spot jobs
    holding it (none: free or held by idle pods), for the choosers that take cards in
    order or by cost; made by ``card_order`` when first read (most candidates are passed
    over without it).
    """

    node: str
    ordinal: int
    free: float  # room there now (whole free GPUs, or the card's free share)
    victims: list[tuple[Job, float]]  # spot jobs there and what each holds on the target
    gpu: str | None = None
    # what the idle warm and standby pods it would stop cost (tier, value): the reclaim
    # chain takes idle pods first, the cheapest of them first
    cost: tuple[float, float] = (0.0, 0.0)
    card_order: Callable[[], tuple[Card, ...]] | None = None
    holds: dict[str, frozenset[str]] | None = None
    # room there once every spot job on it went: the cards (or share) carrying no HP
    no_hp: float = field(init=False)
    _cards: tuple[Card, ...] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if self.holds is None:
            self.no_hp = self.free + sum(u for _, u in self.victims)
        else:
            self.no_hp = self.free + len(frozenset().union(*self.holds.values()))

    @property
    def cards(self) -> tuple[Card, ...]:
        if self._cards is None:
            self._cards = self.card_order() if self.card_order is not None else ()
        return self._cards


@dataclass(frozen=True, slots=True)
class PreemptContext:
    """What a node cost needs: the time, the GPU pool's eviction rate after k more failures,
    the GPU pool's GPUs and the window the lost-work term is measured over."""

    now: float
    rate_after: Callable[[int], float]
    gpu_pool_gpus: int
    window_s: float


def best_fit(cands: list[Candidate]) -> list[Candidate]:
    """The candidates with the fewest cards (least share) carrying no HP: the authors'
    filter before any cost."""
    if not cands:
        return []
    least = min(c.no_hp for c in cands)
    return [c for c in cands if c.no_hp <= least + EPS]


def two_pointer(cand: Candidate, need: float, key: Callable[[Job], float]) -> list[Job]:
    """GFS's victim walk (``preempt_cost``): the spot jobs by cost, most expensive first;
    from the expensive end spare each while the room without it still covers ``need``, evict
    the first that cannot be spared, then do the same from the cheap end, and alternate.
    On a node the room is the free cards and the victim cards no spared job holds."""
    order = sorted(cand.victims, key=lambda v: (-key(v[0]), v[0].id))
    holds = cand.holds
    total = cand.no_hp
    left: set[str] = set().union(*holds.values()) if holds is not None else set()

    def without(i: int) -> float:
        if holds is None:
            return total - order[i][1]
        return cand.free + len(left - holds[order[i][0].id])

    def spare(i: int) -> None:
        nonlocal total
        if holds is None:
            total -= order[i][1]
        else:
            left.difference_update(holds[order[i][0].id])

    chosen: list[Job] = []
    lo, hi = 0, len(order) - 1
    while lo <= hi:
        while lo <= hi and without(lo) >= need - EPS:
            spare(lo)
            lo += 1
        if lo > hi:
            break
        chosen.append(order[lo][0])
        lo += 1
        while lo <= hi and without(hi) >= need - EPS:
            spare(hi)
            hi -= 1
        if lo > hi:
            break
        chosen.append(order[hi][0])
        hi -= 1
    return chosen


def first_cards(cand: Candidate, need: float) -> list[Job]:
    """Every spot job on the first ``need`` no-HP cards in card order (``fifo_spot.py`` and
    ``fgd.py``); on a card (fractional), its spot jobs in order until the room covers it."""
    if cand.gpu is not None:
        return _in_order(cand, need)
    holders = [h for _, held in cand.cards[: int(need)] for h in held]
    by_id = {job.id: job for job, _ in cand.victims}
    return [by_id[h] for h in dict.fromkeys(holders)]


def _in_order(cand: Candidate, need: float) -> list[Job]:
    room = cand.free
    chosen: list[Job] = []
    for job, units in cand.victims:
        if room >= need - EPS:
            break
        chosen.append(job)
        room += units
    return chosen


class VictimChooser(Protocol):
    """Picks (target, victims) among the candidates, or None to let the HP job wait.

    ``reads``: which whole-GPU candidate nodes its choice can depend on, so the scheduler
    builds only those: ``fewest``, every candidate with the fewest cards carrying no HP
    (its choice is among them: :func:`best_fit` first); ``first``, per such count the
    first candidate in node order (its choice is the first node of some count); ``all``.
    """

    name: str
    reads: str

    def choose(
        self, cands: list[Candidate], need: float, ctx: PreemptContext
    ) -> tuple[Candidate, list[Job]] | None: ...


class GFSVictims:
    """GFS (``select_with_preemption``): among the best-fit candidates, victims by the
    two-pointer walk; node cost = the GPU pool's eviction rate after the preemption + 5 * lost
    GPU-s / (the GPU pool's GPUs * window); the cheapest node, the first on ties. A victim loses its
    GPUs times the time since its run started (the authors' ``Job.get_preempt_cost``).
    """

    name = "gfs"
    reads = "fewest"

    def lost(self, job: Job, ctx: PreemptContext) -> float:
        """GPU-seconds evicting ``job`` now counts as lost."""
        return job.gpus * max(0.0, ctx.now - job.run_start)

    def choose(
        self, cands: list[Candidate], need: float, ctx: PreemptContext
    ) -> tuple[Candidate, list[Job]] | None:
        best = None
        best_key = None
        for cand in best_fit(cands):
            victims = two_pointer(cand, need, lambda g: self.lost(g, ctx))
            lost = sum(self.lost(g, ctx) for g in victims)
            cost = ctx.rate_after(len(victims)) + LOST_WORK_WEIGHT * lost / (
                ctx.gpu_pool_gpus * ctx.window_s
            )
            key = (cost, cand.ordinal, cand.gpu or "")
            if best_key is None or key < best_key:
                best, best_key = (cand, victims), key
        return best


class LyraVictims:
    """Lyra (``lyra.py``): among the best-fit nodes, each no-HP card costs the sum over its
    spot jobs of 1/(workers * request) (1/workers for a fractional job); the ``need``
    costliest cards are taken with every job on them, on the node of least total (the first
    on ties). On a card (fractional): its spot jobs in order, 1/workers each."""

    name = "lyra"
    reads = "fewest"

    @staticmethod
    def _cost(job: Job) -> float:
        w = job.workers
        return 1.0 / w if job.fractional else 1.0 / (w * job.per_worker)

    def choose(
        self, cands: list[Candidate], need: float, ctx: PreemptContext
    ) -> tuple[Candidate, list[Job]] | None:
        best = None
        best_key = None
        for cand in best_fit(cands):
            if cand.gpu is not None:
                victims = _in_order(cand, need)
                total = sum(self._cost(g) for g in victims)
            else:
                by_id = {job.id: job for job, _ in cand.victims}
                costs = sorted(
                    (
                        (sum(self._cost(by_id[h]) for h in held), i, held)
                        for i, (_, held) in enumerate(cand.cards)
                    ),
                    key=lambda c: (-c[0], c[1]),
                )[: int(need)]
                total = sum(c for c, _, _ in costs)
                victims = [by_id[h] for h in dict.fromkeys(h for *_, held in costs for h in held)]
            key = (total, cand.ordinal, cand.gpu or "")
            if best_key is None or key < best_key:
                best, best_key = (cand, victims), key
        return best


class FifoVictims:
    """YARN-CS (``fifo_spot.py``): the first of the best-fit nodes (fewest no-HP cards), every
    spot job on its first ``need`` no-HP cards in card order; no cost."""

    name = "fifo-spot"
    reads = "first"

    def choose(
        self, cands: list[Candidate], need: float, ctx: PreemptContext
    ) -> tuple[Candidate, list[Job]] | None:
        fit = best_fit(cands)
        if not fit:
            return None
        cand = min(fit, key=lambda c: (c.ordinal, c.gpu or ""))
        return cand, first_cards(cand, need)


class FGDVictims:
    """FGD (``fgd.py``): the node whose no-HP cards' fragmentation grows least when the
    request takes ``need`` of them (the first such node), every spot job on its first
    ``need`` no-HP cards; on a card (fractional), the fullest card's jobs in order."""

    name = "fgd"
    reads = "first"

    def choose(
        self, cands: list[Candidate], need: float, ctx: PreemptContext
    ) -> tuple[Candidate, list[Job]] | None:
        if not cands:
            return None
        if any(c.gpu is not None for c in cands):
            cand = min(best_fit(cands), key=lambda c: (c.ordinal, c.gpu or ""))
        else:
            cand = min(cands, key=lambda c: (fgd_frag_delta(int(c.no_hp), int(need)), c.ordinal))
        return cand, first_cards(cand, need)
