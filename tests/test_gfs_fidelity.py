"""GFS and its baselines as the authors' simulator builds them (Xu-Sheng-lin/GFS-asplos-26;
docs/evaluation/gfs.md, "Where we differ", one test per item), each on a small hand-built
cluster driven through the one core. Every test states what the earlier behaviour did, so it
fails on it."""

from __future__ import annotations

import pytest

from stoker.core import ForecastUpdated, JobState, Tick
from stoker.core.gfs.placement import fgd_frag_delta
from stoker.core.gfs.preemption import Candidate, GFSVictims, PreemptContext, two_pointer
from stoker.core.registry import preset
from stoker.sim.gfs import Window, simulate
from stoker.traces.base import Trace, TraceJob, TraceNode
from test_gfs import Gangs, _job, bound, cluster, evicted, spec

# ---------------------------------------------------------------- 1. baselines gate spot


@pytest.mark.parametrize("name", ["yarn-cs", "lyra", "fgd"])
def test_baselines_gate_spot_with_the_forecast_quota(name: str) -> None:
    # HP forecast N(5, 0) on 8 GPUs: quota 3 (fifo_spot.py, lyra.py, fgd.py gate spot with
    # GFS's quota); before, these baselines had no quota and started both jobs
    assert preset(name).forecaster == "default"
    g = Gangs(cluster(8), name)
    g.send(ForecastUpdated("t", "A", (5.0,), (0.0,)), 0.0)
    assert "a" in bound(g.submit(spec("a", "spot", 2, dur=1e4), 0.0))
    assert "b" not in bound(g.submit(spec("b", "spot", 2, dur=1e4), 1.0))


# ---------------------------------------------------------------- 2. Chronus leases


def test_chronus_releases_every_job_each_lease() -> None:
    g = Gangs(cluster(8), "chronus")
    g.submit(spec("h", "hp", 4, dur=1e5), 0.0)
    g.submit(spec("s", "spot", 4, dur=1e5), 0.0)
    assert set(bound(g.send(Tick(), 0.0))) == {"h", "s"}
    for t in (300.0, 600.0, 900.0):
        assert not bound(g.send(Tick(), t))
    # at the lease boundary both (HP too, though nothing waits) go back and are re-placed;
    # before, only spot went back, and only when another job waited
    out = g.send(Tick(), 1200.0)
    assert set(bound(out)) == {"h", "s"}
    for jid in ("h", "s"):
        job = g.core.jobs[jid]
        assert job.state is JobState.RUNNING
        assert job.remaining == pytest.approx(1e5 - 1200) and job.overhead == 120.0
        assert job.evictions == 0  # a lease return is not an eviction
    assert g.core.hpspot.ledgers["A"].failed == 0


def test_a_lease_flush_re_places_on_the_whole_room_and_keeps_pods_in_place() -> None:
    """As the authors' flush (``release_resource`` of every job, then ``alloc_batch_jobs``),
    the round's pass re-places the returned jobs on the whole room; a job placed on its own
    cards again keeps its pods: its returned run is killed and, once its ranks are out, it
    is bound again into the same pods (no StopPod, no StartPod). Before, the returned jobs'
    pods held their cards until gone, so a first pass moved ``h`` onto the cards that were
    free before the flush, and every job's pods were stopped and new ones started."""
    from stoker.core import StartPod, StopPod

    g = Gangs(cluster(8), "chronus")
    g.submit(spec("h", "hp", 4, dur=1e5), 0.0)
    g.send(Tick(), 0.0)
    pods, cards = list(g.core.jobs["h"].pods), g.cards("h")
    out = g.send(Tick(), 1200.0)
    assert not [a for a in out if isinstance(a, (StopPod, StartPod))]
    assert bound(out) == ["h"]
    job = g.core.jobs["h"]
    assert job.pods == pods and g.cards("h") == cards
    assert job.state is JobState.RUNNING
    assert job.remaining == pytest.approx(1e5 - 1200) and job.overhead == 120.0
    assert job.queue_s == 0.0 and job.evictions == 0


