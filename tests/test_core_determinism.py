"""Determinism: the same event sequence gives the same actions, in this process and in
processes with other string-hash seeds (so no decision depends on iterating a set). The
stream mixes pool, hp and spot jobs and forecasts, so preemptions and reclaims of idle
pods are in the log being compared."""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys

from stoker.core import (
    BindJob,
    Cluster,
    Core,
    Failure,
    ForecastUpdated,
    JobCancelled,
    JobClass,
    JobRequeued,
    JobSpec,
    JobSubmitted,
    PodFailed,
    PodGone,
    PodReady,
    Policies,
    Profile,
    PromoteStandby,
    RankExited,
    RankStarted,
    RecyclePod,
    StartPod,
    StopPod,
    Tick,
)
from stoker.core.policies import FittedKeepAlive, FixedKeepAlive, QueueDrivenBudget

PROFILES = [
    Profile("p", share=0.9, standby_share=0.1),
    Profile("q", recyclable=True),
    Profile("g", gpus=2),
    Profile("x"),
]


def run(
    seed: int, steps: int = 3000, counts: dict[str, int] | None = None, keep_s: float = 0.0
) -> str:
    """Drive a core with a seeded random workload and runtime; return a digest of every
    action it asked for (``counts`` gets the preemptions and HP reclaims seen; ``keep_s``
    keeps warm pods that long instead of a fitted keep-alive and a tight budget)."""
    rng = random.Random(seed)
    policies = Policies(
        keepalive=FittedKeepAlive(min_samples=3, fallback_s=20.0),
        budget=QueueDrivenBudget(fraction=0.5, floor=1.0),
    )
    if keep_s:
        policies = Policies(keepalive=FixedKeepAlive(keep_s), budget=QueueDrivenBudget(floor=8.0))
    core = Core(Cluster.uniform(4, 4), PROFILES, policies)
    starting: list[str] = []
    binding: list[str] = []
    running: list[str] = []
    stopping: list[str] = []
    digest = hashlib.sha256()
    now = 0.0
    for i in range(steps):
        now += rng.expovariate(2.0)
        roll = rng.random()
        if roll < 0.08:
            cls = rng.choice([JobClass.HP, JobClass.SPOT])
            gpus = rng.choice([0.5, 1, 2])
            workers = rng.choice([1, 1, 1, 2]) if cls is JobClass.HP else 1
            spec = JobSpec(
                f"j{i}", rng.choice("tu"), "x", job_class=cls, workers=workers, gpus=gpus
            )
            event = JobSubmitted(spec)
        elif roll < 0.1:
            event = ForecastUpdated(rng.choice("tu"), "any", (rng.choice([0.0, 4.0]),), (1.0,))
        elif roll < 0.3:
            spec = JobSpec(
                f"j{i}",
                rng.choice("tu"),
                rng.choice("ppqg"),
                rng.choice("abcd"),
                workers=rng.choice([1, 1, 1, 2]),
            )
            event = JobSubmitted(spec)
        elif roll < 0.45 and starting:
            event = PodReady(starting.pop(rng.randrange(len(starting))))
        elif roll < 0.6 and binding:
            rank = binding.pop(rng.randrange(len(binding)))
            running.append(rank)
            event = RankStarted(*rank)
        elif roll < 0.8 and running:
            event = RankExited(*running.pop(rng.randrange(len(running))))
        elif roll < 0.9 and stopping:
            event = PodGone(stopping.pop(rng.randrange(len(stopping))))
        elif roll < 0.93 and starting:
            event = PodFailed(starting.pop(rng.randrange(len(starting))), Failure.START_TIMEOUT)
        elif roll < 0.95 and core.jobs:
            event = JobCancelled(rng.choice(list(core.jobs)))
        else:
            event = Tick()
        actions = core.handle(event, now)
        for a in actions:
            match a:
                case StartPod(pod=pid) | PromoteStandby(pod=pid):
                    starting.append(pid)
                case RecyclePod(new_pod=pid):
                    starting.append(pid)
                case StopPod(pod=pid):
                    if pid in starting:
                        starting.remove(pid)
                    stopping.append(pid)
                case BindJob(job=jid, pods=pods):
                    binding.extend((jid, r) for r in range(len(pods)))
            if counts is not None and isinstance(a, JobRequeued | StopPod):
                kind = {Failure.PREEMPTED: "preempted", "reclaim_hp": "reclaimed"}.get(a.reason)
                if kind:
                    counts[kind] = counts.get(kind, 0) + 1
        digest.update(repr((now, event, actions)).encode())
    core.check()
    return digest.hexdigest()


def test_same_events_same_actions() -> None:
    assert run(7) == run(7)
    assert run(7) != run(8)
    counts: dict[str, int] = {}
    assert run(7, counts=counts, keep_s=600.0) == run(7, keep_s=600.0)
    # the log compared holds spot evictions and idle pods reclaimed for HP work
    assert counts.get("preempted", 0) > 0 and counts.get("reclaimed", 0) > 0, counts


def test_same_actions_under_other_hash_seeds() -> None:
    here = run(11)
    code = "from test_core_determinism import run; print(run(11))"
    tests_dir = os.path.dirname(__file__)
    for hash_seed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        env["PYTHONPATH"] = os.pathsep.join([tests_dir, env.get("PYTHONPATH", "")])
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == here
