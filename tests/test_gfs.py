"""GFS in the core: formulas on hand numbers, scheduling rules, properties, the sim and CLI."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from stoker.cli.main import app
from stoker.core import (
    GPU,
    Action,
    BindJob,
    Cluster,
    Core,
    Failure,
    ForecastUpdated,
    GpuWait,
    Job,
    JobClass,
    JobForgotten,
    JobRequeued,
    JobSpec,
    JobState,
    JobSubmitted,
    KeepAliveRenewed,
    KillJob,
    Node,
    PodForgotten,
    PodGone,
    PodReady,
    PodState,
    Profile,
    RankExited,
    RankStarted,
    SpotQuotaWait,
    StartPod,
    StopPod,
    Tick,
    preset,
)
from stoker.core.config import Policies, ProfilePolicies
from stoker.core.gfs import GFSConfig, GuaranteeLedger
from stoker.core.gfs.jobs import restart_overhead
from stoker.core.gfs.memo import SearchMemo
from stoker.core.gfs.placement import eviction_score, fragmentation
from stoker.core.gfs.preemption import (
    Candidate,
    FGDVictims,
    FifoVictims,
    GFSVictims,
    LyraVictims,
    PreemptContext,
)
from stoker.core.gfs.quota import EtaController, StaticQuota, forecast_quota
from stoker.core.policies import AlwaysOn, FittedKeepAlive
from stoker.forecast.base import BatchPredictor
from stoker.sim.gfs import Window, runnable, scale_spot_load, simulate
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
    job = _job("j", "spot", 2, 2, 10_000)
    job.run_start = 100.0
    assert job.last_checkpoint(100.0 + 5000, 3600.0) == 100.0 + 3600


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
    # fgd.py's frag_func: sum of p_s * (free - free // s) over {1: .35, 2: .1, 4: .05, 8: .5}
    assert fragmentation(3) == pytest.approx(0.35 * 0 + 0.1 * 2 + 0.05 * 3 + 0.5 * 3)
    assert fragmentation(8) == pytest.approx(0.35 * 0 + 0.1 * 4 + 0.05 * 6 + 0.5 * 7)


# ---------------------------------------------------------------- scheduler helpers


def cluster(*gpus_per_node: int, model: str = "A") -> Cluster:
    from stoker.sim.gfs import build_cluster

    return build_cluster([TraceNode(f"n{i}", model, g) for i, g in enumerate(gpus_per_node)])


def spec(id: str, cls: str, req: float = 1, workers: int = 1, dur: float = 100.0) -> JobSpec:
    return JobSpec(id, "t", "A", job_class=JobClass(cls), workers=workers, gpus=req, duration=dur)


def _job(id: str, cls: str, req: float = 1, workers: int = 1, dur: float = 100.0) -> Job:
    per = req if req < 1 else float(math.ceil(req))
    return Job(spec(id, cls, req, workers, dur), JobState.QUEUED, 0.0, per_worker=per)


class Gangs:
    """Drives the one core like the simulator's runtime does for trace pods: pods start,
    bind and stop in no time (``stop=False`` leaves stops unanswered), and a job preempted
    (an eviction or a lease returned) has every rank exit. Checks the core's invariants
    after every event and returns every action an event led to."""

    def __init__(self, cl: Cluster, policies: Policies | str = "gfs", **profile) -> None:
        if isinstance(policies, str):
            policies = preset(policies).policies
        self.core = Core(
            cl, [Profile("A", gpu_model="A"), Profile("p", gpu_model="A", **profile)], policies
        )
        self.stop = True

    def send(self, event, now: float) -> list[Action]:
        out = self.core.handle(event, now)
        self.core.check()
        done = list(out)
        for a in out:
            match a:
                case StartPod(pod=pod, profile="A"):
                    done += self.send(PodReady(pod), now)
                case BindJob(job=job, pods=pods) if (
                    self.core.jobs[job].job_class is not JobClass.POOL
                ):
                    for rank in range(len(pods)):
                        done += self.send(RankStarted(job, rank), now)
                case StopPod(pod=pod) if self.stop or self.core.pods[pod].profile == "A":
                    done += self.send(PodGone(pod), now)
                case KillJob(job=job, reason=Failure.PREEMPTED):
                    for rank in range(self.core.jobs[job].workers):
                        done += self.send(RankExited(job, rank, 1, Failure.PREEMPTED), now)
        return done

    def submit(self, s: JobSpec, now: float) -> list[Action]:
        return self.send(JobSubmitted(s), now)

    def finish(self, job: str, now: float) -> list[Action]:
        out: list[Action] = []
        for rank in range(self.core.jobs[job].workers):
            out += self.send(RankExited(job, rank), now)
        return out

    def nodes(self, job: str) -> set[str]:
        return {self.core.pods[p].node for p in self.core.jobs[job].pods}

    def cards(self, job: str) -> list[str]:
        return [g for p in self.core.jobs[job].pods for g in self.core.pods[p].gpus]


def static(share: float = 1.0, **kw) -> Policies:
    return Policies(hpspot=GFSConfig(quota=StaticQuota(share), **kw))


def bound(actions) -> list[str]:
    return [a.job for a in actions if isinstance(a, BindJob)]


def evicted(actions) -> list[str]:
    return [a.job for a in actions if isinstance(a, JobRequeued) and a.reason is Failure.PREEMPTED]


# ---------------------------------------------------------------- placement


def test_node_score_tight_packing_then_class_then_calm() -> None:
    g = Gangs(cluster(8, 4, 2), static())
    # a 2-GPU worker goes where it leaves the fewest free GPUs: n2 (2 -> 0)
    g.submit(spec("a", "hp", 2), 0.0)
    assert g.nodes("a") == {"n2"}
    # n0 (8) and n1 (4) free; a 1-GPU spot worker packs onto n1 (4 -> 3)
    g.submit(spec("s1", "spot", 1), 1.0)
    assert g.nodes("s1") == {"n1"}


def test_spot_prefers_same_class_and_calm_nodes() -> None:
    g = Gangs(cluster(4, 4, 4), static())
    g.submit(spec("h", "hp", 2), 0.0)  # lands on n0 (ordinal tie-break)
    g.submit(spec("s", "spot", 2), 0.0)  # same free after on n1/n2 -> n1
    # both n0 and n1 now have 2 free; spot prefers n1, which already holds spot work
    g.submit(spec("s2", "spot", 1), 1.0)
    assert g.nodes("s2") == {"n1"}
    nodes = g.core.hpspot.nodes
    for t in range(8):
        nodes["n1"].evictions.append(1.0 + t)
    assert nodes["n1"].score_e(10.0) < nodes["n2"].score_e(10.0)


def test_fractional_best_fit_on_partly_used_card() -> None:
    g = Gangs(cluster(2), static())
    g.submit(spec("a", "spot", 0.5), 0.0)
    g.submit(spec("b", "spot", 0.25), 0.0)
    assert g.cards("a") == g.cards("b")  # shares the card a left partly used


def test_gang_all_or_nothing_one_pod_per_worker() -> None:
    g = Gangs(cluster(4, 4), static())
    g.submit(spec("h", "hp", 2), 0.0)
    # three workers of 2 GPUs: only 6 free GPUs in 2+4 -> 3 workers fit exactly
    out = g.submit(spec("g", "spot", 2, 3), 0.0)
    assert len(g.cards("g")) == 6 and len(g.core.jobs["g"].pods) == 3
    assert next(a for a in out if isinstance(a, BindJob)).pods == tuple(g.core.jobs["g"].pods)
    assert g.core.jobs["g"].state is JobState.RUNNING
    # another gang of 2 x 1 with 0 free: nothing placed, nothing held
    g.submit(spec("g2", "spot", 1, 2), 0.0)
    assert g.core.jobs["g2"].state is JobState.QUEUED and g.core.hpspot.used["A"]["spot"] == 6
    # the gang ends: its pods stop and its room goes to the waiting one
    out = g.finish("g", 10.0)
    assert sum(isinstance(a, StopPod) for a in out) == 3 and "g2" in bound(out)


def test_spot_admission_respects_quota_summed_over_tenants() -> None:
    g = Gangs(cluster(8), "gfs")
    # two tenants forecast N(1, 0) and N(2, 0): summed U = 3 -> free 5 -> quota 5
    g.send(ForecastUpdated("t1", "A", (1.0,), (0.0,)), 0.0)
    g.send(ForecastUpdated("t2", "A", (2.0,), (0.0,)), 0.0)
    assert g.core.hpspot.quota["A"] == 5.0
    # a tenant's new answer replaces its old one
    g.send(ForecastUpdated("t1", "A", (1.0,), (0.0,)), 0.0)
    assert g.core.hpspot.quota["A"] == 5.0
    assert "a" in bound(g.submit(spec("a", "spot", 4), 0.0))
    assert not bound(g.submit(spec("b", "spot", 2), 0.0))  # 4 + 2 > 5
    assert "c" in bound(g.submit(spec("c", "spot", 1), 0.0))  # backfill


def _idle_after_hp(policy: str) -> tuple[Gangs, list[Action]]:
    """The live report's case on a GPU pool of 2 GPUs: HP ran 1 GPU for 40 s, then 2 GPUs for 20 s;
    both done, the forecaster says HP will peak at 2 GPUs every hour ahead (the recent
    peak: quota 0); then a 1-GPU spot job comes."""
    g = Gangs(cluster(2), policy)
    g.submit(spec("h1", "hp", 1, dur=40.0), 0.0)
    g.finish("h1", 40.0)
    g.submit(spec("h2", "hp", 2, dur=20.0), 40.0)
    g.finish("h2", 60.0)
    g.send(ForecastUpdated("t", "A", (2.0,) * 4, (0.0,) * 4), 60.0)
    assert g.core.hpspot.quota["A"] == 0.0
    return g, g.submit(spec("s", "spot", 1), 61.0)


def test_a_spot_job_held_by_the_quota_is_told_the_quota_the_forecast_and_the_free_gpus() -> None:
    # GFS: the forecast keeps both GPUs for HP over the guaranteed hour; the job waits, and
    # the core says so with the figures that hold it
    g, out = _idle_after_hp("gfs")
    assert bound(out) == [] and g.core.jobs["s"].state is JobState.QUEUED
    assert g.core.waiting("s") == SpotQuotaWait(
        gpu_pool="A",
        quota=0.0,
        spot_gpus=0.0,
        gpus=1.0,
        capacity=2,
        free_gpus=2,
        hp_gpus=0.0,
        eta=1.0,
        forecast_hp=2.0,
        guaranteed_h=1,
        lent=None,
        hp_queued=0,
    )
    # a quota that reads no forecast says so
    s = Gangs(cluster(2), static(0.0))
    s.submit(spec("s", "spot", 1), 0.0)
    wait = s.core.waiting("s")
    assert isinstance(wait, SpotQuotaWait) and (wait.quota, wait.forecast_hp) == (0.0, None)


def test_gfs_lend_runs_spot_on_gpus_no_hp_job_uses_and_hp_takes_them_back() -> None:
    # the broker's default preset: spot borrows what HP does not hold while no HP waits
    g, out = _idle_after_hp("gfs-lend")
    assert bound(out) == ["s"] and g.core.waiting("s") is None
    assert g.core.hpspot.spot_quota("A") == 2.0  # the loan: eta 1 x the 2 GPUs HP leaves
    # HP comes back for both GPUs: the lent GPU goes back by eviction (what spot is)
    back = g.submit(spec("h3", "hp", 2), 70.0)
    assert evicted(back) == ["s"] and "h3" in bound(back)
    # with HP waiting nothing is lent: a spot job waits for the forecast's quota
    g.submit(spec("h4", "hp", 1), 71.0)
    g.submit(spec("s2", "spot", 1), 72.0)
    assert g.core.waiting("h4") == GpuWait("A", 1, 1.0, free_gpus=0, capacity=2)
    wait = g.core.waiting("s2")
    assert isinstance(wait, SpotQuotaWait)
    assert (wait.quota, wait.lent, wait.hp_queued, wait.hp_gpus) == (0.0, None, 1, 2.0)


def test_a_job_waiting_for_pods_to_stop_is_told_whom_the_room_is_for() -> None:
    g = Gangs(cluster(2), "gfs-lend")
    g.stop = False  # pods of profile p take their time to go
    g.submit(JobSpec("s", "t", "p", job_class=JobClass.SPOT, gpus=1, duration=100.0), 0.0)
    g.send(PodReady(g.core.jobs["s"].pods[0]), 0.0)
    assert g.core.jobs["s"].state is JobState.RUNNING
    g.submit(spec("h3", "hp", 2), 70.0)  # evicts s: its pod stops for h3
    assert g.core.waiting("h3") == GpuWait("A", 1, 2.0, 1, 2, freeing_for="h3")
    g.submit(spec("s2", "spot", 1), 71.0)  # the free GPU is h3's: spot does not take it
    assert g.core.waiting("s2") == GpuWait("A", 1, 1.0, 1, 2, freeing_for="h3")
    # the evicted job is back in the queue, behind the same room; an unknown job waits not
    assert evicted(g.send(Tick(), 71.0)) == [] and g.core.jobs["s"].state is JobState.QUEUED
    assert g.core.waiting("s") == g.core.waiting("s2") and g.core.waiting("nope") is None


def test_demand_series_is_running_hp_gpus() -> None:
    # the authors' recorder: HP GPUs running per tenant (a queued HP job is not seen)
    g = Gangs(cluster(2), static())
    g.submit(spec("h1", "hp", 2, dur=1e4), 0.0)
    g.submit(spec("h2", "hp", 1), 60.0)  # queued behind h1: not in the series
    g.send(Tick(), 180.0)
    assert list(g.core.demand.history(("t", "A"))) == [2.0, 2.0, 2.0]
    g.finish("h1", 600.0)  # h2 starts
    g.send(Tick(), 660.0)
    assert list(g.core.demand.history(("t", "A"))[9:]) == [2.0, 1.0]


# ---------------------------------------------------------------- preemption


def test_preemption_picks_cheapest_node() -> None:
    g = Gangs(cluster(4, 4), static())
    g.submit(spec("old", "spot", 4, dur=1e6), 0.0)  # n0
    g.submit(spec("young", "spot", 4, dur=1e6), 3000.0)  # n1
    # at t=3500 old lost 3500 s x 4 GPUs since its start, young only 500 s x 4
    out = g.submit(spec("hp", "hp", 4), 3500.0)
    assert evicted(out) == ["young"]
    assert KillJob("young", Failure.PREEMPTED, 0.0) in out
    assert g.nodes("hp") == {"n1"} and "hp" in bound(out)
    # young restarts at 3600; at 3650 old has still run the longest since its start (the
    # authors' lost work), though it checkpointed at 3600
    g.finish("hp", 3600.0)
    out = g.submit(spec("hp2", "hp", 4), 3650.0)
    assert evicted(out) == ["young"]


def test_victim_requeued_with_lost_work_and_overhead() -> None:
    g = Gangs(cluster(4), static())
    g.submit(spec("s", "spot", 4, dur=10_000), 0.0)
    g.submit(spec("h", "hp", 4, dur=100), 5000.0)
    job = g.core.jobs["s"]
    # checkpoint at 3600: 3600 s kept, 1400 s lost, 40 s restart owed
    assert job.remaining == pytest.approx(10_000 - 3600)
    assert job.overhead == 40.0 and job.evictions == 1 and job.state is JobState.QUEUED
    first_pod = next(p.id for p in g.core.pods.values() if p.history[0][2] == "starting")
    out = g.finish("h", 5100.0)
    assert "s" in bound(out) and job.overhead + job.remaining == pytest.approx(40 + 6400)
    # late news of the evicted run (from its old pod) changes nothing
    assert first_pod not in job.pods
    g.send(RankExited("s", 0, 137, Failure.PREEMPTED, pod=first_pod), 5100.0)
    assert job.state is JobState.RUNNING


def test_gfs_victims_cost_includes_rate_increase() -> None:
    a = _job("a", "spot", 1, 2)
    b = _job("b", "spot", 2)
    c1 = Candidate("n0", 0, 0.0, [(a, 1.0)])  # needs one more GPU: unusable for need 2
    c2 = Candidate("n1", 1, 1.0, [(a, 1.0)])
    c3 = Candidate("n2", 2, 0.0, [(b, 2.0)])
    ctx = PreemptContext(now=10.0, rate_after=lambda k: 0.1 * k, gpu_pool_gpus=8, window_s=100.0)
    cand, victims = GFSVictims().choose([c2, c3], 2.0, ctx)  # type: ignore[misc]
    assert victims  # both cost one eviction; c2 loses 2 GPUs x 10 s, c3 also: tie -> fit
    assert cand.node in {"n1", "n2"}
    assert c1.free == 0.0


def _warm_pod(g: Gangs, job: str, at: float) -> str:
    """Run a pool job to its end: its pod stays warm (the driver answers by hand)."""
    acts = g.core.handle(JobSubmitted(JobSpec(job, "u", "p", "tag")), at)
    pod = next(a.pod for a in acts if isinstance(a, StartPod))
    g.send(PodReady(pod), at + 1)
    g.send(RankStarted(job), at + 1)
    g.send(RankExited(job), at + 2)
    assert g.core.pods[pod].state.value == "warm"
    return pod


def test_idle_warm_pod_gives_way_before_spot() -> None:
    g = Gangs(cluster(2), static())
    g.stop = False
    pod = _warm_pod(g, "pj", 0.0)  # one card
    g.submit(spec("s", "spot", 1, dur=1e5), 3.0)  # the other card
    out = g.submit(spec("h", "hp", 1), 4.0)
    assert [a.pod for a in out if isinstance(a, StopPod)] == [pod] and not evicted(out)
    # while the pod stops the HP job waits (no spot is evicted); once gone it takes the card
    assert not evicted(g.send(Tick(), 4.5))
    out = g.send(PodGone(pod), 5.0)
    assert "h" in bound(out) and not evicted(out)
    assert g.core.jobs["s"].state is JobState.RUNNING


def test_reclaim_mixes_idle_pods_and_spot_on_one_node_for_a_gang() -> None:
    # n0: a warm pod on one card, spot on the other; n1: spot on both cards. A 2-GPU HP
    # job takes n0 (one idle pod + one spot victim) rather than evicting two spot jobs.
    g = Gangs(cluster(2, 2), static())
    pod = _warm_pod(g, "pj", 0.0)
    g.submit(spec("s0", "spot", 1, dur=1e5), 3.0)
    g.submit(spec("s1", "spot", 1, 2, dur=1e5), 3.0)
    assert g.nodes("s0") == {g.core.pods[pod].node}
    out = g.submit(spec("h", "hp", 2), 4.0)
    assert evicted(out) == ["s0"] and pod in [a.pod for a in out if isinstance(a, StopPod)]
    assert "h" in bound(out) and g.core.jobs["s1"].state is JobState.RUNNING


@pytest.mark.parametrize("victims", [FifoVictims, FGDVictims, LyraVictims, GFSVictims])
def test_a_gang_evicts_for_the_workers_free_room_did_not_take(victims) -> None:
    # n0: its first card free, a spot job on the second. A 2-worker 1-GPU HP gang: worker
    # 0 takes the free card, worker 1 needs the spot job's. A chooser by card order saw the
    # free card worker 0 took as still free, chose no victim, and the gang waited (with a
    # victim chosen short of its room, FGD evicted and failed at one instant for ever)
    g = Gangs(cluster(2), static(victims=victims()))
    g.submit(spec("s0", "spot", 1, dur=1e5), 0.0)
    g.submit(spec("s", "spot", 1, dur=1e5), 0.0)
    assert g.cards("s0") == ["n0/0"]
    g.finish("s0", 5.0)
    out = g.submit(spec("h", "hp", 1, 2), 10.0)
    assert evicted(out) == ["s"]
    assert "h" in bound(out) and len(set(g.cards("h"))) == 2


def test_fractional_hp_takes_a_standby_share() -> None:
    # one card: an active pool pod (0.9) and its standby (0.1); a 0.1 HP worker takes the
    # standby's share (the active pod is never a victim)
    g = Gangs(cluster(1), static(), share=0.9, standby_share=0.1)
    acts = g.core.handle(JobSubmitted(JobSpec("pj", "u", "p", "tag")), 0.0)
    pod = next(a.pod for a in acts if isinstance(a, StartPod))
    out = g.send(PodReady(pod), 1.0)
    standby = next(a.pod for a in out if isinstance(a, StartPod) and a.standby)
    g.send(PodReady(standby), 2.0)
    g.send(RankStarted("pj"), 2.0)
    out = g.submit(spec("h", "hp", 0.1), 3.0)
    assert [a.pod for a in out if isinstance(a, StopPod)] == [standby]
    assert "h" in bound(out) and g.core.pods[pod].state.value == "active"


def test_hp_never_waits_on_an_active_pool_pod() -> None:
    g = Gangs(cluster(1))
    acts = g.core.handle(JobSubmitted(JobSpec("pj", "u", "p", "tag")), 0.0)
    pod = next(a.pod for a in acts if isinstance(a, StartPod))
    g.send(PodReady(pod), 1.0)
    g.send(RankStarted("pj"), 1.0)
    out = g.submit(spec("h", "hp", 1), 2.0)
    assert not any(isinstance(a, StopPod) for a in out) and not bound(out)


def test_default_warm_cap_keeps_a_warm_pod_hp_will_not_need_within_its_keepalive() -> None:
    # the same forecast under the default: HP holds nothing now and its hour's growth
    # spread over the pod's keep-alive left (warm at 2 s for 60 s: 57 s of 3,600 at 5 s) is
    # 2 x 57/3600 GPU, so the warm pod stays; when HP does arrive it takes the card through
    # the reclaim chain
    g = Gangs(cluster(2), "gfs")
    g.stop = False
    pod = _warm_pod(g, "pj", 0.0)
    out = g.send(ForecastUpdated("t", "A", (2.0,), (0.0,)), 5.0)
    assert not any(isinstance(a, StopPod) for a in out)
    assert g.core.pods[pod].state is PodState.WARM
    assert g.core.warm.hp_cap["A"] == pytest.approx(2.0 - 2.0 * 57 / 3600)
    out = g.submit(spec("h", "hp", 1, 2), 6.0)
    assert StopPod(pod, "reclaim_hp") in out and not bound(out)
    assert "h" in bound(g.send(PodGone(pod), 7.0))


def test_keepalive_cap_counts_what_hp_holds_and_its_near_growth() -> None:
    # one card runs HP, a half-card warm pod sits on the other with 57 s of keep-alive
    # left. A narrow forecast leaves the pod its room (2 - 1 - 57/3600); a wide one (sd 4:
    # 1.28 x 4 x sqrt(57/3600) = 0.64 more) does not, and the pod goes
    def run(var: float) -> tuple[str, list[Action]]:
        g = Gangs(cluster(2), "gfs", share=0.5)
        g.stop = False
        pod = _warm_pod(g, "pj", 0.0)
        g.submit(spec("h", "hp", 1, dur=1e5), 3.0)
        assert g.core.jobs["h"].state is JobState.RUNNING
        return pod, g.send(ForecastUpdated("t", "A", (2.0,), (var,)), 5.0)

    pod, out = run(0.0)
    assert not any(isinstance(a, StopPod) for a in out)
    pod, out = run(16.0)
    assert StopPod(pod, "budget") in out


def test_keepalive_cap_follows_the_keepalive_idle_pods_hold() -> None:
    # the keep-alive cap's horizon is how long the GPU pool's idle pods may yet hold their
    # cards: a renewed hour (or always-on) makes HP's whole hour count, as strict does;
    # with no warm pod, the profiles' keep-alive for a new caller (the fitted fallback)
    def cap(g: Gangs, at: float) -> float:
        g.send(ForecastUpdated("t", "A", (2.0,), (0.0,)), at)
        return g.core.warm.hp_cap["A"]

    g = Gangs(cluster(2), "gfs")
    g.stop = False
    pod = _warm_pod(g, "pj", 0.0)
    assert cap(g, 32.0) == pytest.approx(2.0 - 2.0 * 30 / 3600)  # 30 s left
    out = g.send(KeepAliveRenewed("u", "tag", "p", 3600.0), 40.0)
    assert g.core.warm.hp_cap["A"] == pytest.approx(0.0)
    assert StopPod(pod, "budget") in out  # the renewed pod itself gives way
    assert cap(g, 41.0) == pytest.approx(2.0 - 2.0 * 60 / 3600)  # none warm: a new caller's
    # a gone, forgotten pod leaves no keep-alive deadline behind, though a later one of
    # another warm pod of the GPU pool still counts (the core keeps no forgotten name)
    g = Gangs(cluster(4), "gfs")
    first = _warm_pod(g, "pj", 0.0)  # warm from 2 s to 62 s
    acts = g.core.handle(JobSubmitted(JobSpec("pk", "v", "p", "other")), 10.0)
    second = next(a.pod for a in acts if isinstance(a, StartPod))
    g.send(PodReady(second), 11.0)
    g.send(RankStarted("pk"), 11.0)
    g.send(RankExited("pk"), 12.0)  # warm until 72 s
    assert cap(g, 13.0) == pytest.approx(4.0 - 2.0 * 59 / 3600)
    assert StopPod(first, "keepalive") in g.send(Tick(), 62.0)
    g.send(JobForgotten("pj"), 63.0)
    g.send(PodForgotten(first), 63.0)
    assert cap(g, 64.0) == pytest.approx(4.0 - 2.0 * 8 / 3600)
    warm = g.core.warm
    parts = (warm, warm.idle, warm.queues, warm.planner, warm.budget)
    assert f"'{first}'" not in repr([vars(part) for part in parts])

    always = preset("gfs").policies
    always.keepalive = AlwaysOn()
    g = Gangs(cluster(2), always)
    g.stop = False
    pod = _warm_pod(g, "pj", 0.0)
    out = g.send(ForecastUpdated("t", "A", (2.0,), (0.0,)), 5.0)
    assert StopPod(pod, "budget") in out

    fitted = preset("gfs").policies
    fitted.profiles = {"p": ProfilePolicies(keepalive=FittedKeepAlive(fallback_s=360.0))}
    g = Gangs(cluster(2), fitted)
    assert cap(g, 1.0) == pytest.approx(2.0 - 2.0 * 360 / 3600)


def test_the_warm_cap_follows_a_pool_whose_last_warm_pod_went() -> None:
    # the cap is set again only for GPU pools whose inputs moved: a GPU pool whose last warm pod
    # just went (no new forecast, no HP change) must fall back to a new caller's keep-alive
    g = Gangs(cluster(2), "gfs")
    pod = _warm_pod(g, "pj", 0.0)  # warm from 2 s to 62 s
    g.send(ForecastUpdated("t", "A", (2.0,), (0.0,)), 5.0)
    assert g.core.warm.hp_cap["A"] == pytest.approx(2.0 - 2.0 * 57 / 3600)
    assert StopPod(pod, "keepalive") in g.send(Tick(), 62.0)
    assert g.core.warm.hp_cap["A"] == pytest.approx(2.0 - 2.0 * 60 / 3600)


def test_the_warm_budget_is_capped_per_gpu_pool() -> None:
    # the warm pod is on GPU pool A; GPU pool B has room to spare: B's slack must not let idle
    # pods keep the room A's HP forecast asks for, and B's forecast alone stops nothing
    cl = cluster(2)
    cl.add_node(Node("m0", "B", [GPU(f"m0/{i}", "m0", i, "B") for i in range(4)]))
    # (a forecast this uncertain needs every card of its GPU pool within any keep-alive)
    g = Gangs(cl, "gfs")
    g.stop = False
    pod = _warm_pod(g, "pj", 0.0)
    out = g.send(ForecastUpdated("t", "B", (4.0,), (1e6,)), 5.0)
    assert not any(isinstance(a, StopPod) for a in out)
    out = g.send(ForecastUpdated("t", "B", (0.0,), (0.0,)), 6.0)
    assert not any(isinstance(a, StopPod) for a in out)
    out = g.send(ForecastUpdated("t", "A", (2.0,), (1e6,)), 7.0)
    assert StopPod(pod, "budget") in out
    assert g.core.budget_limit() == 4.0  # B's slack alone


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


class _CheckingCore(Core):
    """The real core with its invariants checked after every event (a subclass that adds
    checks; the decisions are untouched)."""

    def handle_all(self, events, now):
        out = super().handle_all(events, now)
        self.check()
        hpspot = self.hpspot
        for a in out:
            if isinstance(a, JobRequeued) and a.reason is Failure.PREEMPTED:
                # only Chronus re-queues HP: its lease flush (pinned in
                # test_chronus_releases_every_job_each_lease)
                lease = self.hpspot.config.leases is not None
                assert self.jobs[a.job].job_class is JobClass.SPOT or lease, "HP evicted"
            if isinstance(a, BindJob):
                job = self.jobs[a.job]
                held = sum(
                    self.cluster.gpus[gid].allocs[p] for p in a.pods for gid in self.pods[p].gpus
                )
                assert math.isclose(held, job.gpus) and len(a.pods) == job.spec.workers
        gate = hpspot.config.window
        for gpu_pool, used in hpspot.used.items():
            # with the window's gate the quota holds inside the window only (the authors')
            after = gate is not None and now >= gate[1]
            assert used[JobClass.SPOT] <= hpspot.quota[gpu_pool] + 1e-6 or after
        return out


@settings(max_examples=40, deadline=None)
@given(
    st.lists(job_st, min_size=1, max_size=25),
    st.sampled_from(["gfs", "yarn-cs", "chronus", "lyra", "fgd"]),
)
def test_properties_hp_never_evicted_gangs_whole_nothing_lost(rows, name) -> None:
    import stoker.sim.gfs as simmod

    trace = _trace(rows)
    original = simmod.Core
    simmod.Core = _CheckingCore  # type: ignore[misc]
    try:
        result = simulate(trace, preset(name), Window(0.0, 0.0, 30_000.0))
    finally:
        simmod.Core = original  # type: ignore[misc]
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
    """A test-only forecaster: every tenant's demand ahead is its last hour's peak, std 1."""

    name = "flat"
    query_hours = 1  # reads the last hour's peak alone
    fit_minutes = 1

    def __init__(self) -> None:
        from stoker.forecast.base import Cadence

        self.cadence = Cadence(refit_every_min=1440, query_every_min=5)

    def fit(self, histories, now_min) -> None:
        return None

    def predict_peaks(self, keys, peaks, now_min, horizon_h, recorded_min=None):
        from stoker.forecast.base import Forecasts

        mean = np.repeat(peaks[:, -1:], horizon_h, axis=1)
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
    a = simulate(
        trace, preset("gfs"), Window(0.0, 86400.0, 3 * 86400.0), forecaster=_FlatForecaster()
    )
    b = simulate(
        trace, preset("gfs"), Window(0.0, 86400.0, 3 * 86400.0), forecaster=_FlatForecaster()
    )
    strip = lambda m: {k: v for k, v in m.items() if k not in ("wall_s", "events_per_s")}  # noqa: E731
    assert strip(a.metrics) == strip(b.metrics)
    assert a.metrics["spot.jobs"] > 0 and a.timeline["t"]


@pytest.mark.parametrize("name", ["ridge", "naive"])
def test_queries_from_kept_peaks_forecast_what_the_laid_out_minutes_do(
    monkeypatch, name: str
) -> None:
    """The driver queries from the hourly peaks the meter keeps as the clock passes; at
    every query the forecasts are, bit for bit, those of the forecaster handed every
    series' whole per-minute record laid out from scratch (``predict_many``)."""
    from stoker.core.demand import DemandMeter
    from stoker.forecast.base import Cadence
    from stoker.forecast.registry import make_forecaster

    meters: list[DemandMeter] = []
    peaks = DemandMeter.peaks

    def kept(meter, hours):
        meters[:] = [meter]
        return peaks(meter, hours)

    model = make_forecaster(name, cadence=Cadence(refit_every_min=720, query_every_min=35))
    predict_peaks = type(model).predict_peaks
    compared: list[int] = []
    inner = [False]  # predict_many's own call of predict_peaks

    def both(self, keys, peaks_, now_min, horizon_h, recorded_min=None):
        f = predict_peaks(self, keys, peaks_, now_min, horizon_h, recorded_min)
        if inner[0]:
            return f
        laid = np.array([meters[0].history((k.tenant, k.gpu_pool)) for k in keys])
        inner[0] = True
        g = self.predict_many(keys, laid, now_min, horizon_h)
        inner[0] = False
        assert f.mean.tolist() == g.mean.tolist() and f.std.tolist() == g.std.tolist()
        compared.append(now_min)
        return f

    monkeypatch.setattr(DemandMeter, "peaks", kept)
    monkeypatch.setattr(type(model), "predict_peaks", both)
    simulate(_busy_trace(), preset("gfs"), Window(0.0, 86400.0, 2 * 86400.0), forecaster=model)
    # queries at minutes off the hour (every 35 minutes), over a day and more
    assert len(compared) > 40 and {m % 60 for m in compared} != {0}


