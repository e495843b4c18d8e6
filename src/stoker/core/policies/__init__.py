"""Policies behind small interfaces; the Firepool behaviour is each one's default."""

from stoker.core.policies.budget import QueueDrivenBudget, StaticBudget, WarmBudget
from stoker.core.policies.keepalive import AlwaysOn, FittedKeepAlive, FixedKeepAlive, KeepAlive
from stoker.core.policies.matching import Matching, ReuseMatching
from stoker.core.policies.standby import BesideActive, NoStandby, StandbyPolicy

__all__ = [
    "AlwaysOn",
    "BesideActive",
    "FittedKeepAlive",
    "FixedKeepAlive",
    "KeepAlive",
    "Matching",
    "NoStandby",
    "QueueDrivenBudget",
    "ReuseMatching",
    "StandbyPolicy",
    "StaticBudget",
    "WarmBudget",
]
