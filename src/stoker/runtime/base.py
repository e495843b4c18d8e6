"""The narrow interface every runtime implements: start a pod, bind a job, stop a pod, watch.

Runtimes only do what they are told: the broker turns the core's actions into these calls
and the runtime's events back into core events. Implementations: ``stoker.runtime.local``
(sandboxed processes on this host), ``stoker.runtime.kubernetes`` (Pods through the Kubernetes
API); the simulator has a virtual one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from stoker.core.model import Failure, Node, StartFault

#: the ports a multi-worker job's rank 0 listens on (torch.distributed's rendezvous): the
#: broker gives each job one of them, and on Kubernetes the NetworkPolicy opens only these
#: between pods
MASTER_PORT_BASE = 29500
MASTER_PORT_COUNT = 1000


@dataclass(frozen=True, slots=True)
class Topology:
    """Where one replica of a multi-pod job sits (the variables torch.distributed reads).

    ``master_pod`` is the pod rank 0 runs in: a runtime whose pods have addresses of their
    own (Kubernetes: the pod IP) dials rank 0 there instead of ``master_addr``."""

    rank: int = 0
    world_size: int = 1
    master_addr: str = "127.0.0.1"
    master_port: int = MASTER_PORT_BASE
    master_pod: str | None = None


@dataclass(frozen=True, slots=True)
class JobBinding:
    """Everything bound into a pod when a job starts there."""

    job: str
    argv: tuple[str, ...]
    code_digest: str | None = None  # content address of an uploaded code archive
    deps: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 3600.0
    topology: Topology = Topology()
    tenant: str | None = None  # who the job runs for (Kubernetes labels the pod with its hash)
    run: int = (
        1  # the job's STOKER_RUN: 1, then n + 1 after n preemptions (resume from a checkpoint)
    )

    def message(
        self,
        code: str | None,
        overlay: list[str],
        output_mb: int | None,
        install: tuple[str, ...] = (),
        imports: tuple[str, ...] = (),
    ) -> dict[str, object]:
        """The agent protocol's ``bind`` request for this job (``code``: the archive's path
        as the pod sees it; ``overlay``: dependency dirs to put on its path; ``install``:
        deps the agent installs into an overlay of its own, in a pod that cannot see the
        runtime's overlays; ``output_mb``: the profile's cap on the job's output, None for
        none; ``imports``: the modules the overlay provides, which the pod preloads for its
        next jobs of the same deps)."""
        topo = self.topology
        return {
            "op": "bind",
            "job": self.job,
            "argv": list(self.argv),
            "code": code,
            "overlay": overlay,
            "deps": list(install),
            "imports": list(imports),
            "env": dict(self.env),
            "timeout_s": self.timeout_s,
            "run": self.run,
            "topology": {
                "rank": topo.rank,
                "world_size": topo.world_size,
                "master_addr": topo.master_addr,
                "master_port": topo.master_port,
            },
            "output_limit": None if output_mb is None else output_mb * 1024 * 1024,
        }


@dataclass(frozen=True, slots=True)
class RuntimeProfile:
    """What a runtime needs to know of a profile to start its pods."""

    name: str
    packages: tuple[str, ...] = ()  # installed once into the profile's shared environment
    preload: tuple[str, ...] = ()  # modules the agent imports once (e.g. "torch")
    network: bool = False
    # safe defaults: a profile names bigger ones (None: no limit; a broker's profiles never
    # say None unless its config asks for 0)
    memory_mb: int | None = 2048
    pids_max: int | None = 256
    cpus: float | None = 1.0  # CPU time per wall second (cgroup cpu quota)
    tmp_mb: int | None = 256  # each of /tmp and /dev/shm (a size-capped tmpfs)
    workspace_mb: int | None = 1024  # /workspace (a size-capped tmpfs, where root mounts one)
    output_mb: int | None = 16  # a job's stdout and stderr together; past it: a marker
    image: str | None = None  # Kubernetes: the profile's base image (None: the runtime's default)
    runtime_class: str | None = None  # Kubernetes: a RuntimeClass such as gvisor or kata
    # Kubernetes: the extended resource its pods ask for, e.g. a MIG slice
    # nvidia.com/mig-1g.10gb (None: the runtime's gpu_resource)
    gpu_resource: str | None = None
    # Kubernetes: a stopped pod's SIGTERM-to-SIGKILL grace (None: the runtime's default)
    grace_s: float | None = None


class BindRefused(ValueError):
    """A bind the runtime will not carry out because of the job itself (its environment or
    its code digest): the job's fault. Anything else a bind raises is the runtime's own."""


class PodNotStarted(RuntimeError):
    """A pod did not start; ``fault`` is why, as the runtime saw it (each runtime's own
    start error is one)."""

    def __init__(self, message: str, fault: StartFault = StartFault.START_FAILED) -> None:
        super().__init__(message)
        self.fault = fault


def start_fault(exc: BaseException) -> StartFault:
    """Why a start that raised ``exc`` failed: a runtime's own word (:class:`PodNotStarted`),
    else a timeout or any other failure."""
    if isinstance(exc, PodNotStarted):
        return exc.fault
    return StartFault.START_TIMED_OUT if isinstance(exc, TimeoutError) else StartFault.START_FAILED


class NotCarried(RuntimeError):
    """The runtime does not carry this out (a Kubernetes pod's disk, which the broker
    cannot reach; a binding a pod does not receive yet)."""


# --- events a runtime reports ------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodUp:
    pod: str


@dataclass(frozen=True, slots=True)
class PodDown:
    pod: str
    failure: Failure | None = None  # None: stopped as asked


@dataclass(frozen=True, slots=True)
class StartFailed:
    """A pod did not start: ``fault`` is why, ``detail`` the runtime's words."""

    pod: str
    fault: StartFault
    detail: str = ""


