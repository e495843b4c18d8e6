"""Benchmark of ``stoker sim gfs``: the full-fleet month, per policy.

    .venv/bin/python benchmarks/bench_gfs_sim.py --policy yarn-cs --policy gfs --profile

The defaults are the issue's run: the generated v2026 jobs on the real node list (10,412
GPUs), a 30-day window after 28 warm days (2 of them simulated), forecasts every 5 minutes
and refits daily, medium load. ``--trace philly --trace-path DIR --capacity-scale 0.2``
runs a real trace as ``stoker sim gfs`` does (its jobs as they are: medium load). Each
policy runs in its own forked process (its peak RSS is its own), one after another. Prints
one JSON line per policy (wall time, events/s, peak RSS, the machine's load average at its
start and end) and writes them all to ``--out`` with the commit measured. With
``--profile`` each run is under cProfile and its time is split into what the forecaster
costs (refits, queries), what the core costs (``Core.handle_all``) and the driver's rest;
the ``.prof`` files go beside ``--out``.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import multiprocessing
import os
import pstats
import resource
import subprocess
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from stoker.core.registry import preset as policy
from stoker.forecast.base import Cadence
from stoker.sim.gfs import Setup, policy_forecaster, prepare_trace, simulate
from stoker.traces.scale import CapacityScale


def breakdown(stats: pstats.Stats) -> dict[str, float]:
    """Seconds spent below the simulator's loop in each part, from a cProfile run."""
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    parts = {"forecast_fit_s": 0.0, "forecast_query_s": 0.0, "core_s": 0.0}
    total = 0.0
    for (file, _line, func), (_cc, _nc, _tt, _ct, callers) in raw.items():
        for (cfile, _cline, cfunc), edge in callers.items():
            ct = edge[3]
            if func == "fit" and cfunc == "_refit" and cfile.endswith("sim/gfs.py"):
                parts["forecast_fit_s"] += ct
            elif func == "predict_peaks" and cfunc == "_query" and cfile.endswith("sim/gfs.py"):
                parts["forecast_query_s"] += ct
            elif func == "handle_all" and file.endswith("core/core.py") and "sim/" in cfile:
                parts["core_s"] += ct
    for (file, _line, func), (_cc, _nc, _tt, ct, _callers) in raw.items():
        if file.endswith("sim/gfs.py") and func == "simulate":
            total = ct
    parts["driver_rest_s"] = total - sum(parts.values())
    parts["simulate_s"] = total
    return {k: round(v, 2) for k, v in parts.items()}


# what each policy's child process reads: set before the children are forked
_RUN: dict[str, Any] = {}


def run_policy(name: str) -> dict[str, Any]:
    """One policy's run, in its own (forked) process so its peak RSS is its own."""
    trace, window, cadence, args = _RUN["trace"], _RUN["window"], _RUN["cadence"], _RUN["args"]
    spec = policy(name)
    forecaster = policy_forecaster(spec.forecaster, cadence, args.forecaster, trace.notes)
    profiler = cProfile.Profile() if args.profile else None
    load0 = os.getloadavg()[0]
    if profiler is not None:
        profiler.enable()
    r = simulate(trace, spec, window, forecaster=forecaster, cadence=cadence, gate=args.gate)
    row: dict[str, Any] = {
        "policy": name,
        "forecaster": args.forecaster if forecaster is not None else None,
        "gpus": sum(n.gpus for n in trace.nodes),
        "jobs": len(trace.jobs),
        "days": args.days,
        "events": r.metrics["events"],
        "wall_s": r.metrics["wall_s"],
        "events_per_s": r.metrics["events_per_s"],
        # CPU seconds of this process (the run and its setup): on a shared machine the
        # wall time also counts other processes' turns
        "cpu_s": round(sum(resource.getrusage(resource.RUSAGE_SELF)[:2]), 1),
        # this process's peak: the trace it inherited plus this policy's run
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        # the machine is shared: the 1-minute load average at the run's start and end
        "load_avg": [round(load0, 2), round(os.getloadavg()[0], 2)],
    }
    if profiler is not None:
        profiler.disable()
        prof = Path(args.out).with_name(f"{Path(args.out).stem}_{name}.prof")
        profiler.dump_stats(prof)
        row["profile"] = breakdown(pstats.Stats(str(prof)))
        row["profile_file"] = str(prof)
    return row


def _tree() -> str:
    """The commit measured (with ``+changes`` when the worktree differs from it)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], check=False).returncode
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default="v2026", help="v2026 | openb | philly")
    ap.add_argument("--trace-path", default=None, help="the trace's files (as stoker sim gfs)")
    ap.add_argument("--capacity-scale", default="1", help="as stoker sim gfs")
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--warm-days", type=float, default=28.0)
    ap.add_argument("--burn-in-days", type=float, default=2.0)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--query-every-min", type=int, default=5)
    ap.add_argument("--refit-every-min", type=int, default=1440)
    ap.add_argument("--forecaster", default="ridge")
    ap.add_argument("--gate", default="window", help="window | always (as stoker sim gfs)")
    ap.add_argument("--policy", action="append", default=None)
    ap.add_argument("--profile", action="store_true", help="cProfile each run")
    ap.add_argument("--out", default="benchmarks/results/gfs_sim.json")
    args = ap.parse_args()
    tree = _tree()  # now: the code imported is this commit's, whatever HEAD is later
    setup = Setup(
        window_days=args.days,
        warm_days=args.warm_days,
        burn_in_days=args.burn_in_days,
        scale=args.scale,
        capacity_scale=CapacityScale.parse(args.capacity_scale),
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    trace, window = prepare_trace(args.trace, args.trace_path, setup)
    prep = time.perf_counter() - t
    cadence = Cadence(query_every_min=args.query_every_min, refit_every_min=args.refit_every_min)
    _RUN.update(trace=trace, window=window, cadence=cadence, args=args)
    rows = []
    fork = multiprocessing.get_context("fork")
    for name in args.policy or ["yarn-cs", "gfs"]:
        # one child per policy, one at a time: runs do not share the 2 cores or a heap
        with ProcessPoolExecutor(max_workers=1, mp_context=fork) as pool:
            row = pool.submit(run_policy, name).result()
        rows.append(row)
        print(json.dumps(row), flush=True)
    setup_doc = {
        "trace": args.trace,
        "trace_path": args.trace_path,
        "capacity_scale": args.capacity_scale,
        "days": args.days,
        "warm_days": args.warm_days,
        "burn_in_days": args.burn_in_days,
        "scale": args.scale,
        "query_every_min": args.query_every_min,
        "refit_every_min": args.refit_every_min,
        "gate": args.gate,
        "forecaster": args.forecaster,
    }
    doc = {
        "tree": tree,
        "cpus": os.cpu_count(),
        "prepare_s": round(prep, 2),
        "setup": setup_doc,
        "runs": rows,
    }
    out.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
