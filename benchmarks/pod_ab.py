"""Interleaved A/B of two source trees on one benchmark: the way to compare them on a shared,
noisy host, where back-to-back runs differ by more than the change being measured.

Each round runs the benchmark once with the base tree's ``src`` first on ``PYTHONPATH``
(``--base``, e.g. a worktree of ``main``) and once with this tree's, in alternating order
(base first in even rounds, this tree first in odd ones, so a drift in the host's load
falls on both), with the same interpreter. The benchmark prints one JSON object per line
(``bench_throughput.py``, ``bench_zygote.py``); every number in them is kept per round, and
the medians, the ratio (this tree / base) and the paired ratios' median are printed with the
load average around each run.

    .venv/bin/python benchmarks/pod_ab.py --base /var/tmp/base --rounds 5 [--out FILE.json]
        -- benchmarks/bench_throughput.py --profile plain --seconds 10

The base tree must be outside /tmp (a pod's /tmp must hold nothing; see bench_throughput).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]


def run_once(src: Path, bench: list[str]) -> dict[str, Any]:
    """One run of the benchmark against ``src``: the last JSON line it printed, with the
    load average before and after and the run's wall time."""
    path = [str(src), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    load0, t0 = os.getloadavg()[0], time.monotonic()
    proc = subprocess.run(
        [sys.executable, *bench], env=env, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"{bench} with {src} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    row = json.loads(lines[-1])
    row["ab_load_1m"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
    row["ab_wall_s"] = round(time.monotonic() - t0, 1)
    return row


def summary(base: list[dict[str, Any]], this: list[dict[str, Any]]) -> dict[str, Any]:
    """Per numeric figure: the medians of both sides, their ratio, and the median of the
    paired (same round) ratios."""
    out: dict[str, Any] = {}
    for key, value in base[0].items():
        if not isinstance(value, int | float) or isinstance(value, bool):
            continue
        a = [float(r[key]) for r in base]
        b = [float(r[key]) for r in this]
        paired = [y / x for x, y in zip(a, b, strict=True) if x]
        ma, mb = statistics.median(a), statistics.median(b)
        out[key] = {
            "base_median": round(ma, 3),
            "this_median": round(mb, 3),
            "ratio_of_medians": round(mb / ma, 3) if ma else None,
            "paired_ratio_median": round(statistics.median(paired), 3) if paired else None,
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, required=True, help="the base tree (its src is used)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, help="write every run and the summary as JSON")
    ap.add_argument("bench", nargs=argparse.REMAINDER, help="-- SCRIPT ARGS...")
    args = ap.parse_args()
    bench = args.bench[1:] if args.bench[:1] == ["--"] else args.bench
    if not bench:
        ap.error("give the benchmark after --")
    sides = {"base": args.base.resolve() / "src", "this": HERE / "src"}
    runs: dict[str, list[dict[str, Any]]] = {"base": [], "this": []}
    for i in range(args.rounds):
        for side in ("base", "this") if i % 2 == 0 else ("this", "base"):
            row = run_once(sides[side], bench)
            runs[side].append(row)
            print(json.dumps({"round": i, "side": side, **row}), flush=True)
    result = {
        "bench": bench,
        "base": str(sides["base"]),
        "this": str(sides["this"]),
        "rounds": args.rounds,
        "summary": summary(runs["base"], runs["this"]),
        "runs": runs,
    }
    for key, s in result["summary"].items():
        print(
            f"{key:28s} base {s['base_median']:>10} this {s['this_median']:>10} "
            f"ratio {s['ratio_of_medians']} (paired {s['paired_ratio_median']})"
        )
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
