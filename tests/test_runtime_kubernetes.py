"""The Kubernetes runtime against the in-memory API server of ``kube_api`` (real lightkube
client, real JSON bodies, real agent processes dialing the gateway): what it creates, how
it reads the cluster, and every error an API server answers."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import io
import json
import os
import socket
import tarfile
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kube_api import FakeApi, Kubelet, kube_client, procs_under
from runtime_rig import tiny_wheel
from stoker.agent import protocol
from stoker.core.model import Failure, Profile, StartFault
from stoker.runtime.base import (
    BindRefused,
    JobBinding,
    JobExited,
    JobOutput,
    JobRunning,
    NodeDown,
    NodeUp,
    PodDown,
    PodUp,
    RuntimeEvent,
    RuntimeProfile,
    StartFailed,
    Topology,
)
from stoker.runtime.code import CodeNotFound
from stoker.runtime.kubernetes.pods import drop_pods
from stoker.runtime.kubernetes.runtime import (
    CODE_CHUNK,
    Backoff,
    KubernetesRuntime,
    KubeRuntimeError,
    NotCarried,
    PodBusy,
    PodStartError,
    PodStopTimeout,
)
from stoker.runtime.kubernetes.settings import (
    LABEL_LEADER,
    LABEL_ROLE,
    LABEL_TENANT,
    KubeSettings,
    object_name,
    tenant_hash,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

H100 = "NVIDIA-H100-80GB-HBM3"
CORE = Profile("gpu", gpu_model=H100, share=0.9, standby_share=0.1, cpu=2, memory_gb=8)
GPU = RuntimeProfile("gpu", image="registry.test/stoker:1")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Kube:
    api: FakeApi
    kubelet: Kubelet
    port: int
    runtimes: list[KubernetesRuntime] = field(default_factory=list)
    seen: list[RuntimeEvent] = field(default_factory=list)

    def runtime(self, **kw: Any) -> KubernetesRuntime:
        settings = KubeSettings(
            start_timeout_s=kw.pop("start_timeout_s", 30),
            stop_timeout_s=kw.pop("stop_timeout_s", 10),
            termination_grace_s=kw.pop("termination_grace_s", 5),
            **kw.pop("settings", {}),
        )
        rt = KubernetesRuntime(
            settings,
            kw.pop("profiles", [CORE]),
            client=kube_client(self.api),
            listen=("127.0.0.1", self.port),
            backoff=Backoff(base_s=0.01, cap_s=0.05),
            **kw,
        )
        self.runtimes.append(rt)
        return rt

    async def until(self, rt: KubernetesRuntime, kind: type, timeout: float = 30.0) -> Any:
        events = self._iters.setdefault(id(rt), rt.events())
        while True:
            ev = await asyncio.wait_for(anext(events), timeout)
            self.seen.append(ev)
            if isinstance(ev, kind):
                return ev

    async def collect(self, rt: KubernetesRuntime, job: str) -> tuple[bytes, JobExited]:
        out = []
        while True:
            ev = await self.until(rt, JobRunning | JobOutput | JobExited)
            if isinstance(ev, JobOutput) and ev.job == job and ev.stream == "stdout":
                out.append(ev.data)
            elif isinstance(ev, JobExited) and ev.job == job:
                return b"".join(out), ev

    _iters: dict[int, AsyncIterator[RuntimeEvent]] = field(default_factory=dict)


@pytest.fixture
async def kube(tmp_path: Path) -> AsyncIterator[Kube]:
    api = FakeApi()
    api.add_node("gpu-a", H100, 2, **{"nvidia.com/gpu.memory": "81559"})
    port = _free_port()
    kubelet = Kubelet(api, tmp_path / "node", lambda: f"127.0.0.1:{port}")
    k = Kube(api, kubelet, port)
    yield k
    for rt in k.runtimes:
        if rt._server is not None:
            await rt.stop_all()
            await rt.close()
    await kubelet.close()
    assert procs_under(tmp_path) == []  # no agent outlives its test


async def _up(k: Kube, rt: KubernetesRuntime, pod: str, standby: bool = False, **kw: Any) -> None:
    await rt.start_pod(pod, GPU, ("gpu-a/0",), standby, **kw)
    assert await k.until(rt, PodUp) == PodUp(pod)


async def test_nodes_and_gpus_come_from_the_cluster(kube: Kube) -> None:
    kube.api.add_node("gpu-b", "NVIDIA-L4", 8, **{"nvidia.com/gpu.replicas": "4"})  # 2 cards
    kube.api.add_node("cpu-only", "none", 0)
    kube.api.add_node("cordoned", H100, 8)
    cordoned = kube.api.objects[("nodes", "cordoned")]
    cordoned["spec"]["unschedulable"] = True
    rt = kube.runtime()
    nodes = await rt.discover()
    assert [(n.name, n.gpu_model, [g.id for g in n.gpus]) for n in nodes] == [
        ("gpu-a", H100, ["gpu-a/0", "gpu-a/1"]),
        ("gpu-b", "NVIDIA-L4", ["gpu-b/0", "gpu-b/1"]),
    ]
    # the CPU slots CPU-only pods take: the node's allocatable CPUs and memory (GiB)
    assert (nodes[0].cpu, nodes[0].memory_gb) == (32.0, 256.0)
    assert nodes[0].cpu == 32.0 and sorted(rt.devices) == [
        "gpu-a/0",
        "gpu-a/1",
        "gpu-b/0",
        "gpu-b/1",
    ]
    # the broker's service-account token went with every request (the real client's auth)
    assert kube.api.requests and kube.api.requests[0][1] == "/api/v1/nodes"


async def test_pod_secret_and_labels_as_created(kube: Kube) -> None:
    rt = kube.runtime()
    await rt.discover()
    await _up(kube, rt, "pod-1", job_class="hp")
    pod = kube.api.pods()[object_name("pod-1")]
    labels = pod["metadata"]["labels"]
    assert labels["stoker.dev/pod"] == "pod-1" and labels[LABEL_ROLE] == "active"
    assert labels["stoker.dev/class"] == "hp" and pod["spec"]["priorityClassName"] == "stoker-hp"
    assert pod["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.product": H100,
        "kubernetes.io/hostname": "gpu-a",
    }
    c = pod["spec"]["containers"][0]
    assert c["image"] == "registry.test/stoker:1"
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    # the token: in a Secret owned by the Pod, never in the Pod spec itself
    secret = kube.api.secrets()[f"{object_name('pod-1')}-token"]
    assert secret["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
    token = base64.b64decode(secret["data"]["token"]).decode()
    assert token not in json.dumps(pod)
    # a job of the pod's tenant labels the pod with the tenant's hash, never the name
    await rt.bind("pod-1", JobBinding(job="t", argv=("true",), tenant="acme"))
    await kube.collect(rt, "t")
    labels = kube.api.pods()[object_name("pod-1")]["metadata"]["labels"]
    assert labels[LABEL_TENANT] == tenant_hash("acme") and "acme" not in json.dumps(labels)
    await rt.stop_pod("pod-1")
    assert await kube.until(rt, PodDown) == PodDown("pod-1")
    assert kube.api.pods() == {} and kube.api.secrets() == {}  # the Secret went with its Pod


async def test_the_token_never_reaches_a_job(kube: Kube) -> None:
    rt = kube.runtime()
    await rt.discover()
    await _up(kube, rt, "pod-t")
    secret = kube.api.secrets()[f"{object_name('pod-t')}-token"]
    token = base64.b64decode(secret["data"]["token"])
    # a hostile job looks everywhere the token was: its env, its memory's env block (a forked
    # job shares the agent's), and the agent's /proc environ
    probe = (
        "import os;"
        "print(os.environ.get('STOKER_AGENT_TOKEN'));"
        "print(open('/proc/self/environ','rb').read());"
        "print(open(f'/proc/{os.getppid()}/environ','rb').read())"
    )
    for job, argv in (
        ("py", ("python", "-c", probe)),
        ("sh", ("sh", "-c", "env; cat /proc/$PPID/environ")),
    ):
        await rt.bind("pod-t", JobBinding(job=job, argv=argv))
        out, exited = await kube.collect(rt, job)
        assert token not in out, job
        assert exited.exit_code in (0, 1), out
    assert b"STOKER_POD" in out  # the probe did read environments


async def test_a_wrong_token_is_refused(kube: Kube) -> None:
    rt = kube.runtime(start_timeout_s=3)
    await rt.discover()
    kube.kubelet.auto_start = False  # the pod never runs: an impostor dials in its name
    start = asyncio.ensure_future(rt.start_pod("pod-x", GPU, ("gpu-a/0",), False))
    while object_name("pod-x") not in kube.api.pods():
        await asyncio.sleep(0.01)
    reader, writer = await asyncio.open_connection("127.0.0.1", kube.port)
    writer.write(protocol.encode({"ev": "auth", "pod": "pod-x", "token": "guess"}))
    writer.write(protocol.encode({"ev": "hello", "pod": "pod-x", "job": None}))
    await writer.drain()
    assert await reader.read() == b""  # hung up on, nothing said
    writer.close()
    with pytest.raises(PodStartError, match="no agent"):
        await start
    failed = await kube.until(rt, StartFailed)
    assert (failed.pod, failed.fault) == ("pod-x", StartFault.START_TIMED_OUT)
    assert kube.api.pods() == {}  # the pod that never came up was deleted


@pytest.mark.parametrize(
    ("reason", "timeout_s"),
    [("InvalidImageName", 30), ("ErrImageNeverPull", 30), ("ImagePullBackOff", 1)],
)
async def test_a_pod_whose_image_cannot_be_pulled_fails_image_missing(
    kube: Kube, reason: str, timeout_s: float
) -> None:
    """An image the kubelet can never pull fails the start at once; one it keeps backing
    off on fails it at the start timeout: either way the fault is the image's."""
    rt = kube.runtime(start_timeout_s=timeout_s)
    await rt.discover()
    kube.kubelet.auto_start = False
    start = asyncio.ensure_future(rt.start_pod("pod-i", GPU, ("gpu-a/0",), False))
    while object_name("pod-i") not in kube.api.pods():
        await asyncio.sleep(0.01)
    waiting = {"reason": reason, "message": "registry.test/stoker:1"}
    container = {
        "name": "agent",
        "image": "registry.test/stoker:1",
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "state": {"waiting": waiting},
    }
    status = {"phase": "Pending", "containerStatuses": [container]}
    kube.api.set_status(object_name("pod-i"), status)
    with pytest.raises(PodStartError) as err:
        await start
    assert err.value.fault is StartFault.IMAGE_MISSING
    failed = await kube.until(rt, StartFailed)
    assert (failed.pod, failed.fault) == ("pod-i", StartFault.IMAGE_MISSING)
    assert reason in failed.detail