def test_a_lease_flush_moves_a_job_with_new_pods() -> None:
    """Re-placed in the queue's order (larger requests first), a job whose cards another
    takes moves: its pods stop and new ones start; the other keeps its own."""
    from stoker.core import StartPod, StopPod

    g = Gangs(cluster(8), "chronus")
    g.submit(spec("a", "hp", 2, dur=1e5), 0.0)
    g.send(Tick(), 0.0)
    g.submit(spec("b", "hp", 4, dur=1e5), 10.0)
    g.send(Tick(), 300.0)
    before = {j: (list(g.core.jobs[j].pods), g.cards(j)) for j in ("a", "b")}
    assert before["a"][1] == ["n0/0", "n0/1"] and before["b"][1][0] == "n0/2"
    out = g.send(Tick(), 1200.0)
    stopped = {a.pod for a in out if isinstance(a, StopPod)}
    started = [a for a in out if isinstance(a, StartPod)]
    # b (4 GPUs) goes first, onto the first free cards: a's; a moves past it
    assert g.cards("b") == ["n0/0", "n0/1", "n0/2", "n0/3"]
    assert g.cards("a") == ["n0/4", "n0/5"]
    assert stopped == set(before["a"][0]) | set(before["b"][0])
    assert len(started) == 2 and sorted(bound(out)) == ["a", "b"]
    for jid in ("a", "b"):
        assert g.core.jobs[jid].state is JobState.RUNNING


def test_chronus_never_preempts_spot_for_hp() -> None:
    g = Gangs(cluster(4), "chronus")
    g.submit(spec("s", "spot", 4, dur=1e5), 0.0)
    g.send(Tick(), 0.0)
    g.submit(spec("h", "hp", 4, dur=10), 100.0)
    out = g.send(Tick(), 300.0)
    assert not evicted(out) and g.core.jobs["h"].state is JobState.QUEUED
    out = g.send(Tick(), 1200.0)  # the lease flush frees the node: h is placed first
    assert "h" in bound(out) and g.core.jobs["s"].state is JobState.QUEUED


# ---------------------------------------------------------------- 3. the demand series
# (test_gfs.py: test_demand_series_is_running_hp_gpus)

# ---------------------------------------------------------------- 4. preemption


def _victim(jid: str, gpus: int, run_start: float = 0.0):
    job = _job(jid, "spot", gpus)
    job.run_start = run_start
    return job


def test_two_pointer_victims_alternate_from_both_ends() -> None:
    # costs 9, 7, 5, 1 holding 3, 1, 1, 1 cards, 4 cards needed, none free: the walk
    # evicts 9 (sparing it leaves 3), then from the cheap end spares 1 and 5, then evicts 7.
    # A one-pass spare from the expensive end (before) evicted 9 and 1 instead.
    jobs = {c: _victim(f"c{c}", 1) for c in (9, 7, 5, 1)}
    units = {9: 3.0, 7: 1.0, 5: 1.0, 1: 1.0}
    cand = Candidate("n", 0, 0.0, [(jobs[c], units[c]) for c in (9, 7, 5, 1)])
    cost = {f"c{c}": float(c) for c in jobs}
    chosen = two_pointer(cand, 4.0, lambda g: cost[g.id])
    assert [g.id for g in chosen] == ["c9", "c7"]


def test_two_pointer_counts_a_shared_card_once() -> None:
    # a (cost 9) and b (cost 1) share card c1, c (cost 5) holds c2; one card needed, none
    # free. Sparing a loses c1, so c must go (c2 is then the room); b is spared: c1 stays a's.
    # Counted as a sum (before: each fractional job one card of its own) the walk spared a
    # and c and evicted b, which frees no card while a holds c1.
    a, b, c = (_victim(j, 1) for j in "abc")
    holds = {"a": frozenset({"c1"}), "b": frozenset({"c1"}), "c": frozenset({"c2"})}
    cand = Candidate("n", 0, 0.0, [(a, 1.0), (b, 1.0), (c, 1.0)], holds=holds)
    assert cand.no_hp == 2.0
    cost = {"a": 9.0, "b": 1.0, "c": 5.0}
    assert two_pointer(cand, 1.0, lambda g: cost[g.id]) == [c]


