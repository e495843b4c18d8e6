"""Drivers report facts, the core decides: a runtime's start fault (PodStartFailed) and
the pods alive after a restart (PodsFound), each driven through ``Core.handle`` and read
off the actions it returns."""

from __future__ import annotations

import pytest

from stoker.broker.loop import decode_event, encode_event
from stoker.broker.store import StoredEvent
from stoker.core import (
    GPU,
    AgentReport,
    BindJob,
    Cluster,
    Core,
    Event,
    Failure,
    FoundPod,
    JobClass,
    JobEnded,
    JobRequeued,
    JobSpec,
    JobSubmitted,
    Node,
    Outcome,
    PodReady,
    PodsFound,
    PodStartFailed,
    Profile,
    PromoteStandby,
    RankExited,
    RankStarted,
    Reconciled,
    StartFault,
    StartPod,
    StopPod,
    Tick,
)
from stoker.core.actions import Action
from stoker.core.model import START_FAULTS


class _Run:
    """A core over one node, its clock, and the actions of each event."""

    def __init__(self, gpus: int = 2, profiles: tuple[Profile, ...] = (Profile("p"),)) -> None:
        node = Node("n", "any", [GPU(f"n/{i}", "n", i, "any") for i in range(gpus)])
        self.core = Core(Cluster([node]), profiles)
        self.now = 0.0

    def send(self, event: Event) -> list[Action]:
        self.now += 1.0
        actions = self.core.handle(event, self.now)
        self.core.check()
        return actions

    def submit(self, job: str, cls: JobClass = JobClass.POOL, workers: int = 1) -> list[Action]:
        return self.send(JobSubmitted(JobSpec(job, "t", "p", job, cls, workers)))

    def started_pods(self, job: str, cls: JobClass = JobClass.POOL, workers: int = 1) -> list[str]:
        """Submit ``job``; the pods the core starts for it."""
        return [a.pod for a in self.submit(job, cls, workers) if isinstance(a, StartPod)]

    def bound(self, job: str, cls: JobClass = JobClass.POOL) -> str:
        """Submit ``job`` and bring its one pod up: the core binds it there."""
        (pod,) = self.started_pods(job, cls)
        assert BindJob(job, (pod,)) in self.send(PodReady(pod))
        return pod

    def running(self, job: str) -> str:
        pod = self.bound(job)
        self.send(RankStarted(job, 0, pod))
        return pod


def _of(actions: list[Action], kind: type) -> list[Action]:
    return [a for a in actions if isinstance(a, kind)]


# ---------------------------------------------------------------- start faults


def test_every_start_fault_is_typed_as_an_infrastructure_failure() -> None:
    assert set(START_FAULTS) == set(StartFault)
    assert all(t.failure.infrastructure for t in START_FAULTS.values())


@pytest.mark.parametrize(
    ("fault", "failure"),
    [
        (StartFault.START_TIMED_OUT, Failure.START_TIMEOUT),
        (StartFault.START_FAILED, Failure.START_FAILED),
    ],
)
def test_a_start_fault_that_may_pass_requeues_the_job_and_starts_a_new_pod(
    fault: StartFault, failure: Failure
) -> None:
    run = _Run()
    (pod,) = run.started_pods("j")
    actions = run.send(PodStartFailed(pod, fault, "the runtime's words"))
    assert JobRequeued("j", failure) in actions
    assert not _of(actions, JobEnded)
    (again,) = _of(actions, StartPod)  # the job, at its queue's front, gets a new pod
    assert again.pod != pod


@pytest.mark.parametrize(
    ("fault", "failure"),
    [
        (StartFault.ENV_BUILD_FAILED, Failure.ENV_BUILD_FAILED),
        (StartFault.IMAGE_MISSING, Failure.IMAGE_MISSING),
    ],
)
def test_a_start_fault_that_would_repeat_ends_a_pool_job_typed(
    fault: StartFault, failure: Failure
) -> None:
    run = _Run()
    (pod,) = run.started_pods("j")
    actions = run.send(PodStartFailed(pod, fault))
    assert actions == [JobEnded("j", failure, None)]


def test_a_start_fault_that_would_repeat_ends_an_hp_gang_and_stops_its_other_pods() -> None:
    run = _Run()
    first, second = run.started_pods("g", JobClass.HP, workers=2)
    actions = run.send(PodStartFailed(first, StartFault.IMAGE_MISSING, "ErrImageNeverPull"))
    assert JobEnded("g", Failure.IMAGE_MISSING, -1) in actions
    assert _of(actions, StopPod) == [StopPod(second, "job_ended")]
    assert not _of(actions, JobRequeued) and not _of(actions, StartPod)


def test_an_hp_gang_whose_pod_timed_out_is_requeued_and_placed_again() -> None:
    run = _Run()
    first, second = run.started_pods("g", JobClass.HP, workers=2)
    actions = run.send(PodStartFailed(first, StartFault.START_TIMED_OUT))
    assert JobRequeued("g", Failure.START_TIMEOUT) in actions
    assert StopPod(second, "gang_failed") in actions


def test_a_start_fault_of_a_pod_that_is_gone_changes_nothing() -> None:
    run = _Run()
    (pod,) = run.started_pods("j")
    run.send(PodStartFailed(pod, StartFault.ENV_BUILD_FAILED))
    assert run.send(PodStartFailed(pod, StartFault.START_TIMED_OUT)) == []


# ---------------------------------------------------------------- pods found


def test_a_running_job_whose_agent_runs_it_is_adopted_as_it_is() -> None:
    run = _Run()
    pod = run.running("j")
    actions = run.send(PodsFound((FoundPod(pod, agent=AgentReport("j")),)))
    assert actions == [Reconciled(adopted=(pod,), jobs=("j",))]


