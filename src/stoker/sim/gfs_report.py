"""results.json, the printed table and the PNG plots of ``stoker sim gfs``."""

from __future__ import annotations

import json
from pathlib import Path

from stoker.core.registry import PAPER_BASELINES
from stoker.sim.gfs import TraceResult

TABLE_METRICS = (
    "spot.eviction_rate",
    "spot.mean_queue_s",
    "spot.mean_jct_s",
    "hp.mean_queue_s",
    "hp.p99_jct_s",
    "gpu_allocation_rate",
    "useful_gpu_time_rate",
    "authors.gpu_allocation_rate",
    "authors.useful_gpu_time_rate",
    "preemptions_per_spot_job",
)
# a month's hours (365 * 24 / 12) for the value of an allocation gain
HOURS_PER_MONTH = 730.0
VALUE_FORMULA = (
    "(gpu_allocation_rate[gfs] - gpu_allocation_rate[baseline]) * gpus * hours_per_month "
    "* gpu_hour_price"
)


def allocation_value(
    results: dict[str, dict[str, dict[str, object]]],
    gpus: int,
    price: float,
    policy: str = "gfs",
) -> dict[str, object]:
    """What ``policy``'s allocation gain over each other policy is worth a month, at
    ``price`` per GPU-hour: :data:`VALUE_FORMULA` (the GFS paper's money figure: GPUs
    allocated that would otherwise stand idle, priced as rented). Per load, per baseline,
    in the price's currency; a negative value is a loss. ``per_month`` takes stoker's
    allocation rate (GPU shares held); ``per_month_authors`` the authors' (cards carrying
    any job), where the runs measured it. ``results``: per load, per policy, its metrics
    (results.json's ``results``)."""
    if not price >= 0:
        raise ValueError(f"gpu_hour_price: must be >= 0, got {price}")

    def per_load(metric: str) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for load, by_policy in results.items():
            mine = by_policy.get(policy)
            if mine is None or metric not in mine:
                continue
            rate = float(mine[metric])  # type: ignore[arg-type]
            out[load] = {
                name: round(
                    (rate - float(r[metric])) * gpus * HOURS_PER_MONTH * price,  # type: ignore[arg-type]
                    2,
                )
                for name, r in by_policy.items()
                if name != policy and metric in r
            }
        return out

    value: dict[str, object] = {
        "policy": policy,
        "gpu_hour_price": price,
        "gpus": gpus,
        "hours_per_month": HOURS_PER_MONTH,
        "formula": VALUE_FORMULA,
        "per_month": per_load("gpu_allocation_rate"),
    }
    authors = per_load("authors.gpu_allocation_rate")
    if authors:
        value["per_month_authors"] = authors
    return value


def metrics_of(runs: dict[str, dict[str, TraceResult]]) -> dict[str, dict[str, dict[str, object]]]:
    """Per load, per policy, the run's metrics (results.json's ``results``)."""
    return {
        load: {name: r.metrics for name, r in by_policy.items()} for load, by_policy in runs.items()
    }


def write_results(
    out: Path,
    runs: dict[str, dict[str, TraceResult]],
    meta: dict[str, object],
    value: dict[str, object] | None = None,
) -> Path:
    """``out/results.json``: per load, per policy, the metrics; plus the run's setup and,
    when a GPU-hour price was given, the allocation gain's value (:func:`allocation_value`)
    under ``allocation_value``; where gfs ran beside the paper's baselines, its changes
    against them beside the paper's claims (:func:`compare_to_paper`) under
    ``paper_comparison``."""
    out.mkdir(parents=True, exist_ok=True)
    results = metrics_of(runs)
    doc: dict[str, object] = {"meta": meta, "results": results}
    if value is not None:
        doc["allocation_value"] = value
    comparison = compare_to_paper(results)
    if comparison:
        doc["paper_comparison"] = comparison
    path = out / "results.json"
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return path


