"""Throughput windows alone: ``stoker bench local``'s throughput phase, without its other
phases, so that two trees can be compared window by window (interleaved) on a noisy host.

Each window is a fresh broker (``stoker up`` in a child process, one profile, 4 GPU slots),
the bench's own warm-up and settling, then ``--seconds`` of trivial one-round-trip calls from
``--callers`` threads (``stoker.broker.bench._throughput``). Prints one JSON line per window
(jobs/s, errors, call time, the CPU per job of the broker, the callers, the pods' agents and
the rest of the pods) and the host's load. To compare with another tree, run the same file
with that tree's ``src`` first on ``PYTHONPATH`` (outside /tmp: a pod's /tmp must hold
nothing, or its agent clears it after every job).

    .venv/bin/python benchmarks/bench_throughput.py [--profile plain|torch-cpu] [--seconds 10]
        [--callers 4] [--windows 1] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from stoker.broker.bench import THROUGHPUT_PODS, BrokerProcess, _throughput
from stoker.client import Client

PRELOADS = {"plain": [], "torch-cpu": ["torch"]}


def window(profile: str, seconds: float, callers: int) -> dict[str, Any]:
    """One throughput window on a fresh broker; its figures and the load around it."""
    base = Path(tempfile.mkdtemp(prefix="stoker-throughput-"))
    load0 = os.getloadavg()[0]
    bp = BrokerProcess(base / "broker", [{"name": profile, "preload": PRELOADS[profile]}], 4)
    try:
        with Client(bp.url, bp.admin_token) as admin:
            tokens = [admin.create_tenant(f"t{i}") for i in range(THROUGHPUT_PODS)]
        out = _throughput(bp, tokens, profile, callers, seconds)
    finally:
        bp.stop()
        shutil.rmtree(base, ignore_errors=True)
    return {"profile": profile, **out, "loadavg_1m": [load0, os.getloadavg()[0]]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", choices=sorted(PRELOADS), default="plain")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--callers", type=int, default=4)
    ap.add_argument("--windows", type=int, default=1)
    ap.add_argument("--out", type=Path, help="write the windows' figures as JSON")
    args = ap.parse_args()
    rows = []
    for _ in range(args.windows):
        rows.append(window(args.profile, args.seconds, args.callers))
        print(json.dumps(rows[-1]), flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
