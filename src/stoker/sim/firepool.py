"""The Firepool experiments: each runs the one core under a baseline's policies on a seeded
workload and computes its figures from the records (see :mod:`stoker.sim.metrics`).

- agent and RL loops: loop wall time with a fresh pod per job / with warm reuse;
- start latency over the production-like mix, per policy (fresh reuse tag vs warm reuse);
- handover on a contended cluster (more callers than GPUs), without and with standby;
- keep-alive over the mix: GPU-seconds held by the fitted keep-alive / always-on, and p90;
- the mix's warm-or-standby fraction under the Firepool default;
- a sensitivity sweep over pod start time and pause length.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from stoker.core import Cluster, Core, Profile
from stoker.core.policies.keepalive import FIXED_KEEPALIVE_S
from stoker.core.registry import preset
from stoker.sim import metrics
from stoker.sim.engine import SimResult, Simulator
from stoker.sim.params import Dist, RuntimeParams
from stoker.sim.virtual import VirtualRuntime
from stoker.sim.workloads import (
    AgentLoopSpec,
    LoopWorkload,
    MixSpec,
    RLLoopSpec,
    agent_loop,
    mix,
    rl_loop,
    scale_pauses,
)

PROFILE = "gpu"


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """``nodes`` x ``gpus_per_node`` GPUs; the last ``cold_nodes`` lack the base image at t=0
    (Firepool builds every pod from one shared base image, so most nodes have it)."""

    nodes: int
    gpus_per_node: int = 8
    cold_nodes: int = 0

    def build(self) -> Cluster:
        return Cluster.uniform(self.nodes, self.gpus_per_node)

    def prepulled(self) -> list[tuple[str, str]]:
        return [(f"node-{i}", PROFILE) for i in range(self.nodes - self.cold_nodes)]


@dataclass(frozen=True, slots=True)
class FirepoolConfig:
    """Everything the experiments depend on; the CLI sets its fields."""

    seed: int = 0
    runtime: RuntimeParams = field(default_factory=RuntimeParams)
    # a GPU share of 0.9 for an active pod leaves 0.1 for a zero-VRAM standby pod beside it
    share: float = 0.9
    standby_share: float = 0.1
    agent: AgentLoopSpec = field(default_factory=AgentLoopSpec)
    agent_cluster: ClusterSpec = field(default_factory=lambda: ClusterSpec(1))
    rl: RLLoopSpec = field(default_factory=RLLoopSpec)
    rl_cluster: ClusterSpec = field(default_factory=lambda: ClusterSpec(4))
    mix: MixSpec = field(default_factory=MixSpec)
    mix_cluster: ClusterSpec = field(default_factory=lambda: ClusterSpec(8, cold_nodes=2))
    # handover: more agents than GPUs, so a job is always waiting when one ends; their jobs
    # are GPU-bound (median 30 s), longer than a standby pod takes to be replenished
    handover_agents: int = 16
    handover_steps: int = 25
    handover_run: Dist = field(default_factory=lambda: Dist("lognormal", 30.0, 0.3))
    handover_cluster: ClusterSpec = field(default_factory=lambda: ClusterSpec(1))
    sweep_pod_start: tuple[float, ...] = (0.5, 1.0, 2.0)
    sweep_pause: tuple[float, ...] = (0.5, 1.0, 4.0, 16.0)
    sweep_sessions: int = 120


@dataclass
class Run:
    """One simulated run and its records."""

    policy: str
    result: SimResult

    @property
    def core(self) -> Core:
        return self.result.core


def simulate(
    cfg: FirepoolConfig,
    policy: str,
    workload: LoopWorkload,
    cluster: ClusterSpec,
    runtime: RuntimeParams | None = None,
) -> Run:
    """Run ``workload`` on ``cluster`` with the named baseline's policies."""
    profile = Profile(PROFILE, share=cfg.share, standby_share=cfg.standby_share)
    built = cluster.build()
    policies = preset(policy).policies
    core = Core(built, [profile], policies)
    virtual = VirtualRuntime(runtime or cfg.runtime, cfg.seed, cluster.prepulled())
    sim = Simulator(core, workload, virtual)
    return Run(policy, sim.run())


def _mean_loop(run: Run) -> float:
    return float(np.mean(list(metrics.loop_times(run.core).values())))


