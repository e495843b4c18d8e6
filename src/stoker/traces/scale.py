"""Make a sparse trace contend: fewer nodes for the same jobs, or the same jobs sooner;
or a busy one breathe: more nodes for the same jobs.

Both are pure functions of a :class:`~stoker.traces.base.Trace` (a new trace, the input
untouched), deterministic, and say in the new trace's ``notes`` what they did.

How many of each GPU model's nodes to keep is a :class:`CapacityScale`, written on the
command line as (``stoker sim gfs --capacity-scale``):

- ``0.3``: keep 30 % of every model's nodes (at least one of each); a share above 1 keeps
  every node and adds copies of the first ones (``1.3``: 30 % more nodes of each model,
  each copy named ``<node>+copyK``), the cluster a capacity plan would buy;
- ``G2=0.02,T4=0.05``: a fraction per named model (the others kept whole), or with a bare
  fraction for the models not named (``0.3,G2=0.02``); a named model's 0 leaves that
  model out, and the jobs that ask for it (the simulator counts them);
- ``fill:0.8``: size each model's GPU pool to its own demand: the smallest node that holds
  its largest worker, then its smallest other nodes until the GPUs hold its mean requested
  GPUs over the measured window at 80 % (and its largest job), optionally with named
  exceptions (``fill:0.8,A10=1``). One fraction for every model
  leaves the models a trace barely uses mostly idle (openb: five of seven), so the cluster
  never contends as a whole; this makes every GPU pool contend alike.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from stoker.traces.base import Trace, TraceJob, TraceNode


def _fraction(token: str, text: str, zero: bool = False) -> float:
    """A share above 0 (above 1 adds node copies); with ``zero``, 0 too (a named model's: 0
    leaves it out)."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"capacity_scale: {token!r}: {text!r} is not a number") from None
    if not (value >= 0 if zero else value > 0) or not math.isfinite(value):
        bound = ">= 0" if zero else "> 0"
        raise ValueError(
            f"capacity_scale: {token!r}: a share must be finite and {bound}, got {value:g}"
        )
    return value


COPY_SEP = "+copy"


def _take(group: list[TraceNode], count: int) -> list[TraceNode]:
    """The first ``count`` nodes of a model's list; past its end, copies of it from the
    start again (copy K of node n is named ``n+copyK``)."""
    taken = list(group[:count])
    for i in range(len(group), count):
        k, node = divmod(i, len(group))
        taken.append(replace(group[node], name=f"{group[node].name}{COPY_SEP}{k}"))
    return taken


