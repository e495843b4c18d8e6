"""Job records and pod GPU-seconds, cancellation in every state, pod failures, gangs."""

from __future__ import annotations

import pytest

from conftest import Driver, make_core
from stoker.core import (
    BindJob,
    CoreError,
    Failure,
    HitPath,
    JobCancelled,
    JobEnded,
    JobRequeued,
    JobSpec,
    JobState,
    JobSubmitted,
    KillJob,
    PodFailed,
    PodGone,
    PodReady,
    PodState,
    Profile,
    RankStarted,
    StartPod,
    StopPod,
    Tick,
)


def test_job_records_every_step() -> None:
    d = Driver(make_core(gpus=1))
    a = d.submit()
    d.send(PodReady("pod-1"), at=20.0)
    d.send(PodReady("pod-1"), at=21.0)  # a repeated ready is ignored
    d.send(RankStarted(a), at=26.0)
    d.finish(a, at=30.0, exit_code=3, failure=Failure.USER_ERROR)
    job = d.core.jobs[a]
    assert (job.submitted, job.placed, job.pod_ready) == (0.0, 0.0, 20.0)
    assert (job.started, job.finished, job.start_latency) == (26.0, 30.0, 26.0)
    assert (job.exit_code, job.failure, job.path) == (3, Failure.USER_ERROR, HitPath.COLD)
    b = d.submit()
    assert d.core.jobs[b].path is HitPath.WARM
    assert d.core.jobs[b].placed == d.core.jobs[b].pod_ready == 30.0


def test_pod_gpu_seconds_per_state() -> None:
    d = Driver(make_core(gpus=1))
    a = d.submit()
    d.send(PodReady("pod-1"), at=2.0)
    d.send(RankStarted(a), at=3.0)
    d.finish(a, at=5.0)
    d.send(Tick(), at=65.0)  # keep-alive (60 s) ends
    d.send(PodGone("pod-1"), at=66.0)
    held = d.core.pods["pod-1"].held
    assert held == pytest.approx({"starting": 2.0, "active": 3.0, "warm": 60.0, "stopping": 1.0})


def test_fractional_pod_gpu_seconds() -> None:
    d = Driver(make_core(gpus=1, profiles=[Profile("p", share=0.5)]))
    a = d.submit()
    d.send(PodReady("pod-1"), at=4.0)
    d.finish(a, at=8.0)
    assert d.core.pods["pod-1"].held == pytest.approx({"starting": 2.0, "active": 2.0})


def test_cancel_queued() -> None:
    d = Driver(make_core(gpus=1))
    d.run()
    q = d.submit("t", "b")
    assert d.send(JobCancelled(q)) == [JobEnded(q, Failure.CANCELLED)]
    assert d.core.queued() == [] and d.core.jobs[q].state is JobState.FINISHED
    assert d.send(JobCancelled(q)) == []  # cancelling a finished job does nothing


def test_cancel_placed_orphan_goes_to_the_next_queued_job() -> None:
    d = Driver(make_core(gpus=1))
    a = d.submit("t", "a")
    b = d.submit("t", "b")
    assert d.send(JobCancelled(a)) == [JobEnded(a, Failure.CANCELLED)]
    d.ready()
    # the fresh pod never ran (t, a): it is clean and serves the queued job
    assert d.core.jobs[b].state is JobState.BINDING and d.core.jobs[b].pods == ["pod-1"]
    assert d.core.pods["pod-1"].owner == ("t", "b")


def test_an_orphan_taken_by_a_queued_job_gets_its_standby() -> None:
    d = Driver(make_core(gpus=1, profiles=[Profile("p", share=0.9, standby_share=0.1)]))
    a = d.submit("t", "a")
    b = d.submit("t", "b")
    d.send(JobCancelled(a))
    d.ready()
    assert d.core.jobs[b].state is JobState.BINDING
    assert [a.standby for a in d.log[-1][2] if isinstance(a, StartPod)] == [True]


def test_cancel_placed_orphan_is_stopped_when_nobody_waits() -> None:
    d = Driver(make_core(gpus=1))
    a = d.submit()
    d.send(JobCancelled(a))
    d.ready()
    assert d.log[-1][2] == [StopPod("pod-1", "orphaned")]


def test_cancel_placed_gang_stops_its_ready_pods() -> None:
    d = Driver(make_core(gpus=2))
    g = d.submit(workers=2)
    d.ready(["pod-1"])
    actions = d.send(JobCancelled(g))
    assert actions == [StopPod("pod-1", "cancelled"), JobEnded(g, Failure.CANCELLED)]
    d.ready(["pod-2"])
    assert d.log[-1][2] == [StopPod("pod-2", "orphaned")]


@pytest.mark.parametrize("started", [False, True])
def test_cancel_binding_or_running_kills_the_job(started: bool) -> None:
    d = Driver(make_core(gpus=1))
    a = d.submit()
    d.ready()
    if started:
        d.start()
    assert d.send(JobCancelled(a)) == [KillJob(a)]
    d.finish(a, exit_code=137, failure=Failure.CANCELLED)
    assert d.core.jobs[a].failure is Failure.CANCELLED
    assert d.core.jobs[a].state is JobState.FINISHED


