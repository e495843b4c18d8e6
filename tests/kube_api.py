"""A Kubernetes API server in memory, behind the real lightkube client (``httpx2.MockTransport``).

It answers what an API server answers, as JSON bodies: PodList/NodeList with a list
resourceVersion, created objects with uid, resourceVersion and creationTimestamp, ``Status``
objects for errors (409 AlreadyExists, 404 NotFound, 422 Invalid with causes from the real
schema, 429 with Retry-After, 500), and watches as newline-delimited JSON events from a
resourceVersion, with an in-stream ERROR event (410 Expired) when that version is compacted
away, exactly as kube-apiserver does. Deleting a Pod deletes the Secrets it owns (the
garbage collector's job). A :class:`Kubelet` runs each scheduled Pod's container as a real
agent process on this host, so the agent really dials the runtime's gateway.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx2
import kubernetes_validate

import stoker

KINDS = {
    "pods": ("Pod", "PodList"),
    "secrets": ("Secret", "SecretList"),
    "nodes": ("Node", "NodeList"),
}


def status(code: int, reason: str, message: str, **details: Any) -> dict[str, Any]:
    """A ``metav1.Status`` as the API server sends it."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


def _selects(selector: str, labels: dict[str, str]) -> bool:
    for term in filter(None, selector.split(",")):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k) == v:
                return False
        elif "=" in term:
            k, v = term.split("=", 1)
            if labels.get(k) != v.lstrip("="):
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


@dataclass
class Fault:
    method: str
    path: str  # a substring of the request path
    code: int
    times: int = 1
    retry_after: float | None = None


