"""The crash suite: a real ``stoker up`` SIGKILLed at seeded random points of a workload of
short and long jobs, restarted on the same data dir each time.

Every job writes a marker file named after its job id into its pod's workspace the moment it
runs; the test reads the markers from the host (outside every sandbox). Callers submit with
an idempotency key and retry through the broker's deaths, as the SDK does. Then:

- every acknowledged job finished exactly once (one marker, exit 0), or with a typed failure
  that is true (no marker for a job that never ran);
- every retried submit returned the same job for its key, and a retry after a restart (a
  reply that was lost) returns it too;
- once the broker is stopped, no sandbox, process or cgroup of its data dir is left.

Kill points: half at a random moment, half 0-20 ms after a submit's acknowledgement (the
bind window). Each caller owns a reuse tag and waits for its job before the next, so its pod
stays warm and its workspace (the markers) lives through the whole run.
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from rig import Api, broker_config, tenant_api
from stoker.broker.bench import BrokerProcess
from stoker.broker.config import BrokerProfile
from stoker.broker.embedded import EmbeddedBroker, free_port
from stoker.broker.failover import JOB  # marks that it ran, then works a while

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap (bwrap) not installed"
)

CALLERS = 3


class _Caller(threading.Thread):
    """One loop: submit (idempotency key, retried through crashes), wait, next."""

    def __init__(self, url: str, token: str, tag: str, rng: random.Random, acked: Any) -> None:
        super().__init__(daemon=True)
        self.http = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=10
        )
        self.tag, self.rng, self.acked = tag, rng, acked
        self.stop = threading.Event()
        self.ids: dict[str, set[str]] = {}  # idempotency key -> every job id it was answered
        self.bodies: dict[str, dict[str, Any]] = {}  # idempotency key -> its request
        self.results: dict[str, dict[str, Any]] = {}  # job id -> its finished row
        self.error: BaseException | None = None

    def _call(self, method: str, path: str, **kw: Any) -> httpx.Response:
        deadline = time.monotonic() + 120
        while True:
            try:
                r = self.http.request(method, path, **kw)
                if r.status_code < 500:
                    return r
            except httpx.TransportError:
                pass  # the broker is down: retry, as the SDK does
            if time.monotonic() > deadline:
                raise TimeoutError(f"{method} {path}: no broker for 120 s")
            time.sleep(0.05)

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                key = uuid.uuid4().hex
                secs = self.rng.choice([0.0, 0.0, 0.05, 0.3, 1.5])  # short and long jobs
                body = {
                    "profile": "plain",
                    "argv": ["python", "-c", JOB, str(secs)],
                    "reuse_tag": self.tag,
                }
                self.bodies[key] = body
                r = self._call("POST", "/v1/jobs", json=body, headers={"Idempotency-Key": key})
                assert r.status_code in (200, 201), r.text
                job = r.json()["id"]
                self.ids.setdefault(key, set()).add(job)
                self.acked.set()
                while True:
                    r = self._call("GET", f"/v1/jobs/{job}/wait", params={"timeout_s": 5})
                    assert r.status_code == 200, r.text
                    if r.json()["state"] == "finished":
                        self.results[job] = r.json()
                        break
        except BaseException as exc:  # reported by the test
            self.error = exc


def _markers(runtime: Path) -> Counter[str]:
    runs: Counter[str] = Counter()
    for f in runtime.glob("pods/*/workspace/markers/*"):
        runs[f.name.split(".")[0]] += 1
    return runs


def _ours(data_dir: Path) -> list[int]:
    """Processes whose command line names the data dir (sandboxes and their agents)."""
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if str(data_dir).encode() in (proc / "cmdline").read_bytes():
                    out.append(int(proc.name))
            except OSError:
                continue
    return out


def _cgroups(runtime: Path) -> list[Path]:
    out = []
    for pod_json in runtime.glob("pods/*/pod.json"):
        with contextlib.suppress(OSError, ValueError):
            dirs = json.loads(pod_json.read_text())["cgroup"]["dirs"]
            out += [Path(d) for d in dirs.values()]
    return out


def _crash_run(tmp_path: Path, kills: int, seed: int) -> None:
    rng = random.Random(seed)
    data = tmp_path / "data"
    port = free_port()
    prof = [{"name": "plain", "share": 1.0, "standby_share": 0.0}]

    def start() -> BrokerProcess:
        return BrokerProcess(data, prof, gpu_slots=CALLERS, keepalive_s=3600, port=port)

    bp = start()
    with httpx.Client(base_url=bp.url, headers={"Authorization": f"Bearer {bp.admin_token}"}) as a:
        token = a.post("/v1/tenants", json={"name": "crash"}).json()["token"]
    acked = threading.Event()
    callers = [
        _Caller(bp.url, token, f"tag-{i}", random.Random(rng.random()), acked)
        for i in range(CALLERS)
    ]
    cgroups: set[Path] = set()
    try:
        for c in callers:
            c.start()
        # the callers' pods start before the first kill (a sandbox killed mid-start is the
        # runtime's own concern, tested with it)
        deadline = time.monotonic() + 60
        while sum(len(c.results) for c in callers) < CALLERS and time.monotonic() < deadline:
            time.sleep(0.05)
        points = []
        for i in range(kills):
            if i % 2:
                acked.clear()
                acked.wait(30)
                wait = rng.uniform(0.0, 0.02)  # inside the bind window
            else:
                wait = rng.uniform(0.05, 1.5)
            time.sleep(wait)
            cgroups.update(_cgroups(data / "runtime"))
            bp.kill()
            points.append(round(wait, 3))
            time.sleep(rng.uniform(0.0, 0.3))  # jobs run and end while no broker listens
            bp = start()
        time.sleep(1.0)
        for c in callers:
            c.stop.set()
        for c in callers:
            c.join(180)
            assert not c.is_alive(), "a caller is stuck"
            assert c.error is None, repr(c.error)
        runs = _markers(data / "runtime")
        cgroups.update(_cgroups(data / "runtime"))
        # a reply lost in a crash: the retry after a restart gets the same job
        for c in callers:
            for key, ids in c.ids.items():
                assert len(ids) == 1, (key, ids)
            key = next(iter(c.ids))
            r = c.http.post("/v1/jobs", json=c.bodies[key], headers={"Idempotency-Key": key})
            assert r.status_code == 200 and r.json()["id"] in c.ids[key]
        listed = callers[0].http.get("/v1/jobs", params={"limit": 1000}).json()
    finally:
        for c in callers:
            c.stop.set()
        bp.stop()
    done = {j: row for c in callers for j, row in c.results.items()}
    acked_jobs = {j for c in callers for ids in c.ids.values() for j in ids}
    assert acked_jobs == set(done), "an acknowledged job never finished"
    assert len(listed) == len(acked_jobs), "a submit was stored twice"
    summary = Counter((row["exit_code"], row["failure"], runs[j]) for j, row in done.items())
    print(f"kills at {points}: (exit, failure, runs) -> jobs {dict(summary)}")
    for job, row in done.items():
        if row["failure"] is None:
            assert row["exit_code"] == 0 and runs[job] == 1, (job, row, runs[job])
        else:
            # a typed failure must be true: nothing here kills pods, so only a job that
            # never ran may fail, and never as a user error
            assert row["failure"] != "user_error" and runs[job] == 0, (job, row, runs[job])
    assert sum(1 for row in done.values() if row["failure"] is None) >= len(done) - kills
    # nothing outlives the broker: no sandbox, process or cgroup of its data dir
    assert not list((data / "runtime").glob("pods/*")), "a pod dir is left"
    assert _ours(data) == [], "a process of the data dir is left"
    assert [p for p in cgroups if p.exists()] == [], "a pod cgroup is left"


@pytest.mark.timeout(300)
def test_broker_killed_twice(tmp_path: Path) -> None:
    _crash_run(tmp_path, kills=2, seed=1)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_broker_killed_at_ten_random_points(tmp_path: Path) -> None:
    _crash_run(tmp_path, kills=10, seed=8)


@pytest.mark.timeout(120)
def test_a_job_that_ended_while_no_broker_listened_keeps_its_exit(tmp_path: Path) -> None:
    # the job ends while its broker is down; the restarted broker hears the agent's held
    # exit and output (the replayed exit wins over pod_died), and the pod takes the next job
    cfg = broker_config(
        tmp_path, gpu_slots=1, profiles=[BrokerProfile.simple("plain", standby=False)]
    )
    eb = EmbeddedBroker(cfg, stop_pods=False).start()
    a = tenant_api(eb, "a")
    code = (
        "import sys, time; print('before', flush=True); time.sleep(1); print('after'); sys.exit(3)"
    )
    job = a.submit(["python", "-c", code]).json()["id"]
    deadline = time.monotonic() + 30
    while a.http.get(f"/v1/jobs/{job}").json()["state"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    token = a.token
    eb.stop(stop_pods=False)
    time.sleep(2.0)  # it has ended by now, with no broker to hear it
    with EmbeddedBroker(cfg) as eb2:
        assert eb2.broker is not None and eb2.broker.recovery["jobs_lost"] == 0
        a2 = Api(eb2.url, token)
        row = a2.wait(job, 30)
        assert (row["exit_code"], row["failure"]) == (3, "user_error"), row
        assert a2.output(job).split() == ["before", "after"]
        nxt = a2.run(["python", "-c", "print('next')"])
        assert (nxt["path"], nxt["exit_code"]) == ("warm", 0) and a2.output(nxt["id"]) == "next\n"
