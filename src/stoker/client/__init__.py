"""The stoker SDK: :class:`Client` (sync) and :class:`AsyncClient` with the same methods.

::

    with stoker.Client(url, token) as c:
        job = c.run("plain", ["python", "-c", "print(1)"], reuse_tag="loop-7")
        print(job.result().exit_code, job.logs())

Every call is retry-safe: a submit carries an idempotency key (the same key on every retry,
so a lost reply never runs a job twice), reads are idempotent, and transport errors and 5xx
replies are retried with backoff. Errors are typed (:class:`InvalidRequest` names the field).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import tarfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

_RETRIES = 4
_FINISHED = "finished"


class StokerError(Exception):
    """Base of the SDK's errors; ``status`` is the HTTP status (0 for transport errors)."""

    def __init__(self, message: str, status: int = 0, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.field = field


class AuthenticationError(StokerError):
    """No token, or a token the broker does not know (401)."""


class PermissionDenied(StokerError):
    """The token may not do this (403)."""


class NotFound(StokerError):
    """No such job (or not yours) (404)."""


class InvalidRequest(StokerError):
    """The broker refused the request; ``field`` names the field at fault (4xx)."""


class BrokerUnavailable(StokerError):
    """The broker could not be reached, or kept failing, after every retry."""


class JobTimeout(StokerError):
    """``wait`` ran past its timeout before the job finished."""


class JobPreempted(StokerError):
    """A spot job was evicted for HP work (``wait(raise_preempted=True)``). It is back in its
    queue and runs again by itself: ``requeues`` counts its evictions so far."""

    def __init__(self, message: str, job: str, requeues: int) -> None:
        super().__init__(message)
        self.job = job
        self.requeues = requeues


@dataclass(frozen=True, slots=True)
class JobResult:
    """How a job ended: exit code, typed failure (None when it exited 0), hit path, timings."""

    id: str
    exit_code: int | None
    failure: str | None
    path: str | None
    start_latency_ms: float | None
    stdout: bytes
    stderr: bytes
    requeues: int = 0  # times it was preempted (evicted and run again)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.failure is None


def _raise_for(resp: httpx.Response) -> None:
    if resp.status_code < 400:
        return
    try:
        body = resp.json()
        message, field = str(body.get("message", body)), body.get("field")
    except (ValueError, AttributeError):
        message, field = resp.text, None
    cls = {401: AuthenticationError, 403: PermissionDenied, 404: NotFound}.get(
        resp.status_code, InvalidRequest if resp.status_code < 500 else BrokerUnavailable
    )
    raise cls(message, resp.status_code, field)


def pack_code(path: Path | str) -> bytes:
    """A directory (or one file) as a reproducible gzipped tar: same tree, same digest."""
    root = Path(path)
    if not root.exists():
        raise InvalidRequest(f"code: {root} does not exist", field="code")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for f in files:
            info = tar.gettarinfo(
                str(f), arcname=f.name if root.is_file() else str(f.relative_to(root))
            )
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with open(f, "rb") as fh:
                tar.addfile(info, fh)
    # gzip writes its own timestamp: zero it so the digest depends on content alone
    data = bytearray(buf.getvalue())
    data[4:8] = b"\0\0\0\0"
    return bytes(data)


def _code_bytes(code: bytes | str | Path | None) -> bytes | None:
    if code is None or isinstance(code, bytes):
        return code
    return pack_code(code)


@dataclass(frozen=True, slots=True)
class JobShape:
    """What a job asks of the cluster besides its code: its class (``pool``, ``hp``,
    ``spot``), ``workers`` placed together, ``gpus`` per worker (below 1 shares a card;
    None: the profile's) and, for spot, ``guarantee_s`` (None: the broker's default)."""

    job_class: str = "pool"
    workers: int = 1
    gpus: float | None = None
    guarantee_s: float | None = None


def _job_body(
    profile: str,
    argv: list[str],
    reuse_tag: str | None,
    digest: str | None,
    deps: list[str] | None,
    env: dict[str, str] | None,
    timeout_s: float | None,
    shape: JobShape,
    secrets: list[str] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "profile": profile,
        "argv": list(argv),
        # no tag: a fresh caller per job, so it never reuses anyone's pod
        "reuse_tag": reuse_tag or f"once-{uuid.uuid4().hex}",
        "deps": list(deps or []),
        "env": dict(env or {}),
        "job_class": shape.job_class,
        "workers": shape.workers,
        "secrets": list(secrets or []),
    }
    optional = {
        "code_digest": digest,
        "timeout_s": timeout_s,
        "gpus": shape.gpus,
        "guarantee_s": shape.guarantee_s,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    return body


def _check_wait(
    row: dict[str, Any], seen: int, raise_preempted: bool, deadline: float | None, timeout_s: Any
) -> bool:
    """True when ``wait`` is done with ``row``; raises what the caller asked to hear of (a
    preemption since the wait began, even if the job has run again and finished since)."""
    if raise_preempted and row.get("requeues", 0) > seen:
        raise JobPreempted(
            f"job {row['id']} was {row.get('requeue_reason')} and re-queued to run again",
            row["id"],
            int(row["requeues"]),
        )
    if row["state"] == _FINISHED:
        return True
    if deadline is not None and time.monotonic() >= deadline:
        raise JobTimeout(f"job {row['id']} still {row['state']} after {timeout_s} s")
    return False


def _result(row: dict[str, Any], out: list[tuple[str, bytes]]) -> JobResult:
    return JobResult(
        row["id"],
        row["exit_code"],
        row["failure"],
        row["path"],
        row["start_latency_ms"],
        b"".join(d for s, d in out if s == "stdout"),
        b"".join(d for s, d in out if s == "stderr"),
        int(row.get("requeues", 0)),
    )


def _chunk(line: str) -> tuple[str, bytes] | dict[str, Any] | None:
    """One line of the output stream: a chunk, the final job row (``end``), or a notice
    (``requeued``: the job was preempted and runs again; the output goes on)."""
    if not line.strip():
        return None
    msg = json.loads(line)
    if "end" in msg:
        return dict(msg["end"])
    if "requeued" in msg:
        return {"requeued": dict(msg["requeued"])}
    return str(msg["stream"]), base64.b64decode(msg["data"])


def _take(job: Job | AsyncJob, item: dict[str, Any]) -> None:
    """Apply a non-chunk stream line to the job handle: its final row, or a re-queue."""
    requeued = item.get("requeued")
    if requeued is None:
        job.info = item
        return
    job.info = {**job.info, **requeued}
    if job.on_requeue is not None:
        job.on_requeue(job.info)


# ----------------------------------------------------------------------------- sync


class Job:
    """A submitted job (from :meth:`Client.run`)."""

    def __init__(self, client: Client, row: dict[str, Any]) -> None:
        self.client = client
        self.id: str = row["id"]
        self.info = row
        # called with the job's row when the stream says it was preempted and re-queued
        self.on_requeue: Callable[[dict[str, Any]], None] | None = None

    def refresh(self) -> dict[str, Any]:
        self.info = self.client.get(self.id)
        return self.info

    def wait(self, timeout_s: float | None = None, raise_preempted: bool = False) -> dict[str, Any]:
        """Block until the job finishes (long-poll); JobTimeout past ``timeout_s``. With
        ``raise_preempted``, JobPreempted as soon as it is evicted (it still runs again)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        seen = int(self.info.get("requeues", 0))
        while True:
            left = 30.0 if deadline is None else max(0.0, min(30.0, deadline - time.monotonic()))
            self.info = self.client._request(
                "GET", f"/v1/jobs/{self.id}/wait", params={"timeout_s": left}
            )
            if _check_wait(self.info, seen, raise_preempted, deadline, timeout_s):
                return self.info

    def stream(self, follow: bool = True) -> Iterator[tuple[str, bytes]]:
        """(stream, bytes) chunks of the job's output as they come."""
        with self.client._http.stream(
            "GET", f"/v1/jobs/{self.id}/output", params={"follow": follow}, timeout=None
        ) as resp:
            _raise_for(resp)
            for line in resp.iter_lines():
                item = _chunk(line)
                if isinstance(item, dict):
                    _take(self, item)
                elif item is not None:
                    yield item

    def logs(self) -> str:
        """Everything the job printed so far (stdout and stderr, in order)."""
        return b"".join(d for _, d in self.stream(follow=False)).decode(errors="replace")

    def result(self, timeout_s: float | None = None) -> JobResult:
        """Wait for the job, then its exit and output."""
        row = self.wait(timeout_s)
        return _result(row, list(self.stream(follow=False)))

    def cancel(self) -> dict[str, Any]:
        self.info = self.client._request("POST", f"/v1/jobs/{self.id}/cancel")
        return self.info


class Client:
    """A synchronous client of one broker (``url``, tenant ``token``)."""

    def __init__(
        self, url: str | None = None, token: str | None = None, timeout_s: float = 60.0
    ) -> None:
        if url is None or token is None:
            from stoker.api.config import ClientConfig

            cfg = ClientConfig.load()
            url, token = url or cfg.url, token or cfg.token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, path: str, **kw: Any) -> Any:
        for attempt in range(_RETRIES + 1):
            try:
                resp = self._http.request(method, path, **kw)
            except httpx.TransportError as exc:
                if attempt == _RETRIES:
                    raise BrokerUnavailable(f"{method} {path}: {exc}") from exc
            else:
                if resp.status_code < 500 or attempt == _RETRIES:
                    _raise_for(resp)
                    return resp.json() if resp.content else None
            time.sleep(0.05 * 2**attempt)
        raise AssertionError("unreachable")

    def upload(self, code: bytes | str | Path) -> str:
        """Upload a code archive (a directory is packed) once; returns its digest."""
        data = _code_bytes(code)
        assert data is not None
        digest = hashlib.sha256(data).hexdigest()
        resp = self._http.head(f"/v1/code/{digest}")
        if resp.status_code == 200:
            return digest
        return str(self._request("POST", "/v1/code", content=data)["digest"])

    def run(
        self,
        profile: str,
        argv: list[str],
        reuse_tag: str | None = None,
        code: bytes | str | Path | None = None,
        deps: list[str] | None = None,
        env: dict[str, str] | None = None,
        timeout_s: float | None = None,
        shape: JobShape = JobShape(),
        secrets: list[str] | None = None,
    ) -> Job:
        """Submit a job; returns at once with its handle. ``shape``: its class, workers and
        GPUs (default: a one-worker pool job in the profile's shape). ``secrets`` names tenant
        secrets (:meth:`set_secret`) the job gets as environment variables of the same names."""
        data = _code_bytes(code)
        digest = self.upload(data) if data is not None else None
        body = _job_body(profile, argv, reuse_tag, digest, deps, env, timeout_s, shape, secrets)
        key = uuid.uuid4().hex
        row = self._request("POST", "/v1/jobs", json=body, headers={"Idempotency-Key": key})
        return Job(self, row)

    def get(self, job_id: str) -> dict[str, Any]:
        return dict(self._request("GET", f"/v1/jobs/{job_id}"))

    def jobs(self, states: list[str] | None = None, limit: int = 100) -> list[dict[str, Any]]:
        return list(
            self._request("GET", "/v1/jobs", params={"state": states or [], "limit": limit})
        )

    def pods(self) -> list[dict[str, Any]]:
        return list(self._request("GET", "/v1/pods"))

    def profiles(self) -> list[dict[str, Any]]:
        return list(self._request("GET", "/v1/profiles"))

    def pools(self) -> list[dict[str, Any]]:
        """Per GPU pool: capacity, HP and spot GPUs in use, spot quota, eta, eviction rate
        over the last day, the HP demand forecast, and the queued hp and spot jobs."""
        return list(self._request("GET", "/v1/pools"))

    def tenants(self) -> list[str]:
        return list(self._request("GET", "/v1/tenants"))

    def create_tenant(self, name: str) -> str:
        """(admin) Add a tenant; returns its token."""
        return str(self._request("POST", "/v1/tenants", json={"name": name})["token"])

    def health(self) -> dict[str, Any]:
        return dict(self._request("GET", "/v1/health"))

    def events(
        self, job: str | None = None, after: int = 0, limit: int = 100
    ) -> list[dict[str, Any]]:
        """The broker's decision log, oldest first (a tenant's own; the admin's all): why
        each job took its path (warm, standby, cold) or waited, each pod's stop reason."""
        params: dict[str, Any] = {"after": after, "limit": limit}
        if job is not None:
            params["job"] = job
        return list(self._request("GET", "/v1/events", params=params))

    def set_secret(self, name: str, value: str) -> None:
        """Set a tenant secret (write-only: no call returns its value)."""
        self._request("POST", "/v1/secrets", json={"name": name, "value": value})

    def secrets(self) -> list[dict[str, Any]]:
        """Your secrets' names and when each was set."""
        return list(self._request("GET", "/v1/secrets"))

    def delete_secret(self, name: str) -> None:
        self._request("DELETE", f"/v1/secrets/{name}")


# ----------------------------------------------------------------------------- async


class AsyncJob:
    """A submitted job (from :meth:`AsyncClient.run`)."""

    def __init__(self, client: AsyncClient, row: dict[str, Any]) -> None:
        self.client = client
        self.id: str = row["id"]
        self.info = row
        self.on_requeue: Callable[[dict[str, Any]], None] | None = None

    async def refresh(self) -> dict[str, Any]:
        self.info = await self.client.get(self.id)
        return self.info

    async def wait(
        self, timeout_s: float | None = None, raise_preempted: bool = False
    ) -> dict[str, Any]:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        seen = int(self.info.get("requeues", 0))
        while True:
            left = 30.0 if deadline is None else max(0.0, min(30.0, deadline - time.monotonic()))
            self.info = await self.client._request(
                "GET", f"/v1/jobs/{self.id}/wait", params={"timeout_s": left}
            )
            if _check_wait(self.info, seen, raise_preempted, deadline, timeout_s):
                return self.info

    async def stream(self, follow: bool = True) -> AsyncIterator[tuple[str, bytes]]:
        async with self.client._http.stream(
            "GET", f"/v1/jobs/{self.id}/output", params={"follow": follow}, timeout=None
        ) as resp:
            if resp.status_code >= 400:
                await resp.aread()
                _raise_for(resp)
            async for line in resp.aiter_lines():
                item = _chunk(line)
                if isinstance(item, dict):
                    _take(self, item)
                elif item is not None:
                    yield item

    async def logs(self) -> str:
        return b"".join([d async for _, d in self.stream(follow=False)]).decode(errors="replace")

    async def result(self, timeout_s: float | None = None) -> JobResult:
        row = await self.wait(timeout_s)
        return _result(row, [c async for c in self.stream(follow=False)])

    async def cancel(self) -> dict[str, Any]:
        self.info = await self.client._request("POST", f"/v1/jobs/{self.id}/cancel")
        return self.info


class AsyncClient:
    """The asynchronous twin of :class:`Client` (same methods, awaited)."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        timeout_s: float = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if url is None or token is None:
            from stoker.api.config import ClientConfig

            cfg = ClientConfig.load()
            url, token = url or cfg.url, token or cfg.token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=headers, timeout=timeout_s, transport=transport
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def _request(self, method: str, path: str, **kw: Any) -> Any:
        for attempt in range(_RETRIES + 1):
            try:
                resp = await self._http.request(method, path, **kw)
            except httpx.TransportError as exc:
                if attempt == _RETRIES:
                    raise BrokerUnavailable(f"{method} {path}: {exc}") from exc
            else:
                if resp.status_code < 500 or attempt == _RETRIES:
                    _raise_for(resp)
                    return resp.json() if resp.content else None
            await asyncio.sleep(0.05 * 2**attempt)
        raise AssertionError("unreachable")

    async def upload(self, code: bytes | str | Path) -> str:
        data = _code_bytes(code)
        assert data is not None
        digest = hashlib.sha256(data).hexdigest()
        resp = await self._http.head(f"/v1/code/{digest}")
        if resp.status_code == 200:
            return digest
        return str((await self._request("POST", "/v1/code", content=data))["digest"])

    async def run(
        self,
        profile: str,
        argv: list[str],
        reuse_tag: str | None = None,
        code: bytes | str | Path | None = None,
        deps: list[str] | None = None,
        env: dict[str, str] | None = None,
        timeout_s: float | None = None,
        shape: JobShape = JobShape(),
        secrets: list[str] | None = None,
    ) -> AsyncJob:
        data = _code_bytes(code)
        digest = await self.upload(data) if data is not None else None
        body = _job_body(profile, argv, reuse_tag, digest, deps, env, timeout_s, shape, secrets)
        key = uuid.uuid4().hex
        row = await self._request("POST", "/v1/jobs", json=body, headers={"Idempotency-Key": key})
        return AsyncJob(self, row)

    async def get(self, job_id: str) -> dict[str, Any]:
        return dict(await self._request("GET", f"/v1/jobs/{job_id}"))

    async def jobs(self, states: list[str] | None = None, limit: int = 100) -> list[dict[str, Any]]:
        params = {"state": states or [], "limit": limit}
        return list(await self._request("GET", "/v1/jobs", params=params))

    async def pods(self) -> list[dict[str, Any]]:
        return list(await self._request("GET", "/v1/pods"))

    async def profiles(self) -> list[dict[str, Any]]:
        return list(await self._request("GET", "/v1/profiles"))

    async def pools(self) -> list[dict[str, Any]]:
        return list(await self._request("GET", "/v1/pools"))

    async def tenants(self) -> list[str]:
        return list(await self._request("GET", "/v1/tenants"))

    async def create_tenant(self, name: str) -> str:
        return str((await self._request("POST", "/v1/tenants", json={"name": name}))["token"])

    async def health(self) -> dict[str, Any]:
        return dict(await self._request("GET", "/v1/health"))

    async def events(
        self, job: str | None = None, after: int = 0, limit: int = 100
    ) -> list[dict[str, Any]]:
        """The broker's decision log (see :meth:`Client.events`)."""
        params: dict[str, Any] = {"after": after, "limit": limit}
        if job is not None:
            params["job"] = job
        return list(await self._request("GET", "/v1/events", params=params))

    async def set_secret(self, name: str, value: str) -> None:
        await self._request("POST", "/v1/secrets", json={"name": name, "value": value})

    async def secrets(self) -> list[dict[str, Any]]:
        return list(await self._request("GET", "/v1/secrets"))

    async def delete_secret(self, name: str) -> None:
        await self._request("DELETE", f"/v1/secrets/{name}")


__all__ = [
    "AsyncClient",
    "AsyncJob",
    "AuthenticationError",
    "BrokerUnavailable",
    "Client",
    "InvalidRequest",
    "Job",
    "JobPreempted",
    "JobResult",
    "JobShape",
    "JobTimeout",
    "NotFound",
    "PermissionDenied",
    "StokerError",
    "pack_code",
]
