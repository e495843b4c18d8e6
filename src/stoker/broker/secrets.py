"""Encryption of what the store must hold but never show: tenant secrets and job env values.

The keys are Fernet keys (AES-128-CBC with an HMAC-SHA256, from ``cryptography``) in their
own mode-600 file beside the store, or in a directory every replica mounts (a Kubernetes
Secret ``stoker-keys``: docs/guides/kubernetes.md), so a copy of the database alone
reveals no value.
The file holds one key per line, the newest first: values are sealed with the first and
opened with any (MultiFernet), which is how a key is rotated. The same keys, under their own
label, key the digest of a submit that idempotency keys compare.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet


class KeysError(ValueError):
    """A key or token file that should be there (a mounted Secret) is missing or bad."""


_PREFIX = "fernet:"  # marks a sealed value (env values stored before sealing lack it)


class SecretBox:
    """Seals and opens values with the broker's keys (created on first use unless
    ``create`` is False: a mounted Secret is read, never written)."""

    def __init__(self, key_path: Path, create: bool = True) -> None:
        self.key_path = key_path
        keys = read_keys(key_path) if not create or key_path.exists() else _create_key(key_path)
        self.key_count = len(keys)
        self._fernet = MultiFernet([Fernet(k) for k in keys])
        self._keys = keys
        self._mac_keys = [self.derived_key(b"stoker request digest", k) for k in keys]

    def derived_key(self, label: bytes, key: bytes | None = None) -> bytes:
        """A key for ``label`` from ``key`` (default: the newest), so one secret serves
        several purposes without one use revealing another's key."""
        return hashlib.sha256(label + b"\0" + (key or self._keys[0])).digest()

    def seal(self, value: str) -> str:
        return _PREFIX + self._fernet.encrypt(value.encode()).decode()

    def open(self, sealed: str) -> str:
        """The value of ``sealed`` (ValueError if no key of this broker's opens it)."""
        if not sealed.startswith(_PREFIX):
            return sealed  # written plain by a broker before sealing
        try:
            return self._fernet.decrypt(sealed[len(_PREFIX) :].encode()).decode()
        except InvalidToken as exc:
            raise ValueError("a stored secret does not open with this broker's keys") from exc

    def reseal(self, sealed: str) -> str:
        """``sealed`` sealed again under the newest key (after a rotation)."""
        return self.seal(self.open(sealed))

    def seal_env(self, env: dict[str, str]) -> dict[str, str]:
        return {k: self.seal(v) for k, v in env.items()}

    def open_env(self, env: dict[str, str]) -> dict[str, str]:
        return {k: self.open(v) for k, v in env.items()}

    def digest(self, request: dict[str, Any]) -> str:
        """A keyed digest of a request under the newest key (a plain hash would let
        low-entropy values be guessed from a copy of the store)."""
        return self.digests(request)[0]

    def digests(self, request: dict[str, Any]) -> list[str]:
        """The digest of ``request`` under each key, newest first: a retry after a rotation
        still matches the digest its first try stored."""
        text = json.dumps(request, sort_keys=True, separators=(",", ":")).encode()
        return [hmac.new(k, text, hashlib.sha256).hexdigest() for k in self._mac_keys]


def read_keys(path: Path) -> list[bytes]:
    """The keys in ``path``, newest first (one per line; blank and ``#`` lines skipped)."""
    try:
        if path.stat().st_uid == os.getuid():
            os.chmod(path, 0o600)  # a mounted Secret is not ours to chmod (and read-only)
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise KeysError(f"secret key: cannot read {path}: {exc.strerror}") from exc
    keys = [k.strip() for k in lines if k.strip() and not k.strip().startswith(b"#")]
    if not keys:
        raise KeysError(f"secret key: {path} holds no key")
    for n, key in enumerate(keys, 1):
        try:
            Fernet(key)
        except ValueError:
            raise KeysError(
                f"secret key: line {n} of {path} is not a Fernet key (32 url-safe base64 bytes)"
            ) from None
    return keys


def new_key() -> bytes:
    """A fresh key (what ``stoker deploy render`` writes into the keys Secret)."""
    return Fernet.generate_key()


def _create_key(path: Path) -> list[bytes]:
    path.parent.mkdir(parents=True, exist_ok=True)
    key = new_key()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key + b"\n")
    return [key]
