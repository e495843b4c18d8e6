"""``stoker sim fairness``: one greedy tenant among ordinary ones, with and without shares."""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Annotated, Any

import typer

DEFAULT_OUT = Path("stoker-results/fairness")
FIGURES = (
    ("ordinary tenants' mean slowdown", "ordinary_mean_slowdown"),
    ("greedy tenant's mean slowdown", "greedy_mean_slowdown"),
    ("Jain's index, ordinary tenants", "jain_ordinary"),
    ("Jain's index, every tenant", "jain_all"),
)


def register(app: typer.Typer, sim_app: typer.Typer) -> None:
    """Add ``fairness`` to the ``sim`` group."""
    sim_app.command("fairness")(sim_fairness)


def sim_fairness(
    out: Annotated[Path, typer.Option(help="output folder")] = DEFAULT_OUT,
    seed: Annotated[int, typer.Option(help="seed of every random stream")] = 0,
    nodes: Annotated[int, typer.Option(help="GPU nodes")] = 4,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per node")] = 8,
    tenants: Annotated[int, typer.Option(help="ordinary tenants beside the greedy one")] = 4,
    hours: Annotated[float, typer.Option(help="submission window, hours")] = 1.0,
    greedy_factor: Annotated[
        float, typer.Option(help="the greedy tenant submits this many times an ordinary one")
    ] = 10.0,
) -> None:
    """Run the same jobs with every queue in submit order and with tenant shares (fair
    order, equal weights); print each tenant's waits and write results.json."""
    from rich.console import Console
    from rich.table import Table

    from stoker.sim.fairness import FairnessConfig, run

    t0 = time.perf_counter()
    try:
        cfg = FairnessConfig(
            seed=seed,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            tenants=tenants,
            duration_s=hours * 3600.0,
            greedy_factor=greedy_factor,
        )
        doc = run(cfg)
        doc["environment"] = {"python": platform.python_version(), "machine": platform.machine()}
        out.mkdir(parents=True, exist_ok=True)
        path = out / "results.json"
        path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    except (ValueError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    console = Console(width=140)
    console.print(table(doc, Table))
    console.print(f"wrote {path} ({time.perf_counter() - t0:.1f} s)")


def table(doc: dict[str, Any], table_cls: Any) -> Any:
    """The side-by-side figures, then each tenant's waits."""
    t = table_cls(title="stoker sim fairness: one greedy tenant, without and with shares")
    t.add_column("figure")
    t.add_column("no shares", justify="right")
    t.add_column("shares", justify="right")
    for label, key in FIGURES:
        t.add_row(label, f"{doc['none'][key]:.2f}", f"{doc['shares'][key]:.2f}")
    for tenant in doc["none"]["tenants"]:
        for key in ("pool_mean_wait_s", "hp_mean_wait_s"):
            before = doc["none"]["tenants"][tenant][key]
            after = doc["shares"]["tenants"][tenant][key]
            t.add_row(f"{tenant} {key}", f"{before:,.1f}", f"{after:,.1f}")
    return t
