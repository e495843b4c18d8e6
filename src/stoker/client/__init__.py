"""The stoker SDK: :class:`Client` (sync) and :class:`AsyncClient` with the same methods.

::

    with stoker.Client(url, token) as c:
        job = c.run("plain", ["python", "-c", "print(1)"], reuse_tag="loop-7")
        print(job.result().exit_code, job.logs())

A submit waits up to ``wait_s`` (default 1 s) for the job to finish: a short call is then
one round trip, its reply carrying the exit and the whole output; a longer job returns its
handle when ``wait_s`` passes, and ``result``/``stream`` go on from there. Code is sent by
digest in the submit and uploaded only when the broker answers that it lacks it.

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
import os
import tarfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import quote

import httpx

_RETRIES = 4
_FINISHED = "finished"
DEFAULT_WAIT_S = 1.0
_CODE_FIELD = "body.code_digest"


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


class TenantLimit(InvalidRequest):
    """The tenant is over one of its caps for now (429: its queued jobs); the same request
    may succeed once some of its jobs have started or ended."""


class StorageFull(StokerError):
    """The broker refuses new jobs while its disk is nearly full (503 ``storage_full``, not
    retried): the message names the disk and the configured floor."""


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
    pods: tuple[str, ...] = ()  # the pods it ran in (rank i in the i-th)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.failure is None


_URL_SHAPE = "the broker's root, like http://127.0.0.1:8765 (no path, no /v1)"


def _base_url(url: str) -> str:
    """``url`` without a trailing slash; InvalidRequest (field ``url``) when it cannot be a
    broker's root URL."""
    parsed = httpx.URL(url)
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise InvalidRequest(f"url: {url!r} is not a URL; it should be {_URL_SHAPE}", field="url")
    return url.rstrip("/")


class _NoCookies(httpx.Cookies):
    """Cookies that are never kept: the broker sets none, and httpx would otherwise wrap
    every reply and its request for the standard library's cookie jar to look for them
    (a tenth of the SDK's CPU per call)."""

    def extract_cookies(self, response: httpx.Response) -> None:
        return None


_NO_COOKIES = _NoCookies()


class _Http(httpx.Client):
    """httpx's client, keeping no cookies (:class:`_NoCookies`)."""

    @property
    def cookies(self) -> httpx.Cookies:
        return _NO_COOKIES


class _AsyncHttp(httpx.AsyncClient):
    """httpx's async client, keeping no cookies (:class:`_NoCookies`)."""

    @property
    def cookies(self) -> httpx.Cookies:
        return _NO_COOKIES


class _Requests:
    """The SDK's requests, built here rather than by ``httpx.Client.request``, which merges
    the client's headers, cookies, query and base URL into each request anew: the headers
    every request carries are made once, and so is each URL (path and query) sent before
    (the submit's is the same on every call). Sent with the client's ``send``."""

    _MAX_URLS = 256  # URLs of job ids come and go: the cache is emptied when it is full

    def __init__(self, url: str, token: str | None, timeout_s: float) -> None:
        self.base = url
        self.headers = httpx.Headers(
            {
                "Host": httpx.URL(url).netloc.decode("ascii"),
                "Accept": "*/*",
                "Accept-Encoding": "gzip, deflate",
                "Connection": "keep-alive",
                "User-Agent": f"python-httpx/{httpx.__version__}",
                **({"Authorization": f"Bearer {token}"} if token else {}),
            }
        )
        self.json_headers = httpx.Headers({**self.headers, "Content-Type": "application/json"})
        self.extensions = {"timeout": httpx.Timeout(timeout_s).as_dict()}
        self._urls: dict[tuple[str, tuple[tuple[str, Any], ...]], httpx.URL] = {}

    def url(self, path: str, params: dict[str, Any] | None) -> httpx.URL:
        """``path`` (and its query) under the broker's URL, encoded as httpx encodes it."""
        items = tuple((params or {}).items())
        if any(isinstance(v, list) for _, v in items):  # a list's query: not kept
            return httpx.URL(self.base + path, params=params)
        key = (path, items)
        url = self._urls.get(key)
        if url is None:
            if len(self._urls) >= self._MAX_URLS:
                self._urls.clear()
            url = self._urls[key] = httpx.URL(self.base + path, params=params or None)
        return url

    def build(
        self,
        method: str,
        path: str,
        params: dict[str, Any] | None = None,
        json: Any = None,
        content: Any = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Request:
        """One request: ``json`` encoded as httpx encodes it, ``headers`` on top of the
        client's own."""
        base = self.headers
        if json is not None:
            content = _dumps(json)
            base = self.json_headers
        if headers:
            base = httpx.Headers(base)
            base.update(headers)
        return httpx.Request(
            method,
            self.url(path, params),
            headers=base,
            content=content,
            extensions=self.extensions,
        )


def _dumps(body: Any) -> bytes:
    """A JSON body, as httpx encodes one (compact, UTF-8, no NaN)."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _raise_for(resp: httpx.Response) -> None:
    if resp.status_code < 400:
        return
    body: Any = None
    try:
        body = resp.json()
        message, field = str(body.get("message", body)), body.get("field")
    except (ValueError, AttributeError):
        message, field = resp.text, None
    if resp.status_code in (404, 405) and not (isinstance(body, dict) and body.get("field")):
        # the broker's own 404s name a field: nothing here answers this path
        raise InvalidRequest(
            f"url: no stoker API at {resp.request.url}; the URL should be {_URL_SHAPE}",
            resp.status_code,
            "url",
        )
    if _storage_full(resp):
        raise StorageFull(message, resp.status_code, field)
    cls = {401: AuthenticationError, 403: PermissionDenied, 404: NotFound, 429: TenantLimit}.get(
        resp.status_code, InvalidRequest if resp.status_code < 500 else BrokerUnavailable
    )
    raise cls(message, resp.status_code, field)


def _storage_full(resp: httpx.Response) -> bool:
    """A 503 that retrying will not mend: the broker's disk is nearly full."""
    if resp.status_code != 503:
        return False
    try:
        return bool(resp.json().get("error") == "storage_full")
    except (ValueError, AttributeError):
        return False


def _final(resp: httpx.Response, attempt: int) -> bool:
    """Whether ``resp`` is the answer (no retry): below 500, the last try, or a full disk."""
    return resp.status_code < 500 or attempt == _RETRIES or _storage_full(resp)


def _unreachable(url: str, method: str, path: str, exc: Exception) -> BrokerUnavailable:
    return BrokerUnavailable(
        f"cannot reach the broker at {url} ({method} {path}: {exc or type(exc).__name__});"
        " start one with `stoker up`, or set STOKER_URL / --url"
    )


MAX_CODE_BYTES = 64 * 1024 * 1024  # the broker's default cap on a code archive
_IGNORE_FILES = (".gitignore", ".stokerignore")


def code_files(root: Path) -> list[Path]:
    """The files of a code directory, sorted, without those its top-level ``.gitignore``
    and ``.stokerignore`` exclude (git's rules; ``.git/`` is always left out)."""
    import pathspec

    lines = [".git/"]
    for name in _IGNORE_FILES:
        if (root / name).is_file():
            lines += (root / name).read_text().splitlines()
    spec = pathspec.GitIgnoreSpec.from_lines(lines)
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and not spec.match_file(p.relative_to(root).as_posix())
    )


