"""Where a trivial warm call's time goes, end to end: client, HTTP, loop and store, agent.

One broker (``stoker up`` in a child process, plain profile), one warm pod, ``--n`` calls of
``Client.run(profile, ["python", "-c", "pass"], reuse_tag=...).result()`` one after the
other. Per call, from the client's clock and the broker's job record:

- ``call_ms``: the client's wall time for the whole call;
- ``start_ms``: submitted -> the job's process running (the broker's loop, the store's
  commit, the bind to the pod, the agent handing the job to its forked spare);
- ``run_ms``: running -> finished (the job itself, its exit reported and recorded);
- ``rest_ms``: what is left of the call (client, HTTP both ways, the reply's encoding).

Medians over the calls, and the CPU per call of the client and of the broker process
(figures a shared host's load changes little; cProfile's top functions of the client with
``--client-profile``). With ``--py-spy`` the broker process is sampled while the calls run
(``py-spy record``, installed beside the interpreter) and its top functions printed.

    .venv/bin/python benchmarks/profile_call.py [--n 300] [--py-spy] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from stoker.broker.bench import TRIVIAL, BrokerProcess, cpu_seconds
from stoker.client import Client


def _top_frames(raw: Path, n: int = 25) -> list[tuple[str, float]]:
    """The functions py-spy saw most often (share of samples, leaf frames), from its raw
    (collapsed stack) output."""
    counts: dict[str, int] = {}
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, k = line.rpartition(" ")
        if not k.isdigit():
            continue
        total += int(k)
        seen = set()
        for frame in stack.split(";"):
            name = frame.split(" (")[0] + " (" + frame.split(" (")[-1] if " (" in frame else frame
            if name not in seen:  # inclusive: each function once per sample
                seen.add(name)
                counts[name] = counts.get(name, 0) + int(k)
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:n]
    return [(name, k / max(total, 1)) for name, k in ranked]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--py-spy", action="store_true", help="sample the broker with py-spy")
    ap.add_argument("--client-profile", action="store_true", help="cProfile the client")
    ap.add_argument("--out", type=Path, help="write the figures as JSON")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="stoker-profile-"))
    bp = BrokerProcess(base / "broker", [{"name": "plain"}], gpu_slots=1)
    spy = None
    try:
        with Client(bp.url, bp.admin_token) as admin:
            token = admin.create_tenant("p")
        with Client(bp.url, token) as c:
            for _ in range(20):  # the pod, then the interpreters' caches
                c.run("plain", TRIVIAL, reuse_tag="warm").result(120)
            pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
            raw = base / "broker.spy"
            if args.py_spy:
                spy = subprocess.Popen(
                    [pyspy, "record", "-p", str(bp.proc.pid), "-f", "raw", "-o", str(raw)],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                time.sleep(1.0)
            prof = cProfile.Profile() if args.client_profile else None
            rows: list[tuple[float, Any]] = []
            cpu0, broker0 = time.process_time(), cpu_seconds(bp.proc.pid)
            for _ in range(args.n):
                t0 = time.perf_counter()
                if prof is not None:
                    prof.enable()
                r = c.run("plain", TRIVIAL, reuse_tag="warm").result(60)
                if prof is not None:
                    prof.disable()
                rows.append(((time.perf_counter() - t0) * 1000.0, r))
            client_cpu_ms = (time.process_time() - cpu0) * 1000.0 / args.n
            broker_cpu_ms = (cpu_seconds(bp.proc.pid) - broker0) * 1000.0 / args.n
            jobs = {r.id: c.get(r.id) for _, r in rows}
        if spy is not None:
            spy.send_signal(2)  # SIGINT: py-spy writes its output and exits
            spy.wait(60)
    finally:
        if spy is not None and spy.poll() is None:
            spy.kill()
            spy.wait()
        bp.stop()
    calls = [ms for ms, _ in rows]
    start = [jobs[r.id]["start_latency_ms"] for _, r in rows]
    run = [(jobs[r.id]["finished"] - jobs[r.id]["started"]) * 1000.0 for _, r in rows]
    rest = [c - s - u for c, s, u in zip(calls, start, run, strict=True)]
    out: dict[str, Any] = {
        "n": args.n,
        "loadavg_1m": os.getloadavg()[0],
        "call_ms_p50": statistics.median(calls),
        "start_ms_p50": statistics.median(start),
        "run_ms_p50": statistics.median(run),
        "rest_ms_p50": statistics.median(rest),
        "client_cpu_ms_per_call": client_cpu_ms,
        "broker_cpu_ms_per_call": broker_cpu_ms,
    }
    print(json.dumps(out))  # one line: benchmarks/pod_ab.py reads the last one
    if args.py_spy and raw.exists():
        out["broker_top"] = _top_frames(raw)
    shutil.rmtree(base, ignore_errors=True)  # the broker's data dir and py-spy's samples
    if args.py_spy and "broker_top" in out:
        print("broker, share of samples (inclusive):")
        for name, share in out["broker_top"]:
            print(f"  {share * 100:5.1f}%  {name}")
    if prof is not None:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    if args.out:
        args.out.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
