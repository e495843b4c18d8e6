"""The GFS core: HP and spot gang jobs over a :class:`~stoker.core.model.Cluster`.

Events in, actions out, pure: no I/O, no clock (``now`` is passed in), no randomness. The
decisions are policies (:class:`GFSConfig`): spot quota, node score, victim choice, queue
order; the baselines in :mod:`stoker.core.gfs.baselines` are other settings of the same
parts. An optional pool :class:`~stoker.core.pool.Core` shares the cluster: before any spot
job is evicted for HP work, its idle standby and warm pods on the chosen node give way.
"""

from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from stoker.core.actions import Action, StartPod, StopPod
from stoker.core.events import Event, PodGone
from stoker.core.gfs.jobs import (
    CHECKPOINT_S,
    Gang,
    GangSpec,
    GangState,
    GFSJobError,
    GuaranteeLedger,
    restart_overhead,
)
from stoker.core.gfs.placement import GFSScorer, NodeInfo, NodeScorer, PoolIndex
from stoker.core.gfs.preemption import Candidate, GFSVictims, PreemptContext, VictimChooser
from stoker.core.gfs.quota import ForecastQuota, QuotaPolicy
from stoker.core.model import EPS, Cluster
from stoker.core.pool import Core

HOUR_S = 3600.0


# ---------------------------------------------------------------- events and actions


@dataclass(frozen=True, slots=True)
class GangSubmitted:
    """A job arrives."""

    spec: GangSpec


@dataclass(frozen=True, slots=True)
class GangCompleted:
    """The driver's clock reached a running job's ``StartGang.finish_at`` (a stale one, for a
    run since evicted, is ignored)."""

    job: str


