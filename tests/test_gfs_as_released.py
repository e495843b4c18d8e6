"""The as-released options (``GFSConfig.gang_rule``, ``demand``, the ``fifo-submit`` queue
order, ``quota_opens`` and a preset's ``cold_start``) and the ``*-as-released`` presets:
each option driven through ``Core.handle`` on a hand-built cluster, against the default
(stoker's corrected rule), which every existing preset keeps."""

from __future__ import annotations

import pytest

from stoker.core import BindJob, JobState, Tick
from stoker.core.gfs.config import DemandCount, GangRule, GFSConfig
from stoker.core.registry import GANG_PRESETS, preset, presets
from stoker.core.waiting import SpotQuotaWait
from stoker.sim.gfs import Window, simulate
from stoker.traces.base import Trace, TraceJob, TraceNode
from stoker.units import DAY_S
from test_gfs import Gangs, bound, cluster, evicted, spec, static

AS_RELEASED = ("gfs", "yarn-cs", "lyra", "fgd")


def _pods(out, job: str) -> int:
    return next(len(a.pods) for a in out if isinstance(a, BindJob) and a.job == job)


# ---------------------------------------------------------------- HP gang placement


def _two_spot_jobs(**config) -> Gangs:
    # one node of 4 cards: spot s1 and s2 on a card each, two free
    g = Gangs(cluster(4), static(**config))
    g.submit(spec("s1", "spot", 1, dur=1e5), 0.0)
    g.submit(spec("s2", "spot", 1, dur=1e5), 1.0)
    return g


def test_all_or_nothing_evicts_for_every_worker_the_free_room_lacks() -> None:
    g = _two_spot_jobs()
    out = g.submit(spec("h", "hp", 1, 4, dur=1e4), 10.0)
    assert sorted(evicted(out)) == ["s1", "s2"] and _pods(out, "h") == 4
    assert g.core.hpspot.used["A"]["hp"] == 4.0


def test_partial_evicts_for_one_worker_and_runs_the_gang_short() -> None:
    # policy/gfs.py: job_placer keeps the two workers free room took, place_with_preemption
    # adds one by eviction, run_guar runs the job with three of its four workers
    g = _two_spot_jobs(gang_rule=GangRule.PARTIAL)
    out = g.submit(spec("h", "hp", 1, 4, dur=1e4), 10.0)
    assert len(evicted(out)) == 1 and _pods(out, "h") == 3
    job = g.core.jobs["h"]
    assert job.state is JobState.RUNNING and job.workers == 3 and job.spec.workers == 4
    assert g.core.hpspot.used["A"]["hp"] == 3.0 and g.core.hpspot.allocated == 4.0
    # its three ranks' exits end it
    out = g.finish("h", 1e4 + 10.0)
    assert job.state is JobState.FINISHED


def test_partial_runs_a_gang_that_fits_whole() -> None:
    g = Gangs(cluster(4), static(gang_rule=GangRule.PARTIAL))
    out = g.submit(spec("h", "hp", 1, 4), 0.0)
    assert _pods(out, "h") == 4 and not evicted(out)


def test_partial_with_nothing_to_evict_waits_for_the_whole_gang() -> None:
    # HP holds every card but two: no victim for a third worker, so the gang waits (asking
    # for all its workers again) and starts whole when the room comes
    g = Gangs(cluster(4), static(gang_rule=GangRule.PARTIAL))
    g.submit(spec("h0", "hp", 2, dur=100.0), 0.0)
    out = g.submit(spec("h", "hp", 1, 4), 1.0)
    assert "h" not in bound(out) and g.core.jobs["h"].run_workers is None
    out = g.finish("h0", 100.0)
    assert _pods(out, "h") == 4


def test_partial_evicts_for_one_worker_when_no_room_is_free() -> None:
    # every card held by spot: one worker's card is evicted, the gang runs with one
    g = Gangs(cluster(2), static(gang_rule=GangRule.PARTIAL))
    g.submit(spec("s1", "spot", 1, dur=1e5), 0.0)
    g.submit(spec("s2", "spot", 1, dur=1e5), 0.0)
    out = g.submit(spec("h", "hp", 1, 2, dur=1e4), 10.0)
    assert len(evicted(out)) == 1 and _pods(out, "h") == 1


