"""A broker's owner SIGKILLed at several points leaves no sandbox, process or cgroup: an
embedded broker (demo, bench, tests) through its watchdog, a child ``stoker up`` (bench
local) through the kernel's parent-death signal."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leaks import leftovers

OWNER = r"""
import sys, time
from pathlib import Path
import stoker
from stoker.broker.config import BrokerConfig, BrokerProfile
from stoker.broker.embedded import EmbeddedBroker

data, point = Path(sys.argv[1]), sys.argv[2]
spares = 2 if point == "start" else 0
prof = BrokerProfile.simple("plain", min_warm=spares)
eb = EmbeddedBroker(BrokerConfig(data_dir=data, profiles=[prof], gpu_slots=3)).start()
with stoker.Client(eb.url, eb.admin_token) as admin:
    token = admin.create_tenant("t")
with stoker.Client(eb.url, token) as c:
    if point == "idle":  # a warm pod waiting for its caller
        assert c.run("plain", ["python", "-c", "pass"], reuse_tag="w").result(60).exit_code == 0
    elif point == "running":
        long = ["python", "-c", "import time; time.sleep(600)"]
        for tag in ("a", "b"):
            c.run("plain", long, reuse_tag=tag, wait_s=0)
        deadline = time.monotonic() + 60
        while sum(j["state"] == "running" for j in c.jobs()) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    print("READY", flush=True)
    time.sleep(600)
"""


def _pods(data: Path) -> int:
    pods = data / "runtime" / "pods"
    return sum(1 for d in pods.iterdir() if d.is_dir()) if pods.is_dir() else 0


def _gone(root: Path, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (left := leftovers(root)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"left behind: {left}"


@pytest.mark.parametrize("point", ["start", "idle", "running"])
def test_an_embedded_broker_dies_with_its_owner(tmp_path: Path, point: str) -> None:
    data = tmp_path / "data"
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(data), point],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        if point == "start":  # SIGKILL while its spare pods are still coming up
            deadline = time.monotonic() + 60
            while _pods(data) == 0:
                assert owner.poll() is None and time.monotonic() < deadline
                time.sleep(0.005)
        else:
            assert owner.stdout is not None
            line = owner.stdout.readline()
            assert line == b"READY\n", owner.stderr.read() if owner.stderr else line
            assert leftovers(tmp_path).sandboxes >= 1  # something to leave behind
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    _gone(tmp_path)
    assert _pods(data) == 0


def test_a_child_broker_dies_with_its_owner(tmp_path: Path) -> None:
    """``stoker bench local``'s child ``stoker up``, its owner SIGKILLed with a job running."""
    owner_code = r"""
import sys, time
from pathlib import Path
import stoker
from stoker.broker.bench import BrokerProcess

bp = BrokerProcess(Path(sys.argv[1]), [{"name": "plain", "gpus": 1}], gpu_slots=2)
with stoker.Client(bp.url, bp.admin_token) as admin:
    token = admin.create_tenant("t")
with stoker.Client(bp.url, token) as c:
    c.run("plain", ["python", "-c", "import time; time.sleep(600)"], reuse_tag="a", wait_s=0)
    while not any(j["state"] == "running" for j in c.jobs()):
        time.sleep(0.05)
print(bp.proc.pid, flush=True)
time.sleep(600)
"""
    owner = subprocess.Popen(
        [sys.executable, "-c", owner_code, str(tmp_path / "data")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert owner.stdout is not None
        line = owner.stdout.readline()
        assert line.strip().isdigit(), owner.stderr.read() if owner.stderr else line
        child = int(line)
        assert leftovers(tmp_path).sandboxes >= 1
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    _gone(tmp_path)
    assert _state(child) in (None, "Z"), "the child broker outlived its owner"


def _state(pid: int) -> str | None:
    """A process's state letter (Z: exited, not yet reaped by init), None when gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return None
    return next(line.split()[1] for line in status.splitlines() if line.startswith("State:"))
