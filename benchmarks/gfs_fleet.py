"""Every policy at every load on one trace, one ``stoker sim gfs`` process per run, merged.

    .venv/bin/python benchmarks/gfs_fleet.py --out stoker-results/gfs-fleet \\
        --load low --load medium --load high --policy gfs --policy yarn-cs ...

The defaults are issue 9's full-fleet month: the generated v2026 jobs on the real node list
(10,412 GPUs), a 30-day window, forecasts every 5 minutes, refits daily. Each (load,
policy) runs alone in its own process under ``nice`` (one at a time: the runs are meant to
share a machine with other work), into ``OUT/<load>/<policy>/``; a run whose results are
there already is skipped unless ``--force``, so a long evaluation can be resumed. After
every run the merged ``OUT/results.json`` (the shape ``stoker sim gfs`` writes, with the
paper comparison and, with ``--gpu-hour-price``, the allocation gain's value),
``OUT/timings.json`` (CPU seconds, wall time, peak RSS, load average, commit per run) and
``OUT/comparison.md`` (the paper comparison as tables) are rewritten.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench_gfs_sim import _tree  # the commit measured, as the month's bench records it
from stoker.sim.gfs_report import allocation_value, compare_to_paper, render_comparison_markdown

STOKER = str(Path(sys.executable).with_name("stoker"))


def run_one(args: argparse.Namespace, load: str, policy: str, out: Path) -> dict[str, Any]:
    """One (load, policy) in its own ``stoker sim gfs`` process; its CPU time and peak RSS
    from the kernel's accounting of that child alone."""
    cmd = [
        "nice", "-n", str(args.nice), STOKER, "sim", "gfs",
        "--trace", args.trace, "--days", str(args.days), "--scale", str(args.scale),
        "--load", load, "--policy", policy, "--no-plots", "--out", str(out),
    ]  # fmt: skip
    if args.capacity_scale is not None:
        cmd += ["--capacity-scale", str(args.capacity_scale)]
    if args.time_scale is not None:
        cmd += ["--time-scale", str(args.time_scale)]
    cmd += args.extra
    tree = _tree()  # the code the run imports is the worktree's at its start
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load0 = os.getloadavg()[0]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{load}/{policy} failed ({proc.returncode}): {proc.stderr.strip()}")
    results = json.loads((out / "results.json").read_text())
    return {
        "load": load,
        "policy": policy,
        "tree": tree,
        "command": " ".join(["stoker", *cmd[4:]]),
        "events": results["results"][load][policy].get("events"),
        "wall_s": round(wall, 1),
        "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1),
        # ru_maxrss of children is the largest child's so far: a run's own only when it is
        # the largest yet, so this is an upper bound per run
        "max_rss_mb_upper": round(after.ru_maxrss / 1024, 1),
        "load_avg": [round(load0, 2), round(os.getloadavg()[0], 2)],
    }


def merge(out: Path, price: float | None) -> None:
    """Rewrite OUT/results.json and OUT/comparison.md from every run found under OUT."""
    results: dict[str, dict[str, Any]] = {}
    meta: dict[str, Any] | None = None
    for path in sorted(out.glob("*/*/results.json")):
        load, policy = path.parent.parent.name, path.parent.name
        doc = json.loads(path.read_text())
        results.setdefault(load, {})[policy] = doc["results"][load][policy]
        factor = doc["meta"]["loads"][load]
        if meta is None:
            meta = {**doc["meta"], "loads": {}}
        meta["loads"][load] = factor
    if meta is None:
        return
    merged: dict[str, Any] = {"meta": meta, "results": results}
    if price is not None:
        merged["allocation_value"] = allocation_value(results, int(meta["gpus"]), price)
    comparison = compare_to_paper(results)
    if comparison:
        merged["paper_comparison"] = comparison
        (out / "comparison.md").write_text(render_comparison_markdown(comparison))
    (out / "results.json").write_text(json.dumps(merged, indent=2, sort_keys=True) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default="v2026")
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--capacity-scale", default=None)
    ap.add_argument("--time-scale", type=float, default=None)
    ap.add_argument("--load", action="append", default=None)
    ap.add_argument("--policy", action="append", default=None)
    ap.add_argument("--gpu-hour-price", type=float, default=None)
    ap.add_argument("--nice", type=int, default=10)
    ap.add_argument("--force", action="store_true", help="run again what is there already")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/gfs_fleet"))
    ap.add_argument("extra", nargs="*", help="more `stoker sim gfs` options, after --")
    args = ap.parse_args()
    loads = args.load or ["low", "medium", "high"]
    policies = args.policy or ["gfs", "yarn-cs", "lyra", "fgd", "chronus"]
    args.out.mkdir(parents=True, exist_ok=True)
    timings_path = args.out / "timings.json"
    timings = json.loads(timings_path.read_text()) if timings_path.exists() else {"runs": []}
    for load in loads:
        for policy in policies:
            out = args.out / load / policy
            if (out / "results.json").exists() and not args.force:
                continue
            row = run_one(args, load, policy, out)
            print(json.dumps(row), flush=True)
            timings["runs"] = [
                r for r in timings["runs"] if (r.get("load"), r["policy"]) != (load, policy)
            ] + [row]
            timings_path.write_text(json.dumps(timings, indent=2) + "\n")
            merge(args.out, args.gpu_hour_price)
    merge(args.out, args.gpu_hour_price)
    comparison = args.out / "comparison.md"
    if comparison.exists():
        print(comparison.read_text())


if __name__ == "__main__":
    main()
