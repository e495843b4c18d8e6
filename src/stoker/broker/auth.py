"""Authentication: one API token per tenant, stored hashed; an admin token for the pools.

Tokens are random (``stk_`` + 32 url-safe bytes), so a plain SHA-256 is a sound hash: no
dictionary to guess from. The admin token lives in a file readable only by its owner.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from stoker.broker.secrets import KeysError, new_key
from stoker.broker.store import Store

ADMIN = "admin"
_TENANT_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


class AuthError(PermissionError):
    """No token, or a token no tenant holds."""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a tenant, or the admin (who may manage pools and tenants)."""

    tenant: str | None
    admin: bool = False


def new_token() -> str:
    return "stk_" + secrets.token_urlsafe(32)


def token_file(path: Path, create: bool = True) -> str:
    """The token kept in ``path``; a new one, written readable only by its owner, if none
    (unless ``create`` is False: a token from a mounted Secret must be there)."""
    if path.exists() or not create:
        try:
            token = path.read_text().strip()
        except OSError as exc:
            raise KeysError(f"{path.name}: cannot read {path}: {exc.strerror}") from exc
        if not token:
            raise KeysError(f"{path.name}: {path} is empty")
        return token
    path.parent.mkdir(parents=True, exist_ok=True)
    token = new_token()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


#: what a keys_dir holds (the Secret ``stoker-keys`` on Kubernetes): file -> a fresh value
KEY_FILES = {
    "secret.key": lambda: new_key().decode(),
    "admin.token": new_token,
    "viewer.token": new_token,
}


def write_keys(directory: Path) -> list[str]:
    """Make each of :data:`KEY_FILES` missing in ``directory`` (mode 600; one that is there
    is kept: a new key would leave every sealed value unreadable); the names made."""
    directory.mkdir(parents=True, exist_ok=True)
    made = []
    for name, fresh in KEY_FILES.items():
        path = directory / name
        if path.exists():
            continue
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(fresh() + "\n")
        made.append(name)
    return made


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def check_tenant_name(name: str) -> str:
    if not _TENANT_NAME.match(name) or name == ADMIN:
        raise ValueError(
            f"name: bad tenant name {name!r} (lowercase letters, digits, _ -; not 'admin')"
        )
    return name


class Authenticator:
    """Turns a bearer token into a :class:`Principal`."""

    def __init__(self, store: Store, admin_token_path: Path, create: bool = True) -> None:
        self.store = store
        self.admin_token_path = admin_token_path
        # no cache of tenant tokens: a revoked or rotated token is refused by the next
        # request on every replica (one indexed read per request)
        self._admin_hash = hash_token(token_file(admin_token_path, create))

    def principal(self, token: str | None) -> Principal:
        if not token:
            raise AuthError("authorization: missing bearer token")
        h = hash_token(token)
        if hmac.compare_digest(h, self._admin_hash):
            return Principal(None, admin=True)
        tenant = self.store.tenant_by_hash(h, time.time())
        if tenant is None:
            raise AuthError("authorization: unknown token")
        return Principal(tenant)

    def rotate(self, name: str, grace_s: float) -> str:
        """A new token for ``name``; its current one stays valid ``grace_s`` more, so its
        other callers switch without a refused request. Returns the new token."""
        token = new_token()
        self.store.rotate_token(name, hash_token(token), time.time(), grace_s)
        return token

    def create_tenant(self, name: str) -> str:
        """Add a tenant; returns its token (shown once, stored only as a hash)."""
        check_tenant_name(name)
        token = new_token()
        self.store.add_tenant(name, hash_token(token))
        return token
