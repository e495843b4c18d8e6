"""The agent inside a pod: ``python -m stoker.agent --socket PATH [--preload torch] ...``.

It imports the profile's modules once (the zygote), listens on a Unix socket for its runtime
(locally) or dials the broker's agent gateway (``--dial HOST:PORT``, in a Kubernetes pod:
outbound only, authenticated by the pod's token), and runs one job at a time: binds it
(code, overlay, env, topology), forks it from the zygote or execs it, streams its output
(capped per job), enforces its timeout, reports its exit with a typed failure, and kills
whatever the job left running. Only the workspace outlives a job:
after each one its files in /tmp, /dev/shm and /dev/mqueue and its System V IPC objects go.

In a sandbox the agent is out of its jobs' reach: jobs run as another uid (``--job-uid``),
the agent and its spare are not dumpable, the seccomp filter denies ptrace and
process_vm_*, and the socket answers only peers outside the pod's pid namespace (the
runtime), in a directory only the agent's uid may enter.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from stoker.agent import STANDBY_ENV, TOKEN_ENV
from stoker.agent import coderun as _coderun  # noqa: F401 - the zygote's: warm in every job
from stoker.agent.zygote import (
    JobUser,
    Zygote,
    clear_ambient_caps,
    collapse_huge_pages,
    preload,
    set_dumpable,
)

if TYPE_CHECKING:  # imported at run time only after the zygote is forked (see main)
    import asyncio


def take_token() -> str:
    """Remove the pod's token from this process's environment, where a job could read it.

    Popping it keeps it out of every child's environment; the bytes in the process's
    original environment block (what ``/proc/PID/environ`` shows, and what a forked job
    inherits in memory) are overwritten in place. (The agent is non-dumpable already: a job
    of the same uid can neither ptrace it nor read its ``/proc/PID/environ``.)"""
    token = os.environ.pop(TOKEN_ENV, "")
    if not token:
        return ""
    with contextlib.suppress(OSError, ValueError, IndexError):
        fields = Path("/proc/self/stat").read_text().rpartition(")")[2].split()
        env_start = int(fields[47])  # field 50 of proc(5); the split starts at field 3
        block = Path("/proc/self/environ").read_bytes()
        key = f"{TOKEN_ENV}=".encode()
        at = (b"\0" + block).find(b"\0" + key)  # the entry's offset in the block
        if at >= 0:
            ctypes.memset(env_start + at + len(key), ord("x"), len(token.encode()))
    return token


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"--dial: HOST:PORT, not {text!r}")
    return host, int(port)


def in_own_pid_namespace() -> bool:
    """True when this process is pid 2 under bwrap as pid 1: a namespace it may sweep."""
    try:
        init = Path("/proc/1/comm").read_text().strip()
    except OSError:
        return False
    return os.getpid() == 2 and os.getppid() == 1 and init == "bwrap"


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m stoker.agent``."""
    parser = argparse.ArgumentParser(prog="python -m stoker.agent")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--socket", help="Unix socket to listen on")
    where.add_argument(
        "--dial",
        type=_host_port,
        help=f"HOST:PORT of the broker's agent gateway to dial (token: ${TOKEN_ENV})",
    )
    parser.add_argument("--pod", default=os.environ.get("STOKER_POD", "pod"))
    parser.add_argument("--workspace", default=os.getcwd())
    parser.add_argument("--preload", default="", help="comma-separated modules to import")
    parser.add_argument(
        "--sandboxed",
        action="store_true",
        help="the agent is pid 2 of its own pid namespace under bwrap: kill every other "
        "process after each job (refused anywhere else)",
    )
    parser.add_argument(
        "--checkpoint",
        default=None,
        help="the job's checkpoint dir, kept across its runs (STOKER_CHECKPOINT_DIR; "
        "default: /stoker/checkpoint where the sandbox binds one)",
    )
    parser.add_argument("--job-uid", type=int, help="run jobs as this uid (needs CAP_SETUID)")
    parser.add_argument("--job-gid", type=int, help="... and this gid")
    args = parser.parse_args(argv)
    set_dumpable(False)  # before anything else: no job may trace or read this process
    clear_ambient_caps()
    if args.sandboxed and not in_own_pid_namespace():
        print("agent: --sandboxed outside a bwrap pid namespace; refusing", file=sys.stderr)
        raise SystemExit(2)
    token = take_token()
    if args.dial is not None and not token:
        print(f"agent: --dial needs the pod's token in ${TOKEN_ENV}", file=sys.stderr)
        raise SystemExit(2)
    if os.environ.get(STANDBY_ENV) == "1":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # never CUDA before promotion, whatever preloads
    modules = tuple(m for m in args.preload.split(",") if m)
    try:
        took = preload(modules)
    except ImportError as exc:
        print(f"agent: preload failed: {exc}", file=sys.stderr)
        raise SystemExit(3) from exc
    collapse_huge_pages()  # before the zygote is forked: every job's fork is cheaper
    user = None if args.job_uid is None else JobUser(args.job_uid, args.job_gid or args.job_uid)
    # the zygote now, before any runtime connects and before the agent's own imports below
    # (asyncio, subprocess, ssl, threading's at-fork hook), which no job needs: each job's
    # fork copies less and runs fewer at-fork hooks
    zygote = Zygote(user)
    import asyncio

    from stoker.agent.agent import Agent

    agent = Agent(
        args.socket or "",
        args.pod,
        Path(args.workspace),
        took,
        zygote,
        args.sandboxed,
        user,
        dial=args.dial,
        token=token,
        checkpoint_dir=args.checkpoint,
    )
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(agent.run())


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where the pod's environment has it (stoker depends on it; a
    profile's own environment may not): a trivial job's wake-ups, pipe reads and socket
    writes cost the agent less CPU than on asyncio's own loop. None: asyncio's."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


if __name__ == "__main__":
    main()
