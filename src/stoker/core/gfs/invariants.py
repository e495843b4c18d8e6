"""The hp/spot scheduler's invariants: its indexes against the books they summarise."""

from __future__ import annotations

from stoker.core.gfs.placement import HP_SHARE_STEPS, no_hp_cards
from stoker.core.gfs.view import HpSpotView
from stoker.core.model import EPS, JobClass, JobState

_HP, _SPOT = JobClass.HP, JobClass.SPOT


def check_books(view: HpSpotView) -> None:
    """Raise if an index of the scheduler disagrees with the books (tests call it after
    every event): the GPUs each class holds per GPU pool, placements only of placed jobs,
    reservations of queued jobs on their GPU pool's nodes, each node's and GPU pool's counts."""
    for gpu_pool in view.gpu_pools:
        for cls in (_HP, _SPOT):
            view.queues[gpu_pool][cls].check()
            held = sum(
                s
                for jid, place in view.placement.items()
                if view.jobs[jid].job_class is cls and view.gpu_pool_of(view.jobs[jid]) == gpu_pool
                for _, _, s in place
            )
            if abs(held - view.used[gpu_pool][cls]) > 1e-6:
                raise AssertionError(f"{gpu_pool}/{cls} used {view.used[gpu_pool][cls]} != {held}")
    for jid in view.placement:
        job = view.jobs[jid]
        if job.state not in (JobState.PLACED, JobState.BINDING, JobState.RUNNING):
            raise AssertionError(f"job {jid} holds a placement in state {job.state}")
    for gpu_pool, (jid, reserved, _) in view.reservations.held.items():
        job = view.jobs[jid]
        if job.state is not JobState.QUEUED or view.gpu_pool_of(job) != gpu_pool:
            raise AssertionError(f"{gpu_pool}: reserved for job {jid} in state {job.state}")
        if not reserved <= view.gpu_pools[gpu_pool].nodes.keys():
            raise AssertionError(f"{gpu_pool}: reserved nodes {sorted(reserved)} not all its")
    for info in view.nodes.values():
        free = sum(1 for g in view.cluster.nodes[info.name].gpus if g.used < EPS)
        if free != info.full_free and info.name not in view.cluster.touched:
            raise AssertionError(f"node {info.name} full_free {info.full_free} != {free}")
        # the bound on an HP job's room: never below the cards really without HP
        if info.no_hp != no_hp_cards(info):
            raise AssertionError(f"node {info.name} no_hp {info.no_hp} is stale")
        without_hp = sum(
            1
            for g in view.cluster.nodes[info.name].gpus
            if not any(
                (pod := view.pods.get(owner)) is not None and pod.job_class is _HP
                for owner in g.allocs
            )
        )
        if info.no_hp < without_hp:
            raise AssertionError(f"node {info.name} no_hp {info.no_hp} < {without_hp}")
    hp_share: dict[str, float] = {}
    for jid, place in view.placement.items():
        if view.jobs[jid].job_class is _HP:
            for _, gid, share in place:
                hp_share[gid] = hp_share.get(gid, 0.0) + share
    for gpu_pool, index in view.gpu_pools.items():
        counts = [0] * (index.max_gpus + 1)
        for info in index.nodes.values():
            counts[info.no_hp] += 1
        if counts != index.by_no_hp:
            raise AssertionError(f"{gpu_pool}: nodes by cards without HP {index.by_no_hp}")
        # the reclaim-room index: spot nodes by free cards and cards spot alone holds
        rooms: list[list[tuple[int, str]]] = [[] for _ in index.by_room]
        for info in index.nodes.values():
            held = view.node_jobs[info.name].items()
            spot_cards = sum(len(c) for j, c in held if not view.jobs[j].fractional)
            if info.spot_cards != spot_cards:
                raise AssertionError(f"node {info.name} spot_cards {info.spot_cards} is stale")
            touched = info.name in view.cluster.touched
            if not touched and info.frac_cards != view.frac_cards(info):
                raise AssertionError(f"node {info.name} frac_cards {info.frac_cards} is stale")
            if info.name in index.spot_nodes:
                rooms[info.full_free + info.victim_cards].append((info.ordinal, info.name))
        if [sorted(b) for b in rooms] != index.by_room:
            raise AssertionError(f"{gpu_pool}: spot nodes by reclaim room are stale")
        reach = [0] * len(index.by_reach)
        for info in index.nodes.values():
            reach[info.full_free + info.victim_cards] += 1
        if reach != index.by_reach:
            raise AssertionError(f"{gpu_pool}: nodes by free and spot cards {index.by_reach}")
        cards = [0] * (HP_SHARE_STEPS + 1)
        for info in index.nodes.values():
            for gpu in view.cluster.nodes[info.name].gpus:
                share = index.hp_share.get(gpu.id, 0.0)
                if abs(share - hp_share.get(gpu.id, 0.0)) > 1e-6:
                    raise AssertionError(f"card {gpu.id}: HP share {share} is stale")
                cards[min(HP_SHARE_STEPS, int(share * HP_SHARE_STEPS + 1e-6))] += 1
        if cards != index.by_hp_share:
            raise AssertionError(f"{gpu_pool}: cards by HP share {index.by_hp_share}")
