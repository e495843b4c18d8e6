"""Tenant shares in the core: fair order across tenants, HP guarantees, caps.

Each test runs the same events with shares and without, so it shows what the shares change
(and fails where they change nothing)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from conftest import Driver, make_core
from stoker.core import JobClass, JobSpec, JobSubmitted, Policies, Profile
from stoker.core.actions import BindJob, StopPod
from stoker.core.registry import preset
from stoker.core.shares import Share, TenantShares, jain
from test_gfs import Gangs, bound, cluster

SHARES = TenantShares()


def _bind_order(d: Driver) -> list[str]:
    return [a.job for a in d.actions(BindJob)]


def _flood(shares: TenantShares | None) -> list[str]:
    """Tenant a floods a two-pod profile with six jobs of one tag; tenant b then submits one;
    a's jobs end one by one. The order jobs were bound in."""
    d = Driver(make_core(policies=Policies(shares=shares)))
    flood = [d.submit("a", "loop") for _ in range(6)]
    d.settle()
    d.submit("b", "verifier")
    d.settle()
    for jid in flood:
        if d.core.jobs[jid].state.value == "running":
            d.finish(jid)
        d.settle()
        for other in list(d.running):
            d.finish(other)
            d.settle()
    return _bind_order(d)


def test_one_job_of_another_tenant_does_not_wait_for_a_flood() -> None:
    fifo = _flood(None)
    fair = _flood(SHARES)
    # submit order: b's job waits for all six of a's; fair order: it goes next
    assert fifo.index("job-7") == 6
    assert fair.index("job-7") == 2
    assert sorted(fair) == sorted(fifo)  # every job ran, either way


def test_a_weight_gives_a_tenant_more_of_the_queue() -> None:
    """Two tenants flood one pod; the one of weight 3 gets three starts to the other's one."""

    def order(shares: TenantShares) -> str:
        d = Driver(make_core(gpus=1, policies=Policies(shares=shares)))
        for _ in range(8):
            d.submit("a", "x")
            d.submit("b", "y")
        d.settle()
        while d.running:
            d.finish(next(iter(d.running)))
            d.settle()
        return "".join(d.core.jobs[j].spec.tenant for j in _bind_order(d))

    even = order(SHARES)
    weighted = order(TenantShares({"a": Share(weight=3.0)}))
    assert even[:8].count("a") == 4
    assert weighted[:8].count("a") == 6


def _guarantee(shares: TenantShares | None) -> list:
    """A GPU pool of 4 GPUs: tenant a runs 2 HP GPUs; b, guaranteed the GPU pool, queues a
    4-GPU HP job; a then asks for 2 more."""
    policies = replace(preset("gfs").policies, shares=shares)
    g = Gangs(cluster(4), policies)
    hp = JobClass.HP
    out = g.submit(JobSpec("a1", "a", "A", job_class=hp, gpus=2, duration=100.0), 0.0)
    out += g.submit(JobSpec("b1", "b", "A", job_class=hp, gpus=4, duration=100.0), 1.0)
    out += g.submit(JobSpec("a2", "a", "A", job_class=hp, gpus=2, duration=100.0), 2.0)
    out += g.finish("a1", 100.0)
    return bound(out)


def test_a_guarantee_is_not_lent_while_its_tenant_waits() -> None:
    # without shares a's second job takes the free half and b waits for both of a's
    assert _guarantee(None) == ["a1", "a2"]
    # b's guarantee holds the free half back from a (borrowing), so b starts when a1 ends
    assert _guarantee(TenantShares({"b": Share(hp_gpus={"A": 4.0})})) == ["a1", "b1"]


@pytest.mark.parametrize("policy", ["gfs", "yarn-cs"])
def test_a_borrower_held_back_does_not_hold_the_queue(policy: str) -> None:
    """a's borrowing job is first in the queue and held back by b's guarantee: b's job
    behind it still goes (with the stop rule of YARN-CS too, where a held-back job that
    ended the pass would wait on b, and b on it, for ever)."""
    shares = TenantShares({"b": Share(hp_gpus={"A": 4.0})})
    g = Gangs(cluster(4), replace(preset(policy).policies, shares=shares))
    hp = JobClass.HP
    out = g.submit(JobSpec("a1", "a", "A", job_class=hp, gpus=4, duration=100.0), 0.0)
    out += g.submit(JobSpec("a2", "a", "A", job_class=hp, gpus=3, duration=100.0), 1.0)
    out += g.submit(JobSpec("b1", "b", "A", job_class=hp, gpus=3, duration=100.0), 2.0)
    out += g.finish("a1", 100.0)
    assert bound(out) == ["a1", "b1"]
    out = g.finish("b1", 200.0)
    assert bound(out) == ["a2"]


