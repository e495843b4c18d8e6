"""The cluster model: nodes, GPUs with fractional shares, profiles, pods, jobs and tenants.

Everything here is plain data plus the bookkeeping that keeps the indexes the policies need
(free GPU shares per GPU model, idle pods per (profile, tenant, reuse tag)). No I/O, no clock:
every method that changes time-dependent accounting takes ``now``.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypeVar

# Shares are floats; comparisons tolerate rounding so 0.9 + 0.1 is "full", not "over".
EPS = 1e-9
# Free-share buckets per GPU (20 -> 0.05 resolution) make "a GPU with room for s" O(buckets).
_BUCKETS = 20
_K = TypeVar("_K")


class CoreError(ValueError):
    """An event the core cannot accept (unknown profile, duplicate job id, a bad field);
    the message names the field."""


class JobClass(StrEnum):
    """The three classes of work the one core schedules.

    ``pool``: agent and RL loop jobs served from warm pools (reuse tag, standby, keep-alive).
    ``hp``: guaranteed, never a victim. ``spot``: preemptible, admitted under its GPU pool's
    spot quota and promised ``guarantee_s`` of uninterrupted run with probability g.
    Every class runs in pods (one per worker); hp and spot pods start cold for their job
    and stop when it ends or is evicted.
    """

    POOL = "pool"
    HP = "hp"
    SPOT = "spot"


class PodState(StrEnum):
    """Lifecycle of a pod. ``stopping`` holds its GPU share until the runtime says it is gone."""

    STARTING = "starting"
    STANDBY = "standby"
    WARM = "warm"
    ACTIVE = "active"
    RECYCLING = "recycling"
    STOPPING = "stopping"
    GONE = "gone"


class JobState(StrEnum):
    """Lifecycle of a job. Every submitted job is in exactly one of these; none is dropped.

    An evicted spot job goes back to ``queued`` (the core answers ``JobRequeued``) and runs
    again; only ``finished`` is final. ``set_aside``: queued, but a node's leaving made it
    unable to start anywhere as the cluster is now (why: :attr:`Job.refusal`); it is in no
    queue, so it holds back none behind it, and goes back to ``queued`` once it fits again.
    To its tenant it is queued (:attr:`shown`).
    """

    QUEUED = "queued"
    SET_ASIDE = "set_aside"
    PLACED = "placed"  # pods chosen, waiting for them to be ready
    BINDING = "binding"  # bind sent to the pods, waiting for the job to start
    RUNNING = "running"
    FINISHED = "finished"

    @property
    def waiting(self) -> bool:
        """Whether a job in this state waits to start (queued or set aside): what a tenant's
        cap on queued jobs counts."""
        return self is JobState.QUEUED or self is JobState.SET_ASIDE

    @property
    def shown(self) -> JobState:
        """The state drivers store and show (the API's job row, the decision log, the
        replay check): a job set aside is queued to its tenant, its refusal why it waits."""
        return JobState.QUEUED if self is JobState.SET_ASIDE else self


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a job can never start: ``field`` is the job spec's field at fault (``gpus``,
    ``workers``, ``profile``, ``gpu_model``), ``reason`` one line saying why. ``retry``: not
    never, but not now (a tenant's cap on queued jobs, :mod:`stoker.core.shares`)."""

    field: str
    reason: str
    retry: bool = False

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}"


class HitPath(StrEnum):
    """How a job got its pod."""

    WARM = "warm"
    STANDBY = "standby"
    COLD = "cold"


class Failure(StrEnum):
    """Typed failure of a job, so a trainer can tell infrastructure from its own code."""

    USER_ERROR = "user_error"
    TIMEOUT = "timeout"
    OUT_OF_MEMORY = "out_of_memory"
    POD_DIED = "pod_died"
    PREEMPTED = "preempted"
    START_TIMEOUT = "start_timeout"
    START_FAILED = "start_failed"  # its pod did not start, for a reason other than time
    ENV_BUILD_FAILED = "env_build_failed"  # its profile's environment could not be built
    IMAGE_MISSING = "image_missing"  # its profile's image could not be pulled
    BIND_FAILED = "bind_failed"
    CANCELLED = "cancelled"

    @property
    def infrastructure(self) -> bool:
        """The platform's fault, not the job's code: a trainer masks these."""
        return self in _INFRA


