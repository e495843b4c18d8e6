"""Matching: warm hit, standby hit, cold start, queueing, reclaim and recycling."""

from __future__ import annotations

from conftest import Driver, make_core
from stoker.core import (
    BindJob,
    HitPath,
    JobState,
    PodFailed,
    PodState,
    Policies,
    Profile,
    PromoteStandby,
    RecyclePod,
    StartPod,
    StopPod,
    Tick,
)
from stoker.core.policies import BesideActive, QueueDrivenBudget, ReuseMatching, StaticBudget


def test_cold_start_then_bind_when_ready(driver: Driver) -> None:
    jid = driver.submit()
    starts = driver.actions(StartPod)
    assert len(starts) == 1 and not starts[0].standby
    job = driver.core.jobs[jid]
    assert job.state is JobState.PLACED and job.path is HitPath.COLD
    driver.ready()
    assert driver.actions(BindJob) == [BindJob(jid, (starts[0].pod,))]
    assert driver.core.jobs[jid].state is JobState.BINDING


def test_warm_hit_same_pair_only() -> None:
    driver = Driver(make_core(gpus=3))
    first = driver.run("t", "a")
    pod = driver.core.jobs[first].pods[0]
    driver.finish(first, at=1.0)
    assert driver.core.pods[pod].state is PodState.WARM
    assert driver.core.pods[pod].owner == ("t", "a")
    # another tag of the same tenant and the same tag of another tenant never reuse it
    other_tag = driver.submit("t", "b")
    other_tenant = driver.submit("u", "a")
    for jid in (other_tag, other_tenant):
        assert driver.core.jobs[jid].path is not HitPath.WARM
        assert pod not in driver.core.jobs[jid].pods
    driver.settle()
    for jid in (other_tag, other_tenant):
        driver.finish(jid)
    again = driver.submit("t", "a")
    assert driver.core.jobs[again].path is HitPath.WARM
    assert driver.core.jobs[again].pods == [pod]
    # a warm hit binds at once, with no pod start
    assert driver.log[-1][2] == [BindJob(again, (pod,))]


def test_warm_hit_needs_the_same_profile() -> None:
    d = Driver(make_core(gpus=4, profiles=[Profile("p"), Profile("q")]))
    first = d.run("t", "a", "p")
    d.finish(first)
    other = d.submit("t", "a", "q")
    assert d.core.jobs[other].path is HitPath.COLD


def test_most_recently_idle_pod_is_taken() -> None:
    d = Driver(make_core(gpus=3))
    jobs = [d.submit("t", "a") for _ in range(3)]
    d.settle()
    pods = [d.core.jobs[j].pods[0] for j in jobs]
    for i, jid in enumerate([jobs[1], jobs[0], jobs[2]]):
        d.finish(jid, at=1.0 + i)
    nxt = d.submit("t", "a")
    assert d.core.jobs[nxt].pods == [pods[2]]
    nxt2 = d.submit("t", "a")
    assert d.core.jobs[nxt2].pods == [pods[0]]


def test_reuse_false_never_warm_hits() -> None:
    d = Driver(make_core(policies=Policies(matching=ReuseMatching(reuse=False))))
    first = d.run("t", "a")
    pod = d.core.jobs[first].pods[0]
    d.finish(first)
    again = d.submit("t", "a")
    assert d.core.jobs[again].path is HitPath.COLD
    assert pod not in d.core.jobs[again].pods


def test_queue_when_full_and_fifo_within_profile() -> None:
    d = Driver(make_core(gpus=1))
    running = d.run("t", "a")
    q1 = d.submit("t", "b")
    q2 = d.submit("t", "c")
    assert d.core.queued() == [q1, q2]
    assert d.core.jobs[q1].state is JobState.QUEUED
    d.finish(running)
    # the warm pod of (t, a) is reclaimed for the head of the queue
    stops = d.actions(StopPod)
    assert [s.reason for s in stops] == ["reclaim"]
    d.gone()
    assert d.core.jobs[q1].state is JobState.PLACED
    assert d.core.queued() == [q2]


def test_queued_job_takes_its_own_warm_pod_before_a_reclaim() -> None:
    """A pod turning warm serves a queued job of its own pair, not a reclaim for another."""
    d = Driver(make_core(gpus=1))
    running = d.run("t", "a")
    other = d.submit("t", "b")
    mine = d.submit("t", "a")
    pod = d.core.jobs[running].pods[0]
    d.finish(running)
    assert d.core.jobs[mine].path is HitPath.WARM
    assert d.core.jobs[mine].pods == [pod]
    assert d.core.jobs[other].state is JobState.QUEUED
    assert not d.actions(StopPod)


