"""The hp/spot scheduler's configuration: its named extension points and parameters."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from stoker.core.gfs.jobs import CHECKPOINT_S
from stoker.core.gfs.placement import GFSScorer, NodeScorer
from stoker.core.gfs.preemption import GFSVictims, VictimChooser
from stoker.core.gfs.queues import QUEUE_ORDERS
from stoker.core.gfs.quota import ForecastQuota, QuotaPolicy


@dataclass
class GFSConfig:
    """The hp/spot decisions and their parameters; the defaults are GFS's.

    ``quota`` (spot quota), ``scorer`` (placement scoring), ``victims`` (reclaim: which spot
    jobs go) and ``queue`` (queue order) are the named extension points.

    ``queue``: the name of a :class:`QueueOrder` (``size``: GFS's, ``size-stop``: Lyra's,
    ``fifo``: YARN-CS's and FGD's). ``round_s``/``lease_s``: Chronus's scheduling rounds
    and leases.
    """

    name: str = "gfs"
    quota: QuotaPolicy = field(default_factory=ForecastQuota)
    scorer: NodeScorer = field(default_factory=GFSScorer)
    victims: VictimChooser = field(default_factory=GFSVictims)
    queue: str = "size"
    g: float = 0.9
    guarantee_s: float = 3600.0
    checkpoint_s: float = CHECKPOINT_S
    # the node cost's terms (``policy/gfs.py``, ``calc_preempt_cost``): the eviction rate
    # over periods settled in the last ``rate_window_s`` (the authors': since the run's
    # start) and lost work over ``cost_window_s`` (the authors': the evaluation window,
    # 30 days and 1 s; a driver sets its own window's length)
    rate_window_s: float = math.inf
    cost_window_s: float = 30 * 86400.0 + 1.0
    eta_every_s: float = 3600.0  # eta feedback cadence; e is measured since the last step
    preempt: bool = True  # HP may evict spot (Chronus's HP waits for the next lease instead)
    # HP goes straight to the victim chooser, free nodes among the candidates
    # (``fifo_spot.py``, ``fgd.py``: ``place_with_preemption`` without placing first)
    hp_preempt_first: bool = False
    # a whole-GPU HP worker may take a card fractional spot work alone shares, evicting
    # every job on it (the authors': ``check_free_gpus_with_preemption`` counts each card
    # without HP). False (stoker's, measured in docs/gfs.md): only free, idle and
    # whole-GPU spot cards are its room; fractional spot goes only for a fractional request
    evict_shared_cards: bool = True
    # a fractional HP worker that finds no card already carrying HP with room for it takes
    # the whole-card path with one card (the authors': ``place_with_preemption`` falls back
    # from ``frag_preempt`` to ``select_with_preemption`` with k = 1, the policy's node
    # and victims, every job on the card). False (stoker's earlier rule): a share of one
    # card without HP, its spot jobs evicted in order until the request fits
    frac_hp_whole_card: bool = True
    round_s: float = 0.0
    lease_s: float = 0.0
    lease_restart_s: float = 120.0
    # stoker's ``gfs-lend`` (0: GFS): while no HP job waits in a GPU pool, spot may hold up
    # to this share of the GPUs HP does not hold now, times the pool's eta, even past the
    # forecast quota. The forecast reserves its g-quantile of HP demand an hour ahead
    # whether or not HP comes; the lent room is the part of that reserve HP is not using,
    # and eta (shrunk by evictions above the target) takes it back when lending evicts
    lend_idle: float = 0.0
    # stoker's ``gfs-reserve`` (inf: GFS's backfill, never a reservation): a whole-GPU HP
    # job that has queued this long and finds no room, free or by eviction, reserves the
    # nodes closest to holding it (:meth:`HpSpotScheduler._reserve`); no other hp or spot
    # job (nor a warm pool's new pod) is placed there, nor reclaims there, until it starts
    # or leaves the queue, so it starts when those nodes drain instead of waiting while
    # smaller jobs backfill them.
    # One reservation per GPU pool at a time (Slurm's backfill with a reservation for the
    # top job, Kubernetes' nominated node)
    reserve_after_s: float = math.inf
    # stoker's ``gfs-reserve-multi`` (with ``reserve_after_s``; 1: any whole-GPU worker): the
    # smallest per-worker request that may reserve. Workers of one card fit on any free
    # cards, so backfilling fragments nothing for them, while their reservation keeps the
    # cards they wait for from spot; a worker of several cards needs them free on one node
    reserve_min_worker: float = 1.0
    # stoker's ``gfs-reserve-gangs`` (with ``reserve_after_s``; 1: any job): the fewest
    # workers a job must have to reserve. The skip rule holds a bucket's later HP jobs
    # behind a waiting gang (they go by submit time, not by workers), so a gang's
    # reservation, beside which they backfill, is where GFS leaves the most room unused
    reserve_min_workers: int = 1
    # stoker's ``gfs-reserve-gangs`` (with ``reserve_after_s``): smaller HP jobs first. A
    # job reserves only when, after the HP pass, no HP job of a smaller per-worker request
    # waits in its pool, and gives its reservation up after a pass where one does. One that
    # waits finds no card at all (it needs fewer than the gang's workers), so the pool is
    # short of cards for HP, not fragmented: a reservation there only hands the cards to
    # the gang ahead of the many small jobs (Philly contended), where GFS's skip rule leaves
    # the gang waiting and the small jobs served
    reserve_smaller_first: bool = False
    # stoker's ``gfs-reserve-patient`` (with ``reserve_after_s``): a job backfilled beside a
    # reservation starts on free room (and idle pods) only, never by evicting spot. GFS's
    # skip rule keeps those jobs (a bucket's later ones) from trying at all; backfilled,
    # they start before the reserved nodes drain and, under GFS's victim chooser, evict
    # the spot jobs GFS would have left running (v2026: the reservation's extra evictions)
    reserve_backfill_free: bool = False
    # stoker's ``gfs-reserve-patient`` (0: GFS's, at once): an HP job evicts spot only once
    # it has queued this long; before, it takes free room and idle pods only (a pass is due
    # when the wait is up). Jobs end all the time in a busy pool, so a short wait often
    # finds the room without an eviction
    hp_evict_after_s: float = 0.0
    grace_s: float = 0.0  # an evicted spot job's SIGTERM-to-SIGKILL grace
    # the authors' gate (every policy's ``simulate``): with a window (start, end), no spot
    # job starts before ``start``, the quota holds in [start, end) and none after; HP
    # preempts and Chronus flushes leases only from ``start``. None: always on (stoker's)
    window: tuple[float, float] | None = None
    # when the last job arrives (a trace driver knows; None: any time). After it, a pool
    # with nothing queued stays so under leases (nothing arrives, leases never preempt):
    # its HP jobs are charged every remaining lease return at once (``_closed_leases``)
    arrivals_end: float | None = None

    def __post_init__(self) -> None:
        if self.queue not in QUEUE_ORDERS:
            raise ValueError(f"queue must be one of {', '.join(QUEUE_ORDERS)}, got {self.queue!r}")
        if not 0.0 <= self.lend_idle <= 1.0:
            raise ValueError(f"lend_idle must be in [0, 1], got {self.lend_idle}")
        if not self.reserve_after_s >= 0:
            raise ValueError(f"reserve_after_s must be >= 0, got {self.reserve_after_s}")
        if self.reserve_smaller_first and QUEUE_ORDERS[self.queue].stop:
            raise ValueError("reserve_smaller_first needs a queue by request (the skip rule)")
        if not self.hp_evict_after_s >= 0:
            raise ValueError(f"hp_evict_after_s must be >= 0, got {self.hp_evict_after_s}")
        for name in (
            "guarantee_s",
            "checkpoint_s",
            "rate_window_s",
            "cost_window_s",
            "eta_every_s",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")
