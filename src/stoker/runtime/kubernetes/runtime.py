"""The Kubernetes runtime: stoker pods are Pods, each running the agent, which dials back.

Client: lightkube's ``AsyncClient``. It is async, typed (models for every core resource),
small, maintained, and built on httpx (httpx2), the HTTP stack stoker already uses: its
transport can be replaced, so the tests drive the real client against a Kubernetes API
server made of real JSON bodies through ``httpx2.MockTransport``. kr8s is async too but
untyped and heavier; kubernetes_asyncio is generated code on aiohttp.

The shape of it:

- ``start_pod`` creates the Pod (from :func:`pods.pod_manifest`), then its token Secret owned
  by the Pod (Kubernetes deletes the Secret with the Pod, whoever deletes it), and returns
  once the pod's agent dialed the gateway with that token and said hello (``PodUp``).
- The gateway is a TCP listener in the broker (behind the ``stoker-gateway`` Service): pods
  dial out to it, never the other way, so a pod needs no inbound port and the NetworkPolicy
  lets them reach the broker only. The wire is the agent protocol of ``stoker.agent``, one
  JSON object a line, after an ``auth`` line naming the pod and its token.
- One watch on the install's pods (label ``stoker.dev/instance``) turns what the cluster does
  into events: a pod that ends or vanishes without being asked is ``PodDown`` with a typed
  failure (``preempted`` for evictions and scheduler preemption, ``out_of_memory`` for an
  OOM-killed agent, ``pod_died`` otherwise) and its job ``JobExited`` with the same. The
  watch resumes from its resourceVersion; after 410 Gone it lists again and reports every
  pod the list no longer has.
- Every API call is retried on 429 and 5xx (and broken connections) with exponential
  backoff and jitter, honouring ``Retry-After``; 409, 422 and other 4xx are errors at once.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import hmac
import json
import logging
import math
import random
import secrets
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx2
from lightkube import ApiError, AsyncClient, KubeConfig
from lightkube.core.exceptions import NotReadyError
from lightkube.resources.core_v1 import Node as KNode
from lightkube.resources.core_v1 import Pod as KPod
from lightkube.resources.core_v1 import Secret as KSecret
from lightkube.types import PatchType

from stoker.agent import protocol
from stoker.agent.binding import check_env
from stoker.api.deps import check_deps
from stoker.core.model import Failure, Node, Profile, StartFault
from stoker.core.reconcile import node_added
from stoker.runtime.agent_link import AgentLink, AgentNotConnected
from stoker.runtime.base import (
    BindRefused,
    JobBinding,
    JobExited,
    JobOutput,
    JobRunning,
    NodeDown,
    NodeUp,
    PodDown,
    PodNotStarted,
    PodUp,
    RuntimeEvent,
    RuntimeProfile,
    StartFailed,
    exited_event,
    start_fault,
)
from stoker.runtime.base import NotCarried as Unsupported
from stoker.runtime.code import CodeStore
from stoker.runtime.kubernetes import pods
from stoker.runtime.kubernetes.nodes import cluster_nodes, gpu_memory_mib, node_of
from stoker.runtime.kubernetes.settings import (
    ANNOTATION_SPEC,
    LABEL_LEADER,
    LABEL_ROLE,
    LABEL_TENANT,
    KubeSettings,
    object_name,
    tenant_hash,
)

log = logging.getLogger("stoker.runtime.kubernetes")
T = TypeVar("T")

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
CODE_CHUNK = 4 * 1024 * 1024  # bytes of a code archive per message (base64 stays < MAX_LINE)
#: container waiting reasons no wait can cure: the pod will never start, and why
_HOPELESS = {
    "InvalidImageName": StartFault.IMAGE_MISSING,
    "ErrImageNeverPull": StartFault.IMAGE_MISSING,
    "CreateContainerError": StartFault.START_FAILED,
}
#: waiting reasons of an image the kubelet could not pull (yet): a pod that times out in
#: one of them did not start for its image
_PULLING = frozenset({"ErrImagePull", "ImagePullBackOff"})
#: pod status reasons of a kubelet that evicted or shut the pod down
_EVICTED = frozenset({"Evicted", "Preempting", "Shutdown", "NodeShutdown", "Terminated"})


class KubeRuntimeError(RuntimeError):
    """Base of the Kubernetes runtime's errors."""


class PodStartError(KubeRuntimeError, PodNotStarted):
    """A pod did not come up (refused by the API, never scheduled, its image missing, or
    its agent never dialed)."""


class UnknownPod(KubeRuntimeError, KeyError):
    """No live pod with this id in this runtime."""


class PodBusy(KubeRuntimeError):
    """The pod is running a job, or stands by (promote it first)."""


class PodStopTimeout(KubeRuntimeError):
    """A deleted pod was still there when its grace and ``stop_timeout_s`` had passed (a
    node that stopped answering): it is kept, and a later ``stop_pod`` asks again."""


class NotCarried(KubeRuntimeError, Unsupported):
    """A binding asks for something a Kubernetes pod does not receive yet."""


@dataclass(frozen=True, slots=True)
class Backoff:
    """Retries of one API call: ``tries`` at most, waiting ``base_s * 2**n`` (capped, with
    jitter), or what the server's ``Retry-After`` says."""

    base_s: float = 0.2
    cap_s: float = 10.0
    tries: int = 6

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        if retry_after is not None:
            return min(self.cap_s, retry_after)
        return min(self.cap_s, self.base_s * 2**attempt) * random.uniform(0.5, 1.0)