def _loop_experiment(
    cfg: FirepoolConfig, make: Callable[[], LoopWorkload], cluster: ClusterSpec
) -> dict[str, Any]:
    runs = {p: simulate(cfg, p, make(), cluster) for p in ("fresh_pod", "warm_reuse", "firepool")}
    loops = {p: _mean_loop(r) for p, r in runs.items()}
    return {
        "speedup": loops["fresh_pod"] / loops["warm_reuse"],
        "speedup_firepool": loops["fresh_pod"] / loops["firepool"],
        "loop_s": loops,
        "jobs": len(runs["fresh_pod"].core.jobs),
        "start_p90_s": {
            p: metrics.percentile(metrics.start_latencies(r.core), 90) for p, r in runs.items()
        },
    }


def agent_experiment(cfg: FirepoolConfig) -> dict[str, Any]:
    """Agent loop wall time: fresh pod per job / warm reuse (and / the Firepool default)."""
    return _loop_experiment(cfg, lambda: agent_loop(cfg.agent, cfg.seed), cfg.agent_cluster)


def rl_experiment(cfg: FirepoolConfig) -> dict[str, Any]:
    """RL loop wall time: fresh pod per job / warm reuse (and / the Firepool default)."""
    return _loop_experiment(cfg, lambda: rl_loop(cfg.rl, cfg.seed), cfg.rl_cluster)


MIX_POLICIES = ("fresh_pod", "fresh_tag", "warm_reuse", "firepool", "always_on", "fitted")


def mix_runs(cfg: FirepoolConfig) -> dict[str, Run]:
    """The mix under every policy (start-latency CDFs, keep-alive, hit fractions)."""
    return {p: simulate(cfg, p, mix(cfg.mix, cfg.seed), cfg.mix_cluster) for p in MIX_POLICIES}


def handover_experiment(cfg: FirepoolConfig) -> dict[str, Any]:
    """Handover without and with standby on a contended node; ``short_jobs`` repeats it with
    the agent loop's own short jobs, where standby pods are used faster than replenished."""
    out: dict[str, Any] = {}
    for run_d, into in ((cfg.handover_run, out), (cfg.agent.run, out.setdefault("short_jobs", {}))):
        spec = replace(cfg.agent, callers=cfg.handover_agents, steps=cfg.handover_steps, run=run_d)
        for key, policy in (("no_standby", "warm_reuse"), ("standby", "firepool")):
            run = simulate(cfg, policy, agent_loop(spec, cfg.seed), cfg.handover_cluster)
            h = metrics.handovers(run.core)
            into[key] = metrics.percentile(h, 50)
            into[f"{key}_p90"] = metrics.percentile(h, 90)
            into[f"{key}_samples"] = len(h)
            into[f"{key}_standby_fraction"] = metrics.hit_fractions(run.core)["standby"]
    return out


def keepalive_figures(runs: dict[str, Run]) -> dict[str, Any]:
    """GPU-seconds held by the fitted (and fixed) keep-alive over always-on, with their p90."""
    held = {p: metrics.held(runs[p].result) for p in ("always_on", "firepool", "fitted")}
    p90 = {
        p: metrics.percentile(metrics.start_latencies(runs[p].core), 90)
        for p in ("always_on", "firepool", "fitted")
    }
    return {
        "capacity_ratio": held["fitted"].total / held["always_on"].total,
        "fixed_capacity_ratio": held["firepool"].total / held["always_on"].total,
        "p90_start_s": {
            "fitted": p90["fitted"],
            "always_on": p90["always_on"],
            "fixed": p90["firepool"],
        },
        "held_gpu_s": {
            "fitted": held["fitted"].total,
            "always_on": held["always_on"].total,
            "fixed": held["firepool"].total,
        },
        "fixed_keepalive_s": FIXED_KEEPALIVE_S,
    }


def mix_figures(runs: dict[str, Run]) -> dict[str, Any]:
    """Hit paths of the mix under the Firepool default."""
    run = runs["firepool"]
    hits = metrics.hit_fractions(run.core)
    return {
        "requests": len(run.core.jobs),
        "warm_or_standby_fraction": hits["warm"] + hits["standby"],
        "warm_fraction": hits["warm"],
        "standby_fraction": hits["standby"],
        "cold_fraction": hits["cold"],
        "fitted_warm_or_standby_fraction": (
            metrics.hit_fractions(runs["fitted"].core)["warm"]
            + metrics.hit_fractions(runs["fitted"].core)["standby"]
        ),
    }


