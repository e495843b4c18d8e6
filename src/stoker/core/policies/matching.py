"""Matching: which idle pod, if any, a job may take without a cold start."""

from __future__ import annotations

from typing import Protocol


class Matching(Protocol):
    """``reuse``: may a job take an idle warm pod of its own (tenant, tag)?
    ``standby``: may it take a standby pod? ``pick_warm`` chooses among the caller's pods.
    ``may_reclaim``: with no free room, may a job stop another caller's idle pod for one of
    its own (``mine``: the pods its tenant holds of the profile, ``theirs``: the victim's
    tenant's)?"""

    reuse: bool
    standby: bool

    def pick_warm(self, candidates: dict[str, None]) -> str | None: ...

    def may_reclaim(self, mine: int, theirs: int, same_tenant: bool) -> bool: ...


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

    def may_reclaim(self, mine: int, theirs: int, same_tenant: bool) -> bool:
        """An equal split of a full profile between the tenants that hold its pods: another
        tenant's idle pod goes only while that tenant holds at least two more than the
        taker's tenant (so the two meet in the middle and stay there, instead of each
        round of one trainer taking every pod the other keeps warm for its next round).
        A tenant's own idle pods (another of its tags) it may always take. The tenants
        issue's shares replace the equal split here."""
        return same_tenant or mine + 1 < theirs
