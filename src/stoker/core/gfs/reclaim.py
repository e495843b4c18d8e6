"""The reclaim planner: which idle pods and spot jobs to stop so an HP job fits.

It only reads (the hp/spot books through :class:`~stoker.core.gfs.view.HpSpotView`, the
warm pools' idle pods through :class:`~stoker.core.ports.IdleRoom`) and returns a
:class:`ReclaimPlan`; the scheduler applies it (stops the idle pods, evicts the victims,
awaits the room). This is Kueue's split of preemption into a plan and its application;
the victim choice itself is the :class:`~stoker.core.gfs.preemption.VictimChooser` policy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial

from stoker.core.gfs.config import GFSConfig
from stoker.core.gfs.placement import GangPlan
from stoker.core.gfs.preemption import Candidate, Card, PreemptContext
from stoker.core.gfs.view import HpSpotView
from stoker.core.model import EPS, Cluster, Job, JobClass, Pod
from stoker.core.ports import IdleRoom

_HP, _SPOT = JobClass.HP, JobClass.SPOT


@dataclass(frozen=True, slots=True)
class ReclaimPlan:
    """What to stop for one HP job: idle pods (free of cost) and spot victims by id."""

    idle_pods: list[Pod]
    victims: dict[str, Job]


class AwaitedRoom:
    """HP jobs waiting for the pods stopped to make their room (``jobs``: job -> pods still
    stopping), and the reverse index; a job goes on the pass after its last pod is gone."""

    def __init__(self) -> None:
        self.jobs: dict[str, set[str]] = {}
        self._by_pod: dict[str, str] = {}

    def wait(self, job_id: str, pods: set[str]) -> None:
        """``job_id`` waits for ``pods`` to be gone."""
        self.jobs[job_id] = pods
        for pid in pods:
            self._by_pod[pid] = job_id

    def gone(self, pod_id: str) -> str | None:
        """A pod is gone: the job whose room is now complete, or None."""
        job_id = self._by_pod.pop(pod_id, None)
        if job_id is None:
            return None
        pods = self.jobs[job_id]
        pods.discard(pod_id)
        if pods:
            return None
        del self.jobs[job_id]
        return job_id

    def clear(self, job_id: str) -> None:
        """The job left the queue or started: what is stopping for it goes to whoever fits."""
        for pid in self.jobs.pop(job_id, ()):
            del self._by_pod[pid]

    def freeing_for(self, gpu_pool: str, gpu_pool_of: Callable[[str], str]) -> str | None:
        """The first waiting job of ``gpu_pool`` (``gpu_pool_of``: a job id's GPU pool) that pods
        are stopping for (None: none)."""
        return next((j for j in self.jobs if gpu_pool_of(j) == gpu_pool), None)


class ReclaimPlanner:
    """Plans a reclaim for an HP (or, standby only, a spot) job; see the module docstring."""

    def __init__(
        self, view: HpSpotView, idle: IdleRoom, cluster: Cluster, config: GFSConfig
    ) -> None:
        self.view = view
        self.idle = idle
        self.cluster = cluster
        self.config = config

    def plan(
        self,
        job: Job,
        idle: dict[str, list[tuple[tuple[int, float], str]]],
        now: float,
        *,
        spot: bool,
        blocked: frozenset[str],
        free_first: bool = True,
        prefix: tuple[GangPlan, int] | None = None,
    ) -> ReclaimPlan | None:
        """Idle pods and (with ``spot``) spot jobs to stop so every worker of ``job`` fits,
        or None. Whole-GPU workers: per worker a node whose free cards, idle-only cards and
        (with ``spot``) spot work cover the request; ``free_first``: a worker that fits on
        free room takes it, else free nodes are candidates like the rest (the chooser
        decides). Fractional: one card per worker, a card already carrying HP first; with
        none, the whole-card path with one card (``frac_hp_whole_card``). ``blocked``: nodes
        reserved for another job. ``prefix``: the failed free-room plan of this HP job at
        this instant (its gang plan and the worker that found no room), started from."""
        gpu_pool = self.view.gpu_pool_of(job)
        ledger = self.view.ledgers[gpu_pool]
        window = self.config.rate_window_s
        since = -math.inf if window is None else now - window
        evicted: dict[str, Job] = {}
        ctx = PreemptContext(
            now=now,
            rate_after=lambda k: ledger.rate_after(since, len(evicted) + k),
            gpu_pool_gpus=self.view.capacity[gpu_pool],
            window_s=self.config.cost_window_s,
        )
        need = job.per_worker
        # a fractional worker with no card carrying HP to share takes one whole card
        whole_card = spot and self.config.frac_hp_whole_card
        gang = GangPlan(
            self.view.gpu_pools[gpu_pool], exclude=blocked
        )  # whole-GPU workers: node -> cards
        shares: dict[str, float] = {}  # fractional workers: gpu -> share planned
        freed: dict[str, set[str]] = {}  # node -> whole cards freed by chosen spot victims
        idle_used: dict[str, None] = {}  # idle-only cards already counted
        # each node's candidate as the plan stands, kept until the plan touches the node
        # (a worker taking it, a victim there): a big gang's workers read the same nodes
        seen: dict[str, Candidate | None] = {}
        stop: dict[str, Pod] = {}
        # the free-room plan that just failed for this HP job placed its first ``known``
        # workers as the loop below would (no victim yet) and found no room for the next:
        # start from there instead of planning them again (a gang's planning, twice more)
        known = -1
        if free_first and not job.fractional and job.job_class is _HP and prefix is not None:
            gang, known = prefix
        for worker in range(job.workers):
            if worker < known:
                continue
            # a worker that fits on free room takes it (only the rest need victims)
            if job.fractional:
                gpu = next(
                    (
                        g
                        for g in self.cluster.gpus_with_room(gpu_pool, need)
                        if g.free - shares.get(g.id, 0.0) >= need - EPS and g.node not in blocked
                    ),
                    None,
                )
                if gpu is not None:
                    shares[gpu.id] = shares.get(gpu.id, 0.0) + need
                    continue
            elif free_first:
                node = (
                    None
                    if worker == known
                    else self.config.scorer.choose(gang, _HP, int(need), now)
                )
                if node is not None and node not in freed:
                    gang.take(node, int(need))
                    seen.pop(node, None)
                    continue
            # a worker on a share of one card (``on_card``), or on whole cards (``cards``)
            on_card, cards = job.fractional, max(1, int(need))
            cands: list[Candidate] = []
            if on_card:
                cands = self._card_candidates(
                    job, evicted, shares, stop, now, spot, blocked, whole_card
                )
                # the authors' fallback: the whole-card path with one card
                on_card = bool(cands) or not whole_card
            if not on_card:
                cands = self._node_candidates(
                    job,
                    cards,
                    evicted,
                    gang,
                    freed,
                    idle,
                    idle_used,
                    seen,
                    now,
                    spot,
                    not free_first,
                )
            if not cands:
                return None
            if spot:
                pick = self.config.victims.choose(cands, need if on_card else cards, ctx)
            else:
                best = min(cands, key=lambda c: (c.cost, c.ordinal, c.gpu or ""))
                pick = (best, [])
            if pick is None:
                return None
            cand, victims = pick
            for v in victims:
                evicted[v.id] = v
                for n, gid, s in self.view.placement[v.id]:
                    seen.pop(n, None)
                    if s >= 1.0 - EPS:
                        freed.setdefault(n, set()).add(gid)
            if not on_card and cand.holds is not None:
                # a card fractional victims shared is free once every job on it goes
                gone = {g for v in victims if v.fractional for g in cand.holds.get(v.id, ())}
                for jid, g in cand.holds.items():
                    if jid not in evicted:
                        gone.difference_update(g)
                freed.setdefault(cand.node, set()).update(gone)
            if on_card:
                gid = cand.gpu or ""
                room = self.cluster.gpus[gid].free - shares.get(gid, 0.0)
                room += sum(
                    self.cluster.gpus[gid].allocs.get(p, 0.0)
                    for v in evicted.values()
                    for p in v.pods
                )
                short = need - room
                _, pods = self.idle.idle_share(gid)
                for pod in pods:
                    if short <= EPS:
                        break
                    if pod.id not in stop:
                        stop[pod.id] = pod
                        short -= self.cluster.gpus[gid].allocs.get(pod.id, 0.0)
                shares[gid] = shares.get(gid, 0.0) + need
            else:
                node = cand.node
                info = self.view.nodes[node]
                used_idle = sum(1 for _, gid in idle.get(node, ()) if gid in idle_used)
                room = info.full_free - gang.taken.get(node, 0) + used_idle
                room += len(freed.get(node, ()))
                short = cards - room
                for _, gid in idle.get(node, ()):
                    if short <= 0:
                        break
                    if gid in idle_used:
                        continue
                    idle_used[gid] = None
                    short -= 1
                    for owner in self.cluster.gpus[gid].allocs:
                        stop[owner] = self.view.pods[owner]
                gang.take(node, cards)
                seen.pop(node, None)
        return ReclaimPlan(list(stop.values()), evicted)

    def _node_candidates(
        self,
        job: Job,
        need: int,
        evicted: dict[str, Job],
        gang: GangPlan,
        freed: dict[str, set[str]],
        idle: dict[str, list[tuple[tuple[int, float], str]]],
        idle_used: dict[str, None],
        seen: dict[str, Candidate | None],
        now: float,
        spot: bool,
        free_nodes: bool = False,
    ) -> list[Candidate]:
        """The nodes a whole-GPU worker may reclaim on, as many as the victim chooser reads
        (:attr:`VictimChooser.reads`; every one without ``spot``): nodes with idle cards,
        nodes the plan took or freed GPUs on, each looked at; the GPU pool's other spot nodes
        from its reclaim-room index (their room is their free cards and the cards their
        spot work alone holds), only the buckets and nodes the chooser reads; with
        ``free_nodes``, nodes with free room only, a bounded scan per free count as
        placement does. ``seen``: each node's candidate (None: not one) as the plan stands,
        read and filled here, emptied by the plan for the nodes it touches. ``need``: the
        worker's whole cards (one for a fractional worker on the whole-card path)."""
        gpu_pool = self.view.gpu_pools[self.view.gpu_pool_of(job)]

        def one(name: str) -> Candidate | None:
            info = self.view.nodes[name]
            if info.total < need or name in gang.exclude:
                return None
            cards = [(c, g) for c, g in idle.get(name, ()) if g not in idle_used]
            # the plan counts the idle cards earlier workers stop too: those are not free room
            used_idle = len(idle.get(name, ())) - len(cards)
            freed_here = freed.get(name, set())
            free = info.full_free - gang.taken.get(name, 0) + len(freed_here) + used_idle
            victims: list[tuple[Job, float]] = []
            holds: dict[str, frozenset[str]] = {}  # each victim and its cards without HP here
            # spot on the node's cards that carry no HP (a whole-GPU worker's cards never do;
            # a fractional job's, where spot work alone holds the card)
            if spot:
                # its fractional jobs' cards held by spot work alone, not yet freed
                frac = info.frac_cards - freed_here
                for jid, mine in self.view.node_jobs[name].items():
                    v = self.view.jobs[jid]
                    if jid in evicted:
                        continue
                    if v.fractional:
                        mine = [g for g in mine if g in frac]
                        if not mine:
                            continue
                    holds[jid] = frozenset(mine)
                    victims.append((v, float(len(holds[jid]))))
            if not victims and not cards and not (free_nodes and free >= need - EPS):
                return None
            cand = Candidate(
                name,
                info.ordinal,
                float(free + len(cards)),
                victims,
                card_order=partial(
                    self._card_order,
                    name,
                    holds,
                    [g for _, g in cards],
                    freed_here,
                    gang.taken.get(name, 0) - used_idle,
                ),
                holds=holds,
            )
            if cand.no_hp < need - EPS:
                return None
            # the idle cards it would stop, cheapest first
            short = max(0, int(need) - int(free))
            cand.cost = (
                sum(c[0] for c, _ in cards[:short]),
                sum(c[1] for c, _ in cards[:short]),
            )
            return cand

        def build(names: Iterable[str]) -> list[Candidate]:
            out = []
            for name in names:
                cand = seen[name] if name in seen else seen.setdefault(name, one(name))
                if cand is not None:
                    out.append(cand)
            return out

        heads: dict[int, list[str]] = {}
        if free_nodes:
            heads = dict(gang.buckets(range(need, gpu_pool.max_gpus + 1)))
        reads = self.config.victims.reads if spot else "all"
        if reads == "all":
            names = dict.fromkeys(idle)
            if spot:
                names.update(gpu_pool.spot_nodes)
            for bucket in heads.values():
                names.update(dict.fromkeys(bucket))
            return build(names)
        # the nodes whose room is not the index's: idle cards, GPUs planned, victims chosen
        own = dict.fromkeys(idle)
        own.update(gang.taken)
        own.update(freed)
        for victim in evicted.values():
            if victim.fractional:  # the index still counts the cards it shared
                own.update((n, None) for n, _, _ in self.view.placement[victim.id])
        scanned = {n for bucket in heads.values() for n in bucket} if own else set()
        out = build([n for n in own if n in idle or n in gpu_pool.spot_nodes or n in scanned])
        least = min((c.no_hp for c in out), default=math.inf)
        nodes = self.view.nodes
        for room in range(need, len(gpu_pool.by_room)):
            if reads == "fewest" and room > least + EPS:
                break
            found = []
            for _, name in gpu_pool.by_room[room]:
                # a node whose spot work holds no card alone has room, not victims
                if (
                    name not in own
                    and name not in gang.exclude
                    and (free_nodes or nodes[name].victim_cards)
                ):
                    found.append(name)
                    if reads == "first":
                        break
            rest = [n for n in heads.get(room, ()) if n not in own and n not in gpu_pool.spot_nodes]
            if rest:
                found += rest if reads == "fewest" else [min(rest, key=lambda n: nodes[n].ordinal)]
            out += build(found)
            if found and reads == "fewest":
                break
        return out

    def _card_order(
        self,
        name: str,
        holds: dict[str, frozenset[str]],
        idle: list[str],
        freed: set[str],
        taken: int,
    ) -> tuple[Card, ...]:
        """A node's cards a reclaim may use, in card order, each with the spot jobs holding
        it (none: free, or idle pods): :attr:`Candidate.cards`. As the plan stands: the
        cards of victims already chosen (``freed``, kept by the plan as it goes: a big
        gang's victims are many) are free, and the first ``taken`` free ones are
        left out (the plan's earlier workers took them). Listed as free in the books, a
        chooser by card order (``first_cards``) would pick them again and evict too little:
        the HP job then fails on its victims' room, and evicts again (a livelock at one
        instant on FGD's 184 days)."""
        holders: dict[str, list[str]] = {}  # card -> the spot jobs holding it
        for jid, mine in holds.items():
            for gid in mine:
                holders.setdefault(gid, []).append(jid)
        idle_ids = set(idle)
        order: list[Card] = []
        for g in self.cluster.nodes[name].gpus:
            if g.id in holders or g.id in idle_ids:
                order.append((g.id, tuple(holders.get(g.id, ()))))
            elif g.used < EPS or g.id in freed:
                if taken > 0:
                    taken -= 1
                    continue
                order.append((g.id, ()))
        return tuple(order)

    def _card_candidates(
        self,
        job: Job,
        evicted: dict[str, Job],
        taken: dict[str, float],
        stop: dict[str, Pod],
        now: float,
        spot: bool,
        blocked: frozenset[str],
        whole_card: bool,
    ) -> list[Candidate]:
        """The cards a fractional worker may reclaim a share of: with ``spot``, cards
        already carrying HP with room for it first (``frag_preempt``); only if none, with
        ``whole_card`` none at all (the caller takes the whole-card path), else cards
        without HP (stoker's earlier rule). Without ``spot``, cards with idle pods."""
        need = job.per_worker
        gpu_pool = self.view.gpu_pool_of(job)
        names = dict.fromkeys(self.idle.idle_nodes(gpu_pool))
        if spot:
            names.update(self.view.gpu_pools[gpu_pool].spot_nodes)
        for name in blocked:
            names.pop(name, None)
        gone = {p for v in evicted.values() for p in v.pods} | set(stop)
        out = []
        with_hp: list[Candidate] = []  # cards already carrying HP (the authors' first choice)
        for name in names:
            info = self.view.nodes[name]
            for gpu in self.cluster.nodes[name].gpus:
                victims: list[tuple[Job, float]] = []
                hp_share = sum(
                    share
                    for owner, share in gpu.allocs.items()
                    if (pod := self.view.pods.get(owner)) is not None and pod.job_class is _HP
                )
                if whole_card and hp_share <= EPS:
                    continue  # no HP here: the whole-card path's, not this one's
                # spot goes only where the HP request fits beside the HP already there
                if spot and hp_share < 1.0 - need - EPS:
                    seen: dict[str, float] = {}
                    for owner, share in gpu.allocs.items():
                        pod = self.view.pods.get(owner)
                        if pod is None or pod.job_class is not _SPOT or pod.job is None:
                            continue
                        v = self.view.jobs[pod.job]
                        if v.id in evicted:
                            continue
                        seen[v.id] = seen.get(v.id, 0.0) + share
                    victims = [(self.view.jobs[j], u) for j, u in seen.items()]
                idle_share, pods = self.idle.idle_share(gpu.id)
                if not victims and not pods:
                    continue
                idle_share -= sum(gpu.allocs.get(p.id, 0.0) for p in pods if p.id in stop)
                free = gpu.free - taken.get(gpu.id, 0.0)
                free += sum(gpu.allocs.get(p, 0.0) for p in gone if p not in stop)
                if free + idle_share + sum(u for _, u in victims) < need - EPS:
                    continue
                cost = (0 if free >= need - EPS else 1, 0.0)
                cand = Candidate(
                    name, info.ordinal, free + idle_share, victims, gpu=gpu.id, cost=cost
                )
                # (with ``whole_card`` every card here carries HP, and idle pods beside it
                # are room as spot is: the authors have none, such cards would be free)
                hp_card = whole_card or (spot and hp_share > EPS and victims)
                (with_hp if hp_card else out).append(cand)
        return with_hp or out