def _shared_card(policy: str, beside: list[tuple[str, str, float, float]]) -> tuple[Gangs, list]:
    """n0 (2 cards): HP h0 holds card 0, the jobs ``beside`` (id, class, share, submit)
    share card 1; a 1-GPU HP job h comes at 4000 s: the core and what h's arrival did."""
    g = Gangs(cluster(2), policy)
    g.submit(spec("h0", "hp", 1, dur=1e6), 0.0)
    for jid, cls, share, at in beside:
        g.submit(spec(jid, cls, share, dur=1e6), at)
    assert {c for jid, *_ in beside for c in g.cards(jid)} == {"n0/1"}
    return g, g.submit(spec("h", "hp", 1, dur=10), 4000.0)


@pytest.mark.parametrize("name", ["gfs", "yarn-cs", "lyra", "fgd"])
def test_a_whole_gpu_hp_worker_evicts_fractional_spot_on_a_card_without_hp(name: str) -> None:
    # spot s1 (0.5) and s2 (0.25) share card 1, the only card h fits on: the authors count
    # every card carrying no HP (``check_free_gpus_with_preemption``), fractional spot work
    # on it included, and evict every job there. Before, fractional spot was no whole-GPU
    # worker's victim: h waited
    fractional = [("s1", "spot", 0.5, 0.0), ("s2", "spot", 0.25, 0.0)]
    g, out = _shared_card(name, fractional)
    assert sorted(evicted(out)) == ["s1", "s2"]
    assert g.core.jobs["h"].state is JobState.RUNNING and g.cards("h") == ["n0/1"]
    # stoker's option: whole cards only, as before (h waits, the fractional jobs run)
    g, out = _shared_card(f"{name}+evict_shared_cards=false", fractional)
    assert not evicted(out) and g.core.jobs["h"].state is JobState.QUEUED


def test_a_card_shared_with_hp_or_young_spot_is_no_victim_card() -> None:
    # card 1 holds fractional spot beside a fractional HP job: not a card without HP, so
    # h has no victim and waits (as the authors': HP on it rules it out)
    g, out = _shared_card("gfs", [("hf", "hp", 0.5, 0.0), ("s1", "spot", 0.25, 0.0)])
    assert not evicted(out) and g.core.jobs["h"].state is JobState.QUEUED


def test_preemption_takes_the_fewest_no_hp_cards_first() -> None:
    g = Gangs(cluster(8, 4), "gfs")
    g.submit(spec("s1", "spot", 4, dur=1e6), 0.0)  # n1 (tight packing)
    g.submit(spec("s0", "spot", 8, dur=1e6), 3000.0)  # n0
    # s1 has run far longer (the costlier victim), but n1 has 4 no-HP cards to n0's 8: the
    # best-fit filter comes before any cost (before: the cheaper victim, s0 on n0)
    out = g.submit(spec("h", "hp", 4), 3500.0)
    assert evicted(out) == ["s1"] and g.nodes("h") == {"n1"}


def test_victim_cost_is_the_time_since_the_run_started() -> None:
    # a ran 3650 s (a checkpoint at 3600), b 650 s: the authors' cost (GPUs x time since the
    # run's start) evicts b, though a has lost less since its last checkpoint
    a, b = _victim("a", 4, 0.0), _victim("b", 4, 3000.0)
    cands = [Candidate("n0", 0, 0.0, [(a, 4.0)]), Candidate("n1", 1, 0.0, [(b, 4.0)])]
    ctx = PreemptContext(now=3650.0, rate_after=lambda k: 0.0, gpu_pool_gpus=8, window_s=86400.0)
    assert GFSVictims().choose(cands, 4.0, ctx)[1] == [b]  # type: ignore[index]


def test_fractional_hp_prefers_cards_with_hp() -> None:
    g = Gangs(cluster(1, 1), "gfs")
    g.submit(spec("h", "hp", 0.25, dur=1e5), 0.0)  # n0/0
    g.submit(spec("a", "spot", 0.5, dur=1e5), 0.0)  # beside it on n0/0 (the fullest card)
    g.submit(spec("b", "spot", 0.75, dur=1e5), 0.0)  # n1/0
    assert g.cards("a") == ["n0/0"] and g.cards("b") == ["n1/0"]
    # frag_preempt: a card already carrying HP with room comes first (before: only cards
    # on nodes without HP, so b went)
    out = g.submit(spec("h2", "hp", 0.5, dur=10), 5.0)
    assert evicted(out) == ["a"] and g.cards("h2") == ["n0/0"]


