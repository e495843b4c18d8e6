"""The paper's ablations of GFS's scheduler (simplified placement, simplified preemption)
and stoker's own GFS variants (``gfs-lend``, ``gfs-reserve-patient-lend``,
``gfs-reserve-patient-lend-multi``) and the parts they are built of (lending, reservations
and their bounds, backfill on free room, HP evicting after a wait), each as GFS with its
parameters after ``+``: each differs from ``gfs`` in the one part it swaps, and only there."""

from __future__ import annotations

import re
from dataclasses import fields, replace

import pytest

from stoker.core import ForecastUpdated, JobCancelled, Tick
from stoker.core.actions import Action, StartPod
from stoker.core.config import Policies
from stoker.core.gfs.placement import BestFitScorer, GFSScorer
from stoker.core.gfs.preemption import FifoVictims, GFSVictims
from stoker.core.model import JobClass, JobSpec, JobState
from stoker.core.registry import GANG_PRESETS, preset
from test_gfs import Gangs, bound, cluster, evicted, spec

# the reservation's parts, one at a time, as GFS with parameters (the presets combine them)
RESERVE = "gfs+reservation.after_s=3600"
RESERVE_LEND = RESERVE + "+lend_idle=1"
RESERVE_MULTI = RESERVE + "+reservation.min_worker=2"
RESERVE_GANGS = RESERVE_MULTI + "+reservation.min_workers=2+reservation.smaller_first=1"
PATIENT = RESERVE_GANGS + "+reservation.backfill_free=1+hp_evict_after_s=1800"


@pytest.mark.parametrize(
    ("name", "scorer", "victims", "queue"),
    [
        ("gfs", GFSScorer, GFSVictims, "size"),
        ("gfs-simple-placement", BestFitScorer, GFSVictims, "size"),
        ("gfs-simple-preemption", GFSScorer, FifoVictims, "size"),
        ("gfs-lend", GFSScorer, GFSVictims, "size"),
        ("gfs-reserve-patient-lend", GFSScorer, GFSVictims, "size"),
        ("gfs-reserve-patient-lend-multi", GFSScorer, GFSVictims, "size"),
    ],
)
def test_each_variant_swaps_one_part_of_gfs(
    name: str, scorer: type, victims: type, queue: str
) -> None:
    p = preset(name)
    hpspot = p.policies.hpspot
    assert name in GANG_PRESETS and hpspot.name == name
    assert isinstance(hpspot.scorer, scorer) and isinstance(hpspot.victims, victims)
    assert hpspot.queue == queue
    # the rest is GFS's: the forecast quota with its eta feedback, placing before preempting
    assert p.forecaster == "default" and type(hpspot.quota) is type(
        preset("gfs").policies.hpspot.quota
    )
    assert not hpspot.hp_preempt_first and hpspot.preempt


@pytest.mark.parametrize(("name", "node"), [("gfs", "n1"), ("gfs-simple-placement", "n0")])
def test_simple_placement_ignores_the_class_already_on_a_node(name: str, node: str) -> None:
    g = Gangs(cluster(4, 4, 4), name)
    g.submit(spec("h", "hp", 3, dur=1e5), 0.0)
    g.submit(spec("s", "spot", 3, dur=1e5), 0.0)
    assert (g.nodes("h"), g.nodes("s")) == ({"n0"}, {"n1"})
    # n0 and n1 both have 1 GPU free: GFS's score puts spot beside spot (n1); the
    # simplified placement (the baselines' best fit) takes the first of them (n0)
    g.submit(spec("s2", "spot", 1, dur=1e5), 1.0)
    assert g.nodes("s2") == {node}


@pytest.mark.parametrize(("name", "victim"), [("gfs", "young"), ("gfs-simple-preemption", "old")])
def test_simple_preemption_takes_the_first_node_without_a_cost(name: str, victim: str) -> None:
    g = Gangs(cluster(4, 4), name)
    g.submit(spec("old", "spot", 4, dur=1e6), 0.0)  # n0, 10 h of work at stake
    g.submit(spec("young", "spot", 4, dur=1e6), 36_000.0)  # n1, 100 s
    assert g.nodes("old") == {"n0"} and g.nodes("young") == {"n1"}
    # GFS's node cost: one victim either way, the lost work decides (young); the simplified
    # preemption takes the first best-fit node's first cards (old) whatever it costs
    out = g.submit(spec("h", "hp", 4, dur=10), 36_100.0)
    assert evicted(out) == [victim]


