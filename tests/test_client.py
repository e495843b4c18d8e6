"""The SDK against a real broker (uvicorn on 127.0.0.1, SQLite, LocalRuntime sandboxes)."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import stoker
from stoker.broker.config import BrokerConfig, BrokerProfile
from stoker.broker.embedded import EmbeddedBroker, free_port
from stoker.client import (
    AuthenticationError,
    BrokerUnavailable,
    InvalidRequest,
    JobTimeout,
    NotFound,
    PermissionDenied,
    pack_code,
)

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) not installed"),
    pytest.mark.timeout(90),
]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    cfg = BrokerConfig(
        data_dir=tmp_path_factory.mktemp("client") / "data",
        profiles=[BrokerProfile.simple("plain")],
        gpu_slots=2,
    )
    with EmbeddedBroker(cfg) as eb:
        yield eb


@pytest.fixture(scope="module")
def token(broker: EmbeddedBroker) -> str:
    with stoker.Client(broker.url, broker.admin_token) as admin:
        return admin.create_tenant("sdk")


def test_run_wait_logs_result(broker: EmbeddedBroker, token: str) -> None:
    with stoker.Client(broker.url, token) as c:
        job = c.run(
            "plain",
            ["python", "-c", "import sys; print('out'); print('err', file=sys.stderr)"],
            reuse_tag="t",
        )
        res = job.result(timeout_s=60)
        assert res.ok and res.stdout == b"out\n" and res.stderr == b"err\n"
        assert res.path == "cold" and res.start_latency_ms is not None
        assert "out" in job.logs()
        again = c.run("plain", ["python", "-c", "raise SystemExit(4)"], reuse_tag="t").result(60)
        assert (again.exit_code, again.failure, again.path) == (4, "user_error", "warm")
        assert [p["name"] for p in c.profiles()] == ["plain"]
        assert any(p["reuse_tag"] == "t" for p in c.pods())


def test_stream_follows_output_live(broker: EmbeddedBroker, token: str) -> None:
    code = "import time\nfor i in range(3):\n    print(i, flush=True); time.sleep(0.1)\n"
    with stoker.Client(broker.url, token) as c:
        job = c.run("plain", ["python", "-c", code], reuse_tag="s")
        chunks = b"".join(d for _, d in job.stream())
        assert chunks == b"0\n1\n2\n" and job.info["state"] == "finished"


def test_code_is_uploaded_once_by_digest(
    broker: EmbeddedBroker, token: str, tmp_path: Path
) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "main.py").write_text("print('from code')\n")
    data = pack_code(tmp_path / "pkg")
    assert pack_code(tmp_path / "pkg") == data  # reproducible: same tree, same digest
    with stoker.Client(broker.url, token) as c:
        digest = c.upload(tmp_path / "pkg")
        assert digest == hashlib.sha256(data).hexdigest()
        assert c.upload(data) == digest  # already there: only a HEAD
        res = c.run("plain", ["python", "main.py"], reuse_tag="code", code=tmp_path / "pkg").result(
            60
        )
        assert res.ok and res.stdout == b"from code\n"


def test_typed_errors(broker: EmbeddedBroker, token: str) -> None:
    with stoker.Client(broker.url, token) as c:
        with pytest.raises(InvalidRequest) as bad:
            c.run("nope", ["python"], reuse_tag="t")
        assert bad.value.field == "body.profile" and bad.value.status == 422
        with pytest.raises(NotFound):
            c.get("j-missing")
        with pytest.raises(PermissionDenied):
            c.tenants()
        slow = c.run("plain", ["python", "-c", "import time; time.sleep(30)"], reuse_tag="slow")
        with pytest.raises(JobTimeout):
            slow.wait(timeout_s=0.2)
        assert slow.cancel()["id"] == slow.id
        assert slow.wait(30)["failure"] == "cancelled"
    with stoker.Client(broker.url, "stk_nobody") as c, pytest.raises(AuthenticationError):
        c.jobs()
    with (
        stoker.Client(f"http://127.0.0.1:{free_port()}", token) as c,
        pytest.raises(BrokerUnavailable),
    ):
        c.health()


def test_async_client_same_methods(broker: EmbeddedBroker, token: str) -> None:
    async def main() -> None:
        async with stoker.AsyncClient(broker.url, token) as c:
            jobs = [
                await c.run("plain", ["python", "-c", f"print({i})"], reuse_tag=f"a{i}")
                for i in range(2)
            ]
            results = await asyncio.gather(*(j.result(60) for j in jobs))
            assert [r.stdout for r in results] == [b"0\n", b"1\n"]
            assert "1" in await jobs[1].logs()
            assert {j["id"] for j in await c.jobs()} >= {j.id for j in jobs}
            with pytest.raises(InvalidRequest) as bad:
                await c.run("plain", ["python"], reuse_tag="t", timeout_s=-1)
            assert bad.value.field == "body.timeout_s"

    asyncio.run(main())