@dataclass(frozen=True, slots=True)
class PodInfo:
    """What the runtime knows of one live pod."""

    id: str
    profile: str
    node: str | None
    gpus: tuple[str, ...]
    standby: bool
    job: str | None
    connected: bool


@dataclass
class _Pod:
    shape: pods.PodShape
    token: str
    uid: str | None = None
    ip: str | None = None  # status.podIP, once the pod runs
    job: str | None = None
    grace_until: float = 0.0  # monotonic: a graceful kill of the job runs until then
    stopping: bool = False
    pulling: str | None = None  # while it starts: why its image is not pulled yet
    link: AgentLink = field(init=False)
    up: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    gone: asyncio.Event = field(default_factory=asyncio.Event)
    codes: dict[str, str] = field(default_factory=dict)  # digest -> path in the pod

    def __post_init__(self) -> None:
        self.link = AgentLink(self.shape.pod)

    @property
    def id(self) -> str:
        return self.shape.pod

    @property
    def name(self) -> str:
        return object_name(self.shape.pod)


def status_code(exc: BaseException) -> int | None:
    """The HTTP status of a failed API call (in a watch stream's ERROR event too)."""
    if isinstance(exc, ApiError) and exc.status is not None and exc.status.code:
        return int(exc.status.code)
    if isinstance(exc, httpx2.HTTPStatusError) and exc.response is not None:
        return exc.response.status_code
    return None


def _retry_after(exc: BaseException) -> float | None:
    response = getattr(exc, "response", None)
    value = response.headers.get("Retry-After") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def pod_failure(obj: dict[str, Any], deleted: bool) -> Failure | None:
    """How a pod ended, from its status; None while it still runs."""
    status = obj.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            return Failure.PREEMPTED  # scheduler preemption, eviction API, taint manager
    if status.get("reason") in _EVICTED:
        return Failure.PREEMPTED
    for cs in status.get("containerStatuses") or []:
        for state in (cs.get("state") or {}, cs.get("lastState") or {}):
            if (state.get("terminated") or {}).get("reason") == "OOMKilled":
                return Failure.OUT_OF_MEMORY
    if deleted or status.get("phase") in ("Failed", "Succeeded"):
        return Failure.POD_DIED
    return None


