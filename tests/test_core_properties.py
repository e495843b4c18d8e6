"""Property tests: random event sequences against the core's invariants.

A state machine plays runtime and callers at once: it submits, cancels, reports pods ready,
failed and gone, jobs started and finished (sometimes late, for jobs the core has already
moved on from), and lets time pass. After every event it checks:

Pool, hp and spot jobs go through the one core together:

- no pod ever serves two (tenant, tag) pairs, and an hp/spot pod never a second job;
- HP is never evicted, only spot is; a gang is placed whole (one pod per worker) and
  evicted whole (every pod stopped, the job back in its queue with none);
- spot usage is within its GPU pool's quota whenever spot is admitted;
- a job ends once (``JobEnded``) and is never bound again after it;
- no GPU holds more than 1.0 (``Core.check``: shares, indexes, idle total, queues);
- the warm budget's HP cap, followed only for the GPU pools whose inputs moved, equals its
  full recomputation after every scheduling pass;
- every submitted job is queued, placed, binding, running or finished, and a job that is
  placed, binding or running only points at live pods (a dead pod would strand it);
- no queue waits while its head would fit in free room;
- the warm budget holds once the actions are applied: the GPUs held by idle warm pods and
  by standby pods (starting or ready, not promoted), not counting pods the core has asked
  to stop, are at most the budget's limit.

At the end it answers everything and finishes every job: every job must finish (none lost
or stranded). Then it forgets every finished job and gone pod (as the broker does once the
store holds them; the machine also forgets some on the way): no name of a forgotten job or
pod is left anywhere in the core. Determinism: replaying the same events gives the same
actions.

``STOKER_CORE_EXAMPLES=3000`` runs a deeper search than CI's default.
"""

from __future__ import annotations

import math
import os
import types
from collections import deque
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import event as note_event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from conftest import Driver
from stoker.core import (
    BindJob,
    Cluster,
    Core,
    CoreError,
    Failure,
    ForecastUpdated,
    JobCancelled,
    JobClass,
    JobEnded,
    JobForgotten,
    JobRequeued,
    JobSpec,
    JobState,
    JobSubmitted,
    KeepAliveRenewed,
    KillJob,
    Node,
    NodeAdded,
    NodeChanged,
    NodeRemoved,
    PodFailed,
    PodForgotten,
    PodGone,
    PodState,
    Policies,
    Profile,
    ProfilePolicies,
    PromoteStandby,
    RankStarted,
    RecyclePod,
    StartPod,
    StopPod,
    Tick,
)
from stoker.core.gfs import GFSConfig
from stoker.core.gfs.quota import ForecastQuota, StaticQuota
from stoker.core.policies import (
    AlwaysOn,
    BesideActive,
    FittedKeepAlive,
    FixedKeepAlive,
    NoStandby,
    QueueDrivenBudget,
    ReuseMatching,
    StaticBudget,
)
from stoker.core.shares import Share, TenantShares

PROFILES = [
    Profile("p", share=0.9, standby_share=0.1),
    Profile("q", recyclable=True),
    Profile("g", gpus=2),
    Profile("h", share=0.45, standby_share=0.1),  # two pods and a standby share a GPU
    Profile("x"),  # hp and spot jobs' base environment
    Profile("c", gpus=0, cpu=1.0, memory_gb=1.0),  # CPU-only: two fit a node's CPU slots
]
POLICIES = [
    lambda: Policies(),
    lambda: Policies(
        keepalive=FittedKeepAlive(min_samples=2, fallback_s=5.0),
        budget=QueueDrivenBudget(gpus=2.0, floor=0.5),
    ),
    lambda: Policies(keepalive=AlwaysOn(), budget=StaticBudget(gpus=1.0)),
    lambda: Policies(matching=ReuseMatching(reuse=False), standby=NoStandby()),
    lambda: Policies(
        keepalive=FixedKeepAlive(0.0), budget=QueueDrivenBudget(), standby=BesideActive(1)
    ),
    lambda: Policies(hpspot=GFSConfig(quota=StaticQuota(0.5))),
    lambda: Policies(hpspot=GFSConfig(quota=StaticQuota(1.0), queue="fifo")),
    lambda: Policies(hpspot=GFSConfig(quota=ForecastQuota())),
    lambda: Policies(
        profiles={
            "p": ProfilePolicies(FixedKeepAlive(2.0), min_warm=1),
            "c": ProfilePolicies(AlwaysOn(), min_warm=1),
            "g": ProfilePolicies(min_warm=1),
        }
    ),
    # tenant shares (indexes above are named by tests: new ones go last)
    lambda: Policies(
        shares=TenantShares({"u": Share(weight=2.0, hp_gpus={"any": 2.0})}, Share(max_warm_pods=1))
    ),
    lambda: Policies(
        hpspot=GFSConfig(quota=StaticQuota(1.0), queue="fifo"),
        shares=TenantShares({"t": Share(hp_gpus={"any": 1.0})}),
    ),
]


