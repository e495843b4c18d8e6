"""Events the drivers hand to the core: API calls, what the runtime reports, forecasts and
the passing of time. One vocabulary for every job class (pool, hp, spot).

Every event is a frozen value; the core's answer to an event depends only on the events
before it and the ``now`` passed with it. A driver reports facts (a rank exited with this
code, a bind failed for this reason); what follows from them is the core's decision.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from stoker.core.model import Failure, JobSpec, StartFault


@dataclass(frozen=True, slots=True)
class JobSubmitted:
    """A caller asks for a job to run (any class: see :class:`JobSpec`)."""

    spec: JobSpec


@dataclass(frozen=True, slots=True)
class JobCancelled:
    """A caller (or the broker on a timeout in the queue) withdraws a job."""

    job: str


@dataclass(frozen=True, slots=True)
class PodReady:
    """A started, promoted or recycled pod is ready to bind a job (or to stand by)."""

    pod: str


@dataclass(frozen=True, slots=True)
class PodFailed:
    """A pod could not start or died; its share is free. The core types what follows for
    its job (re-queued if it never ran, else ended with ``reason``)."""

    pod: str
    reason: Failure = Failure.POD_DIED


@dataclass(frozen=True, slots=True)
class PodStartFailed:
    """A pod did not start, and the runtime says why (``fault``; ``detail``: its words,
    for the log). The core types what follows for its job by
    :data:`~stoker.core.model.START_FAULTS`: re-queued if it never ran and the fault may
    pass, else ended with the fault's failure."""

    pod: str
    fault: StartFault
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a job ended in one pod, as its agent recorded it."""

    exit_code: int
    failure: Failure | None = None


@dataclass(frozen=True, slots=True)
class AgentReport:
    """What one pod's agent said on its hello."""

    running: str | None = None  # the job it runs now
    outcomes: Mapping[str, Outcome] = field(default_factory=dict)  # jobs it ran, to the end
    held: frozenset[str] = frozenset()  # jobs whose exit it holds, replayed after the hello


@dataclass(frozen=True, slots=True)
class FoundPod:
    """One pod the runtime has alive: whether it stands by (no CUDA yet), and what its
    agent said (an empty report where the runtime cannot ask it)."""

    pod: str
    standby: bool = False
    agent: AgentReport = AgentReport()


@dataclass(frozen=True, slots=True)
class PodsFound:
    """After a driver's restart: every pod the runtime has alive now. The core makes its
    pods agree (:mod:`stoker.core.restart`): a pod it has that is not alive is lost, one
    alive that it does not have is stopped, and a job bound to live pods is settled by
    what their agents said; its answer begins with a
    :class:`~stoker.core.actions.Reconciled` that says what it found."""

    pods: tuple[FoundPod, ...]


@dataclass(frozen=True, slots=True)
class PodGone:
    """The runtime confirmed a pod it was asked to stop is gone; its GPU share is free."""

    pod: str


@dataclass(frozen=True, slots=True)
class PodStopFailed:
    """The runtime could not stop a pod. Its GPU share stays held (the pod may still run)
    until a later ``PodGone`` or ``PodFailed``; the core asks again on a tick."""

    pod: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class RankStarted:
    """Rank ``rank`` of a bound job is running (in the job's ``rank``-th pod). ``pod``,
    when the driver knows it, lets the core tell news of an earlier run (an evicted or
    re-queued job's old pods) from the current one."""

    job: str
    rank: int = 0
    pod: str | None = None


@dataclass(frozen=True, slots=True)
class RankExited:
    """Rank ``rank`` of a job exited with ``exit_code``; ``failure`` is what the runtime
    knows of why (None: it ran to its end). The core decides whether the job ends (every
    rank exited, or one failed: ``KillJob`` for the others) and how it is typed."""

    job: str
    rank: int = 0
    exit_code: int = 0
    failure: Failure | None = None
    pod: str | None = None  # as for RankStarted: news from a pod the job no longer holds


