"""Loader and writer of the GFS release format (alibaba ``cluster-trace-v2026-spot-gpu``).

``node_info_df.csv``: ``gpu_model, gpu_capacity_num, cpu_num, node_name`` (one row a node).
``job_info_df.csv``: ``job_name, organization, gpu_model, cpu_request, gpu_request,
worker_num, submit_time, duration, job_type`` (``gpu_request`` per worker, may be
fractional; ``submit_time`` in s from the first job; ``job_type`` ``HP`` or ``Spot``).

The upstream files are read as they are (any column order, an optional leading pandas
index column, numbers written as ``8`` or ``8.0``). The csv module keeps this fast enough
for the full 466,867-row job file (a few seconds) without pandas.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

from stoker.traces.base import JobClass, Trace, TraceFormatError, TraceJob, TraceNode

# minute 0 of the release: its first submission, 2024-03-01 00:00 in China (the authors'
# simulator.py: trace_range starts "2024-03-01 00:00:00"; the cluster runs on Beijing time)
V2026_EPOCH = datetime(2024, 3, 1, tzinfo=timezone(timedelta(hours=8)))


def v2026_calendar_notes(start_day: float = 0.0) -> dict[str, str]:
    """The notes that give a v2026 trace its calendar: epoch (shifted by ``start_day``) and
    China's holidays and swapped workdays (:meth:`stoker.forecast.series.Calendar.of_trace`)."""
    return {
        "epoch": (V2026_EPOCH + timedelta(days=start_day)).isoformat(),
        "holidays": "china",
    }


NODE_FILE = "node_info_df.csv"
JOB_FILE = "job_info_df.csv"
# a trace's note naming the node list file it was loaded with
NODE_LIST_NOTE = "node_list"
NODE_COLUMNS = ("gpu_model", "gpu_capacity_num", "cpu_num", "node_name")
JOB_COLUMNS = (
    "job_name",
    "organization",
    "gpu_model",
    "cpu_request",
    "gpu_request",
    "worker_num",
    "submit_time",
    "duration",
    "job_type",
)
# upstream spelling -> our class; matched case-insensitively
_JOB_TYPES: dict[str, JobClass] = {"hp": "hp", "spot": "spot"}


def read_rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield (line number, row) from a CSV file after checking its header has ``required``."""
    if not path.is_file():
        raise TraceFormatError(f"{path}: no such file")
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        header = [h.strip() for h in (reader.fieldnames or [])]
        missing = [c for c in required if c not in header]
        if missing:
            raise TraceFormatError(
                f"{path}: missing column(s) {', '.join(missing)} (header: {', '.join(header)})"
            )
        reader.fieldnames = header
        for row in reader:
            yield reader.line_num, row


def parse_number(path: Path, line: int, column: str, text: str | None) -> float:
    """Parse one numeric cell, or raise naming file, line and column."""
    if text is None or not text.strip():
        raise TraceFormatError(f"{path}:{line}: column {column}: missing")
    try:
        value = float(text)
    except ValueError:
        raise TraceFormatError(f"{path}:{line}: column {column}: not a number: {text!r}") from None
    if not math.isfinite(value):
        raise TraceFormatError(f"{path}:{line}: column {column}: not finite: {text!r}")
    return value


def parse_text(path: Path, line: int, column: str, text: str | None) -> str:
    value = (text or "").strip()
    if not value:
        raise TraceFormatError(f"{path}:{line}: column {column}: empty")
    return value


def load_nodes(path: str | Path) -> list[TraceNode]:
    """Read ``node_info_df.csv`` (or a folder holding it) into nodes, in file order."""
    file = Path(path)
    if file.is_dir():
        file = file / NODE_FILE
    nodes: list[TraceNode] = []
    for line, row in read_rows(file, NODE_COLUMNS):
        gpus = parse_number(file, line, "gpu_capacity_num", row["gpu_capacity_num"])
        if gpus < 0 or gpus != int(gpus):
            text = row["gpu_capacity_num"]
            raise TraceFormatError(f"{file}:{line}: column gpu_capacity_num: not a count: {text!r}")
        nodes.append(
            TraceNode(
                name=parse_text(file, line, "node_name", row["node_name"]),
                gpu_model=parse_text(file, line, "gpu_model", row["gpu_model"]),
                gpus=int(gpus),
                cpu=parse_number(file, line, "cpu_num", row["cpu_num"]),
            )
        )
    if not nodes:
        raise TraceFormatError(f"{file}: no nodes")
    return nodes


def _job_from_row(file: Path, line: int, row: dict[str, str]) -> TraceJob:
    """One job from one row, checking every cell; the authority on what a bad row is."""
    kind = (row["job_type"] or "").strip()
    job_class = _JOB_TYPES.get(kind.lower())
    if job_class is None:
        raise TraceFormatError(f"{file}:{line}: column job_type: expected HP or Spot, got {kind!r}")
    gpu_request = parse_number(file, line, "gpu_request", row["gpu_request"])
    if gpu_request <= 0:
        raise TraceFormatError(
            f"{file}:{line}: column gpu_request: must be above 0, got {row['gpu_request']!r}"
        )
    workers = parse_number(file, line, "worker_num", row["worker_num"])
    if workers < 1 or workers != int(workers):
        raise TraceFormatError(
            f"{file}:{line}: column worker_num: not a count >= 1: {row['worker_num']!r}"
        )
    duration = parse_number(file, line, "duration", row["duration"])
    submit = parse_number(file, line, "submit_time", row["submit_time"])
    if duration < 0 or submit < 0:
        column = "duration" if duration < 0 else "submit_time"
        raise TraceFormatError(f"{file}:{line}: column {column}: negative: {row[column]!r}")
    return TraceJob(
        name=parse_text(file, line, "job_name", row["job_name"]),
        tenant=parse_text(file, line, "organization", row["organization"]),
        gpu_model=parse_text(file, line, "gpu_model", row["gpu_model"]),
        gpu_request=gpu_request,
        worker_num=int(workers),
        submit_time=submit,
        duration=duration,
        job_class=job_class,
        cpu_request=parse_number(file, line, "cpu_request", row["cpu_request"]),
    )


def load_jobs(path: str | Path) -> list[TraceJob]:
    """Read ``job_info_df.csv`` (or a folder holding it) into jobs, in file order.

    Rows are read by position on a fast path; any row it cannot take as it is goes to the
    checking path, which builds the job or raises naming the line and column.
    """
    file = Path(path)
    if file.is_dir():
        file = file / JOB_FILE
    if not file.is_file():
        raise TraceFormatError(f"{file}: no such file")
    jobs: list[TraceJob] = []
    with file.open(newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = [h.strip() for h in next(reader, [])]
        missing = [c for c in JOB_COLUMNS if c not in header]
        if missing:
            raise TraceFormatError(
                f"{file}: missing column(s) {', '.join(missing)} (header: {', '.join(header)})"
            )
        at = {c: header.index(c) for c in JOB_COLUMNS}
        i_name, i_org, i_model = at["job_name"], at["organization"], at["gpu_model"]
        i_cpu, i_req, i_w = at["cpu_request"], at["gpu_request"], at["worker_num"]
        i_sub, i_dur, i_type = at["submit_time"], at["duration"], at["job_type"]
        for row in reader:
            try:
                job_class = _JOB_TYPES[row[i_type].strip().lower()]
                req, workers = float(row[i_req]), float(row[i_w])
                submit, duration, cpu = float(row[i_sub]), float(row[i_dur]), float(row[i_cpu])
                name, tenant, model = row[i_name].strip(), row[i_org].strip(), row[i_model].strip()
                ok = (
                    req > 0
                    and workers >= 1
                    and workers == int(workers)
                    and submit >= 0
                    and duration >= 0
                    and math.isfinite(req + workers + submit + duration + cpu)
                    and bool(name and tenant and model)
                )
            except (KeyError, ValueError, IndexError, OverflowError):
                ok = False
            if ok:
                jobs.append(
                    TraceJob(
                        name, tenant, model, req, int(workers), submit, duration, job_class, cpu
                    )
                )
            else:
                cells = {h: row[i] if i < len(row) else "" for i, h in enumerate(header)}
                jobs.append(_job_from_row(file, reader.line_num, cells))
    return jobs


def release_job_file(path: str | Path) -> Path:
    """A release's job file: ``path`` itself, or ``job_info_df.csv`` in the folder."""
    given = Path(path)
    return given / JOB_FILE if given.is_dir() else given


