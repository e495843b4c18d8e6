"""Benchmark: failover of the broker's leader, from SIGKILL to the new leader's first job.

Each run starts two ``stoker up`` replicas on a fresh database of a private PostgreSQL
server (stoker.broker.pgserver) and one pods directory, runs a stream of short jobs through
both (stoker.broker.failover), SIGKILLs the leader (or, with ``--loss sigstop``, freezes
it as a stalled host would be, and resumes it once a job is placed), and reads from the
store:

- ``takeover_s``: the signal to the follower's claim of the lead (the epoch bump, after it got
  the advisory lock and before it replays the store);
- ``first_placed_s``: the signal to the first job the new leader started (the first core event
  ``started`` logged after the kill: a job placed, bound and running in its pod).

Medians and p90 over the runs (goal: first_placed_s <= 5 s); writes JSON.

    .venv/bin/python benchmarks/bench_failover.py [--runs 10] [--loss sigstop] [--out F.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from stoker.broker.failover import Caller, Replicas
from stoker.broker.pgserver import PgServer


def _stats(samples: list[float]) -> dict[str, float]:
    arr = np.array(samples)
    return {
        "p50": round(float(np.percentile(arr, 50)), 3),
        "p90": round(float(np.percentile(arr, 90)), 3),
        "max": round(float(arr.max()), 3),
        "n": len(samples),
    }


def one_run(server: PgServer, root: Path, loss: str) -> dict[str, float]:
    reps = Replicas(root, server.create_database(), gpu_slots=2)
    callers: list[Caller] = []
    try:
        acked = threading.Semaphore(0)
        token = reps.tenant("bench")
        callers = [Caller(reps.urls, token, f"c{i}", acked, (0.0, 0.2)) for i in range(2)]
        for c in callers:
            c.start()
        for _ in range(4):
            if not acked.acquire(timeout=60):
                raise RuntimeError(f"the stream did not start: {[c.error for c in callers]}")
        os.kill(reps.a.proc.pid, signal.SIGKILL if loss == "sigkill" else signal.SIGSTOP)
        killed = time.time()  # from here on the old leader runs no more code
        deadline = time.monotonic() + 60
        first = None
        while first is None:
            if time.monotonic() > deadline:
                raise RuntimeError("the new leader placed no job in 60 s")
            time.sleep(0.05)
            first = reps.query(
                "SELECT min(at) FROM core_events WHERE kind = 'started' AND at > :t", t=killed
            )
        since = reps.query("SELECT since FROM leader")
        if loss == "sigstop":
            os.kill(reps.a.proc.pid, signal.SIGCONT)  # it resumes deposed, and follows
        for c in callers:
            c.stop()
        return {"takeover_s": since - killed, "first_placed_s": first - killed}
    finally:
        for c in callers:
            c.halt.set()
        reps.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument(
        "--loss",
        choices=("sigkill", "sigstop"),
        default="sigkill",
        help="kill the leader, or freeze it (a stalled host) and resume it afterwards",
    )
    parser.add_argument("--out", type=Path, default=Path("stoker-results/bench_failover.json"))
    args = parser.parse_args()
    runs = []
    with PgServer() as server:
        for i in range(args.runs):
            root = Path(tempfile.mkdtemp(prefix="stoker-failover-"))
            try:
                run = one_run(server, root, args.loss)
            finally:
                shutil.rmtree(root, ignore_errors=True)
            runs.append(run)
            print(
                f"run {i}: takeover {run['takeover_s']:.3f} s, first job placed"
                f" {run['first_placed_s']:.3f} s",
                flush=True,
            )
    results = {
        "loss": args.loss,
        "takeover_s": _stats([r["takeover_s"] for r in runs]),
        "first_placed_s": _stats([r["first_placed_s"] for r in runs]),
        "goal_first_placed_s": 5.0,
        "runs": runs,
        "host": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(json.dumps({k: results[k] for k in ("takeover_s", "first_placed_s")}, indent=2))


if __name__ == "__main__":
    main()
