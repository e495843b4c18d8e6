"""Matching: which idle pod, if any, a job may take without a cold start."""

from __future__ import annotations

from typing import Protocol


class Matching(Protocol):
    """``reuse``: may a job take an idle warm pod of its own (tenant, tag)?
    ``standby``: may it take a standby pod? ``pick_warm`` chooses among the caller's pods."""

    reuse: bool
    standby: bool

    def pick_warm(self, candidates: dict[str, None]) -> str | None: ...


class ReuseMatching:
    """Firepool matching: warm pod of the same caller, else standby, else cold.

    Among a caller's idle pods the most recently idle is taken, so the older ones reach
    their keep-alive deadline and free capacity.
    """

    def __init__(self, reuse: bool = True, standby: bool = True) -> None:
        self.reuse = reuse
        self.standby = standby

    def pick_warm(self, candidates: dict[str, None]) -> str | None:
        if not self.reuse or not candidates:
            return None
        return next(reversed(candidates))
