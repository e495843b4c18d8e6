"""Nodes joining and leaving the core's cluster model (what a Kubernetes node watch reports):
GPU pools appear with their first node, placements follow the nodes there are, and a node
that leaves takes its pods with it, typed, never a job lost."""

from __future__ import annotations

import pytest

from stoker.core import (
    BindJob,
    Cluster,
    Core,
    CoreError,
    Failure,
    JobEnded,
    JobRequeued,
    JobSpec,
    JobSubmitted,
    NodeAdded,
    NodeChanged,
    NodeRemoved,
    PodReady,
    Profile,
    RankExited,
    RankStarted,
    StartPod,
    StopPod,
)
from stoker.core.model import GPU, JobClass, JobState, Node, PodState
from stoker.core.reconcile import node_events

A100, H100 = "A100", "H100"


def _core() -> Core:
    """A core that starts with no node at all (a broker on a cluster it has not listed)."""
    return Core(Cluster(), [Profile("gpu", gpu_model=A100, share=0.9, standby_share=0.1)])


def _starts(actions: list[object]) -> list[StartPod]:
    return [a for a in actions if isinstance(a, StartPod)]


def test_gpu_pools_and_placements_follow_the_nodes_that_join() -> None:
    core = _core()
    hp = JobSpec("hp-1", "acme", "gpu", job_class=JobClass.HP, gpus=2, gpu_model=H100)
    # no H100 node yet: the job's GPU pool does not exist (the API: a 4xx naming it)
    with pytest.raises(CoreError, match="H100"):
        core.handle(JobSubmitted(hp), 1.0)
    out = core.handle(NodeAdded("h1", H100, 4, cpu=64.0), 2.0)
    assert out == [] and core.cluster.capacity == {H100: 4}
    assert [g.id for g in core.cluster.nodes["h1"].gpus] == ["h1/0", "h1/1", "h1/2", "h1/3"]
    out = core.handle(JobSubmitted(hp), 3.0)
    assert [(s.node, len(s.gpus)) for s in _starts(out)] == [("h1", 2)]
    # a pool job's profile names A100: refused while no A100 node is there, placed once
    # one has joined
    pool = JobSpec("p-1", "acme", "gpu", reuse_tag="t")
    with pytest.raises(CoreError, match="profile: GPU pool A100 has no GPUs"):
        core.handle(JobSubmitted(pool), 4.0)
    assert core.handle(NodeAdded("a1", A100, 1), 5.0) == []
    out = core.handle(JobSubmitted(pool), 5.0)
    assert [(s.node, s.gpus) for s in _starts(out)] == [("a1", ("a1/0",))]
    # said again with the same shape: nothing happens
    assert core.handle(NodeAdded("a1", A100, 1), 6.0) == []
    core.check()


def test_a_node_that_leaves_takes_its_pods_typed_and_requeues_what_never_ran() -> None:
    core = _core()
    core.handle(NodeAdded("a1", A100, 1), 0.0)
    core.handle(NodeAdded("h1", H100, 2), 0.0)
    # a pool job running on a1, an hp job still starting on h1
    (start,) = _starts(core.handle(JobSubmitted(JobSpec("p-1", "acme", "gpu", "t")), 1.0))
    binds = core.handle(PodReady(start.pod), 2.0)
    assert BindJob("p-1", (start.pod,)) in binds
    core.handle(RankStarted("p-1", 0, start.pod), 3.0)
    hp = JobSpec("hp-1", "acme", "gpu", job_class=JobClass.HP, gpus=1, gpu_model=H100)
    (hp_start,) = _starts(core.handle(JobSubmitted(hp), 4.0))
    out = core.handle(NodeRemoved("a1"), 5.0)
    # the running job ends typed (an infrastructure failure), its pod is stopped
    ended = [a for a in out if isinstance(a, JobEnded)]
    assert [(a.job, a.failure) for a in ended] == [("p-1", Failure.POD_DIED)]
    assert StopPod(start.pod, "node_removed") in out
    assert core.pods[start.pod].state is PodState.GONE and "a1" not in core.cluster.nodes
    assert core.cluster.capacity[A100] == 0
    # the hp job never ran: back to the queue, set aside while no H100 node is left,
    # and it starts again on a node that joins
    out = core.handle(NodeRemoved("h1"), 6.0)
    assert JobRequeued("hp-1", Failure.POD_DIED) in out
    assert StopPod(hp_start.pod, "node_removed") in out
    assert core.jobs["hp-1"].state is JobState.SET_ASIDE
    out = core.handle(NodeAdded("h2", H100, 2), 7.0)
    assert [(s.node, len(s.gpus)) for s in _starts(out)] == [("h2", 1)]
    # a node removed twice, or one never seen: nothing
    assert core.handle(NodeRemoved("h1"), 8.0) == []
    core.check()


