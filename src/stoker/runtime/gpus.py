"""This host's GPUs: real ones through NVML (nvidia-ml-py) where present, else virtual slots.

A virtual slot is a GPU-shaped place for a pod on a host without GPUs, so the pool's
decisions and everything around them still run; a pod on a virtual slot sees no CUDA device.

A pod on real GPUs is told its cards by UUID (``CUDA_VISIBLE_DEVICES=GPU-...``): CUDA numbers
devices fastest first unless told otherwise, NVML by PCI bus, so on a host of mixed cards an
NVML index in CUDA_VISIBLE_DEVICES names another card. And it gets only its own cards'
device nodes (``/dev/nvidia<minor>``) beside the driver's control nodes, so a job that
rewrites CUDA_VISIBLE_DEVICES still reaches no other pod's card.
"""

from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass
from pathlib import Path

#: the driver's control nodes a CUDA process opens whichever cards it uses (as NVIDIA's
#: container toolkit passes them); MIG's /dev/nvidia-caps are not passed (no MIG here)
CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One GPU of this host. ``index``: NVML's (PCI bus order; -1 for a virtual slot);
    ``uuid``: the card's (``GPU-...``, what CUDA_VISIBLE_DEVICES names it by); ``minor``:
    its device node's minor number (``/dev/nvidia<minor>``; -1 for a virtual slot)."""

    id: str
    index: int
    model: str
    memory_mb: int
    virtual: bool
    uuid: str = ""
    minor: int = -1


def _nvml_devices() -> list[GpuDevice]:
    try:
        pynvml = importlib.import_module("pynvml")
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError: no driver / no device on this host
        return []
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            if isinstance(name, bytes):
                name = name.decode()
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle).total // (1024 * 1024)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            if isinstance(uuid, bytes):
                uuid = uuid.decode()
            minor = int(pynvml.nvmlDeviceGetMinorNumber(handle))
            out.append(GpuDevice(f"gpu{i}", i, str(name), int(mem), False, str(uuid), minor))
        return out
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def discover(virtual_slots: int = 0) -> list[GpuDevice]:
    """Real GPUs if NVML finds any, else ``virtual_slots`` virtual ones (``vgpu0``...)."""
    if virtual_slots < 0:
        raise ValueError(f"virtual_slots must be >= 0, got {virtual_slots}")
    real = _nvml_devices()
    if real:
        return real
    return [GpuDevice(f"vgpu{i}", -1, "virtual", 0, True) for i in range(virtual_slots)]


def _real(devices: dict[str, GpuDevice], gpus: tuple[str, ...]) -> list[GpuDevice]:
    """The real cards among ``gpus`` (ValueError naming any id this host does not have)."""
    unknown = [g for g in gpus if g not in devices]
    if unknown:
        raise ValueError(f"gpus: unknown GPU id(s) {unknown}; this host has {sorted(devices)}")
    return [devices[g] for g in gpus if not devices[g].virtual]


def cuda_visible_devices(devices: dict[str, GpuDevice], gpus: tuple[str, ...]) -> str:
    """CUDA_VISIBLE_DEVICES for a pod holding ``gpus``: the cards' UUIDs (empty for
    virtual slots)."""
    return ",".join(d.uuid for d in _real(devices, gpus))


def device_nodes(
    devices: dict[str, GpuDevice], gpus: tuple[str, ...], dev_dir: Path = Path("/dev")
) -> tuple[tuple[str, str], ...]:
    """The device nodes a pod holding ``gpus`` gets, as (host path, path in the pod): each
    of its cards' ``nvidia<minor>`` and the control nodes the host has; no other card's
    node; none for virtual slots. ``dev_dir``: where the host's nodes are."""
    real = _real(devices, gpus)
    if not real:
        return ()
    names = [f"nvidia{d.minor}" for d in real]
    names += [n for n in CONTROL_NODES if (dev_dir / n).exists()]
    return tuple((str(dev_dir / n), f"/dev/{n}") for n in names)
