"""Nothing outlives its owner: demo, bench, an embedded broker and ``stoker up`` leave no
sandbox, process or pod cgroup of their data dirs (counted before, during and after), and a
second broker on a data dir fails at once, touching nothing."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from leaks import leftovers, reap
from stoker.broker.bench import BrokerProcess, run_bench, run_demo

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) not installed"),
    pytest.mark.timeout(300),
]
PROFILE = [{"name": "plain"}]
SLEEP = ["python", "-c", "import time; print('up', flush=True); time.sleep(120)"]


def _admin(bp: BrokerProcess) -> httpx.Client:
    return httpx.Client(base_url=bp.url, headers={"Authorization": f"Bearer {bp.admin_token}"})


def _api(bp: BrokerProcess) -> httpx.Client:
    with _admin(bp) as a:
        token = a.post("/v1/tenants", json={"name": "t"}).json()["token"]
    return httpx.Client(base_url=bp.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


def _running(api: httpx.Client, argv: list[str], tag: str = "x") -> str:
    body = {"profile": "plain", "argv": argv, "reuse_tag": tag}
    job = api.post("/v1/jobs", json=body).json()["id"]
    deadline = time.monotonic() + 60
    while api.get(f"/v1/jobs/{job}").json()["state"] != "running":
        assert time.monotonic() < deadline, "job did not start"
        time.sleep(0.05)
    return job


def _settled(bp: BrokerProcess) -> None:
    """Wait until every pod of the broker is up or gone: none starting, recycling or
    stopping. A pod in between has processes that are about to exec or die (the cgroup
    wrapper that becomes bwrap, a stopped pod's sandbox and its umount), so a snapshot
    taken then loses entries that nobody else touched."""
    steady = {"standby", "warm", "active"}
    deadline = time.monotonic() + 60
    with _admin(bp) as a:
        while any(p["state"] not in steady for p in a.get("/v1/pods").json()):
            assert time.monotonic() < deadline, "the pods did not settle"
            time.sleep(0.05)


def test_demo_leaves_nothing(tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp_path = tmp_path_factory.mktemp("d")  # short: a pod's socket path must fit AF_UNIX
    assert not leftovers(tmp_path)
    res = run_demo(2, work_dir=tmp_path)
    assert sum(m["paths"]["cold"] for m in res["modes"].values()) >= 3  # pods were started
    assert not leftovers(tmp_path), leftovers(tmp_path)


def test_bench_leaves_nothing(tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp_path = tmp_path_factory.mktemp("b")
    work = tmp_path / "w"
    # one throughput run of two callers: what is left is the question, not the figures
    run_bench(tmp_path / "out", 2, 1, 1, 0.5, torch=False, work_dir=work, callers=(2,))
    assert (tmp_path / "out" / "results.json").exists()
    assert list(work.glob("*/runtime/pods")), "the bench started no broker"
    assert not leftovers(work), leftovers(work)


def test_stoker_up_stops_its_pods_on_sigterm(tmp_path: Path) -> None:
    bp = BrokerProcess(tmp_path / "data", PROFILE, gpu_slots=2)
    try:
        api = _api(bp)
        job = _running(api, SLEEP)
        during = leftovers(tmp_path)
        assert during.sandboxes >= 1 and during.cgroups, during
        # a follower holds a stream open: the shutdown is bounded all the same (the stream
        # is cut once the grace is over)

        def follow() -> None:
            with contextlib.suppress(httpx.TransportError):
                api.get(f"/v1/jobs/{job}/output", timeout=None)

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        time.sleep(0.2)
    finally:
        bp.stop()  # SIGTERM, as a service manager sends it (SIGKILL after 60 s)
    follower.join(10)
    assert not follower.is_alive()
    # uvicorn re-raises the SIGTERM once it has shut down (lifespan, pods and all)
    assert bp.proc.returncode in (0, -signal.SIGTERM)
    assert not leftovers(tmp_path), leftovers(tmp_path)


def test_keep_pods_restart_second_up_and_down(tmp_path: Path) -> None:
    data = tmp_path / "data"
    bp = BrokerProcess(data, PROFILE, gpu_slots=2, args=("--keep-pods",))
    api = _api(bp)
    first = api.post(
        "/v1/jobs", json={"profile": "plain", "argv": ["true"], "reuse_tag": "x"}
    ).json()
    assert api.get(f"/v1/jobs/{first['id']}/wait").json()["exit_code"] == 0
    bp.stop()
    kept = leftovers(tmp_path)
    assert kept.sandboxes >= 1, "--keep-pods stopped the pods"
    bp = BrokerProcess(data, PROFILE, gpu_slots=2)  # re-adopts them
    try:
        api = httpx.Client(base_url=bp.url, headers=api.headers, timeout=60)
        again = api.post(
            "/v1/jobs", json={"profile": "plain", "argv": ["true"], "reuse_tag": "x"}
        ).json()
        row = api.get(f"/v1/jobs/{again['id']}/wait").json()
        assert row["path"] == "warm" and row["pods"] == first["pods"], row
        # y takes the standby beside pod x, which stops pod x and stages a new standby;
        # the snapshot waits for both to be done
        _running(api, SLEEP, tag="y")
        _settled(bp)
        before = leftovers(tmp_path)
        # a second broker on the same data dir: one line, non-zero, nothing touched
        cmd = [sys.executable, "-m", "stoker.cli.main", "up", "--config", str(bp.config)]
        second = subprocess.run([*cmd, "--port", "1"], capture_output=True, text=True, timeout=60)
        assert second.returncode != 0
        assert second.stderr.strip().count("\n") == 0 and "in use" in second.stderr
        # every sandbox and process of the running broker is still there
        assert set(before.processes) <= set(leftovers(tmp_path).processes)
        assert bp.proc.poll() is None and api.get("/v1/health").status_code == 200
        # stoker down: the broker and all its pods go
        down = subprocess.run(
            [sys.executable, "-m", "stoker.cli.main", "down", "--config", str(bp.config)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert down.returncode == 0, down.stderr
        assert bp.proc.wait(10) in (0, -signal.SIGTERM)
    finally:
        if bp.proc.poll() is None:
            bp.stop()
    assert not leftovers(tmp_path), leftovers(tmp_path)


def test_down_stops_the_pods_a_killed_broker_left(tmp_path: Path) -> None:
    # no standby: a sandbox killed mid-start (a standby staging as the broker dies) is the
    # runtime's to find (tested with it); here every pod has started
    no_standby = [{"name": "plain", "share": 1.0, "standby_share": 0.0}]
    bp = BrokerProcess(tmp_path / "data", no_standby, gpu_slots=2)
    _running(_api(bp), SLEEP)
    bp.kill()  # a crash: its pods run on
    assert leftovers(tmp_path).sandboxes >= 1
    down = subprocess.run(
        [sys.executable, "-m", "stoker.cli.main", "down", "--config", str(bp.config)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert down.returncode == 0 and "stopped 1 pods" in down.stderr, down.stderr
    assert not leftovers(tmp_path), leftovers(tmp_path)


def test_what_a_failed_test_left_is_reaped(tmp_path: Path) -> None:
    """The suite's leak check stops what a failing test left (a crashed broker's pods:
    sandboxes, their cgroups and workspace mounts), so a test that fails before its own
    clean-up leaks nothing past the run."""
    no_standby = [{"name": "plain", "share": 1.0, "standby_share": 0.0}]
    bp = BrokerProcess(tmp_path / "data", no_standby, gpu_slots=2)
    _running(_api(bp), SLEEP)
    bp.kill()  # as a failing test would leave it: nobody stops the pods
    left = leftovers(tmp_path)
    assert left.sandboxes >= 1 and left.cgroups, left
    reap(left)
    assert not leftovers(tmp_path), leftovers(tmp_path)