def pack_code(path: Path | str, max_bytes: int = MAX_CODE_BYTES) -> bytes:
    """A directory (or one file) as a reproducible gzipped tar: same tree, same digest.
    Files ignored by ``.gitignore``/``.stokerignore`` stay out; a tree over ``max_bytes``
    (before compression) is refused before anything is packed."""
    root = Path(path)
    if not root.exists():
        raise InvalidRequest(f"code: {root} does not exist", field="code")
    files = [root] if root.is_file() else code_files(root)
    size = sum(f.stat().st_size for f in files)
    if size > max_bytes:
        raise InvalidRequest(
            f"code: {root} holds {size} bytes of files, over the {max_bytes}-byte cap"
            " (leave files out with .stokerignore)",
            field="code",
        )
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
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


# an upload with a progress display is sent in pieces of this size
_UPLOAD_CHUNK = 256 * 1024


@dataclass(frozen=True, slots=True)
class _Chunks:
    """``data`` in pieces, telling ``progress`` how much has gone; iterable again (a
    retried request sends it from the start)."""

    data: bytes
    progress: Callable[[int, int], None]

    def __iter__(self) -> Iterator[bytes]:
        for start in range(0, len(self.data), _UPLOAD_CHUNK):
            piece = self.data[start : start + _UPLOAD_CHUNK]
            yield piece
            self.progress(start + len(piece), len(self.data))


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
    labels: dict[str, str] | None = None,
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
        "labels": dict(labels or {}),
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


@dataclass(frozen=True, slots=True)
class _Submit:
    """One submit, ready to send (and to send again after a code upload)."""

    code: bytes | None
    body: dict[str, Any]
    params: dict[str, float]
    headers: dict[str, str]

    def kwargs(self) -> dict[str, Any]:
        return {"json": self.body, "params": self.params, "headers": self.headers}

    @property
    def digest(self) -> str:
        """The code's digest ("" without code)."""
        return str(self.body.get("code_digest") or "")

    def needs_upload(self, exc: StokerError) -> bool:
        """The broker refused the submit because it lacks this code (upload, then again)."""
        return self.code is not None and isinstance(exc, NotFound) and exc.field == _CODE_FIELD


class _CodeUploads:
    """One client's uploads of code archives, one at a time per digest: concurrent submits
    of the same code that the broker lacks wait for one upload instead of each sending it.

    Each upload is an attempt; a submit notes the attempts before it waits. If one was made
    while it waited, its outcome is the submit's too (sent: submit again; failed: the same
    error, not another try); else the submit uploads. So a later submit after a failure
    tries again, and one after a broker lost the archive sends it again."""

    def __init__(self) -> None:
        self._attempts: dict[str, int] = {}
        self._failed: dict[str, tuple[int, BaseException]] = {}  # digest -> its last failure

    def seen(self, digest: str) -> int:
        """The attempts so far, read before waiting for the digest's turn."""
        return self._attempts.get(digest, 0)

    def settled(self, digest: str, seen: int) -> bool:
        """In the digest's turn: whether an attempt made while waiting settles it (raises
        that attempt's error if it failed); else counts the caller's own attempt."""
        now = self._attempts.get(digest, 0)
        if now != seen:
            failed = self._failed.get(digest)
            if failed is not None and failed[0] == now:
                raise failed[1]
            return True
        self._attempts[digest] = now + 1
        return False

    def failed(self, digest: str, exc: BaseException) -> None:
        self._failed[digest] = (self._attempts[digest], exc)

    def sent(self, digest: str) -> None:
        self._failed.pop(digest, None)


