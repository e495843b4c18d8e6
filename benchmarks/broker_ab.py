"""The broker's and the SDK's CPU per trivial warm job, this tree against another, interleaved.

On a shared 2-core host two runs a few minutes apart see different loads; this runs the two
trees window by window instead, alternating which goes first each round (A B, B A, ...), so
both sides meet the same drift. Each round runs, per side, one throughput window
(``benchmarks/bench_throughput.py``: a fresh broker, ``--callers`` callers for ``--seconds``)
and, with ``--calls``, one single-caller run of ``benchmarks/profile_call.py`` (SDK call
time, broker and client CPU per call). A side is a tree's ``src`` first on ``PYTHONPATH``
(the broker, its pods and the callers all import from it); the scripts are this tree's.
Keep the other tree outside /tmp (a pod's agent clears its /tmp after each job).

The runs and their summary are ``pod_ab.py``'s (``run_once``, ``summary``): this script only
pairs the two benchmarks per round. Prints each run as it ends and, at the end, per figure
both sides' medians, their ratio (this tree / the other) and the paired ratios' median;
``--out`` writes every run and the summaries as JSON.

    .venv/bin/python benchmarks/broker_ab.py --base /work/i10b-base [--rounds 3]
        [--profile plain] [--seconds 10] [--callers 4] [--calls 200] [--out FILE.json]

(``--seconds 0 --calls N``: only the single-caller runs.)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from pod_ab import HERE, run_once, summary

BENCH = HERE / "benchmarks"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, required=True, help="the other tree's root")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", default="plain")
    ap.add_argument("--seconds", type=float, default=10.0, help="0: no throughput windows")
    ap.add_argument("--callers", type=int, default=4)
    ap.add_argument("--calls", type=int, default=0, help="profile_call.py calls (0: none)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    benches: dict[str, list[str]] = {}
    if args.seconds > 0:
        benches["throughput"] = [
            str(BENCH / "bench_throughput.py"),
            *("--profile", args.profile, "--seconds", str(args.seconds)),
            *("--callers", str(args.callers)),
        ]
    if args.calls:
        benches["calls"] = [str(BENCH / "profile_call.py"), "--n", str(args.calls)]
    sides = {"base": args.base.resolve() / "src", "this": HERE / "src"}
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        part: {"base": [], "this": []} for part in benches
    }
    for r in range(args.rounds):
        for side in ("base", "this") if r % 2 == 0 else ("this", "base"):
            for part, bench in benches.items():
                row = run_once(sides[side], bench)
                runs[part][side].append(row)
                print(json.dumps({"round": r, "side": side, "part": part, **row}), flush=True)
    summaries = {part: summary(rows["base"], rows["this"]) for part, rows in runs.items()}
    for part, figures in summaries.items():
        print(f"{part}, {args.rounds} rounds (base / this / ratio of medians / paired):")
        for key, s in figures.items():
            print(
                f"  {key:26s} {s['base_median']:>10} {s['this_median']:>10}"
                f"  {s['ratio_of_medians']}  {s['paired_ratio_median']}"
            )
    if args.out is not None:
        out = {"args": {k: str(v) for k, v in vars(args).items()}, "runs": runs}
        args.out.write_text(json.dumps({**out, "summary": summaries}, indent=2))


if __name__ == "__main__":
    main()
