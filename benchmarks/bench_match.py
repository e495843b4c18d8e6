"""Benchmark: how long the core takes to make one matching decision in a big model.

The state is built through the core's own events, the way a driver would build it: 10,000
GPUs (1,250 nodes of 8), one job per (tenant, tag) cold-started on every GPU, each active pod
getting a standby pod beside it, then every job finished so its pod turns warm: 10,000 warm
pods + 10,000 standby pods = 20,000 pods. Then we time ``Core.handle(JobSubmitted)`` (the
decision: warm hit, standby hit) for many submissions, returning the state to the same
shape between timings with untimed events. Prints the medians and writes JSON.

    .venv/bin/python benchmarks/bench_match.py [--out stoker-results/bench_match.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import time
from pathlib import Path

import numpy as np

from stoker.core import (
    BindJob,
    Cluster,
    Core,
    JobSpec,
    JobSubmitted,
    PodGone,
    PodReady,
    Policies,
    Profile,
    PromoteStandby,
    RankExited,
    RankStarted,
    StartPod,
    StopPod,
)
from stoker.core.policies import FixedKeepAlive


class Answer:
    """Answers the core's actions at once (pods ready, jobs started), untimed."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.now = 0.0

    def send(self, event: object) -> list:
        self.now += 0.001
        actions = self.core.handle(event, self.now)  # type: ignore[arg-type]
        self.follow(actions)
        return actions

    def follow(self, actions: list) -> None:
        for a in actions:
            if isinstance(a, StartPod | PromoteStandby):
                self.send(PodReady(a.pod))
            elif isinstance(a, BindJob):
                self.send(RankStarted(a.job))
            elif isinstance(a, StopPod):
                self.send(PodGone(a.pod))


def build(gpus: int) -> tuple[Core, Answer]:
    nodes = gpus // 8
    core = Core(
        Cluster.uniform(nodes, 8),
        [Profile("gpu", share=0.9, standby_share=0.1)],
        # keep-alive long enough that no pod expires during the run (no Tick is sent)
        Policies(keepalive=FixedKeepAlive(1e9)),
    )
    drv = Answer(core)
    for i in range(gpus):
        drv.send(JobSubmitted(JobSpec(f"seed-{i}", f"t{i % 100}", "gpu", f"tag{i}")))
    for i in range(gpus):
        drv.send(RankExited(f"seed-{i}"))
    return core, drv


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=10_000)
    ap.add_argument("--samples", type=int, default=2_000)
    ap.add_argument("--out", type=Path, default=Path("stoker-results/bench_match.json"))
    args = ap.parse_args()

    t0 = time.perf_counter()
    core, drv = build(args.gpus)
    build_s = time.perf_counter() - t0
    pods = sum(1 for p in core.pods.values() if p.state.value != "gone")
    rng = np.random.default_rng(0)
    warm_ns: list[int] = []
    standby_ns: list[int] = []
    # callers that still have a warm pod (a standby hit stops the warm pod it displaces)
    alive = [(f"t{i % 100}", f"tag{i}") for i in range(args.gpus)]
    where = {pair: n for n, pair in enumerate(alive)}
    gc.disable()
    for k in range(args.samples):
        # a warm hit: a caller that has a warm pod submits again
        tenant, tag = alive[int(rng.integers(len(alive)))]
        spec = JobSpec(f"w{k}", tenant, "gpu", tag)
        drv.now += 0.001
        t = time.perf_counter_ns()
        actions = core.handle(JobSubmitted(spec), drv.now)
        warm_ns.append(time.perf_counter_ns() - t)
        assert core.jobs[spec.id].path.value == "warm", core.jobs[spec.id].path
        drv.follow(actions)
        drv.send(RankExited(spec.id))
        # a standby hit: a new caller; the standby beside an idle warm pod is promoted
        spec = JobSpec(f"s{k}", "new", "gpu", f"new{k}")
        drv.now += 0.001
        t = time.perf_counter_ns()
        actions = core.handle(JobSubmitted(spec), drv.now)
        standby_ns.append(time.perf_counter_ns() - t)
        assert core.jobs[spec.id].path.value == "standby", core.jobs[spec.id].path
        for a in actions:
            owner = core.pods[a.pod].owner if isinstance(a, StopPod) else None
            if owner in where:
                n = where.pop(owner)
                last = alive.pop()
                if n < len(alive):
                    alive[n] = last
                    where[last] = n
        drv.follow(actions)
        drv.send(RankExited(spec.id))
    gc.enable()
    both = np.array(warm_ns + standby_ns) / 1e3
    result = {
        "gpus": args.gpus,
        "pods": pods,
        "samples": len(both),
        "median_us": float(np.median(both)),
        "p90_us": float(np.percentile(both, 90)),
        "warm_hit_median_us": float(np.median(np.array(warm_ns) / 1e3)),
        "standby_hit_median_us": float(np.median(np.array(standby_ns) / 1e3)),
        "build_s": build_s,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"matching decision: median {result['median_us']:.1f} us "
        f"(warm hit {result['warm_hit_median_us']:.1f} us, standby hit "
        f"{result['standby_hit_median_us']:.1f} us, p90 {result['p90_us']:.1f} us) "
        f"with {args.gpus} GPUs and {pods} pods; wrote {args.out}"
    )


if __name__ == "__main__":
    main()
