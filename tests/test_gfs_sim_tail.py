"""The trace simulator's tail and event order (issue 9, speed): a lease flush never ends a
job, Chronus's closed-form leases after the last arrival end every job where flushing
every lease would, and the forecaster's clocks stop at the window's end where no forecast
changes a decision. Each test fails on the behaviour before."""

from __future__ import annotations

import pytest

import stoker.sim.gfs as simmod
from stoker.core import Core
from stoker.core.gfs.leases import Leases
from stoker.core.registry import preset
from stoker.sim.gfs import Window, simulate
from stoker.traces.base import Trace, TraceJob, TraceNode
from test_gfs import _busy_trace, _FlatForecaster

STRIP = ("wall_s", "events_per_s", "events")


def _tail_trace() -> Trace:
    """Two GPU pools; HP jobs that run for days past a one-day window (the v2026 trace's
    longest run months), spot jobs and short HP jobs that contend inside it."""
    nodes = [TraceNode(f"a{i}", "A", 8) for i in range(3)] + [TraceNode("b0", "B", 8)]
    jobs = []
    for i in range(40):
        model = "A" if i % 4 else "B"
        cls = "hp" if i % 3 else "spot"
        long = cls == "hp" and i % 5 == 0
        jobs.append(
            TraceJob(
                f"j{i:02d}",
                f"t{i % 3}",
                model,
                float([1, 2, 1, 4, 0.5][i % 5]),
                1 + (i % 7 == 0),
                float(i * 2000),
                (5 + i) * 86400.0 + 17.0 * i if long else 900.0 + 300.0 * (i % 11),
                cls,
            )
        )
    return Trace("tail", nodes, jobs)


def _run(trace: Trace, name: str, window: Window, **kw) -> tuple[dict, Core]:
    seen: list[Core] = []

    class Keep(Core):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            seen.append(self)

    original = simmod.Core
    simmod.Core = Keep  # type: ignore[misc]
    try:
        result = simulate(trace, preset(name), window, **kw)
    finally:
        simmod.Core = original  # type: ignore[misc]
    return result.metrics, seen[0]


def test_a_lease_flush_never_ends_a_job() -> None:
    """Chronus returns every running job's lease each 20 minutes; the job runs on. Before,
    the runtime's news of a stopped pod was handed to the core while it still carried out
    the flush's actions: a job re-placed on that room was bound, and then its previous
    run's KillJob killed the new run, so the job ended (preempted) at the flush."""
    # a full node; a job submitted later has a smaller id, so the flush (in id order) frees
    # the room of a job queued behind the next one it returns
    nodes = [TraceNode("a0", "A", 8)]
    jobs = [
        TraceJob(f"j{9 - i}", "t", "A", 1.0, 1, float(i), 5000.0 + 500.0 * i, "hp")
        for i in range(8)
    ]
    trace = Trace("full", nodes, jobs)
    metrics, core = _run(trace, "chronus", Window(0.0, 0.0, 100.0))
    assert metrics["hp.jobs"] + metrics["spot.jobs"] == len(trace.jobs)
    for job in core.jobs.values():
        assert job.failure is None, job.id
        # every lease return costs a restart: no job ends before its duration has run
        assert job.finished - job.first_start >= job.spec.duration - 1e-6, job.id


def test_closed_form_leases_end_every_job_where_flushing_would(monkeypatch) -> None:
    """After the last arrival, a GPU pool with nothing queued has its HP jobs charged every
    later lease return at once: each job ends, queues and runs exactly as flushing every
    lease would make it (on far fewer events)."""
    trace = _tail_trace()
    window = Window(0.0, 0.0, 86400.0)
    charged: list[str] = []
    closed_leases = Leases.charge_closed

    def spy(self, job, now):
        charged.append(job.id)
        closed_leases(self, job, now)

    monkeypatch.setattr(Leases, "charge_closed", spy)
    closed, closed_core = _run(trace, "chronus", window)
    assert charged  # the tail's long HP jobs were charged at once
    charged.clear()
    monkeypatch.setattr(Leases, "closable", lambda self: False)
    flushed, flushed_core = _run(trace, "chronus", window)
    assert not charged
    record = lambda core: {  # noqa: E731
        j.id: (j.finished, j.queue_s, j.first_start, j.periods_ok) for j in core.jobs.values()
    }
    assert record(closed_core) == record(flushed_core)
    same = ("hp.p99_jct_s", "hp.mean_queue_s", "spot.mean_jct_s", "gpu_allocation_rate")
    assert {k: closed[k] for k in same} == {k: flushed[k] for k in same}
    assert closed["events"] < flushed["events"] / 2


@pytest.mark.parametrize("name", ["gfs", "yarn-cs"])
def test_forecaster_clocks_stop_at_the_window_end(monkeypatch, name: str) -> None:
    """With the window's gate the spot quota does not hold after the window (the authors'),
    so the driver stops querying and refitting there (it ran on while anything was queued,
    the months of the longest HP jobs); the results are those of a run whose clocks run on."""
    trace = _busy_trace()
    window = Window(0.0, 86400.0, 2 * 86400.0)
    asked: list[int] = []
    predict = _FlatForecaster.predict_peaks

    def spy(self, keys, peaks, now_min, horizon_h, recorded_min=None):
        asked.append(now_min)
        return predict(self, keys, peaks, now_min, horizon_h, recorded_min)

    monkeypatch.setattr(_FlatForecaster, "predict_peaks", spy)
    stopped, _ = _run(trace, name, window, forecaster=_FlatForecaster())
    assert asked and max(asked) * 60 < window.end
    stop_at = asked[:]

    class RunOn(simmod.TraceWorkload):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args[:8])  # no ``clocks_until``: the clocks run on

    asked.clear()
    monkeypatch.setattr(simmod, "TraceWorkload", RunOn)
    ran_on, _ = _run(trace, name, window, forecaster=_FlatForecaster())
    assert max(asked) * 60 >= window.end and asked[: len(stop_at)] == stop_at
    # the whole run's GPU-time integral is summed over other clock steps: its last bits
    integral = "useful_gpu_time_rate"
    assert stopped[integral] == pytest.approx(ran_on[integral], rel=1e-12)
    skip = (*STRIP, integral)
    assert {k: v for k, v in stopped.items() if k not in skip} == {
        k: v for k, v in ran_on.items() if k not in skip
    }