def test_forecasts_of_one_query_reach_the_pass_together(monkeypatch) -> None:
    """The driver hands a query's forecasts to the core together: every tenant's answer is
    in the GPU pool's forecast before the scheduling pass, so no pass decides on a partial sum
    (handed over one by one, a pass follows each)."""
    from stoker.core.gfs.passes import QueuePass
    from stoker.sim.engine import Simulator

    trace = _busy_trace()
    window = Window(0.0, 86400.0, 3 * 86400.0)
    log: list[str] = []
    set_forecast, pass_gpu_pool = Core._forecast, QueuePass.run

    def logged_set(self, tenant, gpu_pool, mean, var):
        log.append("set")
        return set_forecast(self, tenant, gpu_pool, mean, var)

    def logged_pass(self, gpu_pool, now, out):
        log.append("pass")
        return pass_gpu_pool(self, gpu_pool, now, out)

    monkeypatch.setattr(Core, "_forecast", logged_set)
    monkeypatch.setattr(QueuePass, "run", logged_pass)

    def runs() -> set[int]:
        """Lengths of the runs of forecasts between two passes."""
        lengths = [len(r) for r in "".join("s" if e == "set" else "p" for e in log).split("p")]
        return {n for n in lengths if n}

    batched = simulate(trace, preset("gfs"), window, forecaster=_FlatForecaster())
    # each query's answers (one per tenant with a record so far, three once all have
    # one), then one pass
    assert max(runs()) == 3
    assert batched.metrics["spot.mean_queue_s"] > 0  # the quota held spot jobs back
    log.clear()
    together = Simulator.deliver_all
    monkeypatch.setattr(
        Simulator, "deliver_all", lambda sim, events: [together(sim, (e,)) for e in events]
    )
    simulate(trace, preset("gfs"), window, forecaster=_FlatForecaster())
    assert runs() == {1}