def test_a_node_back_with_another_shape_replaces_the_old() -> None:
    core = _core()
    core.handle(NodeAdded("n", A100, 2), 0.0)
    (start,) = _starts(core.handle(JobSubmitted(JobSpec("p-1", "acme", "gpu", "t")), 1.0))
    out = core.handle(NodeAdded("n", A100, 4), 2.0)
    # the old node's pod went with it (the job never ran: re-queued and placed again)
    assert StopPod(start.pod, "node_removed") in out
    assert JobRequeued("p-1", Failure.POD_DIED) in out
    assert [s.node for s in _starts(out)] == ["n"]
    assert core.cluster.capacity == {A100: 4}
    core.check()


def test_node_events_bring_the_core_to_the_discovered_cluster() -> None:
    """After a restart the core learns, from its own pure answer, the nodes that joined,
    changed shape or left while no broker watched; nodes that match give no event, so a
    replayed cluster that already agrees is left alone."""
    core = _core()
    for name, model, gpus in (("a1", A100, 8), ("a2", A100, 8), ("h1", H100, 4)):
        core.handle(NodeAdded(name, model, gpus, 16.0), 0.0)
    seen = [
        Node("a1", A100, [GPU(f"a1/{i}", "a1", i, A100) for i in range(8)], 16.0),
        Node("a2", A100, [GPU(f"a2/{i}", "a2", i, A100) for i in range(4)], 16.0),  # lost 4
        Node("b1", H100, [GPU(f"b1/{i}", "b1", i, H100) for i in range(2)], 8.0),  # new
    ]
    events = node_events(core.cluster.nodes, seen)
    assert events == [
        NodeChanged("a2", A100, 4, 16.0),  # changed in place: its pods on a2/0-3 stay
        NodeAdded("b1", H100, 2, 8.0),
        NodeRemoved("h1"),
    ]
    core.handle_all(events, 1.0)
    assert node_events(core.cluster.nodes, seen) == []


def test_a_node_with_other_cpu_slots_changes_in_place() -> None:
    """NodeAdded carries a node's CPU slots (CPUs and memory): a CPU-only job is placed
    only on a node that has both, and a node said again with other CPU slots alone keeps
    its GPUs and pods (a broker upgraded to carry the memory says it of every node)."""
    core = Core(
        Cluster(),
        [
            Profile("gpu", gpu_model=A100, share=0.9, standby_share=0.1),
            Profile("cpu", gpus=0, cpu=2.0, memory_gb=4.0),
        ],
    )
    core.handle(NodeAdded("a1", A100, 1, cpu=16.0), 0.0)  # no memory: no CPU slots
    with pytest.raises(CoreError, match="CPU-only"):
        core.handle(JobSubmitted(JobSpec("c-1", "acme", "cpu", "t")), 1.0)
    (start,) = _starts(core.handle(JobSubmitted(JobSpec("p-1", "acme", "gpu", "t")), 1.0))
    core.handle(PodReady(start.pod), 2.0)
    out = core.handle(NodeAdded("a1", A100, 1, cpu=16.0, memory_gb=64.0), 3.0)
    assert out == [] and core.pods[start.pod].state is PodState.ACTIVE
    assert core.cluster.cpu_shapes == {(16.0, 64.0): 1}
    (cpu_start,) = _starts(core.handle(JobSubmitted(JobSpec("c-1", "acme", "cpu", "t")), 4.0))
    assert cpu_start.node == "a1" and cpu_start.gpus == ()
    core.check()


def _hp(jid: str, gpus: int) -> JobSpec:
    return JobSpec(jid, "acme", "gpu", job_class=JobClass.HP, gpus=gpus, gpu_model=A100)


def _run(core: Core, spec: JobSpec, now: float) -> StartPod:
    """Submit a one-worker job and see it start and run; its pod's StartPod."""
    (start,) = _starts(core.handle(JobSubmitted(spec), now))
    assert BindJob(spec.id, (start.pod,)) in core.handle(PodReady(start.pod), now)
    core.handle(RankStarted(spec.id, 0, start.pod), now)
    return start


