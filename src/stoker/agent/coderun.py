"""One code-run request inside a pod: SandboxFusion's ``/run_code`` semantics.

The broker's ``/sandbox-fusion/run_code`` submits ``stoker.agent.coderun:main`` (a call
entry: the agent imports this module before it forks its zygote, so every job's fork has
it warm) with the request as JSON in :data:`REQUEST_ENV`. This runs in the pod's
workspace (the job's cwd): it writes the request's files, writes the code to a file of its
own, runs it with the request's stdin and time and memory limits in a process of its own
(python: a fork of this interpreter, run as ``python FILE`` runs in the zygote), fetches
the files asked for, and prints one JSON line (:func:`run`'s answer) as the job's whole
stdout. The code's own output is captured, each stream capped at :data:`CAPTURE_BYTES`
past which it is read and dropped, as SandboxFusion does, so the code never blocks on a
full pipe. The code's process holds no fd but its three pipes, so it cannot
write this answer for itself (an answer it garbles is a SandboxError, never a pass).

The code file is removed afterwards; what the code wrote stays, so a caller that keeps
its pod (a reuse tag) finds its files again on its next call.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import pkgutil  # noqa: F401 - runpy.run_path imports it in each run: warm in the zygote
import resource
import select
import signal
import sys
import tempfile
import threading
import time
import traceback
from typing import IO, Any

from stoker.agent.binding import Entry
from stoker.agent.zygote import _run_entry

REQUEST_ENV = "CODERUN_REQUEST"
CAPTURE_BYTES = 1 << 20  # SandboxFusion's cap on each captured stream
_CHUNK = 64 * 1024

#: language -> (the code file's suffix, the command that runs it, the file's path last;
#: none: python, run in a fork of this interpreter, whose imports are warm)
LANGUAGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "python": (".py", ()),
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


def _child(language: str, path: str, mb: int, fds: tuple[int, int, int]) -> None:
    """The code's process (a fork of this one); never returns."""
    status = 1
    try:
        os.setsid()  # its whole group goes at a timeout
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, 1 << 20)  # nothing but its pipes: never this job's own stdout
        os.environ.pop(REQUEST_ENV, None)
        if mb > 0:
            _limit_memory(mb)
        command = LANGUAGES[language][1]
        if command:
            os.execvp(command[0], [*command, path])
        status = _run_entry(Entry("script", path, (path,)))  # as ``python PATH`` runs it
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        os._exit(status)


def run(req: dict[str, Any]) -> dict[str, Any]:
    """Run one request (``code``, ``language``, ``run_timeout``, ``memory_limit_MB``,
    ``stdin``, ``files``, ``fetch_files``); the answer has SandboxFusion's ``run_result``
    fields (``status`` Finished or TimeLimitExceeded, ``execution_time``, ``return_code``,
    ``stdout``, ``stderr``) and ``files``."""
    language = req["language"]
    _write_files(req.get("files") or {})
    fd, path = tempfile.mkstemp(suffix=LANGUAGES[language][0], prefix=".coderun-", dir=".")
    with os.fdopen(fd, "w") as f:
        f.write(req["code"])
    path = os.path.abspath(path)
    mb = int(req.get("memory_limit_MB") or -1)
    stdin = req.get("stdin")
    (in_r, in_w), (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe(), os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(language, path, mb, (in_r, out_w, err_w))
    for end in (in_r, out_w, err_w):
        os.close(end)
    out, err = bytearray(), bytearray()
    streams = (open(in_w, "wb"), open(out_r, "rb"), open(err_r, "rb"))  # noqa: SIM115
    threads = [
        threading.Thread(target=_feed, args=(streams[0], stdin.encode() if stdin else None)),
        threading.Thread(target=_drain, args=(streams[1], out)),
        threading.Thread(target=_drain, args=(streams[2], err)),
    ]
    for t in threads:
        t.start()
    pidfd = os.pidfd_open(pid)
    exited, _, _ = select.select([pidfd], [], [], float(req["run_timeout"]))
    os.close(pidfd)
    elapsed = time.monotonic() - start
    # what the code left running would hold the pipes open
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    for t in threads:
        t.join()
    for stream in streams[1:]:
        stream.close()
    os.unlink(path)
    timed_out = not exited
    return {
        "status": "TimeLimitExceeded" if timed_out else "Finished",
        "execution_time": elapsed,
        "return_code": None if timed_out else os.waitstatus_to_exitcode(status),
        "stdout": _decode(bytes(out)),
        "stderr": _decode(bytes(err)),
        "files": _fetch_files(list(req.get("fetch_files") or [])),
    }


def main() -> None:
    req = json.loads(os.environ[REQUEST_ENV])
    sys.stdout.write(json.dumps(run(req)) + "\n")


if __name__ == "__main__":
    main()
