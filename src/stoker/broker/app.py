"""The broker's HTTP API (FastAPI, versioned under ``/v1``) and :class:`Broker`, which puts
store, authentication, runtime and scheduling loop together.

Every 4xx carries :class:`~stoker.api.models.ErrorBody`: the field at fault and why.
A tenant sees and touches only its own jobs (another tenant's job is a 404, not a 403, so
job ids leak nothing); the admin token manages tenants and sees every pod and job.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import logging
import math
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

import httpx
import sqlalchemy as sa
from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from filelock import FileLock, Timeout
from starlette.datastructures import Headers, QueryParams
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import stoker
from stoker.api.models import (
    CodeUploaded,
    ErrorBody,
    Health,
    JobOutputView,
    JobSubmit,
    JobView,
    KeepAliveRenew,
    KeepAliveRenewed,
    PodView,
    PoolView,
    ProfileView,
    SecretSet,
    SecretView,
    SessionView,
    parse_label,
)
from stoker.broker.auth import Authenticator, AuthError, Principal
from stoker.broker.config import BrokerConfig, BrokerProfile
from stoker.broker.dashboard import Dashboard
from stoker.broker.dashboard import add_routes as add_dashboard_routes
from stoker.broker.dashboard import gauges as dashboard_gauges
from stoker.broker.datadir import make_private
from stoker.broker.events_log import DecisionLog, job_latencies_ms
from stoker.broker.files import add_routes as add_file_routes
from stoker.broker.files import is_file_route
from stoker.broker.leader import Leadership
from stoker.broker.loop import BrokerLoop, JobRequest, Refused
from stoker.broker.metrics import BrokerMetrics
from stoker.broker.replica import StoreReads, forward, unavailable
from stoker.broker.sandbox_fusion import add_routes as add_sandbox_fusion_routes
from stoker.broker.secrets import SecretBox
from stoker.broker.storage import disk_refusal
from stoker.broker.store import JOB_FIELDS, Deposed, Store
from stoker.broker.tenants import add_routes as add_tenant_routes
from stoker.core import Core
from stoker.core.model import Refusal
from stoker.runtime.base import Runtime

log = logging.getLogger("stoker.broker")


class ApiError(Exception):
    """A request the broker refuses; ``field`` names what is wrong."""

    def __init__(self, status: int, error: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.error, self.message, self.field = status, error, message, field


class BrokerLocked(RuntimeError):
    """Another broker holds this data dir (and its pods)."""


class Broker:
    """One broker replica: store, authenticator, leadership, and, while it leads, the
    runtime and scheduling loop; its HTTP app.

    It takes the data dir's lock before anything else, so a second broker on the same data
    dir fails at once, before it opens the store or touches a pod.

    With SQLite there is one broker and it leads from the start. With PostgreSQL several
    replicas share the store; the one that wins the election (:mod:`stoker.broker.leader`)
    replays the store into a fresh scheduling loop and adopts the runtime's pods, exactly
    as a restarted broker does; the others serve reads and forward writes to it
    (:mod:`stoker.broker.replica`) and take over when it goes.
    """

    def __init__(
        self, cfg: BrokerConfig, runtime: Runtime | None = None, url: str | None = None
    ) -> None:
        self.cfg = cfg
        make_private(cfg.data_dir, cfg.runtime_dir)
        self.lock = FileLock(cfg.lock_path, timeout=0, thread_local=False, mode=0o600)
        try:
            self.lock.acquire()
        except Timeout:
            raise BrokerLocked(
                f"data dir {cfg.data_dir} is in use by another broker"
                f" ({_pid_note(cfg.pid_path)}); stop it first (stoker down)"
            ) from None
        try:
            self._open(cfg, runtime, url)
        except BaseException:
            self.lock.release()
            raise

    def _open(self, cfg: BrokerConfig, runtime: Runtime | None, url: str | None) -> None:
        # SQLite through Store.sqlite: it makes the file (and its WAL) mode 600
        self.store = Store(cfg.database_url) if cfg.database_url else Store.sqlite(cfg.db_path)
        # keys from a mounted Secret (keys_dir) are read, never made: every replica shares them
        create = cfg.keys_dir is None
        self.auth = Authenticator(self.store, cfg.admin_token_path, create=create)
        self.box = SecretBox(cfg.secret_key_path, create=create)
        self._runtime = runtime
        self.metrics = BrokerMetrics()
        self.leadership = Leadership(self.store, cfg.advertise_url or url or "")
        self.loop: BrokerLoop | None = None
        self.reads_from_store = StoreReads(self.store)
        self.profiles = {p.name: p for p in cfg.profiles}
        # the decisions of the loop this replica last ran while leading (see _take_over);
        # that loop, not self.loop, which is cleared before a deposed loop closes
        self._deciding: BrokerLoop | None = None
        self.decisions = DecisionLog(self._decided_by, self.metrics, cfg.data_dir / "events.jsonl")
        self.metrics.watch(lambda: dashboard_gauges(self))
        self.dashboard = Dashboard(self)
        self.started = False
        self.started_at = 0.0
        self.closed = False
        self.stop_pods_on_close = True  # nothing outlives its owner; `up --keep-pods` unsets it
        self.recovery: dict[str, int] = {}
        self._lead_task: asyncio.Task[None] | None = None
        self._http: httpx.AsyncClient | None = None
        self.app = create_app(self)

    @property
    def admin_token(self) -> str:
        return self.cfg.admin_token_path.read_text().strip()

    @property
    def leads(self) -> bool:
        """This replica schedules now (its loop is up and its lead confirmed)."""
        return self.loop is not None and self.loop.ready and self.leadership.leading

    @property
    def reads(self) -> BrokerLoop | StoreReads:
        """Who answers job reads: the leader's loop (its memory is the store's), else the
        store."""
        sched = self.loop
        return sched if sched is not None and self.leads else self.reads_from_store

    def queued(self) -> dict[str, int]:
        sched = self.loop
        if sched is not None and self.leads:
            return {name: len(sched.core.queued(name)) for name in self.profiles}
        return self.reads_from_store.queued()

    def _decided_by(self) -> Core:
        assert self._deciding is not None  # only a loop's on_decision asks
        return self._deciding.core

    def _new_runtime(self) -> Runtime:
        if self._runtime is not None:
            return self._runtime
        from stoker.runtime.local import LocalRuntime  # needs bubblewrap only when used

        cfg = self.cfg
        return LocalRuntime(
            cfg.runtime_dir,
            gpu_slots=cfg.gpu_slots,
            find_links=cfg.find_links,
            no_index=cfg.no_index,
            index_url=cfg.index_url,
            extra_index_urls=tuple(cfg.extra_index_urls),
            ca_bundle=cfg.ca_bundle,
            hide=(cfg.data_dir,),  # the store and tokens: never in a pod, whatever the path
        )

    def prepare_env(self, profile: BrokerProfile) -> None:
        """Build a profile's environment now (uv, in the local runtime; cached by digest)
        so that no pod start waits for it; EnvBuildError when uv cannot. Nothing to do on
        a runtime without one (Kubernetes: the profile's image holds it)."""
        envs = getattr(self._new_runtime(), "envs", None)
        if envs is not None:
            envs.profile_env(tuple(profile.runtime.packages))

    async def start(self) -> None:
        """Lead at once if no replica does (always, on SQLite), then keep campaigning."""
        if self.started:
            return
        self.started = True
        self.started_at = time.time()
        self._http = httpx.AsyncClient(timeout=60.0)
        if await self.leadership.try_acquire():
            await self._take_over()
        self._lead_task = asyncio.get_running_loop().create_task(self._lead())
        await self.dashboard.start()

    async def _take_over(self) -> None:
        if self.box.key_count > 1:  # a rotation: the tenants' secrets move to the new key
            n = await asyncio.to_thread(self.store.reseal_secrets, self.box.reseal)
            log.warning("key rotation: %d secrets sealed again under the newest key", n)
        runtime = self._new_runtime()
        gpus = sorted(
            getattr(runtime, "devices", {}) or [f"vgpu{i}" for i in range(self.cfg.gpu_slots)]
        )
        self.loop = BrokerLoop(self.cfg, self.store, runtime, gpus, self.metrics, box=self.box)
        self.loop.may_act = lambda: self.leadership.leading
        self.loop.on_decision.append(self.decisions.record)
        self.loop.on_pod_stop.append(self.decisions.stopped)
        self._deciding = self.loop
        self.recovery = await self.loop.start()
        log.warning("scheduling: %s", self.recovery)

    async def _lead(self) -> None:
        """Hold the lead while it lasts; when it is lost, stop scheduling (the pods stay for
        the next leader) and campaign again."""
        while True:
            try:
                if self.loop is None:
                    await self.leadership.campaign()
                    await self._take_over()
                await self.leadership.hold()
            except Exception:  # a takeover that failed must not keep the lock from others
                log.exception("taking over failed; giving the lead up")
            self.leadership.release()
            sched, self.loop = self.loop, None
            if sched is not None:
                try:
                    await sched.close(stop_pods=False)
                except Exception:  # its pods are the next leader's either way
                    log.exception("closing the deposed loop")
            await asyncio.sleep(self.leadership.poll_s)

    async def forward(self, request: Request) -> Response:
        """Pass a write to the leader (this replica does not lead)."""
        assert self._http is not None
        try:
            url = (await asyncio.to_thread(self.leadership.current)).url
        except sa.exc.SQLAlchemyError as exc:
            return unavailable(None, f"the store is unreachable ({type(exc).__name__})")
        if url == self.leadership.url:
            url = None  # this replica's own old lead: nobody leads yet
        return await forward(self._http, request, url, self.leadership.holder)

    async def close(self, stop_pods: bool = False) -> None:
        """Stop the loop (and every pod with ``stop_pods``), close the store, free the lock."""
        if self.closed:
            return
        self.closed = True
        try:
            if self.started:
                self.started = False
                await self.dashboard.close()
                if self._lead_task is not None:
                    self._lead_task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await self._lead_task
                sched, self.loop = self.loop, None
                try:
                    if sched is not None:
                        await sched.close(stop_pods=stop_pods)
                finally:
                    self.leadership.release()
                    if self._http is not None:
                        await self._http.aclose()
        finally:  # whatever failed above: the store, the decision log and the lock go
            self.decisions.close()
            self.store.close()
            self.lock.release()


def _pid_note(pid_path: Path) -> str:
    try:
        return "pid " + pid_path.read_text().split()[0]
    except (OSError, IndexError):
        return "pid unknown"


class NotLeader(Exception):
    """Raised by a write route on a replica that does not lead: the request is forwarded."""


def _invalid(field: str, message: str) -> ApiError:
    return ApiError(422, "invalid", f"{field}: {message}", field)


def _check_class(body: JobSubmit) -> None:
    """A job's class against its other fields. Whether its shape can ever start on this
    cluster is the core's to say (:meth:`stoker.core.Core.refusal`, asked on submit)."""
    if body.guarantee_s is not None and body.job_class != "spot":
        raise _invalid("body.guarantee_s", "only spot jobs have a guaranteed duration")
    if body.gpus is not None and body.job_class == "pool":
        raise _invalid("body.gpus", "a pool job takes its profile's shape; leave gpus out")


def _job_view(row: dict[str, Any]) -> JobView:
    data = {k: row[k] for k in JOB_FIELDS}
    data["labels"] = data["labels"] or {}
    data["env"] = sorted(row["env"])  # names only: a value never leaves after submit
    data["start_latency_ms"], data["queue_wait_ms"] = job_latencies_ms(row)
    return JobView(**data)


def _reply(view: JobView, status: int = 200) -> Response:
    """``view`` as the reply's JSON, the body the route's ``response_model`` documents,
    without FastAPI validating it again on the way out: it is a validated JobView already,
    and that second pydantic pass over the whole view runs on every call."""
    return Response(view.model_dump_json(), status, media_type="application/json")


def _output_view(chunks: list[tuple[int, str, bytes]]) -> JobOutputView:
    def joined(stream: str) -> str:
        return base64.b64encode(b"".join(d for _, s, d in chunks if s == stream)).decode()

    return JobOutputView(stdout=joined("stdout"), stderr=joined("stderr"))


def _bearer(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer ...`` header (None: no bearer token)."""
    if authorization and authorization.lower().startswith("bearer "):
        return authorization[7:].strip()
    return None


async def _principal(  # async: FastAPI would run a plain def in a worker thread per call
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> Principal:
    try:
        return request.app.state.broker.auth.principal(_bearer(authorization))
    except AuthError as exc:
        raise ApiError(401, "unauthorized", str(exc), "authorization") from exc


Caller = Annotated[Principal, Depends(_principal)]


async def _leader(request: Request) -> BrokerLoop:
    broker: Broker = request.app.state.broker
    sched = broker.loop
    if sched is None or not broker.leads:
        raise NotLeader()
    return sched


# a write route's scheduling loop; on a replica that does not lead, the request goes to
# the leader instead (see NotLeader's handler)
Leader = Annotated[BrokerLoop, Depends(_leader)]


class BodyCap:
    """Refuses request bodies over ``cap`` bytes with a 413 before the app parses them
    (``POST /v1/code`` streams under its own, larger cap)."""

    def __init__(self, app: ASGIApp, cap: int, exempt: tuple[str, ...]) -> None:
        self.app, self.cap, self.exempt = app, cap, exempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] in ("GET", "HEAD", "OPTIONS")
            or scope["path"] in self.exempt
            or is_file_route(scope["path"])  # streamed under max_file_bytes
        ):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.cap:
            await _too_large(send, f"{int(declared)} bytes", self.cap)
            return
        body = bytearray()
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            body += msg.get("body", b"")
            if len(body) > self.cap:
                await _too_large(send, "the body", self.cap)
                return
            if not msg.get("more_body"):
                break
        await self.app(scope, _replay(bytes(body), receive), send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that hands the request's ``body`` (read already) over again, as one
    message, then goes on with ``receive`` (a disconnect)."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


_JSON_TYPES = ("application/json", "application/json; charset=utf-8")
_WAIT = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,9})?")  # what float(...) and the route agree on


class FastSubmit:
    """``POST /v1/jobs`` (every SDK call) without FastAPI's per-request work: its routing,
    dependency and parameter machinery cost more of the broker's CPU than the submit itself.

    A plain request (a JSON body pydantic accepts as a JobSubmit, a known bearer token, an
    ``Idempotency-Key`` of at most 200 characters, no query but ``wait`` as plain digits
    within 0-300, on the replica that leads) is validated here and handed to the route's
    own function (``submit``), its refusals (ApiError) answered as the route's are. Any
    other request goes on to the FastAPI route unchanged, so every refusal of a malformed
    request is the route's own, field for field."""

    def __init__(
        self, app: ASGIApp, broker: Broker, submit: Callable[..., Awaitable[Response]]
    ) -> None:
        self.app, self.broker, self.submit = app, broker, submit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != "/v1/jobs":
            await self.app(scope, receive, send)
            return
        body = bytearray()
        while True:  # the body is capped (BodyCap) before it gets here
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        call = self._plain(scope, bytes(body))
        if call is None:
            await self.app(scope, _replay(bytes(body), receive), send)
            return
        try:
            response = await self.submit(**call)
        except ApiError as exc:
            response = _api_error_response(exc)
        except Deposed:
            response = _deposed_response()
        await response(scope, receive, send)

    def _plain(self, scope: Scope, body: bytes) -> dict[str, Any] | None:
        """The route function's arguments for a plain request; None for any other."""
        headers = Headers(scope=scope)
        if headers.get("content-type") not in _JSON_TYPES:
            return None
        key = headers.get("idempotency-key")
        if key is not None and len(key) > 200:
            return None
        query = QueryParams(scope["query_string"])
        wait = 0.0
        if query:
            values = query.getlist("wait")
            if len(query) != 1 or len(values) != 1 or not _WAIT.fullmatch(values[0]):
                return None
            wait = float(values[0])
            if wait > 300:
                return None
        broker = self.broker
        sched = broker.loop
        if sched is None or not broker.leads:
            return None
        try:
            who = broker.auth.principal(_bearer(headers.get("authorization")))
            data = json.loads(body)
            job = JobSubmit.model_validate(data) if isinstance(data, dict) else None
        # ValidationError and JSONDecodeError are ValueErrors; a body nested too deep for
        # the parser, a RecursionError: the route answers each (422, 400)
        except (AuthError, ValueError, RecursionError):
            return None
        if job is None:
            return None
        return {"body": job, "who": who, "sched": sched, "idempotency_key": key, "wait": wait}


async def _too_large(send: Send, what: str, cap: int) -> None:
    body = ErrorBody(
        error="too_large", field="body", message=f"body: {what} over the {cap}-byte cap"
    )
    await JSONResponse(body.model_dump(), status_code=413)({"type": "http"}, _no_receive, send)


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}


def _api_error_response(exc: ApiError) -> JSONResponse:
    body = ErrorBody(error=exc.error, field=exc.field, message=exc.message)
    return JSONResponse(body.model_dump(), status_code=exc.status)


def _deposed_response() -> Response:
    # the lead moved while this write was under way: nothing of it was stored, and a
    # retry (same idempotency key) reaches the new leader
    return unavailable(None, "this replica lost the lead during the request")


_ERR = {"model": ErrorBody}
_HEAD_ERRORS = {
    400: "bad request",
    401: "no or unknown token",
    403: "not allowed",
    404: "absent, or another tenant's",
    413: "too large",
    422: "invalid",
}
_STATUS_ERRORS = {404: "not_found", 405: "method_not_allowed", 413: "too_large"}


def refused_error(refusal: Refusal) -> ApiError:
    """The answer to a job the core refuses: a 422 naming the field when it could never
    start here, a 429 when its tenant is over a cap (it may be submitted again later)."""
    field = f"body.{refusal.field}"
    if refusal.retry:
        return ApiError(429, "tenant_limit", f"{field}: {refusal.reason}", field)
    return ApiError(422, "invalid", f"{field}: {refusal.reason}", field)


def create_app(broker: Broker) -> FastAPI:
    """The FastAPI application of ``broker`` (its lifespan starts and stops the broker)."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        try:
            await broker.start()
        except BaseException:  # a start that failed halfway may have started pods
            await broker.close(stop_pods=broker.stop_pods_on_close)
            raise
        yield
        await broker.close(stop_pods=broker.stop_pods_on_close)

    app = FastAPI(
        title="stoker broker",
        version=stoker.__version__ if hasattr(stoker, "__version__") else "0",
        lifespan=lifespan,
        responses={400: _ERR, 401: _ERR, 403: _ERR, 404: _ERR, 413: _ERR, 422: _ERR},
    )
    app.state.broker = broker
    cfg = broker.cfg

    @app.exception_handler(ApiError)
    async def _api_error(_req: Request, exc: ApiError) -> JSONResponse:
        return _api_error_response(exc)

    @app.exception_handler(NotLeader)
    async def _to_leader(req: Request, _exc: NotLeader) -> Response:
        return await broker.forward(req)

    @app.exception_handler(Deposed)
    async def _deposed(_req: Request, _exc: Deposed) -> Response:
        return _deposed_response()

    @app.exception_handler(RequestValidationError)
    async def _invalid(_req: Request, exc: RequestValidationError) -> JSONResponse:
        err = exc.errors()[0]
        if err.get("type") == "json_invalid":  # loc is ("body", offset): the body is at fault
            body = ErrorBody(error="invalid", field="body", message=f"body: {err.get('msg')}")
            return JSONResponse(body.model_dump(), status_code=422)
        loc = ".".join(str(p) for p in err.get("loc", ()))
        msg = str(err.get("msg"))
        body = ErrorBody(error="invalid", field=loc or None, message=f"{loc}: {msg}")
        return JSONResponse(body.model_dump(), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_req: Request, exc: StarletteHTTPException) -> Response:
        error = _STATUS_ERRORS.get(exc.status_code, "invalid")
        if exc.status_code == 400:  # FastAPI could not parse the body (e.g. nested too deep)
            body = ErrorBody(error=error, field="body", message=f"body: {exc.detail}")
        else:
            body = ErrorBody(error=error, field=None, message=str(exc.detail))
        return JSONResponse(body.model_dump(), exc.status_code, headers=exc.headers)

    def tenant_of(who: Principal) -> str:
        if who.tenant is None:
            raise ApiError(
                403,
                "forbidden",
                "authorization: jobs belong to tenants; use a tenant token",
                "authorization",
            )
        return who.tenant

    def admin_only(who: Principal) -> None:
        if not who.admin:
            raise ApiError(
                403, "forbidden", "authorization: this needs the admin token", "authorization"
            )

    def profile_of(name: str) -> BrokerProfile:
        """The profile a body names; a 422 naming body.profile (and the known ones) if none."""
        prof = broker.profiles.get(name)
        if prof is None:
            known = ", ".join(sorted(broker.profiles))
            raise ApiError(
                422,
                "invalid",
                f"body.profile: unknown profile {name!r} (known: {known})",
                "body.profile",
            )
        return prof

    def own_job(who: Principal, job_id: str) -> dict[str, Any]:
        row = broker.reads.job(job_id)
        if row is None or (not who.admin and row["tenant"] != who.tenant):
            raise ApiError(404, "not_found", f"job_id: no job {job_id!r}", "job_id")
        return row

    # --- health --------------------------------------------------------------

    @app.get("/v1/health", response_model=Health)
    async def health() -> Health:
        up = time.time() - broker.started_at if broker.started else 0.0
        return Health(status="ok", version=app.version, uptime_s=up)

    @app.get("/v1/ready", response_model=Health, responses={503: {"model": Health}})
    async def ready() -> Any:
        """``ready`` on the leader, ``following`` on a replica that serves reads and
        forwards writes; 503 while the broker starts (or takes over)."""
        if not broker.started or (broker.loop is not None and not broker.leads):
            return JSONResponse(Health(status="starting", version=app.version).model_dump(), 503)
        return Health(status="ready" if broker.leads else "following", version=app.version)

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(broker.metrics.render(), media_type="text/plain; version=0.0.4")

    # --- code ----------------------------------------------------------------

    @app.head(
        "/v1/code/{digest}",
        responses={  # a HEAD answer has no body: statuses only
            200: {"description": "stored, and yours"},
            **{s: {"description": d} for s, d in _HEAD_ERRORS.items()},
        },
    )
    async def code_exists(digest: str, who: Caller) -> Response:
        """200 if you uploaded archive ``digest``; another tenant's archive is a 404."""
        scope = None if who.admin else who.tenant
        return Response(status_code=200 if broker.store.has_code(digest, scope) else 404)

    @app.post(
        "/v1/code",
        response_model=CodeUploaded,
        status_code=201,
        openapi_extra={
            "requestBody": {
                "required": True,
                "description": "a tar archive (any compression tarfile reads)",
                "content": {
                    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
                },
            }
        },
    )
    async def upload_code(request: Request, who: Caller, sched: Leader) -> CodeUploaded:
        tenant = tenant_of(who)
        cap = cfg.max_code_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > cap:
            raise ApiError(
                413, "too_large", f"code: {declared} bytes is over the {cap}-byte cap", "code"
            )
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > cap:
                raise ApiError(413, "too_large", f"code: over the {cap}-byte cap", "code")
            chunks.append(chunk)
        data = b"".join(chunks)
        digest = hashlib.sha256(data).hexdigest()
        known = broker.store.has_code(digest)
        if not known:
            try:
                await sched.runtime.put_code(data)
            except ValueError as exc:  # InvalidCode: not an archive
                raise ApiError(422, "invalid", str(exc), "code") from exc
        broker.store.add_code(digest, size, tenant)
        broker.metrics.code_uploads.labels("known" if known else "new").inc()
        return CodeUploaded(digest=digest, size=size)

    # --- secrets -------------------------------------------------------------

    @app.post("/v1/secrets", response_model=SecretView, status_code=201)
    async def set_secret(body: SecretSet, who: Caller, response: Response) -> SecretView:
        """Set a secret (write-only: no call ever returns its value); 200 if it replaced one."""
        tenant = tenant_of(who)
        if not broker.store.set_secret(tenant, body.name, broker.box.seal(body.value)):
            response.status_code = 200
        return next(
            SecretView(name=n, updated=u)
            for n, u in broker.store.secret_names(tenant)
            if n == body.name
        )

    @app.get("/v1/secrets", response_model=list[SecretView])
    async def list_secrets(who: Caller) -> list[SecretView]:
        """Your secrets' names (never their values)."""
        tenant = tenant_of(who)
        return [SecretView(name=n, updated=u) for n, u in broker.store.secret_names(tenant)]

    @app.delete("/v1/secrets/{name}", status_code=204, response_class=Response)
    async def delete_secret(name: str, who: Caller) -> Response:
        tenant = tenant_of(who)
        if not broker.store.delete_secret(tenant, name):
            raise ApiError(404, "not_found", f"name: no secret {name!r}", "name")
        return Response(status_code=204)

    # --- jobs ----------------------------------------------------------------

    @app.post("/v1/jobs", response_model=JobView, status_code=201)
    async def submit(
        body: JobSubmit,
        who: Caller,
        sched: Leader,
        idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
        wait: Annotated[float, Query(ge=0, le=300)] = 0.0,
    ) -> Response:
        """Submit a job. With ``wait=S``, the reply comes when the job finishes (with its
        whole output) or after S seconds (the job as it is then): one round trip for a
        short call."""
        tenant = tenant_of(who)
        profile_of(body.profile)  # a 422 naming body.profile if it has none
        if (full := disk_refusal(cfg.data_dir, cfg.storage.min_free_fraction)) is not None:
            broker.metrics.storage_refused.labels("disk").inc()
            raise ApiError(503, "storage_full", full, "disk")
        default_s = min(3600.0, cfg.max_timeout_s, sched.core.timeout_cap(tenant) or math.inf)
        timeout_s = default_s if body.timeout_s is None else body.timeout_s
        if timeout_s > cfg.max_timeout_s:
            raise ApiError(
                422,
                "invalid",
                f"body.timeout_s: {body.timeout_s} is over the {cfg.max_timeout_s} s cap",
                "body.timeout_s",
            )
        _check_class(body)
        if body.code_digest is not None and not broker.store.has_code(body.code_digest, tenant):
            # 404 naming the field: the client uploads the archive and submits again (another
            # tenant's archive is as absent as a never uploaded one)
            raise ApiError(
                404,
                "unknown_code",
                f"body.code_digest: no code uploaded with digest {body.code_digest}",
                "body.code_digest",
            )
        if both := sorted(set(body.secrets) & set(body.env)):
            raise ApiError(422, "invalid", f"body.secrets: {both[0]} is in env too", "body.secrets")
        have = broker.store.sealed_secrets(tenant, body.secrets) if body.secrets else {}
        if missing := [n for n in body.secrets if n not in have]:
            raise ApiError(
                422, "invalid", f"body.secrets: no secret {missing[0]!r}", "body.secrets"
            )
        req = JobRequest(
            profile=body.profile,
            argv=tuple(body.argv),
            reuse_tag=body.reuse_tag,
            code_digest=body.code_digest,
            deps=tuple(body.deps),
            env=dict(body.env),
            secrets=tuple(body.secrets),
            timeout_s=timeout_s,
            job_class=body.job_class,
            workers=body.workers,
            gpus=body.gpus,
            guarantee_s=body.guarantee_s,
            labels=dict(body.labels),
        )
        submitted = body.model_dump(mode="json")
        digest = broker.box.digest(submitted)
        try:
            row, created = await sched.submit(tenant, req, idempotency_key, digest)
        except Refused as exc:  # never here (422), or over a tenant's cap for now (429)
            raise refused_error(exc.refusal) from None
        # under any of the keys: a retry across a key rotation still matches its first try
        if not created and row.get("request_mac") not in (None, *broker.box.digests(submitted)):
            raise ApiError(
                422,
                "conflict",
                "idempotency-key: this key was used for a different job",
                "idempotency-key",
            )
        if wait > 0 and row["state"] != "finished":
            row = await sched.wait(row["id"], wait) or row
        view = _job_view(row)
        if wait > 0 and row["state"] == "finished":
            view.output = _output_view(sched.output_of(row["id"]))
        return _reply(view, 201 if created else 200)

    @app.get("/v1/jobs", response_model=list[JobView])
    async def list_jobs(
        who: Caller,
        state: Annotated[list[str], Query()] = [],  # noqa: B006 - FastAPI reads it, never mutates
        tenant: str | None = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        label: Annotated[list[str], Query()] = [],  # noqa: B006 - k=v, every one must match
    ) -> list[JobView]:
        wanted: dict[str, str] = {}
        for item in label:
            try:
                key, value = parse_label(item)
            except ValueError as exc:
                raise ApiError(422, "invalid", f"query.label: {exc}", "query.label") from exc
            wanted[key] = value
        if who.admin:
            if tenant is not None and tenant not in broker.store.tenant_names(revoked=True):
                raise ApiError(
                    422, "invalid", f"query.tenant: unknown tenant {tenant!r}", "query.tenant"
                )
            scope = tenant
        else:
            if tenant is not None and tenant != who.tenant:
                raise ApiError(
                    422, "invalid", f"query.tenant: unknown tenant {tenant!r}", "query.tenant"
                )
            scope = who.tenant
        rows = broker.reads.list_jobs(scope, tuple(state), limit, wanted)
        return [_job_view(r) for r in rows]

    @app.get("/v1/jobs/{job_id}", response_model=JobView)
    async def get_job(job_id: str, who: Caller) -> Response:
        return _reply(_job_view(own_job(who, job_id)))

    @app.get("/v1/jobs/{job_id}/wait", response_model=JobView)
    async def wait_job(
        job_id: str, who: Caller, timeout_s: Annotated[float, Query(ge=0, le=300)] = 30.0
    ) -> Response:
        own_job(who, job_id)
        row = await broker.reads.wait(job_id, timeout_s)
        assert row is not None
        return _reply(_job_view(row))

    @app.get("/v1/jobs/{job_id}/output")
    async def job_output(job_id: str, who: Caller, follow: bool = True) -> StreamingResponse:
        """Newline-delimited JSON: ``{"seq", "stream", "data"}`` (data base64), a
        ``{"requeued": {"id", "requeues", "requeue_reason"}}`` notice each time the job is
        preempted and re-queued (its output goes on with the next run), then
        ``{"end": job}`` once the job has finished."""
        own_job(who, job_id)
        reads = broker.reads  # who began the stream ends it, whoever leads by then

        async def lines() -> AsyncIterator[bytes]:
            async for item in reads.output(job_id, follow):
                if isinstance(item, dict):
                    yield (json.dumps(item) + "\n").encode()  # a notice: re-queued
                    continue
                seq, stream, data = item
                msg = {"seq": seq, "stream": stream, "data": base64.b64encode(data).decode()}
                yield (json.dumps(msg) + "\n").encode()
            row = reads.job(job_id)
            if row is not None:
                yield (json.dumps({"end": _job_view(row).model_dump()}) + "\n").encode()

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    @app.post("/v1/jobs/{job_id}/cancel", response_model=JobView)
    async def cancel_job(job_id: str, who: Caller, sched: Leader) -> JobView:
        own_job(who, job_id)
        sched.cancel(job_id)
        return _job_view(own_job(who, job_id))

    @app.post("/v1/keepalive", response_model=KeepAliveRenewed)
    async def renew_keepalive(body: KeepAliveRenew, who: Caller, sched: Leader) -> Any:
        """Keep the caller's warm pod of (profile, reuse tag) ``keepalive_s`` from now at
        least (a busy one: once its job ends); up to the broker's ``max_keepalive_s``."""
        tenant = tenant_of(who)
        profile_of(body.profile)
        if body.keepalive_s > cfg.max_keepalive_s:
            raise ApiError(
                422,
                "invalid",
                f"body.keepalive_s: {body.keepalive_s:g} is over the "
                f"{cfg.max_keepalive_s:g} s cap (max_keepalive_s)",
                "body.keepalive_s",
            )
        until, pods = sched.renew(tenant, body.reuse_tag, body.profile, body.keepalive_s)
        return KeepAliveRenewed(
            profile=body.profile, reuse_tag=body.reuse_tag, until=until, pods=pods
        )

    @app.get("/v1/sessions/{profile}/{reuse_tag}", response_model=SessionView)
    async def session_state(profile: str, reuse_tag: str, who: Caller, sched: Leader) -> Any:
        """Whether the caller's session (its reuse tag on ``profile``) still has a pod, and
        so its workspace: any process may ask (a new one cannot compare pods as a running
        session does)."""
        tenant = tenant_of(who)
        profile_of(profile)
        pods, until = sched.session(tenant, reuse_tag, profile)
        return SessionView(
            profile=profile, reuse_tag=reuse_tag, live=bool(pods), pods=pods, until=until
        )

    # --- pods, profiles, GPU pools -------------------------------------------

    @app.get("/v1/pods", response_model=list[PodView])
    async def pods(who: Caller, sched: Leader) -> list[PodView]:
        return [PodView(**p) for p in sched.pods(None if who.admin else who.tenant)]

    @app.get("/v1/profiles", response_model=list[ProfileView])
    async def profiles(who: Caller) -> list[ProfileView]:
        out = []
        queued = broker.queued()
        for p in broker.profiles.values():
            c, r = p.core, p.runtime
            out.append(
                ProfileView(
                    name=p.name,
                    gpus=c.gpus,
                    share=c.share,
                    standby_share=c.standby_share,
                    preload=list(r.preload),
                    packages=list(r.packages),
                    network=r.network,
                    queued=queued.get(p.name, 0),
                    min_warm=p.min_warm,
                )
            )
        return out

    @app.get("/v1/pools", response_model=list[PoolView])
    async def gpu_pools(who: Caller, sched: Leader) -> list[PoolView]:
        return [PoolView(**p) for p in sched.gpu_pools()]

    add_tenant_routes(app, broker, admin_only)
    add_file_routes(app, broker, tenant_of, profile_of)
    add_dashboard_routes(app, broker, broker.decisions, broker.dashboard)
    add_sandbox_fusion_routes(app, broker, submit)
    # the last added runs first: bodies are capped, then a plain submit takes its fast path
    app.add_middleware(FastSubmit, broker=broker, submit=submit)
    app.add_middleware(BodyCap, cap=broker.cfg.max_request_bytes, exempt=("/v1/code",))
    return app
