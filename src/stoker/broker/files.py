"""A session's files, streamed: ``GET`` and ``PUT /v1/sessions/PROFILE/TAG/files/PATH``.

The bytes go between the HTTP body and the session pod's workspace through the runtime
(:meth:`stoker.runtime.local.LocalRuntime.read_file` / ``write_file``), never through a job's
argv or its stored output, so a file is capped by ``max_file_bytes`` (and the workspace's
own size), not by a job's output cap, and leaves nothing in the store. A runtime that
cannot reach a pod's disk answers 501 ``not_carried``; the SDK then moves the file by jobs.
"""

import errno
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Annotated

from fastapi import FastAPI, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from stoker.broker.auth import Principal
from stoker.runtime.base import NotCarried
from stoker.runtime.workspace_files import FileTooLarge, WorkspacePathError

if TYPE_CHECKING:
    from stoker.broker.app import Broker
    from stoker.broker.loop import BrokerLoop

PREFIX = "/v1/sessions/"


def is_file_route(path: str) -> bool:
    """Whether ``path`` is a file transfer (its body streams under ``max_file_bytes``, not
    the small cap of other request bodies)."""
    return path.startswith(PREFIX) and "/files/" in path


class FileWritten(BaseModel):
    """A file put in a session's workspace."""

    path: str
    size: int
    pod: str


def add_routes(
    app: FastAPI,
    broker: "Broker",
    tenant_of: Callable[[Principal], str],
    profile_of: Callable[[str], object],
) -> None:
    """The file routes (annotations evaluated, not postponed: FastAPI reads them)."""
    from stoker.broker.app import _ERR, ApiError, Caller, Leader
    from stoker.runtime.local import UnknownPod

    def pod_of(sched: "BrokerLoop", who: Principal, profile: str, tag: str, pod: str | None) -> str:
        """The session's pod: its only one, or the one ``pod`` names among them."""
        tenant = tenant_of(who)
        profile_of(profile)
        pods, _ = sched.session(tenant, tag, profile)
        if pod is not None and pod in pods:
            return pod
        if pod is not None:
            raise ApiError(404, "not_found", f"pod: {pod!r} is not one of the session's", "pod")
        if not pods:
            raise ApiError(
                409,
                "no_pod",
                f"reuse_tag: the session {tag!r} on {profile!r} has no pod now (its keep-alive"
                " ended, or no call ran yet): its workspace went with the pod",
                "reuse_tag",
            )
        if len(pods) > 1:
            raise ApiError(
                422, "invalid", f"pod: the session holds {len(pods)} pods; name one", "pod"
            )
        return pods[0]

    def refused(exc: Exception, path: str) -> ApiError:
        """The runtime's refusal as the API says it."""
        if isinstance(exc, NotCarried):
            return ApiError(501, "not_carried", f"files: {exc}", "path")
        if isinstance(exc, FileTooLarge):
            return ApiError(413, "too_large", str(exc), "path")
        if isinstance(exc, WorkspacePathError):
            return ApiError(422, "invalid", str(exc), "path")
        if isinstance(exc, UnknownPod):
            return ApiError(409, "no_pod", f"path: {path}: the pod went during the transfer")
        if isinstance(exc, FileNotFoundError):
            return ApiError(
                404, "not_found", f"path: No such file in the workspace: {path}", "path"
            )
        if isinstance(exc, IsADirectoryError):
            return ApiError(422, "invalid", f"path: {path} is a directory", "path")
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return ApiError(507, "workspace_full", f"path: {path}: the workspace is full", "path")
        raise exc

    pod_query = Annotated[str | None, Query(description="which pod, when the session has several")]
    octets = {"schema": {"type": "string", "format": "binary"}}
    binary = {"content": {"application/octet-stream": octets}}

    @app.get(
        PREFIX + "{profile}/{reuse_tag}/files/{path:path}",
        response_class=StreamingResponse,
        responses={200: binary, 404: _ERR, 409: _ERR, 413: _ERR, 422: _ERR, 501: _ERR},
    )
    async def read_file(
        profile: str, reuse_tag: str, path: str, who: Caller, sched: Leader, pod: pod_query = None
    ) -> StreamingResponse:
        """A file of the session pod's workspace, streamed (``Content-Length`` is its size)."""
        name = pod_of(sched, who, profile, reuse_tag, pod)
        try:
            size, chunks = await sched.runtime.read_file(name, path, broker.cfg.max_file_bytes)
        except Exception as exc:  # every refusal is typed by refused(); others re-raised
            raise refused(exc, path) from exc
        return StreamingResponse(
            _closing(chunks),
            media_type="application/octet-stream",
            headers={"Content-Length": str(size), "X-Stoker-Pod": name},
        )

    @app.put(
        PREFIX + "{profile}/{reuse_tag}/files/{path:path}",
        response_model=FileWritten,
        status_code=201,
        responses={404: _ERR, 409: _ERR, 413: _ERR, 422: _ERR, 501: _ERR, 507: _ERR},
        openapi_extra={"requestBody": {"required": True, **binary}},
    )
    async def write_file(
        profile: str,
        reuse_tag: str,
        path: str,
        request: Request,
        who: Caller,
        sched: Leader,
        pod: pod_query = None,
    ) -> FileWritten:
        """Put a file in the session pod's workspace (parents made; an existing file is
        replaced whole once the upload is complete, never left half-written)."""
        cap = broker.cfg.max_file_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > cap:
            raise ApiError(
                413,
                "too_large",
                f"path: {declared} bytes is over the {cap}-byte cap (max_file_bytes)",
                "path",
            )
        name = pod_of(sched, who, profile, reuse_tag, pod)
        try:
            size = await sched.runtime.write_file(name, path, request.stream(), cap)
        except Exception as exc:
            raise refused(exc, path) from exc
        return FileWritten(path=path, size=size, pod=name)


async def _closing(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """``chunks``, closed however the response ends (a client gone midway included)."""
    try:
        async for chunk in chunks:
            yield chunk
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            await aclose()