def test_a_pod_not_alive_is_lost_and_its_running_job_ends_pod_died() -> None:
    run = _Run()
    pod = run.running("j")
    actions = run.send(PodsFound(()))
    assert actions[0] == Reconciled(lost=(pod,))
    assert JobEnded("j", Failure.POD_DIED, None) in actions


def test_a_starting_pod_not_alive_requeues_its_job_which_starts_again() -> None:
    run = _Run()
    (pod,) = run.started_pods("j")
    actions = run.send(PodsFound(()))
    assert actions[0] == Reconciled(lost=(pod,))
    assert JobRequeued("j", Failure.POD_DIED) in actions
    assert len(_of(actions, StartPod)) == 1


def test_a_gang_that_lost_one_pod_ends_and_its_live_pod_is_stopped_once() -> None:
    run = _Run()
    first, second = run.started_pods("g", JobClass.HP, workers=2)
    run.send(PodReady(first))
    assert BindJob("g", (first, second)) in run.send(PodReady(second))
    for rank, pod in enumerate((first, second)):
        run.send(RankStarted("g", rank, pod))
    actions = run.send(PodsFound((FoundPod(second, agent=AgentReport("g")),)))
    assert actions[0] == Reconciled(adopted=(second,), lost=(first,))
    assert JobEnded("g", Failure.POD_DIED, -1) in actions
    assert _of(actions, StopPod) == [StopPod(second, "job_ended")]


def test_a_live_pod_the_core_never_had_is_stopped_as_an_orphan() -> None:
    run = _Run()
    actions = run.send(PodsFound((FoundPod("stray"),)))
    assert actions == [Reconciled(orphans=("stray",)), StopPod("stray", "orphan")]


def test_a_live_starting_pod_is_ready_and_takes_its_job() -> None:
    run = _Run()
    (pod,) = run.started_pods("j")
    actions = run.send(PodsFound((FoundPod(pod),)))
    assert actions == [Reconciled(adopted=(pod,)), BindJob("j", (pod,))]


def test_a_binding_job_whose_agent_never_got_it_is_bound_again() -> None:
    run = _Run()
    pod = run.bound("j")
    actions = run.send(PodsFound((FoundPod(pod),)))
    assert actions == [
        Reconciled(adopted=(pod,), jobs=("j",), rebound=("j",)),
        BindJob("j", (pod,)),
    ]


def test_a_running_job_its_agent_knows_nothing_of_is_lost_with_its_pod() -> None:
    run = _Run()
    pod = run.running("j")
    actions = run.send(PodsFound((FoundPod(pod),)))
    assert actions[0] == Reconciled(adopted=(pod,), jobs=("j",), jobs_lost=("j",))
    assert JobEnded("j", Failure.POD_DIED, -1) in actions


def test_a_job_that_ended_while_no_driver_listened_ends_with_its_recorded_outcome() -> None:
    run = _Run()
    pod = run.running("j")
    agent = AgentReport(outcomes={"j": Outcome(3, Failure.USER_ERROR)})
    actions = run.send(PodsFound((FoundPod(pod, agent=agent),)))
    assert actions[0] == Reconciled(adopted=(pod,), jobs=("j",))
    assert JobEnded("j", Failure.USER_ERROR, 3) in actions


def _stopping(run: _Run) -> str:
    """A pod the core has asked to stop: its job ended, its keep-alive ran out."""
    pod = run.running("j")
    run.send(RankExited("j", 0, 0, None, pod))
    run.now += 3600.0
    assert StopPod(pod, "keepalive") in run.send(Tick())
    return pod


def test_a_stopping_pod_alive_is_asked_to_stop_again() -> None:
    run = _Run()
    pod = _stopping(run)
    assert run.send(PodsFound((FoundPod(pod),))) == [
        Reconciled(adopted=(pod,)),
        StopPod(pod, "retry"),
    ]


def test_a_stopping_pod_not_alive_is_gone_and_nothing_follows() -> None:
    run = _Run()
    pod = _stopping(run)
    assert run.send(PodsFound(())) == [Reconciled(lost=(pod,))]


def test_pods_found_and_start_faults_are_logged_and_replayed_as_they_were() -> None:
    found = PodsFound(
        (
            FoundPod("a", standby=True),
            FoundPod(
                "b",
                agent=AgentReport("j", {"k": Outcome(1, Failure.OUT_OF_MEMORY)}, frozenset({"k"})),
            ),
        )
    )
    for event in (found, PodStartFailed("a", StartFault.IMAGE_MISSING, "ErrImageNeverPull")):
        kind, data = encode_event(event)
        assert decode_event(StoredEvent(1, 0.0, kind, data)) == event


def test_a_standby_pod_whose_promotion_never_reached_it_is_promoted_again() -> None:
    run = _Run(gpus=1, profiles=(Profile("p", share=0.9, standby_share=0.1),))
    (pod,) = run.started_pods("j")
    # the pod is active: a standby pod is staged beside it
    (standby,) = [a.pod for a in run.send(PodReady(pod)) if isinstance(a, StartPod)]
    run.send(PodReady(standby))
    run.send(RankStarted("j", 0, pod))
    run.send(RankExited("j", 0, 0, None, pod))  # its pod waits warm for its caller
    actions = run.submit("k")  # another caller: the standby pod is promoted for it
    assert PromoteStandby(standby) in actions
    found = (FoundPod(pod), FoundPod(standby, standby=True))
    actions = run.send(PodsFound(found))
    assert actions[0] == Reconciled(adopted=(pod, standby))
    assert PromoteStandby(standby) in actions