def _lend_run(policy: str | Policies) -> tuple[list[str], list[str], list[str], float]:
    """HP holds 2 of 8 GPUs and is forecast to need all 8 within the hour (quota 0)."""
    g = Gangs(cluster(4, 4), policy)
    g.submit(spec("h", "hp", 2, dur=1e5), 0.0)
    g.send(ForecastUpdated("t", "A", (8.0,), (0.0,)), 0.0)
    assert g.core.hpspot.quota["A"] == 0.0
    # no HP waits: the lending variant lends spot what HP does not hold (6 GPUs)
    first = bound(g.submit(spec("s1", "spot", 4, dur=1e5), 1.0))
    first += bound(g.submit(spec("s2", "spot", 2, dur=1e5), 1.0))
    # an HP job comes: it takes free room first, else evicts (the lent room comes back)
    hp = g.submit(spec("h2", "hp", 4, dur=1e5), 2.0)
    # while it (or any HP job) waits, nothing is lent
    g.submit(spec("h3", "hp", 4, dur=1e5), 3.0)
    late = bound(g.submit(spec("s3", "spot", 1, dur=1e5), 3.0))
    return first, evicted(hp), late, g.core.hpspot.spot_quota("A")


def test_lend_gives_spot_what_hp_does_not_hold_while_no_hp_waits() -> None:
    # GFS: the forecast reserves the whole GPU pool, no spot job starts
    assert _lend_run("gfs") == ([], [], [], 0.0)
    # gfs-lend: both spot jobs start on the 6 GPUs HP does not hold; the next HP job
    # evicts the 4-GPU one; with HP queued (h3) the quota is the forecast's again (0)
    first, victims, late, quota = _lend_run("gfs-lend")
    assert first == ["s1", "s2"] and victims == ["s1"] and late == [] and quota == 0.0


def test_patient_lend_lends_half_and_hp_takes_free_room_back_first() -> None:
    # without its loan it lends nothing: the forecast reserves the whole GPU pool
    assert _lend_run(PATIENT) == ([], [], [], 0.0)
    # gfs-reserve-patient-lend lends half the 6 GPUs HP does not hold: the 2-GPU spot job
    # starts, the 4-GPU one does not; the next HP job takes the 4 free GPUs without a
    # victim (gfs-lend evicted s1 for it); with HP queued nothing is lent
    assert _lend_run("gfs-reserve-patient-lend") == (["s2"], [], [], 0.0)
    config = preset("gfs-reserve-patient-lend").policies.hpspot
    patient = preset(PATIENT).policies.hpspot
    assert config.lend_idle == 0.5 and patient.lend_idle is None
    same = ("reservation", "hp_evict_after_s")
    assert all(getattr(config, f) == getattr(patient, f) for f in same)


