"""GFS in the core: formulas on hand numbers, scheduling rules, properties, the sim and CLI."""

from __future__ import annotations

import json
import math
from typing import ClassVar

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from stoker.cli.main import app
from stoker.core import (
    Cluster,
    Core,
    JobFinished,
    JobSpec,
    JobStarted,
    JobSubmitted,
    PodGone,
    PodReady,
    Profile,
    StartPod,
    StopPod,
)
from stoker.core.gfs import (
    EvictGang,
    ForecastUpdated,
    GangCompleted,
    GangSpec,
    GangSubmitted,
    GFSConfig,
    GFSScheduler,
    GuaranteeLedger,
    PoolEvent,
    StartGang,
    Tick,
    policy,
)
from stoker.core.gfs.jobs import Gang, restart_overhead
from stoker.core.gfs.placement import eviction_score, fragmentation
from stoker.core.gfs.preemption import Candidate, GFSVictims, PreemptContext, protect
from stoker.core.gfs.quota import EtaController, StaticQuota, forecast_quota
from stoker.forecast.base import BatchPredictor
from stoker.sim.gfs import Window, scale_spot_load, simulate
from stoker.traces.base import Trace, TraceJob, TraceNode

# ---------------------------------------------------------------- formulas


def test_quota_on_hand_numbers() -> None:
    # N(10, 2^2): U = 10 + 1.28155 * 2 = 12.563 -> floor 12 -> free 20 - 12 = 8
    assert forecast_quota(np.array([10.0]), np.array([4.0]), 20, 0.9, 1.0, 1) == 8.0
    # two hours: hour 2 has U = 15 + 1.28155 * 3 = 18.84 -> free 2; min is 2, eta halves
    mean, var = np.array([10.0, 15.0]), np.array([4.0, 9.0])
    assert forecast_quota(mean, var, 20, 0.9, 0.5, 2) == 1.0
    # clipped: demand above capacity leaves 0, negative quantile leaves all
    assert forecast_quota(np.array([30.0]), np.array([0.0]), 20, 0.9, 1.0, 1) == 0.0
    assert forecast_quota(np.array([-5.0]), np.array([1.0]), 20, 0.9, 1.0, 1) == 20.0


def test_eta_shrinks_on_high_eviction() -> None:
    ctl = EtaController(g=0.9)
    assert ctl.update(0.3, spot_waited_long=False) == pytest.approx(0.1 / 0.3)
    # e = 0.15 >= 1.5 * 0.1 shrinks again by 0.1/0.15
    assert ctl.update(0.15, False) == pytest.approx(0.1 / 0.3 * 0.1 / 0.15)


def test_eta_grows_bounded_only_when_spot_waited() -> None:
    ctl = EtaController(g=0.9, eta=0.2)
    assert ctl.update(0.01, spot_waited_long=False) == 0.2  # nobody waited: no growth
    assert ctl.update(0.01, True) == pytest.approx(0.3)  # (1-g)/e = 10, capped at x1.5
    ctl = EtaController(g=0.9, eta=0.2)
    assert ctl.update(0.045, True) == pytest.approx(0.3)  # (1-g)/e = 2.2 -> x1.5 cap
    ctl = EtaController(g=0.9, eta=0.9)
    assert ctl.update(0.0, True) == 1.0  # never above 1
    ctl = EtaController(g=0.9, eta=0.5)
    assert ctl.update(0.1, True) == 0.5  # inside the band: unchanged
    assert ctl.update(None, False) == 0.5  # no periods, nobody waits: unchanged
    assert ctl.update(None, True) == 0.75  # no periods while spot waits: as e = 0
    fixed = EtaController(g=0.9, eta=0.5, fixed=True)
    assert fixed.update(0.9, True) == 0.5


def test_eviction_score() -> None:
    assert eviction_score(0, 0) == pytest.approx(9900.0)
    assert eviction_score(5, 5) == pytest.approx(10000 * (1 - 0.01 * 32))
    assert eviction_score(10, 0) == 0.0


def test_restart_overhead_and_checkpoint() -> None:
    assert restart_overhead(8) == 40.0 and restart_overhead(16) == 60.0
    gang = Gang(GangSpec("j", "t", "m", "spot", 2, 2, 10_000), submitted=0.0)
    gang.run_start = 100.0
    assert gang.last_checkpoint(100.0 + 5000) == 100.0 + 3600
    assert gang.lost_work(100.0 + 5000) == 4 * 1400


