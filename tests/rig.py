"""What the broker's end-to-end tests share: a broker's configuration in the test's own
folder, a tenant's view of the broker over plain HTTP (:class:`Api`) or through the SDK,
waiting for a condition, and a code archive."""

from __future__ import annotations

import base64
import io
import json
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

import stoker
from stoker.broker.config import BrokerConfig, BrokerProfile
from stoker.broker.embedded import EmbeddedBroker

PY = "python"


def broker_config(tmp: Path, **kw: Any) -> BrokerConfig:
    """A broker whose data lives in ``tmp/data``: one one-GPU profile ``plain`` on two
    virtual GPU slots unless ``kw`` says otherwise."""
    kw.setdefault("profiles", [BrokerProfile.simple("plain")])
    kw.setdefault("gpu_slots", 2)
    return BrokerConfig(data_dir=tmp / "data", **kw)


class Api:
    """A tenant's (or the admin's) view of a broker over HTTP."""

    def __init__(self, url: str, token: str | None) -> None:
        self.token = token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=url, headers=headers, timeout=60)

    def submit(self, argv: list[str], tag: str = "x", **kw: Any) -> httpx.Response:
        body = {"profile": "plain", "argv": argv, "reuse_tag": tag, **kw}
        return self.http.post("/v1/jobs", json=body)

    def run(self, argv: list[str], tag: str = "x", **kw: Any) -> dict[str, Any]:
        r = self.submit(argv, tag, **kw)
        assert r.status_code == 201, r.text
        return self.wait(r.json()["id"])

    def wait(self, job_id: str, timeout_s: float = 60) -> dict[str, Any]:
        r = self.http.get(f"/v1/jobs/{job_id}/wait", params={"timeout_s": timeout_s})
        assert r.status_code == 200, r.text
        return r.json()

    def output(self, job_id: str) -> str:
        r = self.http.get(f"/v1/jobs/{job_id}/output", params={"follow": False})
        lines = [json.loads(x) for x in r.text.splitlines() if x.strip()]
        return b"".join(base64.b64decode(m["data"]) for m in lines if "data" in m).decode()

    def pods(self) -> list[dict[str, Any]]:
        return self.http.get("/v1/pods").json()


def tenant_api(eb: EmbeddedBroker, name: str) -> Api:
    """A new tenant ``name``, seen over HTTP with its own token."""
    r = Api(eb.url, eb.admin_token).http.post("/v1/tenants", json={"name": name})
    assert r.status_code == 201, r.text
    return Api(eb.url, r.json()["token"])


def tenant_client(eb: EmbeddedBroker, name: str) -> stoker.Client:
    """A new tenant ``name``, seen through the SDK."""
    with stoker.Client(eb.url, eb.admin_token) as admin:
        return stoker.Client(eb.url, admin.create_tenant(name))


def wait_for(pred: Callable[[], Any], timeout_s: float = 30.0, every_s: float = 0.02) -> Any:
    """``pred()``'s first true value, polled every ``every_s``; fails past ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not (value := pred()):
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(every_s)
    return value


def code_tar(files: dict[str, str]) -> bytes:
    """A job's code archive (tar.gz) of ``files`` (path -> text)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
