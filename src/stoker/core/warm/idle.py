"""The warm pools' index of idle pods: warm and standby pods, and their keep-alive deadlines.

One :class:`IdlePods` per :class:`~stoker.core.warm.WarmPools`: which pods are idle (and
the GPUs they hold, in all and per GPU pool, what the warm budget caps), the warm pods of
each (profile, tenant, tag), the standby pods and which of them can be promoted now, the
spare pods of a profile's minimum warm count, and when each warm pod's keep-alive runs
out. It answers the reads of the hp/spot part's :class:`~stoker.core.ports.IdleRoom`
(``idle_cards``, ``idle_nodes``, ``idle_share``, ``refresh_cards``) and the budget's. It
moves no pod: the warm pools move one, then tell it (:meth:`moved`, :meth:`add_warm`, ...).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from stoker.core.model import EPS, JobClass, Pod, PodState

if TYPE_CHECKING:
    from stoker.core.books import Books
    from stoker.core.config import Policies
    from stoker.core.policies import KeepAlive

IDLE = (PodState.WARM, PodState.STANDBY)

Key = tuple[str, str, str]  # (profile, tenant, reuse tag)


class IdlePods:
    """Idle warm and standby pods, indexed for the warm pools, the budget and HP's reclaim.

    ``idle``: idle warm and standby pods (and starting standby ones), in the order they
    turned idle; ``idle_gpus`` and ``idle_by_model``: the GPUs they hold, in all and per
    GPU model. ``epoch`` moves on at every pool pod's state change: what an HP reclaim finds
    among idle pods may differ (the hp/spot part searches again only after a change).
    ``deadlines``: a heap of warm pods' keep-alive deadlines, stale entries left lazily.
    """

    def __init__(
        self, books: Books, policies: Policies, keepalive: Callable[[str], KeepAlive]
    ) -> None:
        self.books = books
        self.cluster = books.cluster
        self.profiles = books.profiles
        self.pods = books.pods
        self.policies = policies
        self.idle: dict[str, None] = {}
        self.idle_gpus = 0.0
        self.idle_by_model: dict[str, float] = {}
        self.epoch = 0
        self.warm: dict[Key, dict[str, None]] = {}
        self.standby: dict[str, dict[str, None]] = {p: {} for p in self.profiles}
        self.promotable: dict[str, dict[str, None]] = {p: {} for p in self.profiles}
        self.standby_on_gpu: dict[str, str] = {}
        # spare pods per profile (starting or standby): kept ready for its minimum warm count
        self.spare: dict[str, dict[str, None]] = {p: {} for p in self.profiles}
        self.deadlines: list[tuple[float, int, str]] = []
        self._heap_seq = 0  # deadline heap tie-break
        # per GPU model, warm pods' keep-alive deadlines: how long idle pods there may yet
        # hold their cards (the keepalive warm cap's horizon)
        self._warm_until: dict[str, dict[str, float]] = {}
        # (profile, tenant, tag) -> time its keep-alive was renewed until (Renewed)
        self._renewed: dict[Key, float] = {}
        # per GPU model, the longest keep-alive a new caller of its GPU profiles gets (the
        # profiles and their keep-alive policies are fixed: read once, not on every pass)
        self._first_ttl: dict[str, float] = {}
        for p in self.profiles.values():
            if p.gpus:
                ttl = keepalive(p.name).first_ttl_s
                self._first_ttl[p.gpu_model] = max(ttl, self._first_ttl.get(p.gpu_model, ttl))

    # ------------------------------------------------------------------ what a pod holds

    def model_of(self, pod: Pod) -> str:
        """The GPU model a pod holds (a CPU-only pod: its profile's, where its share is 0)."""
        if not pod.gpus:
            return self.profiles[pod.profile].gpu_model
        return self.cluster.gpus[pod.gpus[0]].model

    def pod_share(self, pod: Pod) -> float:
        """The GPU share a pod holds now, over its cards."""
        gpus = self.cluster.gpus
        return sum(gpus[g].allocs.get(pod.id, 0.0) for g in pod.gpus)

    # ------------------------------------------------------------------ idle set

    def moved(self, pod: Pod, state: PodState, share: float) -> None:
        """A pool pod holding ``share`` is about to enter ``state``: it joins or leaves the
        idle set (and its totals), and the epoch moves on."""
        was_idle = pod.id in self.idle
        is_idle = state in IDLE
        self.epoch += 1
        if was_idle and not is_idle:
            del self.idle[pod.id]
            self._add_idle(pod, -share)
        elif is_idle and not was_idle:
            self.idle[pod.id] = None
            self._add_idle(pod, share)

    def add_staged(self, pod: Pod, gid: str, share: float) -> None:
        """A standby pod starting beside an active pod on card ``gid``, idle from now."""
        self.standby_on_gpu[gid] = pod.id
        self.idle[pod.id] = None
        self._add_idle(pod, share)
        self.standby[pod.profile][pod.id] = None

    def add_spare(self, pod: Pod, share: float) -> None:
        """A spare pod starting for its profile's minimum warm count, idle from now."""
        self.spare[pod.profile][pod.id] = None
        self.idle[pod.id] = None
        self._add_idle(pod, share)

    def _add_idle(self, pod: Pod, share: float) -> None:
        """The idle totals (all, and per GPU model) move by ``share``."""
        model = self.model_of(pod)
        self.idle_gpus += share
        held = self.idle_by_model.get(model, 0.0) + share
        self.idle_by_model[model] = 0.0 if abs(held) < 1e-9 else held
        if abs(self.idle_gpus) < 1e-9:
            self.idle_gpus = 0.0

    def staged_standby(self) -> dict[str, float]:
        """Standby pods (ready or starting) sharing their GPU with a pod that is not idle,
        with their shares."""
        staged: dict[str, float] = {}
        for gid, sid in self.standby_on_gpu.items():
            allocs = self.cluster.gpus[gid].allocs
            if any(o != sid and o not in self.idle for o in allocs):
                staged[sid] = allocs.get(sid, 0.0)
        return staged

    # ------------------------------------------------------------------ warm and standby

    def warm_pods(self, key: Key) -> dict[str, None]:
        """The warm pods of (profile, tenant, tag)."""
        return self.warm.get(key, {})

    def add_warm(self, pod: Pod) -> None:
        """A pod just turned warm for its owner, with its keep-alive deadline set."""
        assert pod.owner is not None
        self.warm.setdefault((pod.profile, *pod.owner), {})[pod.id] = None
        self._note_deadline(pod)
        if not math.isinf(pod.deadline):
            heapq.heappush(self.deadlines, (pod.deadline, self._seq_next(), pod.id))
            if len(self.deadlines) > 2 * len(self.idle) + 64:
                # a deadline that no longer holds leaves lazily, from the top: under a long
                # keep-alive one per job ended within it would pile up (amortised O(1))
                self.deadlines = [e for e in self.deadlines if self._armed(e)]
                heapq.heapify(self.deadlines)
        self.refresh_pod(pod)

    def unwarm(self, pod: Pod) -> None:
        """Take a pod out of the warm index (it is taken, or stops)."""
        if pod.gpus:
            until = self._warm_until.get(self.model_of(pod))
            if until is not None:
                until.pop(pod.id, None)
        if pod.owner is not None:
            key = (pod.profile, *pod.owner)
            pods = self.warm.get(key)
            if pods is not None:
                pods.pop(pod.id, None)
                if not pods:
                    del self.warm[key]

    def forget(self, pod: Pod) -> None:
        """Take a pod out of the warm and standby indexes (it stops or is gone)."""
        self.unwarm(pod)
        if pod.gpus and self.standby_on_gpu.get(pod.gpus[0]) == pod.id:
            del self.standby_on_gpu[pod.gpus[0]]
        self.standby[pod.profile].pop(pod.id, None)
        self.promotable[pod.profile].pop(pod.id, None)
        self.spare[pod.profile].pop(pod.id, None)

    def is_standby_slot(self, pod: Pod) -> bool:
        """Whether ``pod`` is the standby staged on its card."""
        return self.standby_on_gpu.get(pod.gpus[0]) == pod.id

    def refresh_cards(self, gpus: list[str]) -> None:
        """Another part's pod took or left these cards: a standby there may no longer (or
        may now) be promotable."""
        if not self.standby_on_gpu:
            return  # no standby anywhere (hp and spot alone: every card, every time)
        for gid in gpus:
            self.refresh_gpu(gid)

    def refresh_pod(self, pod: Pod) -> None:
        """A pod's cards changed hands or states: their standbys' promotability follows."""
        for gid in pod.gpus:
            self.refresh_gpu(gid)

    def refresh_gpu(self, gid: str) -> None:
        """A GPU's standby is promotable when nothing but idle warm pods shares its GPU."""
        sid = self.standby_on_gpu.get(gid)
        if sid is None:
            return
        standby = self.pods[sid]
        if standby.state is not PodState.STANDBY:
            return
        gpu = self.cluster.gpus[gid]
        profile = self.profiles[standby.profile]
        others = [o for o in gpu.allocs if o != sid]
        ok = all(self._is_warm_pod(o) for o in others)
        room = gpu.free + sum(gpu.allocs[o] for o in others) + gpu.allocs.get(sid, 0.0)
        if ok and room >= profile.share - EPS:
            self.promotable[standby.profile][sid] = None
        else:
            self.promotable[standby.profile].pop(sid, None)

    def _is_warm_pod(self, owner: str) -> bool:
        """Whether a GPU share's owner is an idle warm pod of this core (a share held by
        anything else, a GFS worker say, is busy)."""
        pod = self.pods.get(owner)
        return pod is not None and pod.state is PodState.WARM

    # ------------------------------------------------------------------ HP's reads

    def idle_cards(self, model: str) -> dict[str, list[tuple[tuple[int, float], str]]]:
        """Per node of GPU model ``model``: the cards held by idle pods alone (freed whole
        by stopping them), each with its cost, cheapest first: standby-only cards (0), then
        warm ones by the budget's value (least valuable first)."""
        budget = self.policies.budget
        now = self.books.now
        cards: dict[str, dict[str, tuple[int, float]]] = {}
        for pid in self.idle:
            pod = self.pods[pid]
            if pod.state not in IDLE:
                continue
            for gid in pod.gpus:
                gpu = self.cluster.gpus[gid]
                if gpu.model != model:
                    continue
                owners = [self.pods.get(o) for o in gpu.allocs]
                if any(o is None or o.state not in IDLE for o in owners):
                    continue
                standby_only = all(o.state is PodState.STANDBY for o in owners)  # type: ignore[union-attr]
                value = max(budget.value(o, now) for o in owners)  # type: ignore[arg-type]
                cards.setdefault(pod.node, {})[gid] = (0 if standby_only else 1, value)
        return {
            node: sorted(((cost, gid) for gid, cost in by_gpu.items()))
            for node, by_gpu in sorted(cards.items())
        }

    def idle_nodes(self, model: str) -> list[str]:
        """Nodes of GPU model ``model`` where idle warm or standby pods are, in name order."""
        nodes = {
            self.pods[p].node
            for p in self.idle
            if self.pods[p].state in IDLE
            and self.pods[p].gpus
            and self.cluster.gpus[self.pods[p].gpus[0]].model == model
        }
        return sorted(nodes)

    def idle_share(self, gid: str) -> tuple[float, list[Pod]]:
        """The share idle pods hold on one card, and those pods (cheapest first)."""
        budget = self.policies.budget
        pods = [
            self.pods[o]
            for o in self.cluster.gpus[gid].allocs
            if o in self.pods and self.pods[o].state in IDLE
        ]
        pods.sort(key=lambda p: (p.state is not PodState.STANDBY, budget.value(p, self.books.now)))
        return sum(self.cluster.gpus[gid].allocs[p.id] for p in pods), pods

    # ------------------------------------------------------------------ keep-alive

    def renew(self, key: Key, until: float) -> None:
        """Keep the pods of (profile, tenant, tag) until ``until`` at least: warm ones now,
        a busy one when its job ends (:meth:`renewed_until`)."""
        self._renewed[key] = max(until, self._renewed.get(key, until))
        for pid in self.warm.get(key, {}):
            pod = self.pods[pid]
            if until > pod.deadline:
                pod.deadline = until
                heapq.heappush(self.deadlines, (until, self._seq_next(), pid))
                self._note_deadline(pod)

    def renewed_until(self, key: Key) -> float | None:
        """Until when (profile, tenant, tag)'s keep-alive was renewed, if it was."""
        return self._renewed.get(key)

    def expired(self, now: float) -> Iterator[Pod]:
        """Warm pods whose keep-alive ran out by ``now``, one at a time (each is stopped
        before the next is looked at); renewals that ran out are forgotten first."""
        for key in [k for k, until in self._renewed.items() if until <= now + EPS]:
            del self._renewed[key]
        while self.deadlines and self.deadlines[0][0] <= now + EPS:
            entry = heapq.heappop(self.deadlines)
            if self._armed(entry):
                yield self.pods[entry[2]]

    def next_deadline(self) -> float | None:
        """The earliest keep-alive deadline (when a Tick would stop a warm pod)."""
        while self.deadlines:
            if self._armed(self.deadlines[0]):
                return self.deadlines[0][0]
            heapq.heappop(self.deadlines)
        return None

    def keepalive_left(self, model: str, now: float) -> float:
        """How long idle pods of GPU model ``model`` may yet hold their cards by keep-alive:
        the latest deadline of a warm pod there, from ``now`` (``inf`` under always-on);
        with none warm, the longest keep-alive a new caller of the model's profiles gets
        (what a pod turning warm next would hold)."""
        until = self._warm_until.get(model)
        if until:
            return max(0.0, max(until.values()) - now)
        return self._first_ttl.get(model, 0.0)

    def timed_models(self) -> list[str]:
        """The GPU models with a warm pod's keep-alive deadline: their
        :meth:`keepalive_left` runs down with time (the others' is fixed)."""
        return [model for model, until in self._warm_until.items() if until]

    def _note_deadline(self, pod: Pod) -> None:
        if pod.gpus:  # a CPU-only pod holds no card a GPU pool's HP could need
            self._warm_until.setdefault(self.model_of(pod), {})[pod.id] = pod.deadline

    def _armed(self, entry: tuple[float, int, str]) -> bool:
        """Whether a keep-alive deadline still holds (its pod waits warm until then)."""
        pod = self.pods.get(entry[2])
        return pod is not None and pod.state is PodState.WARM and pod.deadline == entry[0]

    def _seq_next(self) -> int:
        self._heap_seq += 1
        return self._heap_seq

    # ------------------------------------------------------------------ invariants

    def check(self) -> None:
        """Raise if the index disagrees with the pods (used by tests after every event)."""
        idle = 0.0
        by_model: dict[str, float] = {}
        for pod in self.pods.values():
            if pod.state is PodState.GONE or pod.job_class is not JobClass.POOL:
                continue
            if pod.id in self.idle:
                share = self.pod_share(pod)
                idle += share
                model = self.model_of(pod)
                by_model[model] = by_model.get(model, 0.0) + share
        if abs(idle - self.idle_gpus) > 1e-6:
            raise AssertionError(f"idle GPUs {self.idle_gpus} != {idle}")
        for model in by_model.keys() | self.idle_by_model.keys():
            held = self.idle_by_model.get(model, 0.0)
            if abs(held - by_model.get(model, 0.0)) > 1e-6:
                raise AssertionError(f"idle GPUs of {model}: {held} != {by_model.get(model)}")
        for (profile, *pair), pods in self.warm.items():
            for pid in pods:
                pod = self.pods[pid]
                if pod.state is not PodState.WARM or (pod.profile, pod.owner) != (
                    profile,
                    tuple(pair),
                ):
                    raise AssertionError(f"warm index holds {pid} ({pod.state}, {pod.owner})")
        for pod in self.pods.values():
            if pod.state is PodState.STANDBY and pod.id in self.spare[pod.profile]:
                if pod.id not in self.promotable[pod.profile]:
                    raise AssertionError(f"spare {pod.id} not promotable")
            elif pod.state is PodState.STANDBY:
                # the promotable index must match the GPU: stale entries would stop busy pods
                gpu = self.cluster.gpus[pod.gpus[0]]
                ok = all(self._is_warm_pod(o) for o in gpu.allocs if o != pod.id)
                if ok != (pod.id in self.promotable[pod.profile]):
                    held = {o: self.pods[o].state.value for o in gpu.allocs if o in self.pods}
                    raise AssertionError(
                        f"standby {pod.id} promotable index stale: {gpu.id} holds {held}"
                    )