def test_a_preset_takes_its_parameters_after_its_name() -> None:
    # GFS with the reservation's parts and half the loan, written out, is
    # gfs-reserve-patient-lend
    written = preset(PATIENT + "+lend_idle=0.5")
    named = preset("gfs-reserve-patient-lend")
    assert written.name == PATIENT + "+lend_idle=0.5"
    assert _lend_run(written.policies) == _lend_run(named.policies) == (["s2"], [], [], 0.0)
    a, b = written.policies.hpspot, named.policies.hpspot
    plain = [
        f.name
        for f in fields(a)
        if f.name != "name" and isinstance(getattr(a, f.name), (int, float, str, type(None)))
    ]
    assert [getattr(a, f) for f in plain] == [getattr(b, f) for f in plain]
    several = preset("gfs+hp_evict_after_s=600+reservation.backfill_free=true+queue=fifo").policies
    assert several.hpspot.hp_evict_after_s == 600.0 and several.hpspot.reservation is not None
    assert several.hpspot.reservation.backfill_free and several.hpspot.reservation.after_s == 3600
    assert several.hpspot.queue == "fifo" and preset("gfs").policies.hpspot.queue == "size"
    # what cannot be set this way is refused, naming what is wrong
    for bad, says in (
        ("gfs+lend_idle=2", "lend_idle must be in (0, 1], got 2.0"),
        ("gfs+lend_idle=0", "lend_idle must be in (0, 1], got 0.0"),
        ("gfs+reservation.after_s=-1", "reservation.after_s must be >= 0"),
        ("gfs+reservation.nope=1", "'reservation.nope=1' is not field=value"),
        ("gfs+lend_idle=lots", "lend_idle: expected a float, got 'lots'"),
        ("gfs+reservation.backfill_free=maybe", "reservation.backfill_free: expected a bool"),
        ("gfs+queue=random", "queue must be one of"),
        ("gfs+nope=1", "'nope=1' is not field=value of a GFSConfig parameter"),
        ("gfs+lend_idle", "'lend_idle' is not field=value"),
        ("gfs+g=0.5", "'g=0.5' is not field=value"),  # preset()'s own argument, and the quota's
        ("firepool+lend_idle=1", "'firepool' is a warm-pool preset"),
        ("gfz+lend_idle=1", "unknown 'gfz'"),
    ):
        with pytest.raises(ValueError, match=re.escape(says)):
            preset(bad)


def test_lend_shrinks_with_eta_when_lending_evicts() -> None:
    p = preset("gfs-lend")
    g = Gangs(cluster(4, 4), p.policies)
    g.send(ForecastUpdated("t", "A", (8.0,), (0.0,)), 0.0)
    assert g.core.hpspot.spot_quota("A") == 8.0  # no HP holds anything: eta 1 x 8
    g.core.hpspot.config.quota.feedback("A", 0.3, spot_waited_long=False)  # e = 3x target
    assert g.core.hpspot.spot_quota("A") == pytest.approx(8.0 * 0.1 / 0.3)


def test_only_the_reserve_presets_reserve() -> None:
    reserving = {n for n in GANG_PRESETS if preset(n).policies.hpspot.reservation is not None}
    assert reserving == {"gfs-reserve-patient-lend", "gfs-reserve-patient-lend-multi"}
    configs = {n: preset(n).policies.hpspot.reservation for n in reserving}
    bounds = {n: (c.min_worker, c.min_workers) for n, c in configs.items()}
    assert bounds == {
        "gfs-reserve-patient-lend": (2.0, 2),
        "gfs-reserve-patient-lend-multi": (2.0, 1),
    }
    assert all(c.smaller_first and c.backfill_free for c in configs.values())
    assert {n for n in GANG_PRESETS if preset(n).policies.hpspot.hp_evict_after_s} == reserving


def _reserve_run(name: str, cancel: bool = False) -> tuple[Gangs, list[list[Action]]]:
    """Two 8-GPU nodes full of 1-GPU HP jobs (n0's run to 20,000 s, n1's to 7,200 s by
    their durations), an 8-GPU HP job (big) queued at 10 s and a 1-GPU HP job every 600 s
    after it; at 4,500 s a 1-GPU spot job. Then n1's jobs end one by one, then n0's.
    Returns the driver and every event's actions."""
    g = Gangs(cluster(8, 8), name)
    log = []
    for i in range(16):
        log.append(g.submit(spec(f"s{i}", "hp", 1, dur=20_000 if i < 8 else 7_200), 0.0))
    log.append(g.submit(spec("big", "hp", 8, dur=1e4), 10.0))
    for k in range(1, 8):
        log.append(g.submit(spec(f"q{k}", "hp", 1, dur=1e5), 10.0 + 600.0 * k))
    log.append(g.submit(spec("sp", "spot", 1, dur=1e5), 4_500.0))
    if cancel:
        log.append(g.send(JobCancelled("big"), 5_000.0))
    for i in range(16):
        log.append(g.finish(f"s{8 + i % 8 if i < 8 else i - 8}", 7_200.0 + i))
    return g, log


def _bound_at(log: list[list[Action]], job: str) -> list[int]:
    return [i for i, out in enumerate(log) if job in bound(out)]