def _busy_trace_folder(tmp_path):
    """The busy tiny trace written as upstream v2026 files, for the CLI."""
    from stoker.traces.gfs_v2026 import write_jobs, write_nodes

    trace = _busy_trace()
    folder = tmp_path / "trace"
    folder.mkdir()
    write_nodes(folder / "node_info_df.csv", trace.nodes)
    write_jobs(folder / "job_info_df.csv", trace.jobs)
    return folder


def test_cli_tiny_trace(tmp_path) -> None:
    folder = _busy_trace_folder(tmp_path)
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
        "chronus",
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
        for name in ("gfs-naive", "chronus"):
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
    report = (tmp_path / "out" / "report.html").read_text()
    pngs = list((tmp_path / "out").glob("*.png"))
    assert report.count('src="data:image/png;base64,') == len(pngs)
    runner.invoke(app, args)  # again: the same seed gives the same results
    assert (
        json.loads((tmp_path / "out" / "results.json").read_text())["results"]["high"]["chronus"][
            "spot.mean_jct_s"
        ]
        == doc["results"]["high"]["chronus"]["spot.mean_jct_s"]
    )
    bad = runner.invoke(app, ["sim", "gfs", "--policy", "nope"])
    assert bad.exit_code != 0 and "nope" in bad.output


