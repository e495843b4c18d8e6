"""Which environment variable names a job may set (standard library only: the agent in a
pod imports this too)."""

from __future__ import annotations

import re

#: variables the runtime sets for every job; a job's own env may not override them
RESERVED_ENV = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
    }
)
#: prefixes the runtime owns whole
RESERVED_PREFIXES = ("STOKER_",)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def env_name_error(name: str) -> str | None:
    """Why ``name`` cannot be a job's environment variable, or None if it can."""
    if not _NAME.match(name):
        return f"bad variable name {name!r} (letters, digits and _, not starting with a digit)"
    if name in RESERVED_ENV or name.startswith(RESERVED_PREFIXES):
        return f"{name} is set by the runtime, not by the job"
    return None
