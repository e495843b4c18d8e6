"""GFS in the core: HP and spot gang jobs, spot quota, placement and preemption policies."""

from stoker.core.gfs.baselines import PAPER_BASELINES, POLICIES, PolicySpec, policy
from stoker.core.gfs.jobs import Gang, GangSpec, GangState, GFSJobError, GuaranteeLedger
from stoker.core.gfs.scheduler import (
    EvictGang,
    ForecastUpdated,
    GangCompleted,
    GangSubmitted,
    GFSConfig,
    GFSScheduler,
    PoolEvent,
    StartGang,
    Tick,
)

__all__ = [
    "PAPER_BASELINES",
    "POLICIES",
    "EvictGang",
    "ForecastUpdated",
    "GFSConfig",
    "GFSJobError",
    "GFSScheduler",
    "Gang",
    "GangCompleted",
    "GangSpec",
    "GangState",
    "GangSubmitted",
    "GuaranteeLedger",
    "PolicySpec",
    "PoolEvent",
    "StartGang",
    "Tick",
    "policy",
]
