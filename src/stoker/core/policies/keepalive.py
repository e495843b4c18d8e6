"""Keep-alive: how long an idle warm pod waits for its caller before it is stopped."""

from __future__ import annotations

import bisect
import math
from collections import deque
from typing import Protocol

Pair = tuple[str, str]


FIXED_KEEPALIVE_S = 60.0
"""The fixed keep-alive of every preset that keeps pods, and the fitted one's fallback."""


class KeepAlive(Protocol):
    """Told when a caller's jobs end and when it submits again; answers a TTL per caller."""

    def observe_end(self, pair: Pair, now: float) -> None: ...

    def observe_submit(self, pair: Pair, now: float) -> None: ...

    def ttl(self, pair: Pair) -> float:
        """Seconds an idle pod of ``pair`` is kept; ``0`` stops it at once, ``inf`` never."""
        ...

    @property
    def first_ttl_s(self) -> float:
        """The TTL of a caller not yet seen."""
        ...


class FixedKeepAlive:
    """The same TTL for every caller (the default: simple, predictable)."""

    def __init__(self, ttl_s: float = FIXED_KEEPALIVE_S) -> None:
        if ttl_s < 0:
            raise ValueError("ttl_s must be >= 0")
        self.ttl_s = ttl_s

    def observe_end(self, pair: Pair, now: float) -> None:
        pass

    def observe_submit(self, pair: Pair, now: float) -> None:
        pass

    def ttl(self, pair: Pair) -> float:
        return self.ttl_s

    @property
    def first_ttl_s(self) -> float:
        return self.ttl_s


class AlwaysOn(FixedKeepAlive):
    """Never stop an idle pod for time alone (the budget may still stop it)."""

    def __init__(self) -> None:
        super().__init__(math.inf)


class FittedKeepAlive:
    """Per caller, keep a pod just past the pause that covers ``quantile`` of its pauses.

    A pause is the time from one of the caller's jobs ending to the caller's next submit;
    ends are matched to submits first in, first out, so a batch of rollouts that ends over
    a few seconds and comes back after a training step yields one pause per pod. Until
    ``min_samples`` pauses are seen the fallback TTL applies. The TTL is
    ``quantile(pauses) * margin + slack_s``, capped at ``max_ttl_s``; ends never followed
    by a submit within ``max_ttl_s`` are dropped (a loop that stopped is not a pause). At
    most ``max_pairs`` callers are remembered: the one seen least recently is dropped first
    (it starts again from the fallback), so one-off reuse tags cannot grow it without end.
    """

    def __init__(
        self,
        quantile: float = 0.95,
        margin: float = 1.1,
        slack_s: float = 1.0,
        min_samples: int = 8,
        window: int = 256,
        fallback_s: float = FIXED_KEEPALIVE_S,
        max_ttl_s: float = 3600.0,
        max_pairs: int = 50_000,
    ) -> None:
        if not 0.0 < quantile <= 1.0:
            raise ValueError("quantile must be in (0, 1]")
        self.quantile = quantile
        self.margin = margin
        self.slack_s = slack_s
        self.min_samples = min_samples
        self.window = window
        self.fallback_s = fallback_s
        self.max_ttl_s = max_ttl_s
        self.max_pairs = max_pairs
        self._ends: dict[Pair, deque[float]] = {}
        self._pauses: dict[Pair, deque[float]] = {}
        self._sorted: dict[Pair, list[float]] = {}
        self._cache: dict[Pair, float] = {}

    def observe_end(self, pair: Pair, now: float) -> None:
        ends = self._ends.pop(pair, None) or deque()  # back in last: the most recent
        ends.append(now)
        while ends and now - ends[0] > self.max_ttl_s:
            ends.popleft()
        self._ends[pair] = ends
        if len(self._ends) > self.max_pairs:
            del self._ends[next(iter(self._ends))]

    def observe_submit(self, pair: Pair, now: float) -> None:
        ends = self._ends.get(pair)
        while ends and now - ends[0] > self.max_ttl_s:
            ends.popleft()
        if not ends:
            self._ends.pop(pair, None)
            return
        self._add(pair, now - ends.popleft())

    def _add(self, pair: Pair, pause: float) -> None:
        pauses = self._pauses.pop(pair, None) or deque()  # back in last: the most recent
        self._pauses[pair] = pauses
        if len(self._pauses) > self.max_pairs:
            old = next(iter(self._pauses))
            del self._pauses[old], self._sorted[old]
            self._cache.pop(old, None)
        ordered = self._sorted.setdefault(pair, [])
        pauses.append(pause)
        bisect.insort(ordered, pause)
        if len(pauses) > self.window:
            old = pauses.popleft()
            del ordered[bisect.bisect_left(ordered, old)]
        self._cache.pop(pair, None)

    def pauses(self, pair: Pair) -> list[float]:
        """The pauses currently in the window for ``pair`` (sorted)."""
        return list(self._sorted.get(pair, []))

    @property
    def first_ttl_s(self) -> float:
        return self.fallback_s

    def ttl(self, pair: Pair) -> float:
        cached = self._cache.get(pair)
        if cached is not None:
            return cached
        ordered = self._sorted.get(pair, [])
        if len(ordered) < self.min_samples:
            return self.fallback_s
        # nearest-rank quantile: the smallest pause with at least q of the samples at or below
        rank = max(0, math.ceil(self.quantile * len(ordered)) - 1)
        value = min(self.max_ttl_s, ordered[rank] * self.margin + self.slack_s)
        self._cache[pair] = value
        return value
