"""The local runtime with real bubblewrap sandboxes, real cgroups and real processes."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rig import code_tar
from runtime_rig import IMPORT_COUNTER, Rig, import_count, procs_with, tiny_wheel
from stoker.core.model import Failure, StartFault
from stoker.runtime.base import (
    BindRefused,
    JobBinding,
    JobExited,
    JobOutput,
    JobRunning,
    PodDown,
    PodUp,
    RuntimeProfile,
    StartFailed,
    Topology,
)
from stoker.runtime.cgroups import PodCgroup
from stoker.runtime.code import CodeNotFound
from stoker.runtime.envs import EnvBuildError
from stoker.runtime.local import LocalRuntime, PodBusy, PodStartError

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) not installed"),
    pytest.mark.timeout(60),
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    rt = LocalRuntime(tmp_path / "state", gpu_slots=2)
    yield Rig(rt, rt.events())
    await rt.stop_all()


async def test_runs_argv_streams_output_and_exit_code(rig: Rig) -> None:
    pod = await rig.pod()
    res = await rig.run(pod, ["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert res.running
    assert res.stdout == b"out\n" and res.stderr == b"err\n"
    assert res.exit.exit_code == 3 and res.exit.failure is Failure.USER_ERROR
    ok = await rig.run(pod, ["python", "-c", "print('fine')"])
    assert ok.stdout == b"fine\n" and ok.exit.exit_code == 0 and ok.exit.failure is None


async def test_unprivileged_no_caps_own_namespaces(rig: Rig) -> None:
    pod = await rig.pod()
    res = await rig.run(
        pod, ["sh", "-c", "id -u; grep CapEff /proc/self/status; hostname; ps -e | wc -l"]
    )
    uid, caps, host, nproc = res.stdout.decode().split("\n")[:4]
    if os.geteuid() == 0:
        assert uid == "65534"
    assert caps.split()[1] == "0000000000000000"
    assert host == "pod" != socket.gethostname()  # own uts namespace
    assert int(nproc) < 10  # own pid namespace: bwrap, agent, the job and ps


_SIGNALS_AND_OOM = """
from signal import SIG_DFL, SIGINT, SIGPIPE, SIGTERM, getsignal
default = [getsignal(s) == SIG_DFL for s in (SIGPIPE, SIGINT, SIGTERM)]
print(open("/proc/self/oom_score_adj").read().strip(), all(default))
"""


async def test_a_job_has_default_signals_and_is_the_oom_killers_pick(rig: Rig) -> None:
    """The zygote sets the signal dispositions its forks inherit once, not per job: a job
    still sees the defaults a program expects, and dies of SIGPIPE as any program does."""
    pod = await rig.pod()
    res = await rig.run(pod, ["python", "-c", _SIGNALS_AND_OOM])
    score, default = res.stdout.decode().split()
    assert default == "True", res.stderr
    if os.geteuid() == 0:  # jobs run as their own, dumpable, user: they may raise it
        assert score == "1000"
    # a write to a closed pipe ends a job quietly, by SIGPIPE (Python would ignore it)
    code = "import os; r, w = os.pipe(); os.close(r); os.write(w, b'x'); print('went on')"
    res = await rig.run(pod, ["python", "-c", code])
    assert (res.exit.exit_code, res.stdout, res.stderr) == (128 + 13, b"", b"")
    # and its programs too: `yes` stops when `head` has its line, with no EPIPE message
    res = await rig.run(pod, ["sh", "-c", "yes | head -n 1"])
    assert (res.exit.exit_code, res.stdout, res.stderr) == (0, b"y\n", b"")


async def test_timeout_is_typed(rig: Rig) -> None:
    pod = await rig.pod()
    t0 = time.monotonic()
    res = await rig.run(pod, ["sleep", "30"], timeout_s=0.5)
    assert res.exit.failure is Failure.TIMEOUT
    assert res.exit.exit_code == 128 + 9
    assert time.monotonic() - t0 < 10


async def test_kill_job_cancelled_and_preempted(rig: Rig) -> None:
    pod = await rig.pod()
    for failure in (Failure.CANCELLED, Failure.PREEMPTED):
        await rig.rt.bind(pod, JobBinding(job=f"k-{failure}", argv=("sleep", "30")))
        await rig.until(JobRunning)
        await rig.rt.kill_job(f"k-{failure}", failure)
        res = await rig.collect(f"k-{failure}")
        assert res.exit.failure is failure


_ON_TERM = """
import os, signal, sys, time
def term(*_):
    os.write(1, b"checkpointed\\n")  # not print: the signal may land inside print's flush
    sys.exit(0)
