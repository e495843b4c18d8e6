"""The wire between a runtime and the agent in a pod: one JSON object per line.

The agent listens on a Unix socket (locally; a TCP address in Kubernetes) and the runtime
connects, so a restarted broker reconnects to agents that kept running. Bytes of job output
travel base64-encoded. Requests (runtime -> agent) carry ``op``; events (agent -> runtime)
carry ``ev``:

- ``{"op": "bind", "job", "argv", "code", "overlay", "env", "timeout_s", "topology"}`` ->
  ``{"ev": "running", "job", "pid"}``, then ``output`` events, then
  ``{"ev": "exited", "job", "exit_code", "signal", "failure"}`` (or ``{"ev": "error", "job",
  "message"}`` when the job cannot be bound);
- ``{"op": "code", "digest", "offset", "data", "last"}``: chunks of a code archive, for a pod
  that cannot see the broker's code cache (Kubernetes) -> ``{"ev": "code", "digest",
  "path"}`` after the last one, whose sha256 must match;
- ``{"op": "kill", "job", "failure"}``; ``{"op": "promote", "cuda_visible_devices", "gpus"}`` ->
  ``{"ev": "promoted"}``; ``{"op": "ping"}`` -> ``{"ev": "pong", ...state}``.

On every connection the agent first sends ``{"ev": "hello", ...state, "ran", "held"}``, then
any events it held while no runtime was connected (a job that ended during a broker
restart). ``ran`` maps each job id it ran to ``{"exit_code", "failure"}``; ``held`` lists the
jobs whose ``exited`` follows. A ``bind`` is idempotent by job id: for a job it runs or ran,
the agent answers ``running`` or the recorded ``exited`` again, and never runs it twice.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

Message = dict[str, Any]

#: the longest line either side accepts (output is chunked well below it)
MAX_LINE = 16 * 1024 * 1024


class ProtocolError(ValueError):
    """A line that is not a JSON object, or one without its ``op``/``ev``."""


def encode(msg: Message) -> bytes:
    """One message as one line."""
    return json.dumps(msg, separators=(",", ":")).encode() + b"\n"


def decode(line: bytes) -> Message:
    """One line as one message."""
    try:
        msg = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"not JSON: {line[:80]!r}") from exc
    if not isinstance(msg, dict) or not ("op" in msg or "ev" in msg):
        raise ProtocolError(f"not a message: {line[:80]!r}")
    return msg


def pack_bytes(data: bytes) -> str:
    return base64.b64encode(data).decode()


def unpack_bytes(text: str) -> bytes:
    return base64.b64decode(text)


async def read_message(reader: asyncio.StreamReader) -> Message | None:
    """The next message, or None at end of stream."""
    line = await reader.readline()
    if not line:
        return None
    return decode(line)


async def open_connection(path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to an agent's socket."""
    return await asyncio.open_unix_connection(path, limit=MAX_LINE)
