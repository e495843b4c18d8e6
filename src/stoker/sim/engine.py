"""The discrete-event engine: a heap of timed events and a virtual clock (no fixed tick).

It hands the core its events (JobSubmitted from the workload, PodReady/RankStarted/
RankExited/PodGone from the virtual runtime, Tick at ``core.next_deadline()``) and gives the
core's actions to the virtual runtime, which schedules their outcomes. The engine decides
nothing: every choice is the core's. Same seed, same events, same records.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from stoker.core import Core, Event, JobEnded, JobSpec, JobSubmitted, Tick
from stoker.sim.params import RuntimeParams
from stoker.sim.virtual import VirtualRuntime


class Workload(Protocol):
    """Callers that submit jobs; closed loops react to their jobs ending."""

    def begin(self, sim: Simulator) -> None:
        """Schedule the first submissions (``sim.at``) before the clock starts."""
        ...

    def job_done(self, sim: Simulator, job_id: str) -> None:
        """A job of this workload ended (finished, failed or cancelled) at ``sim.now``."""
        ...

    @property
    def done(self) -> bool:
        """Every caller has finished its plan: the simulation ends here."""
        ...


@dataclass
class SimResult:
    """What a run leaves: the core (its jobs and pods are the records) and the end time."""

    core: Core
    end: float
    events: int
    # (time, GPUs held by all pods, GPUs held by idle warm + standby pods) after each change
    held: list[tuple[float, float, float]] = field(default_factory=list)


class Simulator:
    """Drives one :class:`Core` through a :class:`VirtualRuntime` on a virtual clock."""

    def __init__(
        self,
        core: Core,
        workload: Workload,
        params: RuntimeParams | None = None,
        seed: int = 0,
        prepulled: Iterable[tuple[str, str]] = (),
    ) -> None:
        """``prepulled``: (node, profile) pairs whose base image is on the node at time 0."""
        self.core = core
        self.workload = workload
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0
        self._tick_at = math.inf
        self._events = 0
        self._held: list[tuple[float, float, float]] = []
        self._last_held = (-1.0, -1.0)
        # the runtime's durations come from their own stream, so the workload's plan (drawn
        # from the workload's streams) is the same under every policy
        rng = np.random.default_rng([seed, 0x5717])
        self.runtime = VirtualRuntime(self, params or RuntimeParams(), rng, prepulled)

    # ------------------------------------------------------------------ scheduling

    def at(self, t: float, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` at virtual time ``t`` (never earlier than now); FIFO on ties."""
        self._seq += 1
        heapq.heappush(self._heap, (max(t, self.now), self._seq, fn, args))

    def after(self, delay: float, fn: Callable[..., None], *args: Any) -> None:
        self.at(self.now + delay, fn, *args)

    def deliver(self, event: Event) -> None:
        """Hand one event to the core now and carry out its actions."""
        self._events += 1
        actions = self.core.handle(event, self.now)
        for action in actions:
            self.runtime.carry_out(action)
        for action in actions:
            if isinstance(action, JobEnded):
                self.runtime.job_done(action.job)
        self._schedule_tick()
        self._sample_held()

    def submit(self, spec: JobSpec, run_s: float) -> None:
        """Submit a job now; once bound it runs for ``run_s`` seconds."""
        self.runtime.plan_job(spec.id, run_s)
        self.deliver(JobSubmitted(spec))

    def _schedule_tick(self) -> None:
        deadline = self.core.next_deadline()
        if deadline is not None and deadline < self._tick_at:
            self._tick_at = deadline
            self.at(deadline, self._tick, deadline)

    def _tick(self, at: float) -> None:
        if at == self._tick_at:
            self._tick_at = math.inf
        self.deliver(Tick())

    def _sample_held(self) -> None:
        held = sum(g.used for g in self.core.cluster.gpus.values())
        idle = self.core.idle_gpus
        if (held, idle) != self._last_held:
            self._last_held = (held, idle)
            self._held.append((self.now, held, idle))

    # ------------------------------------------------------------------ run

    def run(self, max_time: float = math.inf) -> SimResult:
        """Run until the workload is done (or ``max_time``); return the records."""
        self.workload.begin(self)
        self._sample_held()
        while self._heap and not self.workload.done:
            t, _, fn, args = heapq.heappop(self._heap)
            if t > max_time:
                break
            self.now = t
            fn(*args)
        return SimResult(core=self.core, end=self.now, events=self._events, held=self._held)
