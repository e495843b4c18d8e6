"""The client's configuration: ``STOKER_URL``/``STOKER_TOKEN`` over a file.

Lives beside the wire models so that the SDK needs nothing from :mod:`stoker.broker`.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

import platformdirs

DEFAULT_PORT = 8765


class ConfigError(ValueError):
    """A configuration value is missing or wrong; the message names it."""


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """Where the client finds its broker and which token it sends."""

    url: str
    token: str | None

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
        url = os.environ.get("STOKER_URL") or str(
            raw.get("url") or f"http://127.0.0.1:{DEFAULT_PORT}"
        )
        token = os.environ.get("STOKER_TOKEN") or (str(raw["token"]) if raw.get("token") else None)
        return ClientConfig(url.rstrip("/"), token)
