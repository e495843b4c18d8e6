"""hp and spot jobs in the one core (GFS): spot quota, placement, preemption, the ledger."""

from stoker.core.gfs.config import GFSConfig
from stoker.core.gfs.jobs import GuaranteeLedger
from stoker.core.gfs.scheduler import HpSpotScheduler

__all__ = ["GFSConfig", "GuaranteeLedger", "HpSpotScheduler"]