def render_table(load: str, by_policy: dict[str, TraceResult]) -> object:
    """A rich table of one load level's metrics."""
    from rich.table import Table

    table = Table(title=f"GFS evaluation, load {load}")
    table.add_column("policy")
    for m in TABLE_METRICS:
        table.add_column(m.replace("_", " "), justify="right")
    for name, r in by_policy.items():
        row = []
        for m in TABLE_METRICS:
            v = float(r.metrics[m])  # type: ignore[arg-type]
            row.append(f"{v:.3f}" if abs(v) < 10 else f"{v:,.0f}")
        table.add_row(name, *row)
    return table


def render_value(value: dict[str, object]) -> object:
    """A rich table of :func:`allocation_value`: per load (and allocation rate), what
    gfs's gain over each baseline is worth a month, with the price and the formula."""
    from rich.table import Table

    rows: dict[str, dict[str, float]] = {}
    for field, label in (("per_month", ""), ("per_month_authors", " (authors' rate)")):
        for load, by_baseline in value.get(field, {}).items():  # type: ignore[attr-defined]
            rows[load + label] = by_baseline
    table = Table(
        title=f"value of {value['policy']}'s allocation gain a month at "
        f"{value['gpu_hour_price']:g} per GPU-hour ({value['gpus']} GPUs)",
        caption=str(value["formula"]),
    )
    table.add_column("load")
    baselines = list(dict.fromkeys(b for by in rows.values() for b in by))
    for name in baselines:
        table.add_column(f"vs {name}", justify="right")
    for label, by_baseline in rows.items():
        table.add_row(label, *(f"{by_baseline.get(b, 0.0):,.0f}" for b in baselines))
    return table


