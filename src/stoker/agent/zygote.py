"""The zygote: the agent's own interpreter with the profile's modules imported once.

Each job is a fork of it: the child inherits the warm imports (``torch`` costs seconds to
import, a fork costs a millisecond) and starts from the zygote's state, which never ran user
code, so no job sees another's globals. A plain argv is exec'd from the same fork.
"""

from __future__ import annotations

import importlib
import os
import runpy
import signal
import sys
import time
import traceback

from stoker.agent.binding import Entry


def preload(modules: tuple[str, ...]) -> dict[str, float]:
    """Import ``modules`` once; seconds each took. Never touches CUDA (zero VRAM)."""
    took: dict[str, float] = {}
    for name in modules:
        t0 = time.perf_counter()
        importlib.import_module(name)
        took[name] = time.perf_counter() - t0
    return took


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _run_entry(entry: Entry) -> int:
    """Run ``entry`` in this (forked) interpreter; its exit code."""
    try:
        if entry.kind == "module":
            sys.argv = list(entry.argv)
            runpy.run_module(entry.target, run_name="__main__", alter_sys=True)
        elif entry.kind == "script":
            sys.argv = list(entry.argv)
            sys.path.insert(0, os.path.dirname(os.path.abspath(entry.target)))
            runpy.run_path(entry.target, run_name="__main__")
        elif entry.kind == "code":
            sys.argv = list(entry.argv)
            exec(compile(entry.target, "<string>", "exec"), {"__name__": "__main__"})
        else:  # call
            mod, func = entry.target.split(":")
            sys.argv = list(entry.argv)
            result = getattr(importlib.import_module(mod), func)()
            return _exit_code(result)
        return 0
    except SystemExit as exc:
        return _exit_code(exc.code)
    except BaseException:
        traceback.print_exc()
        return 1


def fork_job(
    entry: Entry,
    env: dict[str, str],
    cwd: str,
    extra_path: tuple[str, ...],
    stdout_fd: int,
    stderr_fd: int,
) -> int:
    """Fork a job; returns its pid. The child never returns: it runs and exits."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        os.setsid()  # its own process group, so a kill reaches its children too
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(stdout_fd, 1)
        os.dup2(stderr_fd, 2)
        os.closerange(3, 1 << 16)  # the agent's socket, loop and pipes stay the agent's
        try:
            with open("/proc/self/oom_score_adj", "w") as fh:
                fh.write("1000")  # under memory pressure the job dies, not the agent
        except OSError:
            pass
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.chdir(cwd)
        if entry.kind == "exec":
            os.execvpe(entry.target, list(entry.argv), env)
        os.environ.clear()
        os.environ.update(env)
        sys.path[:0] = [cwd, *extra_path]
        # fresh text streams on the job's fds, line-buffered so output streams as it comes
        sys.stdin = open(0, closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        code = _run_entry(entry)
        sys.stdout.flush()
        sys.stderr.flush()
    except FileNotFoundError as exc:
        os.write(2, f"stoker: {exc}\n".encode())
        code = 127
    except BaseException:
        try:
            traceback.print_exc()
        finally:
            code = 1
    os._exit(code)