def _no_hp_card(policy: str) -> tuple[Gangs, list]:
    """n0's one card shared by spot s1 (0.5) and s2 (0.25); a 0.5-GPU HP job h comes at
    4000 s: the core and what h's arrival did."""
    g = Gangs(cluster(1), policy)
    g.submit(spec("s1", "spot", 0.5, dur=1e6), 0.0)
    g.submit(spec("s2", "spot", 0.25, dur=1e6), 0.0)
    assert g.cards("s1") == g.cards("s2") == ["n0/0"]
    return g, g.submit(spec("h", "hp", 0.5, dur=10), 4000.0)


@pytest.mark.parametrize("name", ["gfs", "yarn-cs", "lyra", "fgd"])
def test_a_fractional_hp_worker_without_an_hp_card_takes_a_whole_card(name: str) -> None:
    # no card carries HP: the authors' ``frag_preempt`` finds nothing and
    # ``place_with_preemption`` falls back to the whole-card path with one card, evicting
    # every job on it (before: spot on the card in order until h fit, one job)
    g, out = _no_hp_card(name)
    assert sorted(evicted(out)) == ["s1", "s2"]
    assert g.core.jobs["h"].state is JobState.RUNNING and g.cards("h") == ["n0/0"]
    # stoker's earlier rule, an option: a share of the card, one victim
    g, out = _no_hp_card(f"{name}+frac_hp_whole_card=false")
    assert len(evicted(out)) == 1
    assert g.core.jobs["h"].state is JobState.RUNNING and g.cards("h") == ["n0/0"]


# ---------------------------------------------------------------- 5. queue order


def _queued(policy: str, free: int, jobs: list[tuple[str, int, int]]) -> list[str]:
    """A 4-GPU node with ``4 - free`` GPUs held by HP; ``jobs`` (id, GPUs, workers) queued
    in that order while it was full; the HP ends: which spot jobs start, in order."""
    g = Gangs(cluster(4), policy)
    g.submit(spec("h", "hp", 4 - free, dur=1e5), 0.0)
    if free:
        g.submit(spec("h2", "hp", free, dur=10), 0.0)
    for i, (jid, gpus, workers) in enumerate(jobs):
        g.submit(spec(jid, "spot", gpus, workers, dur=1e5), 1.0 + i)
    return bound(g.finish("h2", 20.0)) if free else []


def test_queue_order_and_skip_rule_per_policy() -> None:
    # quota 4 (no forecast yet), 3 GPUs free
    jobs = [("a", 1, 1), ("d", 4, 1), ("b", 3, 1), ("c", 1, 1)]
    # GFS: largest request first; d (4) cannot be placed and only its request is skipped:
    # b starts, then a (1) fails and the rest of request 1 is skipped
    assert _queued("gfs", 3, jobs) == ["b"]
    # Lyra: the same order, but the first failure (d) ends the pass
    assert _queued("lyra", 3, jobs) == []
    # YARN-CS and FGD: arrival order; a starts, d is over the quota (passed over, not a
    # failure), b cannot be placed and ends the pass: c, which would fit, is not tried
    assert _queued("yarn-cs", 3, jobs) == ["a"]
    assert _queued("fgd", 3, jobs) == ["a"]
    # one request, two gangs: GFS tries fewer workers first (before: more workers first)
    same = [("x", 1, 2), ("y", 1, 1)]
    assert _queued("gfs", 2, same) == ["y"]
    assert _queued("lyra", 2, same) == ["x"]


# ---------------------------------------------------------------- 6. restart overhead


