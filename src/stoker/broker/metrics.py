"""Prometheus metrics of one broker: hit paths and outcomes, start latency, handover, queue
wait, pods by state, GPUs held by idle pods against the warm budget, pod stops by reason,
and per GPU pool the spot quota, usage, eta, eviction rate and the HP forecast.

Each broker has its own registry (several brokers in one process, as in tests and the
demo, never mix their counts); ``/metrics`` serves it. Counters and histograms are moved
by the decision log (:mod:`stoker.broker.events_log`) as the core decides; gauges are read
from the broker's state at scrape time through :meth:`BrokerMetrics.watch`, so a scrape
always sees the present. Labels are bounded: profile, hit path, outcome, pod state, stop
reason, GPU model; never a tenant, token or reuse tag.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

_LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_WAIT_BUCKETS = (0.001, 0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


@dataclass
class BrokerGauges:
    """What the broker holds now, read at each scrape."""

    queued: dict[str, int] = field(default_factory=dict)  # profile -> queued jobs
    pods: dict[tuple[str, str], int] = field(default_factory=dict)  # (profile, state) -> pods
    held_seconds: dict[str, float] = field(default_factory=dict)  # pod state -> GPU-seconds
    idle_gpus: dict[str, float] = field(default_factory=dict)  # warm | standby -> GPUs
    budget_gpus: float = 0.0
    capacity_gpus: float = 0.0
    gpu_pools: list[dict[str, Any]] = field(default_factory=list)  # rows of GET /v1/pools
    stored_output: dict[str, int] = field(default_factory=dict)  # tenant -> output bytes
    held: dict[str, int] = field(default_factory=dict)  # the loop's map -> entries


# (metric name, help, the GPU-pool row's key); the forecast ones read the current hour
_GPU_POOL_GAUGES = (
    ("stoker_gpu_pool_capacity_gpus", "GPUs in the GPU pool", "capacity"),
    ("stoker_gpu_pool_hp_gpus", "GPUs held by HP jobs (actual HP demand)", "hp_gpus"),
    ("stoker_gpu_pool_spot_gpus", "GPUs held by spot jobs", "spot_gpus"),
    ("stoker_spot_quota_gpus", "Spot quota of the GPU pool", "spot_quota"),
    ("stoker_spot_eta_ratio", "eta: the spot quota's feedback factor", "eta"),
    ("stoker_spot_eviction_rate_ratio", "Spot eviction rate over the last day", "eviction_rate_1d"),
)


def _by(name: str, doc: str, label: str, values: dict[str, float]) -> Metric:
    """A gauge family of one label, a sample per key in sorted order."""
    fam = GaugeMetricFamily(name, doc, labels=[label])
    for key, value in sorted(values.items()):
        fam.add_metric([key], float(value))
    return fam


class _Snapshot(Collector):
    """Gauges from a callable that reads the broker's state at scrape time."""

    def __init__(self, source: Callable[[], BrokerGauges]) -> None:
        self.source = source

    def describe(self) -> Iterable[Metric]:
        return self._families(BrokerGauges())

    def collect(self) -> Iterable[Metric]:
        return self._families(self.source())

    @staticmethod
    def _families(g: BrokerGauges) -> Iterator[Metric]:
        yield _by("stoker_queue_length", "Jobs waiting, by profile", "profile", g.queued)
        fam = GaugeMetricFamily(
            "stoker_pods", "Pods, by profile and state", labels=["profile", "state"]
        )
        for (profile, state), n in sorted(g.pods.items()):
            fam.add_metric([profile, state], n)
        yield fam
        yield _by(
            "stoker_gpu_seconds_held",
            "GPU-seconds held by pods, by pod state (accrued at each transition)",
            "state",
            g.held_seconds,
        )
        yield _by(
            "stoker_idle_gpus", "GPUs held by idle warm and standby pods", "state", g.idle_gpus
        )
        yield GaugeMetricFamily(
            "stoker_warm_budget_gpus", "GPUs idle pods may hold now (warm budget)", g.budget_gpus
        )
        yield GaugeMetricFamily(
            "stoker_capacity_gpus", "GPUs the broker schedules on", g.capacity_gpus
        )
        for name, doc, key in _GPU_POOL_GAUGES:
            fam = GaugeMetricFamily(name, doc, labels=["gpu_model"])
            for row in g.gpu_pools:
                fam.add_metric([row["gpu_model"]], float(row[key]))
            yield fam
        mean = GaugeMetricFamily(
            "stoker_hp_forecast_mean_gpus",
            "Forecast HP demand for the current hour: mean",
            labels=["gpu_model"],
        )
        quant = GaugeMetricFamily(
            "stoker_hp_forecast_quantile_gpus",
            "Forecast HP demand for the current hour: the g-quantile",
            labels=["gpu_model"],
        )
        queued = GaugeMetricFamily(
            "stoker_gpu_pool_queued_jobs",
            "Jobs waiting in the GPU pool, by class",
            labels=["gpu_model", "job_class"],
        )
        for row in g.gpu_pools:
            fc = row.get("forecast")
            if fc and fc.get("mean"):
                mean.add_metric([row["gpu_model"]], float(fc["mean"][0]))
                quant.add_metric([row["gpu_model"]], float(fc["quantile"][0]))
            for cls, n in sorted((row.get("queued") or {}).items()):
                queued.add_metric([row["gpu_model"], cls], float(n))
        yield mean
        yield quant
        yield queued
        yield _by(
            "stoker_storage_output_bytes",
            "Stored job output, by tenant (bounded by storage.output_budget_mb)",
            "tenant",
            g.stored_output,
        )
        yield _by(
            "stoker_broker_held_entries",
            "Entries the broker's loop holds per job or pod, by map (what is live, not what ran)",
            "map",
            g.held,
        )


