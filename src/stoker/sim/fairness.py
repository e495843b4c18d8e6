"""One greedy tenant among ordinary ones, with and without tenant shares
(``stoker sim fairness``): what :mod:`stoker.core.shares` changes, on the one engine.

A cluster of GPU nodes carries warm-pool jobs of one profile (agent tool calls) and HP jobs
of the same GPU pool. Every ordinary tenant submits a steady, Poisson stream of both; the
greedy tenant submits bursts of many times as many of each. Same jobs, same runtime,
same seed under both configurations; only ``Policies.shares`` differs. Each tenant's
figure is its jobs' mean slowdown ((wait + run) / run: its queueing normalised by the work
it asked for). The fairness figures are Jain's index over the ordinary tenants' slowdowns
(1: every tenant within its share waits alike) and over every tenant's (the greedy one,
asking far past its share, is meant to wait longer: shares lower this one), beside the
ordinary tenants' mean slowdown against the greedy one's.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from stoker.core import Cluster, Core, JobClass, JobSpec, JobState, Profile
from stoker.core.registry import preset
from stoker.core.shares import TenantShares, jain
from stoker.sim.engine import Simulator
from stoker.sim.metrics import percentile
from stoker.sim.params import Dist, RuntimeParams
from stoker.sim.virtual import VirtualRuntime

PROFILE = "agent"
GPU_POOL = "any"
GREEDY = "greedy"


class SimFairnessError(ValueError):
    """Bad input of the fairness simulation (the message names the field)."""


@dataclass(frozen=True, slots=True)
class FairnessConfig:
    """Everything the experiment depends on; the CLI sets its fields."""

    seed: int = 0
    nodes: int = 4
    gpus_per_node: int = 8
    tenants: int = 4  # ordinary tenants, beside the greedy one
    duration_s: float = 3600.0
    pool_every_s: float = 20.0  # an ordinary tenant's mean gap between pool jobs
    pool_run_s: float = 30.0  # a pool job's mean run time
    hp_every_s: float = 600.0  # an ordinary tenant's mean gap between HP jobs
    hp_run_s: float = 300.0
    hp_gpus: int = 4
    greedy_factor: float = 10.0  # the greedy tenant submits this many times as much
    bursts: int = 4  # ... in this many bursts over the window

    def __post_init__(self) -> None:
        for name in ("nodes", "gpus_per_node", "tenants", "bursts", "hp_gpus"):
            if getattr(self, name) < 1:
                raise SimFairnessError(f"{name}: must be >= 1, got {getattr(self, name)}")
        for name in ("duration_s", "pool_every_s", "pool_run_s", "hp_every_s", "hp_run_s"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise SimFairnessError(f"{name}: must be > 0, got {value}")
        if not self.greedy_factor >= 1:
            raise SimFairnessError(f"greedy_factor: must be >= 1, got {self.greedy_factor}")
        if self.hp_gpus > self.gpus_per_node:
            raise SimFairnessError(
                f"hp_gpus: {self.hp_gpus} does not fit a node of {self.gpus_per_node}"
            )


def plan(cfg: FairnessConfig) -> list[tuple[float, JobSpec, float]]:
    """Every job: (submit time, spec, run time), in submit order; the same for both runs."""
    rng = np.random.default_rng([cfg.seed, 0xFA12])
    jobs: list[tuple[float, str, JobClass, float]] = []

    def stream(tenant: str, cls: JobClass, every: float, run: float) -> None:
        t = float(rng.exponential(every))
        while t < cfg.duration_s:
            jobs.append((t, tenant, cls, float(rng.exponential(run)) + 1.0))
            t += float(rng.exponential(every))

    def bursts(cls: JobClass, every: float, run: float) -> None:
        # as much as greedy_factor ordinary tenants submit, at a few instants
        count = round(cfg.greedy_factor * cfg.duration_s / every / cfg.bursts)
        for b in range(cfg.bursts):
            at = cfg.duration_s * b / cfg.bursts + float(rng.uniform(0, 60))
            for _ in range(count):
                jobs.append((at, GREEDY, cls, float(rng.exponential(run)) + 1.0))

    for i in range(cfg.tenants):
        stream(f"tenant-{i}", JobClass.POOL, cfg.pool_every_s, cfg.pool_run_s)
        stream(f"tenant-{i}", JobClass.HP, cfg.hp_every_s, cfg.hp_run_s)
    bursts(JobClass.POOL, cfg.pool_every_s, cfg.pool_run_s)
    bursts(JobClass.HP, cfg.hp_every_s, cfg.hp_run_s)
    jobs.sort(key=lambda j: j[0])
    out = []
    for n, (t, tenant, cls, run) in enumerate(jobs):
        if cls is JobClass.POOL:
            spec = JobSpec(f"j{n}", tenant, PROFILE, tenant)
        else:
            spec = JobSpec(f"j{n}", tenant, PROFILE, job_class=cls, gpus=float(cfg.hp_gpus))
        out.append((t, spec, run))
    return out


class _Planned:
    """Submits the planned jobs at their times; done when every one has ended."""

    def __init__(self, jobs: list[tuple[float, JobSpec, float]]) -> None:
        self.jobs = jobs
        self.left = len(jobs)

    @property
    def done(self) -> bool:
        return self.left == 0

    def begin(self, sim: Simulator) -> None:
        for t, spec, run in self.jobs:
            sim.at(t, sim.submit, spec, run)

    def job_done(self, sim: Simulator, job_id: str) -> None:
        self.left -= 1

    def run_s(self, sim: Simulator, job_id: str) -> float:
        raise AssertionError("every job runs its planned time")


def run_one(cfg: FairnessConfig, shares: TenantShares | None) -> dict[str, Any]:
    """One run: per tenant its jobs, mean and p95 wait, mean slowdown; Jain's index."""
    policies = replace(preset("firepool").policies, shares=shares)
    cluster = Cluster.uniform(cfg.nodes, cfg.gpus_per_node, GPU_POOL)
    core = Core(cluster, [Profile(PROFILE, gpu_model=GPU_POOL)], policies)
    # pods start in seconds (warm capacity is what is shared): a 2-5 s cold start
    params = RuntimeParams(pod_start=Dist("uniform", 2.0, 5.0, "fairness: a short cold start"))
    runtime = VirtualRuntime(params, seed=cfg.seed, prepulled=[(n, PROFILE) for n in cluster.nodes])
    jobs = plan(cfg)
    sim = Simulator(core, _Planned(jobs), runtime, record_held=False)
    sim.run()
    run_of = {spec.id: run for _, spec, run in jobs}
    per: dict[str, dict[str, list[float]]] = {}
    for job in core.jobs.values():
        if job.state is not JobState.FINISHED or job.started is None:
            continue
        wait = job.started - job.submitted
        cls = "pool" if job.job_class is JobClass.POOL else "hp"
        rows = per.setdefault(job.spec.tenant, {"pool": [], "hp": [], "slowdown": []})
        rows[cls].append(wait)
        rows["slowdown"].append((wait + run_of[job.id]) / run_of[job.id])
    tenants = {}
    for tenant in sorted(per):
        rows = per[tenant]
        tenants[tenant] = {
            "jobs": len(rows["slowdown"]),
            "pool_mean_wait_s": float(np.mean(rows["pool"])) if rows["pool"] else 0.0,
            "pool_p95_wait_s": percentile(np.array(rows["pool"]), 95),
            "hp_mean_wait_s": float(np.mean(rows["hp"])) if rows["hp"] else 0.0,
            "mean_slowdown": float(np.mean(rows["slowdown"])),
        }
    ordinary = [v["mean_slowdown"] for t, v in tenants.items() if t != GREEDY]
    return {
        "tenants": tenants,
        "jain_ordinary": jain(ordinary),
        "jain_all": jain([v["mean_slowdown"] for v in tenants.values()]),
        "ordinary_mean_slowdown": float(np.mean(ordinary)) if ordinary else 0.0,
        "greedy_mean_slowdown": tenants.get(GREEDY, {}).get("mean_slowdown", 0.0),
        "end_s": sim.now,
    }


def run(cfg: FairnessConfig) -> dict[str, Any]:
    """Both runs side by side: ``none`` (every queue in submit order) and ``shares``
    (equal weights, no guarantees or caps: the fair order alone)."""
    return {
        "settings": asdict(cfg),
        "none": run_one(cfg, None),
        "shares": run_one(cfg, TenantShares()),
    }