# a bind the runtime could not carry out for its own reasons is BIND_FAILED (infrastructure);
# a bind that failed on the job's own code or dependencies is USER_ERROR
_INFRA = frozenset(
    {
        Failure.POD_DIED,
        Failure.PREEMPTED,
        Failure.START_TIMEOUT,
        Failure.START_FAILED,
        Failure.ENV_BUILD_FAILED,
        Failure.IMAGE_MISSING,
        Failure.BIND_FAILED,
    }
)


class StartFault(StrEnum):
    """Why a runtime could not start a pod, as it saw it (a fact: the core types the job
    from it by :data:`START_FAULTS`)."""

    ENV_BUILD_FAILED = "env_build_failed"  # the profile's environment did not build
    IMAGE_MISSING = "image_missing"  # the profile's image cannot be pulled
    START_TIMED_OUT = "start_timed_out"  # its agent did not come up in time
    START_FAILED = "start_failed"  # anything else: refused, or ended before its agent spoke


@dataclass(frozen=True, slots=True)
class StartTyping:
    """What a start fault means for the job its pod was started for: the typed
    ``failure``, and whether the job is ``retried`` (back to its queue, if it never ran)
    or ends with that failure."""

    failure: Failure
    retried: bool


#: the one table from a runtime's start fault to the job's failure: a fault that would
#: only repeat on the next pod of the same profile (its environment, its image) ends the
#: job, typed so a trainer masks it; one that may pass (time, a refusal) re-queues it
START_FAULTS: dict[StartFault, StartTyping] = {
    StartFault.ENV_BUILD_FAILED: StartTyping(Failure.ENV_BUILD_FAILED, retried=False),
    StartFault.IMAGE_MISSING: StartTyping(Failure.IMAGE_MISSING, retried=False),
    StartFault.START_TIMED_OUT: StartTyping(Failure.START_TIMEOUT, retried=True),
    StartFault.START_FAILED: StartTyping(Failure.START_FAILED, retried=True),
}


@dataclass(frozen=True, slots=True)
class Profile:
    """A hardware shape and its base environment; all its pods are interchangeable.

    ``gpus`` whole GPUs per pod, each taken at ``share`` (below 1.0 leaves room beside an
    active pod for a zero-VRAM standby pod of ``standby_share``). ``gpus = 0`` is a
    CPU-only profile (verifiers, tool calls): its pods take ``cpu`` CPUs and ``memory_gb``
    of a node's CPU slots (:attr:`Node.cpu`, :attr:`Node.memory_gb`) and no GPU; they
    serve pool jobs only. ``recyclable`` says a pod may be scrubbed in place to change
    hands (local sandboxes); otherwise it is replaced.
    """

    name: str
    gpu_model: str = "any"
    gpus: int = 1
    share: float = 1.0
    standby_share: float = 0.0
    cpu: float = 1.0
    memory_gb: float = 4.0
    recyclable: bool = False

    def __post_init__(self) -> None:
        if self.gpus < 0:
            raise ValueError(f"profile {self.name}: gpus must be >= 0")
        if self.cpu_only and not (self.cpu > 0 and self.memory_gb > 0):
            raise ValueError(f"profile {self.name}: a CPU-only profile needs cpu and memory > 0")
        if not 0.0 < self.share <= 1.0:
            raise ValueError(f"profile {self.name}: share must be in (0, 1]")
        if not 0.0 <= self.standby_share < 1.0:
            raise ValueError(f"profile {self.name}: standby_share must be in [0, 1)")

    @property
    def cpu_only(self) -> bool:
        """Its pods take CPU slots, no GPU."""
        return self.gpus == 0

    @property
    def gpu_demand(self) -> float:
        """GPUs (in shares) an active pod of this profile holds."""
        return self.gpus * self.share

    @property
    def standby_enabled(self) -> bool:
        return self.standby_share > 0.0 and self.gpus == 1