def test_reserve_drains_a_node_for_a_waiting_gang_while_small_jobs_keep_coming() -> None:
    gfs, log = _reserve_run("gfs")
    # GFS: big is tried first at every pass but never fits, and the 1-GPU HP jobs (then
    # the spot job) backfill every card n1's jobs free: big starts only when n0 is empty
    assert _bound_at(log, "big") == [len(log) - 1] and gfs.nodes("big") == {"n0"}
    assert all(gfs.nodes(f"q{k}") == {"n1"} for k in range(1, 8)) and gfs.nodes("sp") == {"n1"}
    g, log = _reserve_run(RESERVE)
    # RESERVE: from its first failed pass after an hour queued (the 1-GPU job at
    # 3,610 s) big holds n1 (n1's HP jobs end by 7,200 s by their run times, n0's by
    # 20,000 s); nothing that runs past 7,200 s is placed there: the cards n1's jobs free
    # stay idle (the 1-GPU jobs and the spot job wait) until big starts there
    assert _bound_at(log, "big") == [len(log) - 9] and g.nodes("big") == {"n1"}
    assert g.core.hpspot.reservations.held == {}  # dropped when big started
    # n0's jobs ending then hand its cards to the waiting jobs, HP first
    assert sorted(j for out in log[-8:] for j in bound(out)) == [
        *(f"q{k}" for k in range(1, 8)),
        "sp",
    ]
    assert all(g.nodes(f"q{k}") == {"n0"} for k in range(1, 8)) and g.nodes("sp") == {"n0"}


def test_reserve_holds_one_reservation_until_the_gang_starts_or_is_cancelled() -> None:
    g = Gangs(cluster(8, 8), RESERVE)
    for i in range(16):
        g.submit(spec(f"s{i}", "hp", 1, dur=20_000 if i < 8 else 7_200), 0.0)
    g.submit(spec("big", "hp", 8, dur=1e4), 10.0)
    g.submit(spec("big2", "hp", 8, dur=1e4), 20.0)
    g.submit(spec("q1", "hp", 1, dur=1e5), 3_000.0)  # big has waited under an hour
    assert g.core.hpspot.reservations.held == {}
    g.submit(spec("q2", "hp", 1, dur=1e5), 3_700.0)  # over an hour: the first big reserves
    assert g.core.hpspot.reservations.held == {"A": ("big", frozenset({"n1"}), 7_200.0)}
    assert bound(g.finish("s8", 4_000.0)) == []  # n1's freed card is held for big
    # EASY backfill: a job that ends before n1 drains (by its run time) may use it
    assert bound(g.submit(spec("short", "hp", 1, dur=3_000), 4_000.0)) == ["short"]
    assert g.nodes("short") == {"n1"}
    g.finish("short", 4_050.0)
    # big cancelled: its reservation ends, and big2 (queued over an hour, tried first)
    # takes n1 over at the same pass: the freed card still waits for a whole node
    assert bound(g.send(JobCancelled("big"), 4_100.0)) == []
    assert g.core.hpspot.reservations.held == {"A": ("big2", frozenset({"n1"}), 7_200.0)}
    # cancelled with no other gang waiting, the reservation is gone: n1's cards go to the
    # 1-GPU jobs as they free
    cancelled, log = _reserve_run(RESERVE, cancel=True)
    assert cancelled.core.hpspot.reservations.held == {}
    assert _bound_at(log, "q1") == [len(log) - 16] and cancelled.nodes("q1") == {"n1"}


def test_a_pool_job_does_not_take_a_card_reserved_for_a_gang() -> None:
    # n1 is reserved for big (8 GPUs) and a card frees there; a pool job (a warm pod of
    # profile A) must not start its pod on it, or pool work arriving all the time would
    # keep the gang waiting: it waits until a card frees elsewhere (n0)
    g = Gangs(cluster(8, 8), RESERVE)
    for i in range(16):
        g.submit(spec(f"s{i}", "hp", 1, dur=20_000 if i < 8 else 7_200), 0.0)
    g.submit(spec("big", "hp", 8, dur=1e4), 10.0)
    g.submit(spec("q", "hp", 1, dur=1e5), 3_700.0)
    assert g.core.hpspot.reserved_nodes("A") == frozenset({"n1"})
    g.finish("s8", 4_000.0)  # n1's first free card, held for big
    pool = JobSpec("tool", "t", "A", job_class=JobClass.POOL, duration=None)
    started = [a for a in g.submit(pool, 4_010.0) if isinstance(a, StartPod)]
    assert started == [] and g.core.jobs["tool"].state is JobState.QUEUED
    out = g.finish("s0", 4_100.0)  # a card frees on n0, outside the reservation
    assert [(a.node, a.gpus) for a in out if isinstance(a, StartPod)] == [("n0", ("n0/0",))]
    assert g.core.hpspot.reserved_nodes("A") == frozenset({"n1"}) and not g.nodes("big")