class BrokerMetrics:
    """The broker's metrics: counters and histograms moved as the core decides, gauges read
    through :meth:`watch`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.started = Counter(
            "stoker_jobs_started_total",
            "Jobs started, by class and hit path (warm, standby, cold; none: hp and spot)",
            ["profile", "job_class", "path"],
            registry=r,
        )
        self.finished = Counter(
            "stoker_jobs_finished_total",
            "Jobs finished, by class, hit path (none: no warm-pool path) and outcome"
            " (ok or the typed failure)",
            ["profile", "job_class", "path", "outcome"],
            registry=r,
        )
        self.start_latency = Histogram(
            "stoker_job_start_seconds",
            "Placement (the core chose its pods: it stopped waiting) to the job's process"
            " first running, by class and hit path; the queue wait before is not in it",
            ["profile", "job_class", "path"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_wait = Histogram(
            "stoker_job_queue_wait_seconds",
            "Submit (or requeue) to the core placing the job on its pods, by class and the"
            " path it took (each run of a requeued job)",
            ["profile", "job_class", "path"],
            buckets=_WAIT_BUCKETS,
            registry=r,
        )
        self.handover = Histogram(
            "stoker_handover_seconds",
            "A job's end on a GPU to the next caller's waiting job running on that GPU",
            ["profile"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.pod_stops = Counter(
            "stoker_pod_stops_total",
            "Pods that ended, once each, by reason: the core's stop reason (keepalive, budget,"
            " reclaim, ...), recycle (scrubbed in place for another caller), a failure"
            " (pod_died, ...), or the broker's shutdown and orphan",
            ["profile", "reason"],
            registry=r,
        )
        self.code_uploads = Counter(
            "stoker_code_uploads_total",
            "Code archives received (POST /v1/code), by whether the broker had it already"
            " (stored: new or known)",
            ["stored"],
            registry=r,
        )
        self.preemptions = Counter(
            "stoker_spot_preemptions_total",
            "Spot jobs evicted for HP demand, by GPU pool",
            ["gpu_model"],
            registry=r,
        )
        self.pruned_jobs = Counter(
            "stoker_storage_pruned_jobs_total",
            "Finished jobs deleted by retention (storage.keep_days, keep_jobs), by tenant",
            ["tenant"],
            registry=r,
        )
        self.pruned_bytes = Counter(
            "stoker_storage_pruned_bytes_total",
            "Stored output deleted by retention, by tenant",
            ["tenant"],
            registry=r,
        )
        self.storage_refused = Counter(
            "stoker_storage_refused_total",
            "What bounded storage refused: output past a tenant's budget (budget, in jobs)"
            " or a submit on a nearly full disk (disk)",
            ["reason"],
            registry=r,
        )

    def watch(self, source: Callable[[], BrokerGauges]) -> None:
        """Serve the gauges ``source`` reads at every scrape."""
        self.registry.register(_Snapshot(source))

    def render(self) -> bytes:
        return generate_latest(self.registry)
