"""The adversarial isolation suite: in each test a job actively tries an attack, through
real bubblewrap sandboxes (LocalRuntime) or a real broker, and the test fails if it works.

Every claim of docs/guides/isolation.md names its test here.
"""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
import zlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from runtime_rig import Result, Rig, procs_with
from stoker.api.deps import InvalidDeps, check_deps
from stoker.core.model import Failure
from stoker.runtime.base import PodDown, PodUp, RuntimeProfile
from stoker.runtime.code import InvalidCode
from stoker.runtime.local import LocalRuntime

ROOT = os.geteuid() == 0
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) not installed"),
    pytest.mark.timeout(90),
]
as_root = pytest.mark.skipif(not ROOT, reason="two uids per pod and tmpfs mounts need root")
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def data_dirs() -> Iterator[list[Path]]:
    """Two broker data dirs outside /tmp (as /var/lib/stoker would be): one under /var/tmp,
    one under the worktree, each with a world-readable store and token (the worst case)."""
    made = [
        Path(tempfile.mkdtemp(prefix="stoker-iso-", dir="/var/tmp")),
        Path(tempfile.mkdtemp(prefix=".stoker-iso-", dir=REPO)),
    ]
    try:
        for base in made:
            base.chmod(0o755)
            (base / "stoker.db").write_text("token-hash tenant-a-argv SECRET-IN-STORE")
            (base / "admin.token").write_text("SECRET-ADMIN-TOKEN")
            for f in base.iterdir():
                f.chmod(0o644)
        yield made
    finally:
        for base in made:
            shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
async def rig(data_dirs: list[Path]) -> AsyncIterator[Rig]:
    # the runtime's state dir lives in the first data dir, like the broker's
    rt = LocalRuntime(data_dirs[0] / "runtime", gpu_slots=2, hide=tuple(data_dirs))
    yield Rig(rt, rt.events())
    await rt.stop_all()


async def _py(rig: Rig, pod: str, code: str, **kw: object) -> Result:
    return await rig.run(pod, ["python", "-c", code], **kw)


def _json(res: Result) -> dict[str, object]:
    assert res.exit.exit_code == 0, res.stderr.decode()
    return json.loads(res.stdout.decode().strip().splitlines()[-1])


# --------------------------------------------------------------- 1. root through deps


@pytest.mark.parametrize(
    "dep",
    [
        "-r/etc/shadow",
        "--requirement=/etc/shadow",
        "-e/workspace",
        "--index-url=http://127.0.0.1:1/simple",
        "/workspace",
        "./evil",
        "file:///workspace",
        "evil @ file:///workspace",
        "evil @ https://127.0.0.1:1/evil.whl",
        "numpy; import os",
        "",
        # valid PEP 508 names, but the installer reads them as files in its working dir
        "foo.tar.gz",
        "foo-1.0-py3-none-any.whl",
        "Foo-1.0.ZIP",
        "evil.tgz==1",
        "pkgs/foo",
        "pkgs\\foo",
        "foo/bar>=1",
    ],
)
def test_deps_accept_only_pep508_requirements(dep: str) -> None:
    with pytest.raises(InvalidDeps, match=r"deps\[0\]"):
        check_deps([dep])
    assert check_deps(
        ["numpy>=1.26", "Requests[socks]==2.*; python_version>'3'", "zope.interface"]
    ) == ("numpy>=1.26", 'Requests[socks]==2.*; python_version > "3"', "zope.interface")