def test_cli_runs_a_preset_with_its_parameters_changed(tmp_path) -> None:
    folder = _busy_trace_folder(tmp_path)
    base = ["sim", "gfs", "--trace", "v2026", "--trace-path", str(folder), "--days", "1"]
    base += ["--warm-days", "1", "--burn-in-days", "0.5", "--no-plots"]
    runner = CliRunner()
    out = {}
    # GFS with gfs-reserve-patient-lend's parts written out
    written = "gfs+reservation.after_s=3600+reservation.min_worker=2+reservation.min_workers=2"
    written += "+reservation.smaller_first=1+reservation.backfill_free=1+hp_evict_after_s=1800"
    written += "+lend_idle=0.5"
    for policy in ("gfs-reserve-patient-lend", written):
        res = runner.invoke(app, [*base, "--policy", policy, "--out", str(tmp_path / policy)])
        assert res.exit_code == 0, res.output
        doc = json.loads((tmp_path / policy / "results.json").read_text())
        out[policy] = {
            k: v
            for k, v in doc["results"]["medium"][policy].items()
            if "wall" not in k and "per_s" not in k
        }
    # the preset written out decides as the named one, and its results go by what was run
    assert out["gfs-reserve-patient-lend"] == out[written]
    # a bad parameter: a one-line message naming it, exit 2, nothing run
    bad = runner.invoke(app, [*base, "--policy", "gfs+lend_idle=2", "--out", str(tmp_path / "b")])
    assert bad.exit_code == 2 and "--policy: preset: lend_idle must be in (0, 1]" in bad.output
    assert not (tmp_path / "b").exists()