def test_cold_start_reclaims_idle_pods_of_other_pairs() -> None:
    d = Driver(make_core(gpus=2))
    a = d.run("t", "a")
    b = d.run("t", "b")
    d.finish(a, at=1.0)
    d.finish(b, at=2.0)
    c = d.submit("t", "c")
    # the lowest-value idle pod (least keep-alive left) is stopped, and only one
    stops = d.actions(StopPod)
    assert stops == [StopPod(d.core.jobs[a].pods[0], "reclaim")]
    assert d.core.jobs[c].state is JobState.QUEUED
    d.gone()
    assert d.core.jobs[c].state is JobState.PLACED and d.core.jobs[c].path is HitPath.COLD


def test_reclaim_survives_victim_failing_instead_of_going() -> None:
    """A reclaim victim that reports PodFailed (not PodGone) must not strand the job."""
    d = Driver(make_core(gpus=1))
    a = d.run("t", "a")
    d.finish(a)
    c = d.submit("t", "c")
    (stop,) = d.actions(StopPod)
    d.stopping.clear()
    d.send(PodFailed(stop.pod))
    assert d.core.jobs[c].state is JobState.PLACED


def test_recycle_gives_a_new_pod_id() -> None:
    d = Driver(make_core(gpus=1, profiles=[Profile("p", recyclable=True)]))
    a = d.run("t", "a")
    old = d.core.jobs[a].pods[0]
    d.finish(a)
    b = d.submit("t", "b")
    (rec,) = d.actions(RecyclePod)
    assert rec.pod == old and rec.new_pod != old
    assert d.core.pods[old].state is PodState.GONE
    assert d.core.jobs[b].pods == [rec.new_pod]
    assert not d.actions(StopPod)
    d.ready()
    assert d.core.jobs[b].state is JobState.BINDING
    assert d.core.pods[rec.new_pod].owner == ("t", "b")
    assert d.core.pods[old].owner == ("t", "a")


def test_standby_hit_when_gpu_holds_only_idle_warm_pods() -> None:
    prof = Profile("p", share=0.9, standby_share=0.1)
    d = Driver(make_core(gpus=1, profiles=[prof]))
    a = d.run("t", "a")
    active = d.core.jobs[a].pods[0]
    standby = [s.pod for s in d.actions(StartPod) if s.standby]
    assert len(standby) == 1
    assert d.core.pods[standby[0]].state is PodState.STANDBY
    # while the active pod runs, a new caller cannot take the standby: it queues
    b = d.submit("t", "b")
    assert d.core.jobs[b].state is JobState.QUEUED
    d.finish(a)
    # the active pod turned warm, so the standby is promoted for the waiting job
    assert d.core.jobs[b].path is HitPath.STANDBY
    assert d.core.jobs[b].pods == standby
    assert PromoteStandby(standby[0]) in d.log[-1][2]
    assert StopPod(active, "handover") in d.log[-1][2]
    gpu = d.core.cluster.gpus[d.core.pods[standby[0]].gpus[0]]
    assert gpu.allocs == {standby[0]: 0.9}


def test_standby_not_taken_by_a_gang_against_its_own_warm_pod() -> None:
    """A gang taking a warm pod must not promote the standby that sits on that pod's GPU."""
    prof = Profile("p", share=0.9, standby_share=0.1)
    d = Driver(make_core(gpus=3, profiles=[prof]))
    a = d.run("t", "a")
    warm = d.core.jobs[a].pods[0]
    d.finish(a)
    g = d.submit("t", "a", workers=2)
    job = d.core.jobs[g]
    assert warm in job.pods
    assert d.core.pods[warm].state is PodState.ACTIVE
    assert StopPod(warm, "handover") not in d.actions(StopPod)
    d.settle()
    assert d.core.jobs[g].state is JobState.RUNNING


def test_queue_driven_budget_default_is_used() -> None:
    assert isinstance(Policies().budget, QueueDrivenBudget)