def test_ledger_rate_window() -> None:
    ledger = GuaranteeLedger()
    ledger.record(10, succeeded=3)
    ledger.record(20, failed=1)
    ledger.record(30, succeeded=1, failed=1)
    assert ledger.rate() == pytest.approx(2 / 6)
    assert ledger.rate(since=20) == pytest.approx(2 / 3)
    assert ledger.rate(since=31) is None
    assert ledger.rate_after(20, 1) == pytest.approx(3 / 4)


def test_fgd_fragmentation() -> None:
    # 3 free GPUs: sizes 4 and 8 cannot use them (0.05 + 0.5) * 3
    assert fragmentation(3) == pytest.approx(0.55 * 3)
    assert fragmentation(8) == 0.0


# ---------------------------------------------------------------- scheduler helpers


def cluster(*gpus_per_node: int, model: str = "A") -> Cluster:
    from stoker.sim.gfs import build_cluster

    return build_cluster([TraceNode(f"n{i}", model, g) for i, g in enumerate(gpus_per_node)])


def spec(id: str, cls: str, req: float = 1, workers: int = 1, dur: float = 100.0) -> GangSpec:
    return GangSpec(id, "t", "A", cls, req, workers, dur)  # type: ignore[arg-type]


def starts(actions) -> dict[str, StartGang]:
    return {a.job: a for a in actions if isinstance(a, StartGang)}


def nodes_of(action: StartGang) -> set[str]:
    return {n for n, _, _ in action.placement}


# ---------------------------------------------------------------- placement


def test_node_score_tight_packing_then_class_then_calm() -> None:
    sched = GFSScheduler(cluster(8, 4, 2), GFSConfig(quota=StaticQuota(1.0)))
    # a 2-GPU worker goes where it leaves the fewest free GPUs: n2 (2 -> 0)
    out = sched.handle(GangSubmitted(spec("a", "hp", 2)), 0.0)
    assert nodes_of(starts(out)["a"]) == {"n2"}
    # n0 (8) and n1 (4) free; a 1-GPU spot worker packs onto n1 (4 -> 3)
    out = sched.handle(GangSubmitted(spec("s1", "spot", 1)), 1.0)
    assert nodes_of(starts(out)["s1"]) == {"n1"}


def test_spot_prefers_same_class_and_calm_nodes() -> None:
    sched = GFSScheduler(cluster(4, 4, 4), GFSConfig(quota=StaticQuota(1.0)))
    sched.handle(GangSubmitted(spec("h", "hp", 2)), 0.0)  # lands on n0 (ordinal tie-break)
    sched.handle(GangSubmitted(spec("s", "spot", 2)), 0.0)  # same free after on n1/n2 -> n1
    # both n0 and n1 now have 2 free; spot prefers n1, which already holds spot work
    out = sched.handle(GangSubmitted(spec("s2", "spot", 1)), 1.0)
    assert nodes_of(starts(out)["s2"]) == {"n1"}
    # evictions on n1 make it noisy: HP prefers it, spot avoids it
    for t in range(8):
        sched.nodes["n1"].evictions.append(1.0 + t)
        sched.nodes["n2"].evictions.append(1.0 + t)
    sched.nodes["n2"].evictions.clear()
    assert sched.nodes["n1"].score_e(10.0) < sched.nodes["n2"].score_e(10.0)


def test_fractional_best_fit_on_partly_used_card() -> None:
    sched = GFSScheduler(cluster(2), GFSConfig(quota=StaticQuota(1.0)))
    a = starts(sched.handle(GangSubmitted(spec("a", "spot", 0.5)), 0.0))["a"]
    b = starts(sched.handle(GangSubmitted(spec("b", "spot", 0.25)), 0.0))["b"]
    assert a.placement[0][1] == b.placement[0][1]  # shares the card a left partly used
    sched.check()


def test_gang_all_or_nothing() -> None:
    sched = GFSScheduler(cluster(4, 4), GFSConfig(quota=StaticQuota(1.0)))
    sched.handle(GangSubmitted(spec("h", "hp", 2)), 0.0)
    # three workers of 2 GPUs: only 6 free GPUs in 2+4 -> 3 workers fit exactly
    out = sched.handle(GangSubmitted(spec("g", "spot", 2, 3)), 0.0)
    assert len(starts(out)["g"].placement) == 6
    # another gang of 2 x 1 with 0 free: nothing placed, nothing held
    out = sched.handle(GangSubmitted(spec("g2", "spot", 1, 2)), 0.0)
    assert not starts(out) and sched.used["A"]["spot"] == 6
    sched.check()


