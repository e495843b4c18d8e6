"""Standby: where zero-VRAM standby pods are staged."""

from __future__ import annotations

from typing import Protocol

from stoker.core.model import Profile


class StandbyPolicy(Protocol):
    """Says whether to stage a standby pod beside a pod of ``profile`` that just went active."""

    def wants(self, profile: Profile, standby_count: int) -> bool: ...


class BesideActive:
    """Firepool: one standby in a fractional share beside every active pod that has room,
    up to ``max_per_profile`` standby pods per profile (and always within the warm budget)."""

    def __init__(self, max_per_profile: int | None = None) -> None:
        self.max_per_profile = max_per_profile

    def wants(self, profile: Profile, standby_count: int) -> bool:
        if not profile.standby_enabled:
            return False
        return self.max_per_profile is None or standby_count < self.max_per_profile


class NoStandby:
    """Never stage standby pods (baselines)."""

    def wants(self, profile: Profile, standby_count: int) -> bool:
        return False
