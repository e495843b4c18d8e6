"""Which spot jobs an HP worker evicts, and on which node (only HP preempts, only spot goes).

The scheduler hands a :class:`VictimChooser` the candidate targets: nodes carrying no HP
work (for a fractional request: one card on such a node) where the free room plus the spot
work there covers the request. The chooser returns the target and the victims; every
victim job is then evicted whole.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from stoker.core.model import Job

# the paper's weight of lost work against the eviction-rate increase
LOST_WORK_WEIGHT = 5.0


@dataclass(slots=True)
class Candidate:
    """A target for one HP worker: a node (whole GPUs) or one card (``gpu``, fractional)."""

    node: str
    ordinal: int
    free: float  # room there now (whole free GPUs, or the card's free share)
    victims: list[tuple[Job, float]]  # spot jobs there and what each holds on the target
    gpu: str | None = None
    # what the idle warm and standby pods it would stop cost (tier, value): the reclaim
    # chain takes idle pods first, the cheapest of them first
    cost: tuple[float, float] = (0.0, 0.0)


@dataclass(frozen=True, slots=True)
class PreemptContext:
    """What a node cost needs: the time, the pool's eviction rate after k more failures,
    the pool's GPUs and the window both terms are measured over."""

    now: float
    rate_after: Callable[[int], float]
    pool_gpus: int
    window_s: float
    checkpoint_s: float = 3600.0


def protect(cand: Candidate, need: float, key: Callable[[Job], float]) -> list[Job]:
    """Victims on ``cand``: go through its spot jobs most expensive first and spare each one
    whose room is not needed to reach ``need``; the rest are evicted."""
    total = cand.free + sum(u for _, u in cand.victims)
    chosen: list[Job] = []
    for job, units in sorted(cand.victims, key=lambda v: (-key(v[0]), v[0].id)):
        if total - units >= need - 1e-9:
            total -= units
        else:
            chosen.append(job)
    return chosen


class VictimChooser(Protocol):
    """Picks (target, victims) among the candidates, or None to let the HP job wait."""

    name: str

    def choose(
        self, cands: list[Candidate], need: float, ctx: PreemptContext
    ) -> tuple[Candidate, list[Job]] | None: ...


class GFSVictims:
    """GFS: victims by lost work; node cost = pool eviction rate after the preemption
    + 5 * lost GPU-s / (pool GPUs * window); cheapest node, then the tightest fit."""

    name = "gfs"

    def choose(
        self, cands: list[Candidate], need: float, ctx: PreemptContext
    ) -> tuple[Candidate, list[Job]] | None:
        best = None
        best_key = None
        for cand in cands:
            victims = protect(cand, need, lambda g: g.lost_work(ctx.now, ctx.checkpoint_s))
            lost = sum(g.lost_work(ctx.now, ctx.checkpoint_s) for g in victims)
            cost = ctx.rate_after(len(victims)) + LOST_WORK_WEIGHT * lost / (
                ctx.pool_gpus * ctx.window_s
            )
            chosen = {g.id for g in victims}
            room = cand.free + sum(u for g, u in cand.victims if g.id in chosen)
            key = (cost, room - need, cand.ordinal)
            if best_key is None or key < best_key:
                best, best_key = (cand, victims), key
        return best


class LyraVictims:
    """Lyra: victim cost 1/worker_num (or 1/(worker_num*gpu_request)); cheapest node sum."""

    def __init__(self, per_gpu: bool = False) -> None:
        self.per_gpu = per_gpu
        self.name = "lyra-gpu" if per_gpu else "lyra"

    def _cost(self, job: Job) -> float:
        workers = job.spec.workers
        return (
            1.0 / (workers * (job.spec.gpus or job.per_worker)) if self.per_gpu else 1.0 / workers
        )

    def choose(
        self, cands: list[Candidate], need: float, ctx: PreemptContext
    ) -> tuple[Candidate, list[Job]] | None:
        best = None
        best_key = None
        for cand in cands:
            victims = protect(cand, need, self._cost)
            key = (sum(self._cost(g) for g in victims), cand.ordinal)
            if best_key is None or key < best_key:
                best, best_key = (cand, victims), key
        return best


class FirstFitVictims:
    """YARN-CS: the first node (in node order) that fits, and everything spot on it goes."""

    name = "first-fit"

    def choose(
        self, cands: list[Candidate], need: float, ctx: PreemptContext
    ) -> tuple[Candidate, list[Job]] | None:
        if not cands:
            return None
        cand = min(cands, key=lambda c: c.ordinal)
        return cand, sorted({g.id: g for g, _ in cand.victims}.values(), key=lambda g: g.id)
