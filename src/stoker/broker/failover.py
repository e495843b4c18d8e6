"""Two broker replicas on this host and one PostgreSQL store, a stream of jobs through
them, and the leader SIGKILLed in its middle: shared by the failover test and benchmark.

Each replica is a real ``stoker up`` with its own data dir; both share one pods directory
(the local runtime's pods belong to the host, so whichever replica leads adopts them) and
one keys dir (the secret key and the admin token, as the Secret ``stoker-keys`` on
Kubernetes). Callers submit with an idempotency key to either replica in turn and
retry through the failover, as the SDK does.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from stoker.broker.auth import write_keys
from stoker.broker.bench import BrokerProcess
from stoker.broker.db import make_engine

PROFILES = [{"name": "plain", "share": 1.0, "standby_share": 0.0}]
# the job marks that it ran (a file per run in its pod's workspace, so a second run shows),
# then works a while
JOB = (
    "import os, sys, time, uuid, pathlib\n"
    "d = pathlib.Path('/workspace/markers'); d.mkdir(exist_ok=True)\n"
    "(d / (os.environ['STOKER_JOB'] + '.' + uuid.uuid4().hex)).touch()\n"
    "print('ran', os.environ['STOKER_JOB'], flush=True)\n"
    "time.sleep(float(sys.argv[1]))\n"
)


class Replicas:
    """Two ``stoker up`` replicas (``a`` starts first and leads) on one database."""

    def __init__(
        self, root: Path, database_url: str, gpu_slots: int = 2, keepalive_s: float = 300.0
    ) -> None:
        self.root = root
        self.runtime = root / "pods"
        self.database_url = database_url
        write_keys(root / "keys")
        settings = {
            "database_url": database_url,
            "runtime_dir": str(self.runtime),
            "keys_dir": str(root / "keys"),
        }
        self.a = BrokerProcess(root / "a", PROFILES, gpu_slots, keepalive_s, settings=settings)
        self.b = BrokerProcess(root / "b", PROFILES, gpu_slots, keepalive_s, settings=settings)
        self.admin_token = self.a.admin_token

    @property
    def urls(self) -> list[str]:
        return [self.a.url, self.b.url]

    def tenant(self, name: str) -> str:
        """A new tenant's token (created through the follower: any replica writes tenants)."""
        r = httpx.post(
            f"{self.b.url}/v1/tenants",
            json={"name": name},
            headers={"Authorization": f"Bearer {self.admin_token}"},
            timeout=10,
        )
        r.raise_for_status()
        return str(r.json()["token"])

    def query(self, sql: str, **params: Any) -> Any:
        """One scalar from the shared store."""
        engine = make_engine(self.database_url)
        try:
            with engine.connect() as conn:
                return conn.execute(sa.text(sql), params).scalar()
        finally:
            engine.dispose()

    def close(self) -> None:
        """Stop both replicas, then every pod left in the shared pods directory."""
        for bp in (self.a, self.b):
            if bp.proc.poll() is None:
                bp.stop()
        asyncio.run(stop_pods(self.runtime))


async def stop_pods(runtime: Path) -> None:
    """Adopt and stop every pod under ``runtime`` (what brokers left behind)."""
    from stoker.runtime.local import LocalRuntime

    rt = LocalRuntime(runtime)
    await rt.live_pods()
    await rt.stop_all()
    await rt.close()


def role(url: str) -> str:
    """``ready`` (leads), ``following``, or ``starting``."""
    return str(httpx.get(f"{url}/v1/ready", timeout=5).json()["status"])


class Caller(threading.Thread):
    """One loop: submit (idempotency key, to either replica, retried through the failover),
    wait for the job, next. Job lengths cycle through ``lengths``."""

    def __init__(
        self,
        urls: list[str],
        token: str,
        tag: str,
        acked: threading.Semaphore,
        lengths: tuple[float, ...] = (0.0, 0.3, 1.0),
    ) -> None:
        super().__init__(daemon=True)
        self.urls, self.tag, self.acked, self.lengths = urls, tag, acked, lengths
        self.http = httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=10)
        self.halt = threading.Event()
        self.ids: dict[str, set[str]] = {}  # idempotency key -> every job id it was answered
        self.acked_at: dict[str, float] = {}  # job id -> when its submit was first answered
        self.results: dict[str, dict[str, Any]] = {}  # job id -> its finished row
        self.error: BaseException | None = None
        self._turn = 0

    def _call(self, method: str, path: str, **kw: Any) -> httpx.Response:
        deadline = time.monotonic() + 120
        while True:
            self._turn += 1  # alternate between the replicas: half the calls are forwarded
            url = self.urls[self._turn % len(self.urls)]
            try:
                r = self.http.request(method, url + path, **kw)
                if r.status_code < 500:
                    return r
                if r.status_code != 503 or "retry-after" not in r.headers:
                    raise AssertionError(f"{method} {path}: {r.status_code} {r.text}")
            except httpx.TransportError:
                pass  # the replica is gone: the other one answers
            if time.monotonic() > deadline:
                raise TimeoutError(f"{method} {path}: no replica answered for 120 s")
            time.sleep(0.05)

    def run(self) -> None:
        try:
            n = 0
            while not self.halt.is_set():
                key = uuid.uuid4().hex
                secs = self.lengths[n % len(self.lengths)]
                n += 1
                body = {"profile": "plain", "argv": ["python", "-c", JOB, str(secs)]}
                body["reuse_tag"] = self.tag
                r = self._call("POST", "/v1/jobs", json=body, headers={"Idempotency-Key": key})
                if r.status_code not in (200, 201):
                    raise AssertionError(f"submit: {r.status_code} {r.text}")
                job = r.json()["id"]
                self.ids.setdefault(key, set()).add(job)
                self.acked_at.setdefault(job, time.time())
                self.acked.release()
                while True:
                    r = self._call("GET", f"/v1/jobs/{job}/wait", params={"timeout_s": 5})
                    if r.status_code != 200:
                        raise AssertionError(f"wait: {r.status_code} {r.text}")
                    if r.json()["state"] == "finished":
                        self.results[job] = r.json()
                        break
        except BaseException as exc:  # reported by whoever runs the callers
            self.error = exc

    def stop(self) -> None:
        self.halt.set()
        self.join(120)
        if self.is_alive() or self.error is not None:
            raise RuntimeError(f"caller {self.tag}: {self.error or 'did not finish'}")
