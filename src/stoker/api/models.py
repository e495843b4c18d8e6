"""The API's request and response models (pydantic); the OpenAPI document is built from them."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from stoker.api.deps import check_deps
from stoker.api.envnames import env_name_error

JobClass = Literal["pool", "hp", "spot"]
"""``pool``: served from warm pools; ``hp``: guaranteed, never preempted; ``spot``:
preemptible, admitted under the spot quota, promised ``guarantee_s`` of run time."""

#: the longest secret value (a token, a key file), in characters
MAX_SECRET_CHARS = 64 * 1024


def _text(value: Any) -> None:
    """Refuse what cannot travel as UTF-8 (a lone surrogate) or through a C string (NUL)."""
    items = value.items() if isinstance(value, dict) else [value]
    for item in items:
        for s in item if isinstance(item, tuple | list) else (item,):
            if not isinstance(s, str):
                continue
            try:
                s.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ValueError(
                    f"not valid UTF-8 text (a lone surrogate at {exc.start})"
                ) from None
            if "\x00" in s:
                raise ValueError("contains a NUL byte")


def _env_name(name: str) -> str:
    if (why := env_name_error(name)) is not None:
        raise ValueError(why)
    return name


_LABEL_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-/]{0,62}$")


def check_label(key: str, value: str) -> None:
    """A label key is 1-63 of ``A-Za-z0-9_.-/`` (first alphanumeric); a value at most 200
    characters, no ``=`` in the key (``k=v`` is how labels are written on the CLI)."""
    if not _LABEL_KEY.match(key):
        raise ValueError(f"bad label key {key!r}: 1-63 of A-Za-z0-9_.-/, first alphanumeric")
    if len(value) > 200 or "\x00" in value:
        raise ValueError(f"label {key}: value over 200 characters or with a NUL byte")


def parse_label(item: str) -> tuple[str, str]:
    """``k=v`` as (k, v); ValueError naming what is wrong."""
    key, sep, value = item.partition("=")
    if not sep:
        raise ValueError(f"expected k=v, got {item!r}")
    check_label(key, value)
    return key, value


class StrictBody(BaseModel):
    """A request body, read strictly: an unknown field is refused (a 422 naming it, never
    dropped unseen) and no value is coerced to another type (``"60"`` is no number, ``2.0``
    no count of workers)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class JobSubmit(StrictBody):
    """A job: ``argv`` in a pod of ``profile``, reusing the pod of ``reuse_tag``."""

    profile: str = Field(min_length=1, max_length=64)
    argv: list[str] = Field(min_length=1, max_length=4096)
    reuse_tag: str = Field(min_length=1, max_length=200)
    code_digest: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    deps: list[str] = Field(default_factory=list, max_length=256)
    env: dict[str, str] = Field(default_factory=dict, max_length=1024)
    secrets: list[str] = Field(default_factory=list, max_length=256)  # tenant secret names
    timeout_s: float | None = Field(default=None, gt=0)  # None: an hour, or the cap
    job_class: JobClass = "pool"
    workers: int = Field(default=1, ge=1, le=64)  # rank i runs in the job's i-th pod
    # GPUs per worker: a fraction below 1 shares a card, whole cards above; None: the
    # profile's own shape
    gpus: float | None = Field(default=None, gt=0, le=64)
    # spot only: the run time promised with probability g (None: the broker's default)
    guarantee_s: float | None = Field(default=None, gt=0, le=7 * 86400)
    # the tenant's own tags, returned with the job and filtered on in ``GET /v1/jobs``
    labels: dict[str, str] = Field(default_factory=dict, max_length=32)

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            check_label(key, value)
        return v

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, v: float | None) -> float | None:
        if v is not None and v > 1 and not float(v).is_integer():
            raise ValueError("above 1, gpus per worker must be a whole number of cards")
        return v

    @field_validator("profile", "argv", "reuse_tag", "deps", "env", "secrets")
    @classmethod
    def _utf8(cls, v: Any) -> Any:
        _text(v)
        return v

    @field_validator("argv")
    @classmethod
    def _argv(cls, v: list[str]) -> list[str]:
        if not v[0]:
            raise ValueError("argv[0] must not be empty")
        return v

    @field_validator("deps")
    @classmethod
    def _deps(cls, v: list[str]) -> list[str]:
        return list(check_deps(v))  # PEP 508 requirements only: no option, path or URL

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            _env_name(key)
        return v

    @field_validator("secrets")
    @classmethod
    def _secrets(cls, v: list[str]) -> list[str]:
        for name in v:
            _env_name(name)
        if len(set(v)) != len(v):
            raise ValueError("a secret is named twice")
        return v


class KeepAliveRenew(StrictBody):
    """Keep the caller's warm pod of ``profile`` and ``reuse_tag`` ``keepalive_s`` seconds
    from now at least (a session's ``renew``); the broker caps it (``max_keepalive_s``)."""

    profile: str = Field(min_length=1, max_length=64)
    reuse_tag: str = Field(min_length=1, max_length=200)
    keepalive_s: float = Field(gt=0, allow_inf_nan=False)

    @field_validator("profile", "reuse_tag")
    @classmethod
    def _utf8(cls, v: str) -> str:
        _text(v)
        return v