@pytest.mark.torch
def test_cli_gfs_with_orglinear(tmp_path) -> None:
    pytest.importorskip("torch")
    folder = _busy_trace_folder(tmp_path)
    base = ["sim", "gfs", "--trace", "v2026", "--trace-path", str(folder), "--days", "1"]
    base += ["--warm-days", "1", "--burn-in-days", "0.5", "--policy", "gfs", "--no-plots"]
    runner = CliRunner()
    res = runner.invoke(app, [*base, "--forecaster", "orglinear", "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "o" / "results.json").read_text())
    assert "spot.eviction_rate" in doc["results"]["medium"]["gfs"]
    bad = runner.invoke(app, [*base, "--forecaster", "prophet", "--out", str(tmp_path / "b")])
    assert bad.exit_code != 0 and "--forecaster" in bad.output


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
            "chronus",
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


def test_allocation_value_prices_gfs_gain_over_each_baseline() -> None:
    from stoker.sim.gfs_report import HOURS_PER_MONTH, allocation_value

    def run(rate: float) -> dict[str, object]:
        return {"gpu_allocation_rate": rate}

    runs = {
        "medium": {"gfs": run(0.8), "yarn-cs": run(0.7), "fgd": run(0.9)},
        "high": {"yarn-cs": run(0.5)},  # no gfs at this load: nothing to value
    }
    value = allocation_value(runs, 10_000, 2.5)
    assert value["per_month"] == {
        "medium": {
            "yarn-cs": pytest.approx(0.1 * 10_000 * HOURS_PER_MONTH * 2.5),
            "fgd": pytest.approx(-0.1 * 10_000 * HOURS_PER_MONTH * 2.5),  # a loss
        }
    }
    assert value["gpu_hour_price"] == 2.5 and "gpu_hour_price" in str(value["formula"])
    with pytest.raises(ValueError, match="gpu_hour_price"):
        allocation_value(runs, 10_000, -1.0)


def test_paper_comparison_checks_each_claim_against_the_baselines_mean() -> None:
    from stoker.sim.gfs_report import compare_to_paper, render_comparison_markdown

    def m(evict: float, queue: float, hp_queue: float, p99: float) -> dict[str, object]:
        return {
            "spot.eviction_rate": evict,
            "spot.mean_queue_s": queue,
            "spot.mean_jct_s": queue + 100.0,
            "hp.mean_queue_s": hp_queue,
            "hp.p99_jct_s": p99,
        }

    results = {
        "medium": {
            "gfs": m(0.1, 50.0, 30.0, 1030.0),
            "yarn-cs": m(0.2, 100.0, 100.0, 1000.0),
            "lyra": m(0.2, 100.0, 100.0, 1000.0),
            "gfs-naive": m(0.0, 0.0, 0.0, 1.0),  # an ablation, not a baseline
        }
    }
    c = compare_to_paper(results)["medium"]
    assert c["baselines"] == ["yarn-cs", "lyra"]
    rows = c["metrics"]
    assert (
        rows["spot.eviction_rate"]["vs_mean"] == -0.5 and rows["spot.eviction_rate"]["reproduced"]
    )
    assert rows["spot.mean_queue_s"]["reproduced"]  # -50 % against the paper's -44.1 %
    assert rows["spot.mean_jct_s"]["vs_mean"] == pytest.approx(-0.25)
    assert rows["hp.mean_queue_s"]["reproduced"]  # -70 %: within the paper's range's worst
    assert rows["hp.p99_jct_s"]["vs_mean"] == 0.03 and rows["hp.p99_jct_s"]["reproduced"]
    results["medium"]["gfs"]["hp.mean_queue_s"] = 50.0  # -50 %: short of -60 %
    results["medium"]["gfs"]["hp.p99_jct_s"] = 1100.0  # +10 %: not unchanged
    rows = compare_to_paper(results)["medium"]["metrics"]
    assert not rows["hp.mean_queue_s"]["reproduced"] and not rows["hp.p99_jct_s"]["reproduced"]
    table = render_comparison_markdown(compare_to_paper(results))
    assert "| hp.mean_queue_s | -50.0 % | -50.0 % | -50.0 % | -71.0 % .. -60.0 % | no |" in table


def test_cli_gpu_hour_price_writes_the_value_with_price_and_formula(tmp_path) -> None:
    from stoker.sim.gfs_report import HOURS_PER_MONTH

    folder = _busy_trace_folder(tmp_path)
    base = ["sim", "gfs", "--trace", "v2026", "--trace-path", str(folder), "--days", "1"]
    base += ["--warm-days", "1", "--burn-in-days", "0.5", "--no-plots", "--policy", "yarn-cs"]
    runner = CliRunner()
    out = tmp_path / "o"
    res = runner.invoke(
        app, [*base, "--policy", "gfs", "--gpu-hour-price", "1.5", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "results.json").read_text())
    value = doc["allocation_value"]
    gpus = doc["meta"]["gpus"]
    assert doc["meta"]["node_list"] == str(folder / "node_info_df.csv")  # the cluster run on
    m = doc["results"]["medium"]
    gain = m["gfs"]["gpu_allocation_rate"] - m["yarn-cs"]["gpu_allocation_rate"]
    assert value["per_month"]["medium"]["yarn-cs"] == pytest.approx(
        gain * gpus * HOURS_PER_MONTH * 1.5, abs=0.01
    )
    authors = m["gfs"]["authors.gpu_allocation_rate"] - m["yarn-cs"]["authors.gpu_allocation_rate"]
    assert value["per_month_authors"]["medium"]["yarn-cs"] == pytest.approx(
        authors * gpus * HOURS_PER_MONTH * 1.5, abs=0.01
    )
    assert value["gpu_hour_price"] == 1.5 and value["hours_per_month"] == HOURS_PER_MONTH
    assert "per GPU-hour" in res.output
    # without gfs among the policies there is no gain to value; a negative price is refused
    bad = runner.invoke(app, [*base, "--gpu-hour-price", "1.5", "--out", str(tmp_path / "b")])
    assert bad.exit_code != 0 and "--gpu-hour-price" in bad.output
    bad = runner.invoke(
        app, [*base, "--policy", "gfs", "--gpu-hour-price", "-1", "--out", str(tmp_path / "c")]
    )
    assert bad.exit_code != 0 and "--gpu-hour-price" in bad.output


@pytest.mark.parametrize("name", ["gfs", "yarn-cs", "chronus", "lyra", "fgd"])
def test_a_failed_search_is_not_repeated_and_decides_the_same(monkeypatch, name) -> None:
    """A job whose search for room (free, then reclaim) failed is searched again only once
    its GPU pool changed, and an HP job only while the cards without HP could hold its
    workers: the same actions, in the same order, as searching on every event, with fewer
    searches."""
    from stoker.core.gfs.placement import GpuPoolIndex
    from stoker.core.gfs.scheduler import HpSpotScheduler
    from stoker.sim.virtual import VirtualRuntime

    trace = _busy_trace()
    window = Window(0.0, 86400.0, 3 * 86400.0)
    plan_free = HpSpotScheduler._plan_free

    def run() -> tuple[list[str], int]:
        log: list[str] = []
        searches = [0]
        carry_out = VirtualRuntime.carry_out

        def logged(runtime, action):
            log.append(f"{runtime.sim.now:.3f} {action!r}")
            return carry_out(runtime, action)

        def counted(sched, job, now):
            searches[0] += 1
            return plan_free(sched, job, now)

        with monkeypatch.context() as m:
            m.setattr(VirtualRuntime, "carry_out", logged)
            m.setattr(HpSpotScheduler, "_plan_free", counted)
            simulate(trace, preset(name), window, forecaster=_FlatForecaster())
        return log, searches[0]

    remembered, fewer = run()
    # every search's state looks new: nothing is remembered; and the bounds on an HP job's
    # room (cards without HP; free and whole-GPU spot cards) never spare a search
    monkeypatch.setattr(SearchMemo, "state", lambda self, gpu_pool, now: object())
    monkeypatch.setattr(GpuPoolIndex, "hp_slots", lambda self, need: 10**9)
    monkeypatch.setattr(GpuPoolIndex, "reclaim_slots", lambda self, need: 10**9)
    searched, every = run()
    assert remembered == searched
    assert len(remembered) > 1000
    assert fewer < every


@pytest.mark.parametrize("name", ["fgd", "yarn-cs", "gfs"])
def test_a_blocked_hp_job_is_searched_again_only_once_a_node_could_hold_it(
    monkeypatch, name
) -> None:
    """A whole-GPU HP job that fits nowhere is searched again only once some node's free
    and whole-GPU spot cards could hold it: cards held by the stopping pods of ended jobs
    (no HP share: the bound on cards without HP counts them) or freed short of its
    request spare the search; the card that completes a node's room beside a spot job's
    starts it (the spot job evicted), as searching on every event does."""
    from dataclasses import replace

    from stoker.core.gfs.placement import GpuPoolIndex
    from stoker.core.gfs.scheduler import HpSpotScheduler

    def run() -> tuple[list[tuple[float, Action]], list[float]]:
        hpspot = replace(preset(name).policies.hpspot, quota=StaticQuota(1.0))
        core = Core(cluster(4, 4), [Profile("A", gpu_model="A")], Policies(hpspot=hpspot))
        log: list[tuple[float, Action]] = []
        held: list[str] = []  # pods asked to stop, not gone yet
        hold = [False]

        def send(event, now: float) -> None:
            out = core.handle(event, now)
            core.check()
            for a in out:
                log.append((now, a))
                match a:
                    case StartPod(pod=pod):
                        send(PodReady(pod), now)
                    case BindJob(job=job, pods=pods):
                        for rank in range(len(pods)):
                            send(RankStarted(job, rank), now)
                    case StopPod(pod=pod) if hold[0]:
                        held.append(pod)
                    case StopPod(pod=pod):
                        send(PodGone(pod), now)
                    case KillJob(job=job, reason=Failure.PREEMPTED):
                        send(RankExited(job, 0, 1, Failure.PREEMPTED), now)

        searches: list[float] = []

        def counted(method):
            def search(sched, job, now, *args, **kw):
                if job.id == "h":
                    searches.append(now)
                return method(sched, job, now, *args, **kw)

            return search

        with monkeypatch.context() as m:
            for method in ("_plan_free", "_reclaim"):
                m.setattr(HpSpotScheduler, method, counted(getattr(HpSpotScheduler, method)))
            for job, gpus in (("a", 4), ("b", 2), ("c", 2)):
                send(JobSubmitted(spec(job, "hp", gpus, dur=1e5)), 0.0)
            send(JobSubmitted(spec("h", "hp", 4, dur=1e5)), 1.0)  # both nodes full of HP
            hold[0] = True
            send(RankExited("b", 0), 2.0)
            send(RankExited("c", 0), 3.0)
            # b's and c's node: four cards without HP, held by their stopping pods
            assert core.hpspot.gpu_pools["A"].by_no_hp[4] == 1
            b, c = held[:2]
            send(PodGone(b), 4.0)  # two cards free: a spot job takes one
            send(JobSubmitted(spec("s", "spot", 1, dur=1e5)), 5.0)
            assert core.jobs["s"].state is JobState.RUNNING
            send(Tick(), 6.0)
            send(PodGone(c), 7.0)  # three cards free and the spot job's: h's room
            assert core.jobs["s"].state is JobState.QUEUED  # evicted, its pod stopping
            send(PodGone(held[2]), 8.0)
            assert core.jobs["h"].state is JobState.RUNNING
        return log, searches

    remembered, fewer = run()
    assert not [t for t in fewer if 2.0 <= t <= 6.0]
    # every search's state looks new and no bound spares one
    monkeypatch.setattr(SearchMemo, "state", lambda self, gpu_pool, now: object())
    monkeypatch.setattr(GpuPoolIndex, "hp_slots", lambda self, need: 10**9)
    monkeypatch.setattr(GpuPoolIndex, "reclaim_slots", lambda self, need: 10**9)
    searched, every = run()
    assert remembered == searched
    assert [t for t in every if 2.0 <= t <= 6.0]


def test_forecasters_run_on_one_blas_thread_in_the_simulator() -> None:
    """A ridge fit's bits changed with BLAS's thread count (so with the machine's cores):
    the simulator runs the forecaster on one thread, the same on every machine."""
    from threadpoolctl import threadpool_info

    seen: list[int] = []

    class Recording(_FlatForecaster):
        def fit(self, histories, now_min) -> None:
            seen.extend(p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas")

    simulate(
        _busy_trace(), preset("gfs"), Window(0.0, 86400.0, 2 * 86400.0), forecaster=Recording()
    )
    assert seen and set(seen) == {1}


def test_a_gang_needs_a_node_slot_per_whole_gpu_worker() -> None:
    # one 8-GPU node and eight 1-GPU nodes (16 GPUs): two 8-GPU workers fit the GPU pool's
    # GPUs but never start (one node holds 8), so the job is left out; the rest can run
    nodes = [TraceNode("big", "A", 8)] + [TraceNode(f"s{i}", "A", 1) for i in range(8)]
    jobs = [
        TraceJob("two-eights", "t", "A", 8, 2, 0.0, 10, "hp"),
        TraceJob("one-eight", "t", "A", 8, 1, 1.0, 10, "hp"),
        TraceJob("sixteen-ones", "t", "A", 1, 16, 2.0, 10, "hp"),
        TraceJob("seventeen-ones", "t", "A", 1, 17, 3.0, 10, "spot"),
        TraceJob("halves", "t", "A", 0.5, 32, 4.0, 10, "spot"),
        TraceJob("other-model", "t", "B", 1, 1, 5.0, 10, "hp"),
    ]
    kept = [j.name for j in runnable(jobs, nodes)]
    assert kept == ["one-eight", "sixteen-ones", "halves"]


def test_cli_jobs_and_gfs_compare(tmp_path) -> None:
    from stoker.sim.paired import METRICS, JobOutcomes, job_metrics

    folder = _busy_trace_folder(tmp_path)
    base = ["sim", "gfs", "--trace", "v2026", "--trace-path", str(folder), "--days", "1"]
    base += ["--warm-days", "1", "--burn-in-days", "0.5", "--no-plots", "--jobs"]
    runner = CliRunner()
    out = tmp_path / "o"
    res = runner.invoke(
        app, [*base, "--policy", "gfs", "--policy", "yarn-cs", "--load", "high", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "results.json").read_text())["results"]["high"]
    for policy in ("gfs", "yarn-cs"):
        # the file holds the very jobs the metrics counted: they come out the same
        from_file = job_metrics(JobOutcomes.read(out / "jobs" / "high" / f"{policy}.csv.gz"))
        assert from_file == {k: doc[policy][k] for k in from_file}
        assert from_file["spot.jobs"] > 0 and from_file["hp.jobs"] > 0
    # a run in another folder pairs with them (same trace, seed, load)
    other = tmp_path / "p"
    res = runner.invoke(
        app, [*base, "--policy", "gfs-naive", "--load", "high", "--out", str(other)]
    )
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["sim", "gfs-compare", str(out), str(other), "--resamples", "200"])
    assert res.exit_code == 0, res.output
    cmp = json.loads((out / "compare.json").read_text())
    assert set(cmp["results"]["high"]) == {"yarn-cs", "gfs-naive"}
    for changes in cmp["results"]["high"].values():
        assert set(changes) == set(METRICS)
        for c in changes.values():
            assert c["ci_low"] <= c["ci_high"]
            assert c["verdict"] in ("better", "worse", "no clear difference")
    naive = cmp["results"]["high"]["gfs-naive"]["spot.mean_queue_s"]
    assert naive["base"] == doc["gfs"]["spot.mean_queue_s"]
    printed = runner.invoke(
        app,
        [
            "sim",
            "gfs-compare",
            str(out),
            str(other),
            "--resamples",
            "200",
            "--json",
            "--out",
            str(tmp_path / "c.json"),
        ],
    )
    assert printed.exit_code == 0 and json.loads(printed.output) == cmp  # seeded: the same
    # several bases: each other policy against their mean (the paper's "average")
    mean = runner.invoke(
        app,
        [
            "sim",
            "gfs-compare",
            str(out),
            str(other),
            "--base",
            "gfs,yarn-cs",
            "--json",
            "--resamples",
            "100",
            "--out",
            str(tmp_path / "m.json"),
        ],
    )
    assert mean.exit_code == 0, mean.output
    mean_doc = json.loads(mean.output)
    assert mean_doc["meta"]["base"] == ["gfs", "yarn-cs"]
    assert set(mean_doc["results"]["high"]) == {"gfs-naive"}
    q = mean_doc["results"]["high"]["gfs-naive"]["hp.mean_queue_s"]
    both = [doc[p]["hp.mean_queue_s"] for p in ("gfs", "yarn-cs")]
    assert q["base"] == pytest.approx(sum(both) / 2)
    # bad input: one line, exit 2, nothing written
    empty = tmp_path / "empty"
    empty.mkdir()
    for args, msg in (
        ([str(empty)], "no job outcomes under"),
        ([str(out), "--base", "lyra"], f"--base: no run of 'lyra' under {out}; found gfs, yarn-cs"),
        ([str(out), "--resamples", "0"], "--resamples: must be >= 1"),
        ([str(out), "--base", "gfs,gfs"], "--base: one policy or several, each once"),
        ([str(tmp_path / "nope")], "not a folder"),
    ):
        bad = runner.invoke(app, ["sim", "gfs-compare", *args, "--out", str(tmp_path / "x.json")])
        assert bad.exit_code == 2 and msg in bad.output, bad.output
    assert not (tmp_path / "x.json").exists()
    # replicates: another seed's runs pair among themselves, and each figure is tallied
    # over the two; without --replicates the same runs in two folders are refused
    seed1 = tmp_path / "r1"
    args = ["--seed", "1", "--policy", "gfs", "--policy", "yarn-cs", "--load", "high"]
    res = runner.invoke(app, [*base, *args, "--out", str(seed1)])
    assert res.exit_code == 0, res.output
    compare = ["sim", "gfs-compare", "--json", "--resamples", "100"]
    rep = runner.invoke(
        app, [*compare, str(out), str(seed1), "--replicates", "--out", str(tmp_path / "r.json")]
    )
    assert rep.exit_code == 0, rep.output
    rep_doc = json.loads(rep.output)
    assert rep_doc["meta"]["replicates"] == [str(out), str(seed1)]
    one = runner.invoke(app, [*compare, str(seed1), "--out", str(tmp_path / "one.json")])
    alone = json.loads(one.output)["results"]
    assert rep_doc["replicates"][1]["results"] == alone  # each replicate as compared alone
    t = rep_doc["results"]["high"]["yarn-cs"]["spot.mean_queue_s"]
    firsts = [r["results"]["high"]["yarn-cs"]["spot.mean_queue_s"] for r in rep_doc["replicates"]]
    assert t["replicates"] == 2 and t["changes"] == [f["change"] for f in firsts]
    assert sum(t[v] for v in ("better", "worse", "no clear difference")) == 2
    printed = runner.invoke(
        app, ["sim", "gfs-compare", str(out), str(seed1), "--replicates", "--resamples", "50"]
    )
    assert printed.exit_code == 0 and "over replicates" in printed.output
    for args, msg in (
        ([str(out), str(seed1)], "high/gfs is in both"),
        ([str(out), "--replicates"], "--replicates: give two folders or more"),
        ([str(out), str(empty), "--replicates"], "no job outcomes under " + str(empty)),
        ([str(out), str(seed1), "--replicates", "--margin", "1.5"], "--margin: a relative"),
    ):
        bad = runner.invoke(app, ["sim", "gfs-compare", *args, "--out", str(tmp_path / "x.json")])
        assert bad.exit_code == 2 and msg in bad.output, bad.output
    assert not (tmp_path / "x.json").exists()
    # runs of other jobs (a shorter window) do not pair: the message names the run
    short = tmp_path / "s"
    res = runner.invoke(
        app,
        [*base[:7], "0.5", *base[8:], "--policy", "yarn-cs", "--load", "high", "--out", str(short)],
    )
    assert res.exit_code == 0, res.output
    (out / "jobs" / "high" / "yarn-cs.csv.gz").unlink()
    bad = runner.invoke(app, ["sim", "gfs-compare", str(out), str(short)])
    assert bad.exit_code == 2 and "high/yarn-cs against gfs: not the same jobs" in bad.output
    # a replicate whose runs do not pair is named with the run
    mixed = tmp_path / "mixed" / "jobs" / "high"
    mixed.mkdir(parents=True)
    shutil.copy(out / "jobs" / "high" / "gfs.csv.gz", mixed)
    shutil.copy(short / "jobs" / "high" / "yarn-cs.csv.gz", mixed)
    bad = runner.invoke(
        app, ["sim", "gfs-compare", str(seed1), str(tmp_path / "mixed"), "--replicates"]
    )
    assert bad.exit_code == 2, bad.output
    assert f"{tmp_path / 'mixed'}: high/yarn-cs against gfs: not the same jobs" in bad.output
