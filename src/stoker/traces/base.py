"""The common shape every trace loader returns: nodes and hp/spot jobs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

JobClass = Literal["hp", "spot"]


class TraceFormatError(ValueError):
    """A trace file is missing, lacks a column, or holds a value that cannot be read.

    The message names the file, and the line and column where there is one. Every loader
    raises this one type, so callers of ``load_trace`` catch one exception.
    """


@dataclass(frozen=True, slots=True)
class TraceNode:
    """One node: its name, GPU model and GPU count."""

    name: str
    gpu_model: str
    gpus: int
    cpu: float = 0.0


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job in the GFS release's terms (``job_info_df.csv`` columns).

    ``gpu_request`` is per worker and may be fractional (below 1: a share of one card);
    ``submit_time`` is seconds from the trace's start; ``duration`` is the run time in s.
    """

    name: str
    tenant: str
    gpu_model: str
    gpu_request: float
    worker_num: int
    submit_time: float
    duration: float
    job_class: JobClass
    cpu_request: float = 0.0


@dataclass(slots=True)
class Trace:
    """Nodes and jobs (sorted by submit time), plus where they came from."""

    name: str
    nodes: list[TraceNode]
    jobs: list[TraceJob]
    source: str = ""
    notes: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.jobs.sort(key=lambda j: (j.submit_time, j.name))
