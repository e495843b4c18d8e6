"""The runtime contract, one set of tests for every runtime.

- ``local``: bubblewrap sandboxes on this host (skipped without bwrap);
- ``kubernetes``: the Kubernetes runtime through the real lightkube client against the
  in-memory API server of ``kube_api``, whose kubelet runs each Pod's agent as a real
  process that dials the runtime's gateway;
- ``cluster``: the Kubernetes runtime on a real cluster, when ``STOKER_TEST_KUBECONFIG``
  names a kubeconfig (and ``STOKER_TEST_IMAGE`` an image with stoker installed,
  ``STOKER_TEST_DIAL`` the HOST:PORT at which the cluster's pods reach this test's gateway,
  ``STOKER_TEST_GATEWAY_PORT`` the port it listens on, default 8766,
  ``STOKER_TEST_NAMESPACE`` an existing namespace, default ``stoker-test``).
"""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import tarfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from stoker.core.model import Failure, Profile
from stoker.runtime.base import (
    JobBinding,
    JobExited,
    JobOutput,
    JobRunning,
    PodDown,
    PodUp,
    Runtime,
    RuntimeEvent,
    RuntimeProfile,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

PLAIN = RuntimeProfile("plain")
CORE = Profile("plain", share=0.9, standby_share=0.1)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Rig:
    """A runtime, a reader of its events, where its pods go, and how one dies unasked."""

    rt: Any
    gpus: tuple[str, ...]
    kill_pod: Callable[[str], Awaitable[None]]
    events: AsyncIterator[RuntimeEvent] = field(init=False)

    def __post_init__(self) -> None:
        self.events = self.rt.events()

    async def until(self, kind: type, timeout: float = 60.0) -> Any:
        while True:
            ev = await asyncio.wait_for(anext(self.events), timeout)
            if isinstance(ev, kind):
                return ev

    async def collect(self, job: str) -> tuple[bool, bytes, JobExited]:
        out, running = [], False
        while True:
            ev = await asyncio.wait_for(anext(self.events), 60.0)
            if isinstance(ev, JobRunning) and ev.job == job:
                running = True
            elif isinstance(ev, JobOutput) and ev.job == job and ev.stream == "stdout":
                out.append(ev.data)
            elif isinstance(ev, JobExited) and ev.job == job:
                return running, b"".join(out), ev

    async def pod(self, standby: bool = False) -> str:
        pod = f"c{uuid.uuid4().hex[:10]}"
        await self.rt.start_pod(pod, PLAIN, self.gpus, standby)
        assert await self.until(PodUp) == PodUp(pod)
        return pod


async def _local(tmp_path: Path) -> AsyncIterator[Rig]:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) not installed")
    from stoker.runtime.local import LocalRuntime

    rt = LocalRuntime(tmp_path / "state", gpu_slots=1)

    async def kill(pod: str) -> None:
        os.kill(rt.pod_info(pod).init_pid, 9)

    yield Rig(rt, ("vgpu0",), kill)
    await rt.stop_all()


async def _kubernetes(tmp_path: Path) -> AsyncIterator[Rig]:
    from kube_api import FakeApi, Kubelet, kube_client, procs_under
    from stoker.runtime.kubernetes.runtime import Backoff, KubernetesRuntime
    from stoker.runtime.kubernetes.settings import KubeSettings

    api = FakeApi()
    api.add_node("gpu-a", "NVIDIA-A100", 1)
    rt = KubernetesRuntime(
        KubeSettings(start_timeout_s=60, stop_timeout_s=20),
        [CORE],
        client=kube_client(api),
        listen=("127.0.0.1", 0),
        code_dir=tmp_path / "code",
        backoff=Backoff(base_s=0.01, cap_s=0.05),
    )
    kubelet = Kubelet(api, tmp_path / "node", lambda: f"127.0.0.1:{rt.gateway_port}")
    await rt.discover()

    async def kill(pod: str) -> None:
        kubelet.kill(_name(pod))

    yield Rig(rt, ("gpu-a/0",), kill)
    await rt.stop_all()
    await rt.close()
    await kubelet.close()
    assert procs_under(tmp_path) == []  # no agent outlives its test
    assert api.pods() == {} and api.secrets() == {}  # nothing left behind


def _name(pod: str) -> str:
    from stoker.runtime.kubernetes.settings import object_name

    return object_name(pod)