def test_one_worker_places_one_worker_of_every_hp_gang() -> None:
    # fifo_spot.py, fgd.py: HP goes to place_with_preemption, which places one worker;
    # allocation is the one-worker load. Spot gangs are placed whole
    g = Gangs(cluster(4, 4), static(gang_rule=GangRule.ONE_WORKER))
    out = g.submit(spec("h", "hp", 2, 3, dur=1e4), 0.0)
    assert _pods(out, "h") == 1 and g.core.hpspot.used["A"]["hp"] == 2.0
    out = g.submit(spec("s", "spot", 2, 3, dur=1e4), 0.0)
    assert _pods(out, "s") == 3
    g.finish("h", 1e4)
    assert g.core.jobs["h"].state is JobState.FINISHED


def test_the_default_places_every_worker() -> None:
    g = Gangs(cluster(4, 4), static())
    out = g.submit(spec("h", "hp", 2, 3, dur=1e4), 0.0)
    assert _pods(out, "h") == 3 and g.core.hpspot.used["A"]["hp"] == 6.0


# ---------------------------------------------------------------- demand bookkeeping


@pytest.mark.parametrize(
    ("demand", "series"),
    [(DemandCount.EVERY_WORKER, 4.0), (DemandCount.ONE_WORKER, 2.0)],
)
def test_the_hp_demand_series_counts_one_worker_as_released(demand, series) -> None:
    g = Gangs(cluster(4), static(demand=demand))
    g.submit(spec("h", "hp", 2, 2, dur=1e4), 0.0)
    g.send(Tick(), 120.0)
    assert list(g.core.demand.history(("t", "A"))) == [series, series]


@pytest.mark.parametrize(
    ("demand", "series"),
    [
        (DemandCount.EVERY_WORKER, [2.0, 0.0, 2.0, 0.0]),
        (DemandCount.ONE_WORKER, [2.0, 0.0, 2.0, 0.0]),
        (DemandCount.CUMULATIVE, [2.0, 2.0, 4.0, 4.0]),
    ],
)
def test_the_baselines_as_released_never_take_an_ended_hp_job_off_the_series(
    demand, series
) -> None:
    # fifo_spot.py, lyra.py, fgd.py add each HP job started to guar_request_dict and never
    # subtract it: the series the forecaster learns only grows
    g = Gangs(cluster(4), static(demand=demand))
    g.submit(spec("h1", "hp", 2, dur=60.0), 0.0)
    g.finish("h1", 60.0)
    g.submit(spec("h2", "hp", 2, dur=60.0), 120.0)
    g.finish("h2", 180.0)
    g.send(Tick(), 240.0)
    assert list(g.core.demand.history(("t", "A"))) == series


@pytest.mark.parametrize(
    ("demand", "starts"),
    [
        (DemandCount.EVERY_WORKER, False),
        (DemandCount.ONE_WORKER, False),
        (DemandCount.ONE_WORKER_SPOT, True),
    ],
)
def test_gfs_as_released_counts_a_spot_gang_as_one_worker_against_the_quota(demand, starts) -> None:
    # quota 4 of 8 GPUs: a spot gang of 2 x 2 fills it; SpotScheduler.run_spot counts it
    # as 2, so a 2-GPU spot job is still admitted there (bug B3)
    g = Gangs(cluster(8), static(0.5, demand=demand))
    assert _pods(g.submit(spec("s1", "spot", 2, 2, dur=1e4), 0.0), "s1") == 2
    out = g.submit(spec("s2", "spot", 2, dur=1e4), 1.0)
    assert ("s2" in bound(out)) is starts


# ---------------------------------------------------------------- FGD's re-queue order


@pytest.mark.parametrize(("queue", "first"), [("fifo", "b"), ("fifo-submit", "a")])
def test_fgd_as_released_requeues_an_evicted_spot_job_at_its_submit_time(queue, first) -> None:
    g = Gangs(cluster(2), static(queue=queue))
    g.submit(spec("a", "spot", 2, dur=1e5), 0.0)
    g.submit(spec("b", "spot", 2, dur=1e5), 1.0)  # waits behind a
    assert evicted(g.submit(spec("h", "hp", 2, dur=10.0), 2.0)) == ["a"]
    assert bound(g.finish("h", 12.0)) == [first]


# ---------------------------------------------------------------- forecaster cold start


def test_no_spot_quota_before_it_opens() -> None:
    config = dict(window=(0.0, 1e6), quota_opens=100.0)
    g = Gangs(cluster(4), static(**config))
    assert "s" not in bound(g.submit(spec("s", "spot", 1), 50.0))
    assert isinstance(g.core.waiting("s"), SpotQuotaWait)
    assert bound(g.send(Tick(), 100.0)) == ["s"]


