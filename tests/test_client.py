"""The SDK against a real broker (uvicorn on 127.0.0.1, SQLite, LocalRuntime sandboxes)."""

from __future__ import annotations

import asyncio
import hashlib
import io
import re
import shutil
import tarfile
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

import stoker
from api_rig import embedded_broker, tenant_token
from stoker.broker.config import BrokerConfig, BrokerProfile, PolicyConfig
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
from stoker.runtime.code import CodeStore

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) not installed"),
    pytest.mark.timeout(90),
]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    data = tmp_path_factory.mktemp("client") / "data"
    with embedded_broker(data, [BrokerProfile.simple("plain")], gpu_slots=2) as eb:
        yield eb


@pytest.fixture(scope="module")
def token(broker: EmbeddedBroker) -> str:
    return tenant_token(broker, "sdk")


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


def test_a_jobs_traceback_starts_at_its_own_code(
    broker: EmbeddedBroker, token: str, tmp_path: Path
) -> None:
    """As ``python`` prints it: no frame of stoker's runner (nor its host path) above the
    job's first frame, for a code string and a script alike."""
    (tmp_path / "main.py").write_text("def f():\n    1 / 0\n\n\nf()\n")
    with stoker.Client(broker.url, token) as c:
        code = c.run("plain", ["python", "-c", "x = 1\nraise ValueError('bad')"]).result(60)
        script = c.run("plain", ["python", "main.py"], code=tmp_path).result(60)
    assert code.stderr.decode() == (
        "Traceback (most recent call last):\n"
        '  File "<string>", line 2, in <module>\n'
        "ValueError: bad\n"
    )
    lines = script.stderr.decode().splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[1] == '  File "main.py", line 5, in <module>'  # as ``python main.py`` says
    assert "stoker" not in script.stderr.decode() and lines[-1].startswith("ZeroDivisionError")


def test_pack_code_checks_the_size_first(tmp_path: Path) -> None:
    (tmp_path / "big.bin").write_bytes(b"x" * 5000)
    (tmp_path / "small.py").write_text("pass\n")
    with pytest.raises(InvalidRequest, match="5005 bytes") as big:
        pack_code(tmp_path, max_bytes=4096)
    assert big.value.field == "code"
    (tmp_path / ".stokerignore").write_text("*.bin\n")
    assert pack_code(tmp_path, max_bytes=4096)  # the ignored file no longer counts


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


def _count_requests(c: stoker.Client) -> list[str]:
    """The requests ``c`` sends from here on, as ``METHOD path``."""
    sent: list[str] = []
    c._http.event_hooks["request"].append(lambda r: sent.append(f"{r.method} {r.url.path}"))
    return sent


def test_short_call_is_one_round_trip_code_by_digest(
    broker: EmbeddedBroker, token: str, tmp_path: Path
) -> None:
    (tmp_path / "main.py").write_text("import sys; print('one'); print('trip', file=sys.stderr)\n")
    with stoker.Client(broker.url, token) as c:
        sent = _count_requests(c)
        # first: the broker lacks the code, so the submit is refused, the code uploaded and
        # the job submitted again (with the same idempotency key)
        res = c.run("plain", ["python", "main.py"], reuse_tag="rt", code=tmp_path, wait_s=60)
        assert res.result().stdout == b"one\n" and res.result().stderr == b"trip\n"
        assert sent == ["POST /v1/jobs", "POST /v1/code", "POST /v1/jobs"]
        sent.clear()
        res = c.run("plain", ["python", "main.py"], reuse_tag="rt", code=tmp_path, wait_s=60)
        out = res.result()
        assert (out.ok, out.stdout, out.path) == (True, b"one\n", "warm")
        assert sent == ["POST /v1/jobs"]  # known code, finished within the wait: one call
        # a job longer than the wait: its handle comes back unfinished, result() goes on
        sent.clear()
        slow = c.run("plain", ["python", "-c", "import time; time.sleep(1); print(2)"], wait_s=0.05)
        assert slow.info["state"] != "finished" and slow.result(60).stdout == b"2\n"
        assert sent[0] == "POST /v1/jobs" and len(sent) >= 3