async def _cluster(tmp_path: Path) -> AsyncIterator[Rig]:
    path = os.environ.get("STOKER_TEST_KUBECONFIG")
    if not path:
        pytest.skip(
            "no cluster: set STOKER_TEST_KUBECONFIG (and STOKER_TEST_IMAGE, STOKER_TEST_DIAL)"
        )
    from lightkube.resources.core_v1 import Pod as KPod

    from stoker.runtime.kubernetes.runtime import KubernetesRuntime
    from stoker.runtime.kubernetes.settings import KubeSettings, ShareMechanism

    port = int(os.environ.get("STOKER_TEST_GATEWAY_PORT", "8766"))
    settings = KubeSettings(
        namespace=os.environ.get("STOKER_TEST_NAMESPACE", "stoker-test"),
        instance=f"t{uuid.uuid4().hex[:8]}",
        image=os.environ["STOKER_TEST_IMAGE"],
        dial=os.environ["STOKER_TEST_DIAL"],
        share=ShareMechanism(os.environ.get("STOKER_TEST_SHARE", "time-slicing")),
    )
    rt = KubernetesRuntime.from_kubeconfig(
        path, settings, [CORE], listen=("0.0.0.0", port), code_dir=tmp_path / "code"
    )
    nodes = await rt.discover()
    if not nodes:
        pytest.skip("the cluster has no ready node with allocatable GPUs")
    core = Profile("plain", gpu_model=nodes[0].gpu_model, share=0.9, standby_share=0.1)
    rt.profiles = {"plain": core}

    async def kill(pod: str) -> None:
        await rt.client.delete(KPod, _name(pod), grace_period=0)

    yield Rig(rt, (nodes[0].gpus[0].id,), kill)
    await rt.stop_all()
    await rt.close()


RIGS = {"local": _local, "kubernetes": _kubernetes, "cluster": _cluster}


@pytest.fixture(params=sorted(RIGS))
async def rig(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Rig]:
    async for r in RIGS[request.param](tmp_path):
        yield r


def test_both_runtimes_implement_the_protocol() -> None:
    from stoker.runtime.kubernetes.runtime import KubernetesRuntime
    from stoker.runtime.local import LocalRuntime

    for cls in (LocalRuntime, KubernetesRuntime):
        for name in Runtime.__dict__:
            if not name.startswith("_"):
                assert callable(getattr(cls, name)), (cls, name)


async def test_runs_argv_streams_output_and_exit_code(rig: Rig) -> None:
    pod = await rig.pod()
    await rig.rt.bind(pod, JobBinding(job="j1", argv=("sh", "-c", "echo out; exit 3")))
    running, out, exited = await rig.collect("j1")
    assert running and out == b"out\n"
    assert exited.exit_code == 3 and exited.failure is Failure.USER_ERROR
    await rig.rt.bind(pod, JobBinding(job="j2", argv=("python", "-c", "print('fine')")))
    _, out, exited = await rig.collect("j2")
    assert out == b"fine\n" and exited.exit_code == 0 and exited.failure is None


async def test_kill_and_timeout_are_typed(rig: Rig) -> None:
    pod = await rig.pod()
    for failure in (Failure.CANCELLED, Failure.PREEMPTED):
        await rig.rt.bind(pod, JobBinding(job=f"k-{failure}", argv=("sleep", "30")))
        await rig.until(JobRunning)
        await rig.rt.kill_job(f"k-{failure}", failure)
        _, _, exited = await rig.collect(f"k-{failure}")
        assert exited.failure is failure
    await rig.rt.bind(pod, JobBinding(job="slow", argv=("sleep", "30"), timeout_s=0.5))
    _, _, exited = await rig.collect("slow")
    assert exited.failure is Failure.TIMEOUT


async def test_standby_has_no_gpu_until_promoted(rig: Rig) -> None:
    pod = await rig.pod(standby=True)
    with pytest.raises(RuntimeError):  # PodBusy of either runtime
        await rig.rt.bind(pod, JobBinding(job="early", argv=("true",)))
    assert (await rig.rt.ping(pod))["cuda_visible_devices"] == ""
    await rig.rt.promote(pod)
    assert await rig.until(PodUp) == PodUp(pod)
    await rig.rt.bind(pod, JobBinding(job="after", argv=("sh", "-c", "echo $STOKER_GPUS")))
    _, out, exited = await rig.collect("after")
    assert out.decode().strip() == ",".join(rig.gpus) and exited.exit_code == 0


async def test_stop_reports_down_and_preempts_its_job(rig: Rig) -> None:
    pod = await rig.pod()
    await rig.rt.bind(pod, JobBinding(job="long", argv=("sleep", "60")))
    await rig.until(JobRunning)
    await rig.rt.stop_pod(pod)
    exited = await rig.until(JobExited)
    assert exited.job == "long" and exited.failure is Failure.PREEMPTED
    assert await rig.until(PodDown) == PodDown(pod)
    assert pod not in await rig.rt.live_pods()


async def test_pod_death_is_reported(rig: Rig) -> None:
    pod = await rig.pod()
    await rig.rt.bind(pod, JobBinding(job="doomed", argv=("sleep", "60")))
    await rig.until(JobRunning)
    await rig.kill_pod(pod)
    exited = await rig.until(JobExited)
    assert exited.job == "doomed" and exited.failure is Failure.POD_DIED
    assert await rig.until(PodDown) == PodDown(pod, Failure.POD_DIED)
    assert pod not in await rig.rt.live_pods()


async def test_code_upload_by_digest(rig: Rig) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = b"import sys; print('code', sys.argv[1:])\n"
        info = tarfile.TarInfo("pkg/main.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    digest = await rig.rt.put_code(buf.getvalue())
    pod = await rig.pod()
    await rig.rt.bind(
        pod, JobBinding(job="code", argv=("python", "pkg/main.py", "x"), code_digest=digest)
    )
    _, out, exited = await rig.collect("code")
    assert out == b"code ['x']\n" and exited.exit_code == 0
