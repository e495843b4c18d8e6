"""What the full-fleet month probes share (``probe_evictions.py``, ``probe_lyra_spot.py``,
``probe_hp_queue.py``): their trace options, the v2026 month at each load as ``stoker sim
gfs`` cuts it, one run with the probe's wrappers in place, a job's shape class, and the
results file each run is added to as it ends (a rerun keeps the runs already there)."""

from __future__ import annotations

import argparse
import json
import os
import resource
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import stoker.sim.gfs as simgfs
from stoker.core.model import Job
from stoker.core.registry import Preset
from stoker.forecast.base import Cadence
from stoker.sim.gfs import LOADS, Setup, Window, policy_forecaster, prepare_trace, scale_spot_load
from stoker.traces import Trace
from stoker.traces.gfs_v2026 import NODE_LIST_NOTE
from stoker.traces.scale import CapacityScale


def month_options(ap: argparse.ArgumentParser) -> None:
    """The options of the month's cut (defaults: the full-fleet month; ``--scale 0.1 --days
    7 --warm-days 14 --burn-in-days 1 --query-every-min 30`` is the 1/10-scale setup)."""
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--load", action="append", choices=list(LOADS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--warm-days", type=float, default=28.0)
    ap.add_argument("--burn-in-days", type=float, default=2.0)
    ap.add_argument("--query-every-min", type=int, default=5)
    ap.add_argument("--capacity-scale", default="1.0", type=_capacity, help="as stoker sim gfs's")


def _capacity(text: str) -> str:
    try:
        CapacityScale.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text  # kept as typed: the results file's setup shows it


def shape(job: Job) -> str:
    """The job's shape class: ``frac`` (a share of one card), ``1gpu``, ``1gpu-gang``
    (several 1-card workers), ``1xN`` (one worker of N cards), ``gang`` (several workers
    of several cards)."""
    if job.fractional:
        return "frac"
    if job.per_worker <= 1.0:
        return "1gpu" if job.spec.workers == 1 else "1gpu-gang"
    return f"1x{job.per_worker:g}" if job.spec.workers == 1 else "gang"


def simulate_probed(
    trace: Trace,
    spec: Preset,
    window: Window,
    cadence: Cadence,
    forecaster: str,
    patches: list[tuple[object, str, object]],
) -> tuple[simgfs.TraceResult, Any, list[Any], float]:
    """``spec`` over ``trace`` as ``stoker sim gfs`` runs it, each ``(owner, name, value)``
    of ``patches`` set for the run and put back after (a probe's wrappers of private
    names): the result, the core and the jobs its metrics were read from, CPU seconds."""
    seen: dict[str, Any] = {}
    metrics_of = simgfs._metrics

    def capture(core: Any, jobs: list[Any], win: Window, *rest: Any) -> tuple[Any, Any]:
        seen["core"], seen["jobs"] = core, jobs
        return metrics_of(core, jobs, win, *rest)

    patches = [*patches, (simgfs, "_metrics", capture)]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, value in patches:
        setattr(owner, name, value)
    before = resource.getrusage(resource.RUSAGE_SELF)
    try:
        result = simgfs.simulate(
            trace,
            spec,
            window,
            forecaster=policy_forecaster(spec.forecaster, cadence, forecaster, trace.notes),
            cadence=cadence,
        )
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return result, seen["core"], seen["jobs"], round(cpu, 1)


def run_month(
    args: argparse.Namespace,
    names: list[str],
    run: Callable[[str, Trace, Window, Cadence], dict[str, Any]],
    show: Callable[[str, str, dict[str, Any]], None],
) -> None:
    """``run(name, trace, window, cadence)`` for each load (medium unless named) and name;
    each result, with the load average at its end, written to ``args.out`` and shown."""
    setup = Setup(
        args.days,
        args.warm_days,
        args.burn_in_days,
        args.scale,
        args.seed,
        capacity_scale=CapacityScale.parse(args.capacity_scale),
    )
    cadence = Cadence(refit_every_min=1440, query_every_min=args.query_every_min)
    base, window = prepare_trace("v2026", None, setup)
    # which node list the trace had (the real one, or the fleet rebuilt from its counts)
    setup_doc = vars(args) | {"out": str(args.out), "node_list": base.notes.get(NODE_LIST_NOTE)}
    doc: dict[str, Any] = {"setup": setup_doc, "results": {}}
    if args.out.exists():
        doc["results"] = json.loads(args.out.read_text())["results"]
    for load, trace in _loads(args, base):
        for name in names:
            r = run(name, trace, window, cadence)
            r["load_avg"] = round(os.getloadavg()[0], 2)
            doc["results"].setdefault(load, {})[name] = r
            show(load, name, r)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(doc, indent=1, sort_keys=True))


def _loads(args: argparse.Namespace, base: Trace) -> Iterator[tuple[str, Trace]]:
    for load in args.load or ["medium"]:
        jobs = scale_spot_load(base.jobs, LOADS[load], args.seed)
        yield load, Trace(base.name, base.nodes, jobs, base.source, dict(base.notes))
