"""This host's GPUs: real ones through NVML (nvidia-ml-py) where present, else virtual slots.

A virtual slot is a GPU-shaped place for a pod on a host without GPUs, so the pool's
decisions and everything around them still run; a pod on a virtual slot sees no CUDA device.
"""

from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One GPU of this host. ``index`` is the CUDA device index (-1 for a virtual slot)."""

    id: str
    index: int
    model: str
    memory_mb: int
    virtual: bool


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
            out.append(GpuDevice(f"gpu{i}", i, str(name), int(mem), False))
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


def cuda_visible_devices(devices: dict[str, GpuDevice], gpus: tuple[str, ...]) -> str:
    """CUDA_VISIBLE_DEVICES for a pod holding ``gpus`` (empty for virtual slots)."""
    unknown = [g for g in gpus if g not in devices]
    if unknown:
        raise ValueError(f"gpus: unknown GPU id(s) {unknown}; this host has {sorted(devices)}")
    return ",".join(str(devices[g].index) for g in gpus if not devices[g].virtual)