def test_argv_string_is_a_type_error_and_key_is_callers(broker: EmbeddedBroker, token: str) -> None:
    with stoker.Client(broker.url, token) as c:
        with pytest.raises(TypeError, match="list of strings"):
            c.run("plain", "python -c pass")  # type: ignore[arg-type]
        a = c.run("plain", ["python", "-c", "print(7)"], idempotency_key="call-7")
        b = c.run("plain", ["python", "-c", "print(7)"], idempotency_key="call-7")
        assert a.id == b.id and b.result(60).stdout == b"7\n"


def test_labels_stored_returned_and_filtered(broker: EmbeddedBroker, token: str) -> None:
    with stoker.Client(broker.url, token) as c:
        a = c.run("plain", ["true"], labels={"exp": "e1", "run": "3"}).result(60)
        b = c.run("plain", ["true"], labels={"exp": "e2"}).result(60)
        assert c.get(a.id)["labels"] == {"exp": "e1", "run": "3"}
        assert [j["id"] for j in c.jobs(labels={"exp": "e1"})] == [a.id]
        assert [j["id"] for j in c.jobs(labels={"exp": "e2"})] == [b.id]
        assert c.jobs(labels={"exp": "e1", "run": "4"}) == []
        with pytest.raises(InvalidRequest) as bad:
            c.run("plain", ["true"], labels={"bad key": "x"})
        assert bad.value.field == "body.labels"
        r = c._http.get("/v1/jobs", params={"label": "novalue"})
        assert r.status_code == 422 and r.json()["field"] == "query.label"


def test_session_files_and_runs_share_one_pod(broker: EmbeddedBroker, token: str) -> None:
    big = bytes(range(256)) * 1200  # 300 KiB: written in several chunks
    with stoker.Client(broker.url, token) as c, c.session("plain") as s:
        s.files.write("data.bin", big)
        res = s.run(["python", "-c", "print(len(open('data.bin', 'rb').read()))"])
        assert res.stdout == b"307200\n" and not s.pod_lost
        assert s.files.read("data.bin") == big
        s.files.write("note.txt", "hé")
        assert s.files.read("note.txt") == "hé".encode()
        assert s.pod is not None and not s.lost
        with pytest.raises(stoker.SessionFileError, match=r"missing\.txt"):
            s.files.read("missing.txt")
        with pytest.raises(TypeError):
            s.run("ls")  # type: ignore[arg-type]
    # another tenant's session cannot read this one's files: a tag is per tenant
    with stoker.Client(broker.url, broker.admin_token) as admin:
        other = admin.create_tenant("sdk-other")
    with stoker.Client(broker.url, other) as c2, c2.session("plain", reuse_tag=s.reuse_tag) as s2:
        with pytest.raises(stoker.SessionFileError):
            s2.files.read("data.bin")
        assert s2.pod != s.pod


def test_session_says_when_its_pod_was_lost(tmp_path: Path) -> None:
    cfg = BrokerConfig(
        data_dir=tmp_path / "data",
        profiles=[BrokerProfile.simple("plain")],
        gpu_slots=1,
        policies=PolicyConfig(keepalive_s=0.5),
    )
    seen: list[stoker.PodLost] = []

    async def main(url: str, token: str) -> None:
        async with (
            stoker.AsyncClient(url, token) as c,
            c.session("plain", on_pod_lost=seen.append) as s,
        ):
            await s.files.write("state.txt", b"step 1")
            first = s.pod
            assert await s.files.read("state.txt") == b"step 1" and not s.pod_lost
            await asyncio.sleep(3)  # past the keep-alive: the pod is stopped
            res = await s.run(["python", "-c", "import os; print(os.path.exists('state.txt'))"])
            assert res.stdout == b"False\n" and s.pod_lost
            assert seen == [stoker.PodLost(first, s.pod)] and s.pod != first

    with EmbeddedBroker(cfg) as eb:
        with stoker.Client(eb.url, eb.admin_token) as admin:
            token = admin.create_tenant("lost")
        asyncio.run(main(eb.url, token))


# ------------------------------------------------- one archive uploaded by many at once


