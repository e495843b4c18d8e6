"""Keep-alive, warm budget and standby policies, alone and through the core."""

from __future__ import annotations

import math

import pytest

from conftest import Driver, make_core
from stoker.core import (
    HitPath,
    JobCancelled,
    JobEnded,
    NodeAdded,
    PodState,
    Policies,
    Profile,
    StartPod,
    StopPod,
    Tick,
)
from stoker.core.policies import (
    AlwaysOn,
    BesideActive,
    FittedKeepAlive,
    FixedKeepAlive,
    NoStandby,
    QueueDrivenBudget,
    StaticBudget,
)

PAIR = ("t", "a")
STANDBY = Profile("p", share=0.9, standby_share=0.1)

# ---------------------------------------------------------------- keep-alive


def test_fixed_keepalive_stops_the_pod_at_its_deadline() -> None:
    d = Driver(make_core(policies=Policies(keepalive=FixedKeepAlive(30.0))))
    a = d.run()
    pod = d.core.jobs[a].pods[0]
    d.finish(a, at=10.0)
    assert d.core.next_deadline() == 40.0
    d.send(Tick(), at=39.0)
    assert d.core.pods[pod].state is PodState.WARM
    d.send(Tick(), at=40.0)
    assert d.log[-1][2] == [StopPod(pod, "keepalive")]
    assert d.core.next_deadline() is None


def test_warm_hit_resets_the_deadline() -> None:
    d = Driver(make_core(policies=Policies(keepalive=FixedKeepAlive(30.0))))
    a = d.run()
    d.finish(a, at=10.0)
    b = d.submit()
    d.start()
    d.finish(b, at=35.0)
    d.send(Tick(), at=41.0)  # the first deadline (40) is stale
    assert d.core.pods[d.core.jobs[b].pods[0]].state is PodState.WARM
    assert d.core.next_deadline() == 65.0


def test_zero_ttl_stops_at_once_and_always_on_never() -> None:
    d = Driver(make_core(policies=Policies(keepalive=FixedKeepAlive(0.0))))
    a = d.run()
    assert d.finish(a) == [JobEnded(a, None, 0), StopPod(d.core.jobs[a].pods[0], "keepalive")]
    d = Driver(make_core(policies=Policies(keepalive=AlwaysOn())))
    a = d.run()
    d.finish(a)
    assert d.core.next_deadline() is None
    d.send(Tick(), at=1e9)
    assert d.core.pods[d.core.jobs[a].pods[0]].state is PodState.WARM


def test_fixed_keepalive_rejects_negative_ttl() -> None:
    with pytest.raises(ValueError, match="ttl_s"):
        FixedKeepAlive(-1.0)
    with pytest.raises(ValueError, match="quantile"):
        FittedKeepAlive(quantile=0.0)


def _pauses(ka: FittedKeepAlive, pauses: list[float], pair: tuple[str, str] = PAIR) -> None:
    now = 0.0
    for p in pauses:
        ka.observe_end(pair, now)
        now += p
        ka.observe_submit(pair, now)
        now += 1.0


def test_fitted_remembers_a_bounded_number_of_callers() -> None:
    """One-off reuse tags (a tag per job) must not grow the fitted keep-alive without end:
    the caller seen least recently is dropped and starts again from the fallback."""
    ka = FittedKeepAlive(min_samples=1, fallback_s=42.0, max_pairs=3)
    _pauses(ka, [5.0], ("t", "kept"))
    for i in range(100):
        _pauses(ka, [1.0], ("t", f"once-{i}"))
        _pauses(ka, [5.0], ("t", "kept"))  # seen again: stays among the recent
        ka.observe_end(("t", f"ended-{i}"), 0.0)  # an end never followed by a submit
    assert max(len(ka._ends), len(ka._pauses), len(ka._sorted), len(ka._cache)) <= 3
    assert ka.ttl(("t", "kept")) != 42.0 and ka.pauses(("t", "kept")) == [5.0] * 101
    assert ka.ttl(("t", "once-0")) == 42.0 and ka.ttl(("t", "once-99")) != 42.0


def test_fitted_falls_back_until_min_samples() -> None:
    ka = FittedKeepAlive(min_samples=3, fallback_s=42.0)
    _pauses(ka, [1.0, 2.0])
    assert ka.ttl(PAIR) == 42.0
    _pauses(ka, [3.0])
    assert ka.ttl(PAIR) != 42.0
    assert ka.ttl(("t", "other")) == 42.0