def _sdist(dest: Path, name: str, marker: Path) -> None:
    """A source-only package whose build writes ``marker`` on the host (if it ever runs)."""
    setup = f"open({str(marker)!r}, 'w').write('built as ' + str(__import__('os').getuid()))\n"
    setup += f"from setuptools import setup; setup(name={name!r}, version='1.0')\n"
    pkg_info = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"
    with tarfile.open(dest / f"{name}-1.0.tar.gz", "w:gz") as tar:
        for fname, text in (("setup.py", setup), ("PKG-INFO", pkg_info)):
            data = text.encode()
            info = tarfile.TarInfo(f"{name}-1.0/{fname}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


async def test_deps_cannot_read_host_files_or_run_code_on_the_host(
    data_dirs: list[Path], tmp_path: Path
) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    marker = data_dirs[0] / "pwned-by-build"
    _sdist(wheels, "stokerevil", marker)
    secret = data_dirs[0] / "host-secret.txt"
    secret.write_text("HOST-SECRET-LINE")
    secret.chmod(0o600)
    async with Rig.open(
        data_dirs[0] / "runtime",
        gpu_slots=1,
        find_links=(wheels,),
        no_index=True,
        hide=(data_dirs[0],),
    ) as rig:
        pod = await rig.pod()
        # the job plants a PEP 517 backend in its workspace, then names the workspace's host
        # path (read from mountinfo) as a dependency: on a host install it would run evil.py
        plant = (
            "open('pyproject.toml','w').write('[build-system]\\nrequires=[]\\n"
            'build-backend="evil"\\nbackend-path=["."]\\n\')\n'
            f"open('evil.py','w').write('open({str(marker)!r},\"w\").write(\"pwned\")')\n"
            "line = [l for l in open('/proc/self/mountinfo') if ' /workspace ' in l][0]\n"
            "print(line.split()[3])\n"
        )
        host_ws = (await _py(rig, pod, plant)).stdout.decode().strip()
        ws = str(rig.rt.pod_info(pod).workspace)
        for deps in (
            (f"-r{secret}",),
            (f"--requirement={secret}",),
            (ws,),
            (host_ws,),
            (f"evil @ file://{ws}",),
            ("stokerevil",),  # a valid name whose only release is an sdist: never built
        ):
            res = await rig.run(pod, ["true"], deps=deps)
            assert res.exit.failure is Failure.USER_ERROR, deps
            assert b"deps" in res.stderr
            assert b"HOST-SECRET-LINE" not in res.stderr + res.stdout
        assert not marker.exists(), marker.read_text()


# ------------------------------------------- 2. a job cannot reach the agent or its spare

_ATTACK_AGENT = r"""
import ctypes, json, os, signal, subprocess, time
libc = ctypes.CDLL(None, use_errno=True)
me = os.getpid()

def children(pid):
    try:
        return [int(c) for c in open(f"/proc/{pid}/task/{pid}/children").read().split()]
    except OSError:
        return []

# the agent (pid 2), the zygote (its child) and the next job's spare (the zygote's child
# beside this job, forked just after it started)
zygote = os.getppid()
for _ in range(200):
    spares = [c for c in children(zygote) if c != me]
    if spares:
        break
    time.sleep(0.01)

class Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

buf = ctypes.create_string_buffer(64)
local = Iovec(ctypes.cast(buf, ctypes.c_void_p), 64)
remote = Iovec(0x400000, 64)
worked, tried = [], []
for pid in [2, zygote, *spares]:
    tried.append(pid)
    for req in (16, 0x4206):  # PTRACE_ATTACH, PTRACE_SEIZE
        if libc.ptrace(req, pid, 0, 0) == 0:
            worked.append(f"ptrace {req:#x} {pid}")
    for mode in (os.O_RDWR, os.O_RDONLY):
        try:
            os.close(os.open(f"/proc/{pid}/mem", mode))
            worked.append(f"open mem {mode} {pid}")
        except OSError:
            pass
    for call in ("process_vm_readv", "process_vm_writev"):
        if getattr(libc, call)(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) >= 0:
            worked.append(f"{call} {pid}")
        elif ctypes.get_errno() not in (1, 13):  # EPERM, EACCES: refused, not just a bad address
            worked.append(f"{call} {pid} errno {ctypes.get_errno()}")
    try:
        os.kill(pid, 0)
        worked.append(f"signal {pid}")
    except PermissionError:
        pass
    try:
        open(f"/proc/{pid}/environ", "rb").read()
        worked.append(f"environ {pid}")
    except OSError:
        pass
for argv in (["unshare", "-Ur", "true"], ["unshare", "--user", "true"]):
    if subprocess.run(argv, capture_output=True).returncode == 0:
        worked.append(" ".join(argv))
status = open("/proc/self/status").read()
caps = {l.split(":")[0]: l.split()[1] for l in status.splitlines() if l.startswith("Cap")}
agent_uid = os.stat("/proc/2").st_uid
print(json.dumps({"worked": worked, "tried": tried, "uid": os.getuid(), "caps": caps}))
"""


@as_root
async def test_a_job_cannot_trace_read_write_or_signal_the_agent_and_spare(rig: Rig) -> None:
    pod = await rig.pod()
    res = _json(await _py(rig, pod, _ATTACK_AGENT))
    assert res["worked"] == [], res
    assert len(res["tried"]) >= 3  # the agent, the zygote and the next spare
    assert res["uid"] == 65534  # the job's uid, never the agent's (65533)
    caps = res["caps"]
    assert isinstance(caps, dict)
    assert all(int(caps[k], 16) == 0 for k in ("CapEff", "CapPrm", "CapAmb", "CapInh"))
    # the agent and spare are untouched: the next job runs from a clean fork
    again = await _py(rig, pod, "print('fine')")
    assert again.stdout == b"fine\n"


async def test_agent_zygote_and_spare_run_as_their_own_uid_and_are_not_dumpable(rig: Rig) -> None:
    pod = await rig.pod()
    for pid in _agent_zygote_spare(rig.rt, pod):
        status = Path(f"/proc/{pid}/status").read_text()
        uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
        assert uid == (65533 if ROOT else os.geteuid())
        # a non-dumpable process's /proc files belong to root, whatever its uid
        assert os.stat(f"/proc/{pid}/mem").st_uid == 0
        assert "Seccomp:\t2" in status  # filtered: the whole pod runs under the filter


# ---------------------------------------------- 3. the store and host dirs are invisible


async def test_pods_see_no_data_dir_home_project_or_service_dirs(
    rig: Rig, data_dirs: list[Path]
) -> None:
    pod = await rig.pod()
    code = f"""
import json, os
import sys
# the system, and the interpreter's own trees (large, and bound whole on purpose)
skip = {{"/proc", "/sys", "/usr", "/dev", sys.prefix, sys.base_prefix}}
found = []
for dirpath, dirs, files in os.walk("/"):
    dirs[:] = [d for d in dirs if os.path.join(dirpath, d) not in skip]
    found += [os.path.join(dirpath, f) for f in files if f in ("stoker.db", "admin.token")]
direct = []
for base in {[str(d) for d in data_dirs]!r}:
    for name in ("stoker.db", "admin.token", ""):
        try:
            direct.append(open(os.path.join(base, name)).read())
        except OSError:
            pass
tops = sorted(os.listdir("/"))
etc = sorted(os.listdir("/etc"))
print(json.dumps({{"found": found, "direct": direct, "tops": tops, "etc": etc}}))
"""
    res = _json(await _py(rig, pod, code))
    assert res["found"] == [] and res["direct"] == [], res
    tops = set(res["tops"])  # type: ignore[arg-type]
    for host_only in ("home", "var", "srv", "opt", "run", "mnt", "media", "boot"):
        assert host_only not in tops, tops
    etc = set(res["etc"])  # type: ignore[arg-type]
    assert not etc & {"shadow", "pip.conf", "npmrc", "ssh", "gitconfig", "postgresql"}
    assert {"passwd", "ld.so.cache", "ssl"} <= etc
    # the project's own files (beyond stoker's source) are not there either
    res2 = await _py(rig, pod, f"import os; print(os.path.exists({str(REPO / 'README.md')!r}))")
    assert res2.stdout == b"False\n"


@as_root
async def test_cgroup_fs_shows_only_the_pods_own_groups(rig: Rig) -> None:
    a, b = await rig.pod(), await rig.pod()
    other = rig.rt.pod_info(b).cgroup
    own = rig.rt.pod_info(a).cgroup
    code = "import os\nfor d, ds, fs in os.walk('/sys/fs/cgroup'):\n    print(d)\n"
    listing = (await _py(rig, a, code)).stdout.decode()
    assert other not in listing and own not in listing  # not even its own name shows
    assert "process_api" not in listing and "system.slice" not in listing
    pids_max = "pids.max" if "v2" in rig.rt.pod_info(a).cgroup_dirs else "pids/pids.max"
    limit = await rig.run(a, ["cat", f"/sys/fs/cgroup/{pids_max}"])
    assert limit.stdout == b"256\n"  # its own limits are readable where the pod expects them


async def test_no_other_pod_or_host_process_is_visible(rig: Rig) -> None:
    a, b = await rig.pod(), await rig.pod()
    other_ws = rig.rt.pod_info(b).workspace
    (other_ws / "theirs").write_text("B-SECRET")
    code = f"""
import json, os
cmds = []
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            cmds.append(open(f"/proc/{{p}}/cmdline", "rb").read().decode(errors="replace"))
        except OSError:
            pass
seen = []
for path in ({str(other_ws / "theirs")!r}, "/proc/1/root/workspace/theirs"):
    try:
        seen.append(open(path).read())
    except OSError:
        pass
print(json.dumps({{"cmds": cmds, "seen": seen}}))
"""
    res = _json(await _py(rig, a, code))
    assert res["seen"] == []
    cmds = res["cmds"]
    assert isinstance(cmds, list) and len(cmds) <= 6, cmds  # bwrap, agent, spare, this job
    assert not any("pytest" in c for c in cmds)


# ---------------------------------------------------------------- GPUs

# two cards of a mixed host, as NVML reports them: NVML's index (PCI order), CUDA's would
# put the faster A100 first; the device nodes' minors are not the indices either
_CARDS = (
    ("Tesla T4", "GPU-6a1f0c3e-0000-4000-8000-00000000a0a0", 1, 15360),
    ("NVIDIA A100-SXM4-80GB", "GPU-9b2e1d4f-0000-4000-8000-00000000b1b1", 0, 81920),
)


@pytest.fixture
def mixed_gpu_host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """NVML of the real client library answering for two cards (no GPU here: its driver
    calls are replaced, its memory record is the library's own), and a device dir with
    their nodes and the driver's control nodes, each file naming what it stands for."""
    import pynvml

    def memory(i: int) -> Any:
        info = pynvml.c_nvmlMemory_t()
        info.total = _CARDS[i][3] * 1024 * 1024
        return info

    for name, fn in {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: len(_CARDS),
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetName": lambda i: _CARDS[i][0],
        "nvmlDeviceGetUUID": lambda i: _CARDS[i][1],
        "nvmlDeviceGetMinorNumber": lambda i: _CARDS[i][2],
        "nvmlDeviceGetMemoryInfo": memory,
    }.items():
        monkeypatch.setattr(pynvml, name, fn)
    dev = tmp_path / "dev"
    dev.mkdir()
    dev.chmod(0o755)
    names = [f"nvidia{minor}" for _, _, minor, _ in _CARDS] + ["nvidiactl", "nvidia-uvm"]
    for name in names:
        (dev / name).write_text(name)
        (dev / name).chmod(0o644)
    return dev


# the job drops the binding it was given and looks for every card's node
_GPU_GRAB = """
import json, os
visible = os.environ.pop("CUDA_VISIBLE_DEVICES", None)
read = {}
for name in sorted(os.listdir("/dev")):
    if name.startswith("nvidia"):
        with open(f"/dev/{name}") as f:
            read[name] = f.read()
for n in range(8):
    try:
        read.setdefault(f"nvidia{n}", open(f"/dev/nvidia{n}").read())
    except OSError:
        pass
print(json.dumps({"visible": visible, "read": read}))
"""


async def test_a_job_reaches_only_its_own_gpus(mixed_gpu_host: Path, tmp_path: Path) -> None:
    """On a host of two real cards a pod is told its card by UUID (an NVML index would name
    the other card to CUDA here), and a job that drops CUDA_VISIBLE_DEVICES still finds no
    other pod's card: only its own card's device node and the control nodes are in the
    pod; a promoted standby pod likewise."""
    async with Rig.open(tmp_path / "state", dev_dir=mixed_gpu_host) as rig:
        by_id = {d.id: (d.uuid, d.minor, d.virtual) for d in rig.rt.devices.values()}
        assert by_id == {"gpu0": (_CARDS[0][1], 1, False), "gpu1": (_CARDS[1][1], 0, False)}
        t4 = await rig.pod(gpus=("gpu0",))
        a100 = await rig.pod(standby=True, gpus=("gpu1",))
        assert (await rig.rt.ping(a100))["cuda_visible_devices"] == ""
        await rig.rt.promote(a100)
        assert await rig.until(PodUp) == PodUp(a100)
        control = {"nvidiactl": "nvidiactl", "nvidia-uvm": "nvidia-uvm"}
        for pod, (_, uuid_, minor, _) in ((t4, _CARDS[0]), (a100, _CARDS[1])):
            res = _json(await _py(rig, pod, _GPU_GRAB))
            assert res == {
                "visible": uuid_,
                "read": {**control, f"nvidia{minor}": f"nvidia{minor}"},
            }, res


# ---------------------------------------------------------------- network


_FIND_INTERFACES = """
import json, os, sys
names = set(sys.argv[1:])
try:
    listed = os.listdir("/sys/class/net")
except OSError:
    listed = []
found = [os.path.join(d, n) for d, ds, fs in os.walk("/sys") for n in ds + fs if n in names]
proc = [line.split(":")[0].strip() for line in open("/proc/net/dev").readlines()[2:]]
print(json.dumps({"listed": listed, "found": found, "proc": proc}))
"""


async def test_a_pod_sees_no_host_network_interface_in_sys(rig: Rig) -> None:
    # sysfs is the host's, bound read-only: without a mask /sys/class/net (and the devices'
    # net/ dirs it links to) name every host interface to a pod of its own network
    host = sorted(os.listdir("/sys/class/net"))
    assert host, "no network interface on the host to look for"
    pod = await rig.pod()
    res = await rig.run(pod, ["python", "-c", _FIND_INTERFACES, *host])
    seen = json.loads(res.stdout.decode().strip().splitlines()[-1])
    assert seen["listed"] == [] and seen["found"] == [], seen
    assert set(seen["proc"]) <= {"lo"}, seen  # its own namespace: its own loopback only


async def test_no_egress_no_loopback_no_abstract_sockets(rig: Rig) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    abstract = socket.socket(socket.AF_UNIX)
    name = f"stoker-iso-{uuid.uuid4().hex[:8]}"
    abstract.bind("\0" + name)
    abstract.listen()
    try:
        pod = await rig.pod()
        code = f"""
import socket
worked = []
for family, addr in ((socket.AF_INET, ("127.0.0.1", {port})), (socket.AF_INET, ("1.1.1.1", 53)),
                     (socket.AF_UNIX, "\\0{name}")):
    s = socket.socket(family)
    s.settimeout(2)
    try:
        s.connect(addr)
        worked.append(str(addr))
    except OSError:
        pass
print(worked)
"""
        res = await _py(rig, pod, code)
        assert res.stdout == b"[]\n", res.stderr
    finally:
        server.close()
        abstract.close()


# ----------------------------------------------- 5. nothing crosses a recycle or a job

_PLANT = r"""
import ctypes, ctypes.util, os, subprocess
for path in ("/tmp/a-secret", "/dev/shm/a-secret", "/workspace/a-secret", "/stoker/sock/a-secret"):
    try:
        open(path, "w").write("A-SECRET")
    except OSError as exc:
        print("refused", path)
rt = ctypes.CDLL(ctypes.util.find_library("rt"), use_errno=True)
fd = rt.mq_open(b"/a-secret", os.O_CREAT | os.O_RDWR, 0o644, None)
assert fd >= 0, ctypes.get_errno()
assert rt.mq_send(fd, b"A-SECRET", 8, 0) == 0
for opt in (["-M", "4096"], ["-Q"], ["-S", "1"]):
    subprocess.run(["ipcmk", *opt], check=True, capture_output=True)
"""

_LOOK = r"""
import ctypes, ctypes.util, json, os, subprocess
left = {}
for d in ("/tmp", "/dev/shm", "/dev/mqueue", "/stoker/sock", "/workspace"):
    try:  # root's entries are the host's read-only binds (a checkout under /tmp), not A's
        left[d] = sorted(e.name for e in os.scandir(d) if e.stat(follow_symlinks=False).st_uid)
    except OSError:
        left[d] = "unreadable"
rt = ctypes.CDLL(ctypes.util.find_library("rt"), use_errno=True)
left["mq"] = rt.mq_open(b"/a-secret", os.O_RDONLY, 0, None) >= 0
ipcs = subprocess.run(["ipcs", "-a"], capture_output=True, text=True).stdout
left["ipc"] = [l for l in ipcs.splitlines() if l.startswith("0x")]
print(json.dumps(left))
"""


@pytest.mark.parametrize("mode", ["scrub", "restart"])
async def test_tenant_b_finds_nothing_of_tenant_a(data_dirs: list[Path], mode: str) -> None:
    marker = f"{uuid.uuid4().int % 900 + 100}.77"
    hide = (data_dirs[0],)
    async with Rig.open(data_dirs[0] / "runtime", gpu_slots=1, recycle=mode, hide=hide) as rig:
        pod = await rig.pod()
        planted = await _py(rig, pod, _PLANT)
        assert planted.exit.exit_code == 0, planted.stderr
        assert planted.stdout == b"refused /stoker/sock/a-secret\n"  # the agent's dir only
        # a survivor that detached and ignores SIGTERM, started by the same tenant
        await rig.run(pod, ["sh", "-c", f"setsid sh -c \"trap '' TERM; exec sleep {marker}\" &"])
        assert procs_with(f"sleep {marker}") == []
        # the same (tenant, tag) again: only the workspace is kept
        same = _json(await _py(rig, pod, _LOOK))
        assert same == {
            "/tmp": [],
            "/dev/shm": [],
            "/dev/mqueue": [],
            "/stoker/sock": "unreadable",
            "/workspace": ["a-secret"],
            "mq": False,
            "ipc": [],
        }
        await _py(rig, pod, _PLANT)
        new = f"{pod}-b"
        await rig.rt.recycle(pod, new)
        assert await rig.until(PodUp) == PodUp(new)
        other = _json(await _py(rig, new, _LOOK))
        assert other == {**same, "/workspace": []}


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _agent_zygote_spare(rt: LocalRuntime, pod: str) -> tuple[int, int, int]:
    """The pod's agent, its zygote, and the zygote's one child (the spare, between jobs)."""
    agent = _children(rt.pod_info(pod).init_pid)[0]
    zygote = _children(agent)[0]
    for _ in range(500):  # the spare is forked a moment after a job starts
        if spares := _children(zygote):
            return agent, zygote, spares[0]
        time.sleep(0.01)
    raise AssertionError("no spare")


def _spare_of(rt: LocalRuntime, pod: str) -> int:
    return _agent_zygote_spare(rt, pod)[2]


async def test_a_recycle_discards_the_spare_and_forks_a_clean_one(rig: Rig) -> None:
    pod = await rig.pod()
    await _py(rig, pod, "print(1)")
    await asyncio.sleep(0.1)  # the next spare is forked as the job starts
    before = _spare_of(rig.rt, pod)
    new = f"{pod}-n"
    await rig.rt.recycle(pod, new)
    await rig.until(PodUp)
    after = _spare_of(rig.rt, new)
    assert after != before and not Path(f"/proc/{before}").exists()


_SCAN_OWN_MEMORY = r"""
import re
found = set()
with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
    for line in maps:
        span, perms = line.split()[:2]
        if not perms.startswith("r"):
            continue
        lo, hi = (int(x, 16) for x in span.split("-"))
        try:
            mem.seek(lo)
            data = mem.read(hi - lo)
        except (OSError, OverflowError, ValueError):
            continue
        found.update(m.group(1) for m in re.finditer(rb"SECRET-OF-A-([0-9a-f]{32})", data))
print(sorted(x.decode() for x in found))
"""


async def test_no_job_inherits_an_earlier_jobs_data_in_memory(rig: Rig) -> None:
    """A zygote job's memory is a copy of its parent's: the parent (the zygote) never held a
    bind, so tenant B finds none of tenant A's env in its own memory."""
    pod = await rig.pod()
    secret = uuid.uuid4().hex
    env = {"API_KEY": f"SECRET-OF-A-{secret}"}
    for _ in range(3):  # A's secret passes through the agent several times
        res = await _py(rig, pod, "import os; print(len(os.environ['API_KEY']))", env=env)
        assert res.stdout == b"44\n"
    new = f"{pod}-b"
    await rig.rt.recycle(pod, new)
    await rig.until(PodUp)
    res = await _py(rig, new, _SCAN_OWN_MEMORY)
    assert res.exit.exit_code == 0, res.stderr
    assert secret not in res.stdout.decode()


async def test_writable_places_are_only_the_scrubbed_ones(rig: Rig) -> None:
    pod = await rig.pod()
    code = r"""
import json, os
writable = []
for line in open("/proc/self/mountinfo"):
    parts = line.split()
    point, opts = parts[4], parts[5].split(",")
    if point.startswith(("/proc", "/sys")) or "ro" in opts:
        continue
    for dirpath, dirs, files in os.walk(point):
        if os.access(dirpath, os.W_OK):
            writable.append(dirpath)
print(json.dumps(sorted(set(writable))))
"""
    found = json.loads((await _py(rig, pod, code)).stdout)
    # the checkpoint dir is the job's own, emptied at every bind (test_broker_gfs)
    allowed = ("/tmp", "/dev/shm", "/dev/mqueue", "/workspace", "/stoker/checkpoint")
    assert [w for w in found if not w.startswith(allowed)] == [], found


async def test_daemons_die_with_the_job_and_the_recycle(rig: Rig) -> None:
    pod = await rig.pod()
    base = uuid.uuid4().int % 900 + 100
    markers = [f"sleep {base}.{i}3" for i in range(3)]
    code = f"""
import os, signal, subprocess
if os.fork() == 0:  # a classic double-fork daemon
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", {markers[0].split()!r})
    os._exit(0)
subprocess.Popen({markers[1].split()!r}, start_new_session=True)
subprocess.Popen(["sh", "-c", "trap '' TERM HUP INT; exec {markers[2]}"], start_new_session=True)
print("left them")
"""
    res = await _py(rig, pod, code)
    assert res.stdout == b"left them\n"
    assert [m for m in markers if procs_with(m)] == []
    await rig.run(pod, ["sh", "-c", f"setsid {markers[0]} &"])
    new = f"{pod}-r"
    await rig.rt.recycle(pod, new)
    await rig.until(PodUp)
    assert [m for m in markers if procs_with(m)] == []


# ---------------------------------------------------- 8. a tenant cannot orphan its pod


async def test_a_job_cannot_connect_to_the_agent(rig: Rig) -> None:
    pod = await rig.pod()
    code = """
import socket
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("/stoker/sock/agent.sock")
    s.sendall(b'{"op":"shutdown"}\\n')
    print("connected", s.recv(1000))
except OSError as exc:
    print("refused")
"""
    res = await _py(rig, pod, code)
    assert res.stdout == b"refused\n"
    assert (await _py(rig, pod, "print(1)")).stdout == b"1\n"  # still the runtime's pod
    assert await rig.rt.live_pods() == [pod]


async def test_agent_refuses_peers_inside_the_pod_even_with_access(rig: Rig) -> None:
    """SO_PEERCRED, the second guard: a process of the pod that could reach the socket file
    (here: the directory opened up from outside) is still turned away."""
    pod = await rig.pod()
    sock_dir = rig.rt.pods_dir / pod / "sock"
    sock_dir.chmod(0o777)
    (sock_dir / "agent.sock").chmod(0o777)
    code = """
import socket
s = socket.socket(socket.AF_UNIX)
s.connect("/stoker/sock/agent.sock")
s.settimeout(5)
print(repr(s.recv(1000)))
"""
    res = await _py(rig, pod, code)
    assert res.stdout == b"b''\n", res.stdout  # accepted by the kernel, closed unheard
    assert (await _py(rig, pod, "print(1)")).stdout == b"1\n"


async def test_a_killed_spare_is_replaced(rig: Rig) -> None:
    pod = await rig.pod()
    os.kill(_spare_of(rig.rt, pod), 9)  # from outside: no job may (see the test above)
    await asyncio.sleep(0.2)
    res = await _py(rig, pod, "print('after')")
    assert res.stdout == b"after\n" and res.exit.exit_code == 0


async def test_oversized_argv_fails_the_job_not_the_pod(rig: Rig) -> None:
    pod = await rig.pod()
    res = await rig.run(pod, ["echo", "x" * (17 * 1024 * 1024)])
    assert res.exit.failure is Failure.USER_ERROR and b"too large" in res.stderr
    assert (await rig.run(pod, ["echo", "ok"])).stdout == b"ok\n"


def _evil_tar(kind: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("x")
        if kind in ("dotdot", "absolute"):
            info = tarfile.TarInfo("../../escape" if kind == "dotdot" else "/tmp/escape")
            info.size = 1
            tar.addfile(info, io.BytesIO(b"e"))
        elif kind in ("abs-symlink", "dotdot-symlink"):
            info.type = tarfile.SYMTYPE
            info.linkname = "/etc/passwd" if kind == "abs-symlink" else "../../../etc/passwd"
            tar.addfile(info)
        elif kind == "hardlink":
            info.type = tarfile.LNKTYPE
            info.linkname = "/etc/passwd"
            tar.addfile(info)
        elif kind == "device":
            info.type = tarfile.CHRTYPE
            info.devmajor, info.devminor = 1, 3
            tar.addfile(info)
        elif kind == "fifo":
            info.type = tarfile.FIFOTYPE
            tar.addfile(info)
    return buf.getvalue()


@pytest.mark.parametrize(
    "kind", ["dotdot", "absolute", "abs-symlink", "dotdot-symlink", "hardlink", "device", "fifo"]
)
async def test_hostile_archives_fail_the_job_not_the_pod(rig: Rig, kind: str) -> None:
    pod = await rig.pod()
    digest = await rig.rt.put_code(_evil_tar(kind))
    res = await rig.run(pod, ["sh", "-c", "test -e /tmp/escape || echo no"], code_digest=digest)
    if kind == "absolute":  # made relative: it lands inside the workspace, and only there
        assert res.exit.exit_code == 0 and res.stdout == b"no\n"
        assert (rig.rt.pod_info(pod).workspace / "tmp" / "escape").exists()
    else:
        assert res.exit.failure is Failure.USER_ERROR
        assert b"code archive refused" in res.stderr
    assert (await rig.run(pod, ["echo", "ok"])).stdout == b"ok\n"
    assert await rig.rt.live_pods() == [pod]


async def test_an_agent_that_hangs_up_unasked_is_stopped_not_forgotten(rig: Rig) -> None:
    pod = await rig.pod()
    init = rig.rt.pod_info(pod).init_pid
    rec = rig.rt._pods[pod]
    assert rec.link.writer is not None
    rec.link.writer.write(b"not a message\n")  # the agent drops this connection, without a word
    assert await rig.until(PodDown) == PodDown(pod, Failure.POD_DIED)
    # killed, not left running untracked (at most a zombie a moment, until it is reaped)
    stat = Path(f"/proc/{init}/stat")
    assert not stat.exists() or stat.read_text().rpartition(")")[2].split()[0] in "ZX"
    assert not (rig.rt.pods_dir / pod).exists()


_DIE_MID_START = """
import asyncio, os, sys
from pathlib import Path
from stoker.runtime.base import RuntimeProfile
from stoker.runtime.local import LocalRuntime

async def hang(self, rec, deadline):
    Path(sys.argv[2]).write_text("spawned")
    await asyncio.sleep(3600)  # the runtime dies here: after the spawn, before its hello

LocalRuntime._connect = hang
async def main():
    rt = LocalRuntime(sys.argv[1], gpu_slots=1)
    await rt.start_pod("orphan", RuntimeProfile("plain"), ("vgpu0",), False)
asyncio.run(main())
"""


async def test_a_pod_whose_runtime_died_mid_start_is_adopted(data_dirs: list[Path]) -> None:
    state = data_dirs[0] / "runtime"
    flag = data_dirs[0] / "spawned"
    proc = subprocess.Popen([sys.executable, "-c", _DIE_MID_START, str(state), str(flag)])
    try:
        for _ in range(3000):
            if flag.exists():
                break
            await asyncio.sleep(0.01)
        assert flag.exists()
    finally:
        proc.kill()
        proc.wait()
    (state / "pods" / "half").mkdir()  # one that died before its record: nothing started
    async with Rig.open(state, gpu_slots=1) as rig:
        assert await rig.rt.live_pods() == ["orphan"]  # tracked again, not orphaned
        assert not (state / "pods" / "half").exists()
        assert (await rig.run("orphan", ["echo", "adopted"])).stdout == b"adopted\n"
    assert procs_with("--pod orphan") == []


# ------------------------------------------------------------------ 11. limits


def _gzip_bomb(size: int) -> bytes:
    """A real gzip file of a tar archive holding ``size`` zero bytes, made in a second: the
    deflate stream of a fully flushed 1 MiB of zeros is the same bytes every time, so it is
    compressed once and repeated; the gzip trailer (CRC-32, length) is computed over it all."""
    header = tarfile.TarInfo("zeros")
    header.size = size
    head = header.tobuf(format=tarfile.GNU_FORMAT)
    chunk = 1 << 20
    total = len(head) + size + 1024  # the member, padded (a multiple of 1 MiB), two end blocks
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    body = [c.compress(head), c.flush(zlib.Z_FULL_FLUSH)]
    block = c.compress(bytes(chunk)) + c.flush(zlib.Z_FULL_FLUSH)
    body.append(block * (size // chunk))
    body.append(c.compress(bytes(1024)) + c.flush())
    crc = zlib.crc32(head)
    zeros = bytes(chunk)
    for _ in range(size // chunk):
        crc = zlib.crc32(zeros, crc)
    crc = zlib.crc32(bytes(1024), crc)
    gz_head = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    return gz_head + b"".join(body) + struct.pack("<II", crc, total & 0xFFFFFFFF)


def test_gzip_bomb_and_member_flood_are_refused(tmp_path: Path) -> None:
    from stoker.runtime.code import CodeStore

    store = CodeStore(tmp_path / "code")
    bomb = _gzip_bomb(1100 * 1024 * 1024)  # 1.1 GiB unpacked
    assert len(bomb) < 2 * 1024 * 1024  # a ~1 MiB upload
    with gzip.open(io.BytesIO(bomb)) as real:  # a real archive: its member reads as zeros
        assert real.read(600)[512:] == bytes(88)
    with pytest.raises(InvalidCode, match="unpacks to more than"):
        store.put(bomb)
    flood = io.BytesIO()
    with tarfile.open(fileobj=flood, mode="w:gz") as tar:
        for i in range(20_001):
            tar.addfile(tarfile.TarInfo(f"f{i}"))
    with pytest.raises(InvalidCode, match="more than 20000 members"):
        store.put(flood.getvalue())


async def test_output_is_capped_with_a_marker(rig: Rig) -> None:
    pod = await rig.pod(RuntimeProfile("chatty", output_mb=1))
    res = await rig.run(pod, ["sh", "-c", "head -c 5000000 /dev/zero; echo done >&2"])
    assert res.exit.exit_code == 0
    total = len(res.stdout) + len(res.stderr)
    assert total < 1024 * 1024 + 100
    assert res.stdout.endswith(b"[stoker: output truncated at 1048576 bytes]\n")
    assert b"done" not in res.stderr  # past the cap nothing more comes through


async def test_default_limits_hold(rig: Rig) -> None:
    pod = await rig.pod(RuntimeProfile("tight", tmp_mb=8, workspace_mb=16))
    code = """
import json, os
out = {}
for path in ("/tmp/fill", "/dev/shm/fill", "/workspace/fill"):
    n = 0
    try:
        with open(path, "wb") as fh:
            for _ in range(64):
                fh.write(bytes(1 << 20))
                n += 1
            fh.flush()
    except OSError:
        pass
    out[path] = n
    os.unlink(path)
print(json.dumps(out))
"""
    res = _json(await _py(rig, pod, code))
    assert res["/tmp/fill"] <= 8 and res["/dev/shm/fill"] <= 8  # type: ignore[operator]
    if ROOT:
        assert res["/workspace/fill"] <= 16  # type: ignore[operator]
    plain = await rig.pod()
    v2 = "v2" in rig.rt.pod_info(plain).cgroup_dirs
    want = {  # controller: (file on v1, file on v2, the default's value)
        "pids": ("pids/pids.max", "pids.max", "256"),
        "cpu": ("cpu/cpu.cfs_quota_us", "cpu.max", "100000 100000" if v2 else "100000"),
        "memory": ("memory/memory.limit_in_bytes", "memory.max", str(2048 * 1024 * 1024)),
    }
    for ctrl, (v1_file, v2_file, value) in want.items():
        if ctrl not in rig.rt.pod_info(plain).limits_missing:
            path = f"/sys/fs/cgroup/{v2_file if v2 else v1_file}"
            res2 = await rig.run(plain, ["cat", path])
            assert res2.stdout.decode().strip() == value, (ctrl, res2)


# ---------------------------------------------------------- through a real broker


def test_through_a_broker_tenants_reach_no_store_host_agent_or_each_other(
    data_dirs: list[Path],
) -> None:
    from stoker.broker.config import BrokerConfig, BrokerProfile
    from stoker.broker.embedded import EmbeddedBroker

    data = data_dirs[0] / "broker"
    cfg = BrokerConfig(data_dir=data, profiles=[BrokerProfile.simple("plain")], gpu_slots=1)
    with EmbeddedBroker(cfg) as eb:
        auth = {"Authorization": f"Bearer {eb.admin_token}"}
        admin = httpx.Client(base_url=eb.url, headers=auth)

        def tenant(name: str) -> httpx.Client:
            tok = admin.post("/v1/tenants", json={"name": name}).json()["token"]
            auth = {"Authorization": f"Bearer {tok}"}
            return httpx.Client(base_url=eb.url, headers=auth, timeout=60)

        def run(api: httpx.Client, argv: list[str], **kw: object) -> tuple[dict[str, Any], str]:
            body = {"profile": "plain", "argv": argv, "reuse_tag": "t", **kw}
            r = api.post("/v1/jobs", json=body)
            if r.status_code == 422:  # refused at submit: as good as refused at bind
                return {"state": "rejected", "detail": r.json()}, ""
            assert r.status_code == 201, r.text
            job = api.get(f"/v1/jobs/{r.json()['id']}/wait", params={"timeout_s": 60}).json()
            out = api.get(f"/v1/jobs/{job['id']}/output", params={"follow": False}).text
            return job, _decode(out)

        mallory, bob = tenant("mallory"), tenant("bob")
        paths = (str(data), str(cfg.db_path), str(cfg.admin_token_path))
        look = f"import os; print(*(os.path.exists(p) for p in {paths!r}))"
        job, out = run(mallory, ["python", "-c", look])
        assert job["exit_code"] == 0 and out == "False False False\n", (job, out)
        token_text = cfg.admin_token_path.read_text().strip()
        for dep in (f"-r{cfg.admin_token_path}", str(data), f"x @ file://{data}"):
            job, out = run(mallory, ["true"], deps=[dep])
            assert job["state"] == "rejected", job  # a 422 naming the item
            assert job["detail"]["field"].endswith("deps"), job
            assert token_text not in json.dumps(job)
        if ROOT:
            job, out = run(mallory, ["python", "-c", _ATTACK_AGENT])
            assert json.loads(out.splitlines()[-1])["worked"] == [], out
        job, out = run(mallory, ["python", "-c", _PLANT])
        assert job["exit_code"] == 0, out
        job, out = run(bob, ["python", "-c", _LOOK], reuse_tag="t")
        assert json.loads(out.splitlines()[-1]) == {
            "/tmp": [],
            "/dev/shm": [],
            "/dev/mqueue": [],
            "/stoker/sock": "unreadable",
            "/workspace": [],
            "mq": False,
            "ipc": [],
        }


def _decode(ndjson: str) -> str:
    import base64

    lines = [json.loads(x) for x in ndjson.splitlines() if x.strip()]
    return b"".join(base64.b64decode(m["data"]) for m in lines if "data" in m).decode()
