"""One entry for every trace the GFS simulator runs on: :func:`load_trace`."""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

from stoker.traces import calibration as cal
from stoker.traces.base import Trace, TraceNode
from stoker.traces.generator import GeneratorConfig, fleet_nodes, generate_trace
from stoker.traces.gfs_v2026 import (
    NODE_FILE,
    NODE_LIST_NOTE,
    load_nodes,
    load_v2026,
    release_has_nodes,
)
from stoker.traces.openb import load_openb

TRACE_KINDS = ("v2026", "openb", "philly")
DATA_ENV = "STOKER_DATA_DIR"
V2026_DIR = "alibaba-spot-v2026"
# a v2026 trace's node_list note when the data folder has no node list
FLEET_REBUILT = "rebuilt from the published counts (no node list in the data folder)"


def shared_data_dir() -> Path | None:
    """The public-trace folder: ``$STOKER_DATA_DIR``, else ``../shared/data`` beside the
    project checkout (or beside the working directory); None when none exists."""
    env = os.environ.get(DATA_ENV)
    candidates = [Path(env)] if env else []
    # <checkout>/src/stoker/traces/load.py: the checkout is parents[3]
    candidates.append(Path(__file__).resolve().parents[3].parent / "shared" / "data")
    candidates.append(Path.cwd().parent / "shared" / "data")
    for folder in candidates:
        if folder.is_dir():
            return folder
    return None


def v2026_node_list(data_dir: Path | None = None) -> Path | None:
    """The real GFS node list's file in the data folder, None when it is not there."""
    folder = data_dir if data_dir is not None else shared_data_dir()
    if folder is not None and (folder / V2026_DIR / NODE_FILE).is_file():
        return folder / V2026_DIR / NODE_FILE
    return None


def v2026_nodes(data_dir: Path | None = None) -> list[TraceNode]:
    """The real GFS node list from the data folder, else the fleet rebuilt from its counts."""
    return _fleet(v2026_node_list(data_dir))


def _fleet(node_list: Path | None) -> list[TraceNode]:
    return load_nodes(node_list) if node_list is not None else fleet_nodes()


def _window(trace: Trace, start_day: int, days: float | None) -> Trace:
    """Keep jobs submitted in [start_day, start_day + days) and shift them to start at 0."""
    if days is None and start_day == 0:
        return trace
    lo = start_day * 86_400.0
    hi = lo + days * 86_400.0 if days is not None else float("inf")
    jobs = [
        replace(j, submit_time=j.submit_time - lo) for j in trace.jobs if lo <= j.submit_time < hi
    ]
    out = Trace(trace.name, trace.nodes, jobs, trace.source, dict(trace.notes))
    out.notes["window"] = f"days {start_day} to {start_day + days if days else 'end'}"
    if "epoch" in out.notes:  # minute 0 moves with the window
        when = datetime.fromisoformat(out.notes["epoch"]) + timedelta(days=start_day)
        out.notes["epoch"] = when.isoformat()
    return out


def load_trace(
    kind: str,
    path: str | Path | None = None,
    seed: int = 0,
    *,
    days: float | None = None,
    start_day: int = 0,
    scale: float = 1.0,
    data_dir: str | Path | None = None,
) -> Trace:
    """Load (or generate) the nodes and hp/spot jobs of one trace, for the GFS simulator.

    kind: ``v2026`` (the GFS release), ``openb`` (alibaba gpu-v2023) or ``philly``.
    path: a folder holding the trace's files under their upstream names, or the job file
        itself. ``v2026`` without a path generates its jobs (seeded by ``seed``) on the real
        node list when ``data_dir`` (default :func:`shared_data_dir`) has it, else on the
        fleet rebuilt from the published counts (4,278 nodes, 10,412 GPUs). ``openb`` and
        ``philly`` need a path.
    seed: the generator's seed (v2026 without a path) and openb's model draw for pods
        without a ``gpu_spec``.
    days, start_day: keep the jobs submitted in this window of days, with submit times
        shifted to start at 0 (generated jobs are made for the window directly).
    scale: multiplies the generated job counts (v2026 without a path only; a real trace
        is not resampled, so scale != 1 with a path is an error).

    Raises ValueError for an unknown kind, a missing path or a bad option, and
    :class:`~stoker.traces.gfs_v2026.TraceFormatError` for a bad file.
    """
    if kind not in TRACE_KINDS:
        raise ValueError(f"kind: expected one of {', '.join(TRACE_KINDS)}, got {kind!r}")
    if path is not None and scale != 1.0:
        raise ValueError(f"scale: only generated traces are scaled (got {scale} with a path)")
    folder = Path(data_dir) if data_dir is not None else shared_data_dir()
    if kind == "v2026":
        if path is not None and release_has_nodes(path):
            # the release's own node list wins; the data folder's is not read
            return _window(load_v2026(path), start_day, days)
        node_list = v2026_node_list(folder)
        nodes = _fleet(node_list)
        if path is None:
            cfg = GeneratorConfig(
                seed=seed,
                days=days if days is not None else cal.TRACE_DAYS - start_day,
                start_day=start_day,
                scale=scale,
            )
            trace = generate_trace(cfg, nodes=nodes)
        else:
            trace = _window(load_v2026(path, nodes=nodes), start_day, days)
        # which cluster a run had (the rebuilt fleet differs node by node, so results do)
        trace.notes[NODE_LIST_NOTE] = str(node_list) if node_list else FLEET_REBUILT
        return trace
    if path is None:
        raise ValueError(f"path: the {kind} trace needs its files (e.g. under {folder})")
    if kind == "openb":
        return _window(load_openb(path, seed=seed), start_day, days)
    from stoker.traces.philly import load_philly  # another module; imported on use

    return _window(load_philly(path, seed=seed), start_day, days)