def _cluster(nodes: int) -> Cluster:
    """Nodes of 2 GPUs, each with CPU slots for two CPU-only pods."""
    built = Cluster.uniform(nodes, 2)
    return Cluster([Node(n.name, n.gpu_model, n.gpus, 2.0, 2.0) for n in built.nodes.values()])


FAILURES = [None, Failure.USER_ERROR, Failure.POD_DIED, Failure.TIMEOUT]


class CoreMachine(RuleBasedStateMachine):
    """Random callers and a random runtime against one core."""

    def __init__(self) -> None:
        super().__init__()
        self.d: Driver
        self.owners: dict[str, tuple[str, str]] = {}
        self.standby: dict[str, None] = {}  # started as standby and not promoted
        self.bound_to: dict[str, str] = {}  # hp/spot pod -> the one job it ran
        self.ended: dict[str, None] = {}
        self.seen = 0
        self.n = 0

    @initialize(policy=st.integers(0, len(POLICIES) - 1), nodes=st.integers(1, 2))
    def setup(self, policy: int, nodes: int) -> None:
        core = Core(_cluster(nodes), PROFILES, POLICIES[policy]())
        follow = core._follow_hp_cap

        def follow_checked(now: float) -> None:
            # the warm cap, followed GPU pool by GPU pool, is its full recomputation (order too)
            follow(now)
            assert list(core.warm.hp_cap.items()) == list(core._hp_cap(now).items())

        core._follow_hp_cap = follow_checked  # type: ignore[method-assign]
        self.d = Driver(core)
        self.policy = policy
        self.nodes = nodes

    # ------------------------------------------------------------ callers

    @rule(
        tenant=st.sampled_from(["t", "u"]),
        tag=st.sampled_from(["a", "b"]),
        profile=st.sampled_from(["p", "p", "q", "g", "h", "c"]),
        workers=st.sampled_from([1, 1, 1, 2]),
    )
    def submit(self, tenant: str, tag: str, profile: str, workers: int) -> None:
        if self.d.core.refusal(JobSpec("?", tenant, profile, tag, workers=workers)):
            with pytest.raises(CoreError):  # it could never start: nothing registered
                self.d.submit(tenant, tag, profile, workers)
            return
        self.d.submit(tenant, tag, profile, workers)

    @rule(
        tenant=st.sampled_from(["t", "u"]),
        cls=st.sampled_from([JobClass.HP, JobClass.SPOT]),
        gpus=st.sampled_from([0.25, 0.5, 1, 2]),
        workers=st.sampled_from([1, 1, 2]),
    )
    def submit_gang(self, tenant: str, cls: JobClass, gpus: float, workers: int) -> None:
        """An hp or spot job; spot no larger than the smallest quota (it must run some day)."""
        if cls is JobClass.SPOT:
            gpus, workers = min(gpus, 1.0), 1
        self.n += 1
        spec = JobSpec(f"g{self.n}", tenant, "x", job_class=cls, workers=workers, gpus=gpus)
        if self.d.core.refusal(spec):
            with pytest.raises(CoreError):  # it could never start: nothing registered
                self.d.send(JobSubmitted(spec))
            assert spec.id not in self.d.core.jobs
            return
        self.d.send(JobSubmitted(spec))

    @rule(
        tenant=st.sampled_from(["t", "u"]),
        mean=st.sampled_from([0.0, 1.0, 3.0]),
        var=st.sampled_from([0.0, 1.0]),
    )
    def forecast(self, tenant: str, mean: float, var: float) -> None:
        self.d.send(ForecastUpdated(tenant, "any", (mean,), (var,)))

    @precondition(lambda self: self.d.core.jobs)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        jid = data.draw(st.sampled_from(sorted(self.d.core.jobs)))
        self.d.send(JobCancelled(jid))

    # ------------------------------------------------------------ runtime

    @precondition(lambda self: self.d.starting)
    @rule(data=st.data())
    def ready(self, data: st.DataObject) -> None:
        self.d.ready([data.draw(st.sampled_from(list(self.d.starting)))])

    @precondition(lambda self: self.d.binding)
    @rule(data=st.data())
    def started(self, data: st.DataObject) -> None:
        jid = data.draw(st.sampled_from(list(self.d.binding)))
        for rank in range(self.d.workers(jid)):
            self.d.send(RankStarted(jid, rank))

    @precondition(lambda self: self.d.binding or self.d.running)
    @rule(data=st.data(), failure=st.sampled_from(FAILURES))
    def finished(self, data: st.DataObject, failure: Failure | None) -> None:
        jid = data.draw(st.sampled_from([*self.d.binding, *self.d.running]))
        self.d.finish(jid, exit_code=0 if failure is None else 1, failure=failure)

    @precondition(lambda self: self.d.stopping)
    @rule(data=st.data())
    def gone(self, data: st.DataObject) -> None:
        self.d.gone([data.draw(st.sampled_from(list(self.d.stopping)))])

    @precondition(lambda self: any(p.state is not PodState.GONE for p in self.d.core.pods.values()))
    @rule(data=st.data(), lost=st.booleans())
    def pod_failed(self, data: st.DataObject, lost: bool) -> None:
        """A pod dies (PodFailed) or the runtime loses it without being asked (PodGone)."""
        live = sorted(p.id for p in self.d.core.pods.values() if p.state is not PodState.GONE)
        pid = data.draw(st.sampled_from(live))
        self.d.starting.pop(pid, None)
        self.d.stopping.pop(pid, None)
        self.d.send(PodGone(pid) if lost else PodFailed(pid))

    @precondition(lambda self: "node-1" in self.d.core.cluster.nodes)
    @rule()
    def node_leaves(self) -> None:
        """The second node leaves (drained): its pods fail, and queued jobs that fit
        nowhere now are set aside (:attr:`JobState.SET_ASIDE`)."""
        self.d.send(NodeRemoved("node-1"))
        aside = any(j.state is JobState.SET_ASIDE for j in self.d.core.jobs.values())
        note_event(f"queued jobs set aside: {aside}")

    @precondition(lambda self: self.nodes == 2 and "node-1" not in self.d.core.cluster.nodes)
    @rule()
    def node_returns(self) -> None:
        self.d.send(NodeAdded("node-1", "any", 2, cpu=2.0))

    @precondition(lambda self: "node-0" in self.d.core.cluster.nodes)
    @rule(
        cards=st.lists(st.integers(0, 3), min_size=1, max_size=4, unique=True),
        slots=st.sampled_from([0.0, 1.0, 2.0, 3.0]),
    )
    def node_changes(self, cards: list[int], slots: float) -> None:
        """The first node changes in place (a host restarted with other GPUs or memory):
        the pods on the cards it keeps stay, the others fail, new cards are free."""
        ids = tuple(f"node-0/{i}" for i in cards)
        self.d.send(NodeChanged("node-0", "any", len(ids), slots, slots, ids))
        kept = set(ids)
        for pod in self.d.core.pods.values():
            if pod.node == "node-0" and pod.state is not PodState.GONE:
                assert kept.issuperset(pod.gpus), f"{pod.id} lives on a lost card"

    @rule(
        tenant=st.sampled_from(["t", "u"]),
        tag=st.sampled_from(["a", "b"]),
        profile=st.sampled_from(["p", "c"]),
        keepalive_s=st.sampled_from([1.0, 50.0]),
    )
    def renew(self, tenant: str, tag: str, profile: str, keepalive_s: float) -> None:
        self.d.send(KeepAliveRenewed(tenant, tag, profile, keepalive_s))

    @precondition(lambda self: _forgettable(self.d.core))
    @rule(data=st.data())
    def forget(self, data: st.DataObject) -> None:
        """The driver keeps a finished job's or a gone pod's record elsewhere now."""
        self.d.send(data.draw(st.sampled_from(_forgettable(self.d.core))))

    @rule(dt=st.sampled_from([0.5, 3.0, 30.0, 120.0]))
    def tick(self, dt: float) -> None:
        self.d.send(Tick(), at=self.d.now + dt)

    # ------------------------------------------------------------ invariants

    @invariant()
    def consistent(self) -> None:
        if not hasattr(self, "d"):
            return
        core = self.d.core
        spot_started = False
        for _, _, actions in self.d.log[self.seen :]:
            for a in actions:
                if isinstance(a, StartPod) and core.pods[a.pod].job_class is JobClass.SPOT:
                    spot_started = True
                match a:
                    case BindJob(job=jid, pods=pods):
                        job = core.jobs[jid]
                        assert jid not in self.ended, f"{jid} bound after it ended"
                        assert len(pods) == job.spec.workers  # placed whole
                        if job.job_class is JobClass.POOL:
                            for pid in pods:
                                assert self.owners.setdefault(pid, job.pair) == job.pair
                        else:
                            for pid in pods:
                                assert self.bound_to.setdefault(pid, jid) == jid, (pid, jid)
                    case StartPod(pod=pid, standby=True):
                        self.standby[pid] = None
                    case PromoteStandby(pod=pid):
                        self.standby.pop(pid, None)
                    case RecyclePod(new_pod=new):
                        assert new not in self.owners
                    case JobEnded(job=jid):
                        assert jid not in self.ended, f"{jid} ended twice"
                        self.ended[jid] = None
                    case JobRequeued(job=jid, reason=Failure.PREEMPTED):
                        job = core.jobs[jid]
                        assert job.job_class is JobClass.SPOT, f"{job.job_class} {jid} evicted"
                        # evicted whole: every pod of the run stopped with it
                        i = actions.index(a)
                        killed = actions[actions.index(KillJob(jid, Failure.PREEMPTED)) : i]
                        stopped = {b.pod for b in killed if isinstance(b, StopPod)}
                        assert stopped and all(
                            core.pods[p].history[-1][1] in ("stopping", "gone") for p in stopped
                        )
                    case KillJob(job=jid, reason=Failure.PREEMPTED):
                        assert core.jobs[jid].job_class is JobClass.SPOT
        self.seen = len(self.d.log)
        for pod in core.pods.values():
            if pod.owner is not None:
                assert self.owners.get(pod.id, pod.owner) == pod.owner
        for job in core.jobs.values():
            assert job.state in JobState
            if job.state in (JobState.PLACED, JobState.BINDING, JobState.RUNNING):
                assert len(job.pods) == job.spec.workers, job
                for pid in job.pods:
                    pod = core.pods[pid]
                    assert pod.state not in (PodState.STOPPING, PodState.GONE), (job, pod)
                    assert job.id in (pod.job, pod.pending_job), (job, pod)
        idle = 0.0
        gpus = core.cluster.gpus
        for pod in core.pods.values():
            if pod.state in (PodState.WARM, PodState.STANDBY) or (
                pod.state is PodState.STARTING and pod.id in self.standby
            ):
                idle += sum(gpus[g].allocs.get(pod.id, 0.0) for g in pod.gpus)
        assert idle <= core.budget_limit() + 1e-6, (idle, core.budget_limit())
        # no queue waits while its head would fit in free room (no job waits needlessly)
        for name, profile in core.profiles.items():
            queued = core.queued(name)
            if queued:
                need = core.jobs[queued[0]].spec.workers
                free = core.warm.planner.find_capacity(profile, need, set())
                assert len(free) < need, (queued[0], free)
        assert math.isclose(idle, core.idle_gpus, abs_tol=1e-6)
        hpspot = core.hpspot
        # the quota bounds admission: when spot was started, its GPU pool's spot use fits it
        # (a quota that shrinks later evicts nobody, as in GFS)
        for gpu_pool, used in hpspot.used.items():
            if spot_started:
                assert used[JobClass.SPOT] <= hpspot.quota[gpu_pool] + 1e-6, (used, hpspot.quota)
        for job in core.jobs.values():
            if job.state is JobState.QUEUED:
                assert not job.pods, job

    def teardown(self) -> None:
        if not hasattr(self, "d"):
            return
        d = self.d
        if self.nodes == 2 and "node-1" not in d.core.cluster.nodes:
            self.node_returns()  # what waits aside for it runs too
        # the first node with every card it had in the run: what waits for them runs
        self.node_changes([0, 1, 2, 3], 2.0)
        for tenant in ("t", "u"):  # HP is forecast gone: every waiting spot job may run
            d.send(ForecastUpdated(tenant, "any", (0.0,), (0.0,)))
        for _ in range(100):
            d.settle()
            for jid in list(d.running):
                d.finish(jid)
            d.send(Tick(), at=d.now + 1e5)
            if all(j.state is JobState.FINISHED for j in d.core.jobs.values()):
                break
        stuck = [j for j in d.core.jobs.values() if j.state is not JobState.FINISHED]
        assert not stuck, stuck
        for event in _forgettable(d.core):
            d.send(event)
        assert not d.core.jobs
        forgotten = {e.job for _, e, _ in d.log if isinstance(e, JobForgotten)}
        forgotten |= {e.pod for _, e, _ in d.log if isinstance(e, PodForgotten)}
        left = forgotten & set(_strings(d.core))
        assert not left, f"forgotten, still named in the core: {sorted(left)}"
        # determinism: the same events at the same times give the same actions
        replay = Core(_cluster(self.nodes), PROFILES, POLICIES[self.policy]())
        for now, event, actions in d.log:
            assert replay.handle(event, now) == actions


