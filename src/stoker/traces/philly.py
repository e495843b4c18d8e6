"""Microsoft Philly jobs, in the form the Pollux simulator ships them (``philly.csv``).

Upstream: github petuum/adaptdl, ``simulator/traces/philly.csv`` (82,247 jobs, 2017-09-04 to
2017-12-22, 15 virtual clusters). Columns: ``timestamp`` (submit time, UTC text
``YYYY-MM-DD HH:MM:SS``), ``duration`` (s), ``num_gpus``, ``gpu_time`` (GPU-seconds, not
used: it is ``duration * num_gpus``), ``cluster`` (the virtual cluster). The file is read as
it is; a missing column or a bad value is a :class:`TraceFormatError` naming row and column.

What this loader assumes, since the file does not say:

- **Tenant** = the ``cluster`` column (Philly's virtual clusters are its tenants).
- **HP / spot split**: Philly has no priorities. Each job is ``hp`` with probability
  ``hp_share`` (default 0.89, the HP share of jobs in the GFS release, Alibaba
  cluster-trace-v2026-spot-gpu), else ``spot``, drawn independently per row in file order
  from ``numpy.random.default_rng(seed)``: same seed, same split.
- **One GPU pool**: every job's ``gpu_model`` is ``"philly"``. The release has no GPU models
  per job; Philly's servers were almost all of one kind for its DL jobs, so one GPU pool it is.
- **Workers**: a job of more than ``gpus_per_node`` GPUs is a gang of
  ``ceil(num_gpus / gpus_per_node)`` workers with an equal share each (12 GPUs: 2 x 6);
  others are one worker.
- **Nodes**: the release has no node list. The cluster is ``num_nodes`` nodes of
  ``gpus_per_node`` (8) GPUs; by default enough nodes to hold the trace's peak concurrent
  GPU demand (all classes, per minute) times ``capacity_factor`` (default 1.0), rounded up.
- **Time**: ``submit_time`` is seconds from 00:00 UTC of the first job's day (2017-09-04,
  a Monday, Labor Day), so minute 0 of a demand series is a midnight; ``notes["epoch"]``
  holds that time as ISO-8601.
"""

from __future__ import annotations

import csv
import math
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from stoker.traces.base import Trace, TraceFormatError, TraceJob, TraceNode

COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")
FILE_NAME = "philly.csv"
POOL = "philly"
HP_SHARE = 0.89  # GFS release (Alibaba cluster-trace-v2026-spot-gpu): 89 % of jobs are HP


def _resolve(path: str | Path) -> Path:
    p = Path(path)
    if p.is_dir():
        p = p / FILE_NAME
    if not p.is_file():
        raise TraceFormatError(f"{p}: no such file (pass philly.csv or its folder)")
    return p


def load_philly(
    path: str | Path,
    *,
    seed: int = 0,
    hp_share: float = HP_SHARE,
    gpus_per_node: int = 8,
    num_nodes: int | None = None,
    capacity_factor: float = 1.0,
) -> Trace:
    """Read ``philly.csv`` (or the folder holding it) into a :class:`Trace`; see the module."""
    if not 0.0 <= hp_share <= 1.0:
        raise ValueError(f"hp_share must be in [0, 1], got {hp_share}")
    if gpus_per_node < 1:
        raise ValueError(f"gpus_per_node must be >= 1, got {gpus_per_node}")
    if capacity_factor <= 0:
        raise ValueError(f"capacity_factor must be > 0, got {capacity_factor}")
    file = _resolve(path)
    with file.open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceFormatError(f"{file}: missing column(s) {', '.join(missing)}")
        rows = list(reader)
    if not rows:
        raise TraceFormatError(f"{file}: no jobs")
    try:
        stamps = np.array([r["timestamp"] for r in rows], dtype="datetime64[s]")
    except ValueError:
        bad = next(i for i, r in enumerate(rows) if not _is_time(r["timestamp"]))
        raise TraceFormatError(
            f"{file}: row {bad + 2}: timestamp {rows[bad]['timestamp']!r} is not a UTC time"
        ) from None
    duration = _column(file, rows, "duration", float)
    num_gpus = _column(file, rows, "num_gpus", int)
    for name, values, low in (("duration", duration, 0), ("num_gpus", num_gpus, 1)):
        bad_rows = np.flatnonzero(~(values >= low))
        if len(bad_rows):
            i = int(bad_rows[0])
            raise TraceFormatError(
                f"{file}: row {i + 2}: {name} must be >= {low}, got {rows[i][name]!r}"
            )
    epoch = stamps.min().astype("datetime64[D]")
    submit = (stamps - epoch).astype(np.int64).astype(float)
    classes = np.random.default_rng(seed).random(len(rows)) < hp_share
    workers = np.maximum(1, -(-num_gpus // gpus_per_node))
    jobs = [
        TraceJob(
            name=f"philly-{i}",
            tenant=rows[i]["cluster"],
            gpu_model=POOL,
            gpu_request=float(num_gpus[i]) / int(workers[i]),
            worker_num=int(workers[i]),
            submit_time=float(submit[i]),
            duration=float(duration[i]),
            job_class="hp" if classes[i] else "spot",
        )
        for i in range(len(rows))
    ]
    if num_nodes is None:
        peak = _peak_concurrent_gpus(submit, duration, num_gpus.astype(float))
        num_nodes = max(1, math.ceil(peak * capacity_factor / gpus_per_node))
    nodes = [TraceNode(f"philly-node-{i:04d}", POOL, gpus_per_node) for i in range(num_nodes)]
    epoch_dt = datetime.fromisoformat(str(epoch)).replace(tzinfo=UTC)
    return Trace(
        name="philly",
        nodes=nodes,
        jobs=jobs,
        source=str(file),
        notes={
            "epoch": epoch_dt.isoformat(),
            "holidays": "us",  # Philly ran at Microsoft in the US: US federal holidays
            "tenant": "cluster column (virtual cluster)",
            "split": f"hp with probability {hp_share} per job, numpy default_rng({seed})",
            "pool": f"one pool {POOL!r}",
            "nodes": f"{num_nodes} x {gpus_per_node} GPUs (assumed; the release has none)",
        },
    )


def _is_time(text: str) -> bool:
    try:
        np.datetime64(text, "s")
    except ValueError:
        return False
    return True


def _column(file: Path, rows: list[dict[str, str]], name: str, kind: type) -> np.ndarray:
    out = np.empty(len(rows), dtype=float if kind is float else np.int64)
    for i, r in enumerate(rows):
        try:
            value = float(r[name])
            if kind is int:
                if value != int(value):
                    raise ValueError
                value = int(value)
            out[i] = value
        except (TypeError, ValueError):
            raise TraceFormatError(
                f"{file}: row {i + 2}: {name} {r[name]!r} is not a valid {kind.__name__}"
            ) from None
    if kind is float and not np.all(np.isfinite(out)):
        i = int(np.flatnonzero(~np.isfinite(out))[0])
        raise TraceFormatError(f"{file}: row {i + 2}: {name} {rows[i][name]!r} is not finite")
    return out


def _peak_concurrent_gpus(submit: np.ndarray, duration: np.ndarray, gpus: np.ndarray) -> float:
    """The most GPUs all jobs ask at once if each ran from submit for its duration."""
    times = np.concatenate([submit, submit + duration])
    deltas = np.concatenate([gpus, -gpus])
    # ends sort before starts at the same instant, so back-to-back jobs do not double count
    order = np.lexsort((deltas, times))
    return float(np.cumsum(deltas[order]).max())