def sweep(cfg: FirepoolConfig) -> list[dict[str, float]]:
    """Agent-loop speedup, mix hit fraction and keep-alive capacity ratio as the pod start
    time and every pause are scaled (a smaller mix of ``sweep_sessions`` sessions)."""
    small = replace(cfg.mix, sessions=cfg.sweep_sessions)
    rows = []
    for fs in cfg.sweep_pod_start:
        runtime = cfg.runtime.with_pod_start(fs)
        for fp in cfg.sweep_pause:
            plans = scale_pauses(agent_loop(cfg.agent, cfg.seed).plans, fp)
            loops = {
                p: _mean_loop(simulate(cfg, p, LoopWorkload(plans), cfg.agent_cluster, runtime))
                for p in ("fresh_pod", "warm_reuse")
            }
            mixed = {
                p: simulate(
                    cfg,
                    p,
                    LoopWorkload(scale_pauses(mix(small, cfg.seed).plans, fp)),
                    cfg.mix_cluster,
                    runtime,
                )
                for p in ("firepool", "always_on", "fitted")
            }
            hits = metrics.hit_fractions(mixed["firepool"].core)
            ka = keepalive_figures(mixed)
            rows.append(
                {
                    "pod_start_factor": fs,
                    "pause_factor": fp,
                    "agent_speedup": loops["fresh_pod"] / loops["warm_reuse"],
                    "mix_warm_or_standby_fraction": hits["warm"] + hits["standby"],
                    "capacity_ratio": ka["capacity_ratio"],
                    "p90_fitted_s": ka["p90_start_s"]["fitted"],
                    "p90_always_on_s": ka["p90_start_s"]["always_on"],
                }
            )
    return rows


@dataclass
class Outcome:
    """The results file's content and the runs the plots are drawn from."""

    results: dict[str, Any]
    mix_runs: dict[str, Run]


EXPERIMENTS = ("mix", "agent loop", "RL loop", "handover", "sweep")


def run_all(cfg: FirepoolConfig, progress: Callable[[str], None] | None = None) -> Outcome:
    """Every experiment; the results contain no wall-clock figure (same seed, same file).
    ``progress`` hears the name of each of :data:`EXPERIMENTS` as it is done."""
    done = progress or (lambda _name: None)
    runs = mix_runs(cfg)
    done("mix")
    agent = agent_experiment(cfg)
    done("agent loop")
    rl = rl_experiment(cfg)
    done("RL loop")
    handover = handover_experiment(cfg)
    done("handover")
    swept = sweep(cfg)
    done("sweep")
    results: dict[str, Any] = {
        "seed": cfg.seed,
        "agent_loop": agent,
        "rl_loop": rl,
        "start_latency_p90_s": {
            p: metrics.percentile(metrics.start_latencies(r.core), 90) for p, r in runs.items()
        },
        "start_latency": {p: metrics.summary(r.result) for p, r in runs.items()},
        "handover_s": handover,
        "keepalive": keepalive_figures(runs),
        "mix": mix_figures(runs),
        "sweep": swept,
        "assumptions": {
            "runtime": cfg.runtime.table(),
            "share": cfg.share,
            "standby_share": cfg.standby_share,
            "agent": _spec(cfg.agent),
            "rl": _spec(cfg.rl),
            "mix": _spec(cfg.mix),
            "clusters": {
                "agent": asdict(cfg.agent_cluster),
                "rl": asdict(cfg.rl_cluster),
                "mix": asdict(cfg.mix_cluster),
                "handover": asdict(cfg.handover_cluster),
            },
            "handover_agents": cfg.handover_agents,
        },
    }
    return Outcome(metrics.json_safe(results), runs)


def _spec(spec: Any) -> dict[str, Any]:
    out = {}
    for k, v in asdict(spec).items():
        if isinstance(v, dict) and "kind" in v:
            v = {kk: vv for kk, vv in v.items() if kk != "source"}
        out[k] = v
    return out