@pytest.mark.parametrize("name", ["chronus", "gfs", "yarn-cs"])
def test_ranks_of_one_instant_start_in_one_batch_and_decide_the_same(monkeypatch, name) -> None:
    """The RankStarted news of every job bound at one instant (a trace's jobs bind in no
    time; a Chronus lease binds every job it re-places) is one batch for the core: fewer
    ``handle_all`` calls, the same events, every job's record and every metric the same as
    with a batch per job (the runtime joining nothing)."""
    from stoker.sim.virtual import VirtualRuntime

    trace = _busy_trace()
    window = Window(0.0, 86400.0, 2 * 86400.0)
    calls: list[int] = []
    handle_all = Core.handle_all

    def spy(self, events, now):
        calls.append(1)
        return handle_all(self, events, now)

    monkeypatch.setattr(Core, "handle_all", spy)
    joined, joined_core = _run(trace, name, window, forecaster=_FlatForecaster())
    n_joined = len(calls)
    calls.clear()
    # a runtime that forgets its open batch before every action: a batch per job
    carry_out = VirtualRuntime.carry_out

    def apart_carry_out(self, action):
        self._starting = None
        carry_out(self, action)

    monkeypatch.setattr(VirtualRuntime, "carry_out", apart_carry_out)
    apart, apart_core = _run(trace, name, window, forecaster=_FlatForecaster())
    assert n_joined < len(calls)
    record = lambda core: {  # noqa: E731
        j.id: (j.finished, j.queue_s, j.first_start, j.evictions, j.periods_ok)
        for j in core.jobs.values()
    }
    assert record(joined_core) == record(apart_core)
    strip = ("wall_s", "events_per_s")
    assert {k: v for k, v in joined.items() if k not in strip} == {
        k: v for k, v in apart.items() if k not in strip
    }


@pytest.mark.parametrize("name", ["chronus", "gfs", "yarn-cs"])
def test_a_trace_run_forgets_gone_pods_and_decides_the_same(monkeypatch, name) -> None:
    """The trace simulator tells the core to forget every hp and spot pod once it is gone
    (``PodForgotten``, as the broker does after its commit; a full-fleet Chronus day starts
    ~300 k pods): the registry holds the pods still there, and every job's record, the
    events counted and every metric are those of a run that keeps them all."""
    from stoker.core import PodForgotten, PodState
    from stoker.sim.engine import Simulator

    trace = _busy_trace()
    window = Window(0.0, 86400.0, 2 * 86400.0)
    sizes: list[int] = []
    handle_all = Core.handle_all

    def spy(self, events, now):
        # every gone pod is forgotten at the head of the batch after the one it went in
        gone = {p.id for p in self.pods.values() if p.state is PodState.GONE}
        assert gone == {e.pod for e in events if isinstance(e, PodForgotten)}
        sizes.append(len(self.pods))
        return handle_all(self, events, now)

    monkeypatch.setattr(Core, "handle_all", spy)
    forgot, forgot_core = _run(trace, name, window, forecaster=_FlatForecaster())
    most = max(sizes)
    monkeypatch.setattr(Core, "handle_all", handle_all)
    monkeypatch.setattr(Simulator, "_note_gone", lambda self, batch: None)
    kept, kept_core = _run(trace, name, window, forecaster=_FlatForecaster())
    assert len(kept_core.pods) > 3 * most  # kept, the registry grows with every pod started
    record = lambda core: {  # noqa: E731
        j.id: (j.finished, j.queue_s, j.first_start, j.evictions, j.periods_ok, j.overhead)
        for j in core.jobs.values()
    }
    assert record(forgot_core) == record(kept_core)
    strip = ("wall_s", "events_per_s")
    assert {k: v for k, v in forgot.items() if k not in strip} == {
        k: v for k, v in kept.items() if k not in strip
    }


def test_a_killed_runs_planned_exit_leaves_the_heap() -> None:
    """Every job a Chronus lease returns had its exit planned; killed, that exit is called
    off, so the engine's heap holds the planned exits of the running jobs and no more
    (before, each lease left one per returned job, dropped only at its far time)."""
    from stoker.sim.engine import Simulator

    trace = _tail_trace()
    heaps: list[tuple[int, int]] = []
    deliver_all = Simulator.deliver_all

    def spy(self, events):
        deliver_all(self, events)
        if not self._carrying:
            live = len(self._heap) - len(self._cancelled)
            heaps.append((live, len(self.runtime._running)))

    original = Simulator.deliver_all
    Simulator.deliver_all = spy  # type: ignore[method-assign]
    try:
        _run(trace, "chronus", Window(0.0, 0.0, 86400.0))
    finally:
        Simulator.deliver_all = original  # type: ignore[method-assign]
    # the planned exits of running jobs, the next tick, a few submissions and rank starts:
    # bounded by the running jobs, not by the leases returned so far
    assert heaps and all(live <= running + 45 for live, running in heaps)
