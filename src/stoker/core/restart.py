"""After a driver's restart: what the core makes of the pods the runtime has alive
(:class:`~stoker.core.events.PodsFound`). Pure: no I/O, no clock.

:func:`pod_steps` compares the replayed core's pods with the live ones: a pod it has that
is not alive is lost (gone, if it was stopping; else failed ``pod_died``); one alive that
it has no record of is an orphan, stopped; one that is alive and was starting is ready,
or (a standby pod whose promotion never reached it) promoted again, and one that was
stopping is asked again. The jobs bound to live active pods are settled next, each by
:func:`reconcile_job`:

the store says the job was binding or running on some pods; each pod's agent says, on its
hello, which job it runs now, the outcome of every job it ran (exit code and failure), and
which of those exits it still holds for a runtime to hear. From that alone it answers one of:

- :class:`Await`: the job runs, or its exit is on its way (a held exit is replayed after the
  hello): track it; ranks whose exit was heard by the dead broker are settled at once;
- :class:`Finish`: every rank ran to its end and the dead broker heard the exits but did not
  store them: finish the job with the recorded outcome (never ``pod_died``);
- :class:`Rebind`: some rank never got the job and none of it can have run twice: bind again
  (agents refuse a job id they have seen, answering with what they recorded);
- :class:`Lost`: the store says it ran but an agent knows nothing of it: it failed with the
  pod (``pod_died``), a typed failure that is true.

:func:`rank_events` turns an answer into the rank events the core applies.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from stoker.core.actions import PromoteStandby, StopPod
from stoker.core.events import (
    AgentReport,
    FoundPod,
    Outcome,
    PodFailed,
    PodGone,
    PodReady,
    RankExited,
    RankStarted,
)
from stoker.core.model import Failure, Job, JobState, Pod, PodState


@dataclass(frozen=True, slots=True)
class Await:
    """Track the job; ``settled`` are ranks (pods) whose exit no agent will send again."""

    settled: Mapping[str, Outcome] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Finish:
    """Every rank ran to its end: the job ends with this outcome."""

    exit_code: int
    failure: Failure | None


@dataclass(frozen=True, slots=True)
class Rebind:
    """Some rank never got the job, and none of it can have run twice: bind again."""


@dataclass(frozen=True, slots=True)
class Lost:
    """The job ran, and a rank's agent knows nothing of it: it failed with its pod."""

    failure: Failure = Failure.POD_DIED


Decision = Await | Finish | Rebind | Lost


def job_outcome(outcomes: Sequence[Outcome]) -> Outcome:
    """A gang's outcome from its ranks': the first failing rank's, else success."""
    bad = next((o for o in outcomes if o.exit_code != 0), None)
    if bad is None:
        return Outcome(0, None)
    return Outcome(bad.exit_code, bad.failure or Failure.USER_ERROR)


def reconcile_job(job: str, state: JobState, ranks: Mapping[str, AgentReport]) -> Decision:
    """What to do with ``job`` (``state`` as stored: binding or running) given the report
    of the agent in each of its pods (rank order)."""
    if state not in (JobState.BINDING, JobState.RUNNING):
        raise ValueError(f"job {job}: only a bound job is reconciled, not a {state.value} one")
    settled: dict[str, Outcome] = {}
    pending = unseen = 0
    for pod, report in ranks.items():
        if report.running == job or job in report.held:
            pending += 1  # its exit will come
        elif job in report.outcomes:
            settled[pod] = report.outcomes[job]
        else:
            unseen += 1
    if unseen:
        # a rank that never got the bind: only a job still binding may be bound again (its
        # other ranks' agents answer a repeated bind with what they ran); a running job's
        # rank that knows nothing of it lost it with its pod
        return Rebind() if state is JobState.BINDING else Lost()
    if pending:
        return Await(settled)
    outcome = job_outcome(list(settled.values()))
    return Finish(outcome.exit_code, outcome.failure)


def rank_events(
    job: Job, ranks: Mapping[str, AgentReport], decision: Decision
) -> list[RankStarted | RankExited]:
    """The rank events that carry out ``decision`` for ``job`` (``ranks``: its pods'
    reports, rank order): the ranks still running and those that ended while no driver
    listened (Await), every rank's start and end (Finish), every rank's loss (Lost);
    none for Rebind, which the core answers with a BindJob."""
    rank = {p: i for i, p in enumerate(job.pods)}
    match decision:
        case Await(settled):
            events: list[RankStarted | RankExited] = [
                RankStarted(job.id, rank[p], p)
                for p, r in ranks.items()
                if r.running == job.id or p in settled
            ]
            events += [
                RankExited(job.id, rank[p], o.exit_code, o.failure, p) for p, o in settled.items()
            ]
            return events
        case Finish(exit_code, failure):
            return [
                e
                for p in job.pods
                for e in (
                    RankStarted(job.id, rank[p], p),
                    RankExited(job.id, rank[p], exit_code, failure, p),
                )
            ]
        case Lost(failure):
            return [RankExited(job.id, rank[p], -1, failure, p) for p in job.pods]
    return []


@dataclass(slots=True)
class Found:
    """What :func:`pod_steps` found, filled in as its steps are taken."""

    adopted: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    bound: list[str] = field(default_factory=list)  # jobs on adopted active pods, id order


def pod_steps(
    pods: Mapping[str, Pod], found: Sequence[FoundPod], into: Found
) -> Iterator[PodReady | PodFailed | PodGone | StopPod | PromoteStandby]:
    """Make the core's ``pods`` (by id) agree with the runtime's live ones (``found``),
    pod by pod: each step is a pod event for the core to apply before the next step is
    asked for (a gang's pod that failed may take its gang's other pods with it, which are
    then passed over), or an action to carry out; what it finds goes ``into``."""
    live = {f.pod: f for f in found}
    before = {p.id: p.state for p in pods.values()}
    known: set[str] = set()
    bound: set[str] = set()
    for pod in list(pods.values()):
        if pod.state is PodState.GONE:
            continue
        known.add(pod.id)
        seen = live.get(pod.id)
        if seen is None:
            into.lost.append(pod.id)
            yield PodGone(pod.id) if pod.state is PodState.STOPPING else PodFailed(pod.id)
            continue
        into.adopted.append(pod.id)
        if pod.state is PodState.STOPPING:
            if before[pod.id] is PodState.STOPPING:  # (not one a step here just stopped)
                yield StopPod(pod.id, "retry")  # the stop asked before the restart, again
        elif pod.state in (PodState.STARTING, PodState.RECYCLING):
            if pod.pending_job is not None and seen.standby:
                yield PromoteStandby(pod.id)  # its promotion never reached it
            else:
                yield PodReady(pod.id)
        elif pod.state is PodState.ACTIVE and pod.job is not None:
            bound.add(pod.job)
    into.orphans = sorted(set(live) - known)
    for pid in into.orphans:
        yield StopPod(pid, "orphan")
    into.bound = sorted(bound)
