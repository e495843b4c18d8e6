"""The warm pools' room planner: where a pool job's pods can go, read only.

One :class:`RoomPlanner` per :class:`~stoker.core.warm.WarmPools`. It answers what a
placement would take (a :class:`Plan`: warm pods, standby pods, free slots), which idle
pods a reclaim or a recycle would stop, and where spare pods fit; it changes nothing in the
books, and the warm pools apply what it returns. Its own state is what it learns from the
starts the warm pools tell it of: the nodes with a profile's image cached.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from stoker.core.model import EPS, GPU, Cluster, Job, JobClass, Pod, PodState, Profile
from stoker.core.warm.idle import IDLE, IdlePods

if TYPE_CHECKING:
    from stoker.core.books import Books
    from stoker.core.config import Policies
    from stoker.core.ports import HpRoom

# a pod's states while it runs, or comes up for, a job of its caller
_BUSY = (PodState.STARTING, PodState.RECYCLING, PodState.ACTIVE)
# fits looked at for a node with the profile's image cached before the tightest fit is taken
_IMAGE_LOOKAHEAD = 64

Slots = list[tuple[str, list[str]]]  # (node, gpus) per pod


@dataclass
class Plan:
    """What placing a pool job would take now: ``warm`` pods of its caller (warm hits),
    promotable ``standby`` pods, and free ``slots`` for the ``missing`` rest (fewer when
    the cluster is short); ``taken``: the idle pods the plan uses, ``busy``: the cards the
    promoted standbys hold (a reclaim for the rest must free others)."""

    warm: list[str]
    standby: list[str]
    slots: Slots
    missing: int
    taken: set[str]
    busy: set[str]


class RoomPlanner:
    """Read-only planning of pool pods' room: placement, victims, free slots."""

    def __init__(self, books: Books, idle: IdlePods, policies: Policies) -> None:
        self.cluster = books.cluster
        self.profiles = books.profiles
        self.jobs = books.jobs
        self.pods = books.pods
        self.idle = idle
        self.policies = policies
        # the hp/spot part's holds on room (wired by the warm pools' ``connect``)
        self.hp: HpRoom
        # nodes where a pod of the profile has started: its image is cached there, so a cold
        # start on one of them skips the image pull
        self.image_nodes: dict[str, dict[str, None]] = {p: {} for p in self.profiles}

    def started(self, profile: str, node: str) -> None:
        """A pod of ``profile`` starts on ``node``: its image is cached there from now."""
        self.image_nodes[profile][node] = None

    # ------------------------------------------------------------------ placement

    def warm_pods(self, job: Job) -> dict[str, None]:
        """The warm pods of ``job``'s own caller it may take (none without reuse)."""
        if not self.policies.matching.reuse:
            return {}
        return self.idle.warm_pods((job.spec.profile, *job.pair))

    def plan(self, job: Job) -> Plan:
        """What placing ``job`` would take now: its caller's warm pods first, then standby
        pods it can promote, then free slots for the rest."""
        profile = self.profiles[job.spec.profile]
        need = job.spec.workers
        warm = self.warm_pods(job)
        picked: list[str] = []
        matching = self.policies.matching
        while warm and len(picked) < need:
            pid = matching.pick_warm(warm)
            if pid is None:
                break
            picked.append(pid)
            if len(picked) < need:  # a one-pod job (the common case) copies nothing
                warm = {p: None for p in warm if p != pid}
        standby = []
        if matching.standby and len(picked) < need:
            # promoting stops the warm pods on the standby's GPU: never one this job takes
            mine = {g for pid in picked for g in self.pods[pid].gpus}
            for pid in self.idle.promotable[profile.name]:
                if mine.intersection(self.pods[pid].gpus):
                    continue
                standby.append(pid)
                if len(picked) + len(standby) == need:
                    break
        missing = need - len(picked) - len(standby)
        taken = set(picked) | set(standby)
        # a promoted standby grows to a full share on its GPU and the idle pods there go: a
        # cold pod of this plan may share that GPU only in what is left
        busy = {gid for pid in standby for gid in self.pods[pid].gpus}
        spare = self.idle.spare[profile.name]
        growth = {
            gid: 0.0 if pid in spare else self._promotion_growth(gid, profile)
            for pid in standby
            for gid in self.pods[pid].gpus
        }
        slots = self.find_capacity(profile, missing, set(), growth) if missing else []
        return Plan(picked, standby, slots, missing, taken, busy)

    def own_pods_busy(self, job: Job) -> bool:
        """Whether a pod of ``job``'s own (tenant, tag) is running or starting for another
        of its jobs (with reuse: it turns warm for this caller when that job ends)."""
        if not self.policies.matching.reuse:
            return False
        profile = job.spec.profile
        return any(
            pod.profile == profile and pod.state in _BUSY and self._pair_of(pod) == job.pair
            for pod in self.pods.values()
        )

    def _promotion_growth(self, gid: str, profile: Profile) -> float:
        """How much more of GPU ``gid`` is held once its standby is promoted (negative when
        the idle warm pods stopped for it held more than the standby grows)."""
        gpu = self.cluster.gpus[gid]
        sid = self.idle.standby_on_gpu[gid]
        others = sum(share for owner, share in gpu.allocs.items() if owner != sid)
        return profile.share - gpu.allocs.get(sid, 0.0) - others

    # ------------------------------------------------------------------ free slots

    def find_capacity(
        self,
        profile: Profile,
        count: int,
        exclude: set[str],
        planned: dict[str, float] | None = None,
    ) -> Slots:
        """Free GPU slots for up to ``count`` pods (node, gpus each), best fit first, never on
        the GPUs in ``exclude`` nor on nodes reserved for a waiting HP job (what frees
        there is that job's); fewer than ``count`` when the cluster is short."""
        extra: dict[str, float] = dict(planned or {})  # shares this plan takes per GPU
        slots: Slots = []
        if profile.cpu_only:
            return self._find_cpu_slots(profile, count)
        reserved = self.hp.reserved_nodes(profile.gpu_model)
        if reserved:  # its cards are left out like excluded ones (gfs-reserve presets only)
            nodes = self.cluster.nodes
            exclude = exclude | {gpu.id for name in reserved for gpu in nodes[name].gpus}
        if profile.gpus == 1:
            cached = self.image_nodes[profile.name]
            for _ in range(count):
                pick = None
                for seen, gpu in enumerate(self._fitting(profile, exclude, extra), 1):
                    if gpu.node in cached:
                        pick = gpu
                        break
                    # else the tightest fit, after a bounded look for a node with the image
                    # cached, so a start stays cheap on a large cluster
                    pick = pick or gpu
                    if seen >= _IMAGE_LOOKAHEAD:
                        break
                if pick is None:
                    return slots
                extra[pick.id] = extra.get(pick.id, 0.0) + profile.share
                slots.append((pick.node, [pick.id]))
            return slots
        for _ in range(count):
            by_node: dict[str, list[str]] = {}
            found = None
            for gpu in self._fitting(profile, exclude, extra):
                ids = by_node.setdefault(gpu.node, [])
                ids.append(gpu.id)
                if len(ids) == profile.gpus:
                    found = (gpu.node, ids)
                    break
            if found is None:
                return slots
            for gid in found[1]:
                extra[gid] = extra.get(gid, 0.0) + profile.share
            slots.append(found)
        return slots

    def _fitting(
        self, profile: Profile, exclude: set[str], extra: dict[str, float]
    ) -> Iterator[GPU]:
        """The cluster's cards with room for one of ``profile``'s pods, best fit first, but
        those in ``exclude`` and those the plan's ``extra`` shares already fill."""
        share = profile.share
        for gpu in self.cluster.gpus_with_room(profile.gpu_model, share):
            if gpu.id not in exclude and gpu.free - extra.get(gpu.id, 0.0) >= share - EPS:
                yield gpu

    def _find_cpu_slots(self, profile: Profile, count: int) -> Slots:
        """CPU slots for up to ``count`` pods of a CPU-only profile (node, no GPUs each),
        filling one node before the next."""
        slots: Slots = []
        taken: dict[str, int] = {}
        for node in self.cluster.nodes_with_cpu(profile.cpu, profile.memory_gb):
            free_cpu, free_mem = self.cluster.cpu_free(node)
            fits = _cpu_fits(free_cpu, free_mem, profile)
            while taken.get(node, 0) < fits and len(slots) < count:
                taken[node] = taken.get(node, 0) + 1
                slots.append((node, []))
            if len(slots) == count:
                break
        return slots

    # ------------------------------------------------------------------ victims

    def victims(
        self,
        job: Job,
        profile: Profile,
        count: int,
        exclude: set[str],
        busy: set[str],
        now: float,
    ) -> list[list[Pod]] | None:
        """Idle pods (not in ``exclude``) whose stopping frees ``count`` slots for ``profile``
        on GPUs not in ``busy`` (CPU slots for a CPU-only profile), lowest value first."""
        budget = self.policies.budget
        candidates = sorted(
            self._takeable(
                job,
                profile,
                [
                    self.pods[p]
                    for p in self.idle.idle
                    if p not in exclude
                    and self.pods[p].state in IDLE
                    and _same_slots(self.cluster, self.pods[p], profile)
                ],
            ),
            key=lambda pod: (budget.value(pod, now), pod.id),
        )
        if profile.cpu_only:
            return self._cpu_victims(profile, count, candidates)
        freed: dict[str, float] = {}
        per_node: dict[str, list[Pod]] = {}
        groups: list[list[Pod]] = []
        used_gpus = set(busy)
        for victim in candidates:
            for gid in victim.gpus:
                freed[gid] = freed.get(gid, 0.0) + self.cluster.gpus[gid].allocs.get(victim.id, 0)
            per_node.setdefault(victim.node, []).append(victim)
            node = self.cluster.nodes[victim.node]
            room = [
                g.id
                for g in node.gpus
                if g.id not in used_gpus and g.free + freed.get(g.id, 0.0) >= profile.share - EPS
            ]
            if len(room) >= profile.gpus:
                chosen = set(room[: profile.gpus])
                used_gpus.update(chosen)
                # only the victims on the chosen GPUs go; the rest of the node's candidates
                # (a standby beside an active pod, say) stay for a later slot or keep running
                pending = per_node.pop(victim.node)
                groups.append([v for v in pending if chosen.intersection(v.gpus)])
                rest = [v for v in pending if not chosen.intersection(v.gpus)]
                if rest:
                    per_node[victim.node] = rest
                if len(groups) == count:
                    return groups
        return None

    def _cpu_victims(
        self, profile: Profile, count: int, candidates: list[Pod]
    ) -> list[list[Pod]] | None:
        """Idle CPU-only pods whose CPU slots, with what is free, make ``count`` slots for
        ``profile``, in the order given."""
        room: dict[str, tuple[float, float]] = {}  # per node: free + freed - promised
        pending: dict[str, list[Pod]] = {}
        groups: list[list[Pod]] = []
        for victim in candidates:
            node, cpu, mem = self.cluster.cpu_allocs[victim.id]
            free_cpu, free_mem = room.get(node) or self.cluster.cpu_free(node)
            room[node] = (free_cpu + cpu, free_mem + mem)
            pending.setdefault(node, []).append(victim)
            if _cpu_fits(*room[node], profile) >= 1:
                groups.append(pending.pop(node))
                room[node] = (room[node][0] - profile.cpu, room[node][1] - profile.memory_gb)
                if len(groups) == count:
                    return groups
        return None

    def recyclable(
        self, job: Job, profile: Profile, count: int, taken: set[str], now: float
    ) -> list[Pod] | None:
        """The ``count`` idle warm pods of ``profile`` to scrub in place into fresh pods for
        ``job``, least valuable first (None: too few ``job`` may take)."""
        victims = self._takeable(
            job,
            profile,
            [
                self.pods[p]
                for p in self.idle.idle
                if p not in taken
                and self.pods[p].state is PodState.WARM
                and self.pods[p].profile == profile.name
            ],
        )
        if len(victims) < count:
            return None
        budget = self.policies.budget
        victims.sort(key=lambda pod: (budget.value(pod, now), pod.id))
        return victims[:count]

    def _takeable(self, job: Job, profile: Profile, pods: list[Pod]) -> list[Pod]:
        """The idle pods of ``pods`` ``job`` may stop for room (:meth:`Matching.may_reclaim`,
        or with tenant shares :meth:`~stoker.core.shares.TenantShares.may_reclaim`);
        a pod of another profile is left to its own profile's split. A warm pod with no
        keep-alive deadline (``always_on``) is always takeable: the split would otherwise
        hold a job back for good, since that pod never frees its room by itself."""
        held = self._tenant_pods(profile.name)
        tenant = job.spec.tenant
        mine = held.get(tenant, 0)
        shares = self.policies.shares
        may = self.policies.matching.may_reclaim
        out = []
        for pod in pods:
            owner = self._tenant_of(pod)
            if owner is None or pod.profile != profile.name or math.isinf(pod.deadline):
                out.append(pod)  # a spare or standby, or another profile's (split per profile)
            elif shares is not None:
                if shares.may_reclaim(tenant, mine, owner, held.get(owner, 0)):
                    out.append(pod)
            elif may(mine, held.get(owner, 0), owner == tenant):
                out.append(pod)
        return out

    def _tenant_pods(self, profile: str) -> dict[str, int]:
        """Pods of ``profile`` each tenant holds (idle, busy or starting for its job)."""
        held: dict[str, int] = {}
        for pod in self.pods.values():
            if pod.profile != profile or pod.job_class is not JobClass.POOL:
                continue
            if pod.state in (PodState.STOPPING, PodState.GONE, PodState.STANDBY):
                continue
            tenant = self._tenant_of(pod)
            if tenant is not None:
                held[tenant] = held.get(tenant, 0) + 1
        return held

    def _pair_of(self, pod: Pod) -> tuple[str, str] | None:
        """The (tenant, tag) a pod serves: its owner, or the job it starts for."""
        if pod.owner is not None:
            return pod.owner
        job = self.jobs.get(pod.pending_job or pod.job or "")
        return None if job is None else job.pair

    def _tenant_of(self, pod: Pod) -> str | None:
        pair = self._pair_of(pod)
        return None if pair is None else pair[0]


def _cpu_fits(free_cpu: float, free_mem: float, profile: Profile) -> int:
    """How many pods of a CPU-only profile fit in this much free CPU and memory."""
    return int(min((free_cpu + EPS) / profile.cpu, (free_mem + EPS) / profile.memory_gb))


def _same_slots(cluster: Cluster, pod: Pod, profile: Profile) -> bool:
    """Whether stopping ``pod`` frees room a pod of ``profile`` can take: CPU slots for a
    CPU-only profile, else GPUs of its model."""
    if profile.cpu_only:
        return pod.id in cluster.cpu_allocs
    return bool(pod.gpus) and cluster.gpus[pod.gpus[0]].model == profile.gpu_model
