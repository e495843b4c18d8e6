"""Warm pools a user sizes: CPU-only profiles, a minimum warm count, a keep-alive per
profile and a caller's renewal, through the core."""

from __future__ import annotations

import math

import pytest

from conftest import Driver
from stoker.core import (
    GPU,
    Cluster,
    Core,
    CoreError,
    CpuWait,
    GpuWait,
    HitPath,
    JobClass,
    JobSpec,
    JobSubmitted,
    KeepAliveRenewed,
    Node,
    PodState,
    Policies,
    Profile,
    ProfilePolicies,
    PromoteStandby,
    StartPod,
    StopPod,
    Tick,
)
from stoker.core.policies import AlwaysOn, FixedKeepAlive, StaticBudget

CPU = Profile("cpu", gpus=0, cpu=1.0, memory_gb=2.0, recyclable=True)
GPU1 = Profile("p")


def _core(
    profiles: list[Profile],
    policies: Policies | None = None,
    gpus: int = 2,
    cpu: float = 8.0,
    memory_gb: float = 16.0,
) -> Core:
    node = Node("n", "any", [GPU(f"n/{i}", "n", i, "any") for i in range(gpus)], cpu, memory_gb)
    return Core(Cluster([node]), profiles, policies)


# ---------------------------------------------------------------- CPU-only profiles


def test_cpu_only_pods_take_cpu_slots_and_no_gpu() -> None:
    d = Driver(_core([CPU, GPU1]))
    jobs = [d.submit("t", f"v{i}", "cpu") for i in range(8)]
    d.settle()
    starts = d.actions(StartPod)
    assert len(starts) == 8 and all(s.gpus == () for s in starts)
    assert all(d.core.jobs[j].path is HitPath.COLD for j in jobs)
    assert d.core.cluster.cpu_free("n") == (0.0, 0.0)
    assert all(g.used == 0.0 for g in d.core.cluster.gpus.values())
    assert d.core.idle_gpus == 0.0
    # a ninth verifier waits for a CPU slot; the GPUs stay free for GPU work
    ninth = d.submit("t", "v8", "cpu")
    assert d.core.queued("cpu") == [ninth]
    gpu_job = d.run("t", "g", "p")
    assert d.core.jobs[gpu_job].pods
    # the round ends: every verifier's pod turns warm; the ninth takes one by reclaim
    for j in jobs:
        d.finish(j)
    d.settle()
    assert d.core.jobs[ninth].pods
    # second round of the eight: warm hits for all but the one whose pod went to the ninth
    d.finish(ninth)
    second = [d.submit("t", f"v{i}", "cpu") for i in range(8)]
    d.settle()
    paths = [d.core.jobs[j].path for j in second]
    assert paths.count(HitPath.WARM) == 7, paths


def test_a_verifier_waiting_for_cpu_slots_is_told_the_cpu_slots_not_gpus() -> None:
    d = Driver(_core([CPU, GPU1], cpu=2.0, memory_gb=16.0))
    for i in range(2):
        d.submit("t", f"v{i}", "cpu")
    d.settle()
    third = d.submit("t", "v2", "cpu")
    d.settle()
    # both GPUs are free; what holds it is the node's two CPU slots, both taken
    assert d.core.cluster.free_gpus("any") == 2
    assert d.core.waiting(third) == CpuWait(
        profile="cpu",
        pods=1,
        cpu=1.0,
        memory_gb=2.0,
        free_cpu=0.0,
        free_memory_gb=12.0,
        total_cpu=2.0,
        total_memory_gb=16.0,
    )
    # a GPU pool job that finds no card free is told the cards of its GPU model
    gpu_jobs = [d.submit("t", f"g{i}", "p") for i in range(3)]
    d.settle()
    assert d.core.waiting(gpu_jobs[0]) is None  # placed
    assert d.core.waiting(gpu_jobs[2]) == GpuWait("any", 1, 1.0, free_gpus=0, capacity=2)


def test_eight_parallel_verifiers_get_warm_hits_in_their_second_round() -> None:
    d = Driver(_core([CPU]))
    first = [d.submit("t", f"v{i}", "cpu") for i in range(8)]
    d.settle()
    for j in first:
        d.finish(j)
    second = [d.submit("t", f"v{i}", "cpu") for i in range(8)]
    d.settle()
    assert [d.core.jobs[j].path for j in second] == [HitPath.WARM] * 8
    assert [d.core.jobs[j].pods for j in second] == [d.core.jobs[j].pods for j in first]