def test_fitted_takes_the_nearest_rank_quantile() -> None:
    ka = FittedKeepAlive(quantile=0.9, margin=1.1, slack_s=1.0, min_samples=1)
    _pauses(ka, [float(i) for i in range(10, 0, -1)])  # pauses 1..10
    assert ka.pauses(PAIR) == [float(i) for i in range(1, 11)]
    # the smallest pause with 90 % of the samples at or below it is 9
    assert ka.ttl(PAIR) == pytest.approx(9 * 1.1 + 1.0)


def test_fitted_window_keeps_the_latest_pauses_only() -> None:
    ka = FittedKeepAlive(quantile=1.0, margin=1.0, slack_s=0.0, min_samples=1, window=3)
    _pauses(ka, [100.0, 1.0, 2.0, 3.0])
    assert ka.pauses(PAIR) == [1.0, 2.0, 3.0]
    assert ka.ttl(PAIR) == 3.0


def test_fitted_is_capped() -> None:
    ka = FittedKeepAlive(min_samples=1, max_ttl_s=50.0)
    _pauses(ka, [45.0, 49.0])
    assert ka.ttl(PAIR) == 50.0


def test_fitted_pairs_ends_and_submits_first_in_first_out() -> None:
    ka = FittedKeepAlive(min_samples=1)
    ka.observe_end(PAIR, 0.0)
    ka.observe_end(PAIR, 1.0)
    ka.observe_submit(PAIR, 5.0)  # pairs with the end at 0
    ka.observe_submit(PAIR, 7.0)  # pairs with the end at 1
    ka.observe_submit(PAIR, 9.0)  # no end left: not a pause
    assert ka.pauses(PAIR) == [5.0, 6.0]


def test_fitted_drops_ends_older_than_the_cap() -> None:
    ka = FittedKeepAlive(min_samples=1, max_ttl_s=100.0)
    ka.observe_end(PAIR, 0.0)
    ka.observe_submit(PAIR, 500.0)  # the loop had stopped: not a pause
    assert ka.pauses(PAIR) == []


def test_fitted_keepalive_through_the_core() -> None:
    ka = FittedKeepAlive(quantile=1.0, margin=1.0, slack_s=0.5, min_samples=2, fallback_s=7.0)
    d = Driver(make_core(gpus=1, policies=Policies(keepalive=ka)))
    a = d.run()
    d.finish(a, at=0.0)
    assert d.core.next_deadline() == 7.0  # fallback
    b = d.submit()
    d.now = 2.0
    d.start()
    b2 = b
    for t_end, t_sub in [(3.0, 6.0), (7.0, 11.0)]:
        d.finish(b2, at=t_end)
        d.now = t_sub
        b2 = d.submit()
        d.start()
    # pauses seen: 0 (the first resubmit came at once), 3, 4 -> ttl = 4 + 0.5
    assert ka.pauses(PAIR) == [0.0, 3.0, 4.0]
    d.finish(b2, at=20.0)
    assert d.core.next_deadline() == pytest.approx(24.5)


# ---------------------------------------------------------------- warm budget


def test_queue_driven_limit_falls_and_is_restored() -> None:
    budget = QueueDrivenBudget(gpus=3.0, floor=0.5)
    assert budget.limit(10, 0.0) == 3.0
    assert budget.limit(10, 2.0) == 1.0
    assert budget.limit(10, 5.0) == 0.5
    assert StaticBudget(fraction=0.5).limit(10, 99.0) == 5.0


def test_queued_demand_stops_idle_pods_and_cancel_restores_the_limit() -> None:
    """Queued jobs the cluster cannot place lower the cap; the cheapest idle pods go."""
    profiles = [Profile("p"), Profile("x", gpu_model="h100")]
    budget = QueueDrivenBudget(gpus=2.0)
    d = Driver(make_core(gpus=2, profiles=profiles, policies=Policies(budget=budget)))
    d.send(NodeAdded("h", "h100", 1))
    d.run("t", "w", "x")  # the one h100 card runs a job
    a = d.run("t", "a")
    b = d.run("t", "b")
    d.finish(a, at=1.0)
    d.finish(b, at=2.0)
    assert d.core.idle_gpus == 2.0 and d.core.budget_limit() == 2.0
    x = d.submit("t", "x", "x")  # no free h100 and no idle pod there: it waits
    assert d.core.budget_limit() == 1.0
    # the pod with the least keep-alive left is worth least
    assert d.log[-1][2] == [StopPod(d.core.jobs[a].pods[0], "budget")]
    assert d.core.idle_gpus == 1.0
    d.send(JobCancelled(x))
    assert d.core.budget_limit() == 2.0


