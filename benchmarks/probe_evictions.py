"""Which HP jobs evict spot: each eviction counted by the evicting job's kind and GPU pool.

    .venv/bin/python benchmarks/probe_evictions.py --out /var/tmp/evictions.json \\
        --load medium --seed 0 --policy gfs --policy gfs-reserve-patient-lend \\
        --policy gfs-reserve-patient-lend+reservation.backfill_free=0

A policy is a registry preset, optionally with ``GFSConfig`` fields set after ``+``
(``name+field=value+...``, as ``stoker sim gfs --policy`` takes it: ``preset``). Each
runs in this process as ``stoker sim gfs --trace v2026`` runs it (same trace cut, load
copies, forecaster, window gate; the defaults are the full-fleet month's, ``--scale 0.1
--days 7 --warm-days 14 --burn-in-days 1 --query-every-min 30`` the 1/10-scale setup), and
prints and writes its metrics, each class's queueing by GPU pool (job-s) and its evictions of
measured spot jobs (submitted in the window: those the eviction rate counts) split by GPU
pool and by the evicting HP job's kind: ``holder`` (it held its GPU pool's reservation at some
time), ``backfill`` (tried beside a reservation, behind its bucket's head), else by its
shape (``probe_month.shape``: ``frac``, ``1gpu``, ``1gpu-gang``, ``1xN``, ``gang``; files
written before 2026-12-05 name every ``1xN`` ``multi``); each GPU pool's eta over the window
(its mean and the share of hourly feedback steps below 1); with the CPU seconds it took.

The counting is a probe's, not the core's: while a policy runs, the scheduler's
``_reclaim``, ``_evict``, ``_reserve``, ``_backfill`` and ``_feedback`` are wrapped to see
who evicts and when, and the simulator's ``_metrics`` to read the window; all are restored
after. The findings made `gfs-reserve-patient` (docs/evaluation/gfs.md).
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

import stoker.core.gfs.scheduler as sched
import stoker.sim.gfs as simgfs
from probe_month import month_options, run_month, shape, simulate_probed
from stoker.core.model import JobClass
from stoker.core.registry import preset
from stoker.forecast.base import Cadence
from stoker.traces import Trace

GS = sched.HpSpotScheduler


def _kind(job: Any, holders: set[str], in_backfill: bool) -> str:
    if job.id in holders:
        return "holder"
    return "backfill" if in_backfill else shape(job)


def run_policy(policy: str, trace: Trace, window: simgfs.Window, cadence: Cadence) -> dict:
    """One policy over ``trace``: its metrics, evictions by kind and GPU pool, CPU seconds."""
    spec = preset(policy)
    seen: list[tuple[Any, str, bool]] = []  # (victim, its GPU pool, whether in a backfill)
    holders: set[str] = set()
    state: dict[str, Any] = {"hp": None, "backfill": False}
    orig = (GS._reclaim, GS._evict, GS._reserve, GS._backfill)
    etas: dict[str, list[float]] = {}  # each GPU pool's eta after each feedback step in the window
    feedback = GS._feedback

    def reclaim(self: Any, job: Any, now: float, out: list, **kw: Any) -> bool:
        before, state["hp"] = state["hp"], job
        try:
            return orig[0](self, job, now, out, **kw)
        finally:
            state["hp"] = before

    def evict(self: Any, victim: Any, now: float, out: list) -> None:
        seen.append((victim.id, state["hp"], state["backfill"]))
        orig[1](self, victim, now, out)

    def reserve(self: Any, job: Any, gpu_pool: str, now: float) -> None:
        orig[2](self, job, gpu_pool, now)
        held = self._reserved.get(gpu_pool)
        if held is not None and held[0] == job.id:
            holders.add(job.id)

    def backfill(self: Any, *args: Any) -> None:
        state["backfill"] = True
        try:
            orig[3](self, *args)
        finally:
            state["backfill"] = False

    def step(self: Any, now: float) -> None:
        feedback(self, now)
        if window.start <= now < window.end:
            for gpu_pool in self.gpu_pools:
                etas.setdefault(gpu_pool, []).append(self.eta(gpu_pool))

    wrappers = {"_reclaim": reclaim, "_evict": evict, "_reserve": reserve, "_backfill": backfill}
    patches: list[tuple[object, str, object]] = [(GS, n, f) for n, f in wrappers.items()]
    result, core, _, cpu = simulate_probed(
        trace, spec, window, cadence, "ridge", [*patches, (GS, "_feedback", step)]
    )
    counts: Counter[str] = Counter()
    for victim, hp, in_backfill in seen:
        job = core.jobs[victim]
        if not window.start <= job.submitted < window.end:
            continue  # not a measured job: the eviction rate does not count it
        kind = "none" if hp is None else _kind(hp, holders, in_backfill)
        counts[f"{core.hpspot.gpu_pool_of(job)}/{kind}"] += 1
    queued: dict[str, float] = {}  # measured jobs' queueing, job-s, by class and GPU pool
    for job in core.jobs.values():
        if job.job_class in (JobClass.HP, JobClass.SPOT) and (
            window.start <= job.submitted < window.end
        ):
            key = f"{job.job_class.value}/{core.hpspot.gpu_pool_of(job)}"
            queued[key] = queued.get(key, 0.0) + job.queue_s
    return {
        "metrics": result.metrics,
        "evictions": sum(counts.values()),
        "evictions_by_pool_kind": dict(sorted(counts.items())),
        "queue_job_s_by_class_pool": {k: round(v) for k, v in sorted(queued.items())},
        # eta in the window: its mean and the share of feedback steps below 1, by GPU pool
        "eta_by_pool": {
            gpu_pool: {
                "mean": round(sum(v) / len(v), 4),
                "below_1": round(sum(1 for e in v if e < 1.0 - 1e-9) / len(v), 4),
            }
            for gpu_pool, v in sorted(etas.items())
        },
        "cpu_s": cpu,
    }


def _show(load: str, policy: str, r: dict[str, Any]) -> None:
    m = r["metrics"]
    print(
        f"{load}/{policy}: spot ev {m['spot.eviction_rate']:.4f} "
        f"({r['evictions']} evictions) q {m['spot.mean_queue_s']:,.0f} "
        f"hp q {m['hp.mean_queue_s']:,.0f} p99 {m['hp.p99_jct_s']:,.0f} "
        f"({r['cpu_s']} CPU-s)",
        flush=True,
    )
    for key, n in r["evictions_by_pool_kind"].items():
        print(f"    {key}: {n}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--policy", action="append", required=True)
    month_options(ap)
    args = ap.parse_args()
    run_month(args, args.policy, run_policy, _show)


if __name__ == "__main__":
    main()