def test_spot_admission_respects_quota() -> None:
    sched = GFSScheduler(cluster(8), GFSConfig())
    # forecast HP demand N(3, 0): U = 3 -> free 5 -> quota 5
    sched.handle(ForecastUpdated("A", (3.0,), (0.0,)), 0.0)
    assert sched.quota["A"] == 5.0
    assert "a" in starts(sched.handle(GangSubmitted(spec("a", "spot", 4)), 0.0))
    assert not starts(sched.handle(GangSubmitted(spec("b", "spot", 2)), 0.0))  # 4 + 2 > 5
    assert "c" in starts(sched.handle(GangSubmitted(spec("c", "spot", 1)), 0.0))  # backfill


# ---------------------------------------------------------------- preemption


def test_protect_spares_the_most_expensive_victim() -> None:
    big = Gang(spec("big", "spot", 2), 0.0)
    small = Gang(spec("small", "spot", 2), 0.0)
    cand = Candidate("n", 0, 0.0, [(big, 2.0), (small, 2.0)])
    cost = {"big": 10.0, "small": 1.0}
    assert protect(cand, 2.0, lambda g: cost[g.id]) == [small]
    assert sorted(g.id for g in protect(cand, 4.0, lambda g: cost[g.id])) == ["big", "small"]


def test_preemption_picks_cheapest_node() -> None:
    sched = GFSScheduler(cluster(4, 4), GFSConfig(quota=StaticQuota(1.0)))
    sched.handle(GangSubmitted(spec("old", "spot", 4, dur=1e6)), 0.0)  # n0
    sched.handle(GangSubmitted(spec("young", "spot", 4, dur=1e6)), 3000.0)  # n1
    # at t=3500 old lost 3500 s x 4 GPUs since its start, young only 500 s x 4
    out = sched.handle(GangSubmitted(spec("hp", "hp", 4)), 3500.0)
    evicted = [a.job for a in out if isinstance(a, EvictGang)]
    assert evicted == ["young"]
    assert nodes_of(starts(out)["hp"]) == {"n1"}
    # after old's hourly checkpoint it is the cheap one
    sched.handle(GangCompleted("hp"), 3600.0)
    out = sched.handle(GangSubmitted(spec("hp2", "hp", 4)), 3650.0)
    assert [a.job for a in out if isinstance(a, EvictGang)] == ["old"]
    sched.check()


def test_victim_requeued_with_lost_work_and_overhead() -> None:
    sched = GFSScheduler(cluster(4), GFSConfig(quota=StaticQuota(1.0)))
    sched.handle(GangSubmitted(spec("s", "spot", 4, dur=10_000)), 0.0)
    sched.handle(GangSubmitted(spec("h", "hp", 4, dur=100)), 5000.0)
    gang = sched.jobs["s"]
    # checkpoint at 3600: 3600 s kept, 1400 s lost, 40 s restart owed
    assert gang.remaining == pytest.approx(10_000 - 3600)
    assert gang.overhead == 40.0 and gang.evictions == 1
    out = sched.handle(GangCompleted("h"), 5100.0)
    assert starts(out)["s"].finish_at == pytest.approx(5100 + 40 + 6400)


def test_gfs_victims_cost_includes_rate_increase() -> None:
    a = Gang(spec("a", "spot", 1, 2), 0.0)
    b = Gang(spec("b", "spot", 2), 0.0)
    c1 = Candidate("n0", 0, 0.0, [(a, 1.0)])  # needs one more GPU: unusable for need 2
    c2 = Candidate("n1", 1, 1.0, [(a, 1.0)])
    c3 = Candidate("n2", 2, 0.0, [(b, 2.0)])
    ctx = PreemptContext(now=10.0, rate_after=lambda k: 0.1 * k, pool_gpus=8, window_s=100.0)
    cand, victims = GFSVictims().choose([c2, c3], 2.0, ctx)  # type: ignore[misc]
    assert victims  # both cost one eviction; c2 loses 2 GPUs x 10 s, c3 also: tie -> fit
    assert cand.node in {"n1", "n2"}
    assert c1.free == 0.0