def test_static_budget_caps_warm_pods() -> None:
    d = Driver(make_core(gpus=3, policies=Policies(budget=StaticBudget(gpus=1.0))))
    jobs = [d.submit("t", tag) for tag in "abc"]
    d.settle()
    for i, jid in enumerate(jobs):
        d.finish(jid, at=float(i))
        assert d.core.idle_gpus <= 1.0
    stopped = [s.pod for s in d.actions(StopPod)]
    assert stopped == [d.core.jobs[jobs[0]].pods[0], d.core.jobs[jobs[1]].pods[0]]


def test_budget_values_standby_and_always_on_pods() -> None:
    d = Driver(make_core(gpus=1, profiles=[STANDBY], policies=Policies(keepalive=AlwaysOn())))
    a = d.run()
    d.finish(a, at=5.0)
    budget = StaticBudget(standby_value_s=600.0)
    warm = d.core.pods[d.core.jobs[a].pods[0]]
    standby = next(p for p in d.core.pods.values() if p.state is PodState.STANDBY)
    assert budget.value(standby, 10.0) == 600.0
    # an always-on pod is worth more than any finite keep-alive, older ones less
    assert budget.value(warm, 10.0) > budget.value(warm, 20.0) > 1e9


# ---------------------------------------------------------------- standby


def test_standby_staged_beside_an_active_pod() -> None:
    d = Driver(make_core(gpus=2, profiles=[STANDBY]))
    a = d.submit()
    (start,) = d.actions(StartPod)
    d.ready()
    standby = [s for s in d.actions(StartPod) if s.standby]
    assert len(standby) == 1 and standby[0].gpus == start.gpus
    gpu = d.core.cluster.gpus[start.gpus[0]]
    assert gpu.allocs == {start.pod: 0.9, standby[0].pod: 0.1}
    # a starting standby already counts against the warm budget
    assert d.core.idle_gpus == pytest.approx(0.1)
    d.ready()
    assert d.core.pods[standby[0].pod].state is PodState.STANDBY
    assert d.core.jobs[a].path is HitPath.COLD


def test_standby_is_staged_only_within_the_budget() -> None:
    policies = Policies(budget=StaticBudget(gpus=0.15))
    d = Driver(make_core(gpus=2, profiles=[STANDBY], policies=policies))
    d.run("t", "a")
    d.run("t", "b")
    assert len([s for s in d.actions(StartPod) if s.standby]) == 1
    assert d.core.idle_gpus <= 0.15


def test_standby_policies_limit_and_disable() -> None:
    d = Driver(make_core(gpus=2, profiles=[STANDBY], policies=Policies(standby=BesideActive(1))))
    d.run("t", "a")
    d.run("t", "b")
    assert len([s for s in d.actions(StartPod) if s.standby]) == 1
    d = Driver(make_core(gpus=2, profiles=[STANDBY], policies=Policies(standby=NoStandby())))
    d.run("t", "a")
    assert not [s for s in d.actions(StartPod) if s.standby]
    # a whole-GPU profile leaves no room for a standby
    d = Driver(make_core(gpus=1, profiles=[Profile("p", standby_share=0.1)]))
    d.run()
    assert not [s for s in d.actions(StartPod) if s.standby]


def test_promotion_replenishes_the_standby() -> None:
    d = Driver(make_core(gpus=1, profiles=[STANDBY]))
    a = d.run("t", "a")
    first = next(p for p in d.core.pods.values() if p.state is PodState.STANDBY).id
    d.finish(a)
    b = d.submit("t", "b")
    assert d.core.jobs[b].pods == [first]
    d.ready([first])  # promoted: active now, and a new standby is staged beside it
    new = [s.pod for s in d.actions(StartPod) if s.standby and s.pod != first]
    assert len(new) == 1
    gpu = d.core.cluster.gpus[d.core.pods[first].gpus[0]]
    assert gpu.allocs == {first: 0.9, new[0]: 0.1}
    assert math.isclose(d.core.idle_gpus, 0.1)


def test_a_gang_job_is_one_end_for_the_fitted_keepalive() -> None:
    ka = FittedKeepAlive(min_samples=1)
    d = Driver(make_core(gpus=2, policies=Policies(keepalive=ka)))
    g = d.submit(workers=2)
    d.settle()
    d.finish(g, at=10.0)
    d.now = 14.0
    d.submit(workers=2)
    d.settle()
    d.now = 100.0
    d.submit("t", "a")  # no second end of the gang is left over to make a pause
    assert ka.pauses(PAIR) == [4.0]
