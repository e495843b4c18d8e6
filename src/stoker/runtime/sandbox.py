"""The bubblewrap command line of one pod.

Layout inside the sandbox: the host's root read-only (so the profile's environment and the
agent's code are there, read-only), with the runtime's state directory masked (other pods'
workspaces are never visible), a fresh tmpfs on /tmp and /dev/shm, and:

- ``/workspace``: the pod's private writable directory (host: ``<pod dir>/workspace``);
- ``/stoker/sock``: the directory of the agent's Unix socket (writable);
- ``/stoker/code``: the pod's own code dir, holding only the bound job's archive (read-only);
- ``/stoker/overlays``: the dependency overlays, read-only and content-addressed.

Namespaces: pid, ipc, uts, mount, cgroup, and network unless the profile allows it. Run as
root, bwrap makes them directly and the command is started through ``setpriv`` as a real
unprivileged uid (65534 by default) with an empty bounding set and no-new-privs, so the pod's
processes hold no capability anywhere; run as a normal user, bwrap adds a user namespace and
drops every capability (the pod keeps that user's uid).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

WORKSPACE = "/workspace"
SOCK_DIR = "/stoker/sock"
CODE_DIR = "/stoker/code"
OVERLAY_DIR = "/stoker/overlays"
SOCKET_NAME = "agent.sock"
# made fresh in the sandbox (or, for the pod's own paths, never from the host)
# directories every pod gets fresh and empty (tmpfs); host paths under them must be re-bound
_PRIVATE = (Path("/tmp"), Path("/dev/shm"))
_NOT_BOUND = ("proc", "dev", "tmp", "workspace", "stoker", "lost+found")


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing (install the ``bubblewrap`` package)."""


def find_bwrap() -> str:
    """Path of the bwrap binary, or a clear error saying how to get it."""
    path = shutil.which("bwrap")
    if path is None:
        raise SandboxUnavailable(
            "bubblewrap (bwrap) not found: install it, e.g. `apt-get install bubblewrap`"
        )
    return path


@dataclass(frozen=True, slots=True)
class SandboxSpec:
    """What one pod's sandbox binds and runs."""

    workspace: Path
    sock_dir: Path
    code_dir: Path
    overlay_dir: Path
    argv: tuple[str, ...]  # the agent's command line, run inside
    env: dict[str, str] = field(default_factory=dict)
    hide: tuple[Path, ...] = ()  # host directories masked by an empty tmpfs
    network: bool = False
    hostname: str = "pod"
    info_fd: int | None = None  # bwrap writes {"child-pid": N} here
    drop_to: tuple[int, int] | None = None  # (uid, gid) when bwrap runs as root
    devices: tuple[str, ...] = ()  # host device nodes passed through (GPUs)
    expose: tuple[Path, ...] = ()  # host paths the pod must reach (its interpreter)


def _expose(paths: tuple[Path, ...], hidden: tuple[Path, ...]) -> list[str]:
    """Reach ``paths`` through closed parents: mask the first parent the pod's uid could not
    enter (e.g. /root, mode 700, holding a pyenv interpreter) with an empty tmpfs, and bind
    the path itself read-only into it. Nothing else of that parent shows. A path inside a
    hidden directory (a profile's venv in the state dir) or inside the pod's private /tmp
    and /dev/shm (a checkout under /tmp) is bound back the same way."""
    args: list[str] = []
    masked: list[Path] = [Path(h).resolve() for h in (*hidden, *_PRIVATE)]
    for path in paths:
        path = Path(path).resolve()
        for parent in reversed(path.parents):
            if parent == Path("/"):
                continue
            if any(parent == m or m in parent.parents for m in masked):
                break
            if not os.stat(parent).st_mode & 0o001:
                masked.append(parent)
                args += ["--perms", "0755", "--tmpfs", str(parent)]
                break
        inside = [m for m in masked if m == path or m in path.parents]
        if inside:
            # the outermost mask is the one mounted over the others (/tmp over a hidden
            # state dir in it); bwrap would make the directories below it 0700
            outer = min(inside, key=lambda m: len(m.parts))
            for mid in reversed(path.parents):
                if outer in mid.parents:
                    args += ["--perms", "0755", "--dir", str(mid)]
            args += ["--ro-bind", str(path), str(path)]
    return args


def build_command(spec: SandboxSpec, bwrap: str | None = None) -> list[str]:
    """The full bwrap argv for ``spec``."""
    cmd = [bwrap or find_bwrap(), "--unshare-pid", "--unshare-ipc"]
    if spec.drop_to is None:
        cmd.append("--unshare-user")
    cmd += ["--unshare-uts", "--unshare-cgroup-try", "--hostname", spec.hostname]
    if not spec.network:
        cmd.append("--unshare-net")
    # the root is a tmpfs holding read-only binds of the host's top-level entries, so the
    # pod's own mount points (/workspace, /stoker) can be made beside them
    for name in sorted(os.listdir("/")):
        host = f"/{name}"
        if name in _NOT_BOUND:
            continue
        if os.path.islink(host):
            cmd += ["--symlink", os.readlink(host), host]
        elif os.path.isdir(host):
            cmd += ["--ro-bind", host, host]
    cmd += ["--proc", "/proc", "--dev", "/dev"]
    # masks come first so the binds below may land inside a masked directory
    for hidden in spec.hide:
        cmd += ["--perms", "0755", "--tmpfs", str(hidden)]
    cmd += ["--perms", "1777", "--tmpfs", "/tmp", "--perms", "1777", "--tmpfs", "/dev/shm"]
    cmd += _expose(spec.expose, spec.hide)
    for dev in spec.devices:
        cmd += ["--dev-bind", dev, dev]
    cmd += ["--perms", "0755", "--dir", "/stoker"]
    cmd += ["--bind", str(spec.workspace), WORKSPACE]
    cmd += ["--bind", str(spec.sock_dir), SOCK_DIR]
    cmd += ["--ro-bind", str(spec.code_dir), CODE_DIR]
    cmd += ["--ro-bind", str(spec.overlay_dir), OVERLAY_DIR]
    cmd += ["--remount-ro", "/", "--chdir", WORKSPACE, "--new-session", "--clearenv"]
    if spec.drop_to is None:
        cmd += ["--cap-drop", "ALL"]
    for key, value in sorted(spec.env.items()):
        cmd += ["--setenv", key, value]
    if spec.info_fd is not None:
        cmd += ["--info-fd", str(spec.info_fd)]
    cmd.append("--")
    if spec.drop_to is not None:
        uid, gid = spec.drop_to
        setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
        cmd += [setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
        cmd += ["--bounding-set=-all", "--inh-caps=-all", "--no-new-privs"]
    cmd += list(spec.argv)
    return cmd