async def test_standby_pod_then_promotion(kube: Kube) -> None:
    rt = kube.runtime()
    await rt.discover()
    await _up(kube, rt, "pod-s", standby=True)
    pod = kube.api.pods()[object_name("pod-s")]
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["STOKER_STANDBY"] == "1" and env["CUDA_VISIBLE_DEVICES"] == ""
    assert pod["metadata"]["labels"][LABEL_ROLE] == "standby"
    assert (await rt.ping("pod-s"))["standby"] is True
    with pytest.raises(PodBusy):
        await rt.bind("pod-s", JobBinding(job="early", argv=("true",)))
    await rt.promote("pod-s")
    assert await kube.until(rt, PodUp) == PodUp("pod-s")
    assert kube.api.pods()[object_name("pod-s")]["metadata"]["labels"][LABEL_ROLE] == "active"
    await rt.bind("pod-s", JobBinding(job="cuda", argv=("sh", "-c", "echo $CUDA_VISIBLE_DEVICES")))
    out, _ = await kube.collect(rt, "cuda")
    assert out == b"0\n"  # the container's one device, once promoted


async def test_code_is_sent_to_the_pod(kube: Kube, tmp_path: Path) -> None:
    rt = kube.runtime(code_dir=tmp_path / "code")
    await rt.discover()
    await _up(kube, rt, "pod-c")
    # an archive bigger than one chunk, so it travels in several messages
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in (
            ("main.py", b"import os; print(len(open('blob','rb').read()))\n"),
            ("blob", os.urandom(CODE_CHUNK + 1000)),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    digest = await rt.put_code(buf.getvalue())
    for job in ("c1", "c2"):  # the second bind reuses what the pod already has
        await rt.bind("pod-c", JobBinding(job=job, argv=("python", "main.py"), code_digest=digest))
        out, exited = await kube.collect(rt, job)
        assert out == f"{CODE_CHUNK + 1000}\n".encode() and exited.exit_code == 0
    with pytest.raises(CodeNotFound):
        await rt.bind("pod-c", JobBinding(job="c3", argv=("true",), code_digest="ab" * 32))
    with pytest.raises(NotCarried, match="code_dir"):
        await kube.runtime().put_code(buf.getvalue())


async def test_deps_are_installed_in_the_pod_by_its_agent(kube: Kube, tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    name = f"stokertiny{uuid.uuid4().hex[:6]}"
    tiny_wheel(wheels, name, "from-overlay")
    # the pods' index: these wheels only (uv reads it from the pod's environment)
    rt = kube.runtime(settings={"deps_index_url": "", "deps_find_links": str(wheels)})
    await rt.discover()
    await _up(kube, rt, "pod-d")
    env = {
        e["name"]: e.get("value")
        for e in kube.api.pods()[object_name("pod-d")]["spec"]["containers"][0]["env"]
    }
    assert env["STOKER_DEPS_INDEX_URL"] == "" and env["STOKER_DEPS_FIND_LINKS"] == str(wheels)
    code = f"import {name}; print({name}.VALUE)"
    for job, argv in (("d1", ("python", "-c", code)), ("d2", ("sh", "-c", f"python -c '{code}'"))):
        await rt.bind("pod-d", JobBinding(job=job, argv=argv, deps=(name,)))
        out, exited = await kube.collect(rt, job)
        assert out == b"from-overlay\n" and exited.exit_code == 0, job
    # built once, inside the pod (its own /tmp), and reused by the second job
    overlays = tmp_path / "node" / f"{object_name('pod-d')}.tmp" / "stoker-deps"
    assert len([p for p in overlays.iterdir() if not p.name.startswith(".")]) == 1
    await rt.bind("pod-d", JobBinding(job="plain", argv=("python", "-c", code)))
    assert (await kube.collect(rt, "plain"))[1].failure is Failure.USER_ERROR  # not for others
    # a dep no index has: the job's own error, typed, and said on its stderr
    await rt.bind("pod-d", JobBinding(job="missing", argv=("true",), deps=("nosuchpkg-stoker",)))
    err = b""
    while True:
        ev = await kube.until(rt, JobOutput | JobExited)
        if isinstance(ev, JobOutput):
            err += ev.data
        elif ev.job == "missing":
            break
    assert ev.failure is Failure.USER_ERROR and b"deps" in err, err
    # an installer option is never a dep: refused before it reaches the pod
    with pytest.raises(BindRefused, match="option or a path"):
        await rt.bind("pod-d", JobBinding(job="opt", argv=("true",), deps=("-r/etc/passwd",)))
    assert not (tmp_path / "node" / "stoker-deps").exists()


async def test_vanished_pods_are_typed_failures(kube: Kube) -> None:
    rt = kube.runtime()
    await rt.discover()
    # OOM-killed container
    await _up(kube, rt, "pod-o")
    await rt.bind("pod-o", JobBinding(job="o", argv=("sleep", "60")))
    await kube.until(rt, JobRunning)
    kube.kubelet.kill(object_name("pod-o"), oom=True)
    assert (await kube.until(rt, JobExited)).failure is Failure.OUT_OF_MEMORY
    assert await kube.until(rt, PodDown) == PodDown("pod-o", Failure.OUT_OF_MEMORY)
    # evicted: the DisruptionTarget condition, then the pod is deleted
    await _up(kube, rt, "pod-e")
    name = object_name("pod-e")
    status = dict(kube.api.pods()[name]["status"])
    status["conditions"] = [
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    ]
    kube.api.set_status(name, status)
    kube.api.remove("pods", name)
    assert await kube.until(rt, PodDown) == PodDown("pod-e", Failure.PREEMPTED)
    # deleted by someone else (kubectl delete): the pod died
    await _up(kube, rt, "pod-d")
    kube.api.remove("pods", object_name("pod-d"))
    assert await kube.until(rt, PodDown) == PodDown("pod-d", Failure.POD_DIED)
    assert await rt.live_pods() == []


async def test_watch_relists_after_410_and_reports_what_vanished(kube: Kube) -> None:
    rt = kube.runtime()
    await rt.discover()
    await _up(kube, rt, "pod-w")
    await _up(kube, rt, "pod-k")
    assert rt.relists == 1
    # while the watch is cut off, pod-w goes and the server forgets the history
    kube.api.remove("pods", object_name("pod-w"))
    kube.api.compact()
    kube.api.drop_watches()
    assert await kube.until(rt, PodDown) == PodDown("pod-w", Failure.POD_DIED)
    assert rt.relists == 2
    watches = [q for m, p, q in kube.api.requests if m == "GET" and "watch=true" in q]
    assert all("resourceVersion=" in q for q in watches)  # never a watch from "now"
    # the new watch works: pod-k's end still arrives
    kube.kubelet.kill(object_name("pod-k"))
    assert await kube.until(rt, PodDown) == PodDown("pod-k", Failure.POD_DIED)


async def test_429_and_5xx_are_retried_with_backoff(kube: Kube) -> None:
    rt = kube.runtime()
    kube.api.fail("GET", "/nodes", 503)
    await rt.discover()
    kube.api.fail("POST", "/pods", 429, times=2, retry_after=0.01)
    kube.api.fail("POST", "/secrets", 500)
    await _up(kube, rt, "pod-r")
    assert rt.retries[429] == 2 and rt.retries[500] == 1 and rt.retries[503] == 1
    # a watch that fails to reconnect is retried from where it was
    kube.api.fail("GET", "/pods", 500, times=2)
    kube.api.drop_watches()
    kube.kubelet.kill(object_name("pod-r"))
    assert await kube.until(rt, PodDown) == PodDown("pod-r", Failure.POD_DIED)
    assert rt.retries[500] >= 2 and rt.relists == 1
    # past its tries a call gives up
    kube.api.fail("POST", "/pods", 500, times=10)
    with pytest.raises(PodStartError, match="500"):
        await rt.start_pod("pod-g", GPU, ("gpu-a/0",), False)


async def test_409_and_422_are_errors_at_once(kube: Kube) -> None:
    rt = kube.runtime()
    await rt.discover()
    # a stale Pod of the same name: refused (409), and that Pod is not ours to delete
    kube.api._store(
        "pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": object_name("pod-9")},
            "spec": {"containers": []},
        },
        "ADDED",
    )
    with pytest.raises(PodStartError, match="409"):
        await rt.start_pod("pod-9", GPU, ("gpu-a/0",), False)
    failed = await kube.until(rt, StartFailed)
    assert (failed.pod, failed.fault) == ("pod-9", StartFault.START_FAILED)
    assert object_name("pod-9") in kube.api.pods()
    # a stale Secret of the same name (409) is replaced by the new pod's token
    kube.api._store(
        "secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{object_name('pod-8')}-token"},
        },
        "ADDED",
    )
    await _up(kube, rt, "pod-8")
    # 422: the API server refuses the manifest; the error says why
    kube.api.fail("POST", "/pods", 422)
    with pytest.raises(PodStartError, match="422"):
        await rt.start_pod("pod-7", GPU, ("gpu-a/0",), False)
    posts = [p for m, p, _ in kube.api.requests if m == "POST" and p.endswith("/pods")]
    assert len(posts) == 3  # neither 409 nor 422 was retried


