"""The restart decision for a bound job (stoker.core.reconcile): pure, so every case is a
table row; the broker's crash suite (test_crash.py) checks the same with real processes."""

from __future__ import annotations

import pytest

from stoker.core.model import Failure, JobState
from stoker.core.reconcile import (
    AgentReport,
    Await,
    Finish,
    Lost,
    Outcome,
    Rebind,
    job_outcome,
    reconcile_job,
)

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