@dataclass
class FakeApi:
    """The objects, their history (for watches) and the faults to inject."""

    namespace: str = "stoker"
    rv: int = 100
    compacted: int = 0  # watches from a version below this get 410 Gone
    objects: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    history: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    requests: list[tuple[str, str, str]] = field(default_factory=list)  # method, path, query
    hooks: list[Callable[[str, dict[str, Any]], None]] = field(default_factory=list)
    # a kubelet running the pod: True if it takes a graceful deletion over (it removes the
    # pod itself once its container is gone); without one a pod goes at once
    terminator: Callable[[str, int], bool] | None = None
    validate: bool = True
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _watch_gen: int = 0

    # --- the test's hands ----------------------------------------------------

    def transport(self) -> httpx2.MockTransport:
        return httpx2.MockTransport(self.handle)

    def fail(self, method: str, path: str, code: int, times: int = 1, **kw: Any) -> None:
        self.faults.append(Fault(method, path, code, times, **kw))

    def add_node(self, name: str, model: str, gpus: int, **labels: str) -> None:
        self._store(
            "nodes",
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {
                        "kubernetes.io/hostname": name,
                        "nvidia.com/gpu.product": model,
                        **labels,
                    },
                },
                "spec": {},
                "status": {
                    "allocatable": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": str(gpus)},
                    "capacity": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": str(gpus)},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            },
            "ADDED",
        )

    def pods(self) -> dict[str, dict[str, Any]]:
        return {n: o for (k, n), o in self.objects.items() if k == "pods"}

    def secrets(self) -> dict[str, dict[str, Any]]:
        return {n: o for (k, n), o in self.objects.items() if k == "secrets"}

    def set_status(self, name: str, status_: dict[str, Any]) -> None:
        """What a kubelet or the scheduler writes into a pod's status."""
        obj = copy.deepcopy(self.objects[("pods", name)])
        obj["status"] = status_
        self._store("pods", obj, "MODIFIED")

    def remove(self, kind: str, name: str) -> None:
        obj = self.objects.pop((kind, name))
        self._bump(obj)
        self._emit("DELETED", kind, obj)
        if kind == "pods":  # the garbage collector: what the pod owned goes with it
            uid = obj["metadata"]["uid"]
            for (k, n), o in list(self.objects.items()):
                refs = o["metadata"].get("ownerReferences") or []
                if any(r.get("uid") == uid for r in refs):
                    self.remove(k, n)

    def compact(self) -> None:
        """Forget the history: a watch resuming from an older version gets 410 Gone."""
        self.compacted = self.rv
        self.history.clear()

    def drop_watches(self) -> None:
        """End every open watch stream (what a server timeout or an apiserver restart does)."""
        self._watch_gen += 1
        self._wake()

    # --- the server ----------------------------------------------------------

    def _bump(self, obj: dict[str, Any]) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)

    def _store(self, kind: str, obj: dict[str, Any], etype: str) -> dict[str, Any]:
        meta = obj["metadata"]
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", "2026-12-03T08:00:00Z")
        self._bump(obj)
        self.objects[(kind, meta["name"])] = obj
        self._emit(etype, kind, obj)
        return obj

    def _emit(self, etype: str, kind: str, obj: dict[str, Any]) -> None:
        self.history.append((self.rv, kind, {"type": etype, "object": copy.deepcopy(obj)}))
        if kind == "pods":
            for hook in list(self.hooks):
                hook(etype, obj)
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    @staticmethod
    def _json(code: int, body: dict[str, Any], **headers: str) -> httpx2.Response:
        return httpx2.Response(
            code,
            content=json.dumps(body).encode(),
            headers={"content-type": "application/json", **headers},
        )

    async def handle(self, request: httpx2.Request) -> httpx2.Response:
        method, path = request.method, request.url.path
        query = {k: v[0] for k, v in parse_qs(request.url.query.decode()).items()}
        self.requests.append((method, path, request.url.query.decode()))
        for fault in self.faults:
            if fault.method == method and fault.path in path and fault.times > 0:
                fault.times -= 1
                headers = (
                    {} if fault.retry_after is None else {"Retry-After": f"{fault.retry_after:g}"}
                )
                reason = {429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable"}
                return self._json(
                    fault.code,
                    status(fault.code, reason.get(fault.code, "Unknown"), f"injected {fault.code}"),
                    **headers,
                )
        parts = path.strip("/").split("/")  # api v1 [namespaces ns] kind [name]
        if parts[2] == "namespaces":
            kind, name = parts[4], (parts[5] if len(parts) > 5 else None)
        else:
            kind, name = parts[2], (parts[3] if len(parts) > 3 else None)
        if name is None and method == "GET":
            if query.get("watch") == "true":
                return self._watch(kind, query)
            return self._list(kind, query)
        if method == "POST":
            return self._create(kind, json.loads(request.content))
        key = (kind, str(name))
        if key not in self.objects:
            return self._json(404, status(404, "NotFound", f'{kind} "{name}" not found'))
        if method == "GET":
            return self._json(200, self.objects[key])
        if method == "DELETE":
            obj = self.objects[key]
            grace = int(query.get("gracePeriodSeconds", "30"))
            graceful = kind == "pods" and grace > 0 and self.terminator is not None
            if graceful and self.terminator(str(name), grace):  # type: ignore[misc]
                # Terminating: the kubelet sends SIGTERM, SIGKILL after the grace, and the
                # pod object goes once its containers have
                if not obj["metadata"].get("deletionTimestamp"):
                    obj = copy.deepcopy(obj)
                    obj["metadata"]["deletionTimestamp"] = "2026-12-03T08:00:01Z"
                    obj["metadata"]["deletionGracePeriodSeconds"] = grace
                    self._store(kind, obj, "MODIFIED")
                return self._json(200, obj)
            self.remove(kind, str(name))
            return self._json(200, obj)
        if method == "PATCH":
            obj = copy.deepcopy(self.objects[key])
            _merge(obj, json.loads(request.content))
            return self._json(200, self._store(kind, obj, "MODIFIED"))
        if method == "PUT":
            body = json.loads(request.content)
            body["metadata"]["uid"] = self.objects[key]["metadata"]["uid"]
            return self._json(200, self._store(kind, body, "MODIFIED"))
        return self._json(405, status(405, "MethodNotAllowed", method))

    def _create(self, kind: str, body: dict[str, Any]) -> httpx2.Response:
        name = body["metadata"]["name"]
        kind_name = KINDS[kind][0]
        if (kind, name) in self.objects:
            return self._json(
                409,
                status(
                    409, "AlreadyExists", f'{kind} "{name}" already exists', name=name, kind=kind
                ),
            )
        if self.validate:
            try:
                kubernetes_validate.validate(body, "1.30", strict=True)
            except kubernetes_validate.ValidationError as exc:
                where = ".".join(str(p) for p in exc.path)
                return self._json(
                    422,
                    status(
                        422,
                        "Invalid",
                        f'{kind_name} "{name}" is invalid: {where}: {exc.message}',
                        name=name,
                        kind=kind_name,
                        causes=[
                            {"reason": "FieldValueInvalid", "message": exc.message, "field": where}
                        ],
                    ),
                )
        obj = copy.deepcopy(body)
        if kind == "pods":
            obj["status"] = {"phase": "Pending", "qosClass": "Burstable"}
        return self._json(201, self._store(kind, obj, "ADDED"))

    def _list(self, kind: str, query: dict[str, str]) -> httpx2.Response:
        sel = query.get("labelSelector", "")
        items = [
            o
            for (k, _), o in sorted(self.objects.items())
            if k == kind and _selects(sel, o["metadata"].get("labels") or {})
        ]
        body = {
            "kind": KINDS[kind][1],
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(self.rv)},
            "items": items,
        }
        return self._json(200, body)

    def _watch(self, kind: str, query: dict[str, str]) -> httpx2.Response:
        since = int(query.get("resourceVersion") or self.rv)
        sel = query.get("labelSelector", "")
        gen = self._watch_gen

        async def stream() -> AsyncIterator[bytes]:
            if since < self.compacted:
                err = status(
                    410, "Expired", f"too old resource version: {since} ({self.compacted})"
                )
                yield json.dumps({"type": "ERROR", "object": err}).encode() + b"\n"
                return
            sent = since
            while gen == self._watch_gen:
                for rv, k, ev in list(self.history):
                    if rv > sent and k == kind:
                        sent = rv
                        if _selects(sel, ev["object"]["metadata"].get("labels") or {}):
                            yield json.dumps(ev).encode() + b"\n"
                changed = self._changed
                await changed.wait()

        return httpx2.Response(200, content=stream(), headers={"content-type": "application/json"})


