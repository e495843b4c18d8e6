"""The hp/spot core's speed indexes: a gang's plan kept incrementally, the bound on an HP
job's room (cards carrying no HP) that spares a blocked gang's searches, and the spot nodes
by reclaim room that spare a reclaim the scan of every spot node. Each must decide exactly
as the plain computation it replaces."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stoker.core import (
    JobSpec,
    JobState,
    JobSubmitted,
    PodReady,
    PodState,
    RankExited,
    RankStarted,
    StartPod,
    preset,
)
from stoker.core.config import Policies
from stoker.core.gfs import GFSConfig
from stoker.core.gfs.placement import (
    SCAN_CAP,
    BestFitScorer,
    FGDScorer,
    GangPlan,
    GFSScorer,
    GpuPoolIndex,
    NodeInfo,
)
from stoker.core.gfs.preemption import FGDVictims, FifoVictims, GFSVictims, LyraVictims
from stoker.core.gfs.quota import StaticQuota
from stoker.core.gfs.scheduler import HpSpotScheduler
from stoker.sim.gfs import Window, simulate
from stoker.sim.virtual import VirtualRuntime
from stoker.traces.base import Trace, TraceJob, TraceNode
from test_gfs import Gangs, _FlatForecaster, _job, bound, cluster, spec, static


def _recomputed(index: GpuPoolIndex, taken: dict[str, int], order: range) -> list:
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
    index = GpuPoolIndex("A", 8)
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
    GPU pool's count of nodes per such count stay what the books give, and never fewer than
    the cards really without an HP share (``HpSpotScheduler.check``, after every event)."""
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
    for ``job_id``'s room; ``bounded=False`` switches the bounds on an HP job's room off
    (cards without HP; free and whole-GPU spot cards)."""
    searches = [0]
    plan_free = HpSpotScheduler._plan_free

    def counted(sched, job, now):
        if job.id == job_id:
            searches[0] += 1
        return plan_free(sched, job, now)

    with monkeypatch.context() as m:
        m.setattr(HpSpotScheduler, "_plan_free", counted)
        if not bounded:
            m.setattr(GpuPoolIndex, "hp_slots", lambda self, need: 10**9)
            m.setattr(GpuPoolIndex, "reclaim_slots", lambda self, need: 10**9)
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
    assert g.core.hpspot._plan_free(job, 0.0) == _per_worker_walk(cl, "A", share, workers)
    walked = [gpu.id for gpu in cl.gpus_with_room("A", share)]
    assert sorted(walked) == sorted(c.id for c in cards if c.free >= share - EPS)
    buckets = [min(20, int(cl.gpus[c].free * 20 + EPS)) for c in walked]
    assert buckets == sorted(buckets)


# ---------------------------------------------------------------- reclaim by room

_CHOOSERS = {
    "fifo": (FifoVictims, BestFitScorer),
    "fgd": (FGDVictims, FGDScorer),
    "gfs": (GFSVictims, GFSScorer),
    "lyra": (LyraVictims, GFSScorer),
}


def _idle_pod(g: Gangs, job: str, at: float) -> None:
    """A pool job of its own tag run to its end: its pod stays warm, idle."""
    acts = g.core.handle(JobSubmitted(JobSpec(job, "u", "p", job)), at)
    pod = next(a.pod for a in acts if isinstance(a, StartPod))
    g.send(PodReady(pod), at + 1)
    g.send(RankStarted(job), at + 1)
    g.send(RankExited(job), at + 2)
    assert g.core.pods[pod].state is PodState.WARM


def _reclaims(g: Gangs, now: float) -> list:
    """What a reclaim would stop and evict for HP requests of every whole-GPU shape, each
    as the victims' chooser (free room first, and free nodes among the candidates)."""
    sched = g.core.hpspot
    idle = g.core.warm.idle_cards("A")
    out = []
    for need, workers in ((1, 1), (2, 1), (4, 1), (8, 1), (1, 3), (2, 2), (4, 2)):
        job = _job(f"probe-{need}x{workers}", "hp", need, workers)
        for free_first in (True, False):
            plan = sched.planner.plan(
                job, idle, now, spot=True, blocked=frozenset(), free_first=free_first
            )
            out.append(plan and ([p.id for p in plan.idle_pods], list(plan.victims)))
    return out


