"""Transition tables: each step of a pod's and a job's life, through ``Core.handle``, gives
exactly the actions listed; a move outside the tables raises with the object's history."""

from __future__ import annotations

import pytest

from stoker.core import (
    BindFailed,
    BindJob,
    Cluster,
    Core,
    CoreError,
    Failure,
    IllegalTransition,
    JobClass,
    JobEnded,
    JobForgotten,
    JobRequeued,
    JobSpec,
    JobState,
    JobSubmitted,
    KillJob,
    PodForgotten,
    PodGone,
    PodReady,
    PodState,
    PodStopFailed,
    Policies,
    Profile,
    RankExited,
    RankStarted,
    StartPod,
    StopPod,
    Tick,
)
from stoker.core.gfs import GFSConfig
from stoker.core.gfs.quota import StaticQuota
from stoker.core.policies import FixedKeepAlive
from stoker.core.transitions import JOB_MOVES, POD_MOVES


def core(gpus: int = 2) -> Core:
    policies = Policies(keepalive=FixedKeepAlive(30.0), hpspot=GFSConfig(quota=StaticQuota(1.0)))
    return Core(Cluster.uniform(1, gpus), [Profile("p"), Profile("x")], policies)


def steps(c: Core, table: list[tuple[float, object, list]]) -> None:
    """Feed each event and compare the actions to the expected ones, step by step."""
    for at, event, expected in table:
        assert c.handle(event, at) == expected, (at, event)  # type: ignore[arg-type]
        c.check()


def test_pool_job_and_pod_lifecycle() -> None:
    c = core()
    spec = JobSpec("a", "t", "p", "tag")
    steps(
        c,
        [
            (0.0, JobSubmitted(spec), [StartPod("pod-1", "p", "node-0", ("node-0/0",))]),
            (20.0, PodReady("pod-1"), [BindJob("a", ("pod-1",))]),
            (21.0, RankStarted("a"), []),
            (25.0, RankExited("a"), [JobEnded("a", None, 0)]),
            (55.0, Tick(), [StopPod("pod-1", "keepalive")]),
            (60.0, PodGone("pod-1"), []),
        ],
    )
    assert [h[1] for h in c.pods["pod-1"].history] == [
        "active",
        "warm",
        "stopping",
        "gone",
    ]
    job = c.jobs["a"]
    assert [h[1] for h in job.history] == ["placed", "binding", "running", "finished"]
    assert (job.started, job.finished) == (21.0, 25.0)


def test_gang_ranks_decide_start_and_end() -> None:
    c = core()
    spec = JobSpec("h", "t", "x", job_class=JobClass.HP, workers=2, gpus=1)
    starts = [
        StartPod("pod-1", "x", "node-0", ("node-0/0",), share=1.0),
        StartPod("pod-2", "x", "node-0", ("node-0/1",), share=1.0),
    ]
    steps(
        c,
        [
            (0.0, JobSubmitted(spec), starts),
            (1.0, PodReady("pod-1"), []),
            (1.0, PodReady("pod-2"), [BindJob("h", ("pod-1", "pod-2"))]),
            (2.0, RankStarted("h", 0), []),
            (2.0, RankStarted("h", 1), []),
            # rank 1 fails: the core kills the other rank; the job ends once both exited,
            # typed by the infrastructure failure, never as a user error
            (3.0, RankExited("h", 1, 137, Failure.POD_DIED), [KillJob("h", Failure.POD_DIED)]),
            (
                3.5,
                RankExited("h", 0, 143, Failure.USER_ERROR),
                [
                    StopPod("pod-1", "job_ended"),
                    StopPod("pod-2", "job_ended"),
                    JobEnded("h", Failure.POD_DIED, 137),
                ],
            ),
        ],
    )
    assert c.jobs["h"].state is JobState.FINISHED and c.jobs["h"].started == 2.0


def test_bind_failure_typed_by_its_cause() -> None:
    c = core()
    c.handle(JobSubmitted(JobSpec("a", "t", "p", "tag")), 0.0)
    c.handle(PodReady("pod-1"), 1.0)
    # the job's own code: a user error; the pod stays warm for its caller
    assert c.handle(BindFailed("a", "pod-1", "no such file", infra=False), 2.0) == [
        JobEnded("a", Failure.USER_ERROR, 1)
    ]
    assert c.pods["pod-1"].state is PodState.WARM
    c.handle(JobSubmitted(JobSpec("b", "t", "p", "tag")), 3.0)  # warm hit on pod-1
    # the runtime's fault: the pod is stopped and the job ends bind_failed (infrastructure)
    assert c.handle(BindFailed("b", "pod-1", "agent gone", infra=True), 4.0) == [
        StopPod("pod-1", "bind_failed"),
        JobEnded("b", Failure.BIND_FAILED, 1),
    ]
    assert Failure.BIND_FAILED.infrastructure and not Failure.USER_ERROR.infrastructure