def test_a_node_changed_in_place_keeps_the_pods_on_the_cards_it_kept() -> None:
    """NodeChanged (a host restarted with another GPU set): a running job whose cards are
    still there keeps running in its pod and on those cards alone; a pod on a lost card
    fails (its job ends pod_died) and is stopped; new cards take queued work."""
    core = _core()
    ids = ("h/0", "h/1", "h/2", "h/3")
    core.handle(NodeAdded("h", A100, 4, gpu_ids=ids), 0.0)
    on = {}  # card -> (the job on it, its pod)
    for i in range(4):
        start = _run(core, _hp(f"j{i}", 1), 1.0)
        on[start.gpus[0]] = (f"j{i}", start.pod)
    assert sorted(on) == list(ids)
    core.handle(JobSubmitted(_hp("wait", 2)), 2.0)  # no room: queued
    assert core.jobs["wait"].state is JobState.QUEUED
    change = NodeChanged("h", A100, 4, gpu_ids=("h/0", "h/3", "h/4", "h/5"))
    out = core.handle(change, 3.0)
    core.check()
    assert {a.pod for a in out if isinstance(a, StopPod)} == {on["h/1"][1], on["h/2"][1]}
    assert all(a.reason == "node_changed" for a in out if isinstance(a, StopPod))
    ended = {a.job: a.failure for a in out if isinstance(a, JobEnded)}
    assert ended == {on["h/1"][0]: Failure.POD_DIED, on["h/2"][0]: Failure.POD_DIED}
    for gpu in ("h/0", "h/3"):
        job, pod = core.jobs[on[gpu][0]], core.pods[on[gpu][1]]
        assert (pod.state, job.state, job.pods) == (PodState.ACTIVE, JobState.RUNNING, [pod.id])
        assert pod.gpus == [gpu]  # never more cards than it was given
    # the new cards run the 2-GPU job that waited
    assert [(s.node, sorted(s.gpus)) for s in _starts(out)] == [("h", ["h/4", "h/5"])]
    assert [g.id for g in core.cluster.nodes["h"].gpus] == ["h/0", "h/3", "h/4", "h/5"]
    assert core.cluster.capacity == {A100: 4} and core.cluster.sizes == {A100: {4: 1}}
    # the jobs still running end as usual, their cards free again
    for gpu in ("h/0", "h/3"):
        job, pod = on[gpu]
        core.handle(RankExited(job, 0, 0, None, pod), 4.0)
        assert (core.jobs[job].state, core.jobs[job].failure) == (JobState.FINISHED, None)
    core.check()


def test_a_node_that_grows_in_place_fails_nothing_and_runs_what_waited() -> None:
    """A host restarted with more GPUs: no pod fails, no action touches the running job,
    and a queued job that needed the new cards starts on them; a job set aside on the
    smaller node goes back to its queue."""
    core = _core()
    core.handle(NodeAdded("h", A100, 2), 0.0)
    start = _run(core, _hp("run", 2), 1.0)
    core.handle(JobSubmitted(_hp("next", 2)), 2.0)
    out = core.handle(NodeChanged("h", A100, 4), 3.0)
    core.check()
    assert not [a for a in out if isinstance(a, (StopPod, JobEnded, JobRequeued))]
    assert [sorted(s.gpus) for s in _starts(out)] == [["h/2", "h/3"]]
    assert core.jobs["run"].state is JobState.RUNNING and core.pods[start.pod].gpus == list(
        start.gpus
    )
    # back to 2 GPUs, the ones "run" holds: "next" (on h/2, h/3) fails, "run" stays
    out = core.handle(NodeChanged("h", A100, 2), 4.0)
    assert core.jobs["run"].state is JobState.RUNNING
    assert core.jobs["next"].state is JobState.QUEUED  # it never ran: re-queued
    assert JobRequeued("next", Failure.POD_DIED) in out
    assert StopPod(core.jobs["run"].pods[0], "node_changed") not in out
    core.check()
    # grown again: "next" starts on the new cards
    out = core.handle(NodeChanged("h", A100, 4), 5.0)
    assert [sorted(s.gpus) for s in _starts(out)] == [["h/2", "h/3"]]
    core.check()


def test_a_node_changed_in_place_stops_cpu_pods_beyond_its_new_slots_newest_first() -> None:
    core = Core(
        Cluster(),
        [
            Profile("gpu", gpu_model=A100, share=0.9, standby_share=0.1),
            Profile("cpu", gpus=0, cpu=2.0, memory_gb=4.0),
        ],
    )
    core.handle(NodeAdded("a1", A100, 1, cpu=8.0, memory_gb=16.0), 0.0)
    pods = []
    for i in range(3):
        spec = JobSpec(f"c{i}", "acme", "cpu", f"t{i}")
        (start,) = _starts(core.handle(JobSubmitted(spec), float(i)))
        pods.append(start.pod)
    out = core.handle(NodeChanged("a1", A100, 1, cpu=4.0, memory_gb=16.0), 5.0)
    core.check()
    assert [a.pod for a in out if isinstance(a, StopPod)] == [pods[2]]
    assert all(core.pods[p].state is not PodState.GONE for p in pods[:2])
    assert core.cluster.nodes["a1"].cpu == 4.0


def test_a_node_changed_to_another_gpu_model_is_a_new_pool() -> None:
    core = _core()
    core.handle(NodeAdded("n", A100, 1), 0.0)
    start = _run(core, JobSpec("p-1", "acme", "gpu", "t"), 1.0)
    out = core.handle(NodeChanged("n", H100, 1), 2.0)
    assert StopPod(start.pod, "node_removed") in out
    assert core.cluster.capacity == {A100: 0, H100: 1}
    core.check()
