"""Forecaster cost on the Philly trace: one refit on 8 weeks, and queries per second.

    python benchmarks/bench_forecast.py --trace-path ../shared/data/philly-adaptdl

A simulator queries every tenant's forecast every 5 minutes and refits daily, so these two
figures bound what forecasting adds to a run. Prints them and writes JSON (--out).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path

import numpy as np

from stoker.forecast import FORECASTERS, Calendar, demand_series, make_forecaster
from stoker.forecast.base import MINUTES_PER_WEEK
from stoker.traces.philly import load_philly


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace-path", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=Path("stoker-results/bench/forecast.json"))
    parser.add_argument("--queries", type=int, default=3000)
    args = parser.parse_args()

    trace = load_philly(args.trace_path)
    series = demand_series(trace.jobs)
    calendar = Calendar.of_trace(trace.notes)
    now = 8 * MINUTES_PER_WEEK
    history = {k: v[:now] for k, v in series.items()}
    keys = list(history)
    results = {}
    for name in FORECASTERS:
        if name == "orglinear" and not importlib.util.find_spec("torch"):
            print(f"{name}: skipped (torch not installed)")
            continue
        options = {"threads": 1} if name == "orglinear" else {}
        model = make_forecaster(name, calendar=calendar, **options)
        t0 = time.perf_counter()
        model.fit(history, now)
        fit_s = time.perf_counter() - t0
        rows = np.stack([history[k] for k in keys])
        t0 = time.perf_counter()
        for _ in range(args.queries):
            model.predict_many(keys, rows, now, 4)  # one query time: every series at once
        per_query_ms = (time.perf_counter() - t0) / args.queries * 1e3
        results[name] = {"fit_s": fit_s, "predict_ms": per_query_ms, "series": len(keys)}
        print(
            f"{name}: fit {fit_s:.2f} s on {len(keys)} series x 8 weeks, predict "
            f"{per_query_ms:.3f} ms per query time for all {len(keys)} series "
            f"({1e3 / per_query_ms:.0f} query times/s)"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