class KeepAliveRenewed(BaseModel):
    """What a renewal did: the pods (tenant, tag) holds now (warm, or running its job;
    none when its pod is gone) and until when they are kept (Unix time)."""

    profile: str
    reuse_tag: str
    until: float
    pods: list[str]


class SessionView(BaseModel):
    """A session (a tenant's reuse tag on a profile) as the broker holds it now: the pods
    that keep its workspace (``live``: any; none after its keep-alive ended) and until when
    its warm pod is kept (None: a job of it is running, or it has none)."""

    profile: str
    reuse_tag: str
    live: bool
    pods: list[str]
    until: float | None


class JobOutputView(BaseModel):
    """A finished job's whole output, base64 (what ``/output`` streams, in one piece)."""

    stdout: str
    stderr: str


class JobView(BaseModel):
    """A job as its tenant sees it: request, state, timeline and exit."""

    id: str
    tenant: str
    profile: str
    reuse_tag: str
    job_class: str
    workers: int
    gpus: float
    guarantee_s: float | None
    argv: list[str]
    code_digest: str | None
    deps: list[str]
    env: list[str]  # names only: values are never shown after submit
    secrets: list[str]
    timeout_s: float
    state: str
    path: str | None
    pods: list[str]
    submitted: float
    placed: float | None = None  # the core chose its pods: it stopped waiting
    started: float | None
    # its end in steps: the process exited, its output was drained and the pod made clean
    # (the pod's clock), the broker took the end (``finished``), its final row was committed
    exited: float | None = None
    drained: float | None = None
    finished: float | None
    committed: float | None = None
    exit_code: int | None
    failure: str | None
    # times the job was taken off its pods and put back in its queue, and why the last time
    # (``preempted``: evicted for HP work; it runs again, nothing lost)
    requeues: int = 0
    requeue_reason: str | None = None
    # a queued job that no node fits now (a node left, or the broker's host has fewer GPUs
    # than when it was submitted): why it waits aside; it starts once a node fits it again
    waiting_reason: str | None = None
    # spot: guarantee periods succeeded (ran a whole guaranteed duration) and failed (evicted)
    guarantee_succeeded: int = 0
    guarantee_failed: int = 0
    # placed -> its process running (the path's own cost), and submitted -> placed (the
    # queue's): the same split as stoker_job_start_seconds and stoker_job_queue_wait_seconds
    start_latency_ms: float | None = None
    queue_wait_ms: float | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    # only in a submit's reply that waited (``?wait=S``) for a job that finished meanwhile
    output: JobOutputView | None = None


class PodView(BaseModel):
    id: str
    profile: str
    state: str
    gpus: list[str]
    tenant: str | None
    reuse_tag: str | None
    job: str | None
    jobs_run: int
    keepalive_deadline: float | None


class ProfileView(BaseModel):
    name: str
    gpus: int
    share: float
    standby_share: float
    preload: list[str]
    packages: list[str]
    network: bool
    queued: int
    min_warm: int = 0  # spare pods kept ready for callers not yet seen


class PoolForecast(BaseModel):
    """The summed HP demand forecast of a GPU pool: hourly peaks ahead as Normal(mean, var),
    and their ``g``-quantile (what the spot quota reads)."""

    hours: list[int]
    mean: list[float]
    var: list[float]
    quantile: list[float]
    g: float


class QueuedCounts(BaseModel):
    hp: int
    spot: int


class PoolView(BaseModel):
    """One GPU pool (all GPUs of one model): what HP and spot hold, the spot quota and how it
    was set, and the eviction rate over the last day."""

    gpu_model: str
    capacity: float
    hp_gpus: float
    spot_gpus: float
    spot_quota: float
    eta: float
    eviction_rate_1d: float
    forecast: PoolForecast | None
    queued: QueuedCounts


class TenantCreate(StrictBody):
    name: str = Field(min_length=1, max_length=63)


class TenantCreated(BaseModel):
    name: str
    token: str


class CodeUploaded(BaseModel):
    digest: str
    size: int


class SecretSet(StrictBody):
    """A tenant secret: written once, never read back; jobs name it in ``secrets``."""

    name: str = Field(min_length=1, max_length=128)
    value: str = Field(max_length=MAX_SECRET_CHARS)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        _text(v)
        return _env_name(v)

    @field_validator("value")
    @classmethod
    def _value(cls, v: str) -> str:
        _text(v)
        return v


class SecretView(BaseModel):
    """A secret as listed: its name and when it was set, never its value."""

    name: str
    updated: float


class ErrorBody(BaseModel):
    """Every 4xx: the field at fault (dotted path, ``body.argv``) and what is wrong."""

    error: str
    field: str | None = None
    message: str


class Health(BaseModel):
    status: str
    version: str
    uptime_s: float = 0.0
