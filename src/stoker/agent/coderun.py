"""One code-run request inside a pod: SandboxFusion's ``/run_code`` semantics.

The broker's ``/sandbox-fusion/run_code`` submits ``python -m stoker.agent.coderun`` with
the request as JSON in :data:`REQUEST_ENV`. This runs in the pod's workspace (the job's
cwd): it writes the request's files, writes the code to a file of its own, runs it with
the request's stdin and time and memory limits, fetches the files asked for, and prints
one JSON line (:func:`run`'s answer) as the job's whole stdout. The code's own output is
captured, each stream capped at :data:`CAPTURE_BYTES` past which it is read and dropped,
as SandboxFusion does, so the code never blocks on a full pipe.

The code file is removed afterwards; what the code wrote stays, so a caller that keeps
its pod (a reuse tag) finds its files again on its next call.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO, Any

REQUEST_ENV = "CODERUN_REQUEST"
CAPTURE_BYTES = 1 << 20  # SandboxFusion's cap on each captured stream
_CHUNK = 64 * 1024

#: language -> (the code file's suffix, the command that runs it, the file's path last)
LANGUAGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "python": (".py", (sys.executable,)),
    "bash": (".sh", ("bash",)),
}


def _drain(stream: IO[bytes], kept: bytearray) -> None:
    while chunk := stream.read(_CHUNK):
        room = CAPTURE_BYTES - len(kept)
        if room > 0:
            kept += chunk[:room]


def _feed(stream: IO[bytes], data: bytes | None) -> None:
    try:
        if data:
            stream.write(data)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the code did not read all of its stdin
    finally:
        with contextlib.suppress(BrokenPipeError):
            stream.close()


def _limit_memory(mb: int) -> None:
    # as SandboxFusion's memory_limit_MB: address space and data segment, soft limits
    for what in (resource.RLIMIT_AS, resource.RLIMIT_DATA):
        _, hard = resource.getrlimit(what)
        resource.setrlimit(what, (mb * 1024 * 1024, hard))


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _write_files(files: dict[str, str | None]) -> None:
    for name, content in files.items():
        if not isinstance(content, str):
            continue  # SandboxFusion skips a file without content
        path = os.path.abspath(name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(content))


def _fetch_files(names: list[str]) -> dict[str, str]:
    out = {}
    for name in names:
        if os.path.isfile(name):
            with open(name, "rb") as f:
                out[name] = base64.b64encode(f.read()).decode()
    return out


def run(req: dict[str, Any]) -> dict[str, Any]:
    """Run one request (``code``, ``language``, ``run_timeout``, ``memory_limit_MB``,
    ``stdin``, ``files``, ``fetch_files``); the answer has SandboxFusion's ``run_result``
    fields (``status`` Finished or TimeLimitExceeded, ``execution_time``, ``return_code``,
    ``stdout``, ``stderr``) and ``files``."""
    suffix, command = LANGUAGES[req["language"]]
    _write_files(req.get("files") or {})
    fd, path = tempfile.mkstemp(suffix=suffix, prefix=".coderun-", dir=".")
    with os.fdopen(fd, "w") as f:
        f.write(req["code"])
    mb = int(req.get("memory_limit_MB") or -1)
    stdin = req.get("stdin")
    env = {k: v for k, v in os.environ.items() if k != REQUEST_ENV}
    out, err = bytearray(), bytearray()
    start = time.monotonic()
    proc = subprocess.Popen(
        [*command, os.path.abspath(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,  # its whole group goes at a timeout
        preexec_fn=(lambda: _limit_memory(mb)) if mb > 0 else None,
    )
    assert proc.stdin and proc.stdout and proc.stderr
    threads = [
        threading.Thread(target=_feed, args=(proc.stdin, stdin.encode() if stdin else None)),
        threading.Thread(target=_drain, args=(proc.stdout, out)),
        threading.Thread(target=_drain, args=(proc.stderr, err)),
    ]
    for t in threads:
        t.start()
    timed_out = False
    try:
        proc.wait(timeout=float(req["run_timeout"]))
    except subprocess.TimeoutExpired:
        timed_out = True
    elapsed = time.monotonic() - start
    # what the code left running would hold the pipes open
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    for t in threads:
        t.join()
    os.unlink(path)
    return {
        "status": "TimeLimitExceeded" if timed_out else "Finished",
        "execution_time": elapsed,
        "return_code": None if timed_out else proc.returncode,
        "stdout": _decode(bytes(out)),
        "stderr": _decode(bytes(err)),
        "files": _fetch_files(list(req.get("fetch_files") or [])),
    }


def main() -> None:
    req = json.loads(os.environ[REQUEST_ENV])
    sys.stdout.write(json.dumps(run(req)) + "\n")


if __name__ == "__main__":
    main()
