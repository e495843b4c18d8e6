"""The hp/spot scheduler's configuration: its named extension points and parameters."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from stoker.core.gfs.jobs import CHECKPOINT_S
from stoker.core.gfs.placement import GFSScorer, NodeScorer
from stoker.core.gfs.preemption import GFSVictims, VictimChooser
from stoker.core.gfs.queues import QUEUE_ORDERS
from stoker.core.gfs.quota import ForecastQuota, QuotaPolicy


class Queue(StrEnum):
    """A queue order by name (:data:`~stoker.core.gfs.queues.QUEUE_ORDERS`): ``size``
    (GFS's and Chronus's skip rule), ``size-stop`` (Lyra's), ``fifo`` (YARN-CS's, FGD's)."""

    SIZE = "size"
    SIZE_STOP = "size-stop"
    FIFO = "fifo"
    # FIFO with an evicted spot job back at its submit time (the authors' ``fgd.py``)
    FIFO_SUBMIT = "fifo-submit"


class GangRule(StrEnum):
    """How an HP job of several whole-GPU workers is placed (spot and fractional HP jobs
    are all or nothing under every rule): ``all-or-nothing`` (stoker's), ``partial`` (the
    authors' ``policy/gfs.py`` and ``lyra.py``: the workers free room holds plus one by
    eviction, and it runs with those) or ``one-worker`` (``fifo_spot.py`` and ``fgd.py``:
    ``place_with_preemption`` places one worker, so every HP job runs with one)."""

    ALL_OR_NOTHING = "all-or-nothing"
    PARTIAL = "partial"
    ONE_WORKER = "one-worker"


class DemandCount(StrEnum):
    """What a job counts for in the demand books: ``every-worker`` (stoker's, for every
    policy: a running HP job's every worker in the HP series the forecaster learns, taken
    off when it ends); ``one-worker`` (one worker a job: ``Policy.run_guar`` in
    ``policy/policy.py``); ``one-worker-spot`` (that, and a running spot job counts one
    worker against the spot quota: ``policy/gfs.py``, ``SpotScheduler.run_spot``, bug B3);
    ``cumulative`` (one worker a job, never taken off: ``fifo_spot.py``, ``lyra.py`` and
    ``fgd.py`` never subtract an ended HP job from ``guar_request_dict``)."""

    EVERY_WORKER = "every-worker"
    ONE_WORKER = "one-worker"
    ONE_WORKER_SPOT = "one-worker-spot"
    CUMULATIVE = "cumulative"


@dataclass
class ReservationConfig:
    """stoker's reservation for a waiting HP job (``gfs-reserve-patient-lend``; GFS never
    reserves): a whole-GPU HP job that has queued ``after_s`` and finds no room, free or by
    eviction, reserves the nodes closest to holding it; no other hp or spot job (nor a warm
    pool's new pod) is placed or reclaims there unless it ends before they drain. One
    reservation per GPU pool at a time (Slurm's backfill with a reservation for the top
    job, Kubernetes' nominated node)."""

    after_s: float = 3600.0
    # the smallest per-worker request that may reserve: workers of one card fit on any
    # free cards, so backfilling fragments nothing for them
    min_worker: float = 1.0
    # the fewest workers a job must have to reserve
    min_workers: int = 1
    # a job reserves only when, after the HP pass, no HP job of a smaller per-worker
    # request waits in its GPU pool (one that waits finds no card at all: the GPU pool is short
    # of cards for HP, not fragmented), and gives its reservation up when one does
    smaller_first: bool = False
    # a job backfilled beside a reservation starts on free room and idle pods only, never
    # by evicting spot
    backfill_free: bool = False

    def __post_init__(self) -> None:
        if not self.after_s >= 0:
            raise ValueError(f"reservation.after_s must be >= 0, got {self.after_s}")
        if not self.min_worker >= 1.0:
            raise ValueError(f"reservation.min_worker must be >= 1, got {self.min_worker}")
        if self.min_workers < 1:
            raise ValueError(f"reservation.min_workers must be >= 1, got {self.min_workers}")


@dataclass
class LeaseConfig:
    """Chronus's scheduling rounds and leases (``chronus.py``): decisions only every
    ``round_s``; every running job hands its lease back each ``lease_s`` and owes
    ``restart_s`` when re-placed elsewhere."""

    round_s: float = 300.0
    lease_s: float = 1200.0
    restart_s: float = 120.0

    def __post_init__(self) -> None:
        for name in ("round_s", "lease_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"leases.{name} must be > 0")
        if not self.restart_s >= 0:
            raise ValueError(f"leases.restart_s must be >= 0, got {self.restart_s}")


@dataclass
class GFSConfig:
    """The hp/spot decisions and their parameters; the defaults are GFS's.

    ``quota`` (spot quota), ``scorer`` (placement scoring), ``victims`` (reclaim: which spot
    jobs go) and ``queue`` (queue order) are the named extension points; ``reservation``
    and ``leases`` are concerns a policy has or not (None: off), as are ``lend_idle`` and
    ``hp_evict_after_s``.
    """

    name: str = "gfs"
    quota: QuotaPolicy = field(default_factory=ForecastQuota)
    scorer: NodeScorer = field(default_factory=GFSScorer)
    victims: VictimChooser = field(default_factory=GFSVictims)
    queue: Queue = Queue.SIZE
    g: float = 0.9
    guarantee_s: float = 3600.0
    checkpoint_s: float = CHECKPOINT_S
    # the node cost's terms (``policy/gfs.py``, ``calc_preempt_cost``): the eviction rate
    # over periods settled in the last ``rate_window_s`` (None, the authors': since the
    # run's start) and lost work over ``cost_window_s`` (the authors': the evaluation
    # window, 30 days and 1 s; a driver sets its own window's length)
    rate_window_s: float | None = None
    cost_window_s: float = 30 * 86400.0 + 1.0
    eta_every_s: float = 3600.0  # eta feedback cadence; e is measured since the last step
    preempt: bool = True  # HP may evict spot (Chronus's HP waits for the next lease instead)
    # HP goes straight to the victim chooser, free nodes among the candidates
    # (``fifo_spot.py``, ``fgd.py``: ``place_with_preemption`` without placing first)
    hp_preempt_first: bool = False
    # a whole-GPU HP worker may take a card fractional spot work alone shares, evicting
    # every job on it (the authors': ``check_free_gpus_with_preemption`` counts each card
    # without HP). False: only free, idle and whole-GPU spot cards are its room
    evict_shared_cards: bool = True
    # a fractional HP worker that finds no card already carrying HP with room for it takes
    # the whole-card path with one card (the authors': ``place_with_preemption`` falls back
    # from ``frag_preempt`` to ``select_with_preemption`` with k = 1). False: a share of
    # one card without HP, its spot jobs evicted in order until the request fits
    frac_hp_whole_card: bool = True
    leases: LeaseConfig | None = None
    # stoker's ``gfs-lend`` (None: GFS): while no HP job waits in a GPU pool, spot may hold
    # up to this share of the GPUs HP does not hold now, times the GPU pool's eta, even past
    # the forecast quota (the part of the forecast's reserve HP is not using; eta, shrunk
    # by evictions above the target, takes it back)
    lend_idle: float | None = None
    reservation: ReservationConfig | None = None
    # stoker's (None: GFS's, at once): an HP job evicts spot only once it has queued this
    # long; before, it takes free room and idle pods only (a pass is due when the wait is
    # up): in a busy GPU pool a short wait often finds the room without an eviction
    hp_evict_after_s: float | None = None
    grace_s: float = 0.0  # an evicted spot job's SIGTERM-to-SIGKILL grace
    # the as-released options (each default is stoker's corrected rule; the
    # ``*-as-released`` presets set the authors'): HP gang placement, demand bookkeeping
    gang_rule: GangRule = GangRule.ALL_OR_NOTHING
    demand: DemandCount = DemandCount.EVERY_WORKER
    # the authors' gate (every policy's ``simulate``): with a window (start, end), no spot
    # job starts before ``start``, the quota holds in [start, end) and none after; HP
    # preempts and Chronus flushes leases only from ``start``. None: always on (stoker's)
    window: tuple[float, float] | None = None
    # driver-set, with ``window``: inside it, the spot quota is 0 before this (the
    # authors' forecaster cold start: no quota before its first fit; None: none)
    quota_opens: float | None = None
    # when the last job arrives (a trace driver knows; None: any time). After it, a GPU pool
    # with nothing queued stays so under leases (nothing arrives, leases never preempt):
    # its HP jobs are charged every remaining lease return at once
    arrivals_end: float | None = None

    def __post_init__(self) -> None:
        try:
            self.queue = Queue(self.queue)
        except ValueError:
            known = ", ".join(q.value for q in Queue)
            raise ValueError(f"queue must be one of {known}, got {self.queue!r}") from None
        for name, kind in (("gang_rule", GangRule), ("demand", DemandCount)):
            try:
                setattr(self, name, kind(getattr(self, name)))
            except ValueError:
                known = ", ".join(v.value for v in kind)
                got = getattr(self, name)
                raise ValueError(f"{name} must be one of {known}, got {got!r}") from None
        if self.lend_idle is not None and not 0.0 < self.lend_idle <= 1.0:
            raise ValueError(f"lend_idle must be in (0, 1], got {self.lend_idle}")
        smaller_first = self.reservation is not None and self.reservation.smaller_first
        if smaller_first and QUEUE_ORDERS[self.queue].stop:
            raise ValueError("reservation.smaller_first needs a queue by request")
        if self.hp_evict_after_s is not None and not self.hp_evict_after_s >= 0:
            raise ValueError(f"hp_evict_after_s must be >= 0, got {self.hp_evict_after_s}")
        if self.rate_window_s is not None and not self.rate_window_s > 0:
            raise ValueError(f"rate_window_s must be > 0, got {self.rate_window_s}")
        for name in ("guarantee_s", "checkpoint_s", "cost_window_s", "eta_every_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")
