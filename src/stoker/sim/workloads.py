"""Workload generators: agent loops, RL loops and a production-like mix of many callers.

Every caller's plan (its job run times and pauses) is drawn up front from its own seeded
stream, so the same seed gives every policy exactly the same work to do; only how fast the
warm pools serve it differs. A plan is a list of steps; a step is a set of chains run in
parallel (a chain is jobs run one after another: a rollout then its verifier); the next
step starts a pause after the last chain of the step ends (a think pause, a training step).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from stoker.core import JobSpec
from stoker.sim.engine import Simulator
from stoker.sim.params import Dist

Chain = list[tuple[str, float]]  # (reuse tag, run seconds) in order


@dataclass(frozen=True, slots=True)
class Step:
    chains: list[Chain]
    pause_after: float


@dataclass(frozen=True, slots=True)
class CallerPlan:
    """One caller (a tenant's loop): when it starts and what it submits."""

    tenant: str
    profile: str
    start_s: float
    steps: list[Step]

    @property
    def jobs(self) -> int:
        return sum(len(c) for s in self.steps for c in s.chains)


class LoopWorkload:
    """Runs caller plans as closed loops on a :class:`Simulator`."""

    def __init__(self, plans: list[CallerPlan], prefix: str = "j") -> None:
        """``prefix``: of the job ids (``{prefix}{n}``), so another workload's jobs run
        beside these in one simulation without a clash."""
        if not plans:
            raise ValueError("workload: needs at least one caller plan")
        self.plans = plans
        self.prefix = prefix
        self._remaining = len(plans)
        self._open: dict[int, int] = {}
        self._jobs: dict[str, tuple[int, int, int, int]] = {}
        self._n = 0

    @property
    def requests(self) -> int:
        """Jobs the workload submits in all."""
        return sum(p.jobs for p in self.plans)

    @property
    def done(self) -> bool:
        return self._remaining == 0

    def begin(self, sim: Simulator) -> None:
        for ci, plan in enumerate(self.plans):
            sim.at(plan.start_s, self._start_step, sim, ci, 0)

    def _start_step(self, sim: Simulator, ci: int, si: int) -> None:
        chains = self.plans[ci].steps[si].chains
        self._open[ci] = len(chains)
        for k in range(len(chains)):
            self._submit(sim, ci, si, k, 0)

    def _submit(self, sim: Simulator, ci: int, si: int, k: int, pos: int) -> None:
        plan = self.plans[ci]
        tag, run_s = plan.steps[si].chains[k][pos]
        self._n += 1
        jid = f"{self.prefix}{self._n}"
        self._jobs[jid] = (ci, si, k, pos)
        sim.submit(JobSpec(jid, plan.tenant, plan.profile, tag), run_s)

    def owns(self, job_id: str) -> bool:
        """Whether ``job_id`` is a job of this workload still running or waiting."""
        return job_id in self._jobs

    def job_done(self, sim: Simulator, job_id: str) -> None:
        ci, si, k, pos = self._jobs.pop(job_id)
        step = self.plans[ci].steps[si]
        if pos + 1 < len(step.chains[k]):
            self._submit(sim, ci, si, k, pos + 1)
            return
        self._open[ci] -= 1
        if self._open[ci]:
            return
        if si + 1 < len(self.plans[ci].steps):
            sim.after(step.pause_after, self._start_step, sim, ci, si + 1)
        else:
            self._remaining -= 1


def _rng(seed: int, stream: int, caller: int) -> np.random.Generator:
    return np.random.default_rng([seed, stream, caller])


# ---------------------------------------------------------------------- agent loop


@dataclass(frozen=True, slots=True)
class AgentLoopSpec:
    """An agent: run a tool job, think (an LLM call), run again. ``callers`` agents start
    ``stagger_s`` apart. Run and think times are assumptions: a short tool call (median 1 s)
    and one fast LLM turn (median 1.5 s); the sensitivity sweep stretches the pause."""

    callers: int = 1
    steps: int = 40
    run: Dist = field(default_factory=lambda: Dist("lognormal", 1.0, 0.5))
    think: Dist = field(default_factory=lambda: Dist("lognormal", 1.5, 0.5))
    stagger_s: float = 0.0
    profile: str = "gpu"


def agent_loop(spec: AgentLoopSpec, seed: int) -> LoopWorkload:
    if spec.callers < 1 or spec.steps < 1:
        raise ValueError("agent loop: callers and steps must be >= 1")
    plans = []
    for ci in range(spec.callers):
        rng = _rng(seed, 1, ci)
        runs = spec.run.sample_n(rng, spec.steps)
        thinks = spec.think.sample_n(rng, spec.steps)
        steps = [Step([[("loop", float(r))]], float(t)) for r, t in zip(runs, thinks, strict=True)]
        plans.append(CallerPlan(f"agent-{ci}", spec.profile, ci * spec.stagger_s, steps))
    return LoopWorkload(plans)


# ---------------------------------------------------------------------- RL loop


@dataclass(frozen=True, slots=True)
class RLLoopSpec:
    """An RL trainer: each step a batch of ``rollouts`` rollouts, each followed by its
    verifier, then a training-step pause before the next batch. Assumptions: rollouts of
    median 2 s, verifiers of 0.8 s, a training step of 3 s (a small policy, short episodes)."""

    trainers: int = 1
    steps: int = 12
    rollouts: int = 16
    rollout: Dist = field(default_factory=lambda: Dist("lognormal", 2.0, 0.4))
    verifier: Dist = field(default_factory=lambda: Dist("lognormal", 0.8, 0.4))
    train: Dist = field(default_factory=lambda: Dist("lognormal", 3.0, 0.3))
    profile: str = "gpu"


def rl_loop(spec: RLLoopSpec, seed: int) -> LoopWorkload:
    if spec.trainers < 1 or spec.steps < 1 or spec.rollouts < 1:
        raise ValueError("rl loop: trainers, steps and rollouts must be >= 1")
    plans = []
    for ci in range(spec.trainers):
        rng = _rng(seed, 2, ci)
        steps = []
        for _ in range(spec.steps):
            rolls = spec.rollout.sample_n(rng, spec.rollouts)
            verifs = spec.verifier.sample_n(rng, spec.rollouts)
            chains = [
                [("rollout", float(r)), ("verifier", float(v))]
                for r, v in zip(rolls, verifs, strict=True)
            ]
            steps.append(Step(chains, spec.train.sample(rng)))
        plans.append(CallerPlan(f"trainer-{ci}", spec.profile, 0.0, steps))
    return LoopWorkload(plans)


# ---------------------------------------------------------------------- production-like mix


@dataclass(frozen=True, slots=True)
class MixSpec:
    """Many callers of a few tenants arriving over ``duration_s``, ``burst_share`` of them
    inside ``bursts`` windows of ``burst_s``. Each session is an agent loop (its own reuse
    tag, a geometric number of steps of mean ``agent_steps``, its own median think pause
    drawn log-uniformly from ``think_median_s``) or, with probability ``rl_share``, a small
    RL loop of ``rl_batch`` parallel rollouts per step."""

    sessions: int = 240
    tenants: int = 12
    duration_s: float = 3600.0
    bursts: int = 6
    burst_s: float = 90.0
    burst_share: float = 0.35
    agent_steps: float = 14.0
    think_median_s: tuple[float, float] = (1.0, 20.0)
    think_sigma: float = 0.6
    run: Dist = field(default_factory=lambda: Dist("lognormal", 3.0, 0.8))
    rl_share: float = 0.15
    rl_batch: int = 4
    rl_steps: float = 8.0
    rl_train: Dist = field(default_factory=lambda: Dist("lognormal", 15.0, 0.4))
    profile: str = "gpu"


def mix(spec: MixSpec, seed: int) -> LoopWorkload:
    """The production-like mix of :class:`MixSpec`."""
    if spec.sessions < 1 or spec.tenants < 1:
        raise ValueError("mix: sessions and tenants must be >= 1")
    if not 0.0 <= spec.burst_share <= 1.0 or not 0.0 <= spec.rl_share <= 1.0:
        raise ValueError("mix: burst_share and rl_share must be in [0, 1]")
    top = _rng(seed, 3, 0)
    burst_starts = np.sort(top.uniform(0.0, max(1.0, spec.duration_s - spec.burst_s), spec.bursts))
    lo, hi = np.log(spec.think_median_s[0]), np.log(spec.think_median_s[1])
    plans = []
    for si in range(spec.sessions):
        rng = _rng(seed, 4, si)
        if spec.bursts and rng.random() < spec.burst_share:
            start = float(burst_starts[rng.integers(spec.bursts)] + rng.uniform(0, spec.burst_s))
        else:
            start = float(rng.uniform(0.0, spec.duration_s))
        tenant = f"tenant-{int(rng.integers(spec.tenants))}"
        if rng.random() < spec.rl_share:
            n = int(rng.geometric(1.0 / spec.rl_steps))
            steps = [
                Step(
                    [[(f"s{si}", float(r))] for r in spec.run.sample_n(rng, spec.rl_batch)],
                    spec.rl_train.sample(rng),
                )
                for _ in range(n)
            ]
        else:
            n = int(rng.geometric(1.0 / spec.agent_steps))
            think = Dist("lognormal", float(np.exp(rng.uniform(lo, hi))), spec.think_sigma)
            runs = spec.run.sample_n(rng, n)
            pauses = think.sample_n(rng, n)
            steps = [
                Step([[(f"s{si}", float(r))]], float(p)) for r, p in zip(runs, pauses, strict=True)
            ]
        plans.append(CallerPlan(tenant, spec.profile, start, steps))
    return LoopWorkload(plans)


def scale_pauses(plans: list[CallerPlan], factor: float) -> list[CallerPlan]:
    """The same plans with every pause multiplied by ``factor`` (the sensitivity sweep)."""
    return [
        CallerPlan(
            p.tenant,
            p.profile,
            p.start_s,
            [Step(s.chains, s.pause_after * factor) for s in p.steps],
        )
        for p in plans
    ]
