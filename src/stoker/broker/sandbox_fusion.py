"""A SandboxFusion-compatible code runner under ``/sandbox-fusion`` (what verl's code
rewards and tools call): ``POST /run_code`` and ``GET /v1/ping``, field for field as
SandboxFusion's own server answers them.

Each call is one pool job on the broker's code-run profile (``sandbox_fusion_profile``;
default the first CPU-only one): ``stoker.agent.coderun:main`` in the pod's workspace
(:mod:`stoker.agent.coderun` runs the code, with its stdin, time and memory limits). It
goes through the ``POST /v1/jobs`` route's own function, so every check and every path
(warm, standby, cold) is the one an SDK job takes.

A caller that sends a reuse tag (the ``X-Stoker-Reuse-Tag`` header, or ``reuse_tag`` in
the body) keeps its warm pod, and its files, between calls; without one each call gets a
fresh tag, so a fresh (or scrubbed) pod, as isolated as SandboxFusion's per-call sandbox.

Besides the bearer token, these routes take HTTP Basic credentials (user: the tenant,
password: its token), so ``http://TENANT:TOKEN@HOST:PORT/sandbox-fusion`` works from any
client that takes credentials from the URL (verl's sends no headers of its own).
"""

# no `from __future__ import annotations`: the routes' types are local to add_routes,
# and FastAPI resolves the annotations it reads
import base64
import binascii
import json
import uuid
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, FastAPI, Header, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field, ValidationError

from stoker.agent.coderun import LANGUAGES, REQUEST_ENV
from stoker.api.models import JobSubmit, StrictBody
from stoker.broker.auth import AuthError, Principal
from stoker.broker.config import BrokerConfig

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from stoker.broker.app import Broker

PREFIX = "/sandbox-fusion"
REUSE_HEADER = "X-Stoker-Reuse-Tag"
# the runner's own start and file work on top of the code's run_timeout
RUNNER_SLACK_S = 10.0
# how long a call waits for a pod (its job queued) on top of the job's own timeout
QUEUE_WAIT_S = 300.0
_ENTRY = ("stoker.agent.coderun:main",)  # warm in the agent (see stoker.agent.coderun)
# on every code-run job: `GET /v1/jobs?label=api=sandbox-fusion` lists them
_LABELS = {"api": "sandbox-fusion"}
# what the runner reads of a request
_RUNNER_FIELDS = {
    "code",
    "language",
    "run_timeout",
    "memory_limit_MB",
    "stdin",
    "files",
    "fetch_files",
}

#: every language SandboxFusion names: the ones this broker runs are in LANGUAGES
_SF_NAMES = """python cpp nodejs go go_test java php csharp bash typescript sql rust cuda lua R
perl D_ut ruby scala julia pytest junit kotlin_script jest verilog python_gpu lean swift racket"""
SANDBOX_FUSION_LANGUAGES = frozenset(_SF_NAMES.split())


class RunCodeRequest(StrictBody):
    """SandboxFusion's ``RunCodeRequest`` (every field its client and verl send), plus
    stoker's ``reuse_tag``; read strictly, as every request body is."""

    compile_timeout: float = Field(10, ge=0)  # no compiled language runs here
    run_timeout: float = Field(10, gt=0)
    memory_limit_MB: int = -1  # -1: the profile's limit only
    code: str
    stdin: str | None = None
    language: str
    files: dict[str, str | None] = Field(default_factory=dict)  # path -> base64 content
    fetch_files: list[str] = Field(default_factory=list)
    args: list[str] = Field(default_factory=list)  # SandboxFusion's pytest args; no pytest here
    reuse_tag: str | None = Field(None, min_length=1, max_length=200)


class RunStatus(StrEnum):
    SUCCESS = "Success"
    FAILED = "Failed"
    SANDBOX_ERROR = "SandboxError"


class CommandRunStatus(StrEnum):
    FINISHED = "Finished"
    ERROR = "Error"
    TIME_LIMIT_EXCEEDED = "TimeLimitExceeded"


class CommandRunResult(BaseModel):
    status: CommandRunStatus
    execution_time: float | None = None
    return_code: int | None = None
    stdout: str | None = None
    stderr: str | None = None


class RunCodeResponse(BaseModel):
    """SandboxFusion's ``RunCodeResponse``; ``executor_pod_name`` is the stoker pod."""

    status: RunStatus
    message: str
    compile_result: CommandRunResult | None = None
    run_result: CommandRunResult | None = None
    executor_pod_name: str | None = None
    files: dict[str, str] = {}


def code_run_profile(cfg: BrokerConfig) -> str:
    """The profile code runs on: the configured one, else the first CPU-only profile,
    else the first profile."""
    if cfg.sandbox_fusion_profile is not None:
        return cfg.sandbox_fusion_profile
    cpu = [p.name for p in cfg.profiles if p.core.gpus == 0]
    return (cpu or [p.name for p in cfg.profiles])[0]


def _sandbox_error(message: str, pod: str | None = None) -> RunCodeResponse:
    return RunCodeResponse(status=RunStatus.SANDBOX_ERROR, message=message, executor_pod_name=pod)


def _failed(run: CommandRunResult, pod: str | None) -> RunCodeResponse:
    return RunCodeResponse(
        status=RunStatus.FAILED, message="", run_result=run, executor_pod_name=pod
    )


def _status(run: CommandRunResult) -> RunStatus:
    """SandboxFusion's ``parse_run_status`` for one command (python compiles nothing)."""
    if run.status is CommandRunStatus.TIME_LIMIT_EXCEEDED or run.return_code != 0:
        return RunStatus.FAILED
    return RunStatus.SUCCESS


