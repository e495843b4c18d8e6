"""Warm budget: the cap on GPUs that idle warm and standby pods may hold."""

from __future__ import annotations

import math
from typing import Protocol

from stoker.core.model import Pod, PodState


class WarmBudget(Protocol):
    """Answers the cap now and which idle pod is worth least."""

    def limit(self, capacity_gpus: float, queued_gpus: float) -> float:
        """GPUs idle pods may hold, given the cluster's capacity and the GPUs queued jobs want."""
        ...

    def value(self, pod: Pod, now: float) -> float:
        """How much keeping an idle pod is worth; the lowest go first when over budget."""
        ...


class StaticBudget:
    """A fixed cap: ``fraction`` of capacity (or ``gpus`` if given), whatever the queues."""

    def __init__(
        self, fraction: float = 1.0, gpus: float | None = None, standby_value_s: float = 600.0
    ) -> None:
        self.fraction = fraction
        self.gpus = gpus
        self.standby_value_s = standby_value_s

    def _base(self, capacity_gpus: float) -> float:
        return self.gpus if self.gpus is not None else self.fraction * capacity_gpus

    def limit(self, capacity_gpus: float, queued_gpus: float) -> float:
        return self._base(capacity_gpus)

    def value(self, pod: Pod, now: float) -> float:
        # A warm pod is worth the keep-alive it has left (it serves one caller); a standby
        # serves any caller, so it is worth a fixed, generous amount.
        if pod.state is PodState.WARM:
            left = pod.deadline - now
            return left if not math.isinf(left) else 1e12 - (now - pod.idle_since)
        return self.standby_value_s


class QueueDrivenBudget(StaticBudget):
    """The cap falls by the GPUs queued jobs wait for and is restored as the queues drain.

    Stopping idle pods when jobs wait moves the pod teardown off the waiting job's path;
    ``floor`` GPUs stay allowed whatever the queue, so a burst never wipes every warm pod.
    """

    def __init__(
        self,
        fraction: float = 1.0,
        gpus: float | None = None,
        floor: float = 0.0,
        standby_value_s: float = 600.0,
    ) -> None:
        super().__init__(fraction, gpus, standby_value_s)
        self.floor = floor

    def limit(self, capacity_gpus: float, queued_gpus: float) -> float:
        return max(self.floor, self._base(capacity_gpus) - queued_gpus)


class WarmCap(Protocol):
    """How a GPU pool's HP forecast bounds the warm budget there (the one capacity model):
    the GPUs idle warm and standby pods of that GPU pool may hold, or None for no bound; idle
    pods already held over the bound are stopped, least valuable first.
    """

    name: str

    def cap(
        self,
        capacity: float,
        hp_used: float,
        mean: float,
        sd: float,
        z: float,
        horizon_s: float,
    ) -> float | None:
        """GPUs idle pods of one GPU pool may hold, from its ``capacity``, the HP GPUs
        running there now (``hp_used``), the summed forecast of the next hour's HP demand
        (``mean``, ``sd``), the normal quantile ``z`` of the spot quota's g, and how long
        the idle pods there may yet hold their cards by keep-alive (``horizon_s``)."""
        ...


class KeepAliveCap:
    """Idle pods hold at most capacity minus what HP holds now and the g-quantile of its
    growth within their keep-alive (``horizon_s``, from the core: the latest keep-alive
    deadline of the GPU pool's warm pods, at most an hour): HP is not forecast to need more
    before they expire, and what it needs later it reclaims from them when it comes.

    Our model of the growth within the horizon (a fraction ``f = horizon / 1 h`` of the
    forecast's hour): the expected growth scales with ``f`` (HP arrivals spread over the
    hour), its spread with ``sqrt(f)`` (a random walk over the hour), so
    ``need = hp_used + max(0, mean - hp_used) f + z sd sqrt(f)``.
    """

    name = "keepalive"

    def cap(
        self,
        capacity: float,
        hp_used: float,
        mean: float,
        sd: float,
        z: float,
        horizon_s: float,
    ) -> float | None:
        f = min(1.0, horizon_s / 3600.0)
        need = hp_used + max(0.0, mean - hp_used) * f + z * sd * math.sqrt(f)
        return max(0.0, capacity - need)