def test_reserve_is_gfs_until_a_gang_waits_and_is_deterministic() -> None:
    _, gfs = _reserve_run("gfs")
    _, first = _reserve_run(RESERVE)
    _, again = _reserve_run(RESERVE)
    assert first == again  # the same events, the same actions
    # before big's hour in the queue the two make the same decisions
    assert first[:22] == gfs[:22] and first != gfs


def _gang_run(name: str, req: float, workers: int) -> list[list[Action]]:
    """Two 4-GPU nodes full of 1-GPU HP jobs (n0's run to 20,000 s, n1's to 7,200 s), an
    HP job of ``workers`` x ``req`` GPUs queued at 10 s, a 1-GPU spot job at 3,700 s (the
    pass after the HP job's hour), one of n1's jobs ending at 5,000 s. Every event's
    actions."""
    g = Gangs(cluster(4, 4), name)
    log = [g.submit(spec(f"s{i}", "hp", 1, dur=20_000 if i < 4 else 7_200), 0.0) for i in range(8)]
    log.append(g.submit(spec("gang", "hp", req, workers=workers, dur=1e4), 10.0))
    log.append(g.submit(spec("sp", "spot", 1, dur=1e5), 3_700.0))
    log.append(g.finish("s4", 5_000.0))
    return log


def test_reserve_multi_reserves_only_for_workers_of_several_cards() -> None:
    # a gang of five 1-GPU workers: RESERVE holds the nodes for it and the spot job
    # does not get the card freed at 5,000 s (it runs past their drain); RESERVE_MULTI
    # does not reserve for workers of one card: its actions are GFS's (the spot job starts)
    gfs, reserve, multi = (_gang_run(n, 1, 5) for n in ("gfs", RESERVE, RESERVE_MULTI))
    assert bound(gfs[-1]) == ["sp"] and bound(reserve[-1]) == []
    assert multi == gfs
    # one 2-GPU worker: both reserve n1 (it drains first) and hold its freed card
    reserve, multi = (_gang_run(n, 2, 1) for n in (RESERVE, RESERVE_MULTI))
    assert bound(_gang_run("gfs", 2, 1)[-1]) == ["sp"]
    assert bound(multi[-1]) == [] and multi == reserve


def test_reserve_gangs_reserves_only_for_gangs_of_multi_card_workers() -> None:
    # one 2-GPU worker: RESERVE_MULTI holds n1's freed card from the spot job,
    # RESERVE_GANGS does not reserve for a single worker: its actions are GFS's
    gfs, multi, gangs = (_gang_run(n, 2, 1) for n in ("gfs", RESERVE_MULTI, RESERVE_GANGS))
    assert bound(multi[-1]) == [] and gangs == gfs
    # two workers of two cards: it reserves n1 (both fit there) and holds the freed card
    assert bound(_gang_run("gfs", 2, 2)[-1]) == ["sp"]
    assert bound(_gang_run(RESERVE_GANGS, 2, 2)[-1]) == []