def test_idle_guarantee_is_lent() -> None:
    """Nobody waits on b's guarantee: a borrows it."""
    policies = replace(preset("gfs").policies, shares=TenantShares({"b": Share(hp_gpus={"A": 4})}))
    g = Gangs(cluster(4), policies)
    out = g.submit(JobSpec("a1", "a", "A", job_class=JobClass.HP, gpus=4, duration=9.0), 0.0)
    assert bound(out) == ["a1"]


def test_spot_queue_is_in_fair_order() -> None:
    g = Gangs(cluster(1), replace(preset("yarn-cs").policies, shares=SHARES))
    spot = JobClass.SPOT
    out = []
    for i in range(4):
        out += g.submit(JobSpec(f"a{i}", "a", "A", job_class=spot, gpus=1, duration=10.0), 0.0)
    out += g.submit(JobSpec("b0", "b", "A", job_class=spot, gpus=1, duration=10.0), 0.0)
    now = 0.0
    while len(bound(out)) < 5:
        now += 10.0
        running = [j for j in g.core.jobs.values() if j.state.value == "running"]
        if not running:  # the spot quota held them all: nothing to compare
            break
        for job in running:
            out += g.finish(job.id, now)
    assert bound(out)[:2] == ["a0", "b0"]


def test_caps_refuse_at_submit() -> None:
    shares = TenantShares(default=Share(max_queued=2, max_timeout_s=60.0))
    core = make_core(gpus=1, policies=Policies(shares=shares))
    long = JobSpec("x", "a", "p", "t", timeout_s=61.0)
    refusal = core.limit(long)
    assert refusal is not None and refusal.field == "timeout_s" and not refusal.retry
    for i in range(3):  # one runs (placed), two queue
        core.handle(JobSubmitted(JobSpec(f"j{i}", "a", "p", "t")), 0.0)
    over = core.limit(JobSpec("j3", "a", "p", "t"))
    assert over is not None and over.retry and "max_queued" in over.reason
    # the driver asks before it submits; a replayed submit is not refused again
    core.handle(JobSubmitted(JobSpec("j3", "a", "p", "t")), 0.0)
    assert core.books.queued["a"] == 3
    assert core.limit(JobSpec("k", "b", "p", "t")) is None  # another tenant's own count
    assert make_core().limit(long) is None  # no shares, no caps


def test_warm_pod_cap_per_tenant() -> None:
    def stops(shares: TenantShares | None) -> list[str]:
        d = Driver(make_core(gpus=3, policies=Policies(shares=shares)))
        jobs = [d.submit("a", tag) for tag in "xyz"]
        d.settle()
        for jid in jobs:
            d.finish(jid)
        return [a.reason for a in d.actions(StopPod)]

    assert stops(None) == []
    assert stops(TenantShares(default=Share(max_warm_pods=1))) == ["warm_cap", "warm_cap"]


def test_share_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="weight"):
        Share(weight=0)
    with pytest.raises(ValueError, match=r"hp_gpus\.A"):
        Share(hp_gpus={"A": -1})
    with pytest.raises(ValueError, match="max_queued"):
        Share(max_queued=-1)


def test_jain() -> None:
    assert jain([1.0, 1.0, 1.0]) == pytest.approx(1.0)
    assert jain([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert jain([]) == 1.0


def test_gpu_profile_cost_is_its_share_of_the_pool() -> None:
    """Fair tags of one profile's queue step by the job's share of its GPU pool."""
    core = make_core(
        nodes=1, gpus=4, profiles=[Profile("p", gpus=2)], policies=Policies(shares=SHARES)
    )
    for i in range(4):
        core.handle(JobSubmitted(JobSpec(f"j{i}", "a", "p", "t")), 0.0)
    tags = [core.jobs[f"j{i}"].fair_tag for i in range(4)]
    assert tags == pytest.approx([0.0, 0.5, 1.0, 1.5])
