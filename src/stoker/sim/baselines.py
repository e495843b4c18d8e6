"""Baselines as :class:`~stoker.core.pool.Policies` configurations of the one core, not forks.

Each name is what the Firepool paper compares against; ``firepool`` is the default
(warm reuse, standby pods beside active ones, queue-driven budget, fixed keep-alive).

Queue pressure lowers the warm budget but never stops a standby staged beside a busy pod
(the core's ``budget_limit``): that is when a standby is the fastest way onto a GPU.
"""

from __future__ import annotations

from collections.abc import Callable

from stoker.core import Policies
from stoker.core.policies import (
    AlwaysOn,
    BesideActive,
    FittedKeepAlive,
    FixedKeepAlive,
    NoStandby,
    QueueDrivenBudget,
    ReuseMatching,
)

FIXED_KEEPALIVE_S = 60.0
"""The fixed keep-alive of every baseline that keeps pods (the core's default)."""


def fresh_pod() -> Policies:
    """A fresh pod per job: never reuse, stop the pod when its job ends, no standby."""
    return Policies(
        matching=ReuseMatching(reuse=False, standby=False),
        keepalive=FixedKeepAlive(0.0),
        standby=NoStandby(),
    )


def fresh_tag() -> Policies:
    """A fresh reuse tag per job: pods linger warm for the fixed keep-alive, but no job may
    take one (a new tag never matches), and no standby."""
    return Policies(
        matching=ReuseMatching(reuse=False, standby=False),
        keepalive=FixedKeepAlive(FIXED_KEEPALIVE_S),
        standby=NoStandby(),
    )


def warm_reuse() -> Policies:
    """Warm reuse of the caller's own pod, fixed keep-alive, no standby pods."""
    return Policies(
        matching=ReuseMatching(reuse=True, standby=False),
        keepalive=FixedKeepAlive(FIXED_KEEPALIVE_S),
        standby=NoStandby(),
    )


def firepool() -> Policies:
    """The Firepool default: warm reuse, standby beside active pods, fixed keep-alive."""
    return Policies(
        matching=ReuseMatching(reuse=True, standby=True),
        keepalive=FixedKeepAlive(FIXED_KEEPALIVE_S),
        budget=QueueDrivenBudget(),
        standby=BesideActive(),
    )


def always_on() -> Policies:
    """Firepool with idle pods never stopped for time (only the budget stops them)."""
    policies = firepool()
    policies.keepalive = AlwaysOn()
    return policies


def fitted() -> Policies:
    """Firepool with keep-alive fitted per caller to its observed pauses."""
    policies = firepool()
    policies.keepalive = FittedKeepAlive()
    return policies


def build(name: str) -> Policies:
    """The named baseline's policies."""
    factory = BASELINES.get(name)
    if factory is None:
        raise ValueError(f"policy: unknown {name!r} (known: {', '.join(BASELINES)})")
    return factory()


BASELINES: dict[str, Callable[..., Policies]] = {
    "fresh_pod": fresh_pod,
    "fresh_tag": fresh_tag,
    "warm_reuse": warm_reuse,
    "firepool": firepool,
    "fixed": firepool,
    "always_on": always_on,
    "fitted": fitted,
}
"""Every policy configuration by name; each call builds fresh, unshared policy objects."""