def _smaller_run(name: str, smaller_first: bool | None = None) -> tuple[dict, list[list[Action]]]:
    """Two 4-GPU nodes full of 1-GPU HP jobs (n0's run to 20,000 s, n1's to 7,200 s), a
    2 x 2-GPU HP gang queued at 10 s, a 1-GPU HP job (small, run past 7,200 s) at 3,700 s
    (the pass after the gang's hour), one of n1's jobs ending at 5,000 s. The reservations
    after small came, and every event's actions."""
    p = preset(name)
    if smaller_first is not None:
        hpspot = p.policies.hpspot
        hpspot.reservation = replace(hpspot.reservation, smaller_first=smaller_first)
    g = Gangs(cluster(4, 4), p.policies)
    log = [g.submit(spec(f"s{i}", "hp", 1, dur=20_000 if i < 4 else 7_200), 0.0) for i in range(8)]
    log.append(g.submit(spec("gang", "hp", 2, workers=2, dur=1e4), 10.0))
    log.append(g.submit(spec("small", "hp", 1, dur=1e5), 3_700.0))
    reserved = dict(g.core.hpspot.reservations.held)
    log.append(g.finish("s4", 5_000.0))
    return reserved, log


def test_patient_lend_multi_is_patient_lend_reserving_for_a_single_multi_card_worker() -> None:
    lend, multi = (
        preset(n).policies.hpspot
        for n in ("gfs-reserve-patient-lend", "gfs-reserve-patient-lend-multi")
    )
    # every setting the same but the name and the single worker (policy objects are fresh)
    same = {"quota": multi.quota, "scorer": multi.scorer, "victims": multi.victims}
    one = replace(lend.reservation, min_workers=1)
    assert replace(lend, name=multi.name, reservation=one, **same) == multi
    # one 2-GPU HP worker: only the -multi preset reserves n1 and holds the card it frees
    # from the spot job; with two such workers both do
    assert bound(_gang_run("gfs-reserve-patient-lend", 2, 1)[-1]) == ["sp"]
    assert bound(_gang_run("gfs-reserve-patient-lend-multi", 2, 1)[-1]) == []
    assert bound(_gang_run("gfs-reserve-patient-lend", 2, 2)[-1]) == []


def test_reserve_gangs_does_not_reserve_while_a_smaller_hp_job_waits() -> None:
    # without the bound the gang reserves n1 though a 1-GPU HP job waits for any card:
    # the card n1 frees at 5,000 s is held for the gang (small runs past n1's drain)
    reserved, log = _smaller_run(RESERVE_GANGS, smaller_first=False)
    assert reserved == {"A": ("gang", frozenset({"n1"}), 7_200.0)} and bound(log[-1]) == []
    # with it (the preset's) small waiting after the HP pass keeps the gang from reserving:
    # the freed card goes to small, every action GFS's
    reserved, log = _smaller_run(RESERVE_GANGS)
    assert reserved == {} and bound(log[-1]) == ["small"]
    assert log == _smaller_run("gfs")[1]
    # with only spot waiting beside it the gang still reserves (and holds the card)
    assert bound(_gang_run(RESERVE_GANGS, 2, 2)[-1]) == []


def test_reserve_gangs_gives_its_reservation_up_when_a_smaller_hp_job_comes() -> None:
    g = Gangs(cluster(4, 4), RESERVE_GANGS)
    for i in range(8):
        g.submit(spec(f"s{i}", "hp", 1, dur=20_000 if i < 4 else 7_200), 0.0)
    g.submit(spec("gang", "hp", 2, workers=2, dur=1e4), 10.0)
    g.submit(spec("sp", "spot", 1, dur=1e5), 3_700.0)  # the pass after the gang's hour
    assert g.core.hpspot.reservations.held == {"A": ("gang", frozenset({"n1"}), 7_200.0)}
    # a 1-GPU HP job comes and finds no card: the reservation is given up after that pass,
    # and the card n1 frees next goes to it (it runs past n1's drain: held, it would wait)
    assert bound(g.submit(spec("small", "hp", 1, dur=1e5), 4_000.0)) == []
    assert g.core.hpspot.reservations.held == {}
    assert bound(g.finish("s4", 5_000.0)) == ["small"]
    # once no smaller job waits the gang reserves again: one slot of n1 by 7,200 s (small
    # holds one of its cards), one of n0 by 20,000 s
    g.finish("s5", 5_100.0)
    assert g.core.hpspot.reservations.held == {"A": ("gang", frozenset({"n0", "n1"}), 20_000.0)}