@dataclass(slots=True)
class GPU:
    """One GPU; ``allocs`` maps an owner (pod or worker id) to its share."""

    id: str
    node: str
    index: int
    model: str
    allocs: dict[str, float] = field(default_factory=dict)
    used: float = 0.0

    @property
    def free(self) -> float:
        return max(0.0, 1.0 - self.used)


@dataclass(slots=True)
class Node:
    """A host with GPUs of one model, and CPU slots for CPU-only pods: ``cpu`` CPUs and
    ``memory_gb`` they may take together (none by default: GPU pods' own CPUs are not
    counted here)."""

    name: str
    gpu_model: str
    gpus: list[GPU]
    cpu: float = 0.0
    memory_gb: float = 0.0


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What a caller asks for: one job model for every class.

    ``workers`` pods are placed all or nothing (a gang); rank i runs in the i-th pod of its
    ``BindJob``. ``gpus`` is each worker's GPU request: None takes the profile's
    (``profile.gpus * profile.share``); below 1 a share of one card, else whole cards on one
    node (1.5 takes 2). ``gpu_model`` names the GPU pool (hp/spot; None: the profile's).
    ``guarantee_s`` is a spot job's guaranteed duration (None: the core's). ``duration`` is
    the simulator's trace run time (None live: the job runs until it exits). ``timeout_s``
    is the caller's time limit (the driver enforces it; the core checks it against its
    tenant's cap).
    """

    id: str
    tenant: str
    profile: str
    reuse_tag: str = ""
    job_class: JobClass = JobClass.POOL
    workers: int = 1
    gpus: float | None = None
    gpu_model: str | None = None
    guarantee_s: float | None = None
    duration: float | None = None
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise CoreError(f"job {self.id}: workers must be >= 1, got {self.workers}")
        if self.gpus is not None and not (self.gpus > 0 and math.isfinite(self.gpus)):
            raise CoreError(f"job {self.id}: gpus must be > 0, got {self.gpus}")
        if self.guarantee_s is not None and not self.guarantee_s > 0:
            raise CoreError(f"job {self.id}: guarantee_s must be > 0, got {self.guarantee_s}")
        if self.duration is not None and not (self.duration >= 0 and math.isfinite(self.duration)):
            raise CoreError(f"job {self.id}: duration must be finite and >= 0")
        if self.guarantee_s is not None and self.job_class is not JobClass.SPOT:
            raise CoreError(f"job {self.id}: guarantee_s is for spot jobs only")


def per_worker(gpus: float) -> float:
    """GPUs one worker holds: a share below 1, else whole cards (a request of 1.5 takes 2)."""
    return gpus if gpus < 1.0 - EPS else float(math.ceil(gpus - EPS))


@dataclass(slots=True)
class Pod:
    """A sandbox of one profile; remembers the (tenant, tag) that last used it."""

    id: str
    profile: str
    node: str
    gpus: list[str]
    state: PodState
    since: float
    created: float
    owner: tuple[str, str] | None = None  # (tenant, reuse tag); set once, never changed
    job: str | None = None
    idle_since: float = 0.0
    deadline: float = math.inf  # keep-alive deadline while warm
    jobs_run: int = 0
    # job waiting for this pod to be ready (cold start / promotion / recycle)
    pending_job: str | None = None
    # GPU-seconds held per state, accrued on every transition
    held: dict[str, float] = field(default_factory=dict)
    job_class: JobClass = JobClass.POOL  # pool pods live in warm pools; hp/spot pods not
    history: deque[tuple[float, str, str]] = field(default_factory=lambda: deque(maxlen=8))

    @property
    def idle(self) -> bool:
        return self.state in (PodState.WARM, PodState.STANDBY)


@dataclass(slots=True)
class Job:
    """A submitted job of any class and its timeline (the records every metric is computed
    from).

    ``per_worker`` is the resolved GPU request of one worker (the spec's, or its profile's).
    ``ranks_started``/``ranks_exited`` follow the current run's ranks; the core decides from
    them when the job has started and which exit ends it. The GFS fields count a spot job's
    runs: ``remaining`` useful run time still owed (simulator), ``overhead`` restart time
    owed, ``queue_s`` all time spent waiting, ``evictions`` (failed guarantee periods),
    ``periods_ok`` (successful ones) and ``lost_s`` (work lost to evictions).
    """

    spec: JobSpec
    state: JobState
    submitted: float
    per_worker: float = 1.0
    placed: float | None = None
    pod_ready: float | None = None
    started: float | None = None
    finished: float | None = None
    path: HitPath | None = None
    pods: list[str] = field(default_factory=list)
    exit_code: int | None = None
    failure: Failure | None = None
    ranks_started: set[int] = field(default_factory=set)
    ranks_exited: dict[int, tuple[int, Failure | None]] = field(default_factory=dict)
    remaining: float = 0.0
    overhead: float = 0.0
    queued_since: float = 0.0
    queue_s: float = 0.0
    run_start: float = 0.0
    first_start: float | None = None
    evictions: int = 0
    periods_ok: int = 0
    lost_s: float = 0.0
    fair_tag: float | None = None  # its place in a fair queue (stoker.core.shares)
    # workers it runs with when an as-released gang rule gives it fewer than its spec asks
    # (:class:`~stoker.core.gfs.config.GangRule`); None: all of them
    run_workers: int | None = None
    # why a job set aside (:attr:`JobState.SET_ASIDE`) fits nowhere now; None in any other state
    refusal: Refusal | None = None
    history: deque[tuple[float, str, str]] = field(default_factory=lambda: deque(maxlen=8))

    @property
    def id(self) -> str:
        return self.spec.id

    def useful_since_start(self, now: float) -> float:
        """Useful work done in the current run (after its restart overhead)."""
        return max(0.0, now - self.run_start - self.overhead)

    def last_checkpoint(self, now: float, every: float) -> float:
        """Time of the last checkpoint of the current run (its start if none yet)."""
        ran = max(0.0, now - self.run_start)
        return self.run_start + math.floor(ran / every) * every

    @property
    def job_class(self) -> JobClass:
        return self.spec.job_class

    @property
    def pair(self) -> tuple[str, str]:
        return (self.spec.tenant, self.spec.reuse_tag)

    @property
    def fractional(self) -> bool:
        return self.per_worker < 1.0 - EPS

    @property
    def workers(self) -> int:
        """Workers (pods, ranks) it runs with: its spec's, or fewer under an as-released
        gang rule."""
        return self.spec.workers if self.run_workers is None else self.run_workers

    @property
    def gpus(self) -> float:
        """GPUs the whole job holds while it runs."""
        return self.per_worker * self.workers

    @property
    def start_latency(self) -> float | None:
        """Submit to the job's process running."""
        return None if self.started is None else self.started - self.submitted


