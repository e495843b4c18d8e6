"""Metrics come from the records: GPU-seconds held (with the open state accrued to the end)
and handover between callers on one GPU."""

from __future__ import annotations

import pytest

from stoker.core import Cluster, Core, Profile
from stoker.core.registry import preset
from stoker.sim import metrics
from stoker.sim.engine import Simulator
from stoker.sim.params import Dist, RuntimeParams
from stoker.sim.virtual import VirtualRuntime
from stoker.sim.workloads import AgentLoopSpec, CallerPlan, LoopWorkload, Step, agent_loop

PROFILE = Profile("gpu", share=0.9, standby_share=0.1)


def _run(workload: LoopWorkload, policy: str, gpus: int = 8):
    core = Core(Cluster.uniform(1, gpus), [PROFILE], preset(policy).policies)
    sim = Simulator(core, workload, VirtualRuntime(RuntimeParams(), 0, [("node-0", "gpu")]))
    return sim.run()


def test_held_accrues_the_open_state_to_the_end() -> None:
    plan = CallerPlan("t", "gpu", 0.0, [Step([[("a", 5.0)]], 0.0)])
    result = _run(LoopWorkload([plan]), "warm_reuse")
    held = metrics.held(result)
    # one pod from submit (t=0) to the end (its job's finish), all of it at a 0.9 share
    assert held.total == pytest.approx(0.9 * result.end)
    (job,) = result.core.jobs.values()
    assert held.by_state["starting"] == pytest.approx(0.9 * job.pod_ready)
    assert held.by_state["active"] == pytest.approx(0.9 * (result.end - job.pod_ready))


def test_handover_without_standby_pays_stop_and_start() -> None:
    params = RuntimeParams()
    spec = AgentLoopSpec(callers=4, steps=3, run=Dist("const", 30.0))
    no_standby = metrics.handovers(_run(agent_loop(spec, 0), "warm_reuse", gpus=2).core)
    assert len(no_standby) > 0
    assert min(no_standby) >= params.stop.a + params.pod_start.a
    standby = metrics.handovers(_run(agent_loop(spec, 0), "firepool", gpus=2).core)
    assert len(standby) > 0 and min(standby) < params.pod_start.a