def test_pod_failure_before_start_requeues_the_job() -> None:
    d = Driver(make_core(gpus=1))
    a = d.submit()
    d.starting.clear()
    d.send(PodFailed("pod-1", Failure.START_TIMEOUT))
    job = d.core.jobs[a]
    # back in the queue and placed again at once on the freed GPU
    assert job.state is JobState.PLACED and job.pods == ["pod-2"]
    assert job.failure is None
    d.settle()
    assert job.state is JobState.RUNNING


def test_pod_failure_while_binding_requeues_and_late_news_is_ignored() -> None:
    d = Driver(make_core(gpus=1))
    a = d.submit()
    d.ready()
    d.send(PodFailed("pod-1"))
    job = d.core.jobs[a]
    assert job.state is JobState.PLACED and job.pods == ["pod-2"]
    # the runtime's late report of the failed run changes nothing
    d.finish(a, exit_code=1, failure=Failure.POD_DIED)
    d.send(RankStarted(a))
    assert job.state is JobState.PLACED and job.started is None
    d.ready()
    assert job.state is JobState.BINDING


def test_pod_failure_while_running_ends_the_job() -> None:
    d = Driver(make_core(gpus=1))
    a = d.run()
    assert d.send(PodFailed("pod-1")) == [JobEnded(a, Failure.POD_DIED)]
    assert d.core.pods["pod-1"].state is PodState.GONE
    assert d.core.cluster.gpus["node-0/0"].allocs == {}


def test_job_dying_with_its_pod_does_not_leave_it_warm() -> None:
    d = Driver(make_core(gpus=1))
    a = d.run()
    assert d.finish(a, exit_code=1, failure=Failure.POD_DIED) == [
        JobEnded(a, Failure.POD_DIED, 1),
        StopPod("pod-1", "pod_died"),
    ]


def test_gang_binds_all_pods_at_once() -> None:
    d = Driver(make_core(nodes=2, gpus=2, profiles=[Profile("g", gpus=2)]))
    g = d.submit(profile="g", workers=2)
    job = d.core.jobs[g]
    assert len(job.pods) == 2
    nodes = {d.core.pods[p].node for p in job.pods}
    assert nodes == {"node-0", "node-1"}
    d.ready([job.pods[0]])
    assert not d.actions(BindJob)
    d.ready([job.pods[1]])
    assert d.actions(BindJob) == [BindJob(g, tuple(job.pods))]


def test_gang_pod_failure_stops_the_rest_and_requeues() -> None:
    d = Driver(make_core(gpus=2))
    g = d.submit(workers=2)
    d.ready(["pod-1"])
    d.starting.clear()
    actions = d.send(PodFailed("pod-2"))
    assert actions == [StopPod("pod-1", "gang_failed"), JobRequeued(g, Failure.POD_DIED)]
    assert d.core.jobs[g].state is JobState.QUEUED
    d.gone()
    assert d.core.jobs[g].state is JobState.PLACED
    d.settle()
    assert d.core.jobs[g].state is JobState.RUNNING


def test_gang_warm_hit_of_all_pods() -> None:
    d = Driver(make_core(gpus=2))
    g = d.submit(workers=2)
    d.settle()
    d.finish(g)
    g2 = d.submit(workers=2)
    assert d.core.jobs[g2].path is HitPath.WARM
    assert sorted(d.core.jobs[g2].pods) == sorted(d.core.jobs[g].pods)
    assert d.log[-1][2] == [BindJob(g2, tuple(d.core.jobs[g2].pods))]


def test_bad_events_raise_typed_errors() -> None:
    d = Driver(make_core())
    with pytest.raises(CoreError, match="profile"):
        d.core.handle(JobSubmitted(JobSpec("x", "t", "nope", "a")), 0.0)
    d.submit()
    with pytest.raises(CoreError, match="duplicate"):
        d.core.handle(JobSubmitted(JobSpec("job-1", "t", "p", "a")), 0.0)
    with pytest.raises(CoreError, match="workers"):
        d.core.handle(JobSubmitted(JobSpec("y", "t", "p", "a", workers=0)), 0.0)
    with pytest.raises(CoreError, match="unknown job"):
        d.core.handle(RankStarted("nope"), 0.0)
    d.core.handle(Tick(), 5.0)
    with pytest.raises(CoreError, match="backwards"):
        d.core.handle(Tick(), 4.0)


def test_unexpected_pod_gone_counts_as_a_failure() -> None:
    """A pod the runtime lost without a StopPod must not strand the job waiting on it."""
    d = Driver(make_core(gpus=1))
    a = d.submit()
    d.starting.clear()
    d.send(PodGone("pod-1"))
    assert d.core.jobs[a].state is JobState.PLACED and d.core.jobs[a].pods == ["pod-2"]
    d.ready()
    d.send(PodGone("pod-2"))  # while binding: re-queued again
    assert d.core.jobs[a].pods == ["pod-3"]
    d.settle()
    d.send(PodGone("pod-3"))  # while running: the job ends as its pod died
    assert d.core.jobs[a].failure is Failure.POD_DIED


def test_a_requeued_job_keeps_its_place_at_the_head() -> None:
    d = Driver(make_core(gpus=1))
    a = d.submit("t", "a")
    b = d.submit("t", "b")
    d.starting.clear()
    d.send(PodFailed("pod-1"))
    assert d.core.jobs[a].state is JobState.PLACED
    assert d.core.queued() == [b]