def test_cpu_only_profile_rules() -> None:
    with pytest.raises(ValueError, match="cpu and memory"):
        Profile("c", gpus=0, cpu=0.0)
    with pytest.raises(ValueError, match="gpus must be >= 0"):
        Profile("c", gpus=-1)
    d = Driver(_core([CPU]))
    with pytest.raises(CoreError, match="job_class"):
        d.send(JobSubmitted(JobSpec("h", "t", "cpu", job_class=JobClass.HP)))
    # a node without CPU slots takes no CPU-only pod: the job could never start
    d = Driver(_core([CPU], cpu=0.0))
    with pytest.raises(CoreError, match="profile: a CPU-only pod takes 1 CPUs and 2 GB"):
        d.submit("t", "a", "cpu")
    assert d.core.queued("cpu") == [] and not d.actions(StartPod) and not d.core.jobs


# ---------------------------------------------------------------- minimum warm count


def test_min_warm_starts_spare_pods_a_new_caller_takes() -> None:
    policies = Policies(profiles={"p": ProfilePolicies(min_warm=1)})
    d = Driver(_core([GPU1], policies, gpus=2))
    d.send(Tick(), at=1.0)  # any event lets the core start what the minimum asks for
    (spare,) = d.actions(StartPod)
    assert spare.standby
    d.ready()
    assert d.core.pods[spare.pod].state is PodState.STANDBY
    assert d.core.idle_gpus == 1.0  # it counts against the warm budget
    # kept through keep-alive: a spare has no deadline
    d.send(Tick(), at=1e6)
    assert d.core.pods[spare.pod].state is PodState.STANDBY
    j = d.submit("t", "new")
    assert d.core.jobs[j].path is HitPath.STANDBY
    assert d.core.jobs[j].pods == [spare.pod]
    assert PromoteStandby(spare.pod) in d.log[-1][2]
    # and replaced at once on the other GPU
    refill = [s for s in d.actions(StartPod) if s.pod != spare.pod]
    assert len(refill) == 1 and refill[0].gpus != spare.gpus


def test_min_warm_is_bounded_by_the_warm_budget_and_yields_to_the_queue() -> None:
    policies = Policies(budget=StaticBudget(gpus=1.0), profiles={"p": ProfilePolicies(min_warm=3)})
    d = Driver(_core([GPU1], policies, gpus=4))
    d.send(Tick(), at=1.0)
    assert len(d.actions(StartPod)) == 1  # the budget holds one idle GPU
    d.ready()
    # jobs of new callers take the spare, then cold starts; no spare while they queue
    jobs = [d.submit("t", f"c{i}") for i in range(5)]
    d.settle()
    assert d.core.jobs[jobs[0]].path is HitPath.STANDBY
    assert len(d.core.queued("p")) == 1
    assert not [p for p in d.core.pods if d.core.warm.is_spare(p)]


def test_min_warm_for_a_cpu_only_profile() -> None:
    policies = Policies(profiles={"cpu": ProfilePolicies(min_warm=2)})
    d = Driver(_core([CPU], policies, cpu=4.0, memory_gb=8.0))
    d.send(Tick(), at=1.0)
    assert [s.gpus for s in d.actions(StartPod)] == [(), ()]
    d.ready()
    j = d.submit("t", "x", "cpu")
    assert d.core.jobs[j].path is HitPath.STANDBY
    d.settle()
    assert d.core.cluster.cpu_free("n") == (1.0, 2.0)  # 1 running, 2 spares


def test_min_warm_rejects_a_negative_count() -> None:
    with pytest.raises(ValueError, match="min_warm"):
        ProfilePolicies(min_warm=-1)


# ---------------------------------------------------------------- keep-alive per profile


def test_keepalive_per_profile() -> None:
    other = Profile("q")
    policies = Policies(
        keepalive=FixedKeepAlive(60.0),
        profiles={
            "p": ProfilePolicies(keepalive=FixedKeepAlive(10.0)),
            "q": ProfilePolicies(keepalive=AlwaysOn()),
        },
    )
    d = Driver(_core([GPU1, other], policies))
    a = d.run("t", "a", "p")
    b = d.run("t", "b", "q")
    d.finish(a, at=1.0)
    d.finish(b, at=1.0)
    assert d.core.next_deadline() == 11.0
    d.send(Tick(), at=11.0)
    assert d.log[-1][2] == [StopPod(d.core.jobs[a].pods[0], "keepalive")]
    d.send(Tick(), at=1e9)
    assert d.core.pods[d.core.jobs[b].pods[0]].state is PodState.WARM


# ---------------------------------------------------------------- renewal


