"""The virtual runtime: carries out the core's actions by scheduling their outcomes after
sampled durations (see :mod:`stoker.sim.params`). It keeps only what a real runtime would
know: which base images each node has pulled, and which jobs are bound and running."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from stoker.core import (
    Action,
    BindJob,
    Failure,
    JobEnded,
    JobRequeued,
    KillJob,
    PodGone,
    PodReady,
    PromoteStandby,
    RankExited,
    RankStarted,
    Reconciled,
    RecyclePod,
    StartPod,
    StopPod,
)
from stoker.core.actions import executor
from stoker.sim.params import RuntimeParams

if TYPE_CHECKING:
    from stoker.sim.engine import Simulator


class VirtualRuntime:
    """Answers StartPod with PodReady (after image pull on a cold node + pod start),
    PromoteStandby and RecyclePod with PodReady, BindJob with RankStarted then RankExited
    for every rank, StopPod with PodGone, KillJob with a RankExited of the kill's reason
    for every rank still running; JobEnded tells the workload."""

    def __init__(
        self,
        params: RuntimeParams | None = None,
        seed: int = 0,
        prepulled: Iterable[tuple[str, str]] = (),
        instant: Iterable[str] = (),
    ) -> None:
        """``prepulled``: (node, profile) pairs whose base image is on the node at time 0.
        ``instant``: profiles whose pods start, bind and stop in no time (a trace's hp and
        spot jobs, whose durations already include their start)."""
        self.params = params or RuntimeParams()
        # the runtime's durations come from their own stream, so the workload's plan (drawn
        # from the workload's streams) is the same under every policy
        self.rng = np.random.default_rng([seed, 0x5717])
        self.instant = frozenset(instant)
        # (node, profile) -> time its base image is on the node (a pull in flight counts:
        # a second pod on the node waits for the same pull instead of pulling again);
        # ``prepulled`` pairs have it from the start
        self._image_at: dict[tuple[str, str], float] = {key: 0.0 for key in prepulled}
        self._run_s: dict[str, float] = {}
        self._ended: dict[str, None] = {}
        # bound job -> (its rank count, its run number, its planned exit's handle), until
        # it exits
        self._running: dict[str, tuple[int, int, int]] = {}
        self._runs = 0
        self._bound: dict[str, None] = {}  # pods a job was bound into
        # the RankStarted news of the binds carried out at one instant with no bind time,
        # one heap event for them all while nothing else was scheduled between them: (the
        # instant, the ranks, the engine's count of scheduled events after the last)
        self._starting: tuple[float, list[RankStarted], int] | None = None
        self.pulls = 0
        self._execute = executor(self)

    def attach(self, sim: Simulator) -> None:
        """The engine that delivers this runtime's events (set once, by the engine)."""
        self.sim = sim

    def plan_job(self, job_id: str, run_s: float) -> None:
        if run_s < 0:
            raise ValueError(f"job {job_id}: run_s must be >= 0 (got {run_s})")
        self._run_s[job_id] = run_s

    def job_done(self, job_id: str) -> None:
        """The core saw the job end: tell its workload once."""
        if job_id in self._ended:
            return
        self._ended[job_id] = None
        self.sim.workload.job_done(self.sim, job_id)

    def carry_out(self, action: Action) -> None:
        """Schedule what carrying out ``action`` answers (its method below)."""
        self._execute(action)

    # the actions' Executor methods (stoker.core.actions)

    def start_pod(self, action: StartPod) -> None:
        sim, p = self.sim, self.params
        if action.profile in self.instant:
            sim.deliver(PodReady(action.pod))
            return
        key = (action.node, action.profile)
        image_at = self._image_at.get(key)
        if image_at is None:
            self.pulls += 1
            image_at = sim.now + p.image_pull.sample(self.rng)
            self._image_at[key] = image_at
        start = (p.standby_start if action.standby else p.pod_start).sample(self.rng)
        sim.at(max(sim.now, image_at) + start, sim.deliver, PodReady(action.pod))

    def promote_standby(self, action: PromoteStandby) -> None:
        self.sim.after(self.params.promote.sample(self.rng), self.sim.deliver, PodReady(action.pod))

    def recycle_pod(self, action: RecyclePod) -> None:
        sim = self.sim
        sim.after(self.params.recycle.sample(self.rng), sim.deliver, PodReady(action.new_pod))

    def stop_pod(self, action: StopPod) -> None:
        sim, pod = self.sim, action.pod
        if sim.core.pods[pod].profile in self.instant:
            sim.deliver(PodGone(pod))
            return
        sim.after(self.params.stop.sample(self.rng), sim.deliver, PodGone(pod))

    def bind_job(self, action: BindJob) -> None:
        sim, p, rng = self.sim, self.params, self.rng
        job, pods = action.job, action.pods
        run = self._run_s.get(job)
        if run is None:
            bind = 0.0
            run = sim.workload.run_s(sim, job)
        else:
            # a pod that ran a job before only ever ran this caller (the core's
            # rule): its dependencies are in place already
            again = all(pid in self._bound for pid in pods)
            self._bound.update(dict.fromkeys(pods))
            bind = (p.rebind if again else p.bind).sample(rng)
        self._runs += 1
        # a gang's ranks start (and exit) at one instant: one batch, one pass after
        # them all (one per rank changed nothing until the last). Jobs bound at one
        # instant with no bind time (a trace's, e.g. every job a Chronus lease
        # returns) start in one batch too: a rank's start frees and dirties nothing,
        # so the passes between them were empty; joined only while nothing else
        # was scheduled in between, so every other event keeps its place
        ranks = [RankStarted(job, rank) for rank in range(len(pods))]
        starting = self._starting
        if (
            bind == 0.0
            and starting is not None
            and starting[0] == sim.now
            and starting[2] == sim.scheduled
        ):
            starting[1].extend(ranks)
        else:
            sim.after(bind, self._started, ranks)
            starting = (sim.now, ranks, 0) if bind == 0.0 else None
        exit_at = sim.after(bind + run, self._exit, job, None, self._runs)
        self._running[job] = (len(pods), self._runs, exit_at)
        # a run of no time exits at this instant: what binds next starts after it
        self._starting = (
            (starting[0], starting[1], sim.scheduled)
            if starting is not None and run > 0.0
            else None
        )

    def kill_job(self, action: KillJob) -> None:
        self._exit(action.job, action.reason)

    def job_ended(self, action: JobEnded) -> None:
        """Nothing now: the engine tells the workload of an end once the actions are done."""

    def job_requeued(self, action: JobRequeued) -> None:
        """Nothing to schedule: the job waits in the core's queue."""

    def reconciled(self, action: Reconciled) -> None:
        raise TypeError("the simulator restarts no broker: no PodsFound, no Reconciled")

    def _started(self, ranks: list[RankStarted]) -> None:
        """The ranks of one or more binds start (no more join this batch now)."""
        if self._starting is not None and self._starting[1] is ranks:
            self._starting = None
        self.sim.deliver_all(ranks)

    def _exit(self, job_id: str, failure: Failure | None, run: int | None = None) -> None:
        """Every rank of a running job exits (its planned end, or killed)."""
        entry = self._running.get(job_id)
        if entry is None or (run is not None and entry[1] != run):
            return  # killed before its planned end (or the end of an earlier run)
        del self._running[job_id]
        ranks, _, exit_at = entry
        if run is None:
            self.sim.cancel(exit_at)  # killed: its planned end would do nothing
        code = 0 if failure is None else 1
        self.sim.deliver_all(
            tuple(RankExited(job_id, rank, code, failure) for rank in range(ranks))
        )
