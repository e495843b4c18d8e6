"""The warm budget kept: how many GPUs idle pods may hold, and which go when over it.

One :class:`BudgetKeeper` per :class:`~stoker.core.warm.WarmPools`. It holds each GPU pool's
HP cap (set by the core from that GPU pool's HP forecast), reads the budget's queue-driven limit,
and names the idle pods to stop when over (least valuable first) and the spare pods to start
for each profile's minimum warm count. It stops and starts nothing itself: it names pods and
slots one at a time, and the warm pools carry each out before it looks at the next.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

from stoker.core.model import EPS, Pod, Profile
from stoker.core.warm.idle import IdlePods
from stoker.core.warm.planner import RoomPlanner
from stoker.core.warm.queues import PoolQueues

if TYPE_CHECKING:
    from stoker.core.books import Books
    from stoker.core.config import Policies
    from stoker.core.ports import HpRoom


class BudgetKeeper:
    """The warm budget and each GPU pool's HP cap, enforced over the idle pods."""

    def __init__(
        self,
        books: Books,
        idle: IdlePods,
        queues: PoolQueues,
        planner: RoomPlanner,
        policies: Policies,
    ) -> None:
        self.cluster = books.cluster
        self.profiles = books.profiles
        self.jobs = books.jobs
        self.pods = books.pods
        self.idle = idle
        self.queues = queues
        self.planner = planner
        self.policies = policies
        # the hp/spot part's holds on room (wired by the warm pools' ``connect``)
        self.hp: HpRoom
        # per GPU model, the GPUs idle pods there may hold at most so HP demand finds its
        # room (the core sets it by the warm cap policy from that GPU pool's HP forecast:
        # what HP is not forecast to need); a model without an entry is not capped
        self.hp_cap: dict[str, float] = {}

    def limit(self) -> float:
        """GPUs idle pods may hold now.

        The budget's queue-driven limit, except that standby pods staged beside busy pods
        count against the base cap alone: stopping one frees a sliver of a busy GPU that no
        queued job can use, and promoting it is the fastest way to serve the queue once that
        GPU's job ends.
        """
        base = self.base()
        limit = min(
            self._hp_total(),
            self.policies.budget.limit(self.cluster.total_gpus, self.queues.queued_gpus),
        )
        if self.idle.idle_gpus <= limit + EPS or limit >= base:
            return limit
        return min(base, limit + sum(self.idle.staged_standby().values()))

    def base(self) -> float:
        """The base cap: what idle pods may hold with nothing queued."""
        return min(self._hp_total(), self.policies.budget.limit(self.cluster.total_gpus, 0.0))

    def _hp_total(self) -> float:
        """GPUs idle pods may hold under the HP forecast, every GPU model together (each
        model is held to its own cap: :meth:`_over_hp_cap`)."""
        caps = self.hp_cap
        if not caps:
            return math.inf
        return sum(min(caps.get(m, math.inf), c) for m, c in self.cluster.capacity.items())

    def room_for_standby(self, model: str, share: float) -> bool:
        """Whether a new standby of ``share`` on a card of GPU model ``model`` fits: beside
        a busy pod it is bounded by the base cap (:meth:`limit`) and its GPU pool's HP cap."""
        if self.idle.idle_gpus + share > self.base() + EPS:
            return False
        held = self.idle.idle_by_model.get(model, 0.0)
        # its GPU pool's HP forecast may leave idle pods no more room
        return held + share <= self.hp_cap.get(model, math.inf) + EPS

    def over_budget(self, now: float) -> Iterator[Pod]:
        """The idle pods to stop, one at a time: per GPU model those over its HP cap, then
        those over the budget's limit, least valuable first."""
        if not self.idle.idle:
            return  # no idle pod to stop (the hp/spot-only case: skip reading the limits)
        yield from self._over_hp_cap(now)
        limit = self.limit()
        if self.idle.idle_gpus <= limit + EPS:
            return
        budget = self.policies.budget
        # over the queue-driven limit only: staged standby pods are not what stands in the
        # queue's way (see limit); over the base cap, every idle pod may go
        keep = self.idle.staged_standby() if self.idle.idle_gpus <= self.base() + EPS else {}
        # CPU-only pods hold no GPU: stopping them frees nothing the budget counts
        ready = [self.pods[p] for p in self.idle.idle if p not in keep and self.pods[p].gpus]
        ready.sort(key=lambda pod: (budget.value(pod, now), pod.id))
        for pod in ready:
            if self.idle.idle_gpus <= limit + EPS:
                break
            yield pod

    def _over_hp_cap(self, now: float) -> Iterator[Pod]:
        """Per GPU model: idle pods over what its HP forecast leaves them, least valuable
        first."""
        budget = self.policies.budget
        for model, cap in self.hp_cap.items():
            if self.idle.idle_by_model.get(model, 0.0) <= cap + EPS:
                continue
            ready = [
                self.pods[p]
                for p in self.idle.idle
                if self.pods[p].gpus and self.idle.model_of(self.pods[p]) == model
            ]
            ready.sort(key=lambda pod: (budget.value(pod, now), pod.id))
            for pod in ready:
                if self.idle.idle_by_model.get(model, 0.0) <= cap + EPS:
                    break
                yield pod

    def spares(self) -> Iterator[tuple[Profile, str, list[str]]]:
        """Spare pods to start, one (profile, node, gpus) at a time, up to each profile's
        minimum warm count, while its queue is empty (queued jobs take the room first), no
        job waits for room being freed in its GPU pool (a spare on a card reclaimed for it
        would be reclaimed again, without end), capacity is free and the warm budget has
        room for them."""
        for name, own in self.policies.profiles.items():
            spare = self.idle.spare.get(name)
            if spare is None or len(spare) >= own.min_warm or self.queues.queues[name]:
                continue
            profile = self.profiles[name]
            if profile.gpu_demand and self._freeing_room(profile.gpu_model):
                continue
            cap = self.hp_cap.get(profile.gpu_model, math.inf)
            while len(spare) < own.min_warm:
                if self.idle.idle_gpus + profile.gpu_demand > self.limit() + EPS:
                    break
                held = self.idle.idle_by_model.get(profile.gpu_model, 0.0)
                if profile.gpu_demand and held + profile.gpu_demand > cap + EPS:
                    break  # its GPU pool's HP forecast leaves idle pods no more room
                slots = self.planner.find_capacity(profile, 1, set())
                if not slots:
                    break
                node, gpus = slots[0]
                yield profile, node, gpus

    def _freeing_room(self, model: str) -> bool:
        """Whether idle pods of GPU model ``model`` are stopping to make room for a waiting
        job, pool (this part's reclaim) or HP (the gang scheduler's)."""
        if self.hp.freeing_room(model):
            return True
        return any(
            self.profiles[self.jobs[j].spec.profile].gpu_model == model for j in self.queues.reclaim
        )