def test_yarn_evicts_everything_on_first_fit_node() -> None:
    sched = GFSScheduler(cluster(4), policy("yarn-cs").config)
    sched.handle(GangSubmitted(spec("s1", "spot", 2, dur=1e5)), 0.0)
    sched.handle(GangSubmitted(spec("s2", "spot", 2, dur=1e5)), 0.0)
    out = sched.handle(GangSubmitted(spec("h", "hp", 1)), 10.0)
    assert sorted(a.job for a in out if isinstance(a, EvictGang)) == ["s1", "s2"]


def test_min_runtime_protects_young_spot() -> None:
    sched = GFSScheduler(cluster(4), policy("min-runtime").config)
    sched.handle(GangSubmitted(spec("s", "spot", 4, dur=1e5)), 0.0)
    out = sched.handle(GangSubmitted(spec("h", "hp", 4)), 100.0)
    assert not starts(out) and not any(isinstance(a, EvictGang) for a in out)
    out = sched.handle(GangSubmitted(spec("h2", "hp", 1)), 3700.0)
    assert [a.job for a in out if isinstance(a, EvictGang)] == ["s"]


def test_idle_pool_pods_give_way_before_spot() -> None:
    shared = cluster(2)
    profile = Profile("p", gpu_model="A")
    core = Core(shared, [profile])
    sched = GFSScheduler(shared, GFSConfig(quota=StaticQuota(1.0)), pool_core=core)
    # a pool job runs and ends: its pod stays warm on one card
    acts = core.handle(JobSubmitted(JobSpec("pj", "t", "p", "tag")), 0.0)
    pod = next(a.pod for a in acts if isinstance(a, StartPod))
    core.handle(PodReady(pod), 1.0)
    core.handle(JobStarted("pj"), 1.0)
    core.handle(JobFinished("pj"), 2.0)
    sched._refresh(sched.nodes["n0"])  # the pool changed shares outside the scheduler
    sched.handle(GangSubmitted(spec("s", "spot", 1, dur=1e5)), 3.0)  # the other card
    out = sched.handle(GangSubmitted(spec("h", "hp", 1)), 4.0)
    stops = [a for a in out if isinstance(a, StopPod)]
    assert [a.pod for a in stops] == [pod] and not any(isinstance(a, EvictGang) for a in out)
    # while the pod stops the HP job waits (no spot is evicted); once gone it takes the card
    assert not any(isinstance(a, EvictGang) for a in sched.schedule(4.5))
    out = sched.handle(PoolEvent(PodGone(pod)), 5.0)
    assert "h" in starts(out) and not any(isinstance(a, EvictGang) for a in out)
    assert sched.jobs["s"].state.value == "running"
    sched.check()


def test_core_yield_idle_all_or_nothing() -> None:
    shared = cluster(2)
    core = Core(shared, [Profile("p", gpu_model="A")])
    acts = core.handle(JobSubmitted(JobSpec("pj", "t", "p", "tag")), 0.0)
    pod = next(a.pod for a in acts if isinstance(a, StartPod))
    core.handle(PodReady(pod), 1.0)
    core.handle(JobStarted("pj"), 1.0)
    assert core.yield_idle("n0", 2, 1.5) == []  # the pod is active: not idle, nothing
    core.handle(JobFinished("pj"), 2.0)
    assert core.yield_idle("n0", 1, 2.5) == []  # one card already free
    out = core.yield_idle("n0", 2, 3.0)
    assert [a.pod for a in out if isinstance(a, StopPod)] == [pod]
    core.check()


# ---------------------------------------------------------------- properties


job_st = st.tuples(
    st.sampled_from(["hp", "spot"]),
    st.sampled_from([0.25, 0.5, 1, 2, 4]),
    st.integers(1, 3),
    st.floats(0, 20_000),
    st.floats(1, 9000),
)


def _trace(rows) -> Trace:
    nodes = [TraceNode("a", "A", 4), TraceNode("b", "A", 4), TraceNode("c", "A", 8)]
    jobs = [
        TraceJob(f"j{i}", f"t{i % 3}", "A", req, w, t, d, cls)
        for i, (cls, req, w, t, d) in enumerate(rows)
    ]
    return Trace("tiny", nodes, jobs)


