"""Each baseline behaves as its name says when the simulator drives the core with it."""

from __future__ import annotations

from collections import Counter

import pytest

from stoker.core import HitPath, PodState
from stoker.core.policies import AlwaysOn, FittedKeepAlive
from stoker.core.registry import WARM_PRESETS, preset
from stoker.sim import metrics
from stoker.sim.firepool import ClusterSpec, FirepoolConfig, Run, simulate
from stoker.sim.params import Dist
from stoker.sim.workloads import AgentLoopSpec, MixSpec, agent_loop, mix

CFG = FirepoolConfig()
MIX = MixSpec(sessions=30, duration_s=600.0)


def _mix(policy: str) -> Run:
    return simulate(CFG, policy, mix(MIX, 0), ClusterSpec(2))


def _paths(run: Run) -> Counter:
    return Counter(j.path for j in run.core.jobs.values())


def test_fresh_pod_never_reuses_and_stops_every_pod() -> None:
    run = _mix("fresh_pod")
    assert set(_paths(run)) == {HitPath.COLD}
    assert all(p.jobs_run <= 1 for p in run.core.pods.values())
    assert all(p.held.get("warm", 0.0) == 0.0 for p in run.core.pods.values())


def test_fresh_tag_never_reuses_but_pods_linger_warm() -> None:
    run = _mix("fresh_tag")
    assert set(_paths(run)) == {HitPath.COLD}
    assert all(p.jobs_run <= 1 for p in run.core.pods.values())
    assert metrics.held(run.result).by_state["warm"] > 0.0


def test_warm_reuse_hits_warm_and_has_no_standby() -> None:
    run = _mix("warm_reuse")
    paths = _paths(run)
    assert paths[HitPath.WARM] > paths[HitPath.COLD]
    assert HitPath.STANDBY not in paths
    assert all(p.owner is not None for p in run.core.pods.values())


def test_firepool_promotes_standby_on_handover() -> None:
    spec = AgentLoopSpec(callers=12, steps=4, run=Dist("lognormal", 30.0, 0.3))
    runs = {p: simulate(CFG, p, agent_loop(spec, 0), ClusterSpec(1)) for p in WARM_PRESETS}
    assert _paths(runs["firepool"])[HitPath.STANDBY] > 0
    no_standby = metrics.percentile(metrics.handovers(runs["warm_reuse"].core), 50)
    standby = metrics.percentile(metrics.handovers(runs["firepool"].core), 50)
    assert standby < no_standby


def test_always_on_never_stops_for_time_fitted_learns_pauses() -> None:
    assert isinstance(preset("always_on").policies.keepalive, AlwaysOn)
    spec = AgentLoopSpec(callers=1, steps=20, think=Dist("const", 2.0))
    always = simulate(CFG, "always_on", agent_loop(spec, 0), ClusterSpec(1))
    assert all(p.state is not PodState.GONE for p in always.core.pods.values())
    fitted = simulate(CFG, "fitted", agent_loop(spec, 0), ClusterSpec(1))
    keepalive = fitted.core.policies.keepalive
    assert isinstance(keepalive, FittedKeepAlive)
    # the pauses (2 s think + the next bind) are learned: far below the 60 s fallback
    assert keepalive.ttl(("agent-0", "loop")) < 10.0


def test_keepalive_policies_hold_less_than_always_on() -> None:
    held = {p: metrics.held(_mix(p).result).total for p in ("always_on", "firepool", "fitted")}
    assert held["fitted"] < held["always_on"]
    assert held["firepool"] < held["always_on"]


def test_unknown_policy_names_the_field() -> None:
    with pytest.raises(ValueError, match="preset: unknown 'nope'"):
        preset("nope")
