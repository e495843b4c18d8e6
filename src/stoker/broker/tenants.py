"""The admin's tenant routes: create, list, revoke (``DELETE``) and rotate a token.

Revoking a tenant is one transaction first (its tokens refused by the next request on every
replica, its secrets and its claims on code archives gone), then its queued and running
jobs are cancelled through the core's cancel path, as a tenant's own cancel is. Its job
history is kept (the name is then not reused) or removed, as the broker's
``tenant_history`` says or ``purge=true`` asks; removing waits for the cancelled jobs to
end first (a kill gives a job ``spot.grace_s`` to exit).
"""

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

from fastapi import FastAPI, Query
from pydantic import BaseModel, ConfigDict

from stoker.api.models import TenantCreate, TenantCreated
from stoker.broker.auth import Principal, check_tenant_name
from stoker.broker.store import StoreError

if TYPE_CHECKING:
    from stoker.broker.app import Broker

# past a kill's grace, how long a revoke waits for the tenant's jobs to end before it
# removes their history
END_SLACK_S = 30.0
# a rotated token's default grace: long enough for a fleet of callers to pick up the new one
ROTATE_GRACE_S = 300.0


class TenantRevoked(BaseModel):
    """What revoking a tenant did."""

    model_config = ConfigDict(extra="forbid")
    name: str
    cancelled: int  # its queued and running jobs, cancelled
    history: str  # "kept" or "deleted"
    jobs_deleted: int


class TokenRotated(BaseModel):
    """A tenant's new token, and until when its previous one still opens."""

    name: str
    token: str
    previous_valid_until: float


def add_routes(app: FastAPI, broker: "Broker", admin_only: Callable[[Principal], None]) -> None:
    """``/v1/tenants``'s routes (annotations evaluated, not postponed: FastAPI reads the
    route functions' dependency types, imported here)."""
    # imported here: app imports this module; evaluated now, so FastAPI sees the real types
    from stoker.broker.app import _ERR, ApiError, Caller, Leader

    def missing(exc: StoreError) -> ApiError:
        status, error = (404, "not_found") if "no tenant" in str(exc) else (409, "conflict")
        return ApiError(status, error, str(exc), "name")

    @app.get("/v1/tenants", response_model=list[str])
    async def tenants(who: Caller) -> list[str]:
        admin_only(who)
        return broker.store.tenant_names()

    @app.post("/v1/tenants", response_model=TenantCreated, status_code=201, responses={409: _ERR})
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

    @app.delete("/v1/tenants/{name}", response_model=TenantRevoked, responses={404: _ERR})
    async def revoke_tenant(
        name: str,
        who: Caller,
        sched: Leader,
        purge: Annotated[bool, Query(description="remove its job history too")] = False,
    ) -> TenantRevoked:
        """Revoke a tenant: its tokens stop working at once, its secrets and code go, its
        queued and running jobs are cancelled; its job history is kept or removed (the
        broker's ``tenant_history``, or ``purge``)."""
        admin_only(who)
        try:
            orphans = broker.store.revoke_tenant(name, time.time(), again=purge)
        except StoreError as exc:
            raise missing(exc) from exc
        for digest in orphans:
            await sched.runtime.drop_code(digest)
        cancelled = sched.cancel_tenant(name)
        if not (purge or broker.cfg.tenant_history == "delete"):
            return TenantRevoked(name=name, cancelled=cancelled, history="kept", jobs_deleted=0)
        deadline = time.monotonic() + broker.cfg.spot.grace_s + END_SLACK_S
        while broker.store.tenant_jobs(name) or sched.tenant_busy(name):
            if time.monotonic() > deadline:
                raise ApiError(
                    409,
                    "conflict",
                    f"name: tenant {name!r} is revoked, but its jobs are still ending;"
                    " its history is kept: DELETE again with purge=true to remove it",
                    "name",
                )
            await asyncio.sleep(0.1)
        try:
            removed = broker.store.purge_tenant(name)
        except StoreError as exc:
            raise missing(exc) from exc
        sched.forget_tenant(name)
        return TenantRevoked(
            name=name, cancelled=cancelled, history="deleted", jobs_deleted=removed
        )

    @app.post("/v1/tenants/{name}/token", response_model=TokenRotated, responses={404: _ERR})
    async def rotate_token(
        name: str,
        who: Caller,
        grace_s: Annotated[
            float, Query(ge=0, le=7 * 86400, description="the previous token's grace")
        ] = ROTATE_GRACE_S,
    ) -> TokenRotated:
        """A new token for the tenant; its previous one stays valid ``grace_s`` more."""
        admin_only(who)
        try:
            token = broker.auth.rotate(name, grace_s)
        except StoreError as exc:
            raise missing(exc) from exc
        return TokenRotated(name=name, token=token, previous_valid_until=time.time() + grace_s)