async def test_a_new_broker_readopts_pods_and_collects_garbage(kube: Kube) -> None:
    first = kube.runtime()
    await first.discover()
    await _up(kube, first, "pod-a")
    await _up(kube, first, "pod-b")
    await first.bind("pod-a", JobBinding(job="across", argv=("sh", "-c", "sleep 0.5; echo done")))
    await kube.until(first, JobRunning)
    await first.close()  # the broker goes; its pods and their jobs keep running
    await asyncio.sleep(0.8)
    # a pod of this install no broker can ever speak to (its Secret is gone): garbage
    lost = {"name": "stoker-lost", "labels": KubeSettings().base_labels("pod")}
    spec = {"containers": [{"name": "agent", "image": "registry.test/stoker:1"}]}
    kube.api._store(
        "pods", {"apiVersion": "v1", "kind": "Pod", "metadata": lost, "spec": spec}, "ADDED"
    )
    second = kube.runtime()
    await second.discover()
    assert await second.live_pods() == ["pod-a", "pod-b"]
    assert "stoker-lost" not in kube.api.pods()
    out, exited = await kube.collect(second, "across")  # held by the agent meanwhile
    assert out == b"done\n" and exited.exit_code == 0
    # pod-b is not known to the new broker's core: collected by label, Secret and all
    assert await second.collect_garbage(keep=["pod-a"]) == ["pod-b"]
    while object_name("pod-b") in kube.api.pods():  # terminating: its grace is its own
        await asyncio.sleep(0.05)
    assert sorted(kube.api.pods()) == [object_name("pod-a")]
    assert sorted(kube.api.secrets()) == [f"{object_name('pod-a')}-token"]
    await second.bind("pod-a", JobBinding(job="again", argv=("echo", "again")))
    out, _ = await kube.collect(second, "again")
    assert out == b"again\n"


