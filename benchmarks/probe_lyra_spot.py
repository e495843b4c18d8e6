"""Where Lyra's spot queueing differs from GFS's: GFS and Lyra with one part swapped at a time.

    .venv/bin/python benchmarks/probe_lyra_spot.py --out /var/tmp/probe.json \\
        --scale 0.1 --days 7 --warm-days 14 --burn-in-days 1 --query-every-min 30 \\
        --load medium --seed 0 --variant gfs --variant lyra --variant gfs+lyra-victims

``gfs`` and ``lyra`` (registry presets, spot gated by the same forecast quota) differ in
their victim chooser (GFS's two-pointer walk on the cheapest node, Lyra's costliest cards)
and their queue order (GFS: the largest per-worker request first, spot of one request by
fewer workers first, a failure skips its request's bucket; Lyra: the largest request first
by list order, the first failure ends the class's pass, a re-queued job at the back). A
variant is a preset with some of the other's parts: the victim chooser, and the queue order
of each class on its own (the registry's ``queue`` sets both classes' order; the probe
builds each class's queue with its own order). Each variant runs in this process as
``stoker sim gfs`` runs it (same trace cut, load copies, forecaster, window gate), and
prints and writes its metrics and a breakdown from the jobs themselves: spot queueing by
total GPUs, by per-worker request and by GPU pool, HP queueing by GPU pool, and the spot and
HP queueing of the jobs submitted on each day of the window, and the window's hourly means
of the spot quota, HP and spot GPUs held and HP's forecast quantile (every GPU pool summed);
with the CPU seconds it took.

The per-class order and the breakdown are a probe's, not the core's: while a variant runs,
the scheduler module's ``ClassQueue`` is wrapped to build each class's queue with that class's
order, and the simulator's ``_metrics`` to read the finished jobs; both are restored after.
The findings (issue 9: where Lyra's spot queueing comes from) made no preset.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import replace
from typing import Any

import stoker.core.gfs.queues as queues
import stoker.core.gfs.scheduler as sched
import stoker.sim.gfs as simgfs
from probe_month import month_options, run_month, simulate_probed
from stoker.core.gfs.preemption import GFSVictims, LyraVictims
from stoker.core.model import JobClass
from stoker.core.registry import preset
from stoker.forecast.base import Cadence
from stoker.traces import Trace

_O = queues.QUEUE_ORDERS
# queue orders the probe mixes beside the registry's: Lyra's with one of its traits undone
_ORDERS: dict[str, queues.QueueOrder] = {
    **_O,
    # Lyra's stop rule, re-queued jobs at their submit time (GFS's)
    "size-stop-submit": replace(_O["size-stop"], name="size-stop-submit", at_back=False),
    # Lyra's stop rule with GFS's fewer-workers tie-break and submit time
    "size-stop-workers": replace(
        _O["size-stop"], name="size-stop-workers", at_back=False, fewer_workers=True
    ),
}

# name: (preset, victims or None: the preset's, HP queue order, spot queue order)
VARIANTS: dict[str, tuple[str, str | None, str, str]] = {
    "gfs": ("gfs", None, "size", "size"),
    "lyra": ("lyra", None, "size-stop", "size-stop"),
    "gfs+lyra-victims": ("gfs", "lyra", "size", "size"),
    "gfs+lyra-queue": ("gfs", None, "size-stop", "size-stop"),
    "gfs+lyra-hp-queue": ("gfs", None, "size-stop", "size"),
    "gfs+lyra-spot-queue": ("gfs", None, "size", "size-stop"),
    "gfs+lyra-spot-queue-submit": ("gfs", None, "size", "size-stop-submit"),
    "gfs+lyra-spot-queue-workers": ("gfs", None, "size", "size-stop-workers"),
    "lyra+gfs-victims": ("lyra", "gfs", "size-stop", "size-stop"),
    "lyra+gfs-hp-queue": ("lyra", None, "size", "size-stop"),
    "lyra+gfs-spot-queue": ("lyra", None, "size-stop", "size"),
}
_VICTIMS = {"gfs": GFSVictims, "lyra": LyraVictims}


def _breakdown(core: Any, jobs: list[Any], window: simgfs.Window) -> dict[str, Any]:
    """Spot and HP queueing of the measured jobs, split by size, GPU pool and submit day."""
    measured = [j for j in jobs if window.start <= j.submit_time < window.end]
    groups: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for tj in measured:
        job = core.jobs[tj.name]
        cls = "spot" if job.job_class is JobClass.SPOT else "hp"
        gpu_pool = core.hpspot.gpu_pool_of(job)
        day = int((tj.submit_time - window.start) // 86400)
        groups[f"{cls}.by_pool"][gpu_pool].append(job.queue_s)
        groups[f"{cls}.by_day"][str(day)].append(job.queue_s)
        groups[f"{cls}.by_gpus"][f"{job.gpus:g}"].append(job.queue_s)
        if cls == "spot":
            groups["spot.by_per_worker"][f"{job.per_worker:g}"].append(job.queue_s)
            groups["spot.by_workers"][str(job.spec.workers)].append(job.queue_s)
            groups["spot.evictions_by_pool"][gpu_pool].append(float(job.evictions))
    return {
        group: {k: {"jobs": len(v), "mean": sum(v) / len(v), "sum": sum(v)} for k, v in g.items()}
        for group, g in groups.items()
    }


def run_variant(
    name: str, trace: Trace, window: simgfs.Window, cadence: Cadence, forecaster: str
) -> dict[str, Any]:
    """One variant over ``trace``: its metrics, breakdown and CPU seconds."""
    base, victims, hp_order, spot_order = VARIANTS[name]
    spec = preset(base)
    if victims is not None:
        spec.policies.hpspot.victims = _VICTIMS[victims]()
    orders = {JobClass.HP: _ORDERS[hp_order], JobClass.SPOT: _ORDERS[spot_order]}
    queue = queues.ClassQueue

    def per_class(order: queues.QueueOrder, cls: JobClass) -> queues.ClassQueue:
        return queue(orders[cls], cls)

    result, core, jobs, cpu = simulate_probed(
        trace, spec, window, cadence, forecaster, [(sched, "ClassQueue", per_class)]
    )
    tl = result.timeline
    inside = [i for i, t in enumerate(tl["t"]) if window.start <= t < window.end]
    means = {k: sum(tl[k][i] for i in inside) / len(inside) for k in tl if k != "t" and inside}
    return {
        "metrics": result.metrics,
        "breakdown": _breakdown(core, jobs, window),
        "window_means": means,
        "cpu_s": cpu,
    }


def _show(load: str, name: str, r: dict[str, Any]) -> None:
    m = r["metrics"]
    print(
        f"{load}/{name}: spot ev {m['spot.eviction_rate']:.4f} "
        f"q {m['spot.mean_queue_s']:,.0f} hp q {m['hp.mean_queue_s']:,.0f} "
        f"p99 {m['hp.p99_jct_s']:,.0f} alloc {m['gpu_allocation_rate']:.3f} "
        f"({r['cpu_s']} CPU-s)",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variant", action="append", choices=list(VARIANTS), required=True)
    ap.add_argument("--forecaster", default="ridge")
    month_options(ap)
    args = ap.parse_args()

    def run(name: str, trace: Trace, window: simgfs.Window, cadence: Cadence) -> dict[str, Any]:
        return run_variant(name, trace, window, cadence, args.forecaster)

    run_month(args, args.variant, run, _show)


if __name__ == "__main__":
    main()
