"""``stoker report DIR``: render a simulator run's report.html again from its results."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def report(
    out: Annotated[Path, typer.Argument(help="a directory with results.json (and PNG plots)")],
) -> None:
    """Write DIR/report.html: the results' tables and the plots, in one self-contained file."""
    from stoker.sim.report_html import render

    try:
        path = render(out)
    except (OSError, ValueError) as exc:
        typer.echo(f"stoker: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(f"wrote {path}")


def register(app: typer.Typer, sim_app: typer.Typer) -> None:
    """Add ``report`` to the ``stoker`` command."""
    app.command()(report)