@dataclass(frozen=True, slots=True)
class CapacityScale:
    """Which share of each GPU model's nodes a run keeps (every job is kept); above 1, the
    whole list and copies of its first nodes.

    ``default`` applies to the models not in ``per_model``; with ``fill`` set, those
    models are sized to their demand instead (see :meth:`keep`). A named model's share
    may be 0: the model is left out, and the jobs asking for it with it.
    """

    default: float = 1.0
    per_model: dict[str, float] = field(default_factory=dict)
    fill: float | None = None

    def __post_init__(self) -> None:
        _fraction("(default)", str(self.default))
        for model, value in self.per_model.items():
            _fraction(model, str(value), zero=True)
        if self.fill is not None and not self.fill > 0:
            raise ValueError(f"capacity_scale: fill: must be > 0, got {self.fill:g}")

    @classmethod
    def parse(cls, text: str | float) -> CapacityScale:
        """Read the command-line form (see the module's doc); a ``ValueError`` naming the
        bad part otherwise."""
        if isinstance(text, int | float):
            return cls(default=_fraction(str(text), str(text)))
        default: float | None = None
        fill: float | None = None
        per_model: dict[str, float] = {}
        tokens = [t.strip() for t in text.split(",")]
        if not any(tokens):
            raise ValueError("capacity_scale: empty (expected e.g. 0.3, G2=0.02 or fill:0.8)")
        for token in tokens:
            if token.startswith("fill:"):
                if fill is not None or default is not None:
                    raise ValueError(
                        f"capacity_scale: {token!r}: one of a bare fraction or fill:TARGET, once"
                    )
                try:
                    fill = float(token.removeprefix("fill:"))
                except ValueError:
                    raise ValueError(
                        f"capacity_scale: {token!r}: fill:TARGET needs a number"
                    ) from None
                if not fill > 0:
                    raise ValueError(f"capacity_scale: {token!r}: the target must be > 0")
            elif "=" in token:
                model, _, value = (s.strip() for s in token.partition("="))
                if not model:
                    raise ValueError(f"capacity_scale: {token!r}: no GPU model before '='")
                if model in per_model:
                    raise ValueError(f"capacity_scale: {token!r}: {model} given twice")
                per_model[model] = _fraction(token, value, zero=True)
            elif token:
                if fill is not None or default is not None:
                    raise ValueError(
                        f"capacity_scale: {token!r}: one of a bare fraction or fill:TARGET, once"
                    )
                default = _fraction(token, token)
            else:
                raise ValueError(f"capacity_scale: {text!r}: an empty part between commas")
        return cls(1.0 if default is None else default, per_model, fill)

    @property
    def whole(self) -> bool:
        """Every node kept."""
        return (
            self.fill is None
            and self.default == 1.0
            and all(v == 1.0 for v in self.per_model.values())
        )

    def __str__(self) -> str:
        head = [f"fill:{self.fill:g}"] if self.fill is not None else [f"{self.default:g}"]
        return ",".join(head + [f"{m}={v:g}" for m, v in sorted(self.per_model.items())])

    def keep(
        self, nodes: list[TraceNode], jobs: Iterable[TraceJob], start: float, end: float
    ) -> list[TraceNode]:
        """The nodes to keep, in the list's order, then any copies.

        A share f keeps the first ``ceil(f n)`` of a model's n nodes, at least one unless
        f is 0; above 1, every node and copies of the first ones up to ``ceil(f n)``.
        ``fill`` keeps, per model, the smallest node that holds the model's largest
        per-worker request, then the smallest others (list order among equals) until the
        GPUs kept reach ``mean demand / fill`` and the model's largest job: the node
        granularity wastes least, since a model asked for a fraction of a GPU would keep a
        whole 8-GPU node first in list order. All of a model's nodes if they cannot.
        Mean demand as :func:`mean_demand` over ``[start, end)``. A model named that the
        node list lacks is an error.
        """
        groups = by_model(nodes)
        unknown = sorted(set(self.per_model) - set(groups))
        if unknown:
            raise ValueError(
                f"capacity_scale: no GPU model {unknown[0]!r} in this trace "
                f"(its models: {', '.join(sorted(groups))})"
            )
        demand = mean_demand(jobs, start, end) if self.fill is not None else {}
        largest = _largest_jobs(jobs) if self.fill is not None else {}
        kept: set[str] = set()
        copies: list[TraceNode] = []
        for model, group in groups.items():
            if model in self.per_model or self.fill is None:
                share = self.per_model.get(model, self.default)
                least = 0 if share == 0 else 1
                count = max(least, math.ceil(share * len(group)))
                chosen = _take(group, count)
                kept.update(n.name for n in chosen[: len(group)])
                copies.extend(chosen[len(group) :])
                continue
            total, per_worker = largest.get(model, (0.0, 0))
            target = max(demand.get(model, 0.0) / self.fill, total)
            smallest = sorted(group, key=lambda n: n.gpus)  # stable: list order among equals
            anchor = next((n for n in smallest if n.gpus >= per_worker), None)
            if anchor is None:  # no node holds its largest worker: that job is left out
                kept.update(n.name for n in group)
                continue
            kept.add(anchor.name)
            gpus = anchor.gpus
            for n in smallest:
                if gpus >= target:
                    break
                if n is not anchor:
                    kept.add(n.name)
                    gpus += n.gpus
        return [n for n in nodes if n.name in kept] + copies


def by_model(nodes: list[TraceNode]) -> dict[str, list[TraceNode]]:
    """Each GPU model's nodes, in the list's order."""
    groups: dict[str, list[TraceNode]] = {}
    for n in nodes:
        groups.setdefault(n.gpu_model, []).append(n)
    return groups


