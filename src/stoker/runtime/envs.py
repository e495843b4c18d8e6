"""Profile environments and per-job dependency overlays, built with uv and cached by digest.

A profile's environment is built once per host (a venv with the profile's packages) and shared
read-only by all its pods: the local counterpart of one base image per hardware profile. A
profile with no packages runs on the base interpreter itself. A job's extra dependencies go
into an overlay directory (:mod:`stoker.agent.deps`, the same builder a Kubernetes pod's
agent uses); here overlays are read-only in the pods and never touch the shared
environment. All builds share one uv cache per host. Every uv run is sandboxed like a pod
(the same system view and seccomp filter) and, under root, runs as an unprivileged build
uid that can write only the uv cache and the directory being built; what it built becomes
root's before any pod sees it.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from stoker.agent.deps import EnvBuildError, build_overlay, digest_of, find_uv, locked
from stoker.runtime import sandbox, seccomp

__all__ = ["EnvBuildError", "EnvBuilder", "ProfileEnv", "top_level_modules"]


def _chown_tree(root: Path, owner: tuple[int, int]) -> None:
    """``root`` and everything below it to ``owner`` (links themselves, never followed)."""
    os.chown(root, *owner, follow_symlinks=False)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in (*dirnames, *filenames):
            os.chown(os.path.join(dirpath, name), *owner, follow_symlinks=False)


def top_level_modules(root: Path, deps: tuple[str, ...]) -> tuple[str, ...]:
    """The top-level modules of the distributions ``deps`` name, as installed under
    ``root`` (read from their metadata, never imported): what a job of these deps imports,
    and what a pod's deps layer preloads. Their own dependencies come in with them."""
    wanted = {canonicalize_name(Requirement(d).name) for d in deps}
    names: list[str] = []
    for dist in importlib.metadata.distributions(path=[str(root)]):
        if canonicalize_name(dist.metadata["Name"] or "") not in wanted:
            continue
        top = dist.read_text("top_level.txt")
        if top is not None:
            names += top.split()
            continue
        for f in dist.files or ():
            parts = f.parts
            if len(parts) == 2 and parts[1] == "__init__.py":
                names.append(parts[0])  # a package
            elif len(parts) == 1 and parts[0].endswith((".py", ".so")):
                names.append(parts[0].split(".")[0])  # a module, or an extension module
    return tuple(sorted({n for n in names if n.isidentifier()}))


@dataclass(frozen=True, slots=True)
class ProfileEnv:
    """A built environment: the interpreter pods run (``python``) and its root."""

    digest: str
    root: Path
    python: str