def _submit(
    profile: str,
    argv: list[str],
    reuse_tag: str | None,
    code: bytes | str | Path | None,
    deps: list[str] | None,
    env: dict[str, str] | None,
    timeout_s: float | None,
    shape: JobShape,
    wait_s: float,
    idempotency_key: str | None,
    labels: dict[str, str] | None,
    secrets: list[str] | None = None,
) -> _Submit:
    if isinstance(argv, str):
        raise TypeError(
            f"argv must be a list of strings, not a string: pass {argv.split()!r}"
            " (or shlex.split(...) for a shell-quoted line)"
        )
    data = _code_bytes(code)
    digest = None if data is None else hashlib.sha256(data).hexdigest()
    # the same key on every retry and on the resubmit after an upload: never two jobs
    key = idempotency_key or uuid.uuid4().hex
    # no tag: a fresh caller per job (never anyone's pod), named after the key so that the
    # same key sends the same body
    tag = reuse_tag or f"once-{hashlib.sha256(key.encode()).hexdigest()[:32]}"
    body = _job_body(profile, argv, tag, digest, deps, env, timeout_s, shape, labels, secrets)
    headers = {"Idempotency-Key": key}
    return _Submit(data, body, {"wait": wait_s} if wait_s > 0 else {}, headers)


def _jobs_query(
    states: list[str] | None, limit: int, labels: dict[str, str] | None
) -> dict[str, Any]:
    return {
        "state": states or [],
        "limit": limit,
        "label": [f"{k}={v}" for k, v in (labels or {}).items()],
    }