@dataclass(frozen=True, slots=True)
class BindFailed:
    """Binding a job into ``pod`` failed. ``infra``: the runtime's own fault (the pod is
    unusable; the job is re-queued if it never ran), else the job's code or dependencies
    (a user error)."""

    job: str
    pod: str
    reason: str = ""
    infra: bool = False


@dataclass(frozen=True, slots=True)
class ForecastUpdated:
    """One tenant's forecast HP demand in one GPU pool: mean and variance of the hourly
    peak, per hour ahead. The core sums tenants per GPU pool (means and variances)."""

    tenant: str
    gpu_model: str
    mean: tuple[float, ...]
    var: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class KeepAliveRenewed:
    """A caller asks that its warm pod of ``profile`` wait ``keepalive_s`` from now at least
    (a session's ``renew``): a warm pod of (tenant, reuse tag) now, a busy one once its job
    ends. The driver bounds ``keepalive_s`` by its configured maximum."""

    tenant: str
    reuse_tag: str
    profile: str
    keepalive_s: float


@dataclass(frozen=True, slots=True)
class TenantRevoked:
    """A tenant is revoked: its unfinished jobs are cancelled, its idle warm pods stopped,
    and the pods its cancelled jobs leave are stopped, not kept warm for it."""

    tenant: str


@dataclass(frozen=True, slots=True)
class JobForgotten:
    """The driver keeps a finished job's record elsewhere (the broker: its final row is
    committed to the store): the core drops it. Legal only for a finished job; a core that
    never hears it keeps every job (the simulator's records)."""

    job: str


@dataclass(frozen=True, slots=True)
class PodForgotten:
    """As :class:`JobForgotten`, for a pod that is gone (its GPU share already free)."""

    pod: str


@dataclass(frozen=True, slots=True)
class NodeShape:
    """A node as the cluster has it: ``gpus`` cards of ``gpu_model``, named
    ``<name>/<index>`` (or ``gpu_ids``, where the runtime names its cards otherwise: the
    local runtime's devices), and CPU slots of ``cpu`` CPUs and ``memory_gb`` for CPU-only
    pods (none unless both are set). What :class:`NodeAdded` and :class:`NodeChanged` say."""

    name: str
    gpu_model: str
    gpus: int
    cpu: float = 0.0
    memory_gb: float = 0.0
    gpu_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeAdded(NodeShape):
    """A node joined the cluster (or came back): its cards free for any part to place on.
    Said of a node the core has, with another shape, the old node goes first, as if
    removed (its pods fail ``pod_died``; other CPU slots alone change in place while its
    CPU-only pods fit them): what the event meant when logged before :class:`NodeChanged`
    existed, kept so those logs replay as they ran."""


@dataclass(frozen=True, slots=True)
class NodeChanged(NodeShape):
    """A node the core has changed shape in place (a host restarted with other GPUs or
    memory, a Kubernetes node whose allocatable changed): the pods on the cards it kept
    stay, with their jobs; a pod on a card it lost fails (``pod_died``: its job re-queued
    if it never ran, else ended typed) and is stopped, in case it still runs, as are its
    CPU-only pods beyond its new CPU slots (the newest first); new cards are free. Another
    GPU model is another GPU pool: every pod fails, as for NodeAdded. Of a node the core lacks:
    as NodeAdded."""


@dataclass(frozen=True, slots=True)
class NodeRemoved:
    """A node left the cluster (deleted, cordoned, not ready, or without GPUs): nothing is
    placed there any more, and every pod on it is taken as failed (``pod_died``, its job
    typed so) and stopped, in case it still runs."""

    name: str


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed: keep-alive deadlines, budget, standby, eta feedback, Chronus rounds,
    the HP demand meter's samples. The only clock event."""


Event = (
    JobSubmitted
    | JobCancelled
    | PodReady
    | PodFailed
    | PodStartFailed
    | PodsFound
    | PodGone
    | PodStopFailed
    | RankStarted
    | RankExited
    | BindFailed
    | ForecastUpdated
    | KeepAliveRenewed
    | TenantRevoked
    | JobForgotten
    | PodForgotten
    | NodeAdded
    | NodeChanged
    | NodeRemoved
    | Tick
)