async def test_the_runtime_labels_its_broker_pod_the_leader_while_it_runs(kube: Kube) -> None:
    def broker_pod(name: str, **labels: str) -> None:
        meta = {"name": name, "labels": {**KubeSettings().base_labels("broker"), **labels}}
        spec = {"containers": []}
        kube.api._store(
            "pods", {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}, "ADDED"
        )

    broker_pod("broker-0")
    broker_pod("broker-1", **{LABEL_LEADER: "true"})  # a leader deposed while cut off
    rt = kube.runtime(own_pod="broker-0")

    def leaders() -> list[str]:
        return sorted(
            n for n, o in kube.api.pods().items() if LABEL_LEADER in o["metadata"]["labels"]
        )

    await rt.start()  # what taking the lead does: the gateway listens, the label follows
    assert leaders() == ["broker-0"]
    await rt.close()  # stepping down
    assert leaders() == []
    await rt.start()  # leading again, on the same runtime
    assert leaders() == ["broker-0"]
    await rt.close()


async def test_jobs_through_the_broker_run_in_kubernetes_pods_on_the_clusters_nodes(
    kube: Kube, tmp_path: Path
) -> None:
    """The broker's HTTP API, its core and store, with this runtime: the core's cluster is
    the cluster's nodes (and follows them), every class of job becomes Pods with its
    PriorityClass and its tenant's hash, and a gang's ranks meet at rank 0's pod IP."""
    import httpx

    from stoker.broker.app import Broker
    from stoker.broker.config import BrokerConfig, BrokerProfile

    created: dict[str, dict[str, Any]] = {}  # every Pod as the runtime created it
    ips: dict[str, str] = {}

    def seen(etype: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if etype == "ADDED":
            created[name] = obj
        if (obj.get("status") or {}).get("podIP"):
            ips[name] = obj["status"]["podIP"]

    kube.api.hooks.append(seen)
    plain = BrokerProfile.simple("plain")
    volumes = {"checkpoint_volumes": {"hp": "hp-ckpt", "spot": "spot-ckpt"}}
    rt = kube.runtime(profiles=[plain.core], settings=volumes)
    cfg = BrokerConfig(data_dir=tmp_path / "data", profiles=[plain], gpu_model=H100)
    broker = Broker(cfg, rt)
    await broker.start()
    core = broker.loop.core  # type: ignore[union-attr]
    assert {n: len(x.gpus) for n, x in core.cluster.nodes.items()} == {"gpu-a": 2}
    transport = httpx.ASGITransport(app=broker.app)

    async def until(what: Any) -> None:
        while not what():
            await asyncio.sleep(0.05)

    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://broker") as http:
            admin = {"Authorization": f"Bearer {broker.admin_token}"}
            r = await http.post("/v1/tenants", json={"name": "acme"}, headers=admin)
            auth = {"Authorization": f"Bearer {r.json()['token']}"}

            async def run(argv: list[str], **extra: Any) -> tuple[dict[str, Any], bytes]:
                body = {"profile": "plain", "argv": argv, "reuse_tag": "t", **extra}
                r = await http.post("/v1/jobs", json=body, headers=auth)
                assert r.status_code == 201, r.text
                job = r.json()["id"]
                r = await http.get(f"/v1/jobs/{job}/wait", params={"timeout_s": 60}, headers=auth)
                done = r.json()
                r = await http.get(f"/v1/jobs/{job}/output", params={"follow": False}, headers=auth)
                lines = [json.loads(x) for x in r.text.splitlines() if x.strip()]
                out = b"".join(base64.b64decode(m["data"]) for m in lines if "data" in m)
                return done, out

            done, out = await run(["sh", "-c", "echo hi from $STOKER_POD"])
            assert done["state"] == "finished" and done["exit_code"] == 0, done
            pod = done["pods"][0]
            assert out == f"hi from {pod}\n".encode()
            assert object_name(pod) in kube.api.pods()  # a real Pod object, kept warm
            labels = kube.api.pods()[object_name(pod)]["metadata"]["labels"]
            assert labels[LABEL_TENANT] == tenant_hash("acme")
            # hp and spot: their PriorityClass, spot below hp, so the cluster's own
            # scheduler never evicts hp for spot
            for cls in ("hp", "spot"):
                done, _ = await run(["true"], job_class=cls)
                assert done["state"] == "finished" and done["exit_code"] == 0, done
            priority = {
                (o["metadata"]["labels"]["stoker.dev/class"], o["spec"]["priorityClassName"])
                for o in created.values()
                if not o["metadata"]["name"].startswith("stoker-drop-")  # see below
            }
            assert priority == {
                ("pool", "stoker-pool"),
                ("hp", "stoker-hp"),
                ("spot", "stoker-spot"),
            }
            # a gang of two: each rank dials rank 0's pod, at its pod IP
            before = set(created)
            argv = ["sh", "-c", "echo $RANK $MASTER_ADDR"]
            done, out = await run(argv, job_class="hp", workers=2)
            assert done["state"] == "finished" and done["exit_code"] == 0, done
            gang_ips = {ips[name] for name in set(created) - before}
            (rank0, rank1) = sorted(out.decode().splitlines())
            master = rank0.split()[1]
            assert rank0 == f"0 {master}" and rank1 == f"1 {master}" and master in gang_ips
            # each rank's pod mounted its own directory of the hp volume, and once the job
            # ended a drop pod removed the job's directory
            for rank, pod in enumerate(done["pods"]):
                mounts = created[object_name(pod)]["spec"]["containers"][0]["volumeMounts"]
                want = f"stoker/{done['id']}/{rank}"
                assert {
                    "name": "checkpoint",
                    "mountPath": "/stoker/checkpoint",
                    "subPath": want,
                } in (mounts)
            await until(
                lambda: not (kube.kubelet.claims / "hp-ckpt" / "stoker" / done["id"]).exists()
            )
            # a node joins: the core places on it; it leaves: the core's model follows
            kube.api.add_node("gpu-b", H100, 4)
            await until(lambda: "gpu-b" in core.cluster.nodes)
            assert core.cluster.capacity[H100] == 6
            kube.api.remove("nodes", "gpu-b")
            await until(lambda: "gpu-b" not in core.cluster.nodes)
            assert core.cluster.capacity[H100] == 2
    finally:
        await broker.close(stop_pods=False)
    # a restarted broker replays the cluster its decisions saw (the node events are in its
    # log), then meets the cluster as it is now: gpu-c joined while no broker ran
    kube.api.add_node("gpu-c", H100, 1)
    broker = Broker(cfg, kube.runtime(profiles=[plain.core]))
    await broker.start()
    try:
        nodes = broker.loop.core.cluster.nodes  # type: ignore[union-attr]
        assert {n: len(x.gpus) for n, x in nodes.items()} == {"gpu-a": 2, "gpu-c": 1}
        assert broker.recovery["replayed"] > 0
    finally:
        await broker.close(stop_pods=True)
    assert kube.api.pods() == {} and kube.api.secrets() == {}


async def test_the_broker_refuses_a_shape_no_node_of_the_cluster_can_hold(
    kube: Kube, tmp_path: Path
) -> None:
    """On a cluster the broker's old check compared a job with the cluster's total GPUs
    (4 here, on nodes of 2, 1 and 1): a 4-GPU worker and two 2-GPU workers passed it and
    waited for ever. The core counts node slots: both are a 422 naming the field, and
    nothing is stored or started."""
    import httpx

    from stoker.broker.app import Broker
    from stoker.broker.config import BrokerConfig, BrokerProfile

    kube.api.add_node("gpu-b", H100, 1)
    kube.api.add_node("gpu-c", H100, 1)
    plain = BrokerProfile.simple("plain")
    cfg = BrokerConfig(data_dir=tmp_path / "data", profiles=[plain], gpu_model=H100)
    broker = Broker(cfg, kube.runtime(profiles=[plain.core]))
    await broker.start()
    assert broker.loop.core.cluster.sizes == {H100: {2: 1, 1: 2}}  # type: ignore[union-attr]
    transport = httpx.ASGITransport(app=broker.app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://broker") as http:
            admin = {"Authorization": f"Bearer {broker.admin_token}"}
            r = await http.post("/v1/tenants", json={"name": "acme"}, headers=admin)
            auth = {"Authorization": f"Bearer {r.json()['token']}"}
            body = {"profile": "plain", "argv": ["true"], "reuse_tag": "t", "job_class": "hp"}
            for shape, field, says in (
                ({"gpus": 4}, "body.gpus", "the largest node of GPU pool"),
                ({"gpus": 2, "workers": 2}, "body.workers", "hold 1 at once"),
                ({"job_class": "pool", "workers": 5}, "body.workers", "= 4.5 GPUs"),
            ):
                r = await http.post("/v1/jobs", json={**body, **shape}, headers=auth)
                assert r.status_code == 422, r.text
                assert r.json()["field"] == field and says in r.json()["message"], r.json()
            r = await http.get("/v1/jobs", headers=auth)
            assert r.json() == []
    finally:
        await broker.close(stop_pods=True)
    assert kube.api.pods() == {}


def test_the_agent_dials_only_with_a_token() -> None:
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "STOKER_AGENT_TOKEN"}
    for args, why in ((["--dial", "127.0.0.1:1"], "token"), (["--dial", "nohost"], "HOST:PORT")):
        res = subprocess.run(
            [sys.executable, "-m", "stoker.agent", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert res.returncode == 2 and why in res.stderr, res.stderr


async def test_the_ranks_of_a_gang_dial_rank_0s_pod_ip(kube: Kube) -> None:
    rt = kube.runtime()
    await rt.discover()
    for pod in ("rank-0", "rank-1"):
        await _up(kube, rt, pod)
    ips = {p: kube.api.pods()[object_name(p)]["status"]["podIP"] for p in ("rank-0", "rank-1")}
    assert len(set(ips.values())) == 2  # each pod its own address
    rt._pods["rank-0"].ip = None  # the watch has not seen it yet: read from the API
    argv = ("sh", "-c", "echo $RANK/$WORLD_SIZE $MASTER_ADDR:$MASTER_PORT")
    for rank, pod in enumerate(("rank-0", "rank-1")):
        topology = Topology(rank, 2, "127.0.0.1", 29511, master_pod="rank-0")
        await rt.bind(pod, JobBinding(job="gang", argv=argv, topology=topology))
    out: dict[str, bytes] = {}
    exits = 0
    while exits < 2:
        ev = await kube.until(rt, JobOutput | JobExited)
        if isinstance(ev, JobOutput):
            out[ev.pod] = out.get(ev.pod, b"") + ev.data
        else:
            exits += 1
    master = f"{ips['rank-0']}:29511"
    assert out == {"rank-0": f"0/2 {master}\n".encode(), "rank-1": f"1/2 {master}\n".encode()}
    # a gang whose rank 0 is not a pod of this runtime is not bound blind
    with pytest.raises(KubeRuntimeError, match="no live pod"):
        topology = Topology(1, 2, "127.0.0.1", 29512, master_pod="gone")
        await rt.bind("rank-1", JobBinding(job="lost", argv=argv, topology=topology))


async def test_stop_pod_gives_the_job_its_grace_and_waits_for_the_pod_to_go(
    kube: Kube, tmp_path: Path
) -> None:
    rt = kube.runtime()
    await rt.discover()
    graceful = dataclasses.replace(GPU, grace_s=20)
    await rt.start_pod("pod-g", graceful, ("gpu-a/0",), False)
    await kube.until(rt, PodUp)
    name = object_name("pod-g")
    assert kube.api.pods()[name]["spec"]["terminationGracePeriodSeconds"] == 20
    # a job that checkpoints on SIGTERM (into its workspace, which the test can read)
    job = (
        "import signal, sys, time\n"
        "def save(*_):\n"
        "    open('checkpoint', 'w').write('saved')\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, save)\n"
        "print('up', flush=True)\n"
        "time.sleep(120)\n"
    )
    await rt.bind("pod-g", JobBinding(job="ckpt", argv=("python", "-c", job)))
    await kube.until(rt, JobOutput)
    await rt.stop_pod("pod-g")
    assert kube.kubelet.signals[name] == ["SIGTERM"]  # it ended within its grace
    assert (tmp_path / "node" / name / "checkpoint").read_text() == "saved"
    deletes = [q for m, p, q in kube.api.requests if m == "DELETE" and p.endswith(name)]
    assert deletes == ["gracePeriodSeconds=20"]
    assert await kube.until(rt, JobExited) == JobExited("ckpt", "pod-g", 137, Failure.PREEMPTED)
    assert await kube.until(rt, PodDown) == PodDown("pod-g")
    assert name not in kube.api.pods()


async def test_a_pod_that_does_not_go_is_a_typed_stop_failure(kube: Kube) -> None:
    rt = kube.runtime(stop_timeout_s=0.5, termination_grace_s=1)
    await rt.discover()
    await _up(kube, rt, "pod-n")
    name = object_name("pod-n")
    kube.kubelet.stuck.add(name)  # its node stopped answering: the pod stays Terminating
    with pytest.raises(PodStopTimeout, match="still there"):
        await rt.stop_pod("pod-n")
    assert name in kube.api.pods() and kube.api.pods()[name]["metadata"]["deletionTimestamp"]
    assert sorted(rt._pods) == ["pod-n"]  # kept, not reported gone
    kube.kubelet.stuck.clear()
    await rt.stop_pod("pod-n")  # asked again: now it goes
    assert await kube.until(rt, PodDown) == PodDown("pod-n")
    assert sorted(rt._pods) == [] and name not in kube.api.pods()


async def test_the_node_watch_reports_nodes_that_join_change_and_leave(kube: Kube) -> None:
    rt = kube.runtime()
    assert [n.name for n in await rt.discover()] == ["gpu-a"]
    await rt.start()
    kube.api.add_node("gpu-b", "NVIDIA-L4", 4)
    up = await kube.until(rt, NodeUp)
    assert (up.node.name, up.node.gpu_model, [g.id for g in up.node.gpus]) == (
        "gpu-b",
        "NVIDIA-L4",
        ["gpu-b/0", "gpu-b/1", "gpu-b/2", "gpu-b/3"],
    )
    # a status update that changes nothing stoker sees says nothing; a cordon is a NodeDown
    node = kube.api.objects[("nodes", "gpu-b")]
    kube.api._store("nodes", {**node, "metadata": {**node["metadata"]}}, "MODIFIED")
    cordoned = {**node, "spec": {"unschedulable": True}}
    kube.api._store("nodes", cordoned, "MODIFIED")
    assert await kube.until(rt, NodeUp | NodeDown) == NodeDown("gpu-b")
    kube.api._store("nodes", {**node, "spec": {}}, "MODIFIED")  # uncordoned
    assert (await kube.until(rt, NodeUp)).node.name == "gpu-b"
    # while the watch is cut off, gpu-a is deleted and the history forgotten: the relist
    # says so
    kube.api.remove("nodes", "gpu-a")
    kube.api.compact()
    kube.api.drop_watches()
    assert await kube.until(rt, NodeUp | NodeDown) == NodeDown("gpu-a")
    assert sorted(rt.devices) == ["gpu-b/0", "gpu-b/1", "gpu-b/2", "gpu-b/3"]


async def test_a_cpu_only_job_runs_on_the_clusters_nodes_cpu_slots(
    kube: Kube, tmp_path: Path
) -> None:
    """A CPU-only profile's pods take a node's CPU slots, from its allocatable CPUs and
    memory: the node events carry both, so the core places such a job (it was refused
    with a 422 while they carried no memory) and a restarted broker's replay agrees."""
    import httpx

    from stoker.broker.app import Broker
    from stoker.broker.config import BrokerConfig, BrokerProfile

    cpu = BrokerProfile.simple("cpu", gpus=0)
    cfg = BrokerConfig(data_dir=tmp_path / "data", profiles=[cpu], gpu_model=H100)
    for round_ in range(2):  # the second: a restarted broker over the same store
        broker = Broker(cfg, kube.runtime(profiles=[cpu.core]))
        await broker.start()
        transport = httpx.ASGITransport(app=broker.app)
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://broker") as http:
                admin = {"Authorization": f"Bearer {broker.admin_token}"}
                r = await http.post("/v1/tenants", json={"name": f"t{round_}"}, headers=admin)
                auth = {"Authorization": f"Bearer {r.json()['token']}"}
                body = {"profile": "cpu", "argv": ["sh", "-c", "echo cpu"], "reuse_tag": "t"}
                r = await http.post("/v1/jobs", json=body, headers=auth)
                assert r.status_code == 201, r.text
                job = r.json()["id"]
                r = await http.get(f"/v1/jobs/{job}/wait", params={"timeout_s": 60}, headers=auth)
                assert r.json()["state"] == "finished" and r.json()["exit_code"] == 0, r.json()
            node = broker.loop.core.cluster.nodes["gpu-a"]  # type: ignore[union-attr]
            assert (node.cpu, node.memory_gb) == (32.0, 256.0)
        finally:
            await broker.close(stop_pods=True)
    assert kube.api.pods() == {}


async def test_a_node_whose_gpus_change_keeps_its_running_pods(kube: Kube, tmp_path: Path) -> None:
    """A node whose allocatable GPUs change (a device plugin restarted with more cards) is
    changed in place through the broker (NodeUp -> NodeChanged): the job running there
    runs on in its pod, and a job that waited for room starts on the new cards."""
    import httpx

    from stoker.broker.app import Broker
    from stoker.broker.config import BrokerConfig, BrokerProfile
    from stoker.core import NodeChanged

    gpu = BrokerProfile.simple("gpu", standby=False)
    cfg = BrokerConfig(data_dir=tmp_path / "data", profiles=[gpu], gpu_model=H100)
    broker = Broker(cfg, kube.runtime(profiles=[gpu.core]))
    await broker.start()
    assert broker.loop is not None
    core = broker.loop.core
    decisions: list[tuple[Any, list[Any], float]] = []
    broker.loop.on_decision.append(lambda *d: decisions.append(d))
    transport = httpx.ASGITransport(app=broker.app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://broker") as http:
            admin = {"Authorization": f"Bearer {broker.admin_token}"}
            r = await http.post("/v1/tenants", json={"name": "t"}, headers=admin)
            auth = {"Authorization": f"Bearer {r.json()['token']}"}

            async def submit(argv: list[str], gpus: int) -> str:
                body = {"profile": "gpu", "argv": argv, "reuse_tag": "t", "job_class": "hp"}
                body["gpus"] = gpus
                r = await http.post("/v1/jobs", json=body, headers=auth)
                assert r.status_code == 201, r.text
                return str(r.json()["id"])

            async def row(job: str) -> dict[str, Any]:
                got: dict[str, Any] = (await http.get(f"/v1/jobs/{job}", headers=auth)).json()
                return got

            running = await submit(["sh", "-c", "sleep 4; echo done"], 1)
            for _ in range(600):
                if (await row(running))["state"] == "running":
                    break
                await asyncio.sleep(0.02)
            pod = (await row(running))["pods"][0]
            waits = await submit(["sh", "-c", "echo waited"], 2)
            assert (await row(waits))["state"] == "queued"
            node = kube.api.objects[("nodes", "gpu-a")]
            grown = {**node["status"], "allocatable": {**node["status"]["allocatable"]}}
            grown["allocatable"]["nvidia.com/gpu"] = "4"
            kube.api._store("nodes", {**node, "status": grown}, "MODIFIED")
            for _ in range(600):
                if len(core.cluster.nodes["gpu-a"].gpus) == 4:
                    break
                await asyncio.sleep(0.02)
            assert len(core.cluster.nodes["gpu-a"].gpus) == 4
            assert (await row(running))["state"] == "running"
            assert core.pods[pod].gpus == ["gpu-a/0"] and core.pods[pod].state.value == "active"
            # the core's answer to the change: the waiting job starts on new cards, no stop
            (answer,) = [a for e, a, _ in decisions if isinstance(e, NodeChanged)]
            assert [(type(a).__name__, len(a.gpus)) for a in answer] == [("StartPod", 2)]
            assert "gpu-a/0" not in answer[0].gpus
            r = await http.get(f"/v1/jobs/{waits}/wait", params={"timeout_s": 60}, headers=auth)
            assert r.json()["exit_code"] == 0, r.json()
            r = await http.get(f"/v1/jobs/{running}/wait", params={"timeout_s": 60}, headers=auth)
            assert (r.json()["exit_code"], r.json()["failure"]) == (0, None), r.json()
    finally:
        await broker.close(stop_pods=True)
    assert kube.api.pods() == {}


# a spot job that checkpoints on SIGTERM into its checkpoint dir, and leaves a link out of
# it there (to where another job's dir lies on the volume); its next run resumes
SPOT = """
import os, signal, sys, time
run = int(os.environ["STOKER_RUN"])
d = os.environ["STOKER_CHECKPOINT_DIR"]
def term(*_):
    open(os.path.join(d, "state"), "w").write("step 7")
    os.symlink("../../j-2/0", os.path.join(d, "other"))
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
print(f"run {run}: started", flush=True)
if run == 1:
    time.sleep(90)
print(f"run {run}: resumed from {open(os.path.join(d, 'state')).read()}", flush=True)
"""
LOOK = "import os; d = os.environ.get('STOKER_CHECKPOINT_DIR'); print(d and sorted(os.listdir(d)))"


async def test_a_preempted_spot_job_resumes_from_its_checkpoint_in_a_new_pod(kube: Kube) -> None:
    """Each spot pod mounts only its own job's and rank's directory of the class's volume;
    a preempted job's next run, in a new pod on another node, finds what it left there; a
    job that ends for good has its directory dropped by a short-lived Pod that follows no
    link; a class with no volume, or a pod started for no job, has no checkpoint dir."""
    kube.api.add_node("gpu-b", H100, 1)
    rt = kube.runtime(settings={"checkpoint_volumes": {"spot": "spot-ckpt"}})
    await rt.discover()
    await _up(kube, rt, "spot-1", job_class="spot", checkpoint=("j-1", 0))
    spec = kube.api.pods()[object_name("spot-1")]["spec"]
    c = spec["containers"][0]
    assert {"name": "checkpoint", "persistentVolumeClaim": {"claimName": "spot-ckpt"}} in spec[
        "volumes"
    ]
    assert [m for m in c["volumeMounts"] if m["name"] == "checkpoint"] == [
        {"name": "checkpoint", "mountPath": "/stoker/checkpoint", "subPath": "stoker/j-1/0"}
    ]
    assert c["command"][-2:] == ["--checkpoint", "/stoker/checkpoint"]
    await rt.bind("spot-1", JobBinding(job="j-1", argv=("python", "-c", SPOT), run=1))
    out = await kube.until(rt, JobOutput)
    assert out.data == b"run 1: started\n"
    await rt.stop_pod("spot-1")  # preempted: SIGTERM, it checkpoints, the pod goes
    assert await kube.until(rt, JobExited) == JobExited("j-1", "spot-1", 137, Failure.PREEMPTED)
    volume = kube.kubelet.claims / "spot-ckpt" / "stoker"
    assert (volume / "j-1" / "0" / "state").read_text() == "step 7"

    # another job of the class: a directory of its own, empty
    await rt.start_pod("spot-3", GPU, ("gpu-a/1",), False, job_class="spot", checkpoint=("j-2", 0))
    await kube.until(rt, PodUp)
    mine = LOOK + "; open(os.path.join(d, 'mine'), 'w').write('j-2 only')"
    await rt.bind("spot-3", JobBinding(job="j-2", argv=("python", "-c", mine)))
    out_2, _ = await kube.collect(rt, "j-2")
    assert out_2 == b"[]\n"

    # the next run of j-1: a new pod, on another node, resumes from the checkpoint
    await rt.start_pod("spot-2", GPU, ("gpu-b/0",), False, job_class="spot", checkpoint=("j-1", 0))
    await kube.until(rt, PodUp)
    assert (
        kube.api.pods()[object_name("spot-2")]["spec"]["nodeSelector"]["kubernetes.io/hostname"]
        == "gpu-b"
    )
    await rt.bind("spot-2", JobBinding(job="j-1", argv=("python", "-c", SPOT), run=2))
    out_1, exited = await kube.collect(rt, "j-1")
    assert out_1 == b"run 2: started\nrun 2: resumed from step 7\n" and exited.exit_code == 0

    # hp has no volume here, and a spot pod started for no job mounts none
    await _up(kube, rt, "hp-1", job_class="hp", checkpoint=("j-3", 0))
    await rt.bind("hp-1", JobBinding(job="j-3", argv=("python", "-c", LOOK)))
    assert (await kube.collect(rt, "j-3"))[0] == b"None\n"
    names = [m["name"] for m in kube.api.pods()[object_name("hp-1")]["spec"]["volumes"]]
    assert "checkpoint" not in names

    # j-1 ended for good: its directory goes, the link in it is not followed
    before = len(kube.api.requests)
    await rt.drop_checkpoint("j-1", job_class="pool")  # no volume for pool: no API call
    assert kube.api.requests[before:] == []
    await rt.drop_checkpoint("j-1", job_class="spot")
    assert not (volume / "j-1").exists()
    assert (volume / "j-2" / "0" / "mine").read_text() == "j-2 only"
    drops = [p for m, p, _ in kube.api.requests if m == "POST" and p.endswith("/pods")]
    assert len(drops) == 5  # four stoker pods, one drop pod (valid: the API checks each)
    assert all(not n.startswith("stoker-drop-") for n in kube.api.pods())  # deleted after
    # a drop pod a stopped broker left behind: waited for and deleted as if it were ours
    (left,) = drop_pods(rt.settings, "j-8", "spot")
    kube.api._store("pods", {**left, "status": {"phase": "Pending"}}, "ADDED")
    await rt.drop_checkpoint("j-8", job_class="spot")
    assert left["metadata"]["name"] not in kube.api.pods()
    before = len(kube.api.requests)
    await rt.drop_checkpoint("j-9")  # class unknown, nothing kept: every volume, no error
    assert len(kube.api.requests) > before
    assert all(not n.startswith("stoker-drop-") for n in kube.api.pods())


async def test_no_checkpoint_volume_no_drop_pod(kube: Kube) -> None:
    rt = kube.runtime()
    await rt.discover()
    before = len(kube.api.requests)
    for cls in ("spot", None):
        await rt.drop_checkpoint("j-1", job_class=cls)
    assert kube.api.requests[before:] == []  # nothing to drop: no API call at all