def _archive(text: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = text.encode()
        info = tarfile.TarInfo("main.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _uploads(broker: EmbeddedBroker) -> float:
    """Code archives the broker received so far (its metric, new and known)."""
    text = httpx.get(f"{broker.url}/metrics").text
    return sum(float(v) for v in re.findall(r"^stoker_code_uploads_total\{.*\} (\S+)$", text, re.M))


def test_one_digest_put_from_many_threads_at_once_is_stored_once(tmp_path: Path) -> None:
    store = CodeStore(tmp_path / "code")
    data = _archive("print(1)\n")
    start = threading.Barrier(32)

    def put() -> str:
        start.wait()
        return store.put(data)

    with ThreadPoolExecutor(32) as ex:
        digests = set(ex.map(lambda _: put(), range(32)))
    assert len(digests) == 1
    assert [p.name for p in store.root.iterdir()] == list(digests)  # no temporary file left
    assert store.path(digests.pop()).read_bytes() == data


async def _post_all(url: str, token: str, data: bytes, n: int) -> list[httpx.Response]:
    headers = {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_connections=n)
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits) as http:
        return list(await asyncio.gather(*(http.post("/v1/code", content=data) for _ in range(n))))


def test_128_uploads_of_one_archive_at_once_all_answer(broker: EmbeddedBroker, token: str) -> None:
    data = _archive("print(128)\n")
    replies = asyncio.run(_post_all(broker.url, token, data, 128))
    assert [r.status_code for r in replies] == [201] * 128, {r.text for r in replies}
    assert len({r.json()["digest"] for r in replies}) == 1


class _Counting(httpx.AsyncHTTPTransport):
    """The real transport, counting the code uploads that went through it."""

    def __init__(self) -> None:
        super().__init__()
        self.uploads = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path == "/v1/code":
            self.uploads += 1
        return await super().handle_async_request(request)


def test_an_async_client_uploads_one_code_once_for_64_submits(
    broker: EmbeddedBroker, token: str
) -> None:
    code = _archive("print('rewarded')\n")
    transport = _Counting()
    before = _uploads(broker)

    async def main() -> list[bytes]:
        async with stoker.AsyncClient(broker.url, token, transport=transport) as c:
            jobs = await asyncio.gather(
                *(
                    c.run("plain", ["python", "main.py"], reuse_tag="rw", code=code, wait_s=0)
                    for _ in range(64)
                )
            )
            return [(await j.result(90)).stdout for j in jobs]

    outs = asyncio.run(main())
    assert outs == [b"rewarded\n"] * 64  # every job ran: none lost to an upload
    assert transport.uploads == 1
    assert _uploads(broker) - before == 1


def test_a_client_uploads_one_code_once_for_its_threads(broker: EmbeddedBroker, token: str) -> None:
    code = _archive("print('threads')\n")
    before = _uploads(broker)
    with stoker.Client(broker.url, token) as c:
        start = threading.Barrier(16)

        def submit(_: int) -> bytes:
            start.wait()
            return (
                c.run("plain", ["python", "main.py"], reuse_tag="th", code=code).result(90).stdout
            )

        with ThreadPoolExecutor(16) as ex:
            outs = list(ex.map(submit, range(16)))
    assert outs == [b"threads\n"] * 16
    assert _uploads(broker) - before == 1


def test_a_failed_upload_fails_every_waiter_once_and_is_not_remembered(
    broker: EmbeddedBroker, token: str
) -> None:
    transport = _Counting()

    async def main() -> tuple[list[BaseException | object], BaseException | object]:
        async with stoker.AsyncClient(broker.url, token, transport=transport) as c:
            runs = [c.run("plain", ["python", "main.py"], code=b"not a tar") for _ in range(8)]
            together = await asyncio.gather(*runs, return_exceptions=True)
            later = await asyncio.gather(
                c.run("plain", ["python", "main.py"], code=b"not a tar"), return_exceptions=True
            )
            return together, later[0]

    together, later = asyncio.run(main())
    assert all(isinstance(e, InvalidRequest) and e.field == "code" for e in together), together
    assert transport.uploads == 2  # one for the eight at once, one for the later call
    assert isinstance(later, InvalidRequest)
