"""Profile environments and per-job dependency overlays, built with uv and cached by digest.

A profile's environment is built once per host (a venv with the profile's packages) and shared
read-only by all its pods: the local counterpart of one base image per hardware profile. A
profile with no packages runs on the base interpreter itself. A job's extra dependencies go
into an overlay directory (``uv pip install --target``) named by the digest of the sorted
dependency list, so a second job with the same list reuses it; overlays are read-only in the
pods and never touch the shared environment. All builds share one uv cache per host.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


class EnvBuildError(RuntimeError):
    """uv could not build an environment or an overlay; ``output`` holds what it said."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output


def digest_of(items: object) -> str:
    """sha256 of a JSON-serialisable description (the cache key of an env or overlay)."""
    return hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()


def find_uv() -> str:
    """The uv binary: on PATH, or beside this interpreter (a venv that installed uv)."""
    path = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    if not os.access(path, os.X_OK):
        raise EnvBuildError("uv not found: install it (`pip install uv`)")
    return path


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock across processes (two brokers or pods building the same digest)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


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
        uv: str | None = None,
    ) -> None:
        self.root = Path(root)
        self.base_python = base_python
        self.find_links = tuple(Path(p) for p in find_links)
        self.no_index = no_index
        self._uv = uv
        self.cache_dir = self.root / "uv-cache"
        self.overlay_root = self.root / "overlays"
        self.env_root = self.root / "envs"
        for d in (self.cache_dir, self.overlay_root, self.env_root):
            d.mkdir(parents=True, exist_ok=True)
        # pods (an unprivileged uid) read overlays and envs; they never write them
        for d in (self.root, self.overlay_root, self.env_root):
            d.chmod(0o755)

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
        return args

    def _run(self, cmd: list[str], what: str) -> None:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
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
        with _locked(self.env_root / f"{digest}.lock"):
            if not done.exists():
                # a venv is not relocatable, so it is built in place; an unfinished one
                # (a crash mid-build) has no marker and is built again from scratch
                shutil.rmtree(root, ignore_errors=True)
                venv = [self.uv, "venv", "-q", "--python", self.base_python, str(root)]
                self._run(venv, "uv venv")
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
                )
                done.write_text(json.dumps({"packages": sorted(packages)}))
        return ProfileEnv(digest, root, python)

    def overlay(self, deps: tuple[str, ...], python: str) -> str:
        """Digest of the overlay holding ``deps`` for interpreter ``python`` (built once)."""
        digest = digest_of({"python": python, "deps": sorted(deps)})
        final = self.overlay_root / digest
        if final.exists():
            return digest
        with _locked(self.overlay_root / f".{digest}.lock"):
            if final.exists():
                return digest
            tmp = self.overlay_root / f".{digest}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            self._run(
                [
                    self.uv,
                    "pip",
                    "install",
                    "-q",
                    "--python",
                    python,
                    "--target",
                    str(tmp),
                    *self._index_args(),
                    *sorted(deps),
                ],
                f"installing deps {sorted(deps)}",
            )
            for dirpath, _dirnames, filenames in os.walk(tmp):
                os.chmod(dirpath, 0o755)
                for name in filenames:
                    p = os.path.join(dirpath, name)
                    if not os.path.islink(p):
                        os.chmod(p, 0o644 | (os.stat(p).st_mode & 0o111))
            tmp.rename(final)  # atomic: a pod sees the whole overlay or none
        return digest
