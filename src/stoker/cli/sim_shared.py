"""``stoker sim shared``: warm pools and hp/spot work on one cluster, partitioned and shared."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer

DEFAULT_OUT = Path("stoker-results/shared")


def register(app: typer.Typer, sim_app: typer.Typer) -> None:
    """Add ``shared`` to the ``sim`` group."""
    sim_app.command("shared")(sim_shared)


def sim_shared(
    out: Annotated[Path, typer.Option(help="output folder")] = DEFAULT_OUT,
    seed: Annotated[int, typer.Option(help="seed of every random stream")] = 0,
    scale: Annotated[
        float, typer.Option(help="share of each GPU model's v2026 nodes (and of the jobs)")
    ] = 0.05,
    capacity_scale: Annotated[
        float, typer.Option(help="then this share of each model's nodes, every job kept")
    ] = 0.7,
    days: Annotated[float, typer.Option(help="measured window, days")] = 1.0,
    warm_days: Annotated[float, typer.Option(help="HP history before it, days")] = 7.0,
    burn_in_days: Annotated[float, typer.Option(help="simulated before the window")] = 0.5,
    tail_days: Annotated[
        float, typer.Option(help="simulated after the window; jobs open then are unfinished")
    ] = 1.0,
    pool_model: Annotated[
        str | None, typer.Option(help="GPU model of the warm pools (default: the largest)")
    ] = None,
    sessions_per_hour: Annotated[
        float, typer.Option(help="agent/RL loop sessions arriving per hour")
    ] = 120.0,
    tenants: Annotated[int, typer.Option(help="loop tenants")] = 12,
    spot_load: Annotated[float, typer.Option(help="spot arrivals x this")] = 3.0,
    query_every_min: Annotated[int, typer.Option(help="forecast query cadence")] = 15,
    refit_every_min: Annotated[int, typer.Option(help="forecaster refit cadence")] = 1440,
    forecaster: Annotated[str, typer.Option(help="ridge | orglinear (torch)")] = "ridge",
) -> None:
    """Run the loops and the v2026 hp/spot jobs on one cluster, partitioned and shared;
    write results.json and report.html."""
    from rich.console import Console
    from rich.table import Table

    from stoker.cli.progress import steps
    from stoker.sim.report_html import render
    from stoker.sim.shared import STEPS, SharedConfig, prepare, run_all

    console = Console(width=160)

    def fail(msg: str) -> None:
        typer.echo(f"error: {msg}", err=True)
        raise typer.Exit(2)

    if forecaster not in ("ridge", "orglinear"):
        fail(f"--forecaster: expected ridge or orglinear, got {forecaster!r}")
    t0 = time.perf_counter()
    try:
        cfg = SharedConfig(
            seed=seed,
            scale=scale,
            capacity_scale=capacity_scale,
            days=days,
            warm_days=warm_days,
            burn_in_days=burn_in_days,
            tail_days=tail_days,
            pool_model=pool_model,
            sessions_per_hour=sessions_per_hour,
            tenants=tenants,
            spot_load=spot_load,
            query_every_min=query_every_min,
            refit_every_min=refit_every_min,
            forecaster=forecaster,
        )
        prep = prepare(cfg)  # bad input fails here, before any progress is drawn
        with steps(console) as bar:
            # each step's clock starts with its first news
            tasks = {s: bar.add_task(s, total=100, start=False) for s in STEPS}
            started: set[str] = set()

            def tell(step: str, done: float) -> None:
                if step not in started:
                    started.add(step)
                    bar.start_task(tasks[step])
                bar.update(tasks[step], completed=round(100 * done, 1))

            doc = run_all(cfg, prep, tell)
        out.mkdir(parents=True, exist_ok=True)
        path = out / "results.json"
        path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        report = render(out)
    except (ValueError, OSError) as exc:
        fail(str(exc))
        return
    console.print(_table(doc, Table))
    console.print(f"wrote {path}, {report} ({time.perf_counter() - t0:.1f} s)")


def _fmt(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 10 else f"{v:,.0f}"
    return str(v)


def _table(doc: dict[str, Any], table_cls: Any) -> Any:
    t = table_cls(title="stoker sim shared: partitioned vs shared")
    t.add_column("figure")
    t.add_column("partitioned", justify="right")
    t.add_column("shared", justify="right")
    t.add_column("change", justify="right")
    for key, row in doc["comparison"].items():
        change = row["change_pct"]
        t.add_row(
            key,
            _fmt(row["partitioned"]),
            _fmt(row["shared"]),
            "n/a" if change is None else f"{change:+.1f} %",
        )
    return t