def test_renew_extends_a_warm_pod_and_a_busy_one_after_its_job() -> None:
    d = Driver(_core([GPU1], Policies(keepalive=FixedKeepAlive(10.0))))
    a = d.run("t", "s")
    pod = d.core.jobs[a].pods[0]
    # renewed while its job runs: applies when the pod turns warm
    d.send(KeepAliveRenewed("t", "s", "p", 100.0), at=1.0)
    assert d.core.warm.held(("p", "t", "s")) == [pod]
    d.finish(a, at=2.0)
    assert d.core.pods[pod].deadline == 101.0
    d.send(KeepAliveRenewed("t", "s", "p", 300.0), at=50.0)
    assert d.core.next_deadline() == 350.0
    d.send(Tick(), at=200.0)
    assert d.core.pods[pod].state is PodState.WARM
    d.send(Tick(), at=350.0)
    assert d.core.pods[pod].state is PodState.STOPPING
    # a renewal never shortens: a later short one leaves the deadline
    b = d.run("t", "s")
    d.send(KeepAliveRenewed("t", "s", "p", 1.0), at=360.0)
    d.finish(b, at=361.0)
    assert d.core.pods[d.core.jobs[b].pods[0]].deadline == 371.0
    # another caller's renewal touches nothing of this one
    assert d.core.warm.held(("p", "t", "other")) == []


@pytest.mark.parametrize("value", [0.0, -1.0, math.inf, math.nan])
def test_renew_rejects_a_bad_keepalive(value: float) -> None:
    d = Driver(_core([GPU1]))
    with pytest.raises(CoreError, match="keepalive_s"):
        d.send(KeepAliveRenewed("t", "s", "p", value))
    with pytest.raises(CoreError, match="profile"):
        d.send(KeepAliveRenewed("t", "s", "nope", 5.0))


def _rl_rounds(d: Driver, rounds: int, tenants: tuple[str, ...], jobs: int, tags: int) -> list:
    """Reward-loop rounds: each trainer in turn submits ``jobs`` at once on ``tags`` reuse
    tags (``rw-<tenant>-<i % tags>``) and waits for all of them; 20 s between rounds. Its
    running jobs end together, again and again, until none is left. Each round's jobs."""
    out = []
    for r in range(rounds):
        for tenant in tenants:
            d.now = r * 100.0 + tenants.index(tenant) * 20.0
            ids = [d.submit(tenant, f"rw-{tenant}-{i % tags}", "cpu") for i in range(jobs)]
            d.settle()
            while any(d.core.jobs[j].finished is None for j in ids):
                assert d.running, "jobs left queued with nothing running"
                d.now += 0.05
                for j in list(d.running):
                    d.finish(j)
                d.settle()
            out.append(ids)
    return out


def test_rl_trainers_keep_their_pods_across_rounds() -> None:
    # two trainers, each 64 concurrent reward jobs on 8 tags, on a profile of 16 CPU slots:
    # a busy tag's job waits for its tag's pod rather than take another caller's idle pod,
    # and the trainers split the slots, so each round finds the pods of the one before
    cpu = Profile("cpu", gpus=0, cpu=1.0, memory_gb=1.0, recyclable=True)
    policies = Policies(keepalive=FixedKeepAlive(600.0))
    d = Driver(_core([cpu], policies, cpu=16.0, memory_gb=64.0))
    rounds = _rl_rounds(d, 4, ("a", "b"), 64, 8)
    pods: dict[tuple[str, str], set[str]] = {}
    for ids in rounds:
        for j in ids:
            job = d.core.jobs[j]
            pods.setdefault(job.pair, set()).update(job.pods)
    # a tag's concurrency here is 8 jobs at once; the pods it used over four rounds
    assert max(len(p) for p in pods.values()) <= 2 * 8, {k: len(v) for k, v in pods.items()}
    later = [j for ids in rounds[2:] for j in ids]  # after each trainer's first round
    cold = sum(d.core.jobs[j].path is HitPath.COLD for j in later)
    assert cold / len(later) < 0.05, f"{cold} cold of {len(later)}"
    # the slots are split between the two trainers, not taken by whoever goes
    held = {
        t: sum(
            1
            for p in d.core.pods.values()
            if p.owner and p.owner[0] == t and p.state is PodState.WARM
        )
        for t in ("a", "b")
    }
    assert held == {"a": 8, "b": 8}, held


@pytest.mark.parametrize("u_first", [False, True])
def test_a_gang_takes_an_always_on_pod_of_another_tenant(u_first: bool) -> None:
    # two CPU slots; tenant t's pod (and, with u_first, u's too) stays warm for good under
    # always-on. A 2-worker gang needs both slots: the equal split between tenants must not
    # hold it back forever, since a pod with no keep-alive deadline never frees its room
    cpu = Profile("cpu", gpus=0, cpu=1.0, memory_gb=1.0)
    d = Driver(_core([cpu], Policies(keepalive=AlwaysOn()), cpu=2.0, memory_gb=2.0))
    first = [d.submit("t", "a", "cpu")] + ([d.submit("u", "a", "cpu")] if u_first else [])
    d.settle()
    for j in first:
        d.finish(j)
    d.settle()
    gang = d.submit("t" if u_first else "u", "b", "cpu", workers=2)
    d.settle()
    assert d.core.jobs[gang].state.value == "running"
