"""Where HP queueing comes from: a policy's mean HP queueing split by GPU pool and job shape.

    .venv/bin/python benchmarks/probe_hp_queue.py --out /var/tmp/hp_queue.json \\
        --capacity-scale 1.6 --policy gfs --policy gfs-reserve-patient-lend

Each run is the full-fleet month as ``stoker sim gfs --trace v2026 --days 30 --load L
--capacity-scale C --policy P`` runs it (same trace cut, load copies, forecaster, window
gate; the options are ``probe_month``'s). The HP jobs submitted in the window are grouped
by GPU pool, by shape (``probe_month.shape``: ``frac``, ``1gpu``, ``1gpu-gang``, ``1xN``,
``gang``), by both, and by whether they queued over a day; each group's figure is its part
of the mean (its queueing summed over every measured HP job), so a level's parts add up to
the mean. Prints and writes JSON.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from typing import Any

from probe_month import month_options, run_month, shape, simulate_probed
from stoker.core.registry import preset
from stoker.forecast.base import Cadence
from stoker.sim.gfs import Window
from stoker.traces import Trace

DAY = 86_400.0


def run_policy(policy: str, trace: Trace, window: Window, cadence: Cadence) -> dict[str, Any]:
    """One month: the mean HP queueing and its parts."""
    _, core, measured, cpu = simulate_probed(trace, preset(policy), window, cadence, "ridge", [])
    hp = [
        core.jobs[j.name]
        for j in measured
        if window.start <= j.submit_time < window.end and j.job_class == "hp"
    ]
    parts: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for job in hp:
        gpu_pool, kind = job.spec.gpu_model, shape(job)
        wait = "queued over a day" if job.queue_s > DAY else "queued a day or less"
        for key in (f"pool {gpu_pool}", f"shape {kind}", f"pool/shape {gpu_pool}/{kind}", wait):
            parts[key][0] += 1
            parts[key][1] += job.queue_s
    n = max(len(hp), 1)
    ranked = sorted(parts.items(), key=lambda kv: -kv[1][1])
    return {
        "cpu_s": cpu,
        "hp_jobs": len(hp),
        "hp.mean_queue_s": round(sum(j.queue_s for j in hp) / n, 1),
        "parts": {k: {"jobs": int(c), "part_of_mean_s": round(s / n, 1)} for k, (c, s) in ranked},
    }


def _show(load: str, policy: str, r: dict[str, Any]) -> None:
    print(f"{load}/{policy}: HP mean queue {r['hp.mean_queue_s']:,.0f} s ({r['cpu_s']} CPU-s)")
    for key, part in list(r["parts"].items())[:6]:
        print(f"  {key}: {part['part_of_mean_s']:,.0f} s ({part['jobs']} jobs)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", action="append", required=True)
    month_options(ap)
    args = ap.parse_args()
    run_month(args, args.policy, run_policy, _show)


if __name__ == "__main__":
    main()