@dataclass(frozen=True, slots=True)
class ForecastUpdated:
    """The summed forecast of a pool's HP hourly peaks: mean and variance per hour ahead."""

    pool: str
    mean: tuple[float, ...]
    var: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed: eta feedback, Chronus rounds and leases."""


@dataclass(frozen=True, slots=True)
class PoolEvent:
    """An event for the pool core sharing the cluster (its runtime's reports)."""

    event: Event


GFSEvent = GangSubmitted | GangCompleted | ForecastUpdated | Tick | PoolEvent


@dataclass(frozen=True, slots=True)
class StartGang:
    """Run every worker of a job: ``placement`` is (node, gpu, share) per card; the run ends
    at ``finish_at`` unless evicted first."""

    job: str
    placement: tuple[tuple[str, str, float], ...]
    finish_at: float


@dataclass(frozen=True, slots=True)
class EvictGang:
    """Stop every worker of a spot job; it is back in its queue."""

    job: str
    reason: str
    by: str


GFSAction = StartGang | EvictGang | Action


# ---------------------------------------------------------------- configuration


@dataclass
class GFSConfig:
    """The decisions and their parameters; the defaults are GFS's.

    ``queue``: ``size`` (GFS: largest per-worker request first, then workers, then submit
    time, with backfill of smaller sizes) or ``fifo``; ``hol_blocking`` stops a pass at the
    first job that does not fit (YARN-CS). ``min_runtime_s``: spot younger than this is not
    evictable. ``round_s``/``lease_s``: Chronus's scheduling rounds and leases.
    ``oversize_alone``: a spot job larger than the (fixed) quota may start while no other
    spot job runs in its pool, so it does not wait forever (static quota).
    """

    name: str = "gfs"
    quota: QuotaPolicy = field(default_factory=ForecastQuota)
    scorer: NodeScorer = field(default_factory=GFSScorer)
    victims: VictimChooser = field(default_factory=GFSVictims)
    queue: str = "size"
    hol_blocking: bool = False
    g: float = 0.9
    guarantee_s: float = 3600.0
    checkpoint_s: float = CHECKPOINT_S
    rate_window_s: float = 86400.0  # eviction rate and lost work in the node cost
    eta_every_s: float = 3600.0  # eta feedback cadence; e is measured since the last step
    min_runtime_s: float = 0.0
    round_s: float = 0.0
    lease_s: float = 0.0
    lease_restart_s: float = 120.0
    oversize_alone: bool = False  # a spot job above the quota may run when no spot runs

    def __post_init__(self) -> None:
        if self.queue not in ("size", "fifo"):
            raise ValueError(f"queue must be size or fifo, got {self.queue!r}")
        for name in ("guarantee_s", "checkpoint_s", "rate_window_s", "eta_every_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")


# ---------------------------------------------------------------- queues


class _Queue:
    """One class's queue in one pool: a heap per size class, size classes in order.

    Only a class's head can be tried (later jobs of the same size fail the same way), so a
    pass costs the number of size classes plus the jobs it starts.
    """

    def __init__(self, fifo: bool) -> None:
        self.fifo = fifo
        self.keys: list[tuple[float, int]] = []
        self.heaps: dict[tuple[float, int], list[tuple[float, str]]] = {}
        self.size = 0

    def key(self, spec: GangSpec) -> tuple[float, int]:
        return (0.0, 0) if self.fifo else (-spec.per_worker, -spec.worker_num)

    def push(self, gang: Gang, at: float | None = None) -> None:
        """Queue by submit time (an evicted job keeps its place), or by ``at``."""
        k = self.key(gang.spec)
        heap = self.heaps.get(k)
        if heap is None:
            heap = self.heaps[k] = []
            bisect.insort(self.keys, k)
        heapq.heappush(heap, (gang.submitted if at is None else at, gang.id))
        self.size += 1

    def pop(self, k: tuple[float, int]) -> None:
        heap = self.heaps[k]
        heapq.heappop(heap)
        self.size -= 1
        if not heap:
            del self.heaps[k]
            self.keys.remove(k)

    def heads(self) -> list[tuple[tuple[float, int], str]]:
        return [(k, self.heaps[k][0][1]) for k in list(self.keys)]


# ---------------------------------------------------------------- the scheduler


class GFSScheduler:
    """HP/spot scheduling over one cluster; see the module docstring."""

    def __init__(
        self,
        cluster: Cluster,
        config: GFSConfig | None = None,
        pool_core: Core | None = None,
        start: float = 0.0,
    ) -> None:
        self.cluster = cluster
        self.config = config or GFSConfig()
        self.pool_core = pool_core
        self.jobs: dict[str, Gang] = {}
        self.finished: dict[str, Gang] = {}
        self.nodes: dict[str, NodeInfo] = {}
        self.pools: dict[str, PoolIndex] = {}
        for ordinal, node in enumerate(cluster.nodes.values()):
            index = self.pools.get(node.gpu_model)
            if index is None:
                index = self.pools[node.gpu_model] = PoolIndex(node.gpu_model, 0)
            info = NodeInfo(node.name, node.gpu_model, ordinal, len(node.gpus))
            info.full_free = sum(1 for g in node.gpus if g.used < EPS)
            self.nodes[node.name] = info
        for model, index in self.pools.items():
            index.max_gpus = max(i.total for i in self.nodes.values() if i.pool == model)
            index.by_free = [{} for _ in range(index.max_gpus + 1)]
        for info in self.nodes.values():
            self.pools[info.pool].add(info)
        self.capacity: dict[str, int] = dict(cluster.capacity)
        fifo = self.config.queue == "fifo"
        self.queues: dict[str, dict[str, _Queue]] = {
            p: {"hp": _Queue(fifo), "spot": _Queue(fifo)} for p in self.pools
        }
        self.used: dict[str, dict[str, float]] = {p: {"hp": 0.0, "spot": 0.0} for p in self.pools}
        self.ledgers: dict[str, GuaranteeLedger] = {p: GuaranteeLedger() for p in self.pools}
        zero = np.zeros(max(1, math.ceil(self.config.guarantee_s / HOUR_S)))
        self.quota: dict[str, float] = {
            p: self.config.quota.quota(p, zero, zero, self.capacity[p]) for p in self.pools
        }
        self.node_gangs: dict[str, dict[str, None]] = {n: {} for n in self.nodes}
        self.running_spot: dict[str, dict[str, None]] = {p: {} for p in self.pools}
        self.settled: dict[str, int] = {}  # guarantee periods already counted, current run
        self._dirty: dict[str, None] = {}
        self._awaiting_yield: dict[str, None] = {}  # HP jobs waiting for idle pods to go
        self._last_eta = start
        self._next_eta = start + self.config.eta_every_s
        self._next_round = start
        self._round_due = False
        self._now = start
        self.preemptions = 0
        self.allocated = 0.0  # GPUs held by gang workers now

    # ------------------------------------------------------------ public API

    def handle(self, event: GFSEvent, now: float, schedule: bool = True) -> list[GFSAction]:
        """Apply one event at ``now``; with ``schedule`` run a scheduling pass after it
        (a driver with several events at one instant passes it on the last only)."""
        if now + EPS < self._now:
            raise GFSJobError(f"time went backwards: {now} < {self._now}")
        self._now = now
        out: list[GFSAction] = []
        match event:
            case GangSubmitted(spec):
                self._submit(spec, now)
            case GangCompleted(job):
                self._complete(job, now)
            case ForecastUpdated(pool, mean, var):
                if pool in self.pools:
                    self.quota[pool] = self.config.quota.quota(
                        pool, np.asarray(mean), np.asarray(var), self.capacity[pool]
                    )
                    self._dirty[pool] = None
            case Tick():
                self._tick(now, out)
            case PoolEvent(inner):
                self._pool_event(inner, now, out)
            case _:
                raise GFSJobError(f"unknown event {event!r}")
        if schedule:
            self._schedule(now, out)
        return out

    def schedule(self, now: float) -> list[GFSAction]:
        """A scheduling pass with no new event (after several events at one instant)."""
        if now + EPS < self._now:
            raise GFSJobError(f"time went backwards: {now} < {self._now}")
        self._now = now
        out: list[GFSAction] = []
        self._schedule(now, out)
        return out

    def _schedule(self, now: float, out: list[GFSAction]) -> None:
        # Chronus decides only in its rounds; everyone else on every change
        if self.config.round_s > 0:
            if not self._round_due:
                return
            self._round_due = False
        self._pass(now, out)

    def next_deadline(self) -> float:
        """When the next Tick is due (eta feedback, or the next Chronus round)."""
        if self.config.round_s > 0:
            return min(self._next_eta, self._next_round)
        return self._next_eta

    def queued(self, pool: str | None = None) -> int:
        pools = [pool] if pool else list(self.pools)
        return sum(q.size for p in pools for q in self.queues[p].values())

    def eta(self, pool: str) -> float:
        return self.config.quota.eta(pool)

    def check(self) -> None:
        """Raise if an invariant fails (tests call it after every event)."""
        self.cluster.check()
        for pool in self.pools:
            for cls in ("hp", "spot"):
                held = sum(
                    s
                    for g in self.jobs.values()
                    if g.state is GangState.RUNNING
                    and g.spec.pool == pool
                    and g.spec.job_class == cls
                    for _, _, s in g.placement
                )
                if abs(held - self.used[pool][cls]) > 1e-6:
                    raise AssertionError(f"{pool}/{cls} used {self.used[pool][cls]} != {held}")
        for info in self.nodes.values():
            free = sum(1 for g in self.cluster.nodes[info.name].gpus if g.used < EPS)
            if free != info.full_free:
                raise AssertionError(f"node {info.name} full_free {info.full_free} != {free}")

    # ------------------------------------------------------------ events

    def _submit(self, spec: GangSpec, now: float) -> None:
        if spec.id in self.jobs or spec.id in self.finished:
            raise GFSJobError(f"duplicate job id {spec.id!r}")
        index = self.pools.get(spec.pool)
        if index is None:
            raise GFSJobError(f"job {spec.id}: pool (gpu_model) {spec.pool!r} has no nodes")
        if not spec.fractional and spec.per_worker > index.max_gpus:
            raise GFSJobError(
                f"job {spec.id}: gpu_request {spec.gpu_request} exceeds the largest node "
                f"of pool {spec.pool} ({index.max_gpus} GPUs)"
            )
        if spec.gpus > self.capacity[spec.pool] + EPS:
            raise GFSJobError(
                f"job {spec.id}: asks {spec.gpus:g} GPUs, pool {spec.pool} has "
                f"{self.capacity[spec.pool]}: it could never run"
            )
        gang = Gang(spec=spec, submitted=now, remaining=spec.duration, queued_since=now)
        self.jobs[spec.id] = gang
        self.queues[spec.pool][spec.job_class].push(gang)
        self._dirty[spec.pool] = None

    def _complete(self, job_id: str, now: float) -> None:
        gang = self.jobs.get(job_id)
        if gang is None or gang.state is not GangState.RUNNING:
            return
        if gang.finish_at() > now + 1e-6:
            return  # a stale completion of an evicted run
        self._release(gang)
        if gang.spec.job_class == "spot":
            earned = self._earned(gang, now)
            self.ledgers[gang.spec.pool].record(now, succeeded=earned + 1)
            gang.periods_ok += earned + 1
            self.settled.pop(gang.id, None)
        gang.state = GangState.FINISHED
        gang.finished = now
        gang.remaining = 0.0
        del self.jobs[job_id]
        self.finished[job_id] = gang
        self._dirty[gang.spec.pool] = None

    def _earned(self, gang: Gang, now: float) -> int:
        """Guarantee periods earned in the current run and not yet settled."""
        total = int((now - gang.run_start) // self.config.guarantee_s)
        return total - self.settled.get(gang.id, 0)

    def _tick(self, now: float, out: list[GFSAction]) -> None:
        if now + EPS >= self._next_eta:
            self._feedback(now)
            self._next_eta = now + self.config.eta_every_s
        if self.config.round_s > 0 and now + EPS >= self._next_round:
            self._next_round = now + self.config.round_s
            self._round_due = True
            if self.config.lease_s > 0:
                self._expire_leases(now, out)
            self._dirty.update(dict.fromkeys(self.pools))

    def _feedback(self, now: float) -> None:
        """Settle running spot jobs' earned periods, then one eta step per pool."""
        for pool in self.pools:
            ledger = self.ledgers[pool]
            for gid in self.running_spot[pool]:
                gang = self.jobs[gid]
                earned = self._earned(gang, now)
                if earned:
                    ledger.record(now, succeeded=earned)
                    gang.periods_ok += earned
                    self.settled[gid] = self.settled.get(gid, 0) + earned
            queue = self.queues[pool]["spot"]
            waited = any(now - self.jobs[jid].queued_since > HOUR_S for _, jid in queue.heads())
            self.config.quota.feedback(pool, ledger.rate(self._last_eta), waited)
            self._dirty[pool] = None
        self._last_eta = now

    def _expire_leases(self, now: float, out: list[GFSAction]) -> None:
        """Chronus: a spot job whose lease ran out goes back to the queue when others wait;
        a lease ends at a checkpoint, so only the restart is lost."""
        for pool in self.pools:
            if self.queued(pool) == 0:
                for gid in self.running_spot[pool]:
                    self.jobs[gid].lease_start = now
                continue
            for gid in list(self.running_spot[pool]):
                gang = self.jobs[gid]
                if now - gang.lease_start >= self.config.lease_s - EPS:
                    self._evict(gang, now, out, reason="lease", by="lease", keep_work=True)

    def _pool_event(self, event: Event, now: float, out: list[GFSAction]) -> None:
        if self.pool_core is None:
            raise GFSJobError("a pool event arrived but no pool core shares this cluster")
        before = {}
        if isinstance(event, PodGone) and event.pod in self.pool_core.pods:
            before[self.pool_core.pods[event.pod].node] = None
        actions = self.pool_core.handle(event, now)
        self._after_pool(actions, before)
        out.extend(actions)

    def _after_pool(self, actions: list[Action], touched: dict[str, None]) -> None:
        """Pool pods change shares behind our back: refresh the nodes they touched."""
        for action in actions:
            if isinstance(action, StartPod):
                touched[action.node] = None
            elif isinstance(action, StopPod) and action.pod in self.pool_core.pods:
                touched[self.pool_core.pods[action.pod].node] = None
        for node in touched:
            self._refresh(self.nodes[node])
            self._dirty[self.nodes[node].pool] = None

    # ------------------------------------------------------------ the pass

    def _pass(self, now: float, out: list[GFSAction]) -> None:
        dirty, self._dirty = self._dirty, {}
        for pool in sorted(dirty):
            self._pass_pool(pool, now, out)

    def _pass_pool(self, pool: str, now: float, out: list[GFSAction]) -> None:
        hol = self.config.hol_blocking
        failed: list[tuple[float, int]] = []
        for cls in ("hp", "spot"):
            queue = self.queues[pool][cls]
            for k, jid in queue.heads():
                while True:
                    gang = self.jobs[jid]
                    spec = gang.spec
                    if any(spec.per_worker >= f - EPS and spec.worker_num >= w for f, w in failed):
                        break
                    if not self._try_start(gang, now, out):
                        failed.append((spec.per_worker, spec.worker_num))
                        if hol:
                            return
                        break
                    queue.pop(k)
                    heap = queue.heaps.get(k)
                    if not heap:
                        break
                    jid = heap[0][1]

    def _try_start(self, gang: Gang, now: float, out: list[GFSAction]) -> bool:
        spec = gang.spec
        if spec.job_class == "spot":
            used = self.used[spec.pool]["spot"]
            if used + spec.gpus > self.quota[spec.pool] + EPS and not (
                # a job larger than a fixed quota would wait forever: it may run alone
                self.config.oversize_alone and used < EPS and spec.gpus > self.quota[spec.pool]
            ):
                return False
            plan = self._plan_free(gang, now)
            if plan is None:
                return False
            self._start(gang, plan, now, out)
            return True
        plan = self._plan_free(gang, now)
        if plan is not None:
            self._start(gang, plan, now, out)
            self._awaiting_yield.pop(gang.id, None)
            return True
        if gang.id in self._awaiting_yield:
            return False  # idle pods are stopping for it; do not evict spot meanwhile
        if self._yield_pool(gang, now, out):
            self._awaiting_yield[gang.id] = None
            return False
        return self._preempt(gang, now, out)

    # ------------------------------------------------------------ placement

    def _plan_free(self, gang: Gang, now: float) -> list[tuple[str, str, float]] | None:
        """Cards for every worker on free capacity, or None (all or nothing)."""
        spec = gang.spec
        if spec.fractional:
            extra: dict[str, float] = {}
            plan = []
            for _ in range(spec.worker_num):
                for gpu in self.cluster.gpus_with_room(spec.pool, spec.per_worker):
                    if gpu.free - extra.get(gpu.id, 0.0) >= spec.per_worker - EPS:
                        extra[gpu.id] = extra.get(gpu.id, 0.0) + spec.per_worker
                        plan.append((gpu.node, gpu.id, spec.per_worker))
                        break
                else:
                    return None
            return plan
        need = int(spec.per_worker)
        taken: dict[str, int] = {}
        index = self.pools[spec.pool]
        for _ in range(spec.worker_num):
            node = self.config.scorer.choose(index, spec.job_class, need, taken, now)
            if node is None:
                return None
            taken[node] = taken.get(node, 0) + need
        return self._cards(taken)

    def _cards(self, taken: dict[str, int]) -> list[tuple[str, str, float]]:
        plan = []
        for node, count in taken.items():
            free = [g.id for g in self.cluster.nodes[node].gpus if g.used < EPS]
            if len(free) < count:
                raise AssertionError(f"node {node}: planned {count} GPUs, {len(free)} free")
            plan.extend((node, gid, 1.0) for gid in free[:count])
        return plan

    def _start(
        self, gang: Gang, plan: list[tuple[str, str, float]], now: float, out: list[GFSAction]
    ) -> None:
        spec = gang.spec
        for _node, gid, share in plan:
            self.cluster.allocate(gid, gang.id, share)
        gang.placement = plan
        gang.state = GangState.RUNNING
        gang.queue_s += now - gang.queued_since
        gang.run_start = now
        gang.lease_start = now
        if gang.first_start is None:
            gang.first_start = now
        self.allocated += spec.gpus
        self.used[spec.pool][spec.job_class] += spec.gpus
        for node in dict.fromkeys(n for n, _, _ in plan):
            info = self.nodes[node]
            info.used[spec.job_class] += sum(s for n, _, s in plan if n == node)
            if spec.job_class == "spot":
                self.node_gangs[node][gang.id] = None
            self._refresh(info)
        if spec.job_class == "spot":
            self.running_spot[spec.pool][gang.id] = None
        out.append(StartGang(gang.id, tuple(plan), gang.finish_at()))

    def _release(self, gang: Gang) -> None:
        spec = gang.spec
        for _node, gid, _ in gang.placement:
            self.cluster.release(gid, gang.id)
        self.allocated -= spec.gpus
        self.used[spec.pool][spec.job_class] -= spec.gpus
        if abs(self.used[spec.pool][spec.job_class]) < 1e-9:
            self.used[spec.pool][spec.job_class] = 0.0
        for node in dict.fromkeys(n for n, _, _ in gang.placement):
            info = self.nodes[node]
            info.used[spec.job_class] -= sum(s for n, _, s in gang.placement if n == node)
            if abs(info.used[spec.job_class]) < 1e-9:
                info.used[spec.job_class] = 0.0
            self.node_gangs[node].pop(gang.id, None)
            self._refresh(info)
        self.running_spot[spec.pool].pop(gang.id, None)
        gang.placement = []

    def _refresh(self, info: NodeInfo) -> None:
        free = sum(1 for g in self.cluster.nodes[info.name].gpus if g.used < EPS)
        self.pools[info.pool].move(info, free)

    # ------------------------------------------------------------ giving way

    def _yield_pool(self, gang: Gang, now: float, out: list[GFSAction]) -> bool:
        """Ask the pool core to stop idle pods on one node where that makes room (free)."""
        core = self.pool_core
        if core is None or gang.spec.fractional or gang.spec.worker_num > 1:
            return False
        need = int(gang.spec.per_worker)
        for info in self.pools[gang.spec.pool].nodes.values():
            if info.total < need or info.full_free >= need:
                continue
            actions = core.yield_idle(info.name, need, now)
            if actions:
                self._after_pool(actions, {})
                out.extend(actions)
                return True
        return False

    def _preempt(self, gang: Gang, now: float, out: list[GFSAction]) -> bool:
        """Plan victims for every worker (all or nothing), then evict them and start."""
        spec = gang.spec
        pool = spec.pool
        ledger = self.ledgers[pool]
        since = now - self.config.rate_window_s
        evicted: dict[str, Gang] = {}
        ctx = PreemptContext(
            now=now,
            rate_after=lambda k: ledger.rate_after(since, len(evicted) + k),
            pool_gpus=self.capacity[pool],
            window_s=self.config.rate_window_s,
        )
        taken: dict[str, int] = {}
        freed: dict[str, int] = {}
        frac_taken: dict[str, float] = {}
        targets: list[tuple[str, str | None]] = []
        index = self.pools[pool]
        for _ in range(spec.worker_num):
            if spec.fractional:
                cands = self._card_candidates(gang, evicted, frac_taken, now)
            else:
                node = self.config.scorer.choose(index, "hp", int(spec.per_worker), taken, now)
                if node is not None:
                    taken[node] = taken.get(node, 0) + int(spec.per_worker)
                    targets.append((node, None))
                    continue
                cands = self._node_candidates(gang, evicted, taken, freed, now)
            pick = self.config.victims.choose(cands, spec.per_worker, ctx) if cands else None
            if pick is None:
                return False
            cand, victims = pick
            for v in victims:
                evicted[v.id] = v
                for n, _, s in v.placement:
                    if s >= 1.0 - EPS:
                        freed[n] = freed.get(n, 0) + 1
            if spec.fractional:
                frac_taken[cand.gpu] = frac_taken.get(cand.gpu, 0.0) + spec.per_worker
                targets.append((cand.node, cand.gpu))
            else:
                taken[cand.node] = taken.get(cand.node, 0) + int(spec.per_worker)
                targets.append((cand.node, None))
        for victim in sorted(evicted.values(), key=lambda g: g.id):
            self._evict(victim, now, out, reason="preempted", by=gang.id)
        if spec.fractional:
            plan = [(n, gid, spec.per_worker) for n, gid in targets]
        else:
            plan = self._cards(taken)
        self._start(gang, plan, now, out)
        return True

    def _evictable(self, victim: Gang, now: float) -> bool:
        return now - victim.run_start >= self.config.min_runtime_s - EPS

    def _node_candidates(
        self,
        gang: Gang,
        evicted: dict[str, Gang],
        taken: dict[str, int],
        freed: dict[str, int],
        now: float,
    ) -> list[Candidate]:
        need = gang.spec.per_worker
        out = []
        for name in self.pools[gang.spec.pool].spot_nodes:
            info = self.nodes[name]
            if info.used["hp"] > EPS or info.total < need:
                continue
            free = info.full_free - taken.get(name, 0) + freed.get(name, 0)
            victims = []
            for gid in self.node_gangs[name]:
                v = self.jobs[gid]
                if gid in evicted or v.spec.fractional or not self._evictable(v, now):
                    continue
                victims.append((v, float(sum(1 for n, _, _ in v.placement if n == name))))
            if victims and free + sum(u for _, u in victims) >= need - EPS:
                out.append(Candidate(name, info.ordinal, float(free), victims))
        return out

    def _card_candidates(
        self, gang: Gang, evicted: dict[str, Gang], frac_taken: dict[str, float], now: float
    ) -> list[Candidate]:
        need = gang.spec.per_worker
        out = []
        for name in self.pools[gang.spec.pool].spot_nodes:
            info = self.nodes[name]
            if info.used["hp"] > EPS:
                continue
            for gpu in self.cluster.nodes[name].gpus:
                victims = []
                for owner, share in gpu.allocs.items():
                    v = self.jobs.get(owner)
                    if v is None or v.spec.job_class != "spot" or owner in evicted:
                        continue
                    if self._evictable(v, now):
                        victims.append((v, share))
                free = gpu.free - frac_taken.get(gpu.id, 0.0)
                free += sum(gpu.allocs.get(e, 0.0) for e in evicted)
                if victims and free + sum(u for _, u in victims) >= need - EPS:
                    out.append(Candidate(name, info.ordinal, free, victims, gpu=gpu.id))
        return out

    def _evict(
        self,
        gang: Gang,
        now: float,
        out: list[GFSAction],
        *,
        reason: str,
        by: str,
        keep_work: bool = False,
    ) -> None:
        """Evict a spot gang whole and re-queue it: work since the last checkpoint and a
        restart overhead are owed again (a lease end is a checkpoint: only the restart)."""
        spec = gang.spec
        if spec.job_class != "spot":
            raise AssertionError(f"HP job {gang.id} chosen as a victim")
        nodes = list(dict.fromkeys(n for n, _, _ in gang.placement))
        useful = gang.useful_since_start(now)
        ckpt = gang.last_checkpoint(now, self.config.checkpoint_s)
        saved = useful if keep_work else max(0.0, ckpt - gang.run_start - gang.overhead)
        gang.remaining = max(0.0, gang.remaining - min(saved, useful))
        gang.lost_s += useful - min(saved, useful)
        gang.overhead = self.config.lease_restart_s if keep_work else restart_overhead(spec.gpus)
        self._release(gang)
        earned = self._earned(gang, now)
        self.ledgers[spec.pool].record(now, failed=1, succeeded=earned)
        gang.periods_ok += earned
        self.settled.pop(gang.id, None)
        for node in nodes:
            self.nodes[node].evictions.append(now)
        gang.state = GangState.QUEUED
        gang.queued_since = now
        gang.evictions += 1
        self.preemptions += 1
        # a lease return goes to the back (Chronus hands the room to those waiting)
        self.queues[spec.pool]["spot"].push(gang, at=now if keep_work else None)
        self._dirty[spec.pool] = None
        out.append(EvictGang(gang.id, reason, by))