def _merge(obj: dict[str, Any], patch: dict[str, Any]) -> None:
    """RFC 7386 JSON merge patch (null deletes)."""
    for k, v in patch.items():
        if v is None:
            obj.pop(k, None)
        elif isinstance(v, dict) and isinstance(obj.get(k), dict):
            _merge(obj[k], v)
        else:
            obj[k] = copy.deepcopy(v)


class Kubelet:
    """Runs each Pod's container as a real agent process on this host, the way a node would:
    it waits for the Pod's Secret (the env refers to it), starts the container's command
    with the Pod's env, and writes Running, then the container's end, into the Pod's status.
    ``gateway`` is where the runtime's gateway really listens (the Pod names the Service).
    A PersistentVolumeClaim is a directory under ``claims`` (one per claim name, shared by
    every pod, as a ReadWriteMany volume on any node): a mount of it (its subPath made where
    missing, as a kubelet does) is that directory, and the command's paths under the mount
    path are rewritten to it (a process here has no mount namespace of its own)."""

    def __init__(self, api: FakeApi, root: Path, gateway: Callable[[], str]) -> None:
        self.api = api
        self.root = root
        self.claims = root.parent / "claims"
        self.gateway = gateway
        self.procs: dict[str, asyncio.subprocess.Process] = {}
        self.oom: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.auto_start = True
        self.signals: dict[str, list[str]] = {}  # pod -> what it was sent, in order
        self.stuck: set[str] = set()  # pods whose node stopped answering: never removed
        self._terminating: set[str] = set()
        self._ips = iter(range(7, 255))  # each pod its own IP, as a CNI gives them
        api.hooks.append(self._on_change)
        api.terminator = self.terminate

    def _on_change(self, etype: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if etype == "ADDED" and self.auto_start:
            self._spawn(self.run(name))
        elif etype == "DELETED" and name in self.procs:
            proc = self.procs.pop(name)
            if proc.returncode is None:
                # the whole container goes, as on a node: the agent, its zygote and its jobs
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            self._spawn(self._reap(proc))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _reap(self, proc: asyncio.subprocess.Process) -> None:
        await proc.wait()

    def terminate(self, name: str, grace: int) -> bool:
        """A graceful delete: SIGTERM to the container's first process, SIGKILL to all of
        it once ``grace`` has passed, then the pod object goes (never, while ``stuck``)."""
        proc = self.procs.get(name)
        if proc is None or proc.returncode is not None:
            return False  # nothing runs it: the API server deletes it at once
        if name not in self._terminating:
            self._terminating.add(name)
            self._spawn(self._terminate(name, proc, grace))
        return True

    async def _terminate(self, name: str, proc: asyncio.subprocess.Process, grace: int) -> None:
        self.signals.setdefault(name, []).append("SIGTERM")
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), grace)
        except TimeoutError:
            self.signals[name].append("SIGKILL")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
        while name in self.stuck:
            await asyncio.sleep(0.05)
        self._terminating.discard(name)
        if name in self.api.pods():
            self.api.remove("pods", name)

    def _env(self, pod: dict[str, Any], workspace: Path) -> dict[str, str]:
        env = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8"}
        for var in pod["spec"]["containers"][0].get("env") or []:
            if "value" in var:
                env[var["name"]] = var["value"]
            else:
                ref = var["valueFrom"]["secretKeyRef"]
                secret = self.api.secrets()[ref["name"]]
                env[var["name"]] = base64.b64decode(secret["data"][ref["key"]]).decode()
        env["HOME"] = str(workspace)
        # the stoker under test, not whichever one the interpreter has installed
        env["PYTHONPATH"] = str(Path(stoker.__file__).resolve().parents[1])
        env["TMPDIR"] = str(workspace.parent / f"{workspace.name}.tmp")  # the pod's own /tmp
        Path(env["TMPDIR"]).mkdir(exist_ok=True)
        return env

    async def run(self, name: str) -> None:
        """Start the Pod's container once its Secret exists; report its end."""
        pod = self.api.pods().get(name)
        if pod is None or "command" not in (pod["spec"].get("containers") or [{}])[0]:
            return  # not a stoker pod: nothing this kubelet knows how to run
        container = pod["spec"]["containers"][0]
        needs = [
            v["valueFrom"]["secretKeyRef"]["name"]
            for v in container.get("env") or []
            if "valueFrom" in v
        ]
        while any(n not in self.api.secrets() for n in needs):  # what a kubelet waits for too
            if name not in self.api.pods():
                return
            await asyncio.sleep(0.01)
        workspace = self.root / name
        workspace.mkdir(parents=True, exist_ok=True)
        command = list(container["command"])
        command[0] = sys.executable  # "python" in the image
        if "--dial" in command:  # an agent (a checkpoint drop pod dials nothing)
            command[command.index("--dial") + 1] = self.gateway()
            command[command.index("--workspace") + 1] = str(workspace)
        for at, host in self._claim_mounts(pod).items():
            command = [
                host + c[len(at) :] if c == at or c.startswith(at + "/") else c for c in command
            ]
        proc = await asyncio.create_subprocess_exec(
            *command,
            env=self._env(pod, workspace),
            cwd=workspace,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=open(workspace.parent / f"{name}.log", "ab"),  # noqa: SIM115
            start_new_session=True,
        )
        self.procs[name] = proc
        running = {
            "phase": "Running",
            "podIP": f"10.0.0.{next(self._ips)}",
            "containerStatuses": [
                {**self._image(pod), "ready": True, "restartCount": 0, "state": {"running": {}}}
            ],
        }
        if name in self.api.pods():
            self.api.set_status(name, running)
        code = await proc.wait()
        if self.procs.get(name) is not proc or name not in self.api.pods():
            return  # deleted: the API server already said so
        if name in self._terminating:
            return  # deleted gracefully: the pod object goes next
        reason = "OOMKilled" if name in self.oom else ("Completed" if code == 0 else "Error")
        exit_code = 137 if code < 0 else code
        self.api.set_status(
            name,
            {
                "phase": "Succeeded" if code == 0 else "Failed",
                "containerStatuses": [
                    {
                        **self._image(pod),
                        "ready": False,
                        "restartCount": 0,
                        "state": {"terminated": {"exitCode": exit_code, "reason": reason}},
                    }
                ],
            },
        )

    def _claim_mounts(self, pod: dict[str, Any]) -> dict[str, str]:
        """Mount path -> host directory of each PersistentVolumeClaim the container mounts."""
        claims = {
            v["name"]: v["persistentVolumeClaim"]["claimName"]
            for v in pod["spec"].get("volumes") or []
            if "persistentVolumeClaim" in v
        }
        mounts = {}
        for m in pod["spec"]["containers"][0].get("volumeMounts") or []:
            if m["name"] in claims:
                host = self.claims / claims[m["name"]] / m.get("subPath", "")
                host.mkdir(parents=True, exist_ok=True)
                mounts[m["mountPath"]] = str(host)
        return mounts

    @staticmethod
    def _image(pod: dict[str, Any]) -> dict[str, str]:
        image = pod["spec"]["containers"][0]["image"]
        return {"name": "agent", "image": image, "imageID": f"{image}@sha256:{'0' * 64}"}

    def kill(self, name: str, oom: bool = False) -> None:
        """The container dies on the node (OOM-killed, with ``oom``)."""
        if oom:
            self.oom.add(name)
        os.killpg(self.procs[name].pid, signal.SIGKILL)

    async def close(self) -> None:
        """Kill every container this kubelet started and wait for each."""
        for proc in self.procs.values():
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
        for proc in self.procs.values():
            await proc.wait()
        for task in list(self._tasks):
            task.cancel()
        self.procs.clear()


def procs_under(root: Path, settle_s: float = 5.0) -> list[int]:
    """Processes whose command line names ``root`` (what a test's kubelet started there),
    after giving processes already SIGKILLed up to ``settle_s`` to be gone."""
    deadline = time.monotonic() + settle_s
    while True:
        found = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                with contextlib.suppress(OSError):
                    cmd = Path(f"/proc/{name}/cmdline").read_bytes()
                    if str(root).encode() in cmd and b"stoker.agent" in cmd:
                        found.append(int(name))
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def kube_client(api: FakeApi) -> Any:
    """The real lightkube client, configured as from a kubeconfig, talking to ``api``."""
    from lightkube import AsyncClient, KubeConfig

    config = KubeConfig.from_dict(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": "https://kube.test"}}],
            "users": [{"name": "broker", "user": {"token": "sa-token"}}],
            "contexts": [
                {
                    "name": "fake",
                    "context": {"cluster": "fake", "user": "broker", "namespace": api.namespace},
                }
            ],
            "current-context": "fake",
        }
    )
    return AsyncClient(config, namespace=api.namespace, transport=api.transport())