def test_restart_overhead_per_worker_and_for_the_preemptor() -> None:
    g = Gangs(cluster(4, 4, 4), "gfs")
    g.submit(spec("s", "spot", 4, 3, dur=1e5), 0.0)  # 12 GPUs, 4 a worker
    out = g.submit(spec("h", "hp", 4, dur=100), 500.0)
    assert evicted(out) == ["s"]
    # 40 s: the per-worker request is 4 (before: 60 s on the job's 12 GPUs)
    assert g.core.jobs["s"].overhead == 40.0
    # the preempting HP job restarts too (before: nothing)
    assert g.core.jobs["h"].overhead == 40.0


# ---------------------------------------------------------------- 7. node cost terms


def test_node_cost_counts_periods_since_start_over_the_window() -> None:
    day = 86400.0
    g = Gangs(cluster(4, 4), "gfs")
    g.core.hpspot.ledgers["A"].record(0.0, succeeded=10)  # settled two days ago
    now = 2 * day
    g.submit(spec("a", "spot", 4, dur=1e6), now - 37_800.0)  # n0, 10.5 h
    g.submit(spec("b1", "spot", 2, dur=1e6), now - 100.0)  # n1
    g.submit(spec("b2", "spot", 2, dur=1e6), now - 100.0)  # n1
    # since the start: n0 costs 1/11 + 5 * 4 * 37800 / (8 * 30 d) = 0.127, n1 (two victims)
    # 2/12 + ~0 = 0.167: a goes. Before (the last 24 h, no periods; lost work since the
    # checkpoint over 24 h) n0 cost 1 + 0.052 and n1 1 + 0.003: b1 and b2 went
    out = g.submit(spec("h", "hp", 4), now)
    assert evicted(out) == ["a"]
    config = g.core.hpspot.config
    assert config.rate_window_s is None and config.cost_window_s == 30 * day + 1


# ---------------------------------------------------------------- 8. YARN-CS


def test_yarn_cs_blocks_the_hp_pass_only() -> None:
    g = Gangs(cluster(4), "yarn-cs")
    g.submit(spec("h0", "hp", 3, dur=1e5), 0.0)
    g.submit(spec("h1", "hp", 4, dur=10), 1.0)  # cannot run: blocks the HP queue
    # the spot pass is its own (before: the whole GPU pool's pass stopped at h1)
    assert "s" in bound(g.submit(spec("s", "spot", 1, dur=10), 2.0))


def test_yarn_cs_preempts_as_fifo_spot() -> None:
    g = Gangs(cluster(8, 4), "yarn-cs")
    # best fit: the node with the fewest free GPUs that fit (before: the most free)
    g.submit(spec("s1", "spot", 2, dur=1e5), 0.0)
    assert g.nodes("s1") == {"n1"}
    g.submit(spec("s2", "spot", 2, dur=1e5), 0.0)
    assert g.cards("s1") == ["n1/0", "n1/1"] and g.nodes("s2") == {"n1"}
    g.submit(spec("s3", "spot", 8, dur=1e5), 0.0)  # n0 full of spot
    # HP of 1: the node of fewest no-HP cards (n1), the jobs on its first card only
    # (before: every spot job on the first node that fitted, n0)
    out = g.submit(spec("h", "hp", 1, dur=10), 5.0)
    assert evicted(out) == ["s1"]


@pytest.mark.parametrize(("name", "evicts"), [("yarn-cs", True), ("fgd", True), ("gfs", False)])
def test_hp_goes_straight_to_preemption_in_yarn_cs_and_fgd(name: str, evicts: bool) -> None:
    g = Gangs(cluster(8, 4), name)
    g.submit(spec("s", "spot", 2, dur=1e5), 0.0)
    assert g.nodes("s") == {"n1"}
    # n0 has 8 free GPUs, but fifo_spot.py and fgd.py send HP straight to
    # place_with_preemption: n1's 4 no-HP cards are the best fit (and FGD's least
    # fragmenting), so s goes; GFS places first (before: every baseline placed first)
    out = g.submit(spec("h", "hp", 4, dur=10), 5.0)
    assert (evicted(out) == ["s"]) is evicts
    assert g.nodes("h") == ({"n1"} if evicts else {"n0"})


# ---------------------------------------------------------------- 9. Lyra and FGD victims