def answer(row: dict[str, Any]) -> RunCodeResponse:
    """The SandboxFusion answer for a finished code-run job (``row``: its view, with
    ``output``)."""
    pod = row["pods"][0] if row["pods"] else None
    failure = row["failure"]
    if failure == "timeout":  # the runner itself ran past the slack: the code's time is up
        run = CommandRunResult(status=CommandRunStatus.TIME_LIMIT_EXCEEDED, stdout="", stderr="")
        return _failed(run, pod)
    if failure == "out_of_memory":  # the pod's own limit killed the code (and the runner)
        run = CommandRunResult(
            status=CommandRunStatus.FINISHED,
            return_code=-9,
            stdout="",
            stderr="killed: out of memory (the profile's memory limit)\n",
        )
        return _failed(run, pod)
    out = row.get("output") or {}
    stdout = base64.b64decode(out.get("stdout", ""))
    if failure is not None:  # the platform's fault (or the runner's): never a reward
        stderr = base64.b64decode(out.get("stderr", "")).decode("utf-8", "replace")
        return _sandbox_error(f"job {row['id']} failed: {failure} {stderr[-2000:]}".strip(), pod)
    try:
        result = json.loads(stdout)
        files = result.pop("files")
        run = CommandRunResult.model_validate(result)
    except (ValueError, KeyError, TypeError):
        return _sandbox_error(
            f"job {row['id']}: the runner's answer is unreadable (over the profile's output"
            " cap, output_mb?)",
            pod,
        )
    return RunCodeResponse(
        status=_status(run), message="", run_result=run, executor_pod_name=pod, files=files
    )


def _basic(authorization: str) -> tuple[str, str] | None:
    """(user, password) of an ``Authorization: Basic ...`` header; None if it is none."""
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, sep, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if sep else None


def add_routes(
    app: FastAPI, broker: "Broker", submit: "Callable[..., Awaitable[Response]]"
) -> None:
    """``/sandbox-fusion``'s routes; ``submit``: the ``POST /v1/jobs`` route's function."""
    # imported here: app imports this module; evaluated now, so FastAPI sees the real types
    from stoker.broker.app import ApiError, Leader, _bearer, _output_view

    cfg = broker.cfg
    profile = code_run_profile(cfg)

    def unauthorized(message: str) -> ApiError:
        return ApiError(401, "unauthorized", f"authorization: {message}", "authorization")

    async def caller(
        request: Request, authorization: Annotated[str | None, Header()] = None
    ) -> Principal:
        """The bearer token's principal, or HTTP Basic's: user the tenant, password its
        token (the user must name the token's own tenant)."""
        creds = _basic(authorization) if authorization else None
        token = creds[1] if creds else _bearer(authorization)
        try:
            who = broker.auth.principal(token)
        except AuthError as exc:
            raise unauthorized(str(exc).removeprefix("authorization: ")) from exc
        if creds is not None and who.tenant != creds[0]:
            raise unauthorized(f"the token is not tenant {creds[0]!r}'s")
        return who

    Caller = Annotated[Principal, Depends(caller)]

    @app.get(f"{PREFIX}/v1/ping")
    async def ping() -> str:
        """SandboxFusion's health check."""
        return "pong"

    @app.post(f"{PREFIX}/run_code", response_model=RunCodeResponse)
    async def run_code(
        body: RunCodeRequest,
        who: Caller,
        sched: Leader,
        x_stoker_reuse_tag: Annotated[str | None, Header(max_length=200)] = None,
    ) -> RunCodeResponse:
        """Run ``code`` once, as SandboxFusion does; a pool job on the code-run profile."""
        if body.language not in LANGUAGES:
            known = ", ".join(sorted(LANGUAGES))
            what = "is not run" if body.language in SANDBOX_FUSION_LANGUAGES else "is unknown"
            return _sandbox_error(
                f"language {body.language!r} {what} here (profile {profile!r} runs: {known})"
            )
        timeout_s = body.run_timeout + RUNNER_SLACK_S
        if timeout_s > cfg.max_timeout_s:
            raise ApiError(
                422,
                "invalid",
                f"body.run_timeout: {body.run_timeout:g} is over the broker's cap"
                f" ({cfg.max_timeout_s - RUNNER_SLACK_S:g} s)",
                "body.run_timeout",
            )
        tag = x_stoker_reuse_tag or body.reuse_tag or f"sf-{uuid.uuid4().hex}"
        request = body.model_dump(include=_RUNNER_FIELDS)
        try:  # the request is JSON-escaped ASCII in env: only the tag can be refused
            job = JobSubmit(
                profile=profile,
                argv=list(_ENTRY),
                reuse_tag=tag,
                env={REQUEST_ENV: json.dumps(request)},
                timeout_s=timeout_s,
                labels=_LABELS,
            )
        except ValidationError as exc:
            field = "header.x-stoker-reuse-tag" if x_stoker_reuse_tag else "body.reuse_tag"
            msg = exc.errors()[0]["msg"]
            raise ApiError(422, "invalid", f"{field}: {msg}", field) from None
        wait_s = timeout_s + QUEUE_WAIT_S
        reply = await submit(body=job, who=who, sched=sched, idempotency_key=None, wait=wait_s)
        row = json.loads(bytes(reply.body))
        if row["state"] != "finished":  # re-queued meanwhile (preempted): it runs again
            again = await broker.reads.wait(row["id"], wait_s)
            if again is None or again["state"] != "finished":
                sched.cancel(row["id"])
                return _sandbox_error(f"job {row['id']}: no pod ran it within {wait_s:g} s")
            row = {**again, "output": _output_view(sched.output_of(row["id"])).model_dump()}
        return answer(row)
