"""``stoker traces``: generate GFS-format jobs and check them against the published figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

traces_app = typer.Typer(
    help="GFS-format traces: generate calibrated jobs, compare with the published aggregates.",
    no_args_is_help=True,
)

DEFAULT_DAYS = 184.06  # the published trace's span (calibration.TRACE_DAYS)


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


@traces_app.command("generate")
def generate(
    out: Annotated[Path, typer.Option(help="Folder to write job_info_df.csv and node_info_df.csv")],
    seed: Annotated[int, typer.Option(help="Seed of the generator (same seed, same file)")] = 0,
    days: Annotated[float, typer.Option(help="Days to generate (at most 184.06)")] = DEFAULT_DAYS,
    start_day: Annotated[int, typer.Option(help="First published day of the window")] = 0,
    scale: Annotated[float, typer.Option(help="Multiplies every job count")] = 1.0,
) -> None:
    """Write generated jobs in the GFS release format, beside the node list they run on."""
    from stoker.traces.generator import GeneratorConfig, generate_jobs
    from stoker.traces.gfs_v2026 import JOB_FILE, NODE_FILE, write_jobs, write_nodes
    from stoker.traces.load import v2026_nodes

    try:
        cfg = GeneratorConfig(seed=seed, days=days, start_day=start_day, scale=scale)
    except ValueError as exc:
        _fail(str(exc))
    jobs = generate_jobs(cfg)
    n_jobs = write_jobs(out / JOB_FILE, jobs)
    n_nodes = write_nodes(out / NODE_FILE, v2026_nodes())
    typer.echo(f"wrote {n_jobs} jobs to {out / JOB_FILE} and {n_nodes} nodes to {out / NODE_FILE}")


@traces_app.command("check")
def check(
    trace_path: Annotated[
        Path | None,
        typer.Option(help="A job_info_df.csv (or its folder) to check; default: generate one"),
    ] = None,
    aggregates: Annotated[
        Path | None,
        typer.Option(help="The published aggregates folder (default: ../shared/data's)"),
    ] = None,
    seed: Annotated[int, typer.Option(help="Generator seed (without --trace-path)")] = 0,
    days: Annotated[float, typer.Option(help="Days the jobs cover")] = DEFAULT_DAYS,
    start_day: Annotated[int, typer.Option(help="First published day they cover")] = 0,
    scale: Annotated[float, typer.Option(help="The scale they were generated at")] = 1.0,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Also write the rows as JSON here")
    ] = None,
) -> None:
    """Print generated (or real) vs published statistics, with the relative error."""
    from rich.console import Console

    from stoker.traces.check import compare, published, render
    from stoker.traces.generator import GeneratorConfig, generate_jobs
    from stoker.traces.gfs_v2026 import TraceFormatError, load_jobs
    from stoker.traces.load import V2026_DIR, shared_data_dir

    if aggregates is None:
        data = shared_data_dir()
        aggregates = data / V2026_DIR / "aggregates" if data is not None else None
    elif not aggregates.is_dir():
        _fail(f"--aggregates: no such folder: {aggregates}")
    try:
        if trace_path is None:
            cfg = GeneratorConfig(seed=seed, days=days, start_day=start_day, scale=scale)
            jobs = generate_jobs(cfg)
            what = f"generated (seed {seed}, {days:g} days from day {start_day}, scale {scale:g})"
        else:
            jobs = load_jobs(trace_path)
            what = str(trace_path)
        pub = published(aggregates)
        rows = compare(jobs, pub, days=days, start_day=start_day, scale=scale)
    except (TraceFormatError, ValueError) as exc:
        _fail(str(exc))
    Console(width=140).print(render(rows, f"{what} vs published ({pub.source})"))
    if json_out is not None:
        payload = [
            {
                "section": r.section,
                "statistic": r.name,
                "published": r.published,
                "generated": r.generated,
                "rel_error": None if r.published == 0 else r.rel_error,
                "scope": r.scope,
            }
            for r in rows
        ]
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps({"jobs": what, "published": pub.source, "rows": payload}))


@traces_app.command("show")
def show(
    trace: Annotated[str, typer.Option(help="v2026 | openb | philly")] = "v2026",
    trace_path: Annotated[
        Path | None, typer.Option(help="The trace's folder or job file (v2026: optional)")
    ] = None,
    seed: Annotated[int, typer.Option(help="Generator / sampling seed")] = 0,
    days: Annotated[float | None, typer.Option(help="Keep this many days")] = None,
    start_day: Annotated[int, typer.Option(help="From this day")] = 0,
    scale: Annotated[float, typer.Option(help="Generated job-count scale")] = 1.0,
) -> None:
    """Summarize what load_trace gives the simulator: nodes, GPUs and jobs per GPU model."""
    from rich.console import Console
    from rich.table import Table

    from stoker.traces.load import load_trace

    try:
        loaded = load_trace(trace, trace_path, seed, days=days, start_day=start_day, scale=scale)
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
    table = Table(title=f"{loaded.name}: {loaded.source}")
    for col in ("gpu model", "nodes", "GPUs", "hp jobs", "spot jobs", "fractional", "tenants"):
        table.add_column(col, justify="left" if col == "gpu model" else "right")
    models = sorted({n.gpu_model for n in loaded.nodes} | {j.gpu_model for j in loaded.jobs})
    for model in models:
        nodes = [n for n in loaded.nodes if n.gpu_model == model]
        jobs = [j for j in loaded.jobs if j.gpu_model == model]
        table.add_row(
            model,
            str(len(nodes)),
            str(sum(n.gpus for n in nodes)),
            str(sum(j.job_class == "hp" for j in jobs)),
            str(sum(j.job_class == "spot" for j in jobs)),
            str(sum(j.gpu_request < 1 for j in jobs)),
            str(len({j.tenant for j in jobs})),
        )
    console = Console(width=140)
    console.print(table)
    for key, value in loaded.notes.items():
        console.print(f"{key}: {value}")


def register(app: typer.Typer, sim_app: typer.Typer) -> None:
    """Add the ``traces`` group to the ``stoker`` command."""
    del sim_app  # the group lives at the top level
    app.add_typer(traces_app, name="traces")