def _waiting(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The waiting states (reason and message) of a pending pod's containers."""
    statuses = (obj.get("status") or {}).get("containerStatuses") or []
    return [w for cs in statuses if (w := (cs.get("state") or {}).get("waiting"))]


def _hopeless(waiting: list[dict[str, Any]]) -> tuple[str, StartFault] | None:
    """Why a pending pod (``waiting``: its containers' waiting states) can never start, if
    it cannot: the kubelet's words and the fault."""
    for w in waiting:
        fault = _HOPELESS.get(str(w.get("reason")))
        if fault is not None:
            return f"{w['reason']}: {w.get('message', '')}".strip(), fault
    return None


class KubernetesRuntime:
    """Pods through the Kubernetes API (implements :class:`stoker.runtime.base.Runtime`).

    ``profiles`` are the core's profiles (their GPU model, GPUs, shares, CPU and memory
    shape the pods); ``listen`` is where the agent gateway listens (port 0: any free port,
    read back from :attr:`gateway_port`). ``client`` defaults to lightkube's own choice:
    in-cluster config, else ``$KUBECONFIG`` or ``~/.kube/config``. ``own_pod`` is the
    broker's own Pod (the Deployment passes its name as ``POD_NAME``): while the runtime
    runs (the replica leads) that Pod carries the leader label the gateway Service selects.
    """

    def __init__(
        self,
        settings: KubeSettings,
        profiles: Iterable[Profile],
        *,
        client: AsyncClient | None = None,
        listen: tuple[str, int] | None = None,
        backoff: Backoff = Backoff(),
        adopt_wait_s: float = 15.0,
        code_dir: Path | str | None = None,
        own_pod: str | None = None,
    ) -> None:
        self.settings = settings
        self.profiles = {p.name: p for p in profiles}
        self.own_pod = own_pod
        # a client of our own is closed with the runtime and made anew by the next start()
        # (a replica that leads again); a client passed in is the caller's
        self._new_client: Callable[[], AsyncClient] | None = None
        if client is None:
            self._new_client = lambda: AsyncClient(namespace=settings.namespace)
        self.client = client or self._new_client()  # type: ignore[misc]
        self._client_closed = False
        self.listen = listen or ("0.0.0.0", settings.gateway_port)
        self.backoff = backoff
        self.adopt_wait_s = adopt_wait_s
        self.sync_timeout_s = 60.0  # how long start() waits for the first list of pods
        self._watch_error: BaseException | None = None
        # code archives are kept here and sent to a pod over its connection when a job needs
        # one (the pod cannot see the broker's disk)
        self.code = CodeStore(Path(code_dir)) if code_dir is not None else None
        self.retries: Counter[int | str] = Counter()  # API retries by status (for tests, metrics)
        self.relists = 0
        self._nodes: dict[str, Node] = {}  # the ready GPU nodes, as the core sees them
        self._gpu_mem: dict[str, int] = {}
        self._pods: dict[str, _Pod] = {}  # by stoker pod id
        self._by_name: dict[str, _Pod] = {}  # by Kubernetes object name
        self._events: asyncio.Queue[RuntimeEvent] = asyncio.Queue()
        self._server: asyncio.Server | None = None
        self._watch: asyncio.Task[None] | None = None
        self._node_watch: asyncio.Task[None] | None = None
        self._synced = asyncio.Event()
        self._conns: set[asyncio.StreamWriter] = set()  # every agent connection open

    @classmethod
    def from_kubeconfig(
        cls, path: str, settings: KubeSettings, profiles: Iterable[Profile], **kw: Any
    ) -> KubernetesRuntime:
        """A runtime on the cluster a kubeconfig file names (its current context)."""
        config = KubeConfig.from_file(path)
        rt = cls(settings, profiles, client=AsyncClient(config, namespace=settings.namespace), **kw)
        rt._new_client = lambda: AsyncClient(config, namespace=settings.namespace)
        return rt

    @property
    def gateway_port(self) -> int:
        if self._server is None:
            raise KubeRuntimeError("the gateway is not listening yet (call start())")
        return int(self._server.sockets[0].getsockname()[1])

    # --- API calls -----------------------------------------------------------

    async def _api(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """One API call, retried with backoff on 429, 5xx and broken connections."""
        attempt = 0
        while True:
            try:
                return await call()
            except (httpx2.HTTPStatusError, httpx2.TransportError) as exc:
                code = status_code(exc)
                retryable = code in RETRY_STATUS or isinstance(exc, httpx2.TransportError)
                if not retryable or attempt + 1 >= self.backoff.tries:
                    raise
                self.retries[code if code is not None else "transport"] += 1
                delay = self.backoff.delay(attempt, _retry_after(exc))
                log.warning("%s: %s; retry %d in %.2f s", what, code or exc, attempt + 1, delay)
                attempt += 1
                await asyncio.sleep(delay)

    async def discover(self) -> list[Node]:
        """The cluster's GPU nodes as the core's nodes (after this, the node watch that
        :meth:`start` runs reports only what changes: NodeUp, NodeDown)."""
        items, _ = await self._api("list nodes", lambda: self._list(KNode, None))
        return self.use_nodes([n.to_dict() for n in items])

    def use_nodes(self, nodes: list[dict[str, Any]]) -> list[Node]:
        """Take the cluster's Node objects (as the API returns them) as this runtime's."""
        self._nodes = {n.name: n for n in cluster_nodes(nodes, self.settings)}
        self._gpu_mem = gpu_memory_mib(nodes, self.settings)
        return self.cluster

    @property
    def cluster(self) -> list[Node]:
        """The ready GPU nodes, sorted by name."""
        return [self._nodes[n] for n in sorted(self._nodes)]

    @property
    def devices(self) -> dict[str, Any]:
        """GPU id -> core GPU, of every ready node."""
        return {g.id: g for n in self.cluster for g in n.gpus}

    async def _list(self, res: Any, labels: dict[str, Any] | None) -> tuple[list[Any], str]:
        """Every object (all pages) and the list's resourceVersion."""
        listing = self.client.list(res, labels=labels) if labels else self.client.list(res)
        items = [obj async for obj in listing]
        rv = ""
        with contextlib.suppress(NotReadyError):
            rv = listing.resourceVersion
        return items, rv

    # --- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        """Listen for agents, start watching this install's pods, and label this broker's
        Pod the leader, so the gateway Service sends the agents here (idempotent)."""
        if self._client_closed and self._new_client is not None:
            self.client, self._client_closed = self._new_client(), False
        if self._server is None:
            self._server = await asyncio.start_server(
                self._accept, *self.listen, limit=protocol.MAX_LINE
            )
            await self._lead(True)
        loop = asyncio.get_running_loop()
        if self._watch is None:
            # stoker pods only: the broker's own pods carry the instance label too
            pods_of = self.settings.base_labels("pod")
            self._watch = loop.create_task(
                self._watch_loop(KPod, pods_of, self._relist, self._on_pod, self._synced)
            )
        if self._node_watch is None:
            self._node_watch = loop.create_task(
                self._watch_loop(KNode, None, self._relist_nodes, self._on_node_event)
            )
        try:
            await asyncio.wait_for(asyncio.shield(self._synced.wait()), self.sync_timeout_s)
        except TimeoutError as exc:
            raise KubeRuntimeError(f"cannot list this install's pods: {self._watch_error}") from exc

    async def close(self) -> None:
        """Stop listening and watching, and take the leader label off this broker's Pod;
        the pods keep running for the next broker."""
        if self._server is not None:
            with contextlib.suppress(httpx2.HTTPError):  # the next leader clears it anyway
                await self._lead(False)
        for task in (self._watch, self._node_watch):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._watch = self._node_watch = None
        for rec in list(self._pods.values()):
            rec.stopping = True  # not a death: no PodDown
            rec.link.hang_up()
        self._pods.clear()
        self._by_name.clear()
        for writer in list(self._conns):
            writer.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        self._synced = asyncio.Event()
        if self._new_client is not None:
            await self.client.close()
            self._client_closed = True

    async def events(self) -> AsyncIterator[RuntimeEvent]:
        """Every event of every pod, in the order they happened."""
        while True:
            yield await self._events.get()

    async def put_code(self, data: bytes) -> str:
        """Store a code archive once (sent to a pod when a job bound there needs it)."""
        if self.code is None:
            raise NotCarried("code: this runtime keeps no code archives (no code_dir)")
        return await asyncio.to_thread(self.code.put, data)

    async def read_file(
        self, pod: str, path: str, max_bytes: int
    ) -> tuple[int, AsyncIterator[bytes]]:
        """Not here: the broker cannot reach a pod's disk (the SDK moves files by jobs)."""
        raise NotCarried("this runtime cannot reach a pod's workspace from the broker")

    async def write_file(
        self, pod: str, path: str, chunks: AsyncIterator[bytes], max_bytes: int
    ) -> int:
        """Not here: see :meth:`read_file`."""
        raise NotCarried("this runtime cannot reach a pod's workspace from the broker")

    async def drop_checkpoint(self, job: str, *, job_class: str | None = None) -> None:
        """The job ended for good: its directory goes from its class's checkpoint volume
        (every volume where the class is not known; none for a class without one, so a
        pool job costs no API call), by a short-lived Pod per volume (:func:`pods.drop_pods`;
        no pod of a job mounts more than its own rank's directory, so none could). Waited for
        up to ``start_timeout_s``, then deleted; a drop that fails is logged, and its
        directory stays."""
        for manifest in pods.drop_pods(self.settings, job, job_class):
            name = manifest["metadata"]["name"]
            try:
                await self._api(
                    f"create pod {name}", lambda m=manifest: self.client.create(KPod.from_dict(m))
                )
            except ApiError as exc:
                # 409: a drop of the same job and volume is under way, or one a broker left
                # behind (it stopped meanwhile): waited for and deleted as if it were ours
                if status_code(exc) != 409:
                    log.warning("checkpoint drop of job %s: %s", job, exc)
                    continue
            phase = await self._finished(name, self.settings.start_timeout_s)
            if phase != "Succeeded":
                log.warning("checkpoint drop of job %s: pod %s ended %s", job, name, phase)
            with contextlib.suppress(ApiError):
                await self._delete_pod(name, 0)

    async def _finished(self, name: str, timeout_s: float) -> str | None:
        """The phase of the Pod ``name`` once it is Succeeded or Failed; None if it is not
        within ``timeout_s`` (or is gone)."""
        deadline = time.monotonic() + timeout_s
        delay = 0.05
        while time.monotonic() < deadline:
            try:
                obj = await self._api(f"read pod {name}", lambda: self.client.get(KPod, name))
            except ApiError:
                return None
            phase = obj.status.phase if obj.status is not None else None
            if phase in ("Succeeded", "Failed"):
                return phase
            await asyncio.sleep(delay)
            delay = min(2.0, delay * 2)
        return None

    async def drop_code(self, digest: str) -> None:
        """Remove a stored code archive (none kept: nothing to do)."""
        if self.code is not None:
            await asyncio.to_thread(self.code.remove, digest)

    # --- pods ----------------------------------------------------------------

    def _pod(self, pod: str) -> _Pod:
        rec = self._pods.get(pod)
        if rec is None or rec.stopping:
            raise UnknownPod(f"pod: no live pod {pod!r}")
        return rec

    def pod_info(self, pod: str) -> PodInfo:
        rec = self._pod(pod)
        s = rec.shape
        return PodInfo(
            rec.id, s.profile.name, s.node, s.gpu_ids, s.standby, rec.job, rec.link.connected
        )

    def shape(
        self,
        pod: str,
        profile: RuntimeProfile,
        gpus: tuple[str, ...],
        standby: bool,
        job_class: str = "pool",
        checkpoint: tuple[str, int] | None = None,
    ) -> pods.PodShape:
        """The shape of a pod as :meth:`start_pod` would create it."""
        core = self.profiles.get(profile.name)
        if core is None:
            raise ValueError(f"profile: {profile.name!r} is not a profile of this runtime")
        nodes = {node_of(g) for g in gpus}
        if len(nodes) > 1:
            raise ValueError(f"gpus: one pod's GPUs on one node, not {sorted(nodes)}")
        node = next(iter(nodes), None)
        mem = self._gpu_mem.get(node) if node else None
        return pods.PodShape(
            pod, core, profile, node, tuple(gpus), standby, job_class, mem, checkpoint
        )

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
        """Create the pod and its Secret; returns once its agent dialed in (PodUp emitted).
        ``checkpoint``: the (job, rank) the pod is started for, whose own directory of its
        class's checkpoint volume it mounts (where the settings give the class one)."""
        await self.start()
        if pod in self._pods:
            raise ValueError(f"pod: {pod!r} exists already")
        shape = self.shape(pod, profile, gpus, standby, job_class, checkpoint)
        try:
            manifest = pods.pod_manifest(self.settings, shape)
        except pods.PodSpecError as exc:
            why = f"pod {pod}: {exc}"
            await self._events.put(StartFailed(pod, StartFault.START_FAILED, why))
            raise PodStartError(why) from exc
        rec = _Pod(shape, secrets.token_urlsafe(32))
        self._pods[pod] = rec
        self._by_name[rec.name] = rec
        try:
            await self._create(rec, manifest)
            await asyncio.wait_for(asyncio.shield(rec.up), self.settings.start_timeout_s)
        except BaseException as exc:
            if rec.uid is not None:  # never a pod of the same name that is not this one
                await self._delete(rec)
            self._forget(rec)
            fault = start_fault(exc)
            if isinstance(exc, TimeoutError):
                why = f"no agent after {self.settings.start_timeout_s} s"
                if rec.pulling is not None:  # timed out pulling its image
                    fault, why = StartFault.IMAGE_MISSING, f"{why} (image: {rec.pulling})"
                error = PodStartError(f"pod {pod} did not start: {why}", fault)
            elif isinstance(exc, PodStartError | asyncio.CancelledError):
                error = exc
            else:
                error = PodStartError(f"pod {pod} did not start: {exc}")
            await self._events.put(StartFailed(pod, fault, str(error)))
            if error is exc:
                raise
            raise error from exc
        await self._events.put(PodUp(pod))

    async def _create(self, rec: _Pod, manifest: dict[str, Any]) -> None:
        ns = self.settings.namespace
        try:
            created = await self._api(
                f"create pod {rec.name}", lambda: self.client.create(KPod.from_dict(manifest))
            )
        except ApiError as exc:
            raise PodStartError(
                f"pod {rec.id}: the API refused it ({exc.status.code}): {exc}"
            ) from exc
        rec.uid = created.metadata.uid
        secret = pods.secret_manifest(self.settings, rec.id, rec.token, rec.uid)
        try:
            await self._api(
                f"create secret of {rec.name}",
                lambda: self.client.create(KSecret.from_dict(secret)),
            )
        except ApiError as exc:
            if status_code(exc) != 409:
                raise
            # left by an earlier pod of the same name: this pod's token replaces it
            await self._api(
                f"replace secret of {rec.name}",
                lambda: self.client.replace(KSecret.from_dict(secret), namespace=ns),
            )

    async def _delete(self, rec: _Pod) -> int:
        """Delete the pod object (its Secret goes with it); a pod already gone is fine.
        The kubelet sends SIGTERM, then SIGKILL after the grace returned here: the
        profile's, or what is left of a graceful kill of the pod's job, if longer."""
        rec.stopping = True
        rec.link.hang_up()
        grace = pods.grace_period(self.settings, rec.shape.runtime)
        grace = max(grace, math.ceil(rec.grace_until - time.monotonic()))
        if not await self._delete_pod(rec.name, grace):
            rec.gone.set()
        return grace

    async def _delete_pod(self, name: str, grace: int | None = None) -> bool:
        """Delete a Pod object (with retries); False if it was gone already."""
        grace = self.settings.termination_grace_s if grace is None else grace
        try:
            await self._api(
                f"delete pod {name}",
                lambda: self.client.delete(KPod, name, grace_period=grace),
            )
        except ApiError as exc:
            if status_code(exc) != 404:
                raise
            return False
        return True

    def _forget(self, rec: _Pod) -> None:
        if self._pods.get(rec.id) is rec:
            del self._pods[rec.id]
        if self._by_name.get(rec.name) is rec:
            del self._by_name[rec.name]

    async def _await_gone(self, rec: _Pod, grace: int) -> None:
        """Wait until the watch saw the pod go (PodStopTimeout past its grace and
        ``stop_timeout_s``: it is kept, for a later stop to ask again)."""
        wait_s = grace + self.settings.stop_timeout_s
        try:
            await asyncio.wait_for(rec.gone.wait(), wait_s)
        except TimeoutError as exc:
            raise PodStopTimeout(f"pod {rec.id}: still there {wait_s:g} s after delete") from exc
        self._forget(rec)

    async def stop_pod(self, pod: str) -> None:
        """Delete the pod: its agent and its job get SIGTERM, then SIGKILL once the grace
        has passed (see :meth:`_delete`). Returns once the pod is gone, and emits
        PodDown(pod) (PREEMPTED for its job); PodStopTimeout if it does not go. A pod whose
        stop timed out may be stopped again."""
        rec = self._pods.get(pod)
        if rec is None:
            raise UnknownPod(f"pod: no live pod {pod!r}")
        job = rec.job
        await self._await_gone(rec, await self._delete(rec))
        if job is not None:
            await self._events.put(JobExited(job, pod, 137, Failure.PREEMPTED))
        await self._events.put(PodDown(pod))

    async def stop_all(self) -> None:
        """Stop every pod (PodDown for each)."""
        for pod in sorted(self._pods):
            if not self._pods[pod].stopping:
                await self.stop_pod(pod)

    async def recycle(self, pod: str, new_pod: str) -> None:
        """A fresh pod in place of ``pod`` (never scrubbed in place: a Pod is cheap to
        replace and a new one shares nothing); emits PodUp(new_pod) only."""
        rec = self._pod(pod)
        if new_pod in self._pods:
            raise ValueError(f"new_pod: {new_pod!r} exists already")
        job = rec.job
        await self._await_gone(rec, await self._delete(rec))
        if job is not None:
            await self._events.put(JobExited(job, pod, 137, Failure.PREEMPTED))
        s = rec.shape
        # no checkpoint mount: a recycled pod may serve another job than the old one's
        await self.start_pod(new_pod, s.runtime, s.gpu_ids, s.standby, job_class=s.job_class)

    async def promote(self, pod: str) -> None:
        """Let a standby pod use its GPU share (CUDA from now on); emits PodUp."""
        rec = self._pod(pod)
        visible = ",".join(str(i) for i in range(len(rec.shape.gpu_ids)))
        msg = {"op": "promote", "cuda_visible_devices": visible, "gpus": list(rec.shape.gpu_ids)}
        reply = await rec.link.request(msg, "promoted")
        if reply.get("ev") != "promoted":
            raise KubeRuntimeError(f"pod {pod}: promote refused: {reply.get('message')}")
        rec.shape = dataclasses.replace(rec.shape, standby=False)
        await self._label(rec.name, {LABEL_ROLE: "active"})
        await self._events.put(PodUp(pod))

    async def bind(self, pod: str, binding: JobBinding) -> None:
        """Bind and start a job; JobRunning (or JobExited for a bad binding) follows."""
        rec = self._pod(pod)
        if rec.job is not None:
            raise PodBusy(f"pod: {pod} is running job {rec.job}")
        if rec.shape.standby:
            raise PodBusy(f"pod: {pod} stands by; promote it before binding")
        try:
            # checked here and again by the agent, which installs them in the pod
            deps = check_deps(binding.deps)
            check_env(dict(binding.env))
        except ValueError as exc:
            raise BindRefused(str(exc)) from exc
        if not rec.link.connected:
            raise AgentNotConnected(f"pod: {pod}'s agent is not connected")
        code = None
        if binding.code_digest:
            if self.code is None:
                raise NotCarried("code: this runtime keeps no code archives (no code_dir)")
            archive = self.code.path(binding.code_digest)  # CodeNotFound names the field
            code = rec.codes.get(binding.code_digest) or await self._send_code(rec, archive)
        if binding.topology.master_pod is not None:
            addr = await self._pod_ip(binding.topology.master_pod)
            binding = dataclasses.replace(
                binding, topology=dataclasses.replace(binding.topology, master_addr=addr)
            )
        if binding.tenant is not None:
            await self._label(rec.name, {LABEL_TENANT: tenant_hash(binding.tenant)})
        rec.job = binding.job
        await rec.link.send(binding.message(code, [], rec.shape.runtime.output_mb, deps))

    async def _pod_ip(self, pod: str) -> str:
        """The pod IP of a live pod (rank 0 of a gang, which the other ranks dial): as the
        watch saw it, else read from the API (its agent may dial in before the watch says
        the pod runs)."""
        rec = self._pod(pod)
        if rec.ip is None:
            obj = await self._api(f"read pod {rec.name}", lambda: self.client.get(KPod, rec.name))
            rec.ip = obj.status.podIP if obj.status is not None else None
        if not rec.ip:
            raise KubeRuntimeError(f"pod {pod}: no pod IP yet (rank 0 of a gang runs there)")
        return rec.ip

    async def _send_code(self, rec: _Pod, archive: Path) -> str:
        """Send a code archive to the pod in chunks; its path there once it checked out."""
        data = await asyncio.to_thread(archive.read_bytes)
        reply: protocol.Message = {}
        for offset in range(0, max(len(data), 1), CODE_CHUNK):
            msg = {
                "op": "code",
                "digest": archive.name,
                "offset": offset,
                "data": protocol.pack_bytes(data[offset : offset + CODE_CHUNK]),
                "last": offset + CODE_CHUNK >= len(data),
            }
            if msg["last"]:
                reply = await rec.link.request(msg, "code")
            else:
                await rec.link.send(msg)
        if reply.get("ev") != "code":
            raise KubeRuntimeError(f"pod {rec.id}: code refused: {reply.get('message')}")
        rec.codes[archive.name] = str(reply["path"])
        return rec.codes[archive.name]

    async def kill_job(
        self, job: str, failure: Failure = Failure.CANCELLED, grace_s: float = 0.0
    ) -> None:
        """Kill a running job in every pod it runs in (a job that already ended is left
        alone): the agent sends SIGTERM, then SIGKILL once ``grace_s`` has passed."""
        for rec in self._pods.values():
            if rec.job == job and not rec.stopping and rec.link.connected:
                if grace_s > 0:  # a stop_pod meanwhile lets the pod's grace cover it
                    rec.grace_until = time.monotonic() + grace_s
                msg = {"op": "kill", "job": job, "failure": failure.value, "grace_s": grace_s}
                await rec.link.send(msg)

    async def ping(self, pod: str) -> protocol.Message:
        """The agent's own view of its pod."""
        return await self._pod(pod).link.request({"op": "ping"}, "pong")

    async def _label(self, name: str, labels: dict[str, str | None]) -> None:
        """Set (None: remove) labels of the Pod ``name``: a merge patch."""
        patch = {"metadata": {"labels": labels}}
        await self._api(
            f"label pod {name}",
            lambda: self.client.patch(KPod, name, patch, patch_type=PatchType.MERGE),
        )

    async def _lead(self, leading: bool) -> None:
        """Label this broker's own Pod the leader (or take the label off): the gateway
        Service selects only the leader, so agents always dial the replica that schedules.
        Taking the lead also takes the label off any other broker Pod still carrying it (a
        leader deposed while cut off from the API). Nothing to do outside a Pod."""
        if not self.own_pod:
            return
        others: list[str] = []
        if leading:
            selector = {**self.settings.base_labels("broker"), LABEL_LEADER: "true"}
            items, _ = await self._api("list leaders", lambda: self._list(KPod, selector))
            others = [o.metadata.name for o in items if o.metadata.name != self.own_pod]
        for name, on in [(n, False) for n in others] + [(self.own_pod, leading)]:
            try:
                await self._label(name, {LABEL_LEADER: "true" if on else None})
            except ApiError as exc:  # e.g. POD_NAME names no pod: say so, keep scheduling
                log.error("leader label on pod %s: %s", name, exc)

    # --- re-adoption and garbage -----------------------------------------------

    async def live_pods(self) -> list[str]:
        """Pods of this install alive in the cluster; ones an earlier broker started are
        re-adopted (their token read back from their Secret) and waited for a while, so
        their agents can dial in and say which job they run."""
        await self.start()
        items, _ = await self._api(
            "list pods",
            lambda: self._list(KPod, self.settings.base_labels("pod")),
        )
        adopted = []
        for obj in items:
            d = obj.to_dict()
            meta = d.get("metadata") or {}
            if obj.metadata.name in self._by_name or meta.get("deletionTimestamp"):
                continue
            rec = await self._adopt(d) if pod_failure(d, deleted=False) is None else None
            if rec is not None:
                adopted.append(rec)
                continue
            # ended, or never to be spoken to again (no token, no spec): garbage
            with contextlib.suppress(ApiError):
                await self._delete_pod(obj.metadata.name)
        if adopted:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    asyncio.gather(*(asyncio.shield(r.up) for r in adopted)), self.adopt_wait_s
                )
        return sorted(p for p, rec in self._pods.items() if not rec.stopping)

    async def _adopt(self, d: dict[str, Any]) -> _Pod | None:
        meta = d["metadata"]
        try:
            note = json.loads(meta["annotations"][ANNOTATION_SPEC])
            secret = await self._api(
                "read secret",
                lambda: self.client.get(KSecret, pods.secret_name(note["pod"])),
            )
            token = base64.b64decode(secret.data[pods.TOKEN_KEY]).decode()
            runtime = pods.runtime_profile(note)
            shape = self.shape(
                note["pod"],
                runtime,
                tuple(note["gpus"]),
                bool(note["standby"]),
                note["class"],
                pods.checkpoint_of(note),
            )
        except (KeyError, ValueError, TypeError, ApiError) as exc:
            log.warning("pod %s: cannot adopt (%s); deleting it", meta["name"], exc)
            return None
        rec = _Pod(shape, token, uid=meta.get("uid"))
        self._pods[rec.id] = rec
        self._by_name[rec.name] = rec
        return rec

    async def collect_garbage(self, keep: Iterable[str]) -> list[str]:
        """Delete this install's pods whose stoker id is not in ``keep`` (pods a broker
        created and no longer knows); their Secrets go with them. Returns their ids."""
        keep = set(keep)
        items, _ = await self._api(
            "list pods", lambda: self._list(KPod, self.settings.base_labels("pod"))
        )
        deleted = []
        for obj in items:
            d = obj.to_dict()
            try:
                pod = json.loads(d["metadata"]["annotations"][ANNOTATION_SPEC])["pod"]
            except (KeyError, ValueError, TypeError):
                pod = obj.metadata.name
            if pod in keep:
                continue
            rec = self._by_name.get(obj.metadata.name)
            if rec is not None:
                rec.stopping = True
                rec.link.hang_up()
                self._forget(rec)
            with contextlib.suppress(ApiError):
                await self._delete_pod(obj.metadata.name)
            deleted.append(pod)
        return sorted(deleted)

    # --- the watch -------------------------------------------------------------

    async def _watch_loop(
        self,
        res: Any,
        selector: dict[str, str] | None,
        relist: Callable[[dict[str, str] | None], Awaitable[str]],
        on_event: Callable[[dict[str, Any], bool], Awaitable[None]],
        synced: asyncio.Event | None = None,
    ) -> None:
        """List, then watch from the list's resourceVersion; list again after 410 Gone.
        ``relist`` takes the full state (and returns its resourceVersion), ``on_event``
        each change (the object, and whether it was deleted)."""
        rv: str | None = None
        attempt = 0
        while True:
            try:
                if rv is None:
                    rv = await relist(selector)
                    if synced is not None:
                        synced.set()
                watch = (
                    self.client.watch(res, labels=selector, resource_version=rv)
                    if selector
                    else self.client.watch(res, resource_version=rv)
                )
                async for etype, obj in watch:
                    attempt = 0
                    rv = obj.metadata.resourceVersion or rv
                    if etype in ("ADDED", "MODIFIED", "DELETED"):
                        await on_event(obj.to_dict(), etype == "DELETED")
            except asyncio.CancelledError:
                raise
            except (httpx2.HTTPError, OSError) as exc:
                self._watch_error = exc
                code = status_code(exc)
                if code == 410:
                    log.info("watch: resourceVersion %s expired; listing again", rv)
                    rv = None
                    if attempt:  # expired again before any event: never a tight loop
                        await asyncio.sleep(self.backoff.delay(attempt))
                    attempt += 1
                    continue
                self.retries[code if code is not None else "watch"] += 1
                delay = self.backoff.delay(attempt, _retry_after(exc))
                attempt = min(attempt + 1, 16)
                log.warning("watch: %s; again in %.2f s", code or exc, delay)
                await asyncio.sleep(delay)
            except Exception as exc:  # one malformed object must not end the watch for good
                self._watch_error = exc
                log.exception("watch")
                await asyncio.sleep(self.backoff.delay(attempt))

    async def _relist_nodes(self, _selector: dict[str, str] | None) -> str:
        """Every node as it is now; what changed while no watch ran is reported."""
        items, rv = await self._api("list nodes", lambda: self._list(KNode, None))
        seen = set()
        for obj in items:
            seen.add(obj.metadata.name)
            await self._on_node_event(obj.to_dict(), False)
        for name in sorted(set(self._nodes) - seen):
            await self._on_node_event({"metadata": {"name": name}}, True)
        return rv or "0"

    async def _on_node_event(self, d: dict[str, Any], deleted: bool) -> None:
        """A node changed: NodeUp when the core's view of it did (joined, came back, other
        GPUs or CPU slots), NodeDown when it can take no pod any more."""
        name = str((d.get("metadata") or {}).get("name"))
        now = [] if deleted else cluster_nodes([d], self.settings)
        old = self._nodes.get(name)
        if not now:
            self._gpu_mem.pop(name, None)
            if self._nodes.pop(name, None) is not None:
                await self._events.put(NodeDown(name))
            return
        self._gpu_mem.update(gpu_memory_mib([d], self.settings))
        node = self._nodes[name] = now[0]
        if old is None or node_added(old) != node_added(node):
            await self._events.put(NodeUp(node))

    async def _relist(self, selector: dict[str, str] | None) -> str:
        """The full state: every pod as it is now, and every known pod the list lacks
        (it vanished while no watch ran) reported gone."""
        self.relists += 1
        items, rv = await self._api("list pods", lambda: self._list(KPod, selector))
        seen = set()
        for obj in items:
            seen.add(obj.metadata.name)
            await self._on_pod(obj.to_dict(), deleted=False)
        for rec in list(self._by_name.values()):
            if rec.uid is not None and rec.name not in seen:
                await self._on_pod({"metadata": {"name": rec.name, "uid": rec.uid}}, deleted=True)
        return rv or "0"

    async def _on_pod(self, d: dict[str, Any], deleted: bool) -> None:
        meta = d.get("metadata") or {}
        rec = self._by_name.get(str(meta.get("name")))
        if rec is None or (rec.uid is not None and meta.get("uid") not in (None, rec.uid)):
            return  # not ours, or an earlier pod of the same name
        rec.ip = (d.get("status") or {}).get("podIP") or rec.ip
        if deleted:
            rec.gone.set()
        if rec.stopping:
            return  # asked for: stop_pod reports it once it is gone
        failure = pod_failure(d, deleted)
        if not rec.up.done():
            waiting = _waiting(d)
            pulls = [str(w.get("reason")) for w in waiting if w.get("reason") in _PULLING]
            rec.pulling = pulls[0] if pulls else None
            hopeless = _hopeless(waiting)
            if hopeless is not None:
                rec.up.set_exception(PodStartError(f"pod {rec.id}: {hopeless[0]}", hopeless[1]))
            elif failure is not None:
                why = f"pod {rec.id}: ended before its agent dialed in ({failure})"
                rec.up.set_exception(PodStartError(why))
            return
        if failure is None:
            return
        # it ended without being asked: its job ends with it, with the same typed reason
        rec.stopping = True
        rec.link.hang_up()
        self._forget(rec)
        if rec.job is not None:
            await self._events.put(JobExited(rec.job, rec.id, 137, failure))
        await self._events.put(PodDown(rec.id, failure))
        if not deleted:
            with contextlib.suppress(httpx2.HTTPError):
                await self.client.delete(KPod, rec.name)  # a finished Pod object is clutter

    # --- the gateway -----------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One agent dialing in: its auth line, its hello, then its events."""
        self._conns.add(writer)
        try:
            auth = await asyncio.wait_for(protocol.read_message(reader), 10.0)
            rec = self._pods.get(str((auth or {}).get("pod")))
            token = str((auth or {}).get("token", ""))
            if (
                auth is None
                or auth.get("ev") != "auth"
                or rec is None
                or rec.stopping
                or not hmac.compare_digest(token.encode(), rec.token.encode())
            ):
                return  # not a pod of ours, or not its token: hang up, say nothing
            hello = await asyncio.wait_for(protocol.read_message(reader), 10.0)
            if hello is None or hello.get("ev") != "hello":
                return
            rec.link.attach(writer)  # the newest connection of a pod wins (its agent redialed)
            rec.job = hello.get("job")
            if not rec.up.done():
                rec.up.set_result(None)
            while (msg := await protocol.read_message(reader)) is not None:
                await self._on_message(rec, msg)
        except (ConnectionError, TimeoutError, protocol.ProtocolError, asyncio.IncompleteReadError):
            pass
        finally:
            self._conns.discard(writer)
            writer.close()
            for rec in self._pods.values():
                rec.link.detach(writer)  # disconnected, not dead: the agent redials

    async def _on_message(self, rec: _Pod, msg: protocol.Message) -> None:
        ev = msg.get("ev")
        if ev == "output":
            data = protocol.unpack_bytes(msg["data"])
            await self._events.put(JobOutput(msg["job"], rec.id, msg["stream"], data))
        elif ev == "running":
            await self._events.put(JobRunning(msg["job"], rec.id))
        elif ev == "exited":
            if rec.job == msg["job"]:
                rec.job = None
            failure = Failure(msg["failure"]) if msg.get("failure") else None
            await self._events.put(exited_event(msg, rec.id, failure))
        elif ev == "error" and msg.get("job"):
            if rec.job == msg["job"]:
                rec.job = None
            text = f"stoker: job could not be bound: {msg.get('message')}\n".encode()
            await self._events.put(JobOutput(msg["job"], rec.id, "stderr", text))
            await self._events.put(JobExited(msg["job"], rec.id, 1, Failure.USER_ERROR))
        else:  # a reply (or a refusal, an error without a job) to whoever waits
            rec.link.answer(msg)
