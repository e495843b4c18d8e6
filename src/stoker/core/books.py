"""The core's books: the registries of jobs and pods, both transition tables and the moves.

One :class:`Books` is shared by the core and its two parts (the warm pools and the hp/spot
scheduler); it is the only place a pod or a job is made, moved or ended, so each part keeps
its own indexes but neither holds the other or the :class:`~stoker.core.core.Core`. What
one part may ask of the other goes through :mod:`stoker.core.ports`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from stoker.core.actions import Action, JobEnded
from stoker.core.demand import DemandMeter
from stoker.core.model import (
    Cluster,
    CoreError,
    Failure,
    Job,
    JobClass,
    JobSpec,
    JobState,
    Pod,
    PodState,
    Profile,
    Refusal,
)
from stoker.core.transitions import JOB_MOVES, POD_MOVES, Transitions


class Books:
    """Jobs and pods of every class, the cluster they hold, and the HP demand meter.

    ``set_aside``: the jobs set aside (:attr:`JobState.SET_ASIDE`), in the order they were
    set aside (the order they are tried in again once nodes join), kept by :meth:`move_job`.
    ``on_cards``: told of every card a new pod takes (the warm pools' standby index
    follows it), wired once by the core.
    ``queued``: per tenant, its jobs queued or set aside now (what a cap on them is checked
    against);
    ``revoked``: jobs cancelled by their tenant's revocation, until they end.
    """

    def __init__(self, cluster: Cluster, profiles: Iterable[Profile], start: float) -> None:
        self.cluster = cluster
        self.profiles: dict[str, Profile] = {p.name: p for p in profiles}
        self.jobs: dict[str, Job] = {}
        self.pods: dict[str, Pod] = {}
        self.pod_moves = Transitions("pod", POD_MOVES, PodState.GONE)
        self.job_moves = Transitions("job", JOB_MOVES, JobState.FINISHED)
        self.demand = DemandMeter()
        self.set_aside: dict[str, None] = {}
        self.queued: dict[str, int] = {}
        # jobs cancelled by their tenant's revocation: the pods they leave are stopped
        self.revoked: set[str] = set()
        self.now = start
        self.on_cards: Callable[[list[str]], None] = lambda gpus: None
        self._seq = 0  # pod ids

    def add_job(self, job: Job) -> None:
        """Register a job just submitted (queued)."""
        self.jobs[job.id] = job
        self._count(job, 1)

    def _count(self, job: Job, step: int) -> None:
        tenant = job.spec.tenant
        left = self.queued.get(tenant, 0) + step
        if left:
            self.queued[tenant] = left
        else:
            del self.queued[tenant]

    def gpu_pool(self, spec: JobSpec) -> str:
        """The GPU pool (GPU model) a job's workers take: its own, else its profile's."""
        return spec.gpu_model or self.profiles[spec.profile].gpu_model

    def new_pod_id(self) -> str:
        self._seq += 1
        return f"pod-{self._seq}"

    def new_pod(
        self,
        profile: str,
        node: str,
        gpus: Iterable[str],
        share: float,
        now: float,
        job_class: JobClass,
    ) -> Pod:
        """A starting pod holding ``share`` of each of ``gpus`` (hp and spot pods)."""
        pod = Pod(
            id=self.new_pod_id(),
            profile=profile,
            node=node,
            gpus=list(gpus),
            state=PodState.STARTING,
            since=now,
            created=now,
            job_class=job_class,
        )
        self.pods[pod.id] = pod
        for gid in pod.gpus:
            self.cluster.allocate(gid, pod.id, share)
        self.on_cards(pod.gpus)
        return pod

    def move_pod(self, pod: Pod, state: PodState, now: float) -> None:
        """The one way a pod's state changes (raises on an illegal move, with history)."""
        self.pod_moves.transition(pod, state, now)

    def move_job(
        self,
        job: Job,
        state: JobState,
        now: float,
        *,
        lease: bool = False,
        refusal: Refusal | None = None,
    ) -> None:
        """The one way a job's state changes (raises on an illegal move, with history).
        ``lease``: a lease handed back (Chronus), the one way an HP job is re-queued.
        ``refusal``: why a job set aside fits nowhere now, given with every move to
        ``set_aside`` (again where the job is there: the reason as the cluster is now);
        the job holds it while it stays there."""
        was = job.state
        if (
            was is JobState.RUNNING
            and state is JobState.QUEUED
            and job.job_class is not JobClass.SPOT
            and not lease
        ):
            raise CoreError(f"job {job.id}: only a spot job goes back to the queue once running")
        if (state is JobState.SET_ASIDE) != (refusal is not None):
            raise CoreError(f"job {job.id}: a refusal goes with a move to set_aside, and only")
        self.job_moves.transition(job, state, now)
        if state is JobState.SET_ASIDE:
            job.refusal = refusal
            self.set_aside[job.id] = None  # a job set aside again keeps its place
        elif was is JobState.SET_ASIDE:
            job.refusal = None
            del self.set_aside[job.id]
        if was.waiting != state.waiting:
            self._count(job, 1 if state.waiting else -1)

    def end_job(
        self,
        job: Job,
        failure: Failure | None,
        exit_code: int | None,
        now: float,
        out: list[Action],
    ) -> None:
        """A job is finished for good: recorded, announced once (``JobEnded``)."""
        self.move_job(job, JobState.FINISHED, now)
        job.finished = now
        job.failure = failure
        job.exit_code = exit_code
        out.append(JobEnded(job.id, failure, exit_code))
