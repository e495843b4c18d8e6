"""``stoker forecast eval``: forecast quality of each forecaster on a real trace."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import typer

FORECAST_TRACES = ("philly",)


def register(app: typer.Typer, sim_app: typer.Typer) -> None:
    """Add the ``forecast`` group to the ``stoker`` command."""
    forecast_app = typer.Typer(
        help="HP demand forecasters: quality on real traces.", no_args_is_help=True
    )
    forecast_app.command("eval")(eval_command)
    app.add_typer(forecast_app, name="forecast")


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


def eval_command(
    trace: str = typer.Option("philly", help="Trace with tenants: philly."),
    trace_path: Path = typer.Option(..., help="philly.csv or the folder holding it."),
    forecaster: list[str] = typer.Option(
        [], "--forecaster", "-f", help="naive | ridge | orglinear (repeat; default: all)."
    ),
    out: Path = typer.Option(Path("stoker-results/forecast"), help="Folder for results.json."),
    horizon: int = typer.Option(4, help="Hours ahead forecast and scored."),
    warmup_weeks: int = typer.Option(4, help="Weeks of history before the first forecast."),
    refit_hours: int = typer.Option(24, help="Hours between refits (walk-forward)."),
    seed: int = typer.Option(0, help="Seed of the HP/spot split and of OrgLinear."),
    threads: int = typer.Option(1, help="torch threads for OrgLinear."),
) -> None:
    """Walk-forward MAE and 0.9-quantile coverage per tenant, for each forecaster."""
    from rich.console import Console
    from rich.table import Table

    from stoker.forecast import FORECASTERS, ForecastDependencyError, ForecastError
    from stoker.forecast.base import MINUTES_PER_HOUR, MINUTES_PER_WEEK
    from stoker.forecast.evaluate import walk_forward
    from stoker.forecast.registry import make_forecaster
    from stoker.forecast.series import Calendar, demand_series
    from stoker.traces.philly import load_philly

    if trace not in FORECAST_TRACES:
        _fail(f"--trace must be one of {', '.join(FORECAST_TRACES)}, got {trace!r}")
    names = forecaster or [
        n for n in FORECASTERS if n != "orglinear" or importlib.util.find_spec("torch")
    ]
    for name in names:
        if name not in FORECASTERS:
            _fail(f"--forecaster must be one of {', '.join(FORECASTERS)}, got {name!r}")
    console = Console()
    try:
        loaded = load_philly(trace_path, seed=seed)
    except ValueError as exc:  # TraceFormatError included
        _fail(str(exc))
    calendar = Calendar.from_iso(loaded.notes["epoch"])
    series = demand_series(loaded.jobs, job_class="hp")
    console.print(
        f"{trace}: {len(loaded.jobs)} jobs, {len(series)} tenant series of "
        f"{len(next(iter(series.values()))) // 1440} days; split: {loaded.notes['split']}"
    )
    scores = []
    for name in names:
        options: dict[str, Any] = {"threads": threads} if name == "orglinear" else {}
        if name != "naive":
            options["horizon_h"] = horizon
        try:
            model = make_forecaster(name, calendar=calendar, seed=seed, **options)
            with console.status(f"walk-forward: {name}"):
                score = walk_forward(
                    series,
                    model,
                    warmup_min=warmup_weeks * MINUTES_PER_WEEK,
                    refit_every_min=refit_hours * MINUTES_PER_HOUR,
                    horizon_h=horizon,
                )
        except (ForecastDependencyError, ForecastError) as exc:
            _fail(str(exc))
        scores.append(score)
        console.print(
            f"{name}: MAE {score.overall.mae:.2f} GPUs, coverage(0.9) "
            f"{score.overall.coverage:.3f}, fit {score.fit_s:.1f} s, "
            f"predict {score.predict_s:.1f} s"
        )

    table = Table(title=f"HP hourly-peak forecasts on {trace}: MAE (GPUs) / coverage of q0.9")
    table.add_column("tenant")
    table.add_column("mean peak", justify="right")
    for s in scores:
        table.add_column(f"{s.name} MAE", justify="right")
        table.add_column(f"{s.name} cov", justify="right")
    keys = list(scores[0].per_series)
    for key in keys:
        row = [key.tenant, f"{scores[0].per_series[key].mean_actual:.1f}"]
        for s in scores:
            row += [f"{s.per_series[key].mae:.2f}", f"{s.per_series[key].coverage:.3f}"]
        table.add_row(*row)
    row = ["all", f"{scores[0].overall.mean_actual:.1f}"]
    for s in scores:
        row += [f"{s.overall.mae:.2f}", f"{s.overall.coverage:.3f}"]
    table.add_row(*row, style="bold")
    console.print(table)

    out.mkdir(parents=True, exist_ok=True)
    result = {
        "trace": trace,
        "trace_path": str(trace_path),
        "protocol": {
            "horizon_h": horizon,
            "warmup_weeks": warmup_weeks,
            "refit_hours": refit_hours,
            "origins": "every hour after the warm-up",
            "quantile": 0.9,
            "seed": seed,
        },
        "trace_notes": loaded.notes,
        "forecasters": {
            s.name: {
                "mae": s.overall.mae,
                "coverage_q90": s.overall.coverage,
                "mean_actual": s.overall.mean_actual,
                "n": s.overall.n,
                "per_horizon_mae": s.per_horizon_mae,
                "fit_s": s.fit_s,
                "predict_s": s.predict_s,
                "per_tenant": [
                    {
                        "tenant": k.tenant,
                        "pool": k.pool,
                        "cluster": k.cluster,
                        "mae": v.mae,
                        "coverage_q90": v.coverage,
                        "mean_actual": v.mean_actual,
                        "n": v.n,
                    }
                    for k, v in s.per_series.items()
                ],
            }
            for s in scores
        },
    }
    path = out / "results.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {path}")