def _forgettable(core: Core) -> list[JobForgotten | PodForgotten]:
    jobs = [JobForgotten(j) for j, job in core.jobs.items() if job.state is JobState.FINISHED]
    return [*jobs, *(PodForgotten(p) for p, pod in core.pods.items() if pod.state is PodState.GONE)]


_CODE = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, types.ModuleType)


def _strings(root: object) -> Iterator[str]:
    """Every string reachable from ``root`` (containers, dataclasses, plain objects)."""
    seen: set[int] = set()
    todo = [root]
    while todo:
        obj = todo.pop()
        if isinstance(obj, str):
            yield obj
            continue
        if id(obj) in seen or isinstance(obj, (int, float, bytes, type, *_CODE)):
            continue
        seen.add(id(obj))
        if isinstance(obj, dict):
            todo += [*obj.keys(), *obj.values()]
        elif isinstance(obj, (list, tuple, set, frozenset, deque)):
            todo += list(obj)
        else:
            todo += list(getattr(obj, "__dict__", {}).values())
            for cls in type(obj).__mro__:
                todo += [getattr(obj, n) for n in getattr(cls, "__slots__", ()) if hasattr(obj, n)]


CoreMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("STOKER_CORE_EXAMPLES", "300")),
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestCore = CoreMachine.TestCase