def test_backfill_still_tries_a_smaller_gang_after_a_larger_one_found_no_room() -> None:
    g = Gangs(cluster(4, 4, 4), RESERVE)
    g.submit(spec("h0", "hp", 4, dur=20_000), 0.0)  # n0
    g.submit(spec("h1", "hp", 4, dur=7_200), 0.0)  # n1
    g.submit(spec("h2", "hp", 2, dur=20_000), 0.0)  # n2: two cards free
    g.submit(spec("gang", "hp", 2, workers=2, dur=1e4), 10.0)
    # after its hour the gang reserves n2's free slot and n1's first (both by 7,200 s);
    # two jobs of its bucket that end before then come: two 2-GPU workers find one slot
    # (no room), one 2-GPU worker fits on n2: the backfill skips only jobs asking as much
    # as the one that failed
    assert bound(g.submit(spec("a2", "hp", 2, workers=2, dur=1_000), 3_700.0)) == []
    assert g.core.hpspot.reservations.held == {"A": ("gang", frozenset({"n1", "n2"}), 7_200.0)}
    assert bound(g.submit(spec("b1", "hp", 2, dur=1_000), 3_700.0)) == ["b1"]
    assert g.nodes("b1") == {"n2"}


def test_reserve_counts_each_slot_of_a_node_by_its_own_drain() -> None:
    g = Gangs(cluster(8, 8), RESERVE)
    for i in range(8):
        g.submit(spec(f"s{i}", "hp", 1, dur=7_200), 0.0)  # n0 full until 7,200 s
    g.submit(spec("long", "hp", 4, dur=1e6), 0.0)  # n1: half held for good
    for i in range(4):
        g.submit(spec(f"t{i}", "hp", 1, dur=1_000), 0.0)
    assert g.nodes("long") == {"n1"} and g.nodes("t0") == {"n1"}
    g.submit(spec("gang", "hp", 4, workers=2, dur=1e4), 10.0)
    for i in range(4):
        g.finish(f"t{i}", 1_000.0)  # n1 holds one 4-GPU worker now, a second only in 1e6 s
    # after an hour the gang reserves one slot of n1 and one of n0 (when n0 drains), not
    # both of n1's as if the node drained whole: so a job that ends by 7,200 s may still
    # use n1's free cards meanwhile
    out = g.submit(spec("short", "hp", 1, dur=3_000), 3_700.0)
    assert g.core.hpspot.reservations.held == {"A": ("gang", frozenset({"n0", "n1"}), 7_200.0)}
    assert bound(out) == ["short"] and g.nodes("short") == {"n1"}
    assert bound(g.finish("s0", 7_200.0) + g.finish("short", 7_200.0)) == []
    done = [j for i in range(1, 8) for j in bound(g.finish(f"s{i}", 7_200.0))]
    assert done == ["gang"] and g.nodes("gang") == {"n0", "n1"}


def _backfill_run(name: str, free: bool = False) -> tuple[Gangs, list[list[Action]]]:
    """Three 4-GPU nodes: n0 full of 1-GPU HP jobs (to 20,000 s), n1 of two 2-GPU HP jobs
    (to 7,200 s), n2 of two 1-GPU HP jobs (to 20,000 s) and a 2-GPU spot job (sp). A
    3 x 2-GPU HP gang queued at 10 s (room for two workers at most, by evicting sp), a
    2-GPU HP job (x, 1,000 s: it ends before n1 drains) at 3,700 s (the pass after the
    gang's hour), a 1-GPU spot job at 3,800 s, one of n1's jobs ending at 4,000 s. With
    ``free``: ``reservation.backfill_free``. The driver and every event's actions."""
    p = preset(name)
    hpspot = p.policies.hpspot
    if hpspot.reservation is not None:
        hpspot.reservation = replace(hpspot.reservation, backfill_free=free)
    g = Gangs(cluster(4, 4, 4), p.policies)
    log = [g.submit(spec(f"a{i}", "hp", 1, dur=20_000), 0.0) for i in range(4)]
    log += [g.submit(spec(f"b{i}", "hp", 2, dur=7_200), 0.0) for i in range(2)]
    log += [g.submit(spec(f"c{i}", "hp", 1, dur=20_000), 0.0) for i in range(2)]
    log.append(g.submit(spec("sp", "spot", 2, dur=1e5), 0.0))
    assert [g.nodes(j) for j in ("a0", "b0", "c0", "sp")] == [{"n0"}, {"n1"}, {"n2"}, {"n2"}]
    log.append(g.submit(spec("gang", "hp", 2, workers=3, dur=1e4), 10.0))
    log.append(g.submit(spec("x", "hp", 2, dur=1_000), 3_700.0))
    log.append(g.submit(spec("late", "spot", 1, dur=1e5), 3_800.0))
    log.append(g.finish("b0", 4_000.0))
    return g, log


