"""The restart decision for a bound job (stoker.core.restart): pure, so every case is a
table row; the broker's crash suite (test_crash.py) checks the same with real processes."""

from __future__ import annotations

import pytest

from stoker.core.events import AgentReport, Outcome
from stoker.core.model import Failure, JobState
from stoker.core.restart import Await, Finish, Lost, Rebind, job_outcome, reconcile_job

B, R = JobState.BINDING, JobState.RUNNING
OK = Outcome(0)
BAD = Outcome(3, Failure.USER_ERROR)


def _ran(job: str, outcome: Outcome, held: bool = False) -> AgentReport:
    return AgentReport(None, {job: outcome}, frozenset({job}) if held else frozenset())


@pytest.mark.parametrize(
    ("state", "ranks", "want"),
    [
        # the bind never reached the agent: bind again (it cannot have run)
        (B, {"p": AgentReport()}, Rebind()),
        # the agent runs it: its events will come
        (B, {"p": AgentReport("j")}, Await()),
        (R, {"p": AgentReport("j")}, Await()),
        # it ended while no broker listened and its exit is held: the replayed exit wins
        (B, {"p": _ran("j", BAD, held=True)}, Await()),
        (R, {"p": _ran("j", OK, held=True)}, Await()),
        # the dead broker heard the exit but never stored it: finish from the record
        (B, {"p": _ran("j", OK)}, Finish(0, None)),
        (R, {"p": _ran("j", BAD)}, Finish(3, Failure.USER_ERROR)),
        # running per the store, but the agent never heard of it: lost with its pod
        (R, {"p": AgentReport()}, Lost()),
        # another job's record says nothing about this one
        (B, {"p": _ran("other", OK)}, Rebind()),
        (R, {"p": AgentReport("other")}, Lost()),
        # a gang: one rank settled, one still running -> wait for it, keep what is known
        (R, {"p": _ran("j", BAD), "q": AgentReport("j")}, Await({"p": BAD})),
        # a gang whose bind reached one rank only: bind again (the agent that has it answers
        # with what it ran)
        (B, {"p": AgentReport("j"), "q": AgentReport()}, Rebind()),
        (B, {"p": _ran("j", OK), "q": _ran("j", BAD)}, Finish(3, Failure.USER_ERROR)),
    ],
)
def test_reconcile_job(state: JobState, ranks: dict[str, AgentReport], want: object) -> None:
    assert reconcile_job("j", state, ranks) == want


def test_only_bound_jobs_are_reconciled() -> None:
    with pytest.raises(ValueError, match="queued"):
        reconcile_job("j", JobState.QUEUED, {"p": AgentReport()})


def test_gang_outcome_is_the_first_failing_rank() -> None:
    assert job_outcome([OK, OK]) == OK
    assert job_outcome([OK, Outcome(9), BAD]) == Outcome(9, Failure.USER_ERROR)
    assert job_outcome([Outcome(137, Failure.TIMEOUT)]) == Outcome(137, Failure.TIMEOUT)


def test_a_log_from_before_the_node_was_logged_names_the_node_it_ran_on() -> None:
    """A log without its node replays on the first of ``legacy_nodes`` that it agrees
    with: three one-GPU jobs ran on a host of three GPUs that has two now. On two GPUs the
    log replays without an error (the third job queues), but its stored row says it runs:
    that node disagrees; the node of three GPUs agrees (so does one of four, tried after
    it), and one of one GPU does not."""
    from stoker.core import (
        Cluster,
        Core,
        JobSpec,
        JobSubmitted,
        PodReady,
        Profile,
        RankStarted,
        StartPod,
    )
    from stoker.core.model import GPU, JobClass, Node
    from stoker.core.reconcile import legacy_nodes, node_added, replay_agrees

    def node(n: int) -> Node:
        return Node("local", "any", [GPU(f"vgpu{i}", "local", i, "any") for i in range(n)])

    def replay(on: Node) -> Core:
        core = Core(Cluster(), [Profile("x")])
        core.handle(node_added(on), 0.0)
        for i in range(3):
            spec = JobSpec(f"j{i}", "t", "x", job_class=JobClass.HP, gpus=1)
            for start in core.handle(JobSubmitted(spec), 1.0 + i):
                assert isinstance(start, StartPod)
                core.handle(PodReady(start.pod), 1.5 + i)
                core.handle(RankStarted(f"j{i}", 0, start.pod), 1.5 + i)
        return core

    ran = replay(node(3))
    rows = [{"id": j.id, "state": j.state.value, "pods": list(j.pods)} for j in ran.jobs.values()]
    assert [r["state"] for r in rows] == ["running"] * 3
    tried = [[g.id for g in n.gpus] for n in legacy_nodes(node(2), more=2)]
    assert tried == [
        ["vgpu0", "vgpu1"],
        ["vgpu0", "vgpu1", "vgpu2"],
        ["vgpu0", "vgpu1", "vgpu2", "vgpu3"],
        ["vgpu0"],
    ]
    agrees = [replay_agrees(replay(n).jobs, rows) for n in legacy_nodes(node(2), more=2)]
    assert agrees == [False, True, True, False]  # the first that agrees is the one it ran on