@settings(max_examples=40, deadline=None)
@given(
    chooser=st.sampled_from(sorted(_CHOOSERS)),
    idle_pods=st.integers(0, 2),
    ops=st.lists(
        st.tuples(
            st.sampled_from(["hp", "spot", "spot", "spot"]),
            st.sampled_from([0.5, 1, 1, 2, 4, 8]),
            st.integers(1, 3),
            st.integers(0, 5),
        ),
        min_size=1,
        max_size=40,
    ),
)
def test_reclaim_from_the_room_index_decides_as_the_scan_of_every_spot_node(
    chooser, idle_pods, ops
) -> None:
    """Spot and HP jobs of every shape start and end on nodes of 8, 4 and 2 GPUs, a few
    idle warm pods among them; after every event, reclaims for HP requests of every
    whole-GPU shape stop and evict what they do when every spot node is a candidate (the
    chooser's ``reads`` set to ``all``). ``HpSpotScheduler.check`` (after every event)
    recomputes the room index from the books."""
    victims, scorer = _CHOOSERS[chooser]
    config = GFSConfig(quota=StaticQuota(1.0), victims=victims(), scorer=scorer())
    g = Gangs(cluster(8, 8, 8, 4, 8, 4, 2, 8, 8, 4), Policies(hpspot=config))
    for i in range(idle_pods):
        _idle_pod(g, f"pool{i}", 3.0 * i)
    running: list[str] = []
    for i, (cls, req, workers, end) in enumerate(ops):
        now = 10.0 + i
        if end == 0 and running:
            g.finish(running.pop(0), now)
        elif req * workers <= 40:
            g.submit(spec(f"j{i}", cls, req, workers, dur=1e6), now)
        running = [j for j, job in g.core.jobs.items() if job.state is JobState.RUNNING]
        indexed = _reclaims(g, now)
        with pytest.MonkeyPatch.context() as m:
            m.setattr(victims, "reads", "all")
            assert indexed == _reclaims(g, now)


def _fleet_trace() -> Trace:
    """Two GPU pools of 8-, 4- and 2-GPU nodes, busy with HP and spot jobs of every shape."""
    rng = np.random.default_rng(11)
    nodes = [TraceNode(f"a{i}", "A", int(g)) for i, g in enumerate(rng.choice([2, 4, 8], 24))]
    nodes += [TraceNode(f"b{i}", "B", 8) for i in range(6)]
    jobs = []
    for i in range(700):
        cls = "hp" if rng.random() < 0.4 else "spot"
        jobs.append(
            TraceJob(
                f"j{i}",
                f"t{i % 3}",
                "A" if rng.random() < 0.8 else "B",
                float(rng.choice([0.5, 1, 1, 2, 4, 8])),
                int(rng.choice([1, 1, 1, 2, 3])),
                float(rng.uniform(0, 3 * 86400)),
                float(rng.uniform(600, 30_000)),
                cls,
            )
        )
    return Trace("fleet", nodes, jobs)


@pytest.mark.parametrize("name", ["yarn-cs", "fgd", "gfs", "lyra", "gfs-simple-preemption"])
def test_a_simulation_decides_the_same_with_the_room_index(monkeypatch, name) -> None:
    """A busy simulation makes the same actions, in the same order, when every reclaim
    looks at every spot node (each chooser's ``reads`` set to ``all``), and it evicts."""
    trace = _fleet_trace()
    window = Window(0.0, 86400.0, 3 * 86400.0)

    def run() -> list[str]:
        log: list[str] = []
        carry_out = VirtualRuntime.carry_out

        def logged(runtime, action):
            log.append(f"{runtime.sim.now:.3f} {action!r}")
            return carry_out(runtime, action)

        with monkeypatch.context() as m:
            m.setattr(VirtualRuntime, "carry_out", logged)
            result = simulate(trace, preset(name), window, forecaster=_FlatForecaster())
        assert result.metrics["preemptions_per_spot_job"] > 0
        return log

    indexed = run()
    for cls in (FifoVictims, FGDVictims, GFSVictims, LyraVictims):
        monkeypatch.setattr(cls, "reads", "all")
    assert indexed == run()
