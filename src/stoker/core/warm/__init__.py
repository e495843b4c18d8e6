"""Warm pools (Firepool): the part of the core that serves ``pool`` jobs.

:class:`~stoker.core.warm.pools.WarmPools` takes the events and returns the actions; it is
composed of the index of idle pods (:mod:`.idle`), the pool queues (:mod:`.queues`), the
read-only room planner (:mod:`.planner`) and the warm budget (:mod:`.budget`).
"""

from stoker.core.warm.pools import WarmPools

__all__ = ["WarmPools"]
