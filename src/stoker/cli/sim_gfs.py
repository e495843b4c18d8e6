"""``stoker sim gfs``: GFS and the baselines on one trace, per load level."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

DEFAULT_OUT = Path("stoker-results/gfs")
DEFAULT_POLICIES = ("gfs", "yarn-cs", "chronus", "lyra", "fgd")


def register(app: typer.Typer, sim_app: typer.Typer) -> None:
    """Add ``gfs`` to the ``sim`` group."""
    sim_app.command("gfs")(sim_gfs)
    sim_app.command("gfs-compare")(sim_gfs_compare)


def sim_gfs(
    trace: Annotated[str, typer.Option(help="v2026 | openb | philly")] = "v2026",
    trace_path: Annotated[
        str | None, typer.Option(help="folder with the trace's upstream files, or the job file")
    ] = None,
    load: Annotated[
        list[str] | None, typer.Option(help="low | medium | high (spot arrivals x0.5/1/1.5)")
    ] = None,
    policy: Annotated[
        list[str] | None,
        typer.Option(
            help="hp/spot presets (repeat); a preset's parameters may follow its name: "
            "gfs-reserve-patient-lend+hp_evict_after_s=600"
        ),
    ] = None,
    out: Annotated[Path, typer.Option(help="output folder")] = DEFAULT_OUT,
    days: Annotated[float, typer.Option(help="measured window, days")] = 30.0,
    warm_days: Annotated[float, typer.Option(help="HP history before it, days")] = 28.0,
    burn_in_days: Annotated[float, typer.Option(help="simulated before the window")] = 2.0,
    scale: Annotated[float, typer.Option(help="share of nodes (and jobs) kept, (0, 1]")] = 1.0,
    seed: Annotated[int, typer.Option(help="seed (generator, load copies)")] = 0,
    capacity_scale: Annotated[
        str,
        typer.Option(
            help="nodes kept, every job kept: a share of each GPU model's (0.3; above 1 "
            "adds copies of its first nodes: 1.3), per model "
            "(G2=0.02,T4=0.05; a bare share for the rest: 0.3,G2=0.02), or each model sized "
            "to its mean demand over the window at a target fill (fill:0.8, exceptions "
            "as MODEL=share)"
        ),
    ] = "1",
    time_scale: Annotated[
        float, typer.Option(help="inter-arrival times divided by this (real traces)")
    ] = 1.0,
    query_every_min: Annotated[int, typer.Option(help="forecast query cadence")] = 5,
    refit_every_min: Annotated[int, typer.Option(help="forecaster refit cadence")] = 1440,
    forecaster: Annotated[
        str, typer.Option(help="forecaster of the GFS policies: ridge | orglinear (torch)")
    ] = "ridge",
    gpu_hour_price: Annotated[
        float | None,
        typer.Option(
            help="price of a GPU-hour: report the monthly value of gfs's allocation gain "
            "over each other policy (needs --policy gfs among them)"
        ),
    ] = None,
    gate: Annotated[
        str,
        typer.Option(
            help="window: spot quota and preemption only inside the measured window, no spot "
            "before it (the authors'); always: from the simulated start to the end"
        ),
    ] = "window",
    plots: Annotated[bool, typer.Option(help="write PNG plots")] = True,
    jobs: Annotated[
        bool,
        typer.Option(
            help="also write each measured job's outcome, jobs/LOAD/POLICY.csv.gz, for "
            "stoker sim gfs-compare"
        ),
    ] = False,
) -> None:
    """Run every named policy on the same jobs; write results.json, a table and plots."""
    from rich.console import Console

    from stoker.cli.progress import steps
    from stoker.core.registry import GANG_PRESETS, VARIANT_SEP
    from stoker.core.registry import preset as make_policy
    from stoker.forecast.base import Cadence
    from stoker.sim.gfs import (
        GATES,
        LOADS,
        Setup,
        SimGFSError,
        TraceResult,
        policy_forecaster,
        prepare_trace,
        scale_spot_load,
        simulate,
    )
    from stoker.sim.gfs_report import (
        allocation_value,
        compare_to_paper,
        metrics_of,
        plot,
        render_comparison_markdown,
        render_table,
        render_value,
        write_results,
    )
    from stoker.sim.paired import jobs_file
    from stoker.sim.report_html import render
    from stoker.traces import TRACE_KINDS, Trace
    from stoker.traces.load import DATA_ENV, FLEET_REBUILT, NODE_LIST_NOTE
    from stoker.traces.scale import CapacityScale

    console = Console(width=200)
    loads = load or ["medium"]
    names = policy or list(DEFAULT_POLICIES)

    def fail(msg: str) -> None:
        typer.echo(f"error: {msg}", err=True)
        raise typer.Exit(2)

    if trace not in TRACE_KINDS:
        fail(f"--trace: expected one of {', '.join(TRACE_KINDS)}, got {trace!r}")
    for name in loads:
        if name not in LOADS:
            fail(f"--load: expected one of {', '.join(LOADS)}, got {name!r}")
    for name in names:
        base = name.split(VARIANT_SEP)[0]
        if base not in GANG_PRESETS:
            fail(f"--policy: unknown {base!r}; known: {', '.join(GANG_PRESETS)}")
        try:
            make_policy(name)  # a changed field is checked before anything runs
        except ValueError as exc:
            fail(f"--policy: {exc}")
    if gate not in GATES:
        fail(f"--gate: expected one of {', '.join(GATES)}, got {gate!r}")
    if forecaster not in ("ridge", "orglinear"):
        fail(f"--forecaster: expected ridge or orglinear, got {forecaster!r}")
    if gpu_hour_price is not None:
        if not gpu_hour_price >= 0:
            fail(f"--gpu-hour-price: must be >= 0, got {gpu_hour_price}")
        if "gfs" not in names:
            fail("--gpu-hour-price: values gfs's gain, so --policy gfs must be among those run")
    try:
        capacity = CapacityScale.parse(capacity_scale)
    except ValueError as exc:
        fail(str(exc))
        return
    try:
        setup = Setup(days, warm_days, burn_in_days, scale, seed, capacity, time_scale)
        cadence = Cadence(refit_every_min=refit_every_min, query_every_min=query_every_min)
        base, window = prepare_trace(trace, trace_path, setup)
        if base.notes.get(NODE_LIST_NOTE) == FLEET_REBUILT:
            console.print(
                f"note: {trace}'s nodes are {FLEET_REBUILT}; set {DATA_ENV} to the shared data"
                " folder for the real node list",
                markup=False,
            )
        runs: dict[str, dict[str, TraceResult]] = {}
        with steps(console) as bar:
            task = bar.add_task("simulating", total=len(loads) * len(names))
            for level in loads:
                scaled = scale_spot_load(base.jobs, LOADS[level], seed)
                tr = Trace(base.name, base.nodes, scaled, base.source, dict(base.notes))
                runs[level] = {}
                for name in names:
                    spec = make_policy(name)
                    bar.update(task, description=f"{level}/{name}")
                    result = simulate(
                        tr,
                        spec,
                        window,
                        forecaster=policy_forecaster(
                            spec.forecaster, cadence, forecaster, base.notes
                        ),
                        cadence=cadence,
                        gate=gate,
                        progress=lambda msg, lv=level: bar.update(task, description=f"{lv}/{msg}"),
                    )
                    runs[level][name] = result
                    m = result.metrics
                    bar.console.print(
                        f"{level}/{name}: {m['events']} events in {m['wall_s']} s "
                        f"({m['events_per_s']} events/s)"
                    )
                    bar.update(task, advance=1)
    except (SimGFSError, ValueError, OSError) as exc:
        fail(str(exc))
        return
    meta = {
        "trace": trace,
        "trace_path": trace_path,
        "source": base.source,
        "nodes": len(base.nodes),
        # v2026: the node list's file, or that the fleet was rebuilt from its counts
        "node_list": base.notes.get(NODE_LIST_NOTE),
        "jobs_left_out_too_large": int(base.notes.get("left_out_too_large", "0")),
        # jobs of a GPU model left out by --capacity-scale MODEL=0
        "jobs_left_out_model_dropped": int(base.notes.get("left_out_model_dropped", "0")),
        "gpus": sum(n.gpus for n in base.nodes),
        "window": {"sim_start": window.sim_start, "start": window.start, "end": window.end},
        "setup": {
            "days": days,
            "warm_days": warm_days,
            "burn_in_days": burn_in_days,
            "scale": scale,
            # a plain share as a number (as before); a per-model or fill form as written
            "capacity_scale": capacity.default
            if capacity.fill is None and not capacity.per_model
            else str(capacity),
            # per GPU model: nodes and GPUs kept (of how many) and its mean demand in GPUs
            "capacity_per_model": json.loads(base.notes["capacity_per_model"]),
            "time_scale": time_scale,
            "seed": seed,
            "query_every_min": query_every_min,
            "refit_every_min": refit_every_min,
            "gate": gate,
        },
        "loads": {name: LOADS[name] for name in loads},
    }
    gpus = sum(n.gpus for n in base.nodes)
    results = metrics_of(runs)
    value = None if gpu_hour_price is None else allocation_value(results, gpus, gpu_hour_price)
    path = write_results(out, runs, meta, value)
    if jobs:
        for level, by_policy in runs.items():
            for name, result in by_policy.items():
                result.jobs.write(jobs_file(out, level, name))
    for level, by_policy in runs.items():
        console.print(render_table(level, by_policy))
    if value is not None:
        console.print(render_value(value))
    comparison = compare_to_paper(results)
    if comparison:
        console.print(render_comparison_markdown(comparison), markup=False)
    if plots:
        for p in plot(out, runs):
            console.print(f"wrote {p}")
    console.print(f"wrote {path}, {render(out)}")


def sim_gfs_compare(
    paths: Annotated[
        list[Path], typer.Argument(help="output folders of stoker sim gfs --jobs (any depth)")
    ],
    base: Annotated[
        str,
        typer.Option(
            help="the policy every other is compared with; several, comma-separated "
            "(yarn-cs,lyra,fgd), compare the others with their mean"
        ),
    ] = "gfs",
    resamples: Annotated[int, typer.Option(help="paired bootstrap draws")] = 2000,
    seed: Annotated[int, typer.Option(help="seed of the draws")] = 0,
    level: Annotated[float, typer.Option(help="confidence level of the intervals")] = 0.95,
    out: Annotated[
        Path | None, typer.Option(help="JSON written (default: the first folder's compare.json)")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="print the JSON written instead of the tables")
    ] = False,
    replicates: Annotated[
        bool,
        typer.Option(
            "--replicates",
            help="each folder is one replicate (a seed): its runs pair inside it, and the "
            "tables give each figure over the replicates",
        ),
    ] = False,
    margin: Annotated[
        float,
        typer.Option(
            help="with --replicates: the non-inferiority margin, a relative change "
            "(superior: every replicate's interval below -margin; non-inferior: every "
            "upper end at most +margin)"
        ),
    ] = 0.02,
) -> None:
    """Each policy against --base on the same jobs, load by load: every job metric's change
    and its paired bootstrap interval (better / worse / no clear difference). Jobs are
    drawn as independent: how far another run of a chaotic cluster could move a figure (one
    placement shifts many jobs' waits together) needs runs of other seeds (--replicates)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from stoker.sim.paired import (
        METRICS,
        VERDICTS,
        Change,
        PairedError,
        check_draws,
        check_margin,
        compare_runs,
        find_runs,
        tally,
    )

    def fail(msg: str) -> None:
        typer.echo(f"error: {msg}", err=True)
        raise typer.Exit(2)

    bases = [name.strip() for name in base.split(",") if name.strip()]
    if not bases or len(set(bases)) != len(bases):
        fail(f"--base: one policy or several, each once, comma-separated; got {base!r}")
    try:
        check_draws(resamples, level)
        check_margin(margin)
    except PairedError as exc:
        fail(f"--{exc}")
    groups = [[p] for p in paths] if replicates else [list(paths)]
    if replicates and len(paths) < 2:
        fail("--replicates: give two folders or more, one per replicate")
    found: list[dict[str, dict[str, Path]]] = []
    compared: list[dict[str, dict[str, dict[str, Change]]]] = []
    try:
        for group in groups:
            where = ", ".join(map(str, group))
            runs = find_runs(group)
            if not runs:
                fail(f"no job outcomes under {where} (run stoker sim gfs --jobs)")
            policies = sorted({name for by_policy in runs.values() for name in by_policy})
            for name in bases:
                if name not in policies:
                    fail(f"--base: no run of {name!r} under {where}; found {', '.join(policies)}")
            try:
                results = compare_runs(runs, bases, resamples=resamples, seed=seed, level=level)
            except PairedError as exc:
                raise PairedError(f"{where}: {exc}" if replicates else str(exc)) from None
            if not results:
                fail(f"no load under {where} has {base!r} and another policy to compare")
            found.append(runs)
            compared.append(results)
    except PairedError as exc:
        fail(str(exc))
        return

    def as_json_doc(results: dict[str, dict[str, dict[str, Change]]]) -> dict[str, Any]:
        return {
            load: {name: {m: c.as_dict() for m, c in ch.items()} for name, ch in by.items()}
            for load, by in results.items()
        }

    def listing(runs: dict[str, dict[str, Path]]) -> dict[str, dict[str, str]]:
        return {
            load: {name: str(path) for name, path in sorted(by_policy.items())}
            for load, by_policy in sorted(runs.items())
        }

    meta: dict[str, Any] = {"base": bases, "resamples": resamples, "seed": seed, "level": level}
    if replicates:
        summary = tally(compared)
        doc: dict[str, Any] = {
            "meta": {**meta, "replicates": [str(p) for p in paths], "margin": margin},
            "replicates": [
                {"runs": listing(runs), "results": as_json_doc(results)}
                for runs, results in zip(found, compared, strict=True)
            ],
            "results": {
                load: {
                    name: {m: t.as_dict(margin) for m, t in ts.items()} for name, ts in by.items()
                }
                for load, by in summary.items()
            },
        }
    else:
        doc = {"meta": {**meta, "runs": listing(found[0])}, "results": as_json_doc(compared[0])}
    target = out or paths[0] / "compare.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    target.write_text(text)
    if as_json:
        typer.echo(text, nl=False)
        return
    console = Console(width=200)
    against = base if len(bases) == 1 else f"the mean of {', '.join(bases)}"
    for load, by_policy in doc["results"].items():
        if replicates:
            title = escape(
                f"against {against}, load {load}, over replicates (mean change [least, "
                f"greatest]; how many {' / '.join(VERDICTS)}; within {margin:.0%})"
            )
        else:
            title = f"against {against}, load {load} (change [{level:.0%} interval])"
        table = Table(title=title)
        table.add_column("policy", overflow="fold")
        for m in METRICS:
            table.add_column(m, justify="right")
        for name, changes in by_policy.items():
            cells = []
            for m in METRICS:
                c = changes[m]
                if replicates:
                    counts = "/".join(str(c[v]) for v in VERDICTS)
                    cells.append(
                        f"{c['mean_change']:+.1%} [{c['min_change']:+.1%}, "
                        f"{c['max_change']:+.1%}] {counts} {c['within_margin']}"
                    )
                else:
                    cells.append(
                        f"{c['change']:+.1%} [{c['ci_low']:+.1%}, {c['ci_high']:+.1%}] "
                        f"{c['verdict']}"
                    )
            table.add_row(name, *cells)
        console.print(table)
    console.print(f"wrote {target}")
