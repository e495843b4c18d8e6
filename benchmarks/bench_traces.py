"""Benchmark the GFS trace pieces: generate the full 184-day trace, write it in the release
format, load it back, and compute the generated-vs-published check.

    .venv/bin/python benchmarks/bench_traces.py [--out DIR] [--days D] [--scale S]

Prints each step's wall time (and jobs per second) and writes DIR/bench_traces.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

from stoker.traces.check import compare, published
from stoker.traces.generator import GeneratorConfig, generate_jobs
from stoker.traces.gfs_v2026 import load_jobs, write_jobs
from stoker.traces.load import V2026_DIR, shared_data_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("stoker-results/bench"))
    parser.add_argument("--days", type=float, default=184.06)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    cfg = GeneratorConfig(seed=args.seed, days=args.days, scale=args.scale)
    steps: dict[str, float] = {}
    t0 = time.perf_counter()
    jobs = generate_jobs(cfg)
    steps["generate_s"] = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "job_info_df.csv"
        t0 = time.perf_counter()
        write_jobs(file, jobs)
        steps["write_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        loaded = load_jobs(file)
        steps["load_s"] = time.perf_counter() - t0
    data = shared_data_dir()
    t0 = time.perf_counter()
    pub = published(data / V2026_DIR / "aggregates" if data else None)
    rows = compare(loaded, pub, days=args.days, scale=args.scale)
    steps["check_s"] = time.perf_counter() - t0
    result = {
        "jobs": len(jobs),
        "days": args.days,
        "scale": args.scale,
        **{k: round(v, 3) for k, v in steps.items()},
        "load_jobs_per_s": round(len(loaded) / steps["load_s"]),
        "generate_jobs_per_s": round(len(jobs) / steps["generate_s"]),
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "rows": len(rows),
    }
    for key, value in result.items():
        print(f"{key:>22}: {value}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_traces.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