def _tiny() -> Trace:
    rows = [TraceJob(f"h{i}", "t", "A", 1.0, 1, 3600.0 * i, 1800.0, "hp") for i in range(80)]
    rows += [TraceJob("s", "t", "A", 1.0, 1, 2 * DAY_S + 600.0, 600.0, "spot")]
    return Trace("tiny", [TraceNode("n", "A", 2)], rows)


@pytest.mark.parametrize(("name", "opens"), [("gfs", None), ("gfs-as-released", 3 * DAY_S)])
def test_a_cold_preset_opens_the_quota_a_day_into_the_window(name, opens) -> None:
    from stoker.forecast.base import Cadence
    from stoker.sim.gfs import policy_forecaster

    spec_ = preset(name)
    window = Window(DAY_S, 2 * DAY_S, 3.5 * DAY_S)
    forecaster = policy_forecaster(spec_.forecaster, Cadence())
    result = simulate(_tiny(), spec_, window, forecaster=forecaster)
    assert spec_.policies.hpspot.quota_opens == opens
    assert result.metrics["spot.jobs"] == 1


# ---------------------------------------------------------------- the presets


def test_as_released_presets_and_the_registry_bound() -> None:
    assert len(presets()) <= 24
    rules = {
        n: (c.gang_rule, c.demand, c.queue, preset(n).cold_start)
        for n in GANG_PRESETS
        if (c := preset(n).policies.hpspot)
    }
    assert rules["gfs-as-released"] == (
        GangRule.PARTIAL,
        DemandCount.ONE_WORKER_SPOT,
        "size",
        True,
    )
    assert rules["lyra-as-released"] == (
        GangRule.PARTIAL,
        DemandCount.CUMULATIVE,
        "size-stop",
        True,
    )
    assert rules["yarn-cs-as-released"] == (
        GangRule.ONE_WORKER,
        DemandCount.CUMULATIVE,
        "fifo",
        True,
    )
    assert rules["fgd-as-released"] == (
        GangRule.ONE_WORKER,
        DemandCount.CUMULATIVE,
        "fifo-submit",
        True,
    )
    # every other preset keeps stoker's rules
    default = (GangRule.ALL_OR_NOTHING, DemandCount.EVERY_WORKER)
    for name, rule in rules.items():
        if not name.endswith("-as-released"):
            assert rule[:2] == default and not rule[3], name
    # each as-released preset is its base with those options only
    for base in AS_RELEASED:
        a, b = preset(base).policies.hpspot, preset(f"{base}-as-released").policies.hpspot
        assert type(a.scorer) is type(b.scorer) and type(a.victims) is type(b.victims)
        assert a.hp_preempt_first == b.hp_preempt_first and a.preempt == b.preempt
    assert preset("gfs+gang_rule=one-worker").policies.hpspot.gang_rule is GangRule.ONE_WORKER
    with pytest.raises(ValueError, match="gang_rule"):
        GFSConfig(gang_rule="some")  # type: ignore[arg-type]


def test_partial_leaves_spot_gangs_and_fractional_hp_gangs_all_or_nothing() -> None:
    g = _two_spot_jobs(gang_rule=GangRule.PARTIAL)
    out = g.submit(spec("s3", "spot", 1, 3, dur=1e4), 5.0)  # two cards free for three
    assert "s3" not in bound(out) and g.core.jobs["s3"].run_workers is None
    g = Gangs(cluster(1), static(gang_rule=GangRule.PARTIAL))
    g.submit(spec("s", "spot", 0.5, dur=1e5), 0.0)
    out = g.submit(spec("h", "hp", 0.5, 2, dur=1e4), 1.0)
    assert evicted(out) == ["s"] and _pods(out, "h") == 2


def test_yarn_cs_as_released_evicts_for_one_worker_of_a_gang() -> None:
    # fifo_spot.py: HP straight to place_with_preemption, one worker; here a spot job on
    # each of two nodes, an HP gang of two 4-GPU workers takes one node by eviction
    p = preset("yarn-cs-as-released").policies
    p.hpspot.quota = static().hpspot.quota
    g = Gangs(cluster(4, 4), p)
    g.submit(spec("s1", "spot", 4, dur=1e5), 0.0)
    g.submit(spec("s2", "spot", 4, dur=1e5), 0.0)
    out = g.submit(spec("h", "hp", 4, 2, dur=1e4), 10.0)
    assert len(evicted(out)) == 1 and _pods(out, "h") == 1
    assert g.core.hpspot.used["A"]["hp"] == 4.0
