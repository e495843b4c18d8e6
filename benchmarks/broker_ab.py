"""The broker's and the SDK's CPU per trivial warm job, this tree against another, interleaved.

On a shared 2-core host two runs a few minutes apart see different loads; this runs the two
trees window by window instead, alternating which goes first each round (A B, B A, ...), so
both sides meet the same drift. Each round runs, per side, one throughput window
(``benchmarks/bench_throughput.py``: a fresh broker, ``--callers`` callers for ``--seconds``)
and, with ``--calls``, one single-caller run of ``benchmarks/profile_call.py`` (SDK call
time, broker and client CPU per call). A side is a tree's ``src`` first on ``PYTHONPATH``
(the broker, its pods and the callers all import from it); the scripts are this tree's.
Keep the other tree outside /tmp (a pod's agent clears its /tmp after each job).

Prints each window as it ends and, at the end, per side the medians of the figures and
their ratio (this tree / the other); ``--out`` writes every window and the medians as JSON.

    .venv/bin/python benchmarks/broker_ab.py --base /work/i10b-base [--rounds 3]
        [--profile plain] [--seconds 10] [--callers 4] [--calls 200] [--out FILE.json]

(``--seconds 0 --calls N``: only the single-caller runs.)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
THIS = HERE.parent
THROUGHPUT = (
    "jobs_per_s",
    "call_ms_p50",
    "broker_cpu_ms_per_job",
    "client_cpu_ms_per_job",
    "agent_cpu_ms_per_job",
    "jobs_cpu_ms_per_job",
)
CALLS = ("call_ms_p50", "start_ms_p50", "broker_cpu_ms_per_call", "client_cpu_ms_per_call")


def _run(script: str, tree: Path, args: list[str]) -> dict[str, Any]:
    """One run of ``script`` (this tree's) with ``tree``'s code; its JSON figures."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        env = {**os.environ, "PYTHONPATH": str(tree / "src")}
        cmd = [sys.executable, str(HERE / script), *args, "--out", out.name]
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, cwd=tree)
        data = json.loads(Path(out.name).read_text())
    return data[0] if isinstance(data, list) else data


def _medians(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in rows) for k in keys}


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
    sides = {"base": args.base.resolve(), "this": THIS}
    windows: dict[str, list[dict[str, Any]]] = {"base": [], "this": []}
    calls: dict[str, list[dict[str, Any]]] = {"base": [], "this": []}
    for r in range(args.rounds):
        for name in ("base", "this") if r % 2 == 0 else ("this", "base"):
            tree = sides[name]
            if args.seconds > 0:
                window = ["--profile", args.profile, "--seconds", str(args.seconds)]
                w = _run("bench_throughput.py", tree, [*window, "--callers", str(args.callers)])
                windows[name].append(w)
                line = {k: round(w[k], 2) for k in THROUGHPUT}
                load = w["loadavg_1m"]
                print(f"round {r} {name} throughput", json.dumps(line), load, flush=True)
            if args.calls:
                c = _run("profile_call.py", tree, ["--n", str(args.calls)])
                calls[name].append(c)
                line = {k: round(c[k], 2) for k in CALLS}
                print(f"round {r} {name} calls", json.dumps(line), c["loadavg_1m"], flush=True)
    summary: dict[str, Any] = {}
    for part, rows, keys in (("throughput", windows, THROUGHPUT), ("calls", calls, CALLS)):
        if not rows["this"]:
            continue
        med = {name: _medians(rows[name], keys) for name in sides}
        ratio = {k: med["this"][k] / med["base"][k] if med["base"][k] else None for k in keys}
        summary[part] = {**med, "ratio": ratio}
        print(f"{part}, medians of {args.rounds} (base / this / ratio):")
        for k in keys:
            ratio_k = ratio[k]
            shown = "-" if ratio_k is None else f"{ratio_k:.3f}"
            print(f"  {k:24s} {med['base'][k]:8.2f} {med['this'][k]:8.2f}  {shown}")
    if args.out is not None:
        out = {
            "args": {k: str(v) for k, v in vars(args).items()},
            "windows": windows,
            "calls": calls,
            "medians": summary,
        }
        args.out.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