class EnvBuilder:
    """Builds and caches profile environments and dependency overlays under ``root``."""

    def __init__(
        self,
        root: Path,
        *,
        base_python: str = sys.executable,
        find_links: tuple[Path, ...] = (),
        no_index: bool = False,
        index_url: str | None = None,
        extra_index_urls: tuple[str, ...] = (),
        ca_bundle: Path | None = None,
        uv: str | None = None,
        build_user: tuple[int, int] | None = None,
    ) -> None:
        """``index_url``/``extra_index_urls``: the package indexes uv reads (None: PyPI),
        e.g. PyTorch's CPU wheels; ``ca_bundle``: a PEM file of CAs uv trusts besides its
        own (a TLS-intercepting proxy's), readable in the build sandbox."""
        self.root = Path(root)
        self.base_python = base_python
        self.find_links = tuple(Path(p) for p in find_links)
        self.no_index = no_index
        self.index_url = index_url
        self.extra_index_urls = tuple(extra_index_urls)
        self.ca_bundle = None if ca_bundle is None else Path(ca_bundle)
        self._uv = uv
        self.build_user = build_user  # (uid, gid) uv runs as, under root
        self.cache_dir = self.root / "uv-cache"
        self.overlay_root = self.root / "overlays"
        self.env_root = self.root / "envs"
        for d in (self.cache_dir, self.overlay_root, self.env_root):
            d.mkdir(parents=True, exist_ok=True)
        # pods (an unprivileged uid) read overlays and envs; they never write them
        for d in (self.root, self.overlay_root, self.env_root):
            d.chmod(0o755)
        if build_user is not None and self.cache_dir.stat().st_uid != build_user[0]:
            _chown_tree(self.cache_dir, build_user)

    @property
    def uv(self) -> str:
        if self._uv is None:
            self._uv = find_uv()
        return self._uv

    def _index_args(self) -> list[str]:
        args = ["--cache-dir", str(self.cache_dir)]
        for link in self.find_links:
            args += ["--find-links", str(link)]
        if self.no_index:
            args.append("--no-index")
        else:
            if self.index_url:
                args += ["--index-url", self.index_url]
            for url in self.extra_index_urls:
                args += ["--extra-index-url", url]
        return args

    def _run(self, cmd: list[str], what: str, writable: tuple[Path, ...], python: str = "") -> None:
        """Run uv in a sandbox that can write only the cache and ``writable``, and read the
        system, uv, the interpreters and the find-links dirs."""
        for path in writable:
            if self.build_user is not None:
                _chown_tree(path, self.build_user)
        uv_dir = Path(self.uv).resolve().parent
        readable = [uv_dir, Path(sys.base_prefix)]
        for py in filter(None, (self.base_python, python)):
            readable += [Path(py).parent.parent, Path(py).resolve().parent.parent]
        binds = [sandbox.Bind(p, str(p), writable=True) for p in (self.cache_dir, *writable)]
        binds += [sandbox.Bind(p, str(p)) for p in self.find_links]
        env = {
            "PATH": f"{uv_dir}:/usr/local/bin:/usr/bin:/bin",
            "HOME": "/tmp",
            "UV_CACHE_DIR": str(self.cache_dir),
            "UV_NO_CONFIG": "1",  # never a uv.toml or pip.conf of the host's
            "UV_PYTHON_DOWNLOADS": "never",
        }
        if self.ca_bundle is not None:  # uv reads SSL_CERT_FILE for its extra roots
            binds.append(sandbox.Bind(self.ca_bundle, str(self.ca_bundle)))
            env["SSL_CERT_FILE"] = str(self.ca_bundle)
        spec = sandbox.SandboxSpec(
            argv=tuple(cmd),
            binds=tuple(binds),
            env=env,
            expose=tuple(readable),
            network=not self.no_index,
            hostname="build",
            drop_to=self.build_user,
            seccomp_fd=(sc_fd := seccomp.program_fd()),
            chdir="/tmp",
        )
        try:
            proc = subprocess.run(
                sandbox.build_command(spec),
                capture_output=True,
                text=True,
                check=False,
                pass_fds=(sc_fd,),
            )
        finally:
            os.close(sc_fd)
        for path in writable:
            if self.build_user is not None:
                _chown_tree(path, (0, 0))
        if proc.returncode != 0:
            raise EnvBuildError(
                f"{what} failed (uv exit {proc.returncode}): {proc.stderr.strip()[-2000:]}",
                proc.stdout + proc.stderr,
            )

    def profile_env(self, packages: tuple[str, ...]) -> ProfileEnv:
        """The environment with ``packages`` (built on first use; the base one if empty)."""
        if not packages:
            return ProfileEnv("base", Path(sys.prefix), self.base_python)
        digest = digest_of({"python": self.base_python, "packages": sorted(packages)})
        root = self.env_root / digest
        python = str(root / "bin" / "python")
        done = root / ".stoker-complete"
        if done.exists():
            return ProfileEnv(digest, root, python)
        with locked(self.env_root / f"{digest}.lock"):
            if not done.exists():
                # a venv is not relocatable, so it is built in place; an unfinished one
                # (a crash mid-build) has no marker and is built again from scratch
                shutil.rmtree(root, ignore_errors=True)
                root.mkdir()
                venv = [self.uv, "venv", "-q", "--python", self.base_python, str(root)]
                self._run(venv, "uv venv", (root,))
                self._run(
                    [
                        self.uv,
                        "pip",
                        "install",
                        "-q",
                        "--python",
                        python,
                        *self._index_args(),
                        *sorted(packages),
                    ],
                    f"installing profile packages {sorted(packages)}",
                    (root,),
                )
                done.write_text(json.dumps({"packages": sorted(packages)}))
        return ProfileEnv(digest, root, python)

    def overlay(self, deps: tuple[str, ...], python: str) -> str:
        """Digest of the overlay holding ``deps`` for interpreter ``python`` (built once,
        see :func:`stoker.agent.deps.build_overlay`; uv runs sandboxed here)."""

        def run(cmd: list[str], writable: Path) -> None:
            self._run(cmd, f"installing deps {sorted(deps)}", (writable,), python)

        return build_overlay(self.overlay_root, deps, python, self.uv, self._index_args(), run)