signal.signal(signal.SIGTERM, term if sys.argv[1] == "checkpoint" else signal.SIG_IGN)
print("ready", flush=True)
time.sleep(60)
"""


_MARK = f"graceful-{uuid.uuid4().hex}"  # in every such job's argv: what this test started


async def _bind_until_ready(rig: Rig, pod: str, job: str, mode: str) -> None:
    argv = ("python", "-c", _ON_TERM, mode, _MARK)
    await rig.rt.bind(pod, JobBinding(job=job, argv=argv))
    while not (isinstance(ev := await rig.next(), JobOutput) and ev.data.startswith(b"ready")):
        pass


async def test_kill_with_grace_sends_sigterm_first_then_sigkill(rig: Rig) -> None:
    pod = await rig.pod()
    # a job that checkpoints on SIGTERM ends by itself within the grace
    await _bind_until_ready(rig, pod, "ckpt", "checkpoint")
    await rig.rt.kill_job("ckpt", Failure.PREEMPTED, grace_s=30.0)
    res = await rig.collect("ckpt")
    assert (res.stdout, res.stderr) == (b"checkpointed\n", b"")
    assert (res.exit.exit_code, res.exit.failure) == (0, Failure.PREEMPTED)
    # one that ignores SIGTERM is killed once the grace has passed
    await _bind_until_ready(rig, pod, "stubborn", "ignore")
    await rig.rt.kill_job("stubborn", Failure.PREEMPTED, grace_s=0.5)
    res = await rig.collect("stubborn")
    assert (res.exit.exit_code, res.exit.failure) == (128 + 9, Failure.PREEMPTED)
    # a pod stopped right after its job's graceful kill waits for the job's checkpoint
    await _bind_until_ready(rig, pod, "last", "checkpoint")
    await rig.rt.kill_job("last", Failure.PREEMPTED, grace_s=30.0)
    await rig.rt.stop_pod(pod)
    res = await rig.collect("last")
    assert res.stdout == b"checkpointed\n", res.stderr
    assert res.exit.failure is Failure.PREEMPTED
    assert await rig.until(PodDown) == PodDown(pod)
    assert procs_with(_MARK) == []


async def test_memory_limit_is_out_of_memory(rig: Rig) -> None:
    probe = PodCgroup.create(f"stoker-probe-{uuid.uuid4().hex[:6]}", 64, None)
    missing = probe.missing.get("memory")
    probe.remove()
    if missing:
        pytest.skip(f"memory controller unavailable: {missing}")
    pod = await rig.pod(RuntimeProfile("small", memory_mb=128))
    res = await rig.run(
        pod, ["python", "-c", "x = bytearray(400 * 2**20); x[::4096] = b'1' * len(x[::4096])"]
    )
    assert res.exit.failure is Failure.OUT_OF_MEMORY
    # the pod survives its job's OOM and runs the next one
    ok = await rig.run(pod, ["python", "-c", "print(1)"])
    assert ok.exit.exit_code == 0


async def test_pids_limit(rig: Rig) -> None:
    pod = await rig.pod(RuntimeProfile("few", pids_max=16))
    missing = rig.rt.pod_info(pod).limits_missing
    if "pids" in missing:
        pytest.skip(f"pids controller unavailable: {missing['pids']}")
    code = (
        "import subprocess\nps = []\ntry:\n"
        " for i in range(64): ps.append(subprocess.Popen(['sleep', '5']))\n"
        "except OSError: print('limited')"
    )
    res = await rig.run(pod, ["python", "-c", code])
    assert b"limited" in res.stdout


async def test_network_is_off(rig: Rig) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    try:
        pod = await rig.pod()
        code = (
            "import socket\ns = socket.socket(); s.settimeout(2)\n"
            f"try:\n s.connect(('127.0.0.1', {port})); print('connected')\n"
            "except OSError as e: print('refused', e)"
        )
        res = await rig.run(pod, ["python", "-c", code])
        assert b"refused" in res.stdout
        # a profile that allows the network shares the host's
        net = await rig.pod(RuntimeProfile("net", network=True))
        res = await rig.run(net, ["python", "-c", code])
        assert b"connected" in res.stdout
    finally:
        server.close()


async def test_cannot_write_outside_workspace_or_see_others(rig: Rig, tmp_path: Path) -> None:
    pod = await rig.pod()
    other = await rig.pod()
    other_ws = rig.rt.pods_dir / other / "workspace"
    (other_ws / "secret").write_text("mine")
    target = tmp_path / "escape"
    script = (
        f"for p in /etc/x /usr/x {target} {rig.rt.state_dir}/x /x; do "
        "(echo hi > $p) 2>/dev/null && echo wrote $p; done; "
        f"ls {rig.rt.pods_dir} 2>&1; cat {other_ws}/secret 2>&1; echo ok > /workspace/f; "
        "echo tmp > /tmp/t && echo tmpok"
    )
    res = await rig.run(pod, ["sh", "-c", script])
    assert b"wrote" not in res.stdout
    assert b"mine" not in res.stdout
    assert b"tmpok" in res.stdout  # a private tmpfs, not the host's /tmp
    assert not target.exists()
    assert (rig.rt.pods_dir / pod / "workspace" / "f").read_text() == "ok\n"


async def test_stop_kills_the_whole_tree(rig: Rig) -> None:
    pod = await rig.pod()
    base = uuid.uuid4().int % 900 + 100
    # a detached session, an orphan (its parent exited) and the job's own child
    markers = [f"sleep {base}.{i}1" for i in range(3)]
    script = f"setsid {markers[0]} & ({markers[1]} &) ; {markers[2]}"
    await rig.rt.bind(pod, JobBinding(job="tree", argv=("sh", "-c", script)))
    await rig.until(JobRunning)
    for _ in range(500):
        if all(procs_with(m) for m in markers):
            break
        await asyncio.sleep(0.02)
    assert [m for m in markers if not procs_with(m)] == []
    await rig.rt.stop_pod(pod)
    exited = await rig.until(JobExited)
    assert isinstance(exited, JobExited) and exited.failure is Failure.PREEMPTED
    assert await rig.until(PodDown) == PodDown(pod, None)
    left = [m for m in markers if procs_with(m)]
    assert left == [], "stop_pod returned with pod processes alive"
    assert not (rig.rt.pods_dir / pod).exists()


async def test_stray_processes_die_with_their_job(rig: Rig) -> None:
    pod = await rig.pod()
    marker = f"{uuid.uuid4().int % 900 + 100}.5"
    res = await rig.run(pod, ["sh", "-c", f"setsid sleep {marker} & echo started"])
    assert res.exit.exit_code == 0
    assert procs_with(f"sleep {marker}") == []


@pytest.mark.parametrize("mode", ["scrub", "restart"])
async def test_workspace_persists_and_recycle_wipes(tmp_path: Path, mode: str) -> None:
    rt = LocalRuntime(tmp_path / "state", gpu_slots=1, recycle=mode)
    rig = Rig(rt, rt.events())
    try:
        pod = await rig.pod()
        leave = (
            "echo kept > /workspace/state; mkdir -p /workspace/d/e; echo t > /tmp/t; "
            "echo s > /dev/shm/s; ipcmk -M 4096 >/dev/null; ipcs -m | grep -c 0x"
        )
        res = await rig.run(pod, ["sh", "-c", leave])
        assert res.stdout == b"1\n"
        again = await rig.run(
            pod, ["sh", "-c", "cat /workspace/state /tmp/t /dev/shm/s; ipcs -m | grep -c 0x"]
        )
        # the same pod keeps its workspace between jobs, and nothing else
        assert again.stdout == b"kept\n0\n"
        old_init = rt.pod_info(pod).init_pid
        new = f"{pod}-r"
        await rt.recycle(pod, new)
        assert await rig.until(PodUp) == PodUp(new)
        assert await rt.live_pods() == [new]
        # what the pod's uid left (read-only binds of the host, e.g. a checkout under /tmp
        # exposed to the interpreter, are root's and stay)
        probe = (
            "find /workspace /tmp /dev/shm -mindepth 1 -user $(id -u) | grep -c . ; "
            "ipcs -m | grep -c 0x"
        )
        res = await rig.run(new, ["sh", "-c", probe + "; echo $STOKER_POD"])
        assert res.stdout == f"0\n0\n{new}\n".encode()
        pong = await rt.ping(new)
        assert pong["pod"] == new
        # scrub keeps the sandbox and its zygote; restart makes a new one
        assert (rt.pod_info(new).init_pid == old_init) == (mode == "scrub")
    finally:
        await rt.stop_all()


async def test_code_upload_by_digest(rig: Rig) -> None:
    archive = code_tar(
        {"app/__init__.py": "", "app/main.py": "import sys\nprint('app', sys.argv[1:])\n"}
    )
    digest = await rig.rt.put_code(archive)
    assert digest == await rig.rt.put_code(archive)  # stored once, same address
    assert len(list(rig.rt.code.root.iterdir())) == 1
    pod = await rig.pod()
    res = await rig.run(pod, ["python", "-m", "app.main", "x"], code_digest=digest)
    assert res.stdout == b"app ['x']\n"
    call = await rig.run(pod, ["app.main:__name__"], code_digest=digest)
    assert call.exit.failure is Failure.USER_ERROR  # a str attribute is not callable
    with pytest.raises(BindRefused, match="code_digest") as refused:
        await rig.rt.bind(pod, JobBinding(job="x", argv=("true",), code_digest="0" * 64))
    assert isinstance(refused.value.__cause__, CodeNotFound)  # the job's fault, not ours


async def test_deps_go_into_an_overlay(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    name = f"stokertiny{uuid.uuid4().hex[:6]}"
    tiny_wheel(wheels, name, "from-overlay")
    rt = LocalRuntime(tmp_path / "state", gpu_slots=1, find_links=(wheels,), no_index=True)
    rig = Rig(rt, rt.events())
    try:
        pod = await rig.pod()
        code = f"import {name}; print({name}.VALUE)"
        res = await rig.run(pod, ["python", "-c", code], deps=(name,))
        assert res.stdout == b"from-overlay\n", res.stderr
        plain = await rig.run(pod, ["sh", "-c", f"python -c '{code}'"], deps=(name,))
        assert plain.stdout == b"from-overlay\n"  # PYTHONPATH carries it to subprocesses
        without = await rig.run(pod, ["python", "-c", code])
        assert without.exit.failure is Failure.USER_ERROR  # never in the shared env
        missing = await rig.run(pod, ["true"], deps=("nosuchpkg-stoker",))
        assert missing.exit.failure is Failure.USER_ERROR and b"deps" in missing.stderr
    finally:
        await rt.stop_all()
    check = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True)
    assert check.returncode != 0


async def test_deps_are_imported_once_per_pod_in_a_layer(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    name = f"stokercount{uuid.uuid4().hex[:6]}"
    tiny_wheel(wheels, name, "", init=IMPORT_COUNTER)
    count = import_count(name)
    async with Rig.open(
        tmp_path / "state", gpu_slots=1, find_links=(wheels,), no_index=True
    ) as rig:
        pod = await rig.pod()

        async def counted() -> bytes:
            res = await rig.run(pod, ["python", "-c", count], deps=(name,))
            assert res.exit.exit_code == 0, res.stderr
            return res.stdout

        # the first job imports its deps itself; then the pod's layer imports them once, and
        # every later job of those deps forks from it with the import done
        assert [await counted() for _ in range(3)] == [b"1\n", b"2\n", b"2\n"]
        assert (await rig.rt.ping(pod))["layer"] == {"modules": [name], "ready": True}
        # a job without them forks from the clean zygote: it never sees them
        probe = f"import sys; print({name!r} in sys.modules)"
        assert (await rig.run(pod, ["python", "-c", probe])).stdout == b"False\n"
        # a job that kills its layer (its parent, of its own uid) ends as killed, and the
        # pod goes on: a new layer imports them again for the next job
        kill = f"import os, signal, time, {name}; os.kill(os.getppid(), 9); time.sleep(60)"
        killed = await rig.run(pod, ["python", "-c", kill], deps=(name,))
        assert killed.exit.exit_code == 137
        assert await counted() == b"3\n"
        assert await counted() == b"3\n"
        # a pod that changes hands drops its layer (its imports were the old owner's)
        new = f"{pod}-r"
        await rig.rt.recycle(pod, new)
        assert await rig.until(PodUp) == PodUp(new)
        assert (await rig.rt.ping(new))["layer"] is None


async def test_zygote_forks_with_warm_imports_and_clean_state(rig: Rig) -> None:
    pod = await rig.pod(RuntimeProfile("warm", preload=("xml.dom.minidom",)))
    probe = "import sys; print('xml.dom.minidom' in sys.modules)"
    assert (await rig.run(pod, ["python", "-c", probe])).stdout == b"True\n"
    # a plain process is a fresh interpreter: nothing preloaded
    assert (await rig.run(pod, ["sh", "-c", f'python -c "{probe}"'])).stdout == b"False\n"
    await rig.run(pod, ["python", "-c", "import xml.dom.minidom as m; m.LEAK = 1"])
    res = await rig.run(
        pod, ["python", "-c", "import xml.dom.minidom as m; print(hasattr(m, 'LEAK'))"]
    )
    assert res.stdout == b"False\n"
    pong = await rig.rt.ping(pod)
    assert set(pong["preloaded"]) == {"xml.dom.minidom"}


async def test_topology_and_env(rig: Rig) -> None:
    pod = await rig.pod()
    topo = Topology(rank=2, world_size=4, master_addr="10.0.0.7", master_port=29400)
    keys = "RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT MINE STOKER_GPUS"
    code = f"import os; print(' '.join(os.environ[k] for k in {keys!r}.split()))"
    res = await rig.run(pod, ["python", "-c", code], topology=topo, env={"MINE": "v"})
    assert res.stdout == b"2 4 0 10.0.0.7 29400 v vgpu0\n"
    with pytest.raises(ValueError, match="CUDA_VISIBLE_DEVICES"):
        await rig.rt.bind(
            pod, JobBinding(job="bad", argv=("true",), env={"CUDA_VISIBLE_DEVICES": "0"})
        )


async def test_standby_has_no_gpu_until_promoted(rig: Rig) -> None:
    pod = await rig.pod(standby=True)
    pong = await rig.rt.ping(pod)
    assert pong["cuda_visible_devices"] == "" and pong["gpus"] == ""
    with pytest.raises(PodBusy):
        await rig.rt.bind(pod, JobBinding(job="early", argv=("true",)))
    await rig.rt.promote(pod)
    assert await rig.until(PodUp) == PodUp(pod)
    res = await rig.run(pod, ["sh", "-c", 'echo "[$CUDA_VISIBLE_DEVICES] $STOKER_GPUS"'])
    assert res.stdout == b"[] vgpu0\n"  # a virtual slot has no CUDA device


async def test_pod_death_is_reported(rig: Rig) -> None:
    pod = await rig.pod()
    await rig.rt.bind(pod, JobBinding(job="doomed", argv=("sleep", "30")))
    await rig.until(JobRunning)
    os.kill(rig.rt.pod_info(pod).init_pid, 9)
    exited = await rig.until(JobExited)
    assert isinstance(exited, JobExited) and exited.failure is Failure.POD_DIED
    assert await rig.until(PodDown) == PodDown(pod, Failure.POD_DIED)
    assert await rig.rt.live_pods() == []


async def test_a_profile_whose_environment_does_not_build_fails_the_start_so(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runtime says what happened (the environment did not build), by its event and
    its error alike; what that means for a job is the core's answer."""

    def no_env(packages: tuple[str, ...]) -> None:
        raise EnvBuildError(f"{packages[0]}: no such package", "")

    monkeypatch.setattr(rig.rt.envs, "profile_env", no_env)
    profile = RuntimeProfile("broken", packages=("no-such-package",))
    with pytest.raises(PodStartError) as err:
        await rig.rt.start_pod("pod-e", profile, (), False)
    assert err.value.fault is StartFault.ENV_BUILD_FAILED
    failed = await rig.until(StartFailed)
    assert (failed.pod, failed.fault) == ("pod-e", StartFault.ENV_BUILD_FAILED)
    assert "no such package" in failed.detail
    assert await rig.rt.live_pods() == []


