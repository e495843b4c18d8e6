"""The hp/spot core's speed indexes: a gang's plan kept incrementally, and the bound on an HP
job's room (cards carrying no HP) that spares a blocked gang's searches. Each must decide
exactly as the plain computation it replaces."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from stoker.core import JobState
from stoker.core.gfs.placement import SCAN_CAP, GangPlan, NodeInfo, PoolIndex
from stoker.core.gfs.scheduler import GangScheduler
from test_gfs import Gangs, _job, bound, cluster, spec, static


def _recomputed(index: PoolIndex, taken: dict[str, int], order: range) -> list:
    """The plan's buckets by their definition: per free count, the first SCAN_CAP nodes of
    the bucket not in the plan, then the planned nodes left with that many GPUs."""
    out = []
    for f in order:
        head = [n for n in index.by_free[f] if n not in taken][:SCAN_CAP]
        planned = [n for n, t in taken.items() if index.nodes[n].full_free - t == f]
        if head or planned:
            out.append((f, head + planned))
    return out


@settings(max_examples=60, deadline=None)
@given(
    free=st.lists(st.integers(0, 8), min_size=1, max_size=200),
    takes=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 8)), max_size=120),
    need=st.integers(1, 8),
)
def test_gang_plan_buckets_equal_a_recomputed_index(free, takes, need) -> None:
    """After any sequence of planned workers (on nodes the buckets offered, or any node, as
    a reclaim plans on spot nodes), the plan's buckets are the recomputed ones; a plan built
    from the same GPUs at once gives them too."""
    index = PoolIndex("A", 8)
    for i, f in enumerate(free):
        index.add(NodeInfo(f"n{i}", "A", i, 8, full_free=f))
    order = range(need, 9)
    plan = GangPlan(index)
    for pick, count in takes:
        offered = [n for _, bucket in plan.buckets(order) for n in bucket]
        # mostly a node the buckets offered (placement), else any node (a reclaim's target)
        name = offered[pick % len(offered)] if offered and pick % 4 else f"n{pick % len(free)}"
        plan.take(name, count)
        assert list(plan.buckets(order)) == _recomputed(index, plan.taken, order)
    again = GangPlan(index, dict(plan.taken))
    assert list(again.buckets(order)) == _recomputed(index, plan.taken, order)


@settings(max_examples=25, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["hp", "spot"]),
            st.sampled_from([0.25, 0.5, 1, 2, 4, 8]),
            st.integers(1, 3),
            st.booleans(),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_cards_without_hp_follow_the_books(ops) -> None:
    """Jobs of every shape start and end: every node's count of cards without HP and the
    pool's count of nodes per such count stay what the books give, and never fewer than
    the cards really without an HP share (``GangScheduler.check``, after every event)."""
    g = Gangs(cluster(8, 8, 4, 2), static())
    running: list[str] = []
    for i, (cls, req, workers, end) in enumerate(ops):
        now = float(i)
        if end and running:
            g.finish(running.pop(0), now)
        elif req * workers <= 22:
            g.submit(spec(f"j{i}", cls, req, workers, dur=1e6), now)
            if g.core.jobs[f"j{i}"].state is JobState.RUNNING:
                running.append(f"j{i}")
    g.core.check()


def test_a_blocked_gang_is_searched_only_when_cards_without_hp_could_hold_it(
    monkeypatch,
) -> None:
    """A gang of 2 x 8 GPUs waits behind HP work on both nodes. Ending HP jobs one at a
    time, its room is searched only once two nodes carry no HP (spot there is room: it is
    evicted); with that bound switched off it is searched after every end, and the
    decisions are the same."""

    def scenario(g: Gangs) -> list:
        g.submit(spec("big", "hp", 6, dur=1e6), 0.0)  # n0: 6 of 8
        for i in range(3):  # n1: three 1-GPU HP jobs
            g.submit(spec(f"b{i}", "hp", 1, dur=1e6), 0.0)
        g.submit(spec("s", "spot", 2, dur=1e6), 0.0)  # n0's last 2 cards
        g.submit(spec("gang", "hp", 8, 2, dur=1e6), 1.0)
        return [
            bound(g.finish(job, float(t))) for t, job in enumerate(["b0", "b1", "b2", "big"], 2)
        ]

    bounded, log = _searches(monkeypatch, "gang", True, (8, 8), scenario)
    every, log_every = _searches(monkeypatch, "gang", False, (8, 8), scenario)
    assert log == log_every == [[], [], [], ["gang"]]
    # only the last end (big's) leaves two nodes without HP: the gang evicts the spot job
    # and starts once its pod is gone (two searches); unbounded, it is searched when
    # submitted and at each end too
    assert (bounded, every) == (2, 2 + 4)


def _searches(
    monkeypatch, job_id: str, bounded: bool, nodes: tuple[int, ...], scenario
) -> tuple[int, list]:
    """Run ``scenario`` (it returns its log) on a cluster of ``nodes`` counting the searches
    for ``job_id``'s room; ``bounded=False`` switches the bound on an HP job's room off."""
    searches = [0]
    plan_free = GangScheduler._plan_free

    def counted(sched, job, now):
        if job.id == job_id:
            searches[0] += 1
        return plan_free(sched, job, now)

    with monkeypatch.context() as m:
        m.setattr(GangScheduler, "_plan_free", counted)
        if not bounded:
            m.setattr(PoolIndex, "hp_slots", lambda self, need: 10**9)
        log = scenario(Gangs(cluster(*nodes), static()))
    return searches[0], log


def test_a_blocked_fractional_hp_job_is_searched_only_when_a_card_could_hold_it(
    monkeypatch,
) -> None:
    """An HP job of half a card waits while both cards carry 0.75 of HP: it is not
    searched when submitted, nor when a spot job's end frees room it still cannot use; the
    HP end is searched and starts it. Unbounded, each is searched; the same decisions."""

    def scenario(g: Gangs) -> list:
        g.submit(spec("h1", "hp", 0.75, dur=1e6), 0.0)
        g.submit(spec("h2", "hp", 0.75, dur=1e6), 0.0)
        g.submit(spec("s", "spot", 0.25, dur=1e6), 0.0)
        g.submit(spec("f", "hp", 0.5, dur=1e6), 1.0)
        return [bound(g.finish("s", 2.0)), bound(g.finish("h1", 3.0))]

    bounded, log = _searches(monkeypatch, "f", True, (2,), scenario)
    every, log_every = _searches(monkeypatch, "f", False, (2,), scenario)
    assert log == log_every == [[], ["f"]]
    assert (bounded, every) == (1, 3)


def _per_worker_walk(cl, model: str, share: float, workers: int) -> list | None:
    """A fractional gang's plan by its definition: each worker takes the first card of a
    fresh tightest-first walk with room beside the workers planned before it."""
    from stoker.core.model import EPS

    extra: dict[str, float] = {}
    plan = []
    for _ in range(workers):
        for gpu in cl.gpus_with_room(model, share):
            if gpu.free - extra.get(gpu.id, 0.0) >= share - EPS:
                extra[gpu.id] = extra.get(gpu.id, 0.0) + share
                plan.append((gpu.node, (gpu.id,), share))
                break
        else:
            return None
    return plan


_SHARES = [0.05, 0.1, 0.2, 0.25, 0.1 + 0.2, 1 / 3, 0.4, 0.5, 0.7]


@settings(max_examples=80, deadline=None)
@given(
    held=st.lists(st.lists(st.sampled_from([0.0, *_SHARES]), max_size=3), min_size=1, max_size=40),
    share=st.sampled_from(_SHARES),
    workers=st.integers(1, 12),
)
def test_a_fractional_gang_plans_in_one_walk_as_a_walk_per_worker(held, share, workers) -> None:
    """The fractional plan walks the cards once for the whole gang; it picks exactly the
    cards a fresh walk per worker picks (the earlier quadratic form), and the walk itself
    yields exactly the cards with room, tightest bucket first."""
    from stoker.core.model import EPS, JobClass

    cl = cluster(*[2] * ((len(held) + 1) // 2))
    cards = list(cl.gpus.values())
    for i, shares in enumerate(held):
        for k, s in enumerate(shares):
            if s and cards[i].used + s <= 1.0:
                cl.allocate(cards[i].id, f"other-{i}-{k}", s)
    g = Gangs(cl, "chronus")
    job = g.core.jobs.setdefault("f", _job("f", "spot", share, workers))
    assert job.job_class is JobClass.SPOT and job.fractional
    assert g.core.gangs._plan_free(job, 0.0) == _per_worker_walk(cl, "A", share, workers)
    walked = [gpu.id for gpu in cl.gpus_with_room("A", share)]
    assert sorted(walked) == sorted(c.id for c in cards if c.free >= share - EPS)
    buckets = [min(20, int(cl.gpus[c].free * 20 + EPS)) for c in walked]
    assert buckets == sorted(buckets)
