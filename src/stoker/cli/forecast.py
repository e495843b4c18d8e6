"""``stoker forecast eval``: forecast quality of each forecaster on a real trace."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import typer

FORECAST_TRACES = ("philly", "v2026")


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


def _score_json(score: Any) -> dict[str, Any]:
    return {
        "mae": score.mae,
        "coverage_q90": score.coverage,
        "mean_actual": score.mean_actual,
        "n": score.n,
    }


def eval_command(
    trace: str = typer.Option(
        "philly", help="philly (real, US holidays) | v2026 (generated GFS jobs, China's)."
    ),
    trace_path: Path | None = typer.Option(
        None,
        help="philly.csv or its folder (philly); the job file or folder (v2026: "
        "without it, jobs are generated).",
    ),
    forecaster: list[str] = typer.Option(
        [], "--forecaster", "-f", help="naive | ridge | orglinear (repeat; default: all)."
    ),
    out: Path = typer.Option(Path("stoker-results/forecast"), help="Folder for results.json."),
    horizon: int = typer.Option(4, help="Hours ahead forecast and scored."),
    warmup_weeks: int = typer.Option(4, help="Weeks of history before the first forecast."),
    refit_hours: int = typer.Option(24, help="Hours between refits (walk-forward)."),
    days: float = typer.Option(42.0, help="v2026: days of jobs (warm-up included)."),
    start_day: int = typer.Option(0, help="v2026: first day of the release's 184 used."),
    seed: int = typer.Option(0, help="Seed of the HP/spot split, the generator, OrgLinear."),
    threads: int = typer.Option(1, help="torch threads for OrgLinear."),
    train_days: float | None = typer.Option(
        None,
        help="OrgLinear trains on the last this many days only (default: all, as the authors).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the results JSON to stdout."),
) -> None:
    """Walk-forward MAE and 0.9-quantile coverage per tenant and per GPU pool, for each
    forecaster side by side."""
    from rich.console import Console
    from rich.table import Table

    from stoker.forecast import FORECASTERS, ForecastDependencyError, ForecastError
    from stoker.forecast.base import MINUTES_PER_HOUR, MINUTES_PER_WEEK
    from stoker.forecast.evaluate import walk_forward
    from stoker.forecast.registry import make_forecaster
    from stoker.forecast.series import Calendar, demand_series
    from stoker.traces import load_trace

    if trace not in FORECAST_TRACES:
        _fail(f"--trace must be one of {', '.join(FORECAST_TRACES)}, got {trace!r}")
    names = forecaster or [
        n for n in FORECASTERS if n != "orglinear" or importlib.util.find_spec("torch")
    ]
    for name in names:
        if name not in FORECASTERS:
            _fail(f"--forecaster must be one of {', '.join(FORECASTERS)}, got {name!r}")
    # with --json, stdout carries the JSON alone
    console = Console(stderr=as_json)
    try:
        if trace == "philly":
            if trace_path is None:
                _fail("--trace-path: the philly trace needs its file")
            loaded = load_trace("philly", trace_path, seed)
        else:
            loaded = load_trace("v2026", trace_path, seed, days=days, start_day=start_day)
        calendar = Calendar.of_trace(loaded.notes)
    except (ValueError, OSError) as exc:  # TraceFormatError and ForecastError included
        _fail(str(exc))
    series = demand_series(loaded.jobs, job_class="hp")
    if not series:
        _fail(f"{trace}: the trace holds no HP jobs")
    console.print(
        f"{trace}: {len(loaded.jobs)} jobs, {len(series)} tenant x GPU pool series of "
        f"{len(next(iter(series.values()))) // 1440} days; calendar: epoch "
        f"{loaded.notes['epoch']}, holidays {loaded.notes.get('holidays', 'none')}"
    )
    scores = []
    for name in names:
        options: dict[str, Any] = (
            {"threads": threads, "train_days": train_days} if name == "orglinear" else {}
        )
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

    def table(title: str, rows: list[tuple[str, str, Any]]) -> Table:
        t = Table(title=title)
        t.add_column("tenant")
        t.add_column("GPU pool")
        t.add_column("mean peak", justify="right")
        for s in scores:
            t.add_column(f"{s.name} MAE", justify="right")
            t.add_column(f"{s.name} cov", justify="right")
        for tenant, gpu_pool, pick in rows:
            first = pick(scores[0])
            cells = [tenant, gpu_pool, f"{first.mean_actual:.1f}"]
            for s in scores:
                cells += [f"{pick(s).mae:.2f}", f"{pick(s).coverage:.3f}"]
            t.add_row(*cells, style="bold" if tenant == "all" else None)
        return t

    what = f"HP hourly-peak forecasts on {trace}: MAE (GPUs) / coverage of q0.9"
    keys = list(scores[0].per_series)
    console.print(
        table(
            f"{what}, per tenant",
            [(k.tenant, k.gpu_pool, lambda s, k=k: s.per_series[k]) for k in keys]
            + [("all", "", lambda s: s.overall)],
        )
    )
    console.print(
        table(
            f"{what}, per GPU pool (tenants summed)",
            [("", p, lambda s, p=p: s.per_gpu_pool[p]) for p in scores[0].per_gpu_pool],
        )
    )

    out.mkdir(parents=True, exist_ok=True)
    result = {
        "trace": trace,
        "trace_path": str(trace_path) if trace_path else None,
        "source": loaded.source,
        "protocol": {
            "horizon_h": horizon,
            "warmup_weeks": warmup_weeks,
            "refit_hours": refit_hours,
            "origins": "every hour after the warm-up",
            "quantile": 0.9,
            "seed": seed,
            "orglinear_train_days": train_days,
            **({"days": days, "start_day": start_day} if trace == "v2026" else {}),
        },
        "trace_notes": loaded.notes,
        "forecasters": {
            s.name: {
                **_score_json(s.overall),
                "per_horizon_mae": s.per_horizon_mae,
                "fit_s": s.fit_s,
                "predict_s": s.predict_s,
                "per_tenant": [
                    {"tenant": k.tenant, "pool": k.gpu_pool, "cluster": k.cluster, **_score_json(v)}
                    for k, v in s.per_series.items()
                ],
                "per_pool": [{"pool": p, **_score_json(v)} for p, v in s.per_gpu_pool.items()],
            }
            for s in scores
        },
    }
    path = out / "results.json"
    text = json.dumps(result, indent=2) + "\n"
    path.write_text(text)
    console.print(f"wrote {path}")
    if as_json:
        typer.echo(text, nl=False)