def test_failed_stop_keeps_the_share_and_is_asked_again() -> None:
    c = core(gpus=1)
    c.handle(JobSubmitted(JobSpec("a", "t", "p", "tag")), 0.0)
    c.handle(PodReady("pod-1"), 1.0)
    c.handle(RankExited("a"), 2.0)
    assert c.handle(Tick(), 32.0) == [StopPod("pod-1", "keepalive")]
    steps(
        c,
        [
            (33.0, PodStopFailed("pod-1", "busy"), []),
            # the GPU stays held: a new caller's job cannot start on it
            (34.0, JobSubmitted(JobSpec("b", "u", "p", "other")), []),
            (62.0, Tick(), []),
        ],
    )
    assert c.next_deadline() == 63.0
    assert c.handle(Tick(), 63.0) == [StopPod("pod-1", "retry")]
    assert c.cluster.gpus["node-0/0"].used == 1.0
    assert c.handle(PodGone("pod-1"), 65.0) == [StartPod("pod-2", "p", "node-0", ("node-0/0",))]


def test_spot_eviction_kills_stops_and_requeues() -> None:
    c = core(gpus=1)
    spot = JobSpec("s", "t", "x", job_class=JobClass.SPOT, gpus=1)
    c.handle(JobSubmitted(spot), 0.0)
    c.handle(PodReady("pod-1"), 0.0)
    c.handle(RankStarted("s"), 0.0)
    hp = JobSpec("h", "t", "x", job_class=JobClass.HP, gpus=1)
    steps(
        c,
        [
            (
                10.0,
                JobSubmitted(hp),
                [
                    KillJob("s", Failure.PREEMPTED, 0.0),
                    StopPod("pod-1", "preempted"),
                    JobRequeued("s", Failure.PREEMPTED),
                ],
            ),
            # the HP job starts once the victim's pod is gone, not before
            (11.0, PodGone("pod-1"), [StartPod("pod-2", "x", "node-0", ("node-0/0",), share=1.0)]),
            # the victim's rank reports its kill from the old pod: stale, ignored
            (11.0, RankExited("s", 0, 143, Failure.PREEMPTED, pod="pod-1"), []),
        ],
    )
    assert c.jobs["s"].state is JobState.QUEUED and c.jobs["s"].evictions == 1


def test_illegal_moves_raise_with_history() -> None:
    c = core()
    c.handle(JobSubmitted(JobSpec("a", "t", "p", "tag")), 0.0)
    c.handle(PodReady("pod-1"), 1.0)
    c.handle(RankExited("a"), 2.0)
    pod = c.pods["pod-1"]
    with pytest.raises(IllegalTransition, match=r"pod pod-1: warm -> recycling .*active@1"):
        c.books.move_pod(pod, PodState.RECYCLING, 3.0)
    with pytest.raises(IllegalTransition, match="job a: finished -> running"):
        c.books.move_job(c.jobs["a"], JobState.RUNNING, 3.0)
    # nothing leaves gone or finished
    assert not [m for m in POD_MOVES if m[0] is PodState.GONE]
    assert not [m for m in JOB_MOVES if m[0] is JobState.FINISHED]


def test_only_finished_jobs_and_gone_pods_are_forgotten() -> None:
    """A driver that keeps finished jobs elsewhere drops them through ``handle``; forgetting
    a job or pod that is not in its final state raises with its history and changes
    nothing."""
    c = core(gpus=1)
    c.handle(JobSubmitted(JobSpec("a", "t", "p", "tag")), 0.0)
    with pytest.raises(
        IllegalTransition,
        match=r"job a: only a finished job may be forgotten, not a placed one; .*: placed@0",
    ):
        c.handle(JobForgotten("a"), 0.5)
    c.handle(PodReady("pod-1"), 1.0)
    c.handle(RankStarted("a"), 1.5)
    with pytest.raises(IllegalTransition, match=r"job a: .*running one; recent history: .*"):
        c.handle(JobForgotten("a"), 1.6)
    with pytest.raises(IllegalTransition, match=r"pod pod-1: only a gone pod .*active@1"):
        c.handle(PodForgotten("pod-1"), 1.7)
    assert c.jobs["a"].state is JobState.RUNNING and c.pods["pod-1"].state is PodState.ACTIVE
    c.check()
    c.handle(RankExited("a"), 2.0)  # pod-1 waits warm for its caller
    assert c.handle(JobForgotten("a"), 2.0) == []
    assert c.jobs == {}
    with pytest.raises(CoreError, match="unknown job 'a'"):
        c.handle(JobForgotten("a"), 2.0)
    with pytest.raises(IllegalTransition, match=r"pod pod-1: only a gone pod .* not a warm"):
        c.handle(PodForgotten("pod-1"), 2.0)
    assert c.handle(Tick(), 40.0) == [StopPod("pod-1", "keepalive")]
    c.handle(PodGone("pod-1"), 41.0)
    assert c.handle(PodForgotten("pod-1"), 41.0) == []
    assert c.pods == {} and c.next_deadline() is None
    c.check()
    # the next job of the same caller starts cold on the freed GPU, under a new pod id
    start = c.handle(JobSubmitted(JobSpec("b", "t", "p", "tag")), 50.0)
    assert start == [StartPod("pod-2", "p", "node-0", ("node-0/0",))]