def release_has_nodes(path: str | Path) -> bool:
    """Whether a release carries its own ``node_info_df.csv`` beside its job file."""
    return (release_job_file(path).parent / NODE_FILE).is_file()


def load_v2026(path: str | Path, nodes: list[TraceNode] | None = None) -> Trace:
    """Load a GFS release: a folder with both files, or the job file itself.

    With a job file alone, the node list is ``node_info_df.csv`` beside it when present,
    else ``nodes`` (the caller's, e.g. the real or generated fleet); one of them must exist.
    """
    job_file = release_job_file(path)
    node_file = job_file.parent / NODE_FILE
    if node_file.is_file():
        nodes = load_nodes(node_file)
    elif nodes is None:
        raise TraceFormatError(f"{node_file}: no such file (and no node list given)")
    jobs = load_jobs(job_file)
    notes = v2026_calendar_notes()
    if node_file.is_file():
        notes[NODE_LIST_NOTE] = str(node_file)
    return Trace(name="v2026", nodes=nodes, jobs=jobs, source=str(job_file), notes=notes)


def _fmt(value: float) -> str:
    """Integers as integers, fractions with up to 4 decimals (the upstream style)."""
    if value == int(value):
        return str(int(value))
    return f"{value:.4f}".rstrip("0")


def write_jobs(path: str | Path, jobs: Iterable[TraceJob]) -> int:
    """Write jobs as ``job_info_df.csv`` (upstream columns and spelling); return the count."""
    file = Path(path)
    file.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with file.open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(JOB_COLUMNS)
        for job in jobs:
            out.writerow(
                (
                    job.name,
                    job.tenant,
                    job.gpu_model,
                    _fmt(job.cpu_request),
                    _fmt(job.gpu_request),
                    job.worker_num,
                    _fmt(job.submit_time),
                    _fmt(job.duration),
                    "HP" if job.job_class == "hp" else "Spot",
                )
            )
            count += 1
    return count


def write_nodes(path: str | Path, nodes: Iterable[TraceNode]) -> int:
    """Write nodes as ``node_info_df.csv`` (upstream column order); return the count."""
    file = Path(path)
    file.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with file.open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(NODE_COLUMNS)
        for node in nodes:
            out.writerow((node.gpu_model, node.gpus, _fmt(node.cpu), node.name))
            count += 1
    return count
