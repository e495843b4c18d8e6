"""Make a sparse trace contend: fewer nodes for the same jobs, or the same jobs sooner.

Both are pure functions of a :class:`~stoker.traces.base.Trace` (a new trace, the input
untouched), deterministic, and say in the new trace's ``notes`` what they did.
"""

from __future__ import annotations

import math
from dataclasses import replace

from stoker.traces.base import Trace, TraceNode


def keep_nodes(nodes: list[TraceNode], fraction: float) -> list[TraceNode]:
    """The first ``ceil(fraction * n)`` nodes of each GPU model (at least one per model),
    in the list's order."""
    if not 0 < fraction <= 1:
        raise ValueError(f"capacity_scale: must be in (0, 1], got {fraction}")
    if fraction == 1.0:
        return list(nodes)
    per_model: dict[str, list[TraceNode]] = {}
    for n in nodes:
        per_model.setdefault(n.gpu_model, []).append(n)
    keep = {
        n.name
        for group in per_model.values()
        for n in group[: max(1, math.ceil(fraction * len(group)))]
    }
    return [n for n in nodes if n.name in keep]


def capacity_scale(trace: Trace, fraction: float) -> Trace:
    """Keep ``fraction`` of each GPU model's nodes (see :func:`keep_nodes`) and every job."""
    nodes = keep_nodes(trace.nodes, fraction)
    out = Trace(trace.name, nodes, list(trace.jobs), trace.source, dict(trace.notes))
    out.notes["capacity_scale"] = (
        f"{fraction:g}: {len(nodes)} of {len(trace.nodes)} nodes, "
        f"{sum(n.gpus for n in nodes)} of {sum(n.gpus for n in trace.nodes)} GPUs, every job"
    )
    return out


def time_scale(trace: Trace, factor: float) -> Trace:
    """Every submit time divided by ``factor`` (inter-arrival times compressed ``factor``
    times; durations kept), so the same jobs arrive ``factor`` times as fast.

    The trace's calendar no longer matches its clock (a compressed day is shorter than a
    day); ``notes["time_scale"]`` says so.
    """
    if not factor > 0:
        raise ValueError(f"time_scale: must be > 0, got {factor}")
    if factor == 1.0:
        return Trace(
            trace.name, list(trace.nodes), list(trace.jobs), trace.source, dict(trace.notes)
        )
    jobs = [replace(j, submit_time=j.submit_time / factor) for j in trace.jobs]
    out = Trace(trace.name, list(trace.nodes), jobs, trace.source, dict(trace.notes))
    out.notes["time_scale"] = (
        f"{factor:g}: inter-arrival times divided by {factor:g}, durations kept (calendar "
        "features follow the compressed clock)"
    )
    return out
