"""States the tables know: a queued job that fits nowhere after a node left is a job state
of its own (``set_aside``, with its refusal on the job), moved by the job table; it still
counts as queued for its tenant and shows as queued to drivers. And what a start attempt
of the hp/spot scheduler comes to is a typed value: a code, the part that decided, a
reason."""

from __future__ import annotations

from conftest import Driver
from stoker.core import (
    GPU,
    Cluster,
    Core,
    Failure,
    JobEnded,
    JobSpec,
    JobState,
    NodeAdded,
    NodeRemoved,
    Policies,
    Profile,
    TenantRevoked,
)
from stoker.core.gfs import passes
from stoker.core.gfs.passes import Code, Part
from stoker.core.model import Node
from stoker.core.shares import Share, TenantShares
from stoker.core.transitions import JOB_MOVES


def _three_cards(policies: Policies | None = None) -> tuple[Core, Driver]:
    """Three one-card nodes of GPU pool "A", a profile ``p`` of one card a worker."""
    nodes = [Node(n, "A", [GPU(f"{n}/0", n, 0, "A")]) for n in ("a1", "a2", "a3")]
    core = Core(Cluster(nodes), [Profile("p", gpu_model="A")], policies)
    return core, Driver(core)


def _gang_set_aside(d: Driver) -> str:
    """One job runs on a card, a 3-worker gang waits; a node leaves: the gang fits nowhere."""
    d.submit("t", "x")
    d.settle()
    gang = d.submit("t", "y", workers=3)
    d.send(NodeRemoved("a3"))
    return gang


def test_a_job_that_fits_nowhere_is_set_aside_with_its_refusal_and_back() -> None:
    core, d = _three_cards()
    gang = _gang_set_aside(d)
    job = core.jobs[gang]
    why = core.refusal(job.spec)
    assert why is not None and why.field == "workers"
    assert job.state is JobState.SET_ASIDE and core.waiting(gang) == why
    assert core.queued("p") == []  # in no queue: it holds back nobody
    # another node leaves: still set aside, its reason as the cluster is now
    d.send(NodeRemoved("a2"))
    assert job.state is JobState.SET_ASIDE
    assert core.waiting(gang) == core.refusal(job.spec) != why
    # nodes join: it fits again, back in its queue (waiting for room, not aside)
    d.send(NodeAdded("a2", "A", 1))
    assert job.state is JobState.SET_ASIDE  # two nodes still hold no 3-worker gang
    d.send(NodeAdded("a3", "A", 1))
    assert job.state is JobState.QUEUED and core.queued("p") == [gang]
    assert core.waiting(gang) != why
    # the moves, each through the job table (to, from): set aside once, and back
    assert [(to, was) for _, to, was in job.history] == [
        ("set_aside", "queued"),
        ("queued", "set_aside"),
    ]


def test_a_job_set_aside_counts_against_its_tenants_queued_cap_until_revoked() -> None:
    shares = TenantShares(default=Share(max_queued=1))
    core, d = _three_cards(Policies(shares=shares))
    gang = _gang_set_aside(d)
    assert core.jobs[gang].state is JobState.SET_ASIDE
    over = core.limit(JobSpec("k", "t", "p", "z"))
    assert over is not None and over.retry  # the set-aside gang is one of its queued jobs
    out = d.send(TenantRevoked("t"))
    assert JobEnded(gang, Failure.CANCELLED, None) in out
    assert core.jobs[gang].state is JobState.FINISHED and core.waiting(gang) is None
    assert core.limit(JobSpec("k", "u", "p", "z")) is None


def test_the_job_table_moves_a_set_aside_job_only_back_or_to_its_end() -> None:
    aside = JobState.SET_ASIDE
    assert {m for m in JOB_MOVES if aside in m} == {
        (JobState.QUEUED, aside),
        (aside, JobState.QUEUED),
        (aside, JobState.FINISHED),
    }
    # to its tenant (the API, the decision log, a cap) it is queued
    assert aside.shown is JobState.QUEUED and aside.waiting
    assert {s.shown for s in JobState} == set(JobState) - {aside}
    assert [s for s in JobState if s.waiting] == [JobState.QUEUED, aside]


def test_an_attempts_outcome_names_its_code_part_and_reason() -> None:
    outcomes = [
        passes.STARTED,
        passes.OVER_QUOTA,
        passes.OVER_SHARE,
        passes.HOLD,
        passes.AWAITING,
        passes.NO_ROOM_STILL,
        passes.TOO_FEW_SLOTS,
        passes.NO_ROOM,
    ]
    assert {a.code for a in outcomes} == set(Code)
    assert all(a.reason for a in outcomes)
    parts = {a.code: a.part for a in outcomes if a.code is not Code.NO_ROOM}
    assert parts == {
        Code.STARTED: Part.PLACEMENT,
        Code.QUOTA: Part.ADMISSION,
        Code.SHARE: Part.ADMISSION,
        Code.HOLD: Part.RECLAIM,
    }
    assert passes.AWAITING.part is Part.RECLAIM and passes.NO_ROOM.part is Part.PLACEMENT