def plot(out: Path, runs: dict[str, dict[str, TraceResult]]) -> list[Path]:
    """Eviction rate and spot queueing per policy and load; quota vs HP demand over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    paths: list[Path] = []
    loads = list(runs)
    policies = list(dict.fromkeys(p for by in runs.values() for p in by))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    width = 0.8 / max(1, len(loads))
    x = np.arange(len(policies))
    for ax, metric, label in (
        (axes[0], "spot.eviction_rate", "spot eviction rate"),
        (axes[1], "spot.mean_queue_s", "spot mean queueing (s)"),
        (axes[2], "hp.mean_queue_s", "HP mean queueing (s)"),
    ):
        for i, load in enumerate(loads):
            vals = [
                float(runs[load][p].metrics[metric]) if p in runs[load] else 0.0 for p in policies
            ]
            ax.bar(x + i * width, vals, width, label=load)
        ax.set_xticks(x + width * (len(loads) - 1) / 2, policies, rotation=35, ha="right")
        ax.set_title(label)
    axes[0].legend(title="load")
    fig.tight_layout()
    path = out / "eviction_queueing.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    paths.append(path)
    for load in loads:
        r = runs[load].get("gfs")
        if r is None or not r.timeline.get("t"):
            continue
        tl = r.timeline
        t = np.asarray(tl["t"]) / 86400.0
        fig, ax = plt.subplots(figsize=(11, 4))
        ax.plot(t, tl["capacity"], color="black", lw=0.8, label="capacity")
        ax.plot(t, tl["hp_used"], lw=0.9, label="HP GPUs running")
        ax.plot(t, tl["hp_forecast_u"], lw=0.9, ls="--", label="HP forecast 0.9 quantile (next h)")
        ax.plot(t, tl["quota"], lw=0.9, label="spot quota (sum of GPU pools)")
        ax.plot(t, tl["spot_used"], lw=0.9, label="spot GPUs running")
        ax.set_xlabel("trace day")
        ax.set_ylabel("GPUs")
        ax.set_title(f"GFS spot quota vs HP demand (load {load})")
        ax.legend(fontsize=8, loc="upper left")
        fig.tight_layout()
        path = out / f"quota_vs_hp_{load}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


# The GFS paper's headline claims against its baselines (relative change of GFS's metric
# against theirs; HP p99 JCT "unchanged": within ``HP_P99_TOLERANCE``). A range is (best,
# worst) of the paper's figures.
PAPER_CLAIMS: dict[str, tuple[float, float]] = {
    "spot.eviction_rate": (-0.33, -0.33),
    "spot.mean_queue_s": (-0.441, -0.441),
    "spot.mean_jct_s": (-0.14, -0.14),
    "hp.mean_queue_s": (-0.71, -0.60),
}
HP_P99_TOLERANCE = 0.05


def _change(mine: float, theirs: float) -> float | None:
    """Relative change of ``mine`` against ``theirs`` (None where theirs is 0)."""
    if theirs == 0:
        return 0.0 if mine == 0 else None
    return (mine - theirs) / theirs


def compare_to_paper(
    results: dict[str, dict[str, dict[str, object]]],
    policy: str = "gfs",
    baselines: tuple[str, ...] | None = None,
) -> dict[str, dict[str, object]]:
    """Per load: ``policy``'s relative change against each baseline run and against their
    mean, for each of the paper's claims, and whether it reproduces the claim (as good as
    the paper's worst figure or better; HP p99 JCT within 5 %). ``results`` is the
    ``results`` part of results.json; ``baselines`` defaults to the paper's baselines
    (:data:`stoker.core.registry.PAPER_BASELINES`) among those run."""
    out: dict[str, dict[str, object]] = {}
    for load, by_policy in results.items():
        mine = by_policy.get(policy)
        if mine is None:
            continue
        names = tuple(n for n in baselines or PAPER_BASELINES if n in by_policy)
        if not names:
            continue
        rows: dict[str, object] = {}
        for metric in (*PAPER_CLAIMS, "hp.p99_jct_s"):
            if metric not in mine:
                continue
            own = float(mine[metric])  # type: ignore[arg-type]
            theirs = {n: float(by_policy[n][metric]) for n in names if metric in by_policy[n]}  # type: ignore[arg-type]
            if not theirs:
                continue
            mean = sum(theirs.values()) / len(theirs)
            vs_mean = _change(own, mean)
            if metric in PAPER_CLAIMS:
                claim: object = list(PAPER_CLAIMS[metric])
                ok = vs_mean is not None and vs_mean <= PAPER_CLAIMS[metric][1] + 1e-12
            else:
                claim = "unchanged"
                ok = vs_mean is not None and abs(vs_mean) <= HP_P99_TOLERANCE
            rows[metric] = {
                "ours": own,
                "baselines_mean": mean,
                "vs_mean": None if vs_mean is None else round(vs_mean, 4),
                "vs": {
                    n: None if (c := _change(own, v)) is None else round(c, 4)
                    for n, v in theirs.items()
                },
                "paper": claim,
                "reproduced": ok,
            }
        out[load] = {"policy": policy, "baselines": list(names), "metrics": rows}
    return out


def render_comparison_markdown(comparison: dict[str, dict[str, object]]) -> str:
    """The comparison as markdown tables (one per load), for docs."""

    def pct(x: object) -> str:
        return "n/a" if x is None else f"{float(x) * 100:+.1f} %"  # type: ignore[arg-type]

    lines: list[str] = []
    for load, block in comparison.items():
        names: list[str] = block["baselines"]  # type: ignore[assignment]
        lines += [
            f"**{load} load**: {block['policy']} against {', '.join(names)}",
            "",
            "| metric | vs mean | "
            + " | ".join(f"vs {n}" for n in names)
            + " | paper | reproduced |",
            "|---|---:|" + "---:|" * len(names) + "---|---|",
        ]
        for metric, row in block["metrics"].items():  # type: ignore[union-attr]
            paper = row["paper"]
            claim = (
                paper
                if isinstance(paper, str)
                else " .. ".join(dict.fromkeys(pct(p) for p in paper))
            )
            vs = " | ".join(pct(row["vs"].get(n)) for n in names)
            lines.append(
                f"| {metric} | {pct(row['vs_mean'])} | {vs} | {claim} | "
                f"{'yes' if row['reproduced'] else 'no'} |"
            )
        lines.append("")
    return "\n".join(lines)
