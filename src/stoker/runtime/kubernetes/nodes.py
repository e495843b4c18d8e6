"""The core's cluster model from the cluster's real nodes.

A node with allocatable ``nvidia.com/gpu`` (the settings' ``gpu_resource``) becomes a core
:class:`~stoker.core.model.Node` of the GPU model its label names (``nvidia.com/gpu.product``
by default, set by NVIDIA's GPU feature discovery), with one :class:`GPU` per physical card,
named ``<node>/<index>``, and the CPU slots for CPU-only pods of its allocatable CPUs and
memory. Under time-slicing the device plugin advertises each card as N
replicas and GPU feature discovery labels ``nvidia.com/gpu.replicas``: the count is divided
back to cards, because the core keeps the shares itself. Cordoned and not-ready nodes are
left out.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from stoker.core.model import GPU, Node
from stoker.runtime.kubernetes.settings import KubeSettings

REPLICAS_LABEL = "nvidia.com/gpu.replicas"


def gpu_id(node: str, index: int) -> str:
    return f"{node}/{index}"


def node_of(gpu: str) -> str:
    """The node a GPU id of :func:`gpu_id` lives on."""
    node, sep, index = gpu.rpartition("/")
    if not sep or not node or not index.isdigit():
        raise ValueError(f"gpus: {gpu!r} is not a Kubernetes GPU id (<node>/<index>)")
    return node


_SUFFIXES = {
    **{s: 1024.0**i for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"), 1)},
    **{s: 1000.0**i for i, s in enumerate(("k", "M", "G", "T", "P", "E"), 1)},
    "m": 1e-3,
}


def _quantity(text: str) -> float:
    """A Kubernetes quantity as a number: ``500m`` CPUs, ``256Gi`` or ``1e9`` bytes."""
    text = str(text).strip()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * _SUFFIXES[suffix]
    return float(text)


def _ready(node: dict[str, Any]) -> bool:
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def cluster_nodes(nodes: Iterable[dict[str, Any]], s: KubeSettings) -> list[Node]:
    """The core's nodes and GPUs from Node objects (as the API returns them), sorted by name."""
    out = []
    for obj in nodes:
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        alloc = (obj.get("status") or {}).get("allocatable") or {}
        if not _ready(obj) or s.gpu_resource not in alloc:
            continue
        replicas = max(1, int(labels.get(REPLICAS_LABEL, "1") or 1))
        cards = int(_quantity(alloc[s.gpu_resource])) // replicas
        if cards <= 0:
            continue
        name = str(meta["name"])
        model = str(labels.get(s.gpu_model_label, "unknown"))
        gpus = [GPU(gpu_id(name, i), name, i, model) for i in range(cards)]
        # CPU-only pods' slots: the node's allocatable CPUs and memory (GiB, as the core's)
        cpu, memory = _quantity(alloc.get("cpu", "0")), _quantity(alloc.get("memory", "0"))
        out.append(Node(name, model, gpus, cpu=cpu, memory_gb=memory / 1024.0**3))
    return sorted(out, key=lambda n: n.name)


def gpu_memory_mib(nodes: Iterable[dict[str, Any]], s: KubeSettings) -> dict[str, int]:
    """Node name -> MiB per GPU, for the nodes whose labels say it."""
    out = {}
    for obj in nodes:
        meta = obj.get("metadata") or {}
        value = (meta.get("labels") or {}).get(s.gpu_memory_label)
        if value and str(value).isdigit():
            out[str(meta["name"])] = int(value)
    return out
