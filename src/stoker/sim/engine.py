"""The discrete-event engine: a heap of timed events and a virtual clock (no fixed tick).

It hands the core its events (JobSubmitted from the workload, PodReady/RankStarted/
RankExited/PodGone from the virtual runtime, Tick at ``core.next_deadline()``) and gives the
core's actions to the virtual runtime, which schedules their outcomes. The engine decides
nothing: every choice is the core's. Same seed, same events, same records. Every
experiment (``stoker sim firepool``, ``gfs``, ``shared``) runs on this one engine; the
virtual runtime is handed in (it imports nothing of the engine).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from threadpoolctl import threadpool_limits

from stoker.core import (
    Core,
    Event,
    JobClass,
    JobEnded,
    JobSpec,
    JobSubmitted,
    PodFailed,
    PodForgotten,
    PodGone,
    PodState,
    Tick,
)
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

    def run_s(self, sim: Simulator, job_id: str) -> float:
        """How long a bound job runs this time (a job planned with ``Simulator.submit``
        runs its planned time and never asks)."""
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
        runtime: VirtualRuntime,
        *,
        start: float = 0.0,
        record_held: bool = True,
        tick_prio: int = 0,
        on_advance: Callable[[float, float], None] | None = None,
        forget_gone: bool = False,
    ) -> None:
        """``record_held`` keeps the GPUs-held timeline (off for long traces);
        ``tick_prio`` orders Ticks among events at one instant (lower first);
        ``on_advance(t0, t1)`` is told each time the clock moves (for time integrals);
        ``forget_gone``: the core forgets every hp and spot pod once it is gone
        (``PodForgotten``, as the broker tells it after its commit), so a long trace run
        does not keep every pod it ever started (a full-fleet Chronus day starts ~300 k)."""
        self.core = core
        self.workload = workload
        self.now = start
        self._heap: list[tuple[float, int, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0
        # scheduled events called off (``cancel``), dropped when popped or when they are
        # half the heap (a Chronus lease's returned jobs leave planned exits days ahead)
        self._cancelled: set[int] = set()
        self._forget_gone = forget_gone
        # gone hp/spot pods the core forgets at the head of the next batch (not counted
        # as events: the count is the news and submissions the core decided on)
        self._gone: dict[str, None] = {}
        self._tick_at = math.inf
        self._tick_prio = tick_prio
        self._events = 0
        self._record_held = record_held
        self._on_advance = on_advance
        self._held: list[tuple[float, float, float]] = []
        self._last_held = (-1.0, -1.0)
        # news answered while a batch of actions is carried out, delivered after it
        self._carrying = False
        self._news: list[Event] = []
        self.runtime = runtime
        runtime.attach(self)

    # ------------------------------------------------------------------ scheduling

    def at(self, t: float, fn: Callable[..., None], *args: Any, prio: int = 0) -> int:
        """Run ``fn(*args)`` at virtual time ``t`` (never earlier than now); at one instant
        lower ``prio`` first, then FIFO. Returns the event's handle for :meth:`cancel`."""
        self._seq += 1
        heapq.heappush(self._heap, (max(t, self.now), prio, self._seq, fn, args))
        return self._seq

    def cancel(self, handle: int) -> None:
        """Call off a scheduled event (it would have done nothing): it never runs, and
        the clock does not stop at its time."""
        self._cancelled.add(handle)
        if 2 * len(self._cancelled) > len(self._heap):
            # the heap's order is (time, prio, seq), a total order: rebuilt, it pops the
            # same events in the same order
            self._heap = [e for e in self._heap if e[2] not in self._cancelled]
            heapq.heapify(self._heap)
            self._cancelled.clear()

    @property
    def scheduled(self) -> int:
        """How many events were ever scheduled (``at``): unchanged, nothing was since."""
        return self._seq

    def after(self, delay: float, fn: Callable[..., None], *args: Any, prio: int = 0) -> int:
        return self.at(self.now + delay, fn, *args, prio=prio)

    def deliver(self, event: Event) -> None:
        """Hand one event to the core now and carry out its actions."""
        self.deliver_all((event,))

    def deliver_all(self, events: Sequence[Event]) -> None:
        """Hand events of this instant to the core at once (one scheduling pass after them
        all) and carry out the actions.

        News the runtime answers with while it carries out a batch of actions (a pod of an
        instant profile gone or ready, a killed job's ranks exited), and whatever the
        workload submits when told of an end, is held and handed to the core as the next
        batch, once every action of this one is carried out: the actions are carried out in
        the order the core gave them. (Delivered at once, that news let the core start a
        job's next run before the KillJob of its previous run was carried out, which then
        killed the new run: Chronus's lease flush ended jobs that way.)"""
        if self._carrying:
            self._news.extend(events)
            return
        batch = list(events)
        while batch:
            self._events += len(batch)
            if self._gone:
                batch[:0] = [PodForgotten(pod) for pod in self._gone]
                self._gone = {}
            actions = self.core.handle_all(batch, self.now)
            if self._forget_gone:
                self._note_gone(batch)
            self._carrying = True
            try:
                for action in actions:
                    self.runtime.carry_out(action)
                for action in actions:
                    if isinstance(action, JobEnded):
                        self.runtime.job_done(action.job)
            finally:
                self._carrying = False
            self._schedule_tick()
            self._sample_held()
            batch, self._news = self._news, []

    def _note_gone(self, batch: Sequence[Event]) -> None:
        """The hp and spot pods this batch's news left gone: forgotten next."""
        pods = self.core.pods
        for event in batch:
            if isinstance(event, PodGone | PodFailed):
                pod = pods.get(event.pod)
                if (
                    pod is not None
                    and pod.state is PodState.GONE
                    and pod.job_class is not JobClass.POOL
                ):
                    self._gone[event.pod] = None

    def submit(self, spec: JobSpec, run_s: float) -> None:
        """Submit a job now; once bound it runs for ``run_s`` seconds."""
        self.runtime.plan_job(spec.id, run_s)
        self.deliver(JobSubmitted(spec))

    def _schedule_tick(self) -> None:
        deadline = self.core.next_deadline()
        if deadline is not None and deadline < self._tick_at:
            self._tick_at = deadline
            self.at(deadline, self._tick, deadline, prio=self._tick_prio)

    def _tick(self, at: float) -> None:
        if at == self._tick_at:
            self._tick_at = math.inf
        self.deliver(Tick())

    def _sample_held(self) -> None:
        if not self._record_held:
            return
        held = self.core.cluster.used_total
        idle = self.core.idle_gpus
        if (held, idle) != self._last_held:
            self._last_held = (held, idle)
            self._held.append((self.now, held, idle))

    # ------------------------------------------------------------------ run

    def run(self, max_time: float = math.inf) -> SimResult:
        """Run until the workload is done (or ``max_time``); return the records.

        BLAS runs on one thread meanwhile: a forecaster's fit then gives the same bits on
        every machine (its results changed with the core count), and on a busy 2-core
        machine a Cholesky of a few hundred features took 1 s on two threads, 4 ms on one."""
        with threadpool_limits(limits=1, user_api="blas"):
            self._loop(max_time)
        return SimResult(core=self.core, end=self.now, events=self._events, held=self._held)

    def _loop(self, max_time: float) -> None:
        self.workload.begin(self)
        self._sample_held()
        while self._heap and not self.workload.done:
            t, _, seq, fn, args = heapq.heappop(self._heap)
            if seq in self._cancelled:
                self._cancelled.discard(seq)
                continue
            if t > max_time:
                break
            if self._on_advance is not None and t > self.now:
                self._on_advance(self.now, t)
            self.now = t
            fn(*args)