def _inline_output(row: dict[str, Any]) -> list[tuple[str, bytes]] | None:
    """The output a waited submit carried (None when the job had not finished)."""
    out = row.pop("output", None)
    if out is None:
        return None
    return [(s, base64.b64decode(out[s])) for s in ("stdout", "stderr")]


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
        tuple(row.get("pods") or ()),
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
        self._output = _inline_output(row)  # set when the submit waited for the end
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
        """Wait for the job, then its exit and output (no further call when the submit's
        reply carried them)."""
        if self._output is not None:
            return _result(self.info, self._output)
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
        self.url = _base_url(url)
        self.token = token  # the caller's bearer token, e.g. for a child process's env
        self._requests = _Requests(self.url, token, timeout_s)
        self._http = _Http(base_url=self.url, headers=headers, timeout=timeout_s)
        self._uploads = _CodeUploads()
        self._upload_locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, path: str, **kw: Any) -> Any:
        for attempt in range(_RETRIES + 1):
            try:
                resp = self._http.send(self._requests.build(method, path, **kw))
            except httpx.TransportError as exc:
                if attempt == _RETRIES:
                    raise _unreachable(self.url, method, path, exc) from exc
            else:
                if _final(resp, attempt):
                    _raise_for(resp)
                    return resp.json() if resp.content else None
            time.sleep(0.05 * 2**attempt)
        raise AssertionError("unreachable")

    def upload(
        self, code: bytes | str | Path, progress: Callable[[int, int], None] | None = None
    ) -> str:
        """Upload a code archive (a directory is packed) once; returns its digest.
        ``progress(sent, total)`` hears the bytes sent as they go (a progress bar)."""
        data = _code_bytes(code)
        assert data is not None
        digest = hashlib.sha256(data).hexdigest()
        resp = self._http.head(f"/v1/code/{digest}")
        if resp.status_code == 200:
            if progress is not None:
                progress(len(data), len(data))  # there already: nothing left to send
            return digest
        if progress is None:
            return str(self._request("POST", "/v1/code", content=data)["digest"])
        headers = {"Content-Length": str(len(data))}
        body = _Chunks(data, progress)
        return str(self._request("POST", "/v1/code", content=body, headers=headers)["digest"])

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
        wait_s: float = DEFAULT_WAIT_S,
        idempotency_key: str | None = None,
        labels: dict[str, str] | None = None,
        secrets: list[str] | None = None,
    ) -> Job:
        """Submit a job (``argv`` a list: a string is a TypeError); returns its handle when
        it finishes or after ``wait_s`` (0: at once). ``shape``: its class, workers and GPUs
        (default: a one-worker pool job in the profile's shape). ``idempotency_key``: the
        same key gives the same job (default: a fresh key per call). ``labels``: your own
        tags, returned with the job and filtered on by :meth:`jobs`. ``secrets`` names tenant
        secrets (:meth:`set_secret`) the job gets as environment variables of the same names."""
        sub = _submit(
            profile,
            argv,
            reuse_tag,
            code,
            deps,
            env,
            timeout_s,
            shape,
            wait_s,
            idempotency_key,
            labels,
            secrets,
        )
        seen = self._uploads.seen(sub.digest)  # before the submit: an upload meanwhile counts
        try:
            row = self._request("POST", "/v1/jobs", **sub.kwargs())
        except StokerError as exc:
            if not sub.needs_upload(exc):
                raise
            self._upload_once(sub, seen)
            row = self._request("POST", "/v1/jobs", **sub.kwargs())
        return Job(self, row)

    def _upload_once(self, sub: _Submit, seen: int) -> None:
        """Upload the code ``sub`` names, unless another thread's upload of it settles it
        since ``seen`` (:class:`_CodeUploads`)."""
        digest = sub.digest
        with self._locks_lock:
            lock = self._upload_locks.setdefault(digest, threading.Lock())
        with lock:
            if self._uploads.settled(digest, seen):
                return
            try:
                self._request("POST", "/v1/code", content=sub.code)
            except BaseException as exc:
                self._uploads.failed(digest, exc)
                raise
            self._uploads.sent(digest)

    def get(self, job_id: str) -> dict[str, Any]:
        return dict(self._request("GET", f"/v1/jobs/{job_id}"))

    def jobs(
        self,
        states: list[str] | None = None,
        limit: int = 100,
        labels: dict[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        """Your jobs, newest first: only ``states``, only those with every label given."""
        return list(self._request("GET", "/v1/jobs", params=_jobs_query(states, limit, labels)))

    def pods(self) -> list[dict[str, Any]]:
        return list(self._request("GET", "/v1/pods"))

    def profiles(self) -> list[dict[str, Any]]:
        return list(self._request("GET", "/v1/profiles"))

    def session_state(self, profile: str, reuse_tag: str) -> dict[str, Any]:
        """Whether a session (this tenant's ``reuse_tag`` on ``profile``) still has a pod,
        and so its files: ``live``, ``pods``, ``until`` (its warm pod's keep-alive end).
        Any process may ask, not only the one that ran the session."""
        path = f"/v1/sessions/{quote(profile, safe='')}/{quote(reuse_tag, safe='')}"
        return dict(self._request("GET", path))

    def renew_keepalive(self, profile: str, reuse_tag: str, keepalive_s: float) -> dict[str, Any]:
        """Keep this tenant's warm pod of (profile, reuse tag) ``keepalive_s`` seconds from
        now at least; returns ``until`` and the ``pods`` the tag holds (empty: none is
        left). Over the broker's cap: :class:`InvalidRequest` naming ``body.keepalive_s``."""
        body = {"profile": profile, "reuse_tag": reuse_tag, "keepalive_s": keepalive_s}
        return dict(self._request("POST", "/v1/keepalive", json=body))

    def pools(self) -> list[dict[str, Any]]:
        """Per GPU pool: capacity, HP and spot GPUs in use, spot quota, eta, eviction rate
        over the last day, the HP demand forecast, and the queued hp and spot jobs."""
        return list(self._request("GET", "/v1/pools"))

    def tenants(self) -> list[str]:
        return list(self._request("GET", "/v1/tenants"))

    def create_tenant(self, name: str) -> str:
        """(admin) Add a tenant; returns its token."""
        return str(self._request("POST", "/v1/tenants", json={"name": name})["token"])

    def delete_tenant(self, name: str, purge: bool = False) -> dict[str, Any]:
        """(admin) Revoke a tenant: its tokens stop working at once, its secrets and code
        go, its queued and running jobs are cancelled; its job history is kept or removed
        as the broker is configured (``purge``: removed). Returns what was done."""
        return dict(self._request("DELETE", f"/v1/tenants/{name}", params={"purge": purge}))

    def rotate_token(self, name: str, grace_s: float = 300.0) -> dict[str, Any]:
        """(admin) A new token for a tenant; its previous one stays valid ``grace_s`` more.
        Returns ``name``, ``token`` and ``previous_valid_until``."""
        return dict(self._request("POST", f"/v1/tenants/{name}/token", params={"grace_s": grace_s}))

    def health(self) -> dict[str, Any]:
        return dict(self._request("GET", "/v1/health"))

    def events(
        self, job: str | None = None, after: int = 0, limit: int = 100
    ) -> list[dict[str, Any]]:
        """The broker's decision log, oldest first (a tenant's own; the admin's all): why
        each job took its path (warm, standby, cold) or waited, each pod's stop reason. With
        ``after`` (the last sequence number seen) the first ``limit`` events after it."""
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

    def session(
        self,
        profile: str,
        reuse_tag: str | None = None,
        on_pod_lost: Callable[[PodLost], None] | None = None,
    ) -> Session:
        """Calls sharing one warm pod: ``with client.session("plain") as s: s.run([...])``
        (a fresh reuse tag unless ``reuse_tag`` is given)."""
        return Session(self, profile, reuse_tag, on_pod_lost)


# ----------------------------------------------------------------------------- async


class AsyncJob:
    """A submitted job (from :meth:`AsyncClient.run`)."""

    def __init__(self, client: AsyncClient, row: dict[str, Any]) -> None:
        self.client = client
        self._output = _inline_output(row)
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
        if self._output is not None:
            return _result(self.info, self._output)
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
        self.url = _base_url(url)
        self.token = token  # the caller's bearer token, e.g. for a child process's env
        self._requests = _Requests(self.url, token, timeout_s)
        self._http = _AsyncHttp(
            base_url=self.url, headers=headers, timeout=timeout_s, transport=transport
        )
        self._uploads = _CodeUploads()
        self._upload_locks: dict[str, asyncio.Lock] = {}

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def _request(self, method: str, path: str, **kw: Any) -> Any:
        for attempt in range(_RETRIES + 1):
            try:
                resp = await self._http.send(self._requests.build(method, path, **kw))
            except httpx.TransportError as exc:
                if attempt == _RETRIES:
                    raise _unreachable(self.url, method, path, exc) from exc
            else:
                if _final(resp, attempt):
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
        wait_s: float = DEFAULT_WAIT_S,
        idempotency_key: str | None = None,
        labels: dict[str, str] | None = None,
        secrets: list[str] | None = None,
    ) -> AsyncJob:
        sub = _submit(
            profile,
            argv,
            reuse_tag,
            code,
            deps,
            env,
            timeout_s,
            shape,
            wait_s,
            idempotency_key,
            labels,
            secrets,
        )
        seen = self._uploads.seen(sub.digest)  # before the submit: an upload meanwhile counts
        try:
            row = await self._request("POST", "/v1/jobs", **sub.kwargs())
        except StokerError as exc:
            if not sub.needs_upload(exc):
                raise
            await self._upload_once(sub, seen)
            row = await self._request("POST", "/v1/jobs", **sub.kwargs())
        return AsyncJob(self, row)

    async def _upload_once(self, sub: _Submit, seen: int) -> None:
        """The twin of :meth:`Client._upload_once`."""
        digest = sub.digest
        async with self._upload_locks.setdefault(digest, asyncio.Lock()):
            if self._uploads.settled(digest, seen):
                return
            try:
                await self._request("POST", "/v1/code", content=sub.code)
            except BaseException as exc:
                self._uploads.failed(digest, exc)
                raise
            self._uploads.sent(digest)

    async def get(self, job_id: str) -> dict[str, Any]:
        return dict(await self._request("GET", f"/v1/jobs/{job_id}"))

    async def jobs(
        self,
        states: list[str] | None = None,
        limit: int = 100,
        labels: dict[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        params = _jobs_query(states, limit, labels)
        return list(await self._request("GET", "/v1/jobs", params=params))

    async def pods(self) -> list[dict[str, Any]]:
        return list(await self._request("GET", "/v1/pods"))

    async def profiles(self) -> list[dict[str, Any]]:
        return list(await self._request("GET", "/v1/profiles"))

    async def session_state(self, profile: str, reuse_tag: str) -> dict[str, Any]:
        """See :meth:`Client.session_state`."""
        path = f"/v1/sessions/{quote(profile, safe='')}/{quote(reuse_tag, safe='')}"
        return dict(await self._request("GET", path))

    async def renew_keepalive(
        self, profile: str, reuse_tag: str, keepalive_s: float
    ) -> dict[str, Any]:
        """See :meth:`Client.renew_keepalive`."""
        body = {"profile": profile, "reuse_tag": reuse_tag, "keepalive_s": keepalive_s}
        return dict(await self._request("POST", "/v1/keepalive", json=body))

    async def pools(self) -> list[dict[str, Any]]:
        return list(await self._request("GET", "/v1/pools"))

    async def tenants(self) -> list[str]:
        return list(await self._request("GET", "/v1/tenants"))

    async def create_tenant(self, name: str) -> str:
        return str((await self._request("POST", "/v1/tenants", json={"name": name}))["token"])

    async def delete_tenant(self, name: str, purge: bool = False) -> dict[str, Any]:
        path = f"/v1/tenants/{name}"
        return dict(await self._request("DELETE", path, params={"purge": purge}))

    async def rotate_token(self, name: str, grace_s: float = 300.0) -> dict[str, Any]:
        path = f"/v1/tenants/{name}/token"
        return dict(await self._request("POST", path, params={"grace_s": grace_s}))

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

    def session(
        self,
        profile: str,
        reuse_tag: str | None = None,
        on_pod_lost: Callable[[PodLost], None] | None = None,
    ) -> AsyncSession:
        """``async with client.session("plain") as s: await s.run([...])``."""
        return AsyncSession(self, profile, reuse_tag, on_pod_lost)


# ----------------------------------------------------------------------------- sessions

# files.write sends a file in chunks of argv (one argument may hold 128 KiB on Linux)
_CHUNK = 96 * 1024
_WRITE = (  # its parent directories made as needed, as an upload would
    "import base64, os, sys\n"
    "os.makedirs(os.path.dirname(sys.argv[1]) or '.', exist_ok=True)\n"
    "with open(sys.argv[1], sys.argv[2]) as f: f.write(base64.b64decode(sys.argv[3]))"
)
_READ = (
    "import base64, sys\n"
    "try: data = open(sys.argv[1], 'rb').read()\n"
    "except OSError as e: sys.exit(f'{e.strerror}: {sys.argv[1]}')\n"
    "sys.stdout.write(base64.b64encode(data).decode())"
)


_LIST = (
    "import json, os, sys\n"
    "try: names = sorted(os.listdir(sys.argv[1]))\n"
    "except OSError as e: sys.exit(f'{e.strerror}: {sys.argv[1]}')\n"
    "paths = [(n, os.path.join(sys.argv[1], n)) for n in names]\n"
    "print(json.dumps([{'name': n, 'size': os.stat(p).st_size, 'dir': os.path.isdir(p)}\n"
    "                  for n, p in paths]))"
)
_STAT = (
    "import json, os, sys\n"
    "try: st = os.stat(sys.argv[1])\n"
    "except OSError as e: sys.exit(f'{e.strerror}: {sys.argv[1]}')\n"
    "d = os.path.isdir(sys.argv[1])\n"
    "print(json.dumps({'size': st.st_size, 'dir': d, 'mtime': st.st_mtime}))"
)
_DELETE = (
    "import os, sys\n"
    "try: (os.rmdir if os.path.isdir(sys.argv[1]) else os.remove)(sys.argv[1])\n"
    "except OSError as e: sys.exit(f'{e.strerror}: {sys.argv[1]}')"
)


class SessionFileError(StokerError):
    """``files.read``/``files.write`` failed in the pod (no such file, no permission)."""


@dataclass(frozen=True, slots=True)
class PodLost:
    """A session's call ran in a pod other than the one before: the warm pod is gone (its
    keep-alive ran out, it failed, or it was taken back) and its workspace with it."""

    old_pod: str
    new_pod: str


def _write_argvs(path: str, data: bytes) -> list[list[str]]:
    """The jobs that write ``data`` to ``path``: the first truncates, the rest append."""
    chunks = [data[i : i + _CHUNK] for i in range(0, len(data), _CHUNK)] or [b""]
    return [
        ["python", "-c", _WRITE, path, "wb" if i == 0 else "ab", base64.b64encode(c).decode()]
        for i, c in enumerate(chunks)
    ]


_POD_GONE = "the session's pod was gone: its workspace went with it"


def _file_result(res: JobResult, what: str, path: str, live: bool = True) -> JobResult:
    """``res``, or SessionFileError saying why it failed: the pod's own error, and that the
    session's pod was gone (``live`` False: its keep-alive ended and its files with it)."""
    if not res.ok:
        reason = res.stderr.decode(errors="replace").strip().splitlines()[-1:] or [res.failure]
        gone = "" if live else f" ({_POD_GONE})"
        raise SessionFileError(f"files.{what} {path}: {reason[0]}{gone}")
    return res


# what a file transfer's refusal says when the SDK works around it: the session has no pod
# (a write makes one with a call; a read says its workspace went), or the broker's runtime
# cannot reach a pod's disk (the file moves by jobs instead)
_NO_POD, _NOT_CARRIED = "no_pod", "not_carried"
_TRANSFER_CHUNK = 256 * 1024
Source = bytes | str | Path | BinaryIO


def _file_url(profile: str, reuse_tag: str, path: str) -> str:
    # refused here as the broker would: an HTTP client resolves dot segments away first
    names = [p for p in path.split("/") if p not in ("", ".")]
    if path.startswith("/") or ".." in names or not names:
        raise InvalidRequest(f"path: {path!r} must name a file inside the workspace", 422, "path")
    return f"/v1/sessions/{quote(profile, safe='')}/{quote(reuse_tag, safe='')}/files/" + "/".join(
        quote(p, safe="") for p in names
    )


def _transfer_refusal(resp: httpx.Response, what: str, path: str) -> str | None:
    """None when ``resp`` succeeded; ``no_pod`` or ``not_carried`` when the SDK works
    around the refusal; otherwise the SDK's error for it (SessionFileError for a missing
    file or a full workspace)."""
    if resp.status_code < 400:
        return None
    try:
        body = resp.json()
        error, message, field = body.get("error"), str(body.get("message")), body.get("field")
    except (ValueError, AttributeError):
        error, message, field = None, resp.text, None
    if error in (_NO_POD, _NOT_CARRIED):
        return str(error)
    if field == "path" and error in ("not_found", "workspace_full"):
        raise SessionFileError(f"files.{what} {path}: {message}", resp.status_code, "path")
    _raise_for(resp)
    raise AssertionError("unreachable")


def _body(
    source: Source, progress: Callable[[int, int], None] | None
) -> tuple[int, Iterator[bytes]]:
    """The size of what ``source`` holds (bytes, a local file's path, an open binary file
    read from where it stands) and its bytes in pieces, telling ``progress``."""
    if isinstance(source, bytes):
        size, fh = len(source), io.BytesIO(source)
    elif isinstance(source, (str, Path)):
        size, fh = Path(source).stat().st_size, open(source, "rb")  # noqa: SIM115 (closed below)
    else:
        fh = source
        size = os.fstat(fh.fileno()).st_size - fh.tell() if hasattr(fh, "fileno") else -1

    def pieces() -> Iterator[bytes]:
        sent = 0
        try:
            while chunk := fh.read(_TRANSFER_CHUNK):
                sent += len(chunk)
                if progress is not None:
                    progress(sent, size)
                yield chunk
        finally:
            if fh is not source:
                fh.close()

    return size, pieces()


def _rewind(source: Source, start: int | None) -> None:
    """Put an open file back where the upload began (a retry sends it again)."""
    if start is not None:
        source.seek(start)  # type: ignore[union-attr]


def _uploaded(session: _SessionState, resp: httpx.Response, path: str) -> int | str:
    """The bytes an upload put in the pod, or the refusal the SDK works around
    (``no_pod``, ``not_carried``)."""
    refusal = _transfer_refusal(resp, "upload", path)
    if refusal is not None:
        return refusal
    body = resp.json()
    session._seen(body["pod"])
    return int(body["size"])


def _all_bytes(source: Source) -> bytes:
    if isinstance(source, bytes):
        return source
    if isinstance(source, (str, Path)):
        return Path(source).read_bytes()
    return source.read()


def _put_headers(size: int) -> dict[str, str]:
    return {"Content-Type": "application/octet-stream"} | (
        {"Content-Length": str(size)} if size >= 0 else {}
    )


class _SessionState:
    """What sync and async sessions share: the reuse tag, the pod the last call ran in,
    and the pod-lost check."""

    def __init__(
        self, profile: str, reuse_tag: str | None, on_pod_lost: Callable[[PodLost], None] | None
    ) -> None:
        self.profile = profile
        self.reuse_tag = reuse_tag or f"session-{uuid.uuid4().hex}"
        self.pod: str | None = None
        self.pod_lost = False  # the latest call ran in a new pod (the workspace reset)
        self.lost: list[PodLost] = []
        self.on_pod_lost = on_pod_lost

    def _landed(self, res: JobResult) -> JobResult:
        self._seen(res.pods[0] if res.pods else None)
        return res

    def _seen(self, new: str | None) -> None:
        """A call (or a file transfer) of the session went to pod ``new``."""
        self.pod_lost = self.pod is not None and new is not None and new != self.pod
        if self.pod_lost:
            assert self.pod is not None and new is not None
            event = PodLost(self.pod, new)
            self.lost.append(event)
            if self.on_pod_lost is not None:
                self.on_pod_lost(event)
        self.pod = new or self.pod


class Session(_SessionState):
    """Calls that share one warm pod (``client.session(profile)``): ``run``, ``files``.
    Each call is a job of the session's reuse tag, so it lands in the same pod while the
    pod's keep-alive holds; ``pod_lost`` (and ``on_pod_lost``) says when it did not."""

    def __init__(
        self,
        client: Client,
        profile: str,
        reuse_tag: str | None = None,
        on_pod_lost: Callable[[PodLost], None] | None = None,
    ) -> None:
        super().__init__(profile, reuse_tag, on_pod_lost)
        self.client = client
        self.files = SessionFiles(self)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        pass  # the pod stays warm for its keep-alive: a later session of the tag reuses it

    def run(
        self,
        argv: list[str],
        timeout_s: float | None = None,
        *,
        wait_timeout_s: float | None = None,
        **kw: Any,
    ) -> JobResult:
        """Run ``argv`` in the session's pod and return its result. ``timeout_s`` is the
        job's time limit, as :meth:`Client.run`'s (None: the broker's default), and the other
        keywords are that method's; ``wait_timeout_s`` bounds the wait for the result
        (``JobTimeout``; the job runs on)."""
        job = self.client.run(
            self.profile, argv, reuse_tag=self.reuse_tag, timeout_s=timeout_s, **kw
        )
        return self._landed(job.result(wait_timeout_s))

    def renew(self, keepalive_s: float) -> dict[str, Any]:
        """Keep the session's pod ``keepalive_s`` seconds from now at least (a running
        call's pod once the call ends), up to the broker's cap; returns ``until`` and the
        ``pods`` it holds (empty: the pod is gone, the next call starts in a fresh one)."""
        return self.client.renew_keepalive(self.profile, self.reuse_tag, keepalive_s)

    def exists(self) -> bool:
        """Whether the session's pod (and so its workspace) is still there: a process that
        picks a session up by its reuse tag asks this before it reads files."""
        return bool(self.client.session_state(self.profile, self.reuse_tag)["live"])


class SessionFiles:
    """Files in the session pod's workspace (the jobs' working directory), streamed
    between this process and the pod (``max_file_bytes`` caps one file); on a runtime whose
    pods the broker cannot reach (Kubernetes), moved by jobs in the pod instead. A file
    missing because the pod itself is gone says so."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def _url(self, path: str) -> str:
        return _file_url(self.session.profile, self.session.reuse_tag, path)

    def _do(self, argv: list[str], what: str, path: str) -> JobResult:
        live = self.session.exists()  # before the call: the call itself makes a pod
        return _file_result(self.session.run(argv), what, path, live)

    def write(self, path: str, data: bytes | str) -> None:
        """Put ``data`` at ``path`` (parents made; a file there is replaced whole)."""
        self.upload(path, data.encode() if isinstance(data, str) else data)

    def upload(
        self, path: str, source: Source, progress: Callable[[int, int], None] | None = None
    ) -> int:
        """Stream ``source`` (bytes, a local file's path, or an open binary file) to
        ``path``; the bytes sent. ``progress(sent, total)`` hears them go. A session with no
        pod yet gets one first (a call)."""
        http = self.session.client._http
        start = source.tell() if hasattr(source, "tell") else None
        for attempt in range(2):
            if attempt:
                _rewind(source, start)
            size, pieces = _body(source, progress)
            try:
                resp = http.put(self._url(path), content=pieces, headers=_put_headers(size))
            except httpx.TransportError as exc:
                raise _unreachable(self.session.client.url, "PUT", self._url(path), exc) from exc
            done = _uploaded(self.session, resp, path)
            if isinstance(done, int):
                return done
            if done == _NOT_CARRIED:
                _rewind(source, start)
                data = _all_bytes(source)
                for argv in _write_argvs(path, data):
                    _file_result(self.session.run(argv), "write", path)
                return len(data)
            self.session.run(["python", "-c", "pass"])  # no pod: a call makes one
        raise SessionFileError(f"files.upload {path}: the session's pod went during the upload")

    def read(self, path: str) -> bytes:
        """The bytes of ``path``."""
        buf = io.BytesIO()
        self.download(path, buf)
        return buf.getvalue()

    def download(
        self,
        path: str,
        dest: str | Path | BinaryIO,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Stream ``path`` into ``dest`` (a local path, written whole or not at all, or an
        open binary file); the bytes received, told to ``progress(received, total)``."""
        http = self.session.client._http
        try:
            with http.stream("GET", self._url(path)) as resp:
                if resp.status_code >= 400:
                    resp.read()
                refusal = _transfer_refusal(resp, "read", path)
                if refusal is None:
                    total = int(resp.headers.get("content-length", -1))
                    self.session._seen(resp.headers.get("x-stoker-pod"))
                    return _save(resp.iter_bytes(_TRANSFER_CHUNK), dest, total, progress)
        except httpx.TransportError as exc:
            raise _unreachable(self.session.client.url, "GET", self._url(path), exc) from exc
        if refusal == _NO_POD:
            raise SessionFileError(f"files.read {path}: {_POD_GONE}", 409, "path")
        res = self._do(["python", "-c", _READ, path], "read", path)
        data = base64.b64decode(res.stdout)
        return _save(iter([data]), dest, len(data), progress)

    def list(self, path: str = ".") -> list[dict[str, Any]]:
        """The entries under ``path``: ``name``, ``size`` (bytes), ``dir``."""
        return list(json.loads(self._do(["python", "-c", _LIST, path], "list", path).stdout))

    def stat(self, path: str) -> dict[str, Any]:
        """``size`` (bytes), ``dir`` and ``mtime`` of ``path``."""
        return dict(json.loads(self._do(["python", "-c", _STAT, path], "stat", path).stdout))

    def delete(self, path: str) -> None:
        """Remove a file (or an empty directory)."""
        self._do(["python", "-c", _DELETE, path], "delete", path)


def _save(
    chunks: Iterator[bytes],
    dest: str | Path | BinaryIO,
    total: int,
    progress: Callable[[int, int], None] | None,
) -> int:
    """Write ``chunks`` to ``dest``: a local path is written beside itself and renamed, so
    a broken transfer leaves no half file."""
    got = 0
    if isinstance(dest, (str, Path)):
        part = Path(f"{dest}.part")
        with open(part, "wb") as fh:
            got = _save(chunks, fh, total, progress)
        part.replace(dest)
        return got
    for chunk in chunks:
        dest.write(chunk)
        got += len(chunk)
        if progress is not None:
            progress(got, total)
    return got


class AsyncSession(_SessionState):
    """The asynchronous twin of :class:`Session` (``async with client.session(...)``)."""

    def __init__(
        self,
        client: AsyncClient,
        profile: str,
        reuse_tag: str | None = None,
        on_pod_lost: Callable[[PodLost], None] | None = None,
    ) -> None:
        super().__init__(profile, reuse_tag, on_pod_lost)
        self.client = client
        self.files = AsyncSessionFiles(self)

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        pass

    async def run(
        self,
        argv: list[str],
        timeout_s: float | None = None,
        *,
        wait_timeout_s: float | None = None,
        **kw: Any,
    ) -> JobResult:
        """See :meth:`Session.run`."""
        job = await self.client.run(
            self.profile, argv, reuse_tag=self.reuse_tag, timeout_s=timeout_s, **kw
        )
        return self._landed(await job.result(wait_timeout_s))

    async def renew(self, keepalive_s: float) -> dict[str, Any]:
        """See :meth:`Session.renew`."""
        return await self.client.renew_keepalive(self.profile, self.reuse_tag, keepalive_s)

    async def exists(self) -> bool:
        """See :meth:`Session.exists`."""
        return bool((await self.client.session_state(self.profile, self.reuse_tag))["live"])


class AsyncSessionFiles:
    """The asynchronous twin of :class:`SessionFiles`."""

    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    def _url(self, path: str) -> str:
        return _file_url(self.session.profile, self.session.reuse_tag, path)

    async def _do(self, argv: list[str], what: str, path: str) -> JobResult:
        live = await self.session.exists()
        return _file_result(await self.session.run(argv), what, path, live)

    async def write(self, path: str, data: bytes | str) -> None:
        """See :meth:`SessionFiles.write`."""
        await self.upload(path, data.encode() if isinstance(data, str) else data)

    async def upload(
        self, path: str, source: Source, progress: Callable[[int, int], None] | None = None
    ) -> int:
        """See :meth:`SessionFiles.upload`."""
        http = self.session.client._http
        start = source.tell() if hasattr(source, "tell") else None
        for attempt in range(2):
            if attempt:
                _rewind(source, start)
            size, pieces = _body(source, progress)
            try:
                resp = await http.put(
                    self._url(path), content=_aiter(pieces), headers=_put_headers(size)
                )
            except httpx.TransportError as exc:
                raise _unreachable(self.session.client.url, "PUT", self._url(path), exc) from exc
            done = _uploaded(self.session, resp, path)
            if isinstance(done, int):
                return done
            if done == _NOT_CARRIED:
                _rewind(source, start)
                data = _all_bytes(source)
                for argv in _write_argvs(path, data):
                    _file_result(await self.session.run(argv), "write", path)
                return len(data)
            await self.session.run(["python", "-c", "pass"])
        raise SessionFileError(f"files.upload {path}: the session's pod went during the upload")

    async def read(self, path: str) -> bytes:
        """See :meth:`SessionFiles.read`."""
        buf = io.BytesIO()
        await self.download(path, buf)
        return buf.getvalue()

    async def download(
        self,
        path: str,
        dest: str | Path | BinaryIO,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """See :meth:`SessionFiles.download`."""
        http = self.session.client._http
        try:
            async with http.stream("GET", self._url(path)) as resp:
                if resp.status_code >= 400:
                    await resp.aread()
                refusal = _transfer_refusal(resp, "read", path)
                if refusal is None:
                    total = int(resp.headers.get("content-length", -1))
                    self.session._seen(resp.headers.get("x-stoker-pod"))
                    return await _asave(resp.aiter_bytes(_TRANSFER_CHUNK), dest, total, progress)
        except httpx.TransportError as exc:
            raise _unreachable(self.session.client.url, "GET", self._url(path), exc) from exc
        if refusal == _NO_POD:
            raise SessionFileError(f"files.read {path}: {_POD_GONE}", 409, "path")
        res = await self._do(["python", "-c", _READ, path], "read", path)
        data = base64.b64decode(res.stdout)
        return _save(iter([data]), dest, len(data), progress)

    async def list(self, path: str = ".") -> list[dict[str, Any]]:
        """See :meth:`SessionFiles.list`."""
        res = await self._do(["python", "-c", _LIST, path], "list", path)
        return list(json.loads(res.stdout))

    async def stat(self, path: str) -> dict[str, Any]:
        """See :meth:`SessionFiles.stat`."""
        return dict(
            json.loads((await self._do(["python", "-c", _STAT, path], "stat", path)).stdout)
        )

    async def delete(self, path: str) -> None:
        """See :meth:`SessionFiles.delete`."""
        await self._do(["python", "-c", _DELETE, path], "delete", path)


async def _asave(
    chunks: AsyncIterator[bytes],
    dest: str | Path | BinaryIO,
    total: int,
    progress: Callable[[int, int], None] | None,
) -> int:
    """The asynchronous twin of :func:`_save`."""
    part = Path(f"{dest}.part") if isinstance(dest, (str, Path)) else None
    fh = open(part, "wb") if part is not None else dest  # noqa: SIM115 (closed below)
    got = 0
    try:
        async for chunk in chunks:
            fh.write(chunk)
            got += len(chunk)
            if progress is not None:
                progress(got, total)
    finally:
        if part is not None:
            fh.close()
    if part is not None:
        part.replace(dest)
    return got


async def _aiter(pieces: Iterator[bytes]) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece


__all__ = [
    "DEFAULT_WAIT_S",
    "AsyncClient",
    "AsyncJob",
    "AsyncSession",
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
    "PodLost",
    "Session",
    "SessionFileError",
    "StokerError",
    "StorageFull",
    "TenantLimit",
    "pack_code",
]
