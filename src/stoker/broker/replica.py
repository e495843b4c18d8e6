"""What a replica that does not lead does: reads from the store, writes forwarded.

A follower answers job reads (a job, the job list, ``wait``, output, queue lengths) from
the shared store, polling it where the leader would wake a waiter. Writes that schedule
(submit, cancel, code upload) and the live pod list, which only the leader's core knows,
are forwarded to the leader's advertised URL with the caller's headers, and its answer is
passed back as it is; a submit's idempotency key makes a retry after a lost reply safe.
When no leader answers (an election under way), the caller gets 503 with ``Retry-After``
and the last known leader's URL in ``X-Stoker-Leader``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
from fastapi import Request
from fastapi.responses import JSONResponse, Response

from stoker.api.models import ErrorBody
from stoker.broker.store import Store

FORWARDED_BY = "x-stoker-forwarded-by"
LEADER_HEADER = "x-stoker-leader"
RETRY_AFTER_S = 1
# hop-by-hop headers and ones httpx recomputes: never copied between the two connections
_HOP = frozenset(
    {"host", "connection", "keep-alive", "transfer-encoding", "content-length", "te", "upgrade"}
)


class StoreReads:
    """A follower's answers to job reads, from the store alone."""

    def __init__(self, store: Store, poll_s: float = 0.2) -> None:
        self.store = store
        self.poll_s = poll_s

    def job(self, job_id: str) -> dict[str, Any] | None:
        return self.store.get_job(job_id)

    def list_jobs(
        self, tenant: str | None, states: tuple[str, ...], limit: int, labels: dict[str, str]
    ) -> list[dict[str, Any]]:
        return self.store.list_jobs(tenant, states, limit, labels)

    async def wait(self, job_id: str, timeout_s: float) -> dict[str, Any] | None:
        """The job's row once finished or re-queued (preempted), or as it is when
        ``timeout_s`` passes."""
        deadline = time.monotonic() + timeout_s
        row = self.store.get_job(job_id)
        runs = None if row is None else row["requeues"]
        while True:
            if row is None or row["state"] == "finished" or row["requeues"] != runs:
                return row
            if time.monotonic() >= deadline:
                return row
            await asyncio.sleep(min(self.poll_s, max(0.0, deadline - time.monotonic())))
            row = self.store.get_job(job_id)

    async def output(
        self, job_id: str, follow: bool
    ) -> AsyncIterator[tuple[int, str, bytes] | dict[str, Any]]:
        """The job's output from the start; with ``follow``, until the job finishes, with a
        notice (``{"requeued": ...}``) each time it is re-queued meanwhile (as the leader's
        loop gives it)."""
        last = -1
        runs = None
        while True:
            row = self.store.get_job(job_id)  # before the chunks: none written after is missed
            for chunk in self.store.output(job_id, after=last):
                last = chunk[0]
                yield chunk
            if row is not None and runs is not None and row["requeues"] > runs:
                yield {"requeued": {k: row[k] for k in ("id", "requeues", "requeue_reason")}}
            runs = None if row is None else row["requeues"]
            if not follow or row is None or row["state"] == "finished":
                return
            await asyncio.sleep(self.poll_s)

    def queued(self) -> dict[str, int]:
        return self.store.queued_counts()


def unavailable(leader_url: str | None, why: str) -> JSONResponse:
    """503: no leader to take the write now; retry after a second (at the leader's URL)."""
    body = ErrorBody(error="unavailable", field=None, message=f"{why}; retry")
    headers = {"Retry-After": str(RETRY_AFTER_S)}
    if leader_url:
        headers[LEADER_HEADER] = leader_url
    return JSONResponse(body.model_dump(), status_code=503, headers=headers)


async def forward(
    http: httpx.AsyncClient, request: Request, leader_url: str | None, me: str
) -> Response:
    """Pass ``request`` to the leader at ``leader_url`` and its answer back."""
    if not leader_url:
        return unavailable(None, "no broker replica leads yet")
    if request.headers.get(FORWARDED_BY):
        # the sender took this replica for the leader: the lead moved on, never bounce
        return unavailable(leader_url, "the lead is changing hands")
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
    headers[FORWARDED_BY] = me
    try:
        reply = await http.request(
            request.method,
            leader_url.rstrip("/") + request.url.path,
            params=list(request.query_params.multi_items()),
            headers=headers,
            content=request.stream(),
        )
    except httpx.TransportError as exc:
        return unavailable(leader_url, f"the leader at {leader_url} did not answer ({exc})")
    out = {k: v for k, v in reply.headers.items() if k.lower() not in _HOP | {"content-encoding"}}
    out[LEADER_HEADER] = leader_url
    return Response(reply.content, status_code=reply.status_code, headers=out)
