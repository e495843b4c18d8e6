"""``stoker cp``: copy a file into or out of a session's workspace, streamed, with a
progress bar (the SDK's ``session.files.upload`` / ``download``)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Annotated

import typer

from stoker.cli.broker import TokenFileOpt, TokenOpt, UrlOpt, _call, _fail

# PROFILE:TAG:PATH, neither name holding a slash (a local path with a colon: ./a:b:c)
_REMOTE = re.compile(r"^(?P<profile>[^/:]+):(?P<tag>[^/:]+):(?P<path>.+)$")


def _remote(spec: str) -> tuple[str, str, str] | None:
    m = _REMOTE.match(spec)
    return (m["profile"], m["tag"], m["path"]) if m else None


def cp(
    src: Annotated[str, typer.Argument(help="a local file, or PROFILE:TAG:PATH in a session")],
    dst: Annotated[str, typer.Argument(help="a local file, or PROFILE:TAG:PATH in a session")],
    url: UrlOpt = None,
    token: TokenOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Copy a file into a session's workspace, or out of it (one side is PROFILE:TAG:PATH,
    the session's profile, reuse tag and a path in its workspace)."""
    up, down = _remote(dst), _remote(src)
    if (up is None) == (down is None):
        _fail("cp: exactly one of SRC and DST must be PROFILE:TAG:PATH (a session's file)")
    from rich.progress import DownloadColumn, Progress, TransferSpeedColumn

    bar = Progress(
        *Progress.get_default_columns(),
        DownloadColumn(),
        TransferSpeedColumn(),
        disable=not sys.stderr.isatty(),
        console=None,
    )
    task = bar.add_task(f"{src} -> {dst}", total=None)

    def told(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total if total >= 0 else None)

    if up is not None:
        local = Path(src)
        if not local.is_file():
            _fail(f"cp: {src}: no such local file")
        profile, tag, path = up
        with bar:
            size = _call(
                url,
                token,
                token_file,
                lambda c: c.session(profile, tag).files.upload(path, local, progress=told),
            )
    else:
        assert down is not None
        profile, tag, path = down
        with bar:
            size = _call(
                url,
                token,
                token_file,
                lambda c: c.session(profile, tag).files.download(path, Path(dst), progress=told),
            )
    typer.echo(f"{src} -> {dst}: {size} bytes", err=True)


def register(app: typer.Typer, sim_app: typer.Typer) -> None:
    """Add ``stoker cp`` to the ``stoker`` command."""
    app.command()(cp)