def test_keepalive_deadlines_stay_bounded_under_a_long_keepalive() -> None:
    """Each job's end re-arms its warm pod's keep-alive; the old deadlines must not pile up
    (one per job ended within the keep-alive), while the live one still stops the pod."""
    policies = Policies(keepalive=FixedKeepAlive(3600.0))
    c = Core(Cluster.uniform(1, 1), [Profile("p")], policies)
    c.handle(JobSubmitted(JobSpec("j0", "t", "p", "tag")), 0.0)
    c.handle(PodReady("pod-1"), 0.0)
    for i in range(1000):
        at = float(i)
        if i:
            assert c.handle(JobSubmitted(JobSpec(f"j{i}", "t", "p", "tag")), at) == [
                BindJob(f"j{i}", ("pod-1",))
            ]
        c.handle(RankStarted(f"j{i}"), at)
        c.handle(RankExited(f"j{i}"), at + 0.5)
        c.handle(JobForgotten(f"j{i}"), at + 0.5)
    assert len(c.warm.idle.deadlines) <= 2 * 1 + 64
    assert c.next_deadline() == 999.5 + 3600.0
    assert c.handle(Tick(), 999.5 + 3600.0) == [StopPod("pod-1", "keepalive")]


def _bound_gang(c: Core, spec: JobSpec, at: float) -> tuple[str, ...]:
    """Submit a gang and make its pods ready: the BindJob's pods."""
    c.handle(JobSubmitted(spec), at)
    pods = tuple(c.jobs[spec.id].pods)
    for pod in pods:
        out = c.handle(PodReady(pod), at)
        c.check()
    assert out == [BindJob(spec.id, pods)]
    return pods


def test_a_failed_bind_of_one_rank_frees_the_gangs_room_once() -> None:
    """The runtime fails to bind one rank of an hp gang (the live broker; a simulator
    never fails a bind): its pod stops and, once gone, its card is free. The job's run is
    over (its other rank is killed), so its books go with that pod: the card must not also
    still count as the job's HP share (a card both free and HP's breaks the bound on an HP
    job's room, ``no_hp``) until the other rank exits."""
    c = core(gpus=2)
    pods = _bound_gang(c, JobSpec("h", "t", "x", job_class=JobClass.HP, workers=2, gpus=1), 0.0)
    c.handle(RankStarted("h", 0, pods[0]), 1.0)
    assert c.handle(BindFailed("h", pods[1], "agent gone", infra=True), 2.0) == [
        StopPod(pods[1], "bind_failed"),
        KillJob("h", Failure.BIND_FAILED),
    ]
    c.check()
    c.handle(PodGone(pods[1]), 3.0)
    c.check()
    assert c.hpspot.used["any"]["hp"] == 0.0
    out = c.handle(RankExited("h", 0, 143, Failure.BIND_FAILED, pods[0]), 4.0)
    assert out == [StopPod(pods[0], "job_ended"), JobEnded("h", Failure.BIND_FAILED, 1)]
    c.check()


def test_a_spot_gang_whose_bind_failed_is_no_victim() -> None:
    """A spot gang with a failed bind is ending (bind_failed) once its killed ranks exit.
    Its cards are not reclaim room twice over (free, and its victim cards), and it is no
    victim: an HP job that needs its cards waits for its end instead of evicting it (which
    would count an eviction and re-queue a job that failed for the runtime's fault)."""
    c = core(gpus=3)
    c.handle(JobSubmitted(JobSpec("h0", "t", "x", job_class=JobClass.HP, gpus=1)), 0.0)
    c.handle(PodReady(c.jobs["h0"].pods[0]), 0.0)
    spot = JobSpec("s", "t", "x", job_class=JobClass.SPOT, workers=2, gpus=1)
    pods = _bound_gang(c, spot, 0.0)
    c.handle(RankStarted("s", 0, pods[0]), 1.0)
    c.handle(BindFailed("s", pods[1], "agent gone", infra=True), 2.0)
    c.handle(PodGone(pods[1]), 3.0)
    c.check()
    # one card free, one held by the dying rank: the HP job waits for it
    out = c.handle(JobSubmitted(JobSpec("h", "t", "x", job_class=JobClass.HP, gpus=2)), 4.0)
    c.check()
    assert not any(isinstance(a, JobRequeued) for a in out), out
    assert c.jobs["s"].state is JobState.BINDING and c.jobs["h"].state is JobState.QUEUED
    out = c.handle(RankExited("s", 0, 143, Failure.BIND_FAILED, pods[0]), 5.0)
    assert JobEnded("s", Failure.BIND_FAILED, 1) in out
    c.handle(PodGone(pods[0]), 6.0)
    c.check()
    assert c.jobs["h"].state is JobState.PLACED