@pytest.mark.parametrize(
    ("cls", "gpus", "workers"),
    [
        (JobClass.SPOT, 1, 1),  # standby pods have no keep-alive: spot takes their cards
        (JobClass.HP, 1, 2),  # both workers' cards come from idle pods on one node
    ],
)
def test_jobs_behind_idle_pods_run(cls: JobClass, gpus: float, workers: int) -> None:
    """Cases hypothesis found: two pool jobs leave warm and standby pods on both cards of
    one node, then an hp or spot job needing whole cards must still run."""
    m = CoreMachine()
    m.setup(policy=0, nodes=1)
    m.submit(profile="p", tag="a", tenant="t", workers=1)
    m.submit(profile="p", tag="a", tenant="t", workers=1)
    m.submit_gang(cls=cls, gpus=gpus, tenant="t", workers=workers)
    m.teardown()  # asserts that every job finished


@pytest.mark.parametrize(
    ("nodes", "jobs"),
    [
        (1, [("hp", 2, 1)]),  # an HP job needing both cards a spare and its restart hold
        (1, [("hp", 1, 2)]),
        (2, [("pool", "g", 1), ("pool", "g", 1)]),  # the second two-GPU job reclaims
    ],
)
def test_spares_do_not_take_room_freed_for_a_waiting_job(
    nodes: int, jobs: list[tuple[str, object, int]]
) -> None:
    """Livelocks hypothesis found: a profile's minimum warm count restarted its spare pod on
    each card a reclaim had just freed for a waiting job, which reclaimed it again, without
    end at one instant. Spares now wait while room is being freed in their GPU pool."""
    m = CoreMachine()
    m.setup(policy=8, nodes=nodes)
    m.d.send(Tick())  # the spares start and get ready first
    m.d.settle()
    for kind, a, b in jobs:
        if kind == "hp":
            m.submit_gang(cls=JobClass.HP, gpus=a, tenant="t", workers=b)
        else:
            m.submit(profile=str(a), tag="a", tenant="u", workers=b)
    m.teardown()  # settles (a livelock fails there) and asserts every job finished


def test_a_spare_beside_a_standby_keeps_the_promotable_index() -> None:
    """A case hypothesis found: a spare pod started on a card where a staged standby pod
    stayed (its active neighbour gone at keep-alive) left that standby marked promotable
    though a busy (starting) pod now shared its card. ``check`` after each step fails on it."""
    m = CoreMachine()
    m.setup(policy=8, nodes=1)
    d = m.d
    h = d.run("t", "a", "h")
    p = d.run("t", "b", "p")  # takes the p spare; a p standby is staged beside it
    d.finish(p)
    d.finish(h, at=1.0)
    d.settle()
    d.send(Tick(), at=10_000.0)  # keep-alive over: the warm pods go, the spare comes back
    d.settle()
    spares = [pod for pod in d.core.pods.values() if d.core.warm.is_spare(pod.id)]
    assert any(pod.profile == "p" for pod in spares)
    m.teardown()
