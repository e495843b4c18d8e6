"""Where HP queueing comes from: a policy's mean HP queueing split by GPU pool and job shape.

    .venv/bin/python benchmarks/probe_hp_queue.py --out /var/tmp/hp_queue.json \\
        --capacity-scale 1.0 --capacity-scale 1.6 --policy gfs

Each run is the full-fleet month as ``stoker sim gfs --trace v2026 --days 30 --load L
--capacity-scale C --policy P`` runs it (same trace cut, load copies, forecaster, window
gate). The HP jobs submitted in the window are grouped by GPU pool, by shape (``frac``: a
share of one card; ``1gpu``; ``1xN``: one worker of N cards; ``gang-of-1gpu``;
``gang-multi``: several workers of several cards), by both, and by whether they queued
over a day; each group's figure is its part of the mean (its queueing summed over every
measured HP job), so a level's parts add up to the mean. Prints and writes JSON.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from probe_month import simulate_probed
from stoker.core.model import Job
from stoker.core.registry import preset
from stoker.forecast.base import Cadence
from stoker.sim.gfs import LOADS, Setup, prepare_trace, scale_spot_load
from stoker.traces import Trace

DAY = 86_400.0


def shape(job: Job) -> str:
    """The job's shape class (see the module's doc)."""
    workers, per_worker = job.spec.workers, job.per_worker
    if per_worker < 1:
        return "frac"
    if workers == 1:
        return "1gpu" if per_worker <= 1 else f"1x{int(per_worker)}"
    return "gang-of-1gpu" if per_worker <= 1 else "gang-multi"


def run(policy: str, capacity: float, load: str, seed: int, scale: float) -> dict[str, Any]:
    """One month; the mean HP queueing and its parts."""
    setup = Setup(30.0, 28.0, 2.0, scale, seed, capacity_scale=capacity)
    base, window = prepare_trace("v2026", None, setup)
    jobs = scale_spot_load(base.jobs, LOADS[load], seed)
    trace = Trace(base.name, base.nodes, jobs, base.source, dict(base.notes))
    cadence = Cadence(refit_every_min=1440, query_every_min=5)
    _, core, measured, cpu = simulate_probed(trace, preset(policy), window, cadence, "ridge", [])
    hp = [
        core.jobs[j.name]
        for j in measured
        if window.start <= j.submit_time < window.end and j.job_class == "hp"
    ]
    parts: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for job in hp:
        pool, kind = job.spec.gpu_model, shape(job)
        wait = "queued over a day" if job.queue_s > DAY else "queued a day or less"
        for key in (f"pool {pool}", f"shape {kind}", f"pool/shape {pool}/{kind}", wait):
            parts[key][0] += 1
            parts[key][1] += job.queue_s
    n = max(len(hp), 1)
    ranked = sorted(parts.items(), key=lambda kv: -kv[1][1])
    return {
        "cpu_s": cpu,
        "hp_jobs": len(hp),
        "hp.mean_queue_s": round(sum(j.queue_s for j in hp) / n, 1),
        "parts": {k: {"jobs": int(c), "part_of_mean_s": round(s / n, 1)} for k, (c, s) in ranked},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--capacity-scale", type=float, action="append")
    ap.add_argument("--policy", action="append")
    ap.add_argument("--load", default="medium", choices=list(LOADS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0, help="share of nodes and jobs")
    args = ap.parse_args()
    doc: dict[str, Any] = {"setup": vars(args) | {"out": str(args.out)}, "results": {}}
    for capacity in args.capacity_scale or [1.0]:
        for policy in args.policy or ["gfs"]:
            r = run(policy, capacity, args.load, args.seed, args.scale)
            doc["results"].setdefault(f"{capacity:g}", {})[policy] = r
            top = list(r["parts"].items())[:6]
            print(f"capacity x{capacity:g} {policy}: HP mean queue {r['hp.mean_queue_s']:,.0f} s")
            for key, part in top:
                print(f"  {key}: {part['part_of_mean_s']:,.0f} s ({part['jobs']} jobs)")
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