def _uncount(counts: dict[_K, int], key: _K) -> None:
    """One node fewer of this size (a size with none left goes)."""
    counts[key] -= 1
    if not counts[key]:
        del counts[key]


def _bucket(free: float) -> int:
    return min(_BUCKETS, int(free * _BUCKETS + EPS))


class Cluster:
    """Nodes and GPUs with fractional allocations, indexed by free share per GPU model.

    ``allocate``/``release`` are the only ways shares change, so the invariant "no GPU is
    allocated more than 1.0" is enforced in one place.
    """

    def __init__(self, nodes: list[Node] | None = None) -> None:
        self.nodes: dict[str, Node] = {}
        self.gpus: dict[str, GPU] = {}
        # model -> bucket -> ordered set of GPU ids (dicts keep insertion order: deterministic)
        self._free: dict[str, list[dict[str, None]]] = {}
        self.capacity: dict[str, int] = {}
        # per GPU model, its nodes counted by GPUs per node; nodes with CPU slots counted by
        # (CPUs, GB): what a job's shape is checked against (:mod:`stoker.core.shape`)
        self.sizes: dict[str, dict[int, int]] = {}
        self.cpu_shapes: dict[tuple[float, float], int] = {}
        # nodes whose shares changed since a reader last cleared this, True where room was
        # freed (the hp/spot part keeps per-node indexes and refreshes the nodes every
        # other part touched; only freed room can let a waiting job go)
        self.touched: dict[str, bool] = {}
        self.used_total = 0.0  # GPUs allocated over the whole cluster
        # CPU slots: owner -> (node, cpu, memory_gb), and what each node has given out
        self.cpu_allocs: dict[str, tuple[str, float, float]] = {}
        self._cpu_used: dict[str, tuple[float, float]] = {}
        for node in nodes or []:
            self.add_node(node)

    @staticmethod
    def uniform(n_nodes: int, gpus_per_node: int, gpu_model: str = "any") -> Cluster:
        """A cluster of identical nodes (simulation and tests)."""
        nodes = []
        for i in range(n_nodes):
            name = f"node-{i}"
            gpus = [GPU(f"{name}/{j}", name, j, gpu_model) for j in range(gpus_per_node)]
            nodes.append(Node(name, gpu_model, gpus))
        return Cluster(nodes)

    def add_node(self, node: Node) -> None:
        if node.name in self.nodes:
            raise ValueError(f"node {node.name} already in the cluster")
        self.nodes[node.name] = node
        buckets = self._free.setdefault(node.gpu_model, [{} for _ in range(_BUCKETS + 1)])
        for gpu in node.gpus:
            self.gpus[gpu.id] = gpu
            buckets[_bucket(gpu.free)][gpu.id] = None
        self.capacity[node.gpu_model] = self.capacity.get(node.gpu_model, 0) + len(node.gpus)
        sizes = self.sizes.setdefault(node.gpu_model, {})
        sizes[len(node.gpus)] = sizes.get(len(node.gpus), 0) + 1
        if node.cpu > 0 and node.memory_gb > 0:
            shape = (node.cpu, node.memory_gb)
            self.cpu_shapes[shape] = self.cpu_shapes.get(shape, 0) + 1

    def remove_node(self, name: str) -> Node:
        """Take a node out of the cluster; every share on it must be released first."""
        node = self.nodes[name]
        held = [g.id for g in node.gpus if g.allocs]
        if held:
            raise ValueError(f"node {name}: GPUs {held} still hold shares")
        del self.nodes[name]
        buckets = self._free[node.gpu_model]
        for gpu in node.gpus:
            del self.gpus[gpu.id]
            del buckets[_bucket(gpu.free)][gpu.id]
        self.capacity[node.gpu_model] -= len(node.gpus)
        _uncount(self.sizes[node.gpu_model], len(node.gpus))
        if node.cpu > 0 and node.memory_gb > 0:
            _uncount(self.cpu_shapes, (node.cpu, node.memory_gb))
        self.touched.pop(name, None)
        return node

    def set_gpus(self, name: str, gpu_ids: list[str]) -> None:
        """Give a node these cards in place, in this order: a card it keeps stays as it is
        (its shares with it), a card it loses must hold no share, a new one is free."""
        node = self.nodes[name]
        kept = {g.id: g for g in node.gpus}
        ids = set(gpu_ids)
        if len(ids) != len(gpu_ids):
            raise ValueError(f"node {name}: GPU ids {gpu_ids} repeat")
        if taken := [g for g in gpu_ids if g not in kept and g in self.gpus]:
            raise ValueError(f"node {name}: GPUs {taken} belong to another node")
        if held := [g.id for g in node.gpus if g.id not in ids and g.allocs]:
            raise ValueError(f"node {name}: GPUs {held} still hold shares")
        buckets = self._free[node.gpu_model]
        for gpu in node.gpus:
            if gpu.id not in ids:
                del self.gpus[gpu.id]
                del buckets[_bucket(gpu.free)][gpu.id]
        sizes = self.sizes[node.gpu_model]
        _uncount(sizes, len(node.gpus))
        sizes[len(gpu_ids)] = sizes.get(len(gpu_ids), 0) + 1
        self.capacity[node.gpu_model] += len(gpu_ids) - len(node.gpus)
        node.gpus = []
        for i, gid in enumerate(gpu_ids):
            gpu = kept.get(gid)
            if gpu is None:
                gpu = self.gpus[gid] = GPU(gid, name, i, node.gpu_model)
                buckets[_bucket(gpu.free)][gid] = None
            gpu.index = i
            node.gpus.append(gpu)

    def set_cpu_slots(self, name: str, cpu: float, memory_gb: float) -> bool:
        """Give a node other CPU slots in place (its GPUs and every pod stay); False, and
        nothing changed, when what its CPU-only pods hold would not fit them."""
        node = self.nodes[name]
        used_cpu, used_mem = self._cpu_used.get(name, (0.0, 0.0))
        if used_cpu > cpu + EPS or used_mem > memory_gb + EPS:
            return False
        if node.cpu > 0 and node.memory_gb > 0:
            _uncount(self.cpu_shapes, (node.cpu, node.memory_gb))
        node.cpu, node.memory_gb = cpu, memory_gb
        if cpu > 0 and memory_gb > 0:
            self.cpu_shapes[cpu, memory_gb] = self.cpu_shapes.get((cpu, memory_gb), 0) + 1
        return True

    @property
    def total_gpus(self) -> int:
        return len(self.gpus)

    def models(self) -> list[str]:
        return list(self._free)

    def allocate(self, gpu_id: str, owner: str, share: float) -> None:
        gpu = self.gpus[gpu_id]
        if gpu.used + share > 1.0 + EPS:
            raise ValueError(f"GPU {gpu_id} over-allocated: {gpu.used} + {share} > 1.0")
        self._reindex(gpu, gpu.used + share)
        gpu.allocs[owner] = gpu.allocs.get(owner, 0.0) + share

    def release(self, gpu_id: str, owner: str) -> float:
        """Release everything ``owner`` holds on the GPU; returns the share released."""
        gpu = self.gpus[gpu_id]
        share = gpu.allocs.pop(owner, 0.0)
        if share:
            self._reindex(gpu, max(0.0, gpu.used - share))
        return share

    def _reindex(self, gpu: GPU, used: float) -> None:
        self.touched[gpu.node] = self.touched.get(gpu.node, False) or used < gpu.used
        self.used_total += (0.0 if used < EPS else used) - gpu.used
        buckets = self._free[gpu.model]
        old, new = _bucket(gpu.free), _bucket(max(0.0, 1.0 - used))
        gpu.used = 0.0 if used < EPS else used
        if old != new:
            del buckets[old][gpu.id]
            buckets[new][gpu.id] = None

    def allocate_cpu(self, node: str, owner: str, cpu: float, memory_gb: float) -> None:
        """Give ``owner`` (a CPU-only pod) ``cpu`` CPUs and ``memory_gb`` of a node's CPU
        slots; raises when they are not free."""
        if owner in self.cpu_allocs:
            raise ValueError(f"{owner} already holds CPU slots")
        free_cpu, free_mem = self.cpu_free(node)
        if cpu > free_cpu + EPS or memory_gb > free_mem + EPS:
            raise ValueError(f"node {node} CPU slots over-allocated by {owner}")
        used_cpu, used_mem = self._cpu_used.get(node, (0.0, 0.0))
        self._cpu_used[node] = (used_cpu + cpu, used_mem + memory_gb)
        self.cpu_allocs[owner] = (node, cpu, memory_gb)

    def release_cpu(self, owner: str) -> None:
        """Release the CPU slots ``owner`` holds (nothing when it holds none)."""
        held = self.cpu_allocs.pop(owner, None)
        if held is None:
            return
        node, cpu, mem = held
        used_cpu, used_mem = self._cpu_used[node]
        self._cpu_used[node] = (max(0.0, used_cpu - cpu), max(0.0, used_mem - mem))

    def cpu_free(self, node: str) -> tuple[float, float]:
        """CPUs and memory (GB) still free in a node's CPU slots."""
        n = self.nodes[node]
        used_cpu, used_mem = self._cpu_used.get(node, (0.0, 0.0))
        return n.cpu - used_cpu, n.memory_gb - used_mem

    def nodes_with_cpu(self, cpu: float, memory_gb: float) -> Iterator[str]:
        """Nodes whose CPU slots have room for ``cpu`` CPUs and ``memory_gb``, in name
        order (deterministic)."""
        for name in sorted(self.nodes):
            free_cpu, free_mem = self.cpu_free(name)
            if free_cpu >= cpu - EPS and free_mem >= memory_gb - EPS:
                yield name

    def gpus_with_room(self, model: str, share: float) -> Iterator[GPU]:
        """GPUs of a model with at least ``share`` free, tightest fit first (best-fit packing)."""
        buckets = self._free.get(model)
        if buckets is None:
            return
        need = share - EPS
        lo = max(0, int(share * _BUCKETS - 1))
        gpus = self.gpus
        for b in range(lo, _BUCKETS + 1):
            for gid in buckets[b]:
                gpu = gpus[gid]
                used = gpu.used
                # ``gpu.free`` inline (the walk's hot test): max(0, 1 - used)
                if (1.0 - used if used < 1.0 else 0.0) >= need:
                    yield gpu

    def free_gpus(self, model: str) -> int:
        """Whole GPUs with nothing on them."""
        buckets = self._free.get(model)
        return len(buckets[_BUCKETS]) if buckets else 0

    def check(self) -> None:
        """Raise if any GPU is over-allocated or an index disagrees with the shares."""
        for gpu in self.gpus.values():
            total = sum(gpu.allocs.values())
            if total > 1.0 + 1e-6:
                raise AssertionError(f"GPU {gpu.id} holds {total} > 1.0")
            if abs(total - gpu.used) > 1e-6:
                raise AssertionError(f"GPU {gpu.id} used {gpu.used} != allocs {total}")
            if gpu.id not in self._free[gpu.model][_bucket(gpu.free)]:
                raise AssertionError(f"GPU {gpu.id} missing from its free-share index")
        sizes: dict[str, dict[int, int]] = {}
        shapes: dict[tuple[float, float], int] = {}
        for node in self.nodes.values():
            per = sizes.setdefault(node.gpu_model, {})
            per[len(node.gpus)] = per.get(len(node.gpus), 0) + 1
            if node.cpu > 0 and node.memory_gb > 0:
                shapes[node.cpu, node.memory_gb] = shapes.get((node.cpu, node.memory_gb), 0) + 1
        if {m: c for m, c in self.sizes.items() if c} != sizes or self.cpu_shapes != shapes:
            raise AssertionError(f"nodes by size {self.sizes}, {self.cpu_shapes} are stale")
        for name, node in self.nodes.items():
            held = [(c, m) for n, c, m in self.cpu_allocs.values() if n == name]
            cpu, mem = sum(c for c, _ in held), sum(m for _, m in held)
            if cpu > node.cpu + 1e-6 or mem > node.memory_gb + 1e-6:
                raise AssertionError(f"node {name} CPU slots hold {cpu} CPUs, {mem} GB")
            used = self._cpu_used.get(name, (0.0, 0.0))
            if abs(used[0] - cpu) > 1e-6 or abs(used[1] - mem) > 1e-6:
                raise AssertionError(f"node {name} CPU slots used {used} != allocs {cpu, mem}")
