"""Benchmark of ``stoker sim gfs``: events per second and wall time of one policy run.

    .venv/bin/python benchmarks/bench_gfs_sim.py --days 2 --scale 1.0 --policy yarn-cs --policy gfs

prints one line per policy and writes ``benchmarks/results/gfs_sim.json``.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

from stoker.core.registry import preset as policy
from stoker.forecast.base import Cadence
from stoker.sim.gfs import Setup, policy_forecaster, prepare_trace, simulate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--days", type=float, default=2.0)
    ap.add_argument("--warm-days", type=float, default=7.0)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--query-every-min", type=int, default=5)
    ap.add_argument("--policy", action="append", default=None)
    ap.add_argument("--out", default="benchmarks/results/gfs_sim.json")
    args = ap.parse_args()
    setup = Setup(
        window_days=args.days, warm_days=args.warm_days, burn_in_days=1.0, scale=args.scale
    )
    t = time.perf_counter()
    trace, window = prepare_trace("v2026", None, setup)
    prep = time.perf_counter() - t
    cadence = Cadence(query_every_min=args.query_every_min)
    rows = []
    for name in args.policy or ["yarn-cs", "gfs"]:
        spec = policy(name)
        r = simulate(
            trace,
            spec,
            window,
            forecaster=policy_forecaster(spec.forecaster, cadence),
            cadence=cadence,
        )
        m = r.metrics
        row = {
            "policy": name,
            "gpus": sum(n.gpus for n in trace.nodes),
            "jobs": len(trace.jobs),
            "days": args.days,
            "events": m["events"],
            "wall_s": m["wall_s"],
            "events_per_s": m["events_per_s"],
            "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }
        rows.append(row)
        print(json.dumps(row))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"prepare_s": prep, "runs": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
