"""Loader of the 2023 "openb" GPU-sharing trace (alibaba ``cluster-trace-gpu-v2023``, FGD).

``openb_node_list_gpu_node.csv``: ``sn, cpu_milli, memory_mib, gpu, model``.
``openb_pod_list_default.csv``: ``name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec,
qos, pod_phase, creation_time, deletion_time, scheduled_time`` (times in s).

The mapping to GFS terms (each rule is recorded in ``Trace.notes`` too):

- class: ``LS``, ``Guaranteed`` and ``Burstable`` -> hp, ``BE`` -> spot.
- request: one worker per pod; ``gpu_milli`` is the per-GPU share, so a pod asks
  ``num_gpu`` whole GPUs when ``gpu_milli`` is 1000 and ``gpu_milli / 1000`` of one card
  when ``num_gpu`` is 1 and ``gpu_milli`` below 1000 (any other pairing is an error).
- CPU-only pods (``num_gpu`` 0, 1,088 of 8,152) are left out: GFS schedules GPUs, and they
  hold no GPU; their count is kept in ``notes["cpu_only_pods_dropped"]``.
- time: submit = ``creation_time``; duration = ``deletion_time`` - ``scheduled_time``, or
  - ``creation_time`` for pods never scheduled (the Pending ones: how long they wanted).
- tenant: the trace has none, so the tenant is the pod's QoS class (``LS``, ``BE``,
  ``Burstable``, ``Guaranteed``): the closest thing it has to who submitted it.
- GPU model (the GFS GPU pool): the first model in ``gpu_spec`` when set; else (every pod of
  the default list) a model drawn with probability proportional to its GPU count among the
  models that have a node big enough for the pod, by a seeded generator.
- every pod list of the release loads (``openb_pod_list_*.csv``: ``default``,
  ``gpushareNN``, ``gpuspecNN``, ``multigpuNN``, ``cpuNNN``). The variants without the
  ``gpu_spec``, ``qos`` and time columns (the FGD simulator only places their pods, in
  order) are pod shapes sampled from the default list: each such pod keeps its own request
  and takes the QoS, creation time and lifetime of a default pod drawn at random (seeded),
  so it arrives as the default trace's pods do; ``notes["times"]`` says so. That needs the
  default list beside it.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from stoker.traces.base import JobClass, Trace, TraceJob, TraceNode
from stoker.traces.gfs_v2026 import TraceFormatError, parse_number, parse_text, read_rows

NODE_FILE = "openb_node_list_gpu_node.csv"
POD_FILE = "openb_pod_list_default.csv"
NODE_COLUMNS = ("sn", "cpu_milli", "gpu", "model")
SHAPE_COLUMNS = ("name", "cpu_milli", "num_gpu", "gpu_milli")
TIME_COLUMNS = ("qos", "creation_time", "deletion_time", "scheduled_time")
QOS_CLASS: dict[str, JobClass] = {"LS": "hp", "Guaranteed": "hp", "Burstable": "hp", "BE": "spot"}


def load_openb_nodes(path: str | Path) -> list[TraceNode]:
    """Read the GPU node list (or a folder holding it)."""
    file = Path(path)
    if file.is_dir():
        file = file / NODE_FILE
    nodes: list[TraceNode] = []
    for line, row in read_rows(file, NODE_COLUMNS):
        gpus = parse_number(file, line, "gpu", row["gpu"])
        if gpus < 0 or gpus != int(gpus):
            raise TraceFormatError(f"{file}:{line}: column gpu: not a count: {row['gpu']!r}")
        nodes.append(
            TraceNode(
                name=parse_text(file, line, "sn", row["sn"]),
                gpu_model=parse_text(file, line, "model", row["model"]),
                gpus=int(gpus),
                cpu=parse_number(file, line, "cpu_milli", row["cpu_milli"]) / 1000.0,
            )
        )
    if not nodes:
        raise TraceFormatError(f"{file}: no nodes")
    return nodes


def _header(path: Path) -> list[str]:
    if not path.is_file():
        raise TraceFormatError(f"{path}: no such file")
    with path.open(newline="", encoding="utf-8") as fh:
        return [h.strip() for h in next(csv.reader(fh), [])]


def _timing(path: Path, line: int, row: dict[str, str]) -> tuple[str, float, float]:
    """(qos, submit, duration) of one pod row that has the time columns."""
    qos = (row["qos"] or "").strip()
    if qos not in QOS_CLASS:
        raise TraceFormatError(
            f"{path}:{line}: column qos: expected one of {', '.join(QOS_CLASS)}, got {qos!r}"
        )
    created = parse_number(path, line, "creation_time", row["creation_time"])
    deleted = parse_number(path, line, "deletion_time", row["deletion_time"])
    sched_text = (row["scheduled_time"] or "").strip()
    started = parse_number(path, line, "scheduled_time", sched_text) if sched_text else created
    if deleted < started:
        raise TraceFormatError(
            f"{path}:{line}: column deletion_time: {row['deletion_time']!r} before "
            f"{'scheduled_time' if sched_text else 'creation_time'} {started:g}"
        )
    return qos, created, deleted - started


def _default_timings(folder: Path) -> list[tuple[str, float, float]]:
    """Every default-list pod's (qos, submit, duration): what shape-only variants draw."""
    file = folder / POD_FILE
    if not file.is_file():
        raise TraceFormatError(
            f"{file}: no such file (a pod list without qos and time columns takes its "
            "pods' times from the default list beside it)"
        )
    return [_timing(file, line, row) for line, row in read_rows(file, SHAPE_COLUMNS + TIME_COLUMNS)]


