"""Nothing a broker starts outlives its owner, however the owner ends.

Two tools, for the two ways a broker has an owner:

- :class:`OwnerWatch`: a broker running inside its owner's process (``stoker demo``,
  ``stoker bench``, tests: :class:`~stoker.broker.embedded.EmbeddedBroker`) starts a
  watchdog process that holds the read end of a pipe only the owner writes to. A clean
  stop disarms it; if the owner dies instead (SIGKILL included) the pipe closes, and the
  watchdog stops every pod of the broker's runtime dir (sandboxes, their processes,
  cgroups, workspaces), unless another broker has taken the dir over meanwhile. The pods
  are detached on purpose (``stoker up`` leaves them to the next broker on its dir), so
  the watchdog is what stops them here.
- :func:`die_with_parent`: a broker started as a child process (``stoker up`` under
  ``stoker bench local``) asks the kernel for SIGTERM when its parent dies
  (``PR_SET_PDEATHSIG``); ``stoker up`` stops its pods on SIGTERM.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import subprocess
import sys
from pathlib import Path

PR_SET_PDEATHSIG = 1
DISARM = b"x"
# the environment variable naming the parent a child broker dies with
PARENT_ENV = "STOKER_DIE_WITH_PARENT"


def die_with_parent(parent: int, sig: int = signal.SIGTERM) -> None:
    """Have the kernel send ``sig`` to this process when ``parent`` dies (Linux). The
    kernel watches the thread that forked this process, so the parent forks it from its
    main thread. A parent already gone (the race before the call) is the signal now."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:
        os.kill(os.getpid(), sig)


class OwnerWatch:
    """The watchdog of one runtime dir while its broker runs in this process."""

    def __init__(self, runtime_dir: Path, lock_path: Path) -> None:
        self.runtime_dir = Path(runtime_dir)
        self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, "-m", "stoker.runtime.reaper", str(runtime_dir), str(lock_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,  # a terminal's Ctrl-C reaches the owner, not the watchdog
            close_fds=True,
        )

    def disarm(self) -> None:
        """The broker stopped cleanly (its pods stopped, or kept for the next broker on
        purpose): the watchdog leaves without touching anything."""
        proc, self._proc = self._proc, None
        if proc is None or proc.stdin is None:
            return
        try:
            proc.stdin.write(DISARM)
            proc.stdin.close()
        except BrokenPipeError:
            pass
        proc.wait(30)


def reap(runtime_dir: Path, lock_path: Path) -> int:
    """Stop every pod recorded under ``runtime_dir`` (as the runtime itself stops them),
    unless another broker holds ``lock_path`` (it owns them now). Returns the pods stopped."""
    from filelock import FileLock, Timeout

    from stoker.runtime.local import LocalRuntime

    try:
        with FileLock(str(lock_path), timeout=0):
            runtime = LocalRuntime(runtime_dir)

            async def stop() -> int:
                pods = await runtime.live_pods()
                await runtime.stop_all()
                return len(pods)

            return asyncio.run(stop())
    except Timeout:
        return 0


def main(argv: list[str]) -> int:
    """``python -m stoker.runtime.reaper RUNTIME_DIR LOCK``: wait for the owner's pipe on
    stdin; a disarm leaves, end of file (the owner died) reaps."""
    runtime_dir, lock_path = Path(argv[0]), Path(argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    data = sys.stdin.buffer.read()
    if data.endswith(DISARM):
        return 0
    reap(runtime_dir, lock_path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
