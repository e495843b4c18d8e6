"""The core's configuration: one :class:`Policies` holding every named extension point.

Presets by name are in :mod:`stoker.core.registry`; one implementation per name at each
extension point, for a driver's configuration, in :mod:`stoker.core.policy_names`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stoker.core.gfs.config import GFSConfig
from stoker.core.policies import (
    BesideActive,
    FixedKeepAlive,
    KeepAlive,
    KeepAliveCap,
    Matching,
    QueueDrivenBudget,
    ReuseMatching,
    StandbyPolicy,
    WarmBudget,
    WarmCap,
)
from stoker.core.shares import TenantShares


@dataclass
class ProfilePolicies:
    """One profile's own warm-pool settings: its keep-alive (None: the core's) and its
    minimum warm count, the spare pods kept ready for callers not yet seen (started by the
    core, kept without a keep-alive, counted against the warm budget)."""

    keepalive: KeepAlive | None = None
    min_warm: int = 0

    def __post_init__(self) -> None:
        if self.min_warm < 0:
            raise ValueError(f"min_warm: must be >= 0, got {self.min_warm}")


@dataclass
class Policies:
    """Every named extension point of the core; the defaults are Firepool's and GFS's.

    Warm pools: ``matching`` (warm and standby matching), ``keepalive``, ``budget`` (warm
    budget), ``warm_cap`` (how each GPU pool's HP forecast bounds the warm budget there),
    ``standby`` (standby staging). hp/spot: ``hpspot`` holds queue order, placement
    scoring, spot quota and reclaim (victim choice) with their parameters. ``profiles``:
    per profile name, its own keep-alive and minimum warm count. ``shares``: tenants'
    weights, guaranteed HP GPUs and caps (:mod:`stoker.core.shares`; None: every queue in
    submit order, no tenant capped). Presets by name: :mod:`stoker.core.registry`.
    """

    matching: Matching = field(default_factory=ReuseMatching)
    keepalive: KeepAlive = field(default_factory=FixedKeepAlive)
    budget: WarmBudget = field(default_factory=QueueDrivenBudget)
    standby: StandbyPolicy = field(default_factory=BesideActive)
    hpspot: GFSConfig = field(default_factory=GFSConfig)
    profiles: dict[str, ProfilePolicies] = field(default_factory=dict)
    warm_cap: WarmCap = field(default_factory=KeepAliveCap)
    shares: TenantShares | None = None
