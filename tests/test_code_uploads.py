"""One code archive uploaded by many at once: the host stores it once and answers every
upload, and one client sends it once however many of its submits need it."""

from __future__ import annotations

import asyncio
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
from stoker.broker.config import BrokerConfig, BrokerProfile
from stoker.broker.embedded import EmbeddedBroker
from stoker.client import InvalidRequest
from stoker.runtime.code import CodeStore

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) not installed"),
    pytest.mark.timeout(120),
]


def _archive(text: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = text.encode()
        info = tarfile.TarInfo("main.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    cfg = BrokerConfig(
        data_dir=tmp_path_factory.mktemp("uploads") / "data",
        profiles=[BrokerProfile.simple("plain")],
        gpu_slots=2,
    )
    with EmbeddedBroker(cfg) as eb:
        yield eb


@pytest.fixture(scope="module")
def token(broker: EmbeddedBroker) -> str:
    with stoker.Client(broker.url, broker.admin_token) as admin:
        return admin.create_tenant("uploads")


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
