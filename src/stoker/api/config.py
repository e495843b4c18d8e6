"""The client's configuration: ``STOKER_URL``/``STOKER_TOKEN`` over a file.

Parsed by pydantic, strictly: an unknown key or a value of the wrong type is a
:class:`ConfigError` of one line naming the key and the file, never a silent coercion.
Lives beside the wire models so that the SDK needs nothing from :mod:`stoker.broker`.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import platformdirs
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_PORT = 8765


class ConfigError(ValueError):
    """A configuration value is missing or wrong; the message names it."""


class ClientConfig(BaseModel):
    """Where the client finds its broker and which token it sends."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    url: str = f"http://127.0.0.1:{DEFAULT_PORT}"
    token: str | None = None

    @staticmethod
    def load(path: Path | str | None = None) -> ClientConfig:
        """``STOKER_URL``/``STOKER_TOKEN`` win over the file (default
        ``<user config dir>/stoker/client.toml`` with ``url`` and ``token``)."""
        file = Path(path) if path else Path(platformdirs.user_config_dir("stoker")) / "client.toml"
        raw: dict[str, object] = {}
        if file.exists():
            try:
                raw = tomllib.loads(file.read_text())
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(f"client config {file}: {exc}") from exc
        env = {k: v for k, v in _ClientEnv().model_dump().items() if v}  # set, not empty
        try:
            cfg = ClientConfig.model_validate({**raw, **env})
        except ValidationError as exc:
            raise ConfigError(_one_line(f"client config {file}", exc)) from exc
        return cfg.model_copy(update={"url": cfg.url.rstrip("/")})


class _ClientEnv(BaseSettings):
    """The environment's say (``STOKER_URL``, ``STOKER_TOKEN``); other variables ignored."""

    model_config = SettingsConfigDict(env_prefix="STOKER_", extra="ignore")

    url: str | None = None
    token: str | None = None


def _one_line(where: str, exc: ValidationError) -> str:
    err = exc.errors()[0]
    key = ".".join(str(p) for p in err["loc"])
    if err["type"] == "extra_forbidden":
        known = ", ".join(ClientConfig.model_fields)
        return f"{where}: unknown key {key!r} (known: {known})"
    return f"{where}: {key}: {err['msg']} (got {err.get('input')!r})"