class _CheckingScheduler(GFSScheduler):
    """The real scheduler with its invariants checked after every event, and its actions
    recorded (a subclass that adds checks, the decisions are untouched)."""

    log: ClassVar[list] = []

    def handle(self, event, now, schedule=True):
        out = super().handle(event, now, schedule)
        self.check()
        for a in out:
            if isinstance(a, EvictGang):
                assert self.finished.get(a.job) is None
                assert self.jobs[a.job].spec.job_class == "spot", "HP evicted"
            if isinstance(a, StartGang):
                g = self.jobs[a.job]
                assert math.isclose(sum(s for _, _, s in a.placement), g.spec.gpus)
                if g.spec.job_class == "spot" and not (
                    self.config.oversize_alone and self.used[g.spec.pool]["spot"] == g.spec.gpus
                ):
                    assert self.used[g.spec.pool]["spot"] <= self.quota[g.spec.pool] + 1e-6
        _CheckingScheduler.log.extend(out)
        return out


@settings(max_examples=40, deadline=None)
@given(
    st.lists(job_st, min_size=1, max_size=25),
    st.sampled_from(["gfs", "yarn-cs", "chronus", "lyra", "fgd", "min-runtime", "static-quota"]),
)
def test_properties_hp_never_evicted_gangs_whole_nothing_lost(rows, name) -> None:
    import stoker.sim.gfs as simmod

    trace = _trace(rows)
    spec_ = policy(name)
    original = simmod.GFSScheduler
    simmod.GFSScheduler = _CheckingScheduler  # type: ignore[misc]
    try:
        result = simulate(trace, spec_, Window(0.0, 0.0, 30_000.0))
    finally:
        simmod.GFSScheduler = original  # type: ignore[misc]
    m = result.metrics
    assert m["spot.jobs"] + m["hp.jobs"] == len(rows)  # every job finished, none dropped


def test_spot_load_scaling() -> None:
    jobs = [TraceJob(f"s{i}", "t", "A", 1, 1, float(i), 10, "spot") for i in range(1000)]
    jobs.append(TraceJob("h", "t", "A", 1, 1, 0.0, 10, "hp"))
    assert sum(j.job_class == "spot" for j in scale_spot_load(jobs, 0.5, 1)) in range(430, 570)
    high = scale_spot_load(jobs, 1.5, 1)
    assert sum(j.job_class == "spot" for j in high) in range(1430, 1570)
    assert sum(j.job_class == "hp" for j in high) == 1


# ---------------------------------------------------------------- sim and CLI


class _FlatForecaster(BatchPredictor):
    """A test-only forecaster: every tenant's demand ahead is its last minute's, std 1."""

    name = "flat"

    def __init__(self) -> None:
        from stoker.forecast.base import Cadence

        self.cadence = Cadence(refit_every_min=1440, query_every_min=5)

    def fit(self, histories, now_min) -> None:
        return None

    def predict_many(self, keys, histories, now_min, horizon_h):
        from stoker.forecast.base import Forecasts

        last = histories[:, -1] if histories.shape[1] else np.zeros(len(keys))
        mean = np.repeat(last[:, None], horizon_h, axis=1)
        return Forecasts(tuple(keys), mean, np.ones_like(mean))


def _busy_trace() -> Trace:
    rng = np.random.default_rng(3)
    rows = []
    for _ in range(300):
        cls = "hp" if rng.random() < 0.5 else "spot"
        rows.append(
            (
                cls,
                float(rng.choice([0.5, 1, 2, 4])),
                int(rng.integers(1, 3)),
                float(rng.uniform(0, 3 * 86400)),
                float(rng.uniform(600, 20_000)),
            )
        )
    return _trace(rows)


def test_simulation_deterministic_with_forecast() -> None:
    trace = _busy_trace()
    spec_ = policy("gfs")
    a = simulate(trace, spec_, Window(0.0, 86400.0, 3 * 86400.0), forecaster=_FlatForecaster())
    b = simulate(
        trace, policy("gfs"), Window(0.0, 86400.0, 3 * 86400.0), forecaster=_FlatForecaster()
    )
    strip = lambda m: {k: v for k, v in m.items() if k not in ("wall_s", "events_per_s")}  # noqa: E731
    assert strip(a.metrics) == strip(b.metrics)
    assert a.metrics["spot.jobs"] > 0 and a.timeline["t"]