@dataclass(frozen=True, slots=True)
class JobRunning:
    job: str
    pod: str


@dataclass(frozen=True, slots=True)
class JobOutput:
    job: str
    pod: str
    stream: str  # "stdout" | "stderr"
    data: bytes


@dataclass(frozen=True, slots=True)
class JobExited:
    """A job's process ended in its pod. ``exited_at``: when the agent saw the process end;
    ``drained_at``: when its output had been read to the end and the pod was clean again
    (both the agent's wall clock; None when no agent saw it: the pod died, the bind failed)."""

    job: str
    pod: str
    exit_code: int
    failure: Failure | None = None
    exited_at: float | None = None
    drained_at: float | None = None


@dataclass(frozen=True, slots=True)
class NodeUp:
    """A node a runtime can place pods on joined (or came back, or changed shape)."""

    node: Node


@dataclass(frozen=True, slots=True)
class NodeDown:
    """A node left (deleted, cordoned, not ready, or without GPUs any more)."""

    node: str


RuntimeEvent = (
    PodUp | PodDown | StartFailed | JobRunning | JobOutput | JobExited | NodeUp | NodeDown
)


class Runtime(Protocol):
    """Where pods really live.

    Every call is answered by events as well as by its return: ``start_pod``, ``promote`` and
    ``recycle`` end with ``PodUp`` (of the new pod for a recycle; the old one just goes, with
    no ``PodDown``), a failed start with ``StartFailed(pod, fault)`` (and the call raises,
    a :class:`PodNotStarted` that says the same fault); ``bind`` with
    ``JobRunning`` then ``JobOutput``... and ``JobExited``; ``stop_pod`` with ``PodDown(pod)``
    (and ``JobExited(.., PREEMPTED)`` for a job it killed). A pod that dies unasked reports
    ``PodDown(pod, POD_DIED)`` (its job: ``JobExited(.., POD_DIED)``).
    """

    async def put_code(self, data: bytes) -> str:
        """Store a code archive (tar, any compression) once; returns its sha256 digest."""
        ...

    async def drop_code(self, digest: str) -> None:
        """Remove a stored code archive (no tenant claims it any more); none is no error."""
        ...

    async def read_file(
        self, pod: str, path: str, max_bytes: int
    ) -> tuple[int, AsyncIterator[bytes]]:
        """A file of a pod's workspace: its size and its bytes, streamed (a session's
        ``files``). FileNotFoundError, ``workspace_files.WorkspacePathError`` (a link, a
        path out of the workspace), ``FileTooLarge`` over ``max_bytes``."""
        ...

    async def write_file(
        self, pod: str, path: str, chunks: AsyncIterator[bytes], max_bytes: int
    ) -> int:
        """Put a file in a pod's workspace from ``chunks``, whole or not at all; the bytes
        written. Refusals as :meth:`read_file`'s."""
        ...

    async def drop_checkpoint(self, job: str, *, job_class: str | None = None) -> None:
        """The job ended for good: what its runs kept in their checkpoint dirs goes.
        ``job_class``: its class, where known (Kubernetes keeps checkpoints per class)."""
        ...

    async def start_pod(
        self,
        pod: str,
        profile: RuntimeProfile,
        gpus: tuple[str, ...],
        standby: bool,
        *,
        job_class: str = "pool",
        checkpoint: tuple[str, int] | None = None,
    ) -> None:
        """Start a pod; ``job_class`` (pool, hp, spot) is the class of the jobs it serves,
        which a cluster's own scheduler ranks pods by (Kubernetes: the PriorityClass).
        ``checkpoint``: the (job, rank) an hp or spot pod is started for (Kubernetes mounts
        that job's own checkpoint directory; None for a pod of no one job yet)."""
        ...

    async def promote(self, pod: str) -> None: ...

    async def recycle(self, pod: str, new_pod: str) -> None: ...

    async def bind(self, pod: str, binding: JobBinding) -> None: ...

    async def kill_job(
        self, job: str, failure: Failure = Failure.CANCELLED, grace_s: float = 0.0
    ) -> None:
        """Kill a running job in every pod it runs in: SIGTERM, then SIGKILL once ``grace_s``
        has passed (so it may checkpoint); it exits with ``failure`` (CANCELLED, PREEMPTED),
        reported by ``JobExited`` per pod."""
        ...

    async def stop_pod(self, pod: str) -> None: ...

    async def live_pods(self) -> list[str]:
        """Pods still alive (a restarted broker re-adopts these)."""
        ...

    def events(self) -> AsyncIterator[RuntimeEvent]: ...

    async def close(self) -> None: ...


def exited_event(msg: dict[str, Any], pod: str, failure: Failure | None) -> JobExited:
    """The JobExited an agent's ``exited`` message tells of (local and Kubernetes alike)."""
    exited_at, drained_at = msg.get("exited_at"), msg.get("at")
    return JobExited(
        str(msg["job"]),
        pod,
        int(msg["exit_code"]),
        failure,
        None if exited_at is None else float(exited_at),
        None if drained_at is None else float(drained_at),
    )
