"""The core's shape refusal: a job that could never start on the cluster (even empty) is
refused at submit, naming the field, for every class; the counts of nodes by size it
reads follow the nodes that join and leave; a queued job a node's leaving made unable to
start waits aside (holding back nobody) and goes back to its queue when it fits again."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import Driver
from stoker.core import (
    Cluster,
    Core,
    CoreError,
    Failure,
    JobCancelled,
    JobEnded,
    JobSpec,
    NodeAdded,
    NodeRemoved,
    Profile,
)
from stoker.core.model import GPU, JobClass, JobState, Node
from stoker.core.shape import Refusal, cpu_refusal, gpu_refusal, worker_cards
from test_gfs import Gangs, bound, spec


def _nodes(*sizes: tuple[str, int]) -> Cluster:
    """A cluster of GPU pool "A" nodes named and sized as given."""
    return Cluster(
        [Node(name, "A", [GPU(f"{name}/{i}", name, i, "A") for i in range(n)]) for name, n in sizes]
    )


# ---------------------------------------------------------------- the functions alone


def test_each_gpu_refusal_names_its_field() -> None:
    assert gpu_refusal("A", {}, 1, 1.0, 1) == Refusal("gpu_model", "GPU pool A has no GPUs")
    assert gpu_refusal("A", {8: 0}, 1, 1.0, 1, gpu_pool_field="profile").field == "profile"
    big = gpu_refusal("A", {8: 2, 4: 1}, 16, 1.0, 1)
    assert big == Refusal(
        "gpus", "a worker takes 16 GPUs on one node; the largest node of GPU pool A has 8"
    )
    assert gpu_refusal("A", {8: 2}, 16, 1.0, 1, shape_field="profile").field == "profile"
    gang = gpu_refusal("A", {8: 2}, 8, 1.0, 3)
    assert gang == Refusal("workers", "3 workers x 8 GPUs = 24 GPUs; GPU pool A has 16")
    assert gpu_refusal("A", {8: 2}, 8, 1.0, 2) is None


def test_the_125_by_8_gang_on_77_eight_gpu_nodes() -> None:
    """The review's case: 1,000 GPUs fit the GPU pool's 1,558, but only 77 nodes hold 8."""
    sizes = {8: 77, 4: 200, 2: 71}
    assert sum(s * n for s, n in sizes.items()) == 1558
    why = gpu_refusal("GPU-series-1", sizes, 8, 1.0, 125)
    assert why is not None and why.field == "workers"
    assert "a node slot of 8 GPUs each" in why.reason and "hold 77 at once" in why.reason
    assert gpu_refusal("GPU-series-1", sizes, 8, 1.0, 77) is None
    # 4-GPU workers: two on each 8-GPU node, one on each 4-GPU node
    assert gpu_refusal("GPU-series-1", sizes, 4, 1.0, 354) is None
    assert gpu_refusal("GPU-series-1", sizes, 4, 1.0, 355).field == "workers"  # type: ignore[union-attr]
    # 3-GPU workers: one per 4-GPU node, two per 8-GPU node (the rest is left over)
    assert gpu_refusal("A", {3: 2}, 2, 1.0, 3).field == "workers"  # type: ignore[union-attr]


def test_fractional_workers_need_room_on_a_card_each() -> None:
    # 5 x 0.4 = 2 GPUs fit two cards by sum, but a card holds two 0.4 shares, not 2.5
    why = gpu_refusal("A", {2: 1}, 1, 0.4, 5)
    assert why is not None and why.field == "workers" and "room for 0.4 of a card" in why.reason
    assert gpu_refusal("A", {2: 1}, 1, 0.4, 4) is None
    assert gpu_refusal("A", {1: 1}, 1, 0.5, 2) is None
    assert gpu_refusal("A", {1: 1}, 1, 1 / 3, 3) is None  # thirds fill a card, rounding aside
    assert gpu_refusal("A", {1: 1}, 1, 0.5, 3).field == "workers"  # type: ignore[union-attr]
    # a warm pool's pod of two cards at half a card each: a 3-card node holds three
    assert gpu_refusal("A", {3: 1}, 2, 0.5, 3) is None
    assert gpu_refusal("A", {3: 1}, 2, 0.5, 4) is not None
    assert worker_cards(0.25) == (1, 0.25) and worker_cards(1.5) == (2, 1.0)


def test_cpu_refusal_by_node_shape() -> None:
    shapes = {(4.0, 8.0): 2, (16.0, 2.0): 1}
    assert cpu_refusal({}, 1.0, 1.0, 1) is not None
    big = cpu_refusal(shapes, 8.0, 4.0, 1)  # CPUs on one node, memory on another
    assert big is not None and big.field == "profile" and "no node's CPU slots" in big.reason
    assert cpu_refusal(shapes, 2.0, 4.0, 4) is None  # two on each (4, 8) node
    many = cpu_refusal(shapes, 2.0, 4.0, 5)
    assert many == Refusal("workers", "5 CPU-only pods; the nodes' CPU slots hold 4 at once")


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 8), min_size=1, max_size=6),
    cards=st.integers(1, 8),
    workers=st.integers(1, 12),
)
def test_whole_gpu_refusal_agrees_with_a_placement_on_the_empty_pool(
    sizes: list[int], cards: int, workers: int
) -> None:
    """Refused exactly when the core cannot place the gang on the empty GPU pool."""
    g = Gangs(_nodes(*((f"n{i}", s) for i, s in enumerate(sizes))), "gfs")
    counts: dict[int, int] = {}
    for s in sizes:
        counts[s] = counts.get(s, 0) + 1
    refused = gpu_refusal("A", counts, cards, 1.0, workers) is not None
    s = spec("j", "hp", cards, workers)
    if refused:
        with pytest.raises(CoreError):
            g.submit(s, 0.0)
    else:
        assert bound(g.submit(s, 0.0)) == ["j"]


# ---------------------------------------------------------------- through the core


@pytest.mark.parametrize("cls", ["hp", "spot"])
def test_the_core_refuses_a_gang_with_more_workers_than_node_slots(cls: str) -> None:
    cl = _nodes(*((f"e{i}", 8) for i in range(77)), *((f"f{i}", 4) for i in range(200)))
    g = Gangs(cl, "gfs")
    assert g.core.cluster.sizes == {"A": {8: 77, 4: 200}}
    with pytest.raises(CoreError, match="job big: workers: 125 workers need a node slot"):
        g.submit(spec("big", cls, 8, 125), 0.0)
    # nothing registered: no job, no queue entry
    assert g.core.jobs == {} and g.core.hpspot.queued() == 0
    assert g.core.refusal(spec("fits", cls, 8, 77)) is None
    why = g.core.refusal(spec("huge", cls, 16, 1))
    assert why is not None and why.field == "gpus"
    # a spec without gpus takes its profile's shape: the profile is the field at fault
    s = JobSpec("p", "t", "A", job_class=JobClass(cls), workers=2000)
    assert g.core.refusal(s).field == "workers"  # type: ignore[union-attr]
    s = JobSpec("q", "t", "A", job_class=JobClass(cls), gpu_model="B")
    assert g.core.refusal(s) == Refusal("gpu_model", "GPU pool B has no GPUs")


def test_the_core_refuses_pool_jobs_by_their_profile() -> None:
    core = Core(
        _nodes(("a", 2), ("b", 1), ("c", 1)),
        [Profile("two", gpu_model="A", gpus=2), Profile("cpu", gpus=0, cpu=4.0, memory_gb=8.0)],
    )
    d = Driver(core)
    with pytest.raises(CoreError, match="workers: 2 workers need a node slot of 2 GPUs"):
        d.submit("t", "x", "two", workers=2)
    assert core.refusal(JobSpec("x", "t", "two")) is None
    # the nodes have no CPU slots: a CPU-only job could never start
    why = core.refusal(JobSpec("c", "t", "cpu"))
    assert why is not None and why.field == "profile" and "CPU-only" in why.reason
    why = core.refusal(JobSpec("h", "t", "cpu", job_class=JobClass.HP))
    assert why is not None and why.field == "job_class"
    assert core.jobs == {}


def test_node_counts_follow_the_nodes_that_join_and_leave() -> None:
    core = Core(Cluster(), [Profile("A", gpu_model="A")])
    s = JobSpec("j", "t", "A", job_class=JobClass.HP, workers=2, gpus=8)
    assert core.refusal(s) == Refusal("profile", "GPU pool A has no GPUs")
    core.handle(NodeAdded("a", "A", 8, cpu=4.0), 0.0)
    core.handle(NodeAdded("b", "A", 4), 0.0)
    assert core.cluster.sizes == {"A": {8: 1, 4: 1}}
    assert core.refusal(s).field == "workers"  # type: ignore[union-attr]
    core.handle(NodeAdded("c", "A", 8), 1.0)
    assert core.refusal(s) is None
    # a node that comes back with another shape is counted at its new size
    core.handle(NodeAdded("b", "A", 8), 2.0)
    assert core.cluster.sizes == {"A": {8: 3}}
    core.handle(NodeRemoved("c"), 3.0)
    core.handle(NodeRemoved("b"), 3.0)
    assert core.cluster.sizes == {"A": {8: 1}} and core.refusal(s).field == "workers"  # type: ignore[union-attr]
    core.check()
    # CPU slots are counted by their (CPUs, GB) shape
    cl = Cluster([Node("c1", "none", [], 8.0, 16.0), Node("c2", "none", [], 8.0, 16.0)])
    assert cl.cpu_shapes == {(8.0, 16.0): 2}
    cl.remove_node("c1")
    assert cl.cpu_shapes == {(8.0, 16.0): 1}
    cl.check()
    core.check()


# ---------------------------------------------------------------- queued jobs after a node leaves


def test_a_queued_gang_a_node_removal_made_unplaceable_waits_aside() -> None:
    """GFS's skip rule holds the jobs of one request behind the first that fails; a gang
    that lost its node slots would hold them for ever. It waits aside instead (still
    queued, as a pending Kubernetes pod waits for a node), the job behind it starts, and
    the gang goes back to its queue once a node joins."""
    g = Gangs(_nodes(("n1", 8), ("n2", 8), ("n3", 8)), "gfs")
    g.submit(spec("a", "hp", 8, 1, dur=1e6), 0.0)  # runs on one node
    g.submit(spec("b", "hp", 8, 3), 1.0)  # three nodes' worth: waits for "a"
    g.submit(spec("c", "hp", 8, 1), 2.0)  # same request: the skip rule holds it behind "b"
    assert {j: g.core.jobs[j].state for j in "bc"} == {
        "b": JobState.QUEUED,
        "c": JobState.QUEUED,
    }
    out = g.send(NodeRemoved("n3"), 3.0)
    why = Refusal("workers", "3 workers x 8 GPUs = 24 GPUs; GPU pool A has 16")
    assert g.core.jobs["b"].state is JobState.SET_ASIDE and g.core.waiting("b") == why
    assert bound(out) == ["c"] and g.core.hpspot.queued() == 0
    # the node joins again: "b" is back in its queue and starts once the room is free
    g.send(NodeAdded("n3", "A", 8), 4.0)
    assert g.core.jobs["b"].state is JobState.QUEUED and g.core.hpspot.queued() == 1
    g.finish("a", 5.0)
    out = g.finish("c", 6.0)
    assert bound(out) == ["b"]


def test_a_job_set_aside_can_be_cancelled() -> None:
    g = Gangs(_nodes(("n1", 8), ("n2", 8)), "gfs")
    g.submit(spec("a", "hp", 8, 1, dur=1e6), 0.0)
    g.submit(spec("b", "spot", 8, 2), 1.0)
    g.send(NodeRemoved("n2"), 2.0)
    assert g.core.jobs["b"].state is JobState.SET_ASIDE
    out = g.send(JobCancelled("b"), 3.0)
    assert JobEnded("b", Failure.CANCELLED, None) in out
    assert g.core.jobs["b"].state is JobState.FINISHED and g.core.waiting("b") is None


def test_a_queued_pool_gang_set_aside_and_back() -> None:
    core = Core(_nodes(("a1", 1), ("a2", 1), ("a3", 1)), [Profile("p", gpu_model="A")])
    d = Driver(core)
    d.submit("t", "x")  # runs on one card
    d.settle()
    d.submit("t", "y", workers=3)  # three cards: waits
    gang = "job-2"
    assert core.queued("p") == [gang]
    d.send(NodeRemoved("a3"))
    assert core.jobs[gang].state is JobState.SET_ASIDE and core.queued("p") == []
    d.send(NodeAdded("a3", "A", 1))
    assert core.jobs[gang].state is JobState.QUEUED and core.queued("p") == [gang]