def test_reserve_backfill_free_backfills_on_free_room_only() -> None:
    # GFS: the gang heads the 2-GPU bucket and never fits, so x (behind it) is never tried
    _, log = _backfill_run("gfs")
    assert not any(evicted(out) for out in log) and "x" not in bound(log[-1])
    # RESERVE_GANGS: the gang reserves n1 and n2 (n2's slot holds only spot: ready now),
    # and at the next pass x, which ends before they drain, is backfilled by evicting sp
    g, log = _backfill_run(RESERVE_GANGS)
    assert g.core.hpspot.reservations.held["A"] == ("gang", frozenset({"n1", "n2"}), 7_200.0)
    assert evicted(log[-2]) == ["sp"] and bound(log[-2]) == ["x"] and g.nodes("x") == {"n2"}
    # with reservation.backfill_free (PATIENT's) the same reservation, but x
    # backfilled takes free room only: it evicts nothing and starts when n1 frees two cards
    g, log = _backfill_run(RESERVE_GANGS, free=True)
    assert g.core.hpspot.reservations.held["A"] == ("gang", frozenset({"n1", "n2"}), 7_200.0)
    assert not any(evicted(out) for out in log)
    assert bound(log[-1]) == ["x"] and g.nodes("x") == {"n1"}


def _evict_after_run(after: float) -> tuple[Gangs, list[list[Action]], dict[float, list[Action]]]:
    """Two 4-GPU nodes: an HP job (r) on n0 until 300 s, a spot job (s) on n1; a 4-GPU HP
    job (h) at 100 s, and a second (h2) at 400 s; r ends at 300 s. GFS with HP evicting
    only after ``after`` s queued. The driver, every event's actions, and those of a Tick
    at each deadline the core asks for before 2,000 s, by its time."""
    p = preset("gfs")
    p.policies.hpspot.hp_evict_after_s = after or None
    g = Gangs(cluster(4, 4), p.policies)
    log = [g.submit(spec("r", "hp", 4, dur=300), 0.0), g.submit(spec("s", "spot", 4, dur=1e5), 0.0)]
    assert (g.nodes("r"), g.nodes("s")) == ({"n0"}, {"n1"})
    log.append(g.submit(spec("h", "hp", 4, dur=1e5), 100.0))
    log.append(g.finish("r", 300.0))
    log.append(g.submit(spec("h2", "hp", 4, dur=1e5), 400.0))
    ticks: dict[float, list[Action]] = {}
    while (due := g.core.next_deadline()) is not None and due < 2_000.0:
        ticks[due] = g.send(Tick(), due)
    return g, log, ticks


def test_hp_evict_after_waits_for_room_before_evicting() -> None:
    # GFS: h evicts s at once (n0 is full); r's end then leaves n0 to h2
    _, log, ticks = _evict_after_run(0.0)
    assert evicted(log[2]) == ["s"] and bound(log[2]) == ["h"] and bound(log[4]) == ["h2"]
    assert not any(ticks.values())
    # after 600 s: h takes no victim at 100 s, and r's end at 300 s gives it n0 without one;
    # h2 finds no free room either and evicts s when its 600 s are up (a Tick at 1,000 s)
    g, log, ticks = _evict_after_run(600.0)
    assert not evicted(log[2]) and bound(log[3]) == ["h"] and g.nodes("h") == {"n0"}
    assert not any(evicted(out) for out in log)
    assert {t: (evicted(out), bound(out)) for t, out in ticks.items() if out} == {
        1_000.0: (["s"], ["h2"])
    }
    assert g.core.jobs["h2"].queue_s == 600.0
