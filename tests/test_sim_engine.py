"""The discrete-event engine and virtual runtime: ordering, timing, determinism."""

from __future__ import annotations

import pytest

from stoker.core import Cluster, Core, HitPath, PodState, Profile
from stoker.core.registry import preset
from stoker.sim.engine import Simulator
from stoker.sim.params import Dist, RuntimeParams
from stoker.sim.virtual import VirtualRuntime
from stoker.sim.workloads import (
    AgentLoopSpec,
    CallerPlan,
    LoopWorkload,
    MixSpec,
    Step,
    agent_loop,
    mix,
)

PROFILE = Profile("gpu", share=0.9, standby_share=0.1)


def _sim(workload: LoopWorkload, policy: str = "firepool", nodes: int = 1, **kw) -> Simulator:
    core = Core(Cluster.uniform(nodes, 8), [PROFILE], preset(policy).policies)
    prepulled = kw.pop("prepulled", [(f"node-{i}", "gpu") for i in range(nodes)])
    runtime = VirtualRuntime(kw.pop("params", None), kw.pop("seed", 0), prepulled)
    return Simulator(core, workload, runtime, **kw)


def _one_job(start_s: float = 10.0, run_s: float = 2.0) -> LoopWorkload:
    return LoopWorkload([CallerPlan("t", "gpu", start_s, [Step([[("a", run_s)]], 0.0)])])


def test_events_run_in_time_order_fifo_on_ties() -> None:
    sim = _sim(_one_job())
    seen: list[tuple[float, str]] = []
    for t, label in ((5.0, "five"), (1.0, "one-a"), (3.0, "three"), (1.0, "one-b")):
        sim.at(t, lambda label=label: seen.append((sim.now, label)))
    sim.run()
    assert seen == [(1.0, "one-a"), (1.0, "one-b"), (3.0, "three"), (5.0, "five")]


def test_job_timeline_follows_sampled_durations() -> None:
    params = RuntimeParams()
    sim = _sim(_one_job(start_s=10.0, run_s=2.0), params=params)
    result = sim.run()
    (job,) = result.core.jobs.values()
    assert job.submitted == 10.0 and job.path is HitPath.COLD
    assert job.submitted <= job.placed <= job.pod_ready <= job.started <= job.finished
    # a cold start with the image on the node: 20-35 s, then the bind, then exactly the run
    assert params.pod_start.a <= job.pod_ready - job.placed <= params.pod_start.b
    assert job.finished - job.started == pytest.approx(2.0)
    assert result.end == job.finished


def test_image_pull_only_for_the_first_pod_of_a_profile_on_a_node() -> None:
    params = RuntimeParams()
    spec = AgentLoopSpec(callers=1, steps=2, think=Dist("const", 200.0))
    sim = _sim(agent_loop(spec, 0), policy="fresh_pod", prepulled=[], params=params)
    result = sim.run()
    first, second = result.core.jobs.values()
    lo = params.image_pull.a + params.pod_start.a
    assert first.pod_ready - first.placed >= lo
    assert second.pod_ready - second.placed <= params.pod_start.b
    assert sim.runtime.pulls == 1


def test_keepalive_deadline_fires_as_a_tick() -> None:
    # think longer than the 60 s keep-alive: the first pod is stopped at its deadline
    spec = AgentLoopSpec(callers=1, steps=2, think=Dist("const", 100.0))
    result = _sim(agent_loop(spec, 0), policy="warm_reuse").run()
    first, second = result.core.jobs.values()
    assert second.path is HitPath.COLD
    pod = result.core.pods[first.pods[0]]
    assert pod.state in (PodState.STOPPING, PodState.GONE)
    assert pod.held["warm"] == pytest.approx(0.9 * 60.0)


def test_same_seed_same_records_other_seed_differs() -> None:
    def records(seed: int) -> list[tuple]:
        spec = MixSpec(sessions=25, duration_s=300.0)
        result = _sim(mix(spec, seed), nodes=2, seed=seed).run()
        return [
            (j.id, j.submitted, j.started, j.finished, j.path, tuple(j.pods))
            for j in result.core.jobs.values()
        ]

    assert records(3) == records(3)
    assert records(3) != records(4)


def test_workload_plan_is_the_same_under_every_policy() -> None:
    spec = AgentLoopSpec(callers=2, steps=5)
    runs = {}
    for policy in ("fresh_pod", "firepool"):
        core = _sim(agent_loop(spec, 1), policy=policy).run().core
        runs[policy] = sorted(
            (j.spec.tenant, round(j.finished - j.started, 9)) for j in core.jobs.values()
        )
    assert runs["fresh_pod"] == runs["firepool"]


def test_mix_default_has_at_least_3000_requests() -> None:
    assert mix(MixSpec(), 0).requests >= 3000


def test_bad_workload_input_names_the_field() -> None:
    with pytest.raises(ValueError, match="sessions"):
        mix(MixSpec(sessions=0), 0)
    with pytest.raises(ValueError, match="uniform"):
        Dist("uniform", 5.0, 1.0)


def test_a_cancelled_event_never_runs_and_leaves_the_heap() -> None:
    """``cancel``: the event is called off (the clock does not stop at it) and, once the
    called-off events are half the heap, dropped from it; the rest run in their order."""
    sim = _sim(_one_job())
    seen: list[tuple[float, int]] = []
    handles = [sim.at(1.0 + i / 2, lambda i=i: seen.append((sim.now, i))) for i in range(10)]
    for h in handles[:4]:
        sim.cancel(h)
    assert len(sim._heap) == 10  # not half called off: still there, skipped when popped
    sim.cancel(handles[5])
    sim.cancel(handles[8])
    # more than half of the heap called off: rebuilt without them
    assert [e[2] for e in sorted(sim._heap)] == [handles[i] for i in (4, 6, 7, 9)]
    sim.run()
    assert seen == [(1.0 + i / 2, i) for i in (4, 6, 7, 9)]
