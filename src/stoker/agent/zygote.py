"""The zygote: the agent's own interpreter with the profile's modules imported once.

Each job runs in a fork of it, made ahead of time (:class:`Spare`): the child inherits the
warm imports (``torch`` costs seconds to import) and starts from the zygote's state, which
never ran user code, so no job sees another's globals. A plain argv is exec'd from the same
fork."""

from __future__ import annotations

import gc
import importlib
import json
import os
import runpy
import signal
import sys
import time
import traceback
from dataclasses import dataclass

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


def _child(entry: Entry, env: dict[str, str], cwd: str, extra_path: tuple[str, ...]) -> int:
    """The job, in a forked child whose fds 1 and 2 are its output pipes; its exit code."""
    os.setsid()  # its own session and process group, so a kill reaches its children too
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    try:
        with open("/proc/self/oom_score_adj", "w") as fh:
            fh.write("1000")  # under memory pressure the job dies, not the agent
    except OSError:
        pass
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # the agent's event loop set a wakeup fd the fork inherited: a job's own signal handler
    # would write there (to a descriptor not its own) and print an error on every signal
    signal.set_wakeup_fd(-1)
    os.chdir(cwd)
    if entry.kind == "exec":
        try:
            os.execvpe(entry.target, list(entry.argv), env)
        except OSError as exc:
            os.write(2, f"stoker: cannot run {entry.target!r}: {exc.strerror}\n".encode())
            return 127
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
    return code


@dataclass
class Spare:
    """A child forked ahead of time, waiting for its job on a pipe.

    Forking an interpreter that holds torch costs ~10 ms (page tables) and would sit between
    a bind and its job running; the agent forks the next spare while a job runs, so a bind
    only writes the job to a pipe. A spare sees EOF (and exits) if the agent dies.
    """

    pid: int
    ctl: int  # write end: the job's description, then close
    stdout: int  # read ends of the job's output pipes
    stderr: int

    @classmethod
    def fork(cls) -> Spare:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        ctl_r, ctl_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the spare
            code = 1
            try:
                gc.freeze()  # the agent's objects are never collected (nor their fds closed)
                os.dup2(ctl_r, 0)
                os.dup2(out_w, 1)
                os.dup2(err_w, 2)
                os.closerange(3, 1 << 16)  # the agent's socket, loop and pipes stay its own
                chunks = []
                while chunk := os.read(0, 1 << 16):
                    chunks.append(chunk)
                if not chunks:
                    os._exit(0)  # no job: the agent went away or retired this spare
                spec = json.loads(b"".join(chunks))
                entry = Entry(spec["kind"], spec["target"], tuple(spec["argv"]))
                code = _child(entry, spec["env"], spec["cwd"], tuple(spec["path"]))
            except BaseException:
                try:
                    traceback.print_exc()
                finally:
                    code = 1
            os._exit(code)
        for fd in (out_w, err_w, ctl_r):
            os.close(fd)
        return cls(pid, ctl_w, out_r, err_r)

    def start(
        self, entry: Entry, env: dict[str, str], cwd: str, extra_path: tuple[str, ...]
    ) -> None:
        """Hand the spare its job (it runs at once)."""
        spec = {
            "kind": entry.kind,
            "target": entry.target,
            "argv": list(entry.argv),
            "env": env,
            "cwd": cwd,
            "path": list(extra_path),
        }
        data = json.dumps(spec).encode()
        view = memoryview(data)
        while view:
            view = view[os.write(self.ctl, view) :]
        os.close(self.ctl)

    def retire(self) -> None:
        """Let an unused spare go (it exits on EOF); the caller reaps it."""
        os.close(self.ctl)
        os.close(self.stdout)
        os.close(self.stderr)
