"""Encryption of what the store must hold but never show: tenant secrets and job env values.

The key is a Fernet key (AES-128-CBC with an HMAC-SHA256, from ``cryptography``) in its own
mode-600 file beside the store, so a copy of the database alone reveals no value. The same
key, under its own label, keys the digest of a submit that idempotency keys compare.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet, InvalidToken

_PREFIX = "fernet:"  # marks a sealed value (env values stored before sealing lack it)


class SecretBox:
    """Seals and opens values with the broker's key (created on first use)."""

    def __init__(self, key_path: Path) -> None:
        self.key_path = key_path
        key = _read_or_create_key(key_path)
        self._fernet = Fernet(key)
        self._mac_key = hashlib.sha256(b"stoker request digest\0" + key).digest()

    def seal(self, value: str) -> str:
        return _PREFIX + self._fernet.encrypt(value.encode()).decode()

    def open(self, sealed: str) -> str:
        """The value of ``sealed`` (ValueError if it was sealed under another key)."""
        if not sealed.startswith(_PREFIX):
            return sealed  # written plain by a broker before sealing
        try:
            return self._fernet.decrypt(sealed[len(_PREFIX) :].encode()).decode()
        except InvalidToken as exc:
            raise ValueError("a stored secret does not open with this broker's key") from exc

    def seal_env(self, env: dict[str, str]) -> dict[str, str]:
        return {k: self.seal(v) for k, v in env.items()}

    def open_env(self, env: dict[str, str]) -> dict[str, str]:
        return {k: self.open(v) for k, v in env.items()}

    def digest(self, request: dict[str, Any]) -> str:
        """A keyed digest of a request (a plain hash would let low-entropy values be guessed
        from a copy of the store)."""
        text = json.dumps(request, sort_keys=True, separators=(",", ":"))
        return hmac.new(self._mac_key, text.encode(), hashlib.sha256).hexdigest()


def _read_or_create_key(path: Path) -> bytes:
    if path.exists():
        os.chmod(path, 0o600)
        return path.read_bytes().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    key = Fernet.generate_key()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key + b"\n")
    return key