def test_gang_never_cold_starts_on_the_gpu_of_a_standby_it_promotes() -> None:
    """A standby taken by a gang grows to a full share: no cold pod of the gang goes there."""
    prof = Profile("p", share=0.9, standby_share=0.1)
    d = Driver(make_core(gpus=2, profiles=[prof]))
    a = d.run("t", "a")
    d.finish(a)
    d.send(Tick(), at=1000.0)  # the warm pod's keep-alive ends
    d.gone()  # GPU 0: a ready standby alone (free 0.9, the best fit); GPU 1 free
    g = d.submit("u", "b", workers=2)
    job = d.core.jobs[g]
    assert job.path is HitPath.COLD  # one standby, one cold pod
    gpus = sorted(gid for pid in job.pods for gid in d.core.pods[pid].gpus)
    assert gpus == ["node-0/0", "node-0/1"]
    d.settle()
    assert d.core.jobs[g].state is JobState.RUNNING


def test_gang_reclaims_only_its_shortfall() -> None:
    """A two-node gang with one node free reclaims the idle pods of the other node only."""
    d = Driver(make_core(nodes=2, gpus=2, profiles=[Profile("p"), Profile("g", gpus=2)]))
    a = d.run("t", "a", "p")
    d.finish(a)
    g = d.submit("t", "a", "g", workers=2)
    assert [s.reason for s in d.actions(StopPod)] == ["reclaim"]
    d.gone()
    assert d.core.jobs[g].state is JobState.PLACED
    d.settle()
    assert d.core.jobs[g].state is JobState.RUNNING


def test_queued_jobs_reclaim_in_parallel() -> None:
    """A burst behind a reclaiming head starts its own reclaims, not one after another."""
    d = Driver(make_core(gpus=2))
    a = d.run("t", "a")
    b = d.run("t", "b")
    d.finish(a, at=1.0)
    d.finish(b, at=2.0)
    c = d.submit("t", "c")
    e = d.submit("t", "e")
    assert [s.reason for s in d.actions(StopPod)] == ["reclaim", "reclaim"]
    d.gone()
    assert d.core.jobs[c].state is d.core.jobs[e].state is JobState.PLACED


def test_head_of_line_a_blocked_gang_holds_its_profile_queue() -> None:
    """No backfill: a one-pod job behind a gang that cannot go waits, so gangs never starve."""
    d = Driver(make_core(gpus=2))
    a = d.run("t", "a")
    g = d.submit("t", "g", workers=2)
    one = d.submit("t", "one")
    assert d.core.queued() == [g, one]
    assert not d.actions(StopPod)
    d.finish(a)  # the warm pod is reclaimed for the gang, which then takes both GPUs
    d.gone()
    assert d.core.jobs[g].state is JobState.PLACED
    assert d.core.jobs[one].state is JobState.QUEUED


def test_reclaim_stops_only_the_pods_that_make_the_room() -> None:
    """A standby beside a running pod frees no slot: reclaim leaves it, whatever its value."""
    prof = Profile("p", share=0.9, standby_share=0.1)
    policies = Policies(budget=StaticBudget(standby_value_s=0.0), standby=BesideActive(1))
    d = Driver(make_core(gpus=2, profiles=[prof], policies=policies))
    a = d.run("t", "a")  # GPU 0: active + the one standby (worth least)
    b = d.run("t", "b")  # GPU 1: active, no standby
    standby = next(p.id for p in d.core.pods.values() if p.state is PodState.STANDBY)
    warm = d.core.jobs[b].pods[0]
    d.finish(b)
    c = d.submit("u", "c")
    assert d.actions(StopPod) == [StopPod(warm, "reclaim")]
    assert d.core.pods[standby].state is PodState.STANDBY
    d.gone()
    assert d.core.jobs[c].state is JobState.PLACED
    assert d.core.jobs[a].state is JobState.RUNNING


def test_a_share_held_by_another_scheduler_blocks_promotion() -> None:
    """GPU shares owned by something other than this core's pods count as busy."""
    prof = Profile("p", share=0.45, standby_share=0.1)
    d = Driver(make_core(gpus=1, profiles=[prof]))
    a = d.run("t", "a")
    d.core.cluster.allocate("node-0/0", "gfs-worker", 0.45)
    d.finish(a)  # warm pod + standby + a foreign share: the standby may not take over
    b = d.submit("u", "b")
    assert d.core.jobs[b].state is JobState.QUEUED
    assert d.core.cluster.gpus["node-0/0"].allocs["gfs-worker"] == 0.45
