"""The failure memo: a search for room that changed nothing is not repeated for nothing.

An HP job that fits nowhere would otherwise be searched again on every event of its GPU pool
(an HP backlog holds thousands). A failed search is remembered with what it read: its
GPU pool's ``grown`` counter (moved only when room a failed search could use appears: cards
freed, a spot job placed or running as a victim, a pod ready, a node joining or leaving),
the warm pools' idle epoch, and whether the window's gate lets HP preempt; until one moves
the same search fails alike. A start takes room and a release leaves its cards held until
its pods are gone, so neither makes a failed search succeed.
"""

from __future__ import annotations

from stoker.core.gfs.asreleased import fewest_workers
from stoker.core.gfs.config import GFSConfig
from stoker.core.gfs.nodes import NodeIndex
from stoker.core.model import Job
from stoker.core.ports import IdleRoom

State = tuple[int, int, bool]


class SearchMemo:
    """Per job, the state its last failed search read, apart for a search that may not
    evict (free room and idle pods only: a job backfilled under ``reservation.backfill_free``,
    or waiting out ``hp_evict_after_s``), whose failure says nothing of one that may."""

    def __init__(self, index: NodeIndex, idle: IdleRoom, config: GFSConfig) -> None:
        self.index = index
        self.idle = idle
        self.config = config
        self._failed: dict[str, State] = {}
        self._failed_free: dict[str, State] = {}

    def state(self, gpu_pool: str, now: float) -> State:
        """What a search for room in ``gpu_pool`` reads: the GPU pool's growth, the warm
        pools' (idle pods anywhere), and whether the window's gate lets HP preempt yet."""
        gate = self.config.window
        return (self.index.grown[gpu_pool], self.idle.epoch, gate is None or now >= gate[0])

    def failed(self, job_id: str, state: State, evict: bool = True) -> bool:
        """Whether the same search failed in this state (one that could evict says the one
        without eviction fails too)."""
        return self._failed.get(job_id) == state or (
            not evict and self._failed_free.get(job_id) == state
        )

    def remember(self, job_id: str, gpu_pool: str, state: State, now: float, evict: bool) -> None:
        """A search that found neither free room nor anything to reclaim changed nothing:
        remembered if the state it read still holds."""
        if self.state(gpu_pool, now) == state:
            (self._failed if evict else self._failed_free)[job_id] = state

    def forget(self, job_id: str) -> None:
        """The job started or left the queue: its failed searches are void."""
        self._failed.pop(job_id, None)
        self._failed_free.pop(job_id, None)

    def no_room(self, job: Job, gpu_pool: str) -> bool:
        """Whether a whole-GPU HP job's search must fail, by the GPU pool's reclaim room alone.

        Each of its workers takes a node's free cards, its idle pods' cards and the cards
        its spot work alone holds and no other (free-room placement, and the reclaim
        planner's node candidates: a node is one only while those cover the request beside
        what earlier workers took there), so a node holds at most (free + spot + idle
        cards) // request of them. With no idle pod in the GPU pool,
        :meth:`GpuPoolIndex.reclaim_slots` bounds that sum: under the job's workers, its
        search (free room, then reclaim) would find nothing and change nothing. It spares
        the searches the memo does not: a blocked head's GPU pool grows at every release, most
        of them freeing fewer cards than it needs (an HP backlog)."""
        if job.fractional or self.idle.idle_nodes(gpu_pool):
            return False
        slots = self.index.gpu_pools[gpu_pool].reclaim_slots(int(job.per_worker))
        return slots < fewest_workers(job, self.config)
