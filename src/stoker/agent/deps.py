"""A job's extra dependencies as an overlay directory: ``uv pip install --target``, by digest.

One way for every runtime. The local runtime builds overlays on the host (its uv run
sandboxed, :class:`stoker.runtime.envs.EnvBuilder`) and binds them into its pods; a pod
that cannot see the host's disk (Kubernetes) has its agent build them inside the pod, as
the pod's unprivileged user, from the index the pod is given (``STOKER_DEPS_INDEX_URL``
and ``STOKER_DEPS_FIND_LINKS`` in its environment). Either way the deps are PEP 508
requirements only (:func:`stoker.api.deps.check_deps`: no option, path or URL reaches
uv), installed from wheels only (``--no-build``: no code of the tenant's runs at install
time), into a directory named by the digest of the sorted list, so a second job with the
same list reuses it; it appears whole or not at all (built aside, then renamed).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from stoker.api.deps import InvalidDeps, check_deps


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
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock across processes (two brokers or pods building the same digest)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


INDEX_ENV = "STOKER_DEPS_INDEX_URL"  # "" or unset: no index, find-links only
FIND_LINKS_ENV = "STOKER_DEPS_FIND_LINKS"

#: runs one uv command that may write only the directory given (raises EnvBuildError)
Runner = Callable[[list[str], Path], None]


def build_overlay(
    root: Path,
    deps: tuple[str, ...],
    python: str,
    uv: str,
    index_args: list[str],
    run: Runner,
) -> str:
    """Digest of the overlay under ``root`` holding ``deps`` for interpreter ``python``
    (built once); EnvBuildError for a dep that is not a plain requirement, or that uv
    cannot install from a wheel."""
    try:
        deps = check_deps(deps)
    except InvalidDeps as exc:
        raise EnvBuildError(str(exc)) from exc
    digest = digest_of({"python": python, "deps": sorted(deps)})
    final = root / digest
    if final.exists():
        return digest
    with locked(root / f".{digest}.lock"):
        if final.exists():
            return digest
        tmp = root / f".{digest}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        cmd = [uv, "pip", "install", "-q", "--no-build", "--python", python]
        run([*cmd, "--target", str(tmp), *index_args, *sorted(deps)], tmp)
        for dirpath, _dirnames, filenames in os.walk(tmp):
            os.chmod(dirpath, 0o755)
            for name in filenames:
                p = os.path.join(dirpath, name)
                if not os.path.islink(p):
                    os.chmod(p, 0o644 | (os.stat(p).st_mode & 0o111))
        tmp.rename(final)  # atomic: a pod sees the whole overlay or none
    return digest


def install_in_pod(root: Path, deps: tuple[str, ...], timeout_s: float) -> Path:
    """Build the overlay for ``deps`` inside this pod (the agent's interpreter, uv's index
    from the environment, its cache under ``root``); its path."""
    import subprocess  # only pods that install deps need it

    def run(cmd: list[str], _writable: Path) -> None:
        env = {**os.environ, "UV_CACHE_DIR": str(root / ".uv-cache"), "UV_NO_CONFIG": "1"}
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, check=False, env=env, timeout=timeout_s
            )
        except subprocess.TimeoutExpired as exc:
            raise EnvBuildError(f"installing deps took longer than {timeout_s:g} s") from exc
        if proc.returncode != 0:
            raise EnvBuildError(
                f"installing deps failed (uv exit {proc.returncode}): "
                f"{proc.stderr.strip()[-2000:]}",
                proc.stdout + proc.stderr,
            )

    index = os.environ.get(INDEX_ENV, "")
    args = ["--index-url", index] if index else ["--no-index"]
    if links := os.environ.get(FIND_LINKS_ENV, ""):
        args += ["--find-links", links]
    digest = build_overlay(root, deps, sys.executable, find_uv(), args, run)
    return root / digest
