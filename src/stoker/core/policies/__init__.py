"""Policies behind small interfaces; the Firepool behaviour is each one's default."""

from stoker.core.policies.budget import (
    KeepAliveCap,
    QueueDrivenBudget,
    StaticBudget,
    WarmBudget,
    WarmCap,
)
from stoker.core.policies.keepalive import AlwaysOn, FittedKeepAlive, FixedKeepAlive, KeepAlive
from stoker.core.policies.matching import Matching, ReuseMatching
from stoker.core.policies.standby import BesideActive, NoStandby, StandbyPolicy

__all__ = [
    "AlwaysOn",
    "BesideActive",
    "FittedKeepAlive",
    "FixedKeepAlive",
    "KeepAlive",
    "KeepAliveCap",
    "Matching",
    "NoStandby",
    "QueueDrivenBudget",
    "ReuseMatching",
    "StandbyPolicy",
    "StaticBudget",
    "WarmBudget",
    "WarmCap",
]