def worker_gpus(job: TraceJob) -> float:
    """GPUs one worker holds: its share below 1, whole cards (rounded up) from 1."""
    return job.gpu_request if job.gpu_request < 1 else math.ceil(job.gpu_request - 1e-9)


def _largest_jobs(jobs: Iterable[TraceJob]) -> dict[str, tuple[float, int]]:
    """Per model: the most GPUs one job asks, and the most whole GPUs one worker asks."""
    out: dict[str, tuple[float, int]] = {}
    for j in jobs:
        total, per_worker = out.get(j.gpu_model, (0.0, 0))
        w = worker_gpus(j)
        out[j.gpu_model] = (max(total, w * j.worker_num), max(per_worker, int(w) if w >= 1 else 0))
    return out


def mean_demand(jobs: Iterable[TraceJob], start: float, end: float) -> dict[str, float]:
    """Per GPU model: GPUs the jobs ask over ``[start, end)``, averaged over it, as the trace
    runs them (each from its submit time for its duration, nobody waiting): the load the
    GPU pool is offered."""
    if not end > start:
        raise ValueError(f"capacity_scale: empty window [{start:g}, {end:g})")
    out: dict[str, float] = {}
    for j in jobs:
        overlap = min(end, j.submit_time + j.duration) - max(start, j.submit_time)
        if overlap > 0:
            gpu_s = worker_gpus(j) * j.worker_num * overlap
            out[j.gpu_model] = out.get(j.gpu_model, 0.0) + gpu_s
    return {m: v / (end - start) for m, v in out.items()}


def keep_nodes(nodes: list[TraceNode], fraction: float) -> list[TraceNode]:
    """The first ``ceil(fraction * n)`` nodes of each GPU model (at least one per model),
    in the list's order."""
    scale = CapacityScale.parse(fraction)
    if scale.whole:
        return list(nodes)
    return scale.keep(nodes, (), 0.0, 1.0)


def capacity_scale(
    trace: Trace,
    scale: float | str | CapacityScale,
    start: float = 0.0,
    end: float = math.inf,
) -> Trace:
    """Keep a share of each GPU model's nodes (a :class:`CapacityScale`, or its text or
    fraction) and every job. ``[start, end)`` is the window ``fill`` measures demand over
    (the trace's span by default).

    ``notes["capacity_scale"]`` says what was kept in words; ``notes["capacity_per_model"]``
    (JSON) per model: nodes and GPUs kept and of how many, and the mean demand in GPUs.
    """
    spec = scale if isinstance(scale, CapacityScale) else CapacityScale.parse(scale)
    if math.isinf(end):
        end = max((j.submit_time + j.duration for j in trace.jobs), default=start + 1.0)
        end = max(end, start + 1.0)
    nodes = list(trace.nodes) if spec.whole else spec.keep(trace.nodes, trace.jobs, start, end)
    if not nodes:
        raise ValueError(f"capacity_scale: {spec} leaves no node")
    out = Trace(trace.name, nodes, list(trace.jobs), trace.source, dict(trace.notes))
    demand = mean_demand(trace.jobs, start, end)
    kept, every = by_model(nodes), by_model(trace.nodes)
    per_model = {
        m: {
            "nodes": len(kept.get(m, [])),
            "of_nodes": len(every[m]),
            "gpus": sum(n.gpus for n in kept.get(m, [])),
            "of_gpus": sum(n.gpus for n in every[m]),
            "mean_demand_gpus": round(demand.get(m, 0.0), 3),
        }
        for m in sorted(every)
    }
    out.notes["capacity_per_model"] = json.dumps(per_model)
    out.notes["capacity_scale"] = (
        f"{spec}: {len(nodes)} of {len(trace.nodes)} nodes, "
        f"{sum(n.gpus for n in nodes)} of {sum(n.gpus for n in trace.nodes)} GPUs, every job"
        + (
            ""
            if set(kept) == set(every)
            else f" but those of {', '.join(sorted(set(every) - set(kept)))}"
        )
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
