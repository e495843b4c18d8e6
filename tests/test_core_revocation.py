"""TenantRevoked in the core: the tenant's jobs are cancelled and none of its pods is kept
warm; other tenants are untouched."""

from __future__ import annotations

from conftest import Driver, make_core
from stoker.core import Failure, JobEnded, KillJob, PodState, StopPod, TenantRevoked


def test_a_revoked_tenant_keeps_no_pod_and_no_job() -> None:
    d = Driver(make_core(gpus=3))
    warm = d.run("t", "w")
    d.finish(warm)  # its pod waits warm for its caller
    running = d.run("t", "r")
    other = d.run("u", "x")  # the third card
    queued = d.submit("t", "q")  # no room: it queues (the warm pod is its own tenant's)
    d.settle()
    if d.core.jobs[queued].state.value != "queued":  # it took t's warm pod: make another
        d.finish(queued)
        queued = d.submit("t", "q2")
    out = d.send(TenantRevoked("t"))
    assert {a.job for a in out if isinstance(a, KillJob)} == {running}
    assert any(isinstance(a, JobEnded) and a.failure is Failure.CANCELLED for a in out)
    d.finish(running, exit_code=137, failure=Failure.CANCELLED)
    stops = [a.reason for _, _, acts in d.log for a in acts if isinstance(a, StopPod)]
    assert "revoked" in stops  # its pods stop as they come free, none kept warm
    d.gone()
    live = [p for p in d.core.pods.values() if p.state is not PodState.GONE]
    assert all(p.owner is None or p.owner[0] == "u" for p in live), live
    assert d.core.jobs[running].failure is Failure.CANCELLED
    assert d.core.jobs[other].state.value == "running"
