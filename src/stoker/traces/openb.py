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
- GPU model (the GFS pool): the first model in ``gpu_spec`` when set; else (every pod of
  the default list) a model drawn with probability proportional to its GPU count among the
  models that have a node big enough for the pod, by a seeded generator.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from stoker.traces.base import JobClass, Trace, TraceJob, TraceNode
from stoker.traces.gfs_v2026 import TraceFormatError, parse_number, parse_text, read_rows

NODE_FILE = "openb_node_list_gpu_node.csv"
POD_FILE = "openb_pod_list_default.csv"
NODE_COLUMNS = ("sn", "cpu_milli", "gpu", "model")
POD_COLUMNS = (
    "name",
    "cpu_milli",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
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


def load_openb(path: str | Path, seed: int = 0) -> Trace:
    """Load the openb trace: a folder with both files, or the pod file (nodes beside it)."""
    given = Path(path)
    pod_file = given / POD_FILE if given.is_dir() else given
    nodes = load_openb_nodes(pod_file.parent / NODE_FILE)
    capacity: dict[str, int] = {}
    biggest: dict[str, int] = {}
    for node in nodes:
        capacity[node.gpu_model] = capacity.get(node.gpu_model, 0) + node.gpus
        biggest[node.gpu_model] = max(biggest.get(node.gpu_model, 0), node.gpus)
    models = sorted(capacity)
    rng = np.random.default_rng(seed)
    jobs: list[TraceJob] = []
    cpu_only = 0
    for line, row in read_rows(pod_file, POD_COLUMNS):
        qos = (row["qos"] or "").strip()
        job_class = QOS_CLASS.get(qos)
        if job_class is None:
            raise TraceFormatError(
                f"{pod_file}:{line}: column qos: expected one of {', '.join(QOS_CLASS)}, "
                f"got {qos!r}"
            )
        num_gpu = parse_number(pod_file, line, "num_gpu", row["num_gpu"])
        if num_gpu < 0 or num_gpu != int(num_gpu):
            raise TraceFormatError(
                f"{pod_file}:{line}: column num_gpu: not a count: {row['num_gpu']!r}"
            )
        if num_gpu == 0:
            cpu_only += 1
            continue
        milli = parse_number(pod_file, line, "gpu_milli", row["gpu_milli"])
        if milli == 1000:
            gpu_request = float(num_gpu)
        elif num_gpu == 1 and 0 < milli < 1000:
            gpu_request = milli / 1000.0
        else:
            raise TraceFormatError(
                f"{pod_file}:{line}: column gpu_milli: {row['gpu_milli']!r} with num_gpu "
                f"{row['num_gpu']!r} (a share below 1000 needs num_gpu 1)"
            )
        created = parse_number(pod_file, line, "creation_time", row["creation_time"])
        deleted = parse_number(pod_file, line, "deletion_time", row["deletion_time"])
        sched_text = (row["scheduled_time"] or "").strip()
        started = (
            parse_number(pod_file, line, "scheduled_time", sched_text) if sched_text else created
        )
        if deleted < started:
            raise TraceFormatError(
                f"{pod_file}:{line}: column deletion_time: {row['deletion_time']!r} before "
                f"{'scheduled_time' if sched_text else 'creation_time'} {started:g}"
            )
        spec = (row["gpu_spec"] or "").strip()
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
                submit_time=created,
                duration=deleted - started,
                job_class=job_class,
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
            "cpu_only_pods_dropped": str(cpu_only),
        }
    )
    return trace