def _request(path: Path, line: int, row: dict[str, str]) -> float:
    """GPUs one pod asks (a fraction below 1 shares a card); 0 for a CPU-only pod."""
    num_gpu = parse_number(path, line, "num_gpu", row["num_gpu"])
    if num_gpu < 0 or num_gpu != int(num_gpu):
        raise TraceFormatError(f"{path}:{line}: column num_gpu: not a count: {row['num_gpu']!r}")
    if num_gpu == 0:
        return 0.0
    milli = parse_number(path, line, "gpu_milli", row["gpu_milli"])
    if milli == 1000:
        return float(num_gpu)
    if num_gpu == 1 and 0 < milli < 1000:
        return milli / 1000.0
    raise TraceFormatError(
        f"{path}:{line}: column gpu_milli: {row['gpu_milli']!r} with num_gpu "
        f"{row['num_gpu']!r} (a share below 1000 needs num_gpu 1)"
    )


def load_openb(path: str | Path, seed: int = 0) -> Trace:
    """Load the openb trace: a folder with the node list and the default pod list, or any
    pod list of the release (``openb_pod_list_*.csv``; the node list beside it)."""
    given = Path(path)
    pod_file = given / POD_FILE if given.is_dir() else given
    nodes = load_openb_nodes(pod_file.parent / NODE_FILE)
    capacity: dict[str, int] = {}
    biggest: dict[str, int] = {}
    for node in nodes:
        capacity[node.gpu_model] = capacity.get(node.gpu_model, 0) + node.gpus
        biggest[node.gpu_model] = max(biggest.get(node.gpu_model, 0), node.gpus)
    models = sorted(capacity)
    header = _header(pod_file)
    timed = all(c in header for c in TIME_COLUMNS)
    drawn = None if timed else _default_timings(pod_file.parent)
    rng = np.random.default_rng(seed)
    jobs: list[TraceJob] = []
    cpu_only = 0
    for line, row in read_rows(pod_file, SHAPE_COLUMNS):
        if drawn is None:
            qos, submit, duration = _timing(pod_file, line, row)
        else:
            qos, submit, duration = drawn[int(rng.integers(len(drawn)))]
        gpu_request = _request(pod_file, line, row)
        if gpu_request == 0:
            cpu_only += 1
            continue
        spec = (row.get("gpu_spec") or "").strip()
        if spec:
            gpu_model = spec.split("|")[0].strip()
        else:
            fit = [m for m in models if biggest[m] >= gpu_request]
            if not fit:
                raise TraceFormatError(
                    f"{pod_file}:{line}: column num_gpu: {row['num_gpu']!r} GPUs fit no node"
                )
            weights = np.array([capacity[m] for m in fit], dtype=float)
            gpu_model = fit[int(rng.choice(len(fit), p=weights / weights.sum()))]
        jobs.append(
            TraceJob(
                name=parse_text(pod_file, line, "name", row["name"]),
                tenant=qos,
                gpu_model=gpu_model,
                gpu_request=gpu_request,
                worker_num=1,
                submit_time=submit,
                duration=duration,
                job_class=QOS_CLASS[qos],
                cpu_request=parse_number(pod_file, line, "cpu_milli", row["cpu_milli"]) / 1000.0,
            )
        )
    trace = Trace(name="openb", nodes=nodes, jobs=jobs, source=str(pod_file))
    trace.notes.update(
        {
            "class": "LS, Guaranteed, Burstable -> hp; BE -> spot",
            "tenant": "the pod's qos class (the trace has no tenant column)",
            "gpu_model": "first of gpu_spec; else drawn by GPU capacity among models that fit "
            f"(seed {seed})",
            "duration": "deletion_time - scheduled_time (creation_time if never scheduled)",
            "times": "the file's own"
            if drawn is None
            else f"qos, creation time and lifetime of a default-list pod drawn per pod "
            f"(seed {seed}); the file has none",
            "cpu_only_pods_dropped": str(cpu_only),
        }
    )
    return trace
