"""The API's request and response models (pydantic); the OpenAPI document is built from them."""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator

from stoker.api.deps import check_deps

_ENV_KEY_CHARS = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


class JobSubmit(BaseModel):
    """A job: ``argv`` in a pod of ``profile``, reusing the pod of ``reuse_tag``."""

    profile: str = Field(min_length=1, max_length=64)
    argv: list[str] = Field(min_length=1, max_length=4096)
    reuse_tag: str = Field(min_length=1, max_length=200)
    code_digest: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    deps: list[str] = Field(default_factory=list, max_length=256)
    env: dict[str, str] = Field(default_factory=dict)
    timeout_s: float | None = Field(default=None, gt=0)  # None: an hour, or the cap
    replicas: int = Field(default=1, ge=1, le=64)

    @field_validator("argv")
    @classmethod
    def _argv(cls, v: list[str]) -> list[str]:
        if not v[0]:
            raise ValueError("argv[0] must not be empty")
        if any("\x00" in a for a in v):
            raise ValueError("argv must not contain NUL bytes")
        return v

    @field_validator("deps")
    @classmethod
    def _deps(cls, v: list[str]) -> list[str]:
        return list(check_deps(v))  # PEP 508 requirements only: no option, path or URL

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if not key or key[0].isdigit() or not set(key) <= _ENV_KEY_CHARS:
                raise ValueError(f"bad variable name {key!r}")
            if "\x00" in value:
                raise ValueError(f"value of {key} contains a NUL byte")
        return v


class JobView(BaseModel):
    """A job as its tenant sees it: request, state, timeline and exit."""

    id: str
    tenant: str
    profile: str
    reuse_tag: str
    replicas: int
    argv: list[str]
    code_digest: str | None
    deps: list[str]
    env: dict[str, str]
    timeout_s: float
    state: str
    path: str | None
    pods: list[str]
    submitted: float
    started: float | None
    finished: float | None
    exit_code: int | None
    failure: str | None
    start_latency_ms: float | None = None


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


class TenantCreate(BaseModel):
    name: str = Field(min_length=1, max_length=63)


class TenantCreated(BaseModel):
    name: str
    token: str


class CodeUploaded(BaseModel):
    digest: str
    size: int


class ErrorBody(BaseModel):
    """Every 4xx: the field at fault (dotted path, ``body.argv``) and what is wrong."""

    error: str
    field: str | None = None
    message: str


class Health(BaseModel):
    status: str
    version: str
    uptime_s: float = 0.0
