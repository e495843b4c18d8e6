"""PNG plots of the Firepool experiments (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from stoker.sim import metrics
from stoker.sim.firepool import Run


def start_latency_cdf(runs: dict[str, Run], path: Path) -> Path:
    """One empirical CDF of start latency per policy, log-scaled seconds."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, run in runs.items():
        lat = np.sort(metrics.start_latencies(run.core))
        if not len(lat):
            continue
        ax.step(np.maximum(lat, 1e-2), np.arange(1, len(lat) + 1) / len(lat), label=name)
    ax.set_xscale("log")
    ax.set_xlabel("start latency (s, submit to running)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("Start latency per policy (production-like mix)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def held_over_time(runs: dict[str, Run], path: Path, step_s: float = 10.0) -> Path:
    """GPUs held by all pods over time, one line per keep-alive policy."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, run in runs.items():
        t, held = metrics.held_series(run.result, step_s)
        ax.plot(t / 60.0, held, label=name, linewidth=1.2)
    ax.set_xlabel("time (min)")
    ax.set_ylabel("GPUs held")
    ax.set_title("GPUs held over time per keep-alive policy (mix)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