async def test_pods_outlive_the_runtime_and_are_readopted(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = LocalRuntime(state, gpu_slots=1)
    rig = Rig(first, first.events())
    pod = await rig.pod()
    await first.bind(pod, JobBinding(job="across", argv=("sh", "-c", "sleep 0.5; echo done")))
    await rig.until(JobRunning)
    await first.close()  # the broker goes away; the pod and its job keep running
    await asyncio.sleep(0.8)
    second = LocalRuntime(state, gpu_slots=1)
    rig2 = Rig(second, second.events())
    try:
        assert await second.live_pods() == [pod]
        res = await rig2.collect("across")  # held by the agent while nobody listened
        assert res.stdout == b"done\n" and res.exit.exit_code == 0
        res = await rig2.run(pod, ["echo", "again"])
        assert res.stdout == b"again\n"
    finally:
        await second.stop_all()
    assert await LocalRuntime(state, gpu_slots=1).live_pods() == []


@pytest.mark.torch
async def test_torch_profile_preloads_without_touching_cuda(rig: Rig) -> None:
    pytest.importorskip("torch")
    pod = await rig.pod(RuntimeProfile("torch-cpu", preload=("torch",)), standby=True)
    pong = await rig.rt.ping(pod)
    assert "torch" in pong["preloaded"] and pong["cuda_visible_devices"] == ""
    await rig.rt.promote(pod)
    await rig.until(PodUp)
    probe = (
        "import sys; warm = 'torch' in sys.modules\n"
        "import torch; print(warm, torch.cuda.is_initialized())"
    )
    res = await rig.run(pod, ["python", "-c", probe])
    assert res.stdout == b"True False\n", res.stderr


async def test_a_newer_runtime_takes_over_without_killing(tmp_path: Path) -> None:
    state = tmp_path / "state"
    old = LocalRuntime(state, gpu_slots=1)
    old_rig = Rig(old, old.events())
    pod = await old_rig.pod()
    new = LocalRuntime(state, gpu_slots=1)
    new_rig = Rig(new, new.events())
    try:
        assert await new.live_pods() == [pod]  # the agent now answers the new runtime
        down = await old_rig.until(PodDown)  # the old one lets go of the pod...
        assert down == PodDown(pod, Failure.POD_DIED)
        res = await new_rig.run(pod, ["echo", "alive"])  # ...which was not killed
        assert res.stdout == b"alive\n"
    finally:
        await new.stop_all()


async def test_profile_env_is_built_once_and_shared_read_only(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    name = f"stokerbase{uuid.uuid4().hex[:6]}"
    tiny_wheel(wheels, name, "in-profile-env")
    rt = LocalRuntime(tmp_path / "state", gpu_slots=2, find_links=(wheels,), no_index=True)
    rig = Rig(rt, rt.events())
    profile = RuntimeProfile("with-pkg", packages=(name,), preload=(name,))
    try:
        a = await rig.pod(profile)
        b = await rig.pod(profile)
        assert len(list((rt.envs.env_root).glob("*/.stoker-complete"))) == 1  # built once
        code = (
            f"import sys, {name}; print({name}.VALUE, sys.prefix.startswith('{rt.envs.env_root}'))"
        )
        for pod in (a, b):
            res = await rig.run(pod, ["python", "-c", code])
            assert res.stdout == b"in-profile-env True\n", res.stderr
        site = next(rt.envs.env_root.glob(f"*/lib/python*/site-packages/{name}"))
        res = await rig.run(a, ["sh", "-c", f"echo x > {site}/__init__.py || echo refused"])
        assert b"refused" in res.stdout + res.stderr
    finally:
        await rt.stop_all()


async def test_same_pod_id_in_two_runtimes_does_not_collide(tmp_path: Path) -> None:
    one = LocalRuntime(tmp_path / "one", gpu_slots=1)
    two = LocalRuntime(tmp_path / "two", gpu_slots=1)
    rig_one, rig_two = Rig(one, one.events()), Rig(two, two.events())
    pod = f"same-{uuid.uuid4().hex[:6]}"
    try:
        for rt, rig in ((one, rig_one), (two, rig_two)):
            await rt.start_pod(pod, RuntimeProfile("lim", pids_max=64), ("vgpu0",), False)
            await rig.until(PodUp)
        await one.stop_pod(pod)  # kills all of its own cgroup: not the other pod's
        res = await rig_two.run(pod, ["echo", "still here"])
        assert res.stdout == b"still here\n"
    finally:
        await one.stop_all()
        await two.stop_all()


def test_cgroup_only_ever_kills_its_own_group() -> None:
    """A state file pointing a pod at some other group kills nothing in it."""
    other = PodCgroup.create(f"stoker-other-{uuid.uuid4().hex[:6]}", None, None)
    if "pids" not in other.dirs:
        other.remove()
        pytest.skip(f"pids controller unavailable: {other.missing.get('pids')}")
    victim = subprocess.Popen(["sleep", "30"])
    try:
        other.attach(victim.pid)  # the group holds only the victim, whatever happens
        cg = PodCgroup.from_json(
            {"name": "stoker-x", "dirs": {"pids": str(other.dirs["pids"])}, "missing": {}}
        )
        assert cg.pids() == []
        cg.kill_all(timeout_s=0.1)
        assert victim.poll() is None
        assert other.pids() == [victim.pid]
    finally:
        victim.kill()
        victim.wait()
        other.remove()


def test_exposed_paths_under_tmp_are_bound_back(tmp_path: Path) -> None:
    # a checkout (and its .venv) under /tmp must stay reachable although every pod gets a
    # fresh, empty /tmp: CI clones into a folder that may well be there
    from stoker.runtime import sandbox

    tree = Path(tempfile.mkdtemp(prefix="stoker-expose-", dir="/tmp"))
    try:
        tree.chmod(0o755)
        (tree / "lib").mkdir(mode=0o755)
        (tree / "lib" / "marker.txt").write_text("reachable")
        (tree / "lib" / "marker.txt").chmod(0o644)
        (tree / "secret.txt").write_text("hidden")
        dirs = {}
        for name in ("ws", "sock", "code", "overlay", "checkpoint"):
            dirs[name] = tmp_path / name
            dirs[name].mkdir()
        spec = sandbox.SandboxSpec(
            binds=sandbox.pod_binds(*dirs.values()),
            argv=("sh", "-c", f"cat {tree}/lib/marker.txt; echo; ls {tree}"),
            drop_to=(65534, 65534) if os.geteuid() == 0 else None,
            expose=(tree / "lib",),
        )
        out = subprocess.run(
            sandbox.build_command(spec), capture_output=True, text=True, timeout=30, check=False
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["reachable", "lib"]  # only the exposed path shows
        # a hidden dir inside an exposed one (a data dir inside a checkout) stays hidden,
        # and an exposed path inside that is bound back
        (tree / "lib" / "data" / "venv").mkdir(parents=True)
        (tree / "lib" / "data" / "stoker.db").write_text("store")
        (tree / "lib" / "data" / "venv" / "py").write_text("interpreter")
        spec = dataclasses.replace(
            spec,
            argv=("sh", "-c", f"ls {tree}/lib/data; cat {tree}/lib/data/venv/py"),
            hide=(tree / "lib" / "data",),
            expose=(tree / "lib", tree / "lib" / "data" / "venv"),
        )
        out = subprocess.run(
            sandbox.build_command(spec), capture_output=True, text=True, timeout=30, check=False
        )
        assert out.stdout.split() == ["venv", "interpreter"], out.stderr
    finally:
        shutil.rmtree(tree)


async def test_an_upload_cut_by_a_recycle_never_lands_in_the_next_callers_pod(rig: Rig) -> None:
    """A file streamed into a pod whose keep-alive ends midway (the pod is recycled for the
    next caller) is refused, not put in the recycled workspace; a whole one lands."""
    from stoker.runtime.local import UnknownPod

    pod = await rig.pod()
    size = await rig.rt.write_file(pod, "dir/whole.bin", _pieces(b"a" * 10, 3), 1 << 20)
    assert size == 30
    res = await rig.run(pod, ["python", "-c", "print(open('dir/whole.bin').read())"])
    assert res.stdout == b"a" * 30 + b"\n"
    half = asyncio.Event()

    async def slow() -> AsyncIterator[bytes]:
        yield b"b" * 10
        half.set()
        await asyncio.sleep(0.5)
        yield b"b" * 10

    upload = asyncio.create_task(rig.rt.write_file(pod, "cut.bin", slow(), 1 << 20))
    await half.wait()
    new = f"{pod}-r"
    await rig.rt.recycle(pod, new)
    assert await rig.until(PodUp) == PodUp(new)
    with pytest.raises(UnknownPod):
        await upload
    look = "import os; print(sorted(os.listdir('.')))"
    assert (await rig.run(new, ["python", "-c", look])).stdout == b"[]\n"


async def _pieces(piece: bytes, n: int) -> AsyncIterator[bytes]:
    for _ in range(n):
        yield piece


async def test_a_jobs_checkpoint_is_kept_between_its_runs_and_dropped_at_its_end(rig: Rig) -> None:
    """What a run leaves in its checkpoint dir is kept on the runtime's disk per job and
    rank, put into the pod of the job's next run (another pod), and removed by a drop; a
    job that left nothing costs no kept dir."""
    save = "import os; open(os.environ['STOKER_CHECKPOINT_DIR'] + '/state', 'w').write('7')"
    load = "import os; print(open(os.environ['STOKER_CHECKPOINT_DIR'] + '/state').read())"
    first, second = await rig.pod(), await rig.pod()
    kept = rig.rt.state_dir / "checkpoints" / "ckpt-job" / "0"
    for pod, code in ((first, save), (second, load)):
        await rig.rt.bind(pod, JobBinding(job="ckpt-job", argv=("python", "-c", code)))
        res = await rig.collect("ckpt-job")
        assert res.exit.exit_code == 0, res.stderr
        if code == save:
            assert (kept / "state").read_text() == "7"  # kept on the runtime's disk
    assert res.stdout == b"7\n"  # the second run, in another pod, found it
    assert (kept / "state").read_text() == "7"  # and left it for a run after
    await rig.rt.drop_checkpoint("ckpt-job")
    assert not kept.parent.exists()
    quiet = await rig.run(second, ["python", "-c", "pass"])
    assert quiet.exit.exit_code == 0
    assert sorted(p.name for p in (rig.rt.state_dir / "checkpoints").iterdir()) == []
