"""What each part of the core may ask of the other: two narrow interfaces, wired once.

The hp/spot scheduler reclaims idle warm and standby pods (free room for HP) through
:class:`IdleRoom`; the warm pools keep clear of the nodes an HP job has reserved and of the
room being freed for one through :class:`HpRoom`. Neither part holds the other or the
core; :class:`~stoker.core.core.Core` hands each the other's port when it builds them.
"""

from __future__ import annotations

from typing import Protocol

from stoker.core.actions import Action
from stoker.core.model import Pod


class IdleRoom(Protocol):
    """The warm pools' idle pods as room HP may take (the hp/spot scheduler's view)."""

    @property
    def epoch(self) -> int:
        """Moves on whenever the idle pods change anywhere (a search's memo key)."""
        ...

    def idle_cards(self, model: str) -> dict[str, list[tuple[tuple[int, float], str]]]:
        """Per node of GPU pool ``model``: the cards idle pods alone hold, cheapest first."""
        ...

    def idle_nodes(self, model: str) -> list[str]:
        """Nodes of GPU pool ``model`` with idle pods, in name order."""
        ...

    def idle_share(self, gid: str) -> tuple[float, list[Pod]]:
        """The share idle pods hold on one card, and those pods (cheapest first)."""
        ...

    def reclaim(self, pod: Pod, now: float, out: list[Action]) -> None:
        """Stop an idle pod for HP demand."""
        ...

    def refresh_cards(self, gpus: list[str]) -> None:
        """Another part's pod took or left these cards."""
        ...


class HpRoom(Protocol):
    """The hp/spot scheduler's holds on room (the warm pools' view)."""

    def reserved_nodes(self, gpu_pool: str) -> frozenset[str]:
        """Nodes of GPU pool ``gpu_pool`` reserved for a waiting HP job."""
        ...

    def freeing_room(self, gpu_pool: str) -> bool:
        """Whether pods of GPU pool ``gpu_pool`` are stopping to make room for an HP job."""
        ...
