"""The hp/spot part's index of nodes and GPU pools, and placement on free room.

Per node a :class:`~stoker.core.gfs.placement.NodeInfo` (free cards, cards without HP,
the cards spot work holds) and per GPU pool a :class:`~stoker.core.gfs.placement.GpuPoolIndex`
of its nodes by room, kept in step with the cluster's cards: every part marks the nodes it
touches on the cluster and :meth:`NodeIndex.sync` refreshes them. The two counters per
GPU pool are what the scheduler's failure memo keys on: ``epoch`` moves with any change of a
GPU pool's books, ``grown`` only when a failed search could now succeed.
"""

from __future__ import annotations

from stoker.core.books import Books
from stoker.core.gfs.config import GFSConfig
from stoker.core.gfs.placement import GangPlan, GpuPoolIndex, NodeInfo
from stoker.core.model import EPS, Job, JobClass, Node

_SPOT = JobClass.SPOT

Placement = list[tuple[str, tuple[str, ...], float]]  # (node, cards, share) per worker


class NodeIndex:
    """Nodes and GPU pools as the hp/spot scheduler reads them; see the module docstring.

    ``node_jobs``: the spot jobs on each node, with the cards each holds there.
    ``busy_cards``: cards holding any share now (the authors' allocation metric).
    """

    def __init__(self, books: Books, config: GFSConfig) -> None:
        self.books = books
        self.cluster = books.cluster
        self.config = config
        self.nodes: dict[str, NodeInfo] = {}
        self.gpu_pools: dict[str, GpuPoolIndex] = {}
        self.node_jobs: dict[str, dict[str, list[str]]] = {}
        self.epoch: dict[str, int] = {}
        self.grown: dict[str, int] = {}
        self.busy_cards = 0
        self._ordinals = 0

    def add(self, node: Node) -> bool:
        """Index a node that joined; True when its GPU pool is new."""
        gpu_pool = node.gpu_model
        new = gpu_pool not in self.gpu_pools
        if new:
            self.gpu_pools[gpu_pool] = GpuPoolIndex(gpu_pool, 0)
            self.epoch[gpu_pool] = 0
            self.grown[gpu_pool] = 0
        info = NodeInfo(node.name, gpu_pool, self._ordinals, len(node.gpus))
        self._ordinals += 1
        info.full_free = sum(1 for g in node.gpus if g.used < EPS)
        self.nodes[node.name] = info
        self.gpu_pools[gpu_pool].add(info)
        self.node_jobs[node.name] = {}
        self.busy_cards += info.total - info.full_free
        return new

    def remove(self, name: str) -> NodeInfo:
        """Drop a node that left (nothing of hp or spot is placed there any more)."""
        info = self.gpu_pools[self.nodes.pop(name).gpu_pool].remove(name)
        self.busy_cards -= info.total - info.full_free
        del self.node_jobs[name]
        return info

    def resize(self, info: NodeInfo) -> None:
        """A node's cards changed in place: its GPU pool's index follows."""
        total = len(self.cluster.nodes[info.name].gpus)
        self.busy_cards += total - info.total  # busy = total - full_free, refreshed below
        self.gpu_pools[info.gpu_pool].resize(info, total)
        self.refresh(info, grown=True)

    def sync(self) -> list[str]:
        """Refresh the nodes whose shares changed since the last look (by any part); the
        GPU pools where cards were freed, in the order their nodes were touched."""
        touched = self.cluster.touched
        freed_in: list[str] = []
        if touched:
            for node, freed in touched.items():
                info = self.nodes[node]
                self.refresh(info, grown=freed)
                if freed:
                    freed_in.append(info.gpu_pool)
            touched.clear()
        return freed_in

    def refresh(self, info: NodeInfo, grown: bool = False) -> None:
        """The node's free-count bucket follows its cards; ``grown``: a failed search
        there may succeed now."""
        self.epoch[info.gpu_pool] += 1
        if grown:
            self.grown[info.gpu_pool] += 1
        free = sum(1 for g in self.cluster.nodes[info.name].gpus if g.used < EPS)
        self.busy_cards += info.full_free - free
        info.frac_cards = self.frac_cards(info)
        self.gpu_pools[info.gpu_pool].move(info, free)

    def frac_cards(self, info: NodeInfo) -> frozenset[str]:
        """The node's cards held by fractional spot work and nothing else: a whole-GPU HP
        worker may take one by evicting every job on it (cards with HP, idle pods or room
        only are not). None without ``evict_shared_cards``. Kept on the node by
        :meth:`refresh` (``NodeInfo.frac_cards``)."""
        if not self.config.evict_shared_cards:
            return frozenset()
        jobs = self.books.jobs
        shared = {
            gid
            for jid, mine in self.node_jobs[info.name].items()
            if jobs[jid].fractional
            for gid in mine
        }
        gpus, pods = self.cluster.gpus, self.books.pods
        return frozenset(
            gid
            for gid in shared
            if (allocs := gpus[gid].allocs)
            and all(
                (pod := pods.get(owner)) is not None and pod.job_class is _SPOT for owner in allocs
            )
        )

    def plan_free(
        self, job: Job, gpu_pool: str, now: float, blocked: frozenset[str]
    ) -> tuple[Placement | None, tuple[GangPlan, int] | None]:
        """(node, cards, share) for every worker of ``job`` on free capacity, off the
        ``blocked`` nodes, or None (all or nothing); and for a whole-GPU gang that found no
        room, its plan so far and the worker that found none (None otherwise)."""
        need = job.per_worker
        if job.fractional:
            # each worker takes the first card of the tightest-first walk with room beside
            # the earlier workers; a card passed over stays too full for every later one,
            # so the next worker's card is at or after this one's: one walk for the gang
            # (a walk per worker was quadratic in its workers)
            plan = []
            workers = job.workers
            for gpu in self.cluster.gpus_with_room(gpu_pool, need):
                if gpu.node in blocked:
                    continue
                taken = 0.0
                while gpu.free - taken >= need - EPS:
                    taken += need
                    plan.append((gpu.node, (gpu.id,), need))
                    if len(plan) == workers:
                        return plan, None
            return None, None
        count = int(need)
        gang = GangPlan(self.gpu_pools[gpu_pool], exclude=blocked)
        nodes: list[str] = []
        for worker in range(job.workers):
            node = self.config.scorer.choose(gang, job.job_class, count, now)
            if node is None:
                return None, (gang, worker)
            gang.take(node, count)
            nodes.append(node)
        return self._cards(nodes, count), None

    def _cards(self, nodes: list[str], count: int) -> Placement:
        """Whole free cards for one worker per entry of ``nodes``."""
        plan = []
        used: dict[str, int] = {}
        for node in nodes:
            free = [g.id for g in self.cluster.nodes[node].gpus if g.used < EPS]
            at = used.get(node, 0)
            cards = tuple(free[at : at + count])
            if len(cards) < count:
                raise AssertionError(f"node {node}: planned {count} GPUs, {len(free)} free")
            used[node] = at + count
            plan.append((node, cards, 1.0))
        return plan