def test_cli_tiny_trace(tmp_path) -> None:
    from stoker.traces.gfs_v2026 import write_jobs, write_nodes

    trace = _busy_trace()
    folder = tmp_path / "trace"
    folder.mkdir()
    write_nodes(folder / "node_info_df.csv", trace.nodes)
    write_jobs(folder / "job_info_df.csv", trace.jobs)
    runner = CliRunner()
    args = [
        "sim",
        "gfs",
        "--trace",
        "v2026",
        "--trace-path",
        str(folder),
        "--days",
        "1",
        "--warm-days",
        "1",
        "--burn-in-days",
        "0.5",
        "--policy",
        "gfs-naive",
        "--policy",
        "yarn-cs",
        "--load",
        "medium",
        "--load",
        "high",
        "--out",
        str(tmp_path / "out"),
    ]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    for load in ("medium", "high"):
        for name in ("gfs-naive", "yarn-cs"):
            m = doc["results"][load][name]
            for key in (
                "spot.eviction_rate",
                "spot.mean_queue_s",
                "spot.mean_jct_s",
                "hp.mean_queue_s",
                "hp.p99_jct_s",
                "gpu_allocation_rate",
                "useful_gpu_time_rate",
                "preemptions_per_spot_job",
            ):
                assert key in m
    assert (tmp_path / "out" / "eviction_queueing.png").is_file()
    runner.invoke(app, args)  # again: the same seed gives the same results
    assert (
        json.loads((tmp_path / "out" / "results.json").read_text())["results"]["high"]["yarn-cs"][
            "spot.mean_jct_s"
        ]
        == doc["results"]["high"]["yarn-cs"]["spot.mean_jct_s"]
    )
    bad = runner.invoke(app, ["sim", "gfs", "--policy", "nope"])
    assert bad.exit_code != 0 and "nope" in bad.output


@pytest.mark.torch
def test_cli_gfs_with_orglinear(tmp_path) -> None:
    pytest.importorskip("torch")
    from stoker.traces.gfs_v2026 import write_jobs, write_nodes

    trace = _busy_trace()
    folder = tmp_path / "trace"
    folder.mkdir()
    write_nodes(folder / "node_info_df.csv", trace.nodes)
    write_jobs(folder / "job_info_df.csv", trace.jobs)
    base = ["sim", "gfs", "--trace", "v2026", "--trace-path", str(folder), "--days", "1"]
    base += ["--warm-days", "1", "--burn-in-days", "0.5", "--policy", "gfs", "--no-plots"]
    runner = CliRunner()
    res = runner.invoke(app, [*base, "--forecaster", "orglinear", "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "o" / "results.json").read_text())
    assert "spot.eviction_rate" in doc["results"]["medium"]["gfs"]
    bad = runner.invoke(app, [*base, "--forecaster", "prophet", "--out", str(tmp_path / "b")])
    assert bad.exit_code != 0 and "--forecaster" in bad.output


def test_chronus_lease_returns_spot_when_others_wait() -> None:
    sched = GFSScheduler(cluster(4), policy("chronus").config)
    sched.handle(GangSubmitted(spec("s", "spot", 4, dur=1e5)), 0.0)
    assert "s" in starts(sched.handle(Tick(), 0.0))  # the first round starts it
    assert sched.jobs["s"].state.value == "running"
    sched.handle(GangSubmitted(spec("w", "spot", 4, dur=10)), 100.0)
    out = sched.handle(Tick(), 1200.0)  # lease over, w waits: s goes back, w runs
    assert [a.job for a in out if isinstance(a, EvictGang)] == ["s"]
    assert "w" in starts(out)
    gang = sched.jobs["s"]
    assert gang.remaining == pytest.approx(1e5 - 1200) and gang.overhead == 120.0


def test_cli_on_the_shared_philly_trace(tmp_path) -> None:
    from stoker.traces.load import shared_data_dir

    data = shared_data_dir()
    if data is None or not (data / "philly-adaptdl" / "philly.csv").is_file():
        pytest.skip("the shared philly trace is not here")
    res = CliRunner().invoke(
        app,
        [
            "sim",
            "gfs",
            "--trace",
            "philly",
            "--trace-path",
            str(data / "philly-adaptdl"),
            "--days",
            "3",
            "--warm-days",
            "7",
            "--policy",
            "yarn-cs",
            "--policy",
            "lyra",
            "--no-plots",
            "--out",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["results"]["medium"]["lyra"]["hp.jobs"] > 0
