"""The bubblewrap command line of one sandbox: a pod, or a dependency build.

A sandbox sees only what a job needs, never the host's home, project, data or service
directories: the root is an empty tmpfs holding read-only binds of the system's programs and
libraries (``/usr``, ``/bin``, ``/lib*``, ``/sbin``), ``/sys`` (read-only, with
``/sys/fs/cgroup`` replaced by the pod's own groups, and, in its own network namespace,
the host's network interfaces masked: :func:`host_net_dirs`), a minimal ``/etc`` (:data:`ETC`), and
the paths its interpreter needs (``expose``: the profile's environment, its base install and
stoker's own source). Directories named in ``hide`` are masked by an empty tmpfs wherever an
exposed path would show them (the broker's data dir, the runtime's state dir). Fresh and
size-capped: ``/tmp`` and ``/dev/shm`` (tmpfs), ``/dev/mqueue`` (its own POSIX message queues).
A pod adds:

- ``/workspace``: the pod's private writable directory (host: ``<pod dir>/workspace``);
- ``/stoker/sock``: the agent's Unix socket, in a directory only the agent's uid may enter;
- ``/stoker/code``: the pod's own code dir, holding only the bound job's archive (read-only);
- ``/stoker/overlays``: dependency overlays, read-only and content-addressed.

Namespaces: pid, ipc, uts, mount, cgroup, and network unless the profile allows it. Every
process runs under the seccomp filter of :mod:`stoker.runtime.seccomp` (no ptrace, no
process_vm_*, no new user namespace). Run as root, bwrap makes the namespaces directly and the
command starts through ``setpriv`` as a real unprivileged uid with no-new-privs; the pod's
agent keeps only CAP_SETUID, CAP_SETGID and CAP_KILL (``agent_caps``): to hand each job
another uid (dropping every capability there) and to kill what its jobs leave. Run as a
normal user, bwrap adds a user namespace and drops every capability (everything in the pod
keeps that user's uid).
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
# a job's own checkpoint directory: what it leaves there follows it to its next run after a
# preemption (STOKER_CHECKPOINT_DIR), and goes when the job ends for good
CHECKPOINT_DIR = "/stoker/checkpoint"
SOCKET_NAME = "agent.sock"
CGROUP_DIR = "/sys/fs/cgroup"
#: where sysfs lists the network interfaces (of the host's namespace, whoever reads it)
SYS_NET = "/sys/class/net"
#: the host's top-level entries a sandbox sees (programs, libraries, devices' sysfs)
SYSTEM = ("bin", "lib", "lib32", "lib64", "libx32", "sbin", "usr", "sys")
#: what a sandbox sees of /etc: name resolution, users, the loader, certificates, locale
#: data, the alternatives links; never package managers' credentials (pip.conf, .npmrc),
#: ssh, database or service configuration
ETC = (
    "alternatives",
    "ca-certificates",
    "ca-certificates.conf",
    "debian_version",
    "fonts",
    "gai.conf",
    "glvnd",
    "group",
    "host.conf",
    "hosts",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "locale.alias",
    "localtime",
    "magic",
    "magic.mime",
    "mime.types",
    "networks",
    "nsswitch.conf",
    "OpenCL",
    "os-release",
    "passwd",
    "protocols",
    "python3",
    "resolv.conf",
    "services",
    "ssl",
    "terminfo",
    "timezone",
)
# directories every sandbox gets fresh and empty (tmpfs); host paths under them are re-bound
_PRIVATE = (Path("/tmp"), Path("/dev/shm"))


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
class Bind:
    """A host path bound into the sandbox at ``dest``."""

    host: Path
    dest: str
    writable: bool = False


def pod_binds(
    workspace: Path, sock_dir: Path, code_dir: Path, overlay_dir: Path, checkpoint_dir: Path
) -> tuple[Bind, ...]:
    """A pod's own directories (see the module's docstring)."""
    return (
        Bind(workspace, WORKSPACE, writable=True),
        Bind(sock_dir, SOCK_DIR, writable=True),
        Bind(code_dir, CODE_DIR),
        Bind(overlay_dir, OVERLAY_DIR),
        Bind(checkpoint_dir, CHECKPOINT_DIR, writable=True),
    )


@dataclass(frozen=True, slots=True)
class SandboxSpec:
    """What one sandbox binds and runs."""

    argv: tuple[str, ...]  # run inside
    binds: tuple[Bind, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    hide: tuple[Path, ...] = ()  # host directories never visible (masked where they'd show)
    network: bool = False
    hostname: str = "pod"
    info_fd: int | None = None  # bwrap writes {"child-pid": N} here
    drop_to: tuple[int, int] | None = None  # (uid, gid) when bwrap runs as root
    agent_caps: bool = False  # with drop_to: keep CAP_SETUID, CAP_SETGID, CAP_KILL (the agent)
    devices: tuple[tuple[str, str], ...] = ()  # (host, in the pod) device nodes (GPUs)
    expose: tuple[Path, ...] = ()  # host paths the sandbox must reach (its interpreter)
    seccomp_fd: int | None = None  # a compiled filter (stoker.runtime.seccomp)
    tmp_mb: int | None = None  # size of /tmp and of /dev/shm (each)
    cgroups: tuple[tuple[Path, str], ...] = ()  # (host group dir, path under /sys/fs/cgroup)
    chdir: str = WORKSPACE


def _parents(path: Path, below: Path) -> list[str]:
    """``--dir`` for each parent of ``path`` under ``below`` (mode 0755: bwrap would make
    them 0700, and the pod's uid must pass through)."""
    args: list[str] = []
    for parent in reversed(path.parents):
        if below in parent.parents:
            args += ["--perms", "0755", "--dir", str(parent)]
    return args


def _under(path: Path, roots: list[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


def _layered(exposed: list[Path], hidden: list[Path], tmp_size: list[str]) -> list[str]:
    """Binds of ``exposed`` and masks of ``hidden`` (and the private tmpfs), shallowest
    first, so each lands on what is above it: a hidden dir inside an exposed one is masked
    after the bind, an exposed path inside a mask is bound back into it."""
    system = [Path("/", n) for n in SYSTEM]
    ops: list[tuple[Path, str]] = [(p, "tmpfs") for p in _PRIVATE]
    ops += [(h, "mask") for h in hidden if _under(h, [*system, *exposed])]
    ops += [(e, "bind") for e in exposed]
    args: list[str] = []
    done: list[tuple[Path, str]] = [(Path("/"), "tmpfs"), *((s, "bind") for s in system)]
    for path, kind in sorted(ops, key=lambda op: (len(op[0].parts), str(op[0]))):
        # the deepest mount above it: a bind shows the host's directories, a tmpfs none
        above = max(
            (d for d in done if _under(path, [d[0]]) and (d[0] != path or kind == "bind")),
            key=lambda d: len(d[0].parts),
        )
        if kind == "bind" and above[1] == "bind":
            continue  # already visible as it is on the host
        if above[1] == "tmpfs":
            args += _parents(path, above[0])
        if kind == "tmpfs":
            args += ["--perms", "1777", *tmp_size, "--tmpfs", str(path)]
        elif kind == "mask":
            args += ["--perms", "0755", "--tmpfs", str(path)]
        else:
            args += ["--ro-bind", str(path), str(path)]
        done.append((path, "bind" if kind == "bind" else "tmpfs"))
    return args


def _as_on_host(paths: list[str]) -> list[str]:
    """Each path that exists on the host, read-only (a symlink as the same symlink)."""
    args: list[str] = []
    for host in paths:
        if os.path.islink(host):
            args += ["--symlink", os.readlink(host), host]
        elif os.path.exists(host):
            args += ["--ro-bind", host, host]
    return args


def host_net_dirs() -> list[str]:
    """The sysfs directories that name the host's network interfaces: /sys/class/net, the
    virtual interfaces' /sys/devices/virtual/net, and each device's own ``net`` directory
    (``/sys/devices/pci.../net``) the class links to."""
    try:
        links = [os.path.join(SYS_NET, name) for name in os.listdir(SYS_NET)]
    except OSError:
        return []
    dirs = {SYS_NET, "/sys/devices/virtual/net"}
    dirs.update(os.path.dirname(os.path.realpath(link)) for link in links)
    return sorted(d for d in dirs if os.path.isdir(d))


def build_command(spec: SandboxSpec, bwrap: str | None = None) -> list[str]:
    """The full bwrap argv for ``spec``."""
    cmd = [bwrap or find_bwrap(), "--unshare-pid", "--unshare-ipc"]
    if spec.drop_to is None:
        cmd.append("--unshare-user")
    cmd += ["--unshare-uts", "--unshare-cgroup-try", "--hostname", spec.hostname]
    if not spec.network:
        cmd.append("--unshare-net")
    cmd += _as_on_host([f"/{name}" for name in SYSTEM])
    cmd += ["--perms", "0755", "--dir", "/etc"]
    cmd += _as_on_host([f"/etc/{name}" for name in ETC])
    cmd += ["--proc", "/proc", "--dev", "/dev", "--mqueue", "/dev/mqueue"]
    # the host's cgroup tree lists every pod: a sandbox sees only its own groups
    cmd += ["--perms", "0755", "--tmpfs", CGROUP_DIR]
    for host_dir, dest in spec.cgroups:
        cmd += ["--ro-bind", str(host_dir), f"{CGROUP_DIR}/{dest}".rstrip("/")]
    if not spec.network:
        # sysfs shows the namespace it was mounted in (the host's): a pod of its own network
        # would read the host's interface names. A pod on the host's network sees them in
        # any case (getifaddrs), and NCCL reads /sys/class/net to place its NICs
        for path in host_net_dirs():
            cmd += ["--perms", "0755", "--tmpfs", path]
    exposed = list(dict.fromkeys(Path(p).resolve() for p in spec.expose))
    hidden = [Path(h).resolve() for h in spec.hide]
    size = [] if spec.tmp_mb is None else ["--size", str(spec.tmp_mb * 1024 * 1024)]
    cmd += _layered(exposed, hidden, size)
    for host_dev, dest in spec.devices:
        cmd += ["--dev-bind", host_dev, dest]
    for b in spec.binds:  # the sandbox's own paths, on the root tmpfs
        cmd += _parents(Path(b.dest), Path("/"))
        cmd += ["--bind" if b.writable else "--ro-bind", str(b.host), b.dest]
    cmd += ["--remount-ro", "/", "--chdir", spec.chdir, "--new-session", "--clearenv"]
    if spec.drop_to is None:
        cmd += ["--cap-drop", "ALL"]
    for key, value in sorted(spec.env.items()):
        cmd += ["--setenv", key, value]
    if spec.info_fd is not None:
        cmd += ["--info-fd", str(spec.info_fd)]
    if spec.seccomp_fd is not None:
        cmd += ["--seccomp", str(spec.seccomp_fd)]
    cmd.append("--")
    if spec.drop_to is not None:
        uid, gid = spec.drop_to
        caps = "-all,+setuid,+setgid,+kill" if spec.agent_caps else "-all"
        setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
        cmd += [setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
        cmd += [f"--bounding-set={caps}", f"--inh-caps={caps}"]
        if spec.agent_caps:
            cmd.append(f"--ambient-caps={caps}")  # survives the exec of the interpreter
        cmd.append("--no-new-privs")
    cmd += list(spec.argv)
    return cmd
