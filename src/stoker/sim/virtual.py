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
    KillJob,
    PodGone,
    PodReady,
    PromoteStandby,
    RankExited,
    RankStarted,
    RecyclePod,
    StartPod,
    StopPod,
)
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
        sim: Simulator,
        params: RuntimeParams,
        rng: np.random.Generator,
        prepulled: Iterable[tuple[str, str]] = (),
    ) -> None:
        self.sim = sim
        self.params = params
        self.rng = rng
        # (node, profile) -> time its base image is on the node (a pull in flight counts:
        # a second pod on the node waits for the same pull instead of pulling again);
        # ``prepulled`` pairs have it from the start
        self._image_at: dict[tuple[str, str], float] = {key: 0.0 for key in prepulled}
        self._run_s: dict[str, float] = {}
        self._ended: dict[str, None] = {}
        self._running: dict[str, int] = {}  # bound job -> its rank count, until it exits
        self._bound: dict[str, None] = {}  # pods a job was bound into
        self.pulls = 0

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
        sim, p, rng = self.sim, self.params, self.rng
        match action:
            case StartPod(pod=pod, profile=profile, node=node, standby=standby):
                key = (node, profile)
                image_at = self._image_at.get(key)
                if image_at is None:
                    self.pulls += 1
                    image_at = sim.now + p.image_pull.sample(rng)
                    self._image_at[key] = image_at
                start = (p.standby_start if standby else p.pod_start).sample(rng)
                sim.at(max(sim.now, image_at) + start, sim.deliver, PodReady(pod))
            case PromoteStandby(pod=pod):
                sim.after(p.promote.sample(rng), sim.deliver, PodReady(pod))
            case RecyclePod(new_pod=new):
                sim.after(p.recycle.sample(rng), sim.deliver, PodReady(new))
            case StopPod(pod=pod):
                sim.after(p.stop.sample(rng), sim.deliver, PodGone(pod))
            case BindJob(job=job, pods=pods):
                # a pod that ran a job before only ever ran this caller (the core's rule):
                # its dependencies are in place already
                again = all(pid in self._bound for pid in pods)
                self._bound.update(dict.fromkeys(pods))
                bind = (p.rebind if again else p.bind).sample(rng)
                self._running[job] = len(pods)
                for rank in range(len(pods)):
                    sim.after(bind, sim.deliver, RankStarted(job, rank))
                sim.after(bind + self._run_s.get(job, 0.0), self._exit, job, None)
            case KillJob(job=job, reason=reason):
                self._exit(job, reason)
            case JobEnded():
                pass  # the engine tells the workload once the other actions are carried out

    def _exit(self, job_id: str, failure: Failure | None) -> None:
        """Every rank of a running job exits (its planned end, or killed)."""
        ranks = self._running.pop(job_id, None)
        if ranks is None:
            return  # killed before its planned end
        code = 0 if failure is None else 1
        for rank in range(ranks):
            self.sim.deliver(RankExited(job_id, rank, code, failure))
