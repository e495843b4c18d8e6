"""The broker's HTTP API (FastAPI, versioned under ``/v1``) and :class:`Broker`, which puts
store, authentication, runtime and scheduling loop together.

Every 4xx carries :class:`~stoker.api.models.ErrorBody`: the field at fault and why.
A tenant sees and touches only its own jobs (another tenant's job is a 404, not a 403, so
job ids leak nothing); the admin token manages tenants and sees every pod and job.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse

import stoker
from stoker.api.models import (
    CodeUploaded,
    ErrorBody,
    Health,
    JobSubmit,
    JobView,
    PodView,
    ProfileView,
    TenantCreate,
    TenantCreated,
)
from stoker.broker.auth import Authenticator, AuthError, Principal, check_tenant_name
from stoker.broker.config import BrokerConfig
from stoker.broker.loop import JobRequest, Scheduler
from stoker.broker.metrics import BrokerMetrics
from stoker.broker.store import JOB_FIELDS, Store, StoreError
from stoker.runtime.base import Runtime


class ApiError(Exception):
    """A request the broker refuses; ``field`` names what is wrong."""

    def __init__(self, status: int, error: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.error, self.message, self.field = status, error, message, field


class Broker:
    """One broker: store, authenticator, runtime and scheduling loop, and its HTTP app."""

    def __init__(self, cfg: BrokerConfig, runtime: Runtime | None = None) -> None:
        self.cfg = cfg
        cfg.data_dir.mkdir(parents=True, exist_ok=True)
        self.store = Store.sqlite(cfg.db_path)
        self.auth = Authenticator(self.store, cfg.admin_token_path)
        if runtime is None:
            from stoker.runtime.local import LocalRuntime  # needs bubblewrap only when used

            runtime = LocalRuntime(
                cfg.runtime_dir,
                gpu_slots=cfg.gpu_slots,
                find_links=cfg.find_links,
                no_index=cfg.no_index,
                hide=(cfg.data_dir,),  # the store and tokens: never in a pod, whatever the path
            )
        self.runtime = runtime
        gpus = sorted(getattr(runtime, "devices", {}) or [f"vgpu{i}" for i in range(cfg.gpu_slots)])
        self.metrics = BrokerMetrics()
        self.scheduler = Scheduler(cfg, self.store, runtime, gpus, self.metrics)
        self.started = False
        self.recovery: dict[str, int] = {}
        self.app = create_app(self)

    @property
    def admin_token(self) -> str:
        return self.cfg.admin_token_path.read_text().strip()

    async def start(self) -> None:
        if not self.started:
            self.started = True
            self.recovery = await self.scheduler.start()

    async def close(self, stop_pods: bool = False) -> None:
        if self.started:
            self.started = False
            await self.scheduler.close(stop_pods=stop_pods)
        self.store.close()


def _job_view(row: dict[str, Any]) -> JobView:
    data = {k: row[k] for k in JOB_FIELDS}
    if row["started"] is not None:
        data["start_latency_ms"] = (row["started"] - row["submitted"]) * 1000.0
    return JobView(**data)


async def _principal(  # async: FastAPI would run a plain def in a worker thread per call
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> Principal:
    token = None
    if authorization and authorization.lower().startswith("bearer "):
        token = authorization[7:].strip()
    try:
        return request.app.state.broker.auth.principal(token)
    except AuthError as exc:
        raise ApiError(401, "unauthorized", str(exc), "authorization") from exc


Caller = Annotated[Principal, Depends(_principal)]


def create_app(broker: Broker) -> FastAPI:
    """The FastAPI application of ``broker`` (its lifespan starts and stops the broker)."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await broker.start()
        yield
        await broker.close()

    app = FastAPI(
        title="stoker broker",
        version=stoker.__version__ if hasattr(stoker, "__version__") else "0",
        lifespan=lifespan,
        responses={400: {"model": ErrorBody}, 401: {"model": ErrorBody}, 404: {"model": ErrorBody}},
    )
    app.state.broker = broker
    sched = broker.scheduler
    cfg = broker.cfg

    @app.exception_handler(ApiError)
    async def _api_error(_req: Request, exc: ApiError) -> JSONResponse:
        body = ErrorBody(error=exc.error, field=exc.field, message=exc.message)
        return JSONResponse(body.model_dump(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_req: Request, exc: RequestValidationError) -> JSONResponse:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err.get("loc", ()))
        body = ErrorBody(error="invalid", field=loc or None, message=f"{loc}: {err.get('msg')}")
        return JSONResponse(body.model_dump(), status_code=422)

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

    def own_job(who: Principal, job_id: str) -> dict[str, Any]:
        row = sched.job(job_id)
        if row is None or (not who.admin and row["tenant"] != who.tenant):
            raise ApiError(404, "not_found", f"job_id: no job {job_id!r}", "job_id")
        return row

    # --- health --------------------------------------------------------------

    @app.get("/v1/health", response_model=Health)
    async def health() -> Health:
        up = time.time() - sched.started_at if sched.ready else 0.0
        return Health(status="ok", version=app.version, uptime_s=up)

    @app.get("/v1/ready", response_model=Health, responses={503: {"model": Health}})
    async def ready() -> Any:
        if not sched.ready:
            return JSONResponse(Health(status="starting", version=app.version).model_dump(), 503)
        return Health(status="ready", version=app.version)

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        sched.refresh_metrics()
        return Response(broker.metrics.render(), media_type="text/plain; version=0.0.4")

    # --- code ----------------------------------------------------------------

    @app.head("/v1/code/{digest}")
    async def code_exists(digest: str, who: Caller) -> Response:
        return Response(status_code=200 if broker.store.has_code(digest) else 404)

    @app.post("/v1/code", response_model=CodeUploaded, status_code=201)
    async def upload_code(request: Request, who: Caller) -> CodeUploaded:
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
        if not broker.store.has_code(digest):
            try:
                stored = await broker.runtime.put_code(data)
            except ValueError as exc:  # InvalidCode: not an archive
                raise ApiError(422, "invalid", str(exc), "code") from exc
            broker.store.add_code(stored, size)
        return CodeUploaded(digest=digest, size=size)

    # --- jobs ----------------------------------------------------------------

    @app.post("/v1/jobs", response_model=JobView, status_code=201)
    async def submit(
        body: JobSubmit,
        who: Caller,
        response: Response,
        idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
    ) -> JobView:
        tenant = tenant_of(who)
        prof = sched.profiles.get(body.profile)
        if prof is None:
            known = ", ".join(sorted(sched.profiles))
            raise ApiError(
                422,
                "invalid",
                f"body.profile: unknown profile {body.profile!r} (known: {known})",
                "body.profile",
            )
        timeout_s = min(3600.0, cfg.max_timeout_s) if body.timeout_s is None else body.timeout_s
        if timeout_s > cfg.max_timeout_s:
            raise ApiError(
                422,
                "invalid",
                f"body.timeout_s: {body.timeout_s} is over the {cfg.max_timeout_s} s cap",
                "body.timeout_s",
            )
        if body.replicas * prof.core.gpus > len(sched.gpus):
            raise ApiError(
                422,
                "invalid",
                f"body.replicas: {body.replicas} pods of {prof.name} need more GPUs"
                f" than this broker has ({len(sched.gpus)})",
                "body.replicas",
            )
        if body.code_digest is not None and not broker.store.has_code(body.code_digest):
            raise ApiError(
                422,
                "invalid",
                f"body.code_digest: no code uploaded with digest {body.code_digest}",
                "body.code_digest",
            )
        req = JobRequest(
            profile=body.profile,
            argv=tuple(body.argv),
            reuse_tag=body.reuse_tag,
            code_digest=body.code_digest,
            deps=tuple(body.deps),
            env=dict(body.env),
            timeout_s=timeout_s,
            replicas=body.replicas,
        )
        row, created = sched.submit(tenant, req, idempotency_key)
        if not created:
            response.status_code = 200
        return _job_view(row)

    @app.get("/v1/jobs", response_model=list[JobView])
    async def list_jobs(
        who: Caller,
        state: Annotated[list[str], Query()] = [],  # noqa: B006 - FastAPI reads it, never mutates
        tenant: str | None = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> list[JobView]:
        if who.admin:
            if tenant is not None and tenant not in broker.store.tenant_names():
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
        return [_job_view(r) for r in broker.store.list_jobs(scope, tuple(state), limit)]

    @app.get("/v1/jobs/{job_id}", response_model=JobView)
    async def get_job(job_id: str, who: Caller) -> JobView:
        return _job_view(own_job(who, job_id))

    @app.get("/v1/jobs/{job_id}/wait", response_model=JobView)
    async def wait_job(
        job_id: str, who: Caller, timeout_s: Annotated[float, Query(ge=0, le=300)] = 30.0
    ) -> JobView:
        own_job(who, job_id)
        row = await sched.wait(job_id, timeout_s)
        assert row is not None
        return _job_view(row)

    @app.get("/v1/jobs/{job_id}/output")
    async def job_output(job_id: str, who: Caller, follow: bool = True) -> StreamingResponse:
        """Newline-delimited JSON: ``{"seq", "stream", "data"}`` (data base64), then
        ``{"end": job}`` once the job has finished."""
        own_job(who, job_id)

        async def lines() -> AsyncIterator[bytes]:
            async for seq, stream, data in sched.output(job_id, follow):
                msg = {"seq": seq, "stream": stream, "data": base64.b64encode(data).decode()}
                yield (json.dumps(msg) + "\n").encode()
            row = sched.job(job_id)
            if row is not None:
                yield (json.dumps({"end": _job_view(row).model_dump()}) + "\n").encode()

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    @app.post("/v1/jobs/{job_id}/cancel", response_model=JobView)
    async def cancel_job(job_id: str, who: Caller) -> JobView:
        own_job(who, job_id)
        sched.cancel(job_id)
        return _job_view(own_job(who, job_id))

    # --- pools ---------------------------------------------------------------

    @app.get("/v1/pods", response_model=list[PodView])
    async def pods(who: Caller) -> list[PodView]:
        return [PodView(**p) for p in sched.pods(None if who.admin else who.tenant)]

    @app.get("/v1/profiles", response_model=list[ProfileView])
    async def profiles(who: Caller) -> list[ProfileView]:
        out = []
        for p in sched.profiles.values():
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
                    queued=len(sched.core.queued(p.name)),
                )
            )
        return out

    @app.get("/v1/tenants", response_model=list[str])
    async def tenants(who: Caller) -> list[str]:
        admin_only(who)
        return broker.store.tenant_names()

    @app.post("/v1/tenants", response_model=TenantCreated, status_code=201)
    async def create_tenant(body: TenantCreate, who: Caller) -> TenantCreated:
        admin_only(who)
        try:
            check_tenant_name(body.name)
            token = broker.auth.create_tenant(body.name)
        except ValueError as exc:
            raise ApiError(422, "invalid", f"body.{exc}", "body.name") from exc
        except StoreError as exc:
            raise ApiError(409, "conflict", f"body.{exc}", "body.name") from exc
        return TenantCreated(name=body.name, token=token)

    return app
