"""Prometheus metrics of one broker: start latency and hit paths, GPU-seconds held, queues.

Each broker has its own registry (several brokers in one process, as in tests and the
demo, never mix their counts); ``/metrics`` serves it.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class BrokerMetrics:
    """The broker's metrics; the loop updates them as the core's records change."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.start_latency = Histogram(
            "stoker_job_start_seconds",
            "Submit to the job's process running, by hit path",
            ["profile", "path"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.hits = Counter(
            "stoker_job_path_total", "Jobs started, by hit path", ["profile", "path"], registry=r
        )
        self.finished = Counter(
            "stoker_job_finished_total",
            "Jobs finished, by failure",
            ["profile", "failure"],
            registry=r,
        )
        self.queued = Gauge(
            "stoker_queue_length", "Jobs waiting, by profile", ["profile"], registry=r
        )
        self.pods = Gauge("stoker_pods", "Pods, by state", ["state"], registry=r)
        self.held = Gauge(
            "stoker_gpu_seconds_held",
            "GPU-seconds held by pods, by pod state (accrued at each transition)",
            ["state"],
            registry=r,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