def test_lyra_takes_the_highest_cost_cards() -> None:
    g = Gangs(cluster(4), "lyra")
    g.submit(spec("one", "spot", 1, 1, dur=1e5), 0.0)  # card cost 1/(1 x 1)
    g.submit(spec("three", "spot", 1, 3, dur=1e5), 0.0)  # each card 1/(3 x 1)
    # lyra.py takes the costliest card with all its jobs: "one" (before: "one" was spared
    # as the costlier gang and "three" went)
    out = g.submit(spec("h", "hp", 1, dur=10), 5.0)
    assert evicted(out) == ["one"]


def test_fgd_preempts_on_least_fragmenting_node() -> None:
    # 2 of 8 no-HP cards grow fgd.py's fragmentation by -0.65, 2 of 4 by -1.15
    assert fgd_frag_delta(8, 2) == pytest.approx(-0.65)
    assert fgd_frag_delta(4, 2) == pytest.approx(-1.15)
    g = Gangs(cluster(8, 4), "fgd")
    g.submit(spec("s0", "spot", 8, dur=1e5), 0.0)
    g.submit(spec("s1", "spot", 4, dur=1e5), 0.0)
    # before: the first node that fitted (n0)
    out = g.submit(spec("h", "hp", 2, dur=10), 5.0)
    assert evicted(out) == ["s1"] and g.nodes("h") == {"n1"}


# ---------------------------------------------------------------- 11. the window gate


def test_quota_and_preemption_only_inside_the_window() -> None:
    g = Gangs(cluster(4), "gfs")
    g.core.hpspot.config.window = (100.0, 200.0)
    g.send(ForecastUpdated("t", "A", (2.0,), (0.0,)), 0.0)  # quota 2
    g.submit(spec("h0", "hp", 2, dur=180), 0.0)
    # before the window no spot job starts (before: it started at once)
    assert not bound(g.submit(spec("s1", "spot", 2, dur=1e4), 0.0))
    assert g.core.next_deadline() == 100.0
    assert "s1" in bound(g.send(Tick(), 100.0))  # the window opens: a pass
    assert not bound(g.submit(spec("s2", "spot", 2, dur=1e4), 150.0))  # over the quota
    out = g.submit(spec("h1", "hp", 2, dur=10), 150.0)  # inside: HP preempts
    assert evicted(out) == ["s1"]
    g.finish("h1", 160.0)  # the quota (2) admits one of s1, s2 again
    out = g.finish("h0", 180.0)
    assert len(g.core.hpspot.running_spot["A"]) == 1
    # after the window no quota: both run
    out = g.send(Tick(), 200.0)
    assert len(g.core.hpspot.running_spot["A"]) == 2
    always = Gangs(cluster(4), "gfs")  # window None: from the start (stoker's)
    assert "s1" in bound(always.submit(spec("s1", "spot", 2, dur=1e4), 0.0))


# ---------------------------------------------------------------- 10. the authors' metrics


def test_authors_metrics_by_hand() -> None:
    # one 2-GPU node, the window [3600, 4600): an HP job of half a card runs through it; a
    # spot job of one card runs from 0 to 4000 (its first hour succeeds at 3600, its last
    # 400 s period at completion)
    rows = [
        TraceJob("s", "t", "A", 1.0, 1, 0.0, 4000.0, "spot"),
        TraceJob("h", "t", "A", 0.5, 1, 3600.0, 1000.0, "hp"),
    ]
    trace = Trace("tiny", [TraceNode("n", "A", 2)], rows)
    m = simulate(trace, preset("gfs"), Window(0.0, 3600.0, 4600.0), gate="always").metrics
    # ours: shares as shares (half a card for 1000 s, the spot card for 400 s, of 2 x 1000)
    assert m["gpu_allocation_rate"] == pytest.approx((0.5 * 1000 + 400) / 2000)
    # theirs: a card with any share counts whole
    assert m["authors.gpu_allocation_rate"] == pytest.approx((1000 + 400) / 2000)
    # theirs: HP GPU-seconds in the window plus the spot GPU-seconds of the periods that
    # succeeded in it (the hour ending at 3600 and the last 400 s), over the capacity
    assert m["authors.useful_gpu_time_rate"] == pytest.approx((500 + 3600 + 400) / 2000)
