"""Render the evaluation pages' tables and plots from the files under results/.

    PYTHONPATH=src .venv/bin/python scripts/render_docs.py          # rewrite the pages, plots
    PYTHONPATH=src .venv/bin/python scripts/render_docs.py --check  # exit 1 if a table differs

Each table sits between ``<!-- table:NAME -->`` and ``<!-- /table -->`` in a page under
docs/evaluation/; this script owns what is between the markers, so a figure edited by hand
or a results file changed shows as a difference (tests/test_evaluation_pages.py). The
papers' figures are constants here: they are quoted, not measured.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
PAGES = ROOT / "docs" / "evaluation"
IMG = PAGES / "img"
MARKER = re.compile(r"(<!-- table:([\w-]+) -->\n)(.*?)(<!-- /table -->)", re.S)

# The GFS paper's claims (GFS against the mean of YARN-CS, Lyra and FGD), as fractions.
GFS_PAPER = {
    "spot.eviction_rate": ("spot eviction", "-33 %"),
    "spot.mean_queue_s": ("spot queueing", "-44.1 %"),
    "spot.mean_jct_s": ("spot JCT", "-14 %"),
    "hp.mean_queue_s": ("HP queueing", "-60..-71 %"),
    "hp.p99_jct_s": ("HP p99 JCT", "unchanged"),
}
LOADS = ("low", "medium", "high")
SEEDS = range(5)


def _load(rel: str) -> Any:
    return json.loads((RESULTS / rel).read_text())


def _row(cells: list[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _table(head: list[str], rows: list[list[object]], align: str = "") -> str:
    """A Markdown table; ``align`` has one letter per column (l or r), default all left."""
    align = align or "l" * len(head)
    rule = ["---:" if a == "r" else "---" for a in align]
    return "\n".join([_row(head), _row(rule), *(_row(r) for r in rows)]) + "\n"


def _pct(x: float) -> str:
    return f"{x * 100:+,.0f} %"


def _verdicts(cells: list[dict[str, Any]], metric: str) -> str:
    """Range of the change over runs and how many the paired interval calls B / W / ~."""
    changes = [c[metric]["change"] for c in cells]
    counts = {k: sum(c[metric]["verdict"] == k for c in cells) for k in ("better", "worse")}
    same = len(cells) - counts["better"] - counts["worse"]
    parts = [
        f"{n} {k}" for k, n in (("B", counts["better"]), ("W", counts["worse"]), ("~", same)) if n
    ]
    return f"{_pct(min(changes))}..{_pct(max(changes))} ({', '.join(parts)})"


def _replicate_cells(rel: str, policy: str) -> list[dict[str, Any]]:
    """Every (load, replicate) paired comparison of ``policy`` in a replicates file."""
    data = _load(rel)
    return [
        rep["results"][load][policy]
        for rep in data["replicates"]
        for load in LOADS
        if load in rep["results"]
    ]


def _v2026_seed_cells(kind: str, seed: int, policy: str) -> list[dict[str, Any]]:
    """Every load's cell of ``policy`` in one seed's v2026 month file."""
    by_load = _load(f"gfs/v2026/{kind}_s{seed}.json")["results"]
    return [by_load[load][policy] for load in LOADS if policy in by_load.get(load, {})]


def _v2026_cells(kind: str, policies: tuple[str, ...]) -> list[dict[str, Any]]:
    """Every (seed, load) cell of the v2026 month files; the first of ``policies`` each holds
    (seeds 0-2 were run with ``gfs-reserve-patient-lend``, 3-4 with its ``-multi`` successor)."""
    cells = []
    for s in SEEDS:
        held = _load(f"gfs/v2026/{kind}_s{s}.json")["results"]["medium"]
        cells += _v2026_seed_cells(kind, s, next(p for p in policies if p in held))
    return cells


# --- Firepool page ------------------------------------------------------------------------


def firepool_results() -> str:
    """The headline figures of ``stoker sim firepool --seed 0`` beside the paper's."""
    d = _load("firepool/results.json")
    sl, ho, ka, mix = d["start_latency"], d["handover_s"], d["keepalive"], d["mix"]
    rows = [
        [
            "agent loop speedup (warm reuse / fresh pod)",
            f"{d['agent_loop']['speedup']:.1f}x",
            "13x",
        ],
        ["RL loop speedup", f"{d['rl_loop']['speedup']:.1f}x", "10.8x"],
        ["start p90, fresh tag (mix)", f"{sl['fresh_tag']['start_p90_s']:.1f} s", "59.1 s"],
        ["start p90, warm reuse (mix)", f"{sl['warm_reuse']['start_p90_s']:.2f} s", "3.5 s"],
        ["handover median, no standby", f"{ho['no_standby']:.1f} s", "51 s"],
        [
            "handover median, standby",
            f"{ho['standby']:.2f} s (p90 {ho['standby_p90']:.0f} s)",
            "0.94 s",
        ],
        ["capacity ratio, fitted / always-on GPU-s", f"{ka['capacity_ratio']:.2f}", "~0.5"],
        [
            "mix: warm or standby fraction",
            f"{mix['warm_or_standby_fraction']:.3f} ({mix['requests']:,} req.)",
            "0.947 (3,206)",
        ],
    ]
    return _table(["figure", "stoker (sim, seed 0)", "paper"], rows, "lrr")


def firepool_policies() -> str:
    """Start latency and GPUs held per policy on the production-like mix."""
    sl = _load("firepool/results.json")["start_latency"]
    rows = [
        [
            f"`{name}`",
            f"{r['start_p50_s']:.2f}",
            f"{r['start_p90_s']:.2f}",
            f"{r['start_p99_s']:.2f}",
            f"{r['warm_fraction']:.3f}",
            f"{r['standby_fraction']:.3f}",
            f"{r['mean_held_gpus']:.1f}",
        ]
        for name, r in sl.items()
    ]
    head = ["policy", "start p50 s", "p90 s", "p99 s", "warm", "standby", "mean GPUs held"]
    return _table(head, rows, "lrrrrrr")


def firepool_runtime() -> str:
    """The virtual runtime's durations, as results.json records them."""
    rt = _load("firepool/results.json")["assumptions"]["runtime"]
    rows = [
        [f"`{k}`", v["dist"], "measured" if v["measured"] else v["source"]] for k, v in rt.items()
    ]
    return _table(["duration", "distribution", "source"], rows)


def firepool_sweep() -> str:
    """The sensitivity sweep: pod start and pauses scaled."""
    rows = [
        [
            s["pod_start_factor"],
            s["pause_factor"],
            f"{s['agent_speedup']:.2f}",
            f"{s['mix_warm_or_standby_fraction']:.3f}",
            f"{s['capacity_ratio']:.2f}",
            f"{s['p90_fitted_s']:.2f} / {s['p90_always_on_s']:.2f} s",
        ]
        for s in _load("firepool/results.json")["sweep"]
    ]
    head = [
        "f_start",
        "f_pause",
        "agent speedup",
        "mix warm+standby",
        "capacity ratio",
        "p90 fitted / always-on",
    ]
    return _table(head, rows, "rrrrrr")


def _shared(rel: str) -> str:
    comp = _load(rel)["comparison"]
    modes = ["partitioned", "shared", "shared_strict", "shared_new_only", "shared_uncapped"]
    fmt: dict[str, Callable[[float], str]] = {
        "pool.warm_or_standby_fraction": lambda x: f"{x:.3f}",
        "pool.start_p90_s": lambda x: f"{x:.2f}",
        "spot.eviction_rate": lambda x: f"{x:.3f}",
    }
    rows = []
    for metric, vals in comp.items():
        f = fmt.get(metric, lambda x: f"{x:,.0f}")
        rows.append([f"`{metric}`", *(f(vals[m]) for m in modes)])
    return _table(["metric", *modes], rows, "l" + "r" * len(modes))


def shared_default() -> str:
    """``stoker sim shared`` on its default setting: partitioned against shared modes."""
    return _shared("shared-sim/results.json")


def shared_contended() -> str:
    """``stoker sim shared`` on the contended setting."""
    return _shared("shared-sim/contended/results.json")


def bench_local() -> str:
    """``stoker bench local`` before issue 10's last round and three runs after."""
    runs = {
        n: _load(f"broker/bench_local_{n}.json")["profiles"]
        for n in ("base", "final", "final2", "final3")
    }
    figures: list[tuple[str, Callable[[dict[str, Any]], float], str]] = [
        ("jobs/s, 4 callers", lambda p: p["throughput"]["4"]["jobs_per_s"], "{:.0f}"),
        ("jobs/s, 16 callers", lambda p: p["throughput"]["16"]["jobs_per_s"], "{:.0f}"),
        ("SDK call p50 ms", lambda p: p["client"]["call_ms_p50"], "{:.1f}"),
        ("warm start p50 ms", lambda p: p["warm"]["start_ms_p50"], "{:.1f}"),
        ("warm start p99 ms", lambda p: p["warm"]["start_ms_p99"], "{:.1f}"),
    ]
    rows = [
        [prof, label, *(fmt.format(get(run[prof])) for run in runs.values())]
        for prof in ("plain", "torch-cpu")
        for label, get, fmt in figures
    ]
    return _table(
        ["profile", "figure", "before (b577ab8)", "after, run 1", "run 2", "run 3"], rows, "llrrrr"
    )


# --- GFS page -----------------------------------------------------------------------------


def gfs_claims() -> str:
    """The paper's claims: GFS against the mean of YARN-CS, Lyra and FGD, paired intervals."""
    v2026 = _v2026_cells("claims", ("gfs",))
    openb = _replicate_cells("gfs/openb/replicates_claims.json", "gfs")
    philly = _replicate_cells("gfs/philly/replicates_claims.json", "gfs")
    rows = [
        [label, paper, _verdicts(v2026, m), _verdicts(openb, m), _verdicts(philly, m)]
        for m, (label, paper) in GFS_PAPER.items()
    ]
    head = [
        "metric",
        "paper",
        f"v2026 full fleet, a month ({len(v2026)} runs)",
        f"openb contended ({len(openb)} runs)",
        f"Philly contended ({len(philly)} runs)",
    ]
    return _table(head, rows, "lrlll")


def gfs_beyond() -> str:
    """stoker's own presets against GFS (paired intervals, base GFS)."""
    v2026 = _v2026_cells("compare", ("gfs-reserve-patient-lend-multi", "gfs-reserve-patient-lend"))
    openb = _replicate_cells("gfs/openb/replicates.json", "gfs-reserve-patient-lend-multi")
    philly = _replicate_cells("gfs/philly/replicates.json", "gfs-reserve-patient-lend-multi")
    rows = [
        [label, _verdicts(v2026, m), _verdicts(openb, m), _verdicts(philly, m)]
        for m, (label, _) in GFS_PAPER.items()
    ]
    head = [
        "metric",
        f"v2026: `-lend` seeds 0-2, `-multi` 3-4 ({len(v2026)} runs)",
        f"openb: `-multi` ({len(openb)} runs)",
        f"Philly: `-multi` ({len(philly)} runs)",
    ]
    return _table(head, rows)


def gfs_margin() -> str:
    """stoker's own presets against GFS within the stated margin, over every replicate."""
    from stoker.sim.paired import MARGIN, Change, Tally

    def within(cells: list[dict[str, Any]], metric: str) -> str:
        t = Tally.of([Change.from_dict(c[metric]) for c in cells])
        return f"{t.within(MARGIN)} ({max(t.highs) * 100:+.1f} %)"

    multi = "gfs-reserve-patient-lend-multi"
    flat = [
        (
            "v2026 `-lend`",
            [
                c
                for s in (0, 1, 2)
                for c in _v2026_seed_cells("compare", s, "gfs-reserve-patient-lend")
            ],
        ),
        ("v2026 `-multi`", [c for s in (3, 4) for c in _v2026_seed_cells("compare", s, multi)]),
        ("openb `-multi`", _replicate_cells("gfs/openb/replicates.json", multi)),
        ("Philly `-multi`", _replicate_cells("gfs/philly/replicates.json", multi)),
    ]
    rows = [
        [label, *(within(cells, m) for _, cells in flat)] for m, (label, _) in GFS_PAPER.items()
    ]
    head = ["metric", *(f"{label} ({len(cells)} runs)" for label, cells in flat)]
    return _table(head, rows)


def _absolute(rel: str, load: str) -> str:
    """One row per policy of a results file at ``load``."""
    rows = _absolute_rows(rel, load, None)
    head = [
        "policy",
        "HP queue h",
        "HP p99 JCT h",
        "spot eviction",
        "spot queue h",
        "spot JCT h",
        "allocation",
    ]
    return _table(head, rows, "lrrrrrr")


def _absolute_rows(rel: str, load: str, trace: str | None) -> list[list[object]]:
    """The rows of :func:`_absolute`, each after the trace's name if one is given."""
    res = _load(rel)["results"][load]
    return [
        [
            *([] if trace is None else [trace]),
            f"`{p}`",
            f"{r['hp.mean_queue_s'] / 3600:,.1f}",
            f"{r['hp.p99_jct_s'] / 3600:,.0f}",
            f"{r['spot.eviction_rate']:.3f}",
            f"{r['spot.mean_queue_s'] / 3600:,.1f}",
            f"{r['spot.mean_jct_s'] / 3600:,.1f}",
            f"{r['gpu_allocation_rate']:.3f}",
        ]
        for p, r in sorted(res.items())
    ]


def gfs_v2026() -> str:
    """Every policy on the v2026 full-fleet month, seed 0, medium load."""
    return _absolute("gfs/v2026/month.json", "medium")


def gfs_openb() -> str:
    """Every policy on openb, contended, seed 0, medium load."""
    return _absolute("gfs/openb/results.json", "medium")


def gfs_philly() -> str:
    """Every policy on Philly, contended, seed 0, medium load."""
    return _absolute("gfs/philly/results.json", "medium")


AS_RELEASED_TRACES = ("v2026", "openb", "philly")
BASELINES = ("yarn-cs", "lyra", "fgd")


def gfs_as_released_v2026() -> str:
    """Each policy beside its ``-as-released`` preset, v2026 month, seed 0, medium load."""
    return _absolute("gfs/v2026/as_released.json", "medium")


def gfs_as_released_openb() -> str:
    """As :func:`gfs_as_released_v2026`, openb contended."""
    return _absolute("gfs/openb/as_released.json", "medium")


def gfs_as_released_philly() -> str:
    """As :func:`gfs_as_released_v2026`, Philly contended."""
    return _absolute("gfs/philly/as_released.json", "medium")


def gfs_claims_as_released() -> str:
    """The paper's claims, GFS against the mean of YARN-CS, Lyra and FGD, with every policy
    as fixed and as released, per trace (one run each, seed 0, medium load)."""
    runs = {t: _load(f"gfs/{t}/as_released.json")["results"]["medium"] for t in AS_RELEASED_TRACES}

    def change(res: dict[str, Any], suffix: str, metric: str) -> str:
        base = sum(res[b + suffix][metric] for b in BASELINES) / len(BASELINES)
        return _pct(res["gfs" + suffix][metric] / base - 1) if base else "n/a"

    rows = [
        [label, paper]
        + [change(runs[t], s, m) for t in AS_RELEASED_TRACES for s in ("", "-as-released")]
        for m, (label, paper) in GFS_PAPER.items()
    ]
    head = ["metric", "paper"]
    head += [f"{t} {kind}" for t in AS_RELEASED_TRACES for kind in ("fixed", "as released")]
    return _table(head, rows, "lr" + "r" * 2 * len(AS_RELEASED_TRACES))


def gfs_money() -> str:
    """The paper's money figure: the monthly value of GFS's allocation gain over each policy."""
    av = _load("gfs/v2026/month.json")["allocation_value"]
    base = ("yarn-cs", "lyra", "fgd", "chronus")
    rows = [[load, *(f"{av['per_month'][load][b]:+,.0f}" for b in base)] for load in LOADS]
    return _table(["load", *(f"over `{b}` $/month" for b in base)], rows, "lrrrr")


def gfs_speed() -> str:
    """CPU seconds of each full-fleet month run at medium load (one process per run; the
    file holds every load's, within 25 % of these)."""
    runs = [r for r in _load("gfs/v2026/month_timings.json")["runs"] if r["load"] == "medium"]
    rows = [
        [
            f"`{r['policy']}`",
            r["load"],
            f"{r['events']:,}",
            f"{r['cpu_s']:,.0f}",
            f"{r['max_rss_mb_upper']:.0f}",
        ]
        for r in sorted(runs, key=lambda r: (r["policy"], LOADS.index(r["load"])))
    ]
    return _table(["policy", "load", "events", "CPU s", "max RSS MB"], rows, "llrrr")


def fairness() -> str:
    """One greedy tenant among ordinary ones, without and with tenant shares."""
    data = _load("fairness/results.json")
    rows = [
        ("ordinary tenants' mean slowdown", "ordinary_mean_slowdown", "{:.2f}"),
        ("greedy tenant's mean slowdown", "greedy_mean_slowdown", "{:.2f}"),
        ("Jain's index over ordinary tenants' slowdowns", "jain_ordinary", "{:.2f}"),
        ("Jain's index over every tenant", "jain_all", "{:.2f}"),
    ]
    return _table(
        ["figure", "no shares", "shares"],
        [
            [label, fmt.format(data["none"][k]), fmt.format(data["shares"][k])]
            for label, k, fmt in rows
        ],
        "lrr",
    )


def fairness_tenants() -> str:
    """Each tenant's jobs and mean waits, without and with tenant shares."""
    data = _load("fairness/results.json")
    rows = []
    for name, none in data["none"]["tenants"].items():
        shared = data["shares"]["tenants"][name]
        rows.append(
            [
                name,
                none["jobs"],
                f"{none['pool_mean_wait_s']:,.0f}",
                f"{shared['pool_mean_wait_s']:,.0f}",
                f"{none['hp_mean_wait_s']:,.0f}",
                f"{shared['hp_mean_wait_s']:,.0f}",
            ]
        )
    head = ["tenant", "jobs", "pool wait s, no shares", "shares", "hp wait s, no shares", "shares"]
    return _table(head, rows, "lrrrrr")


TABLES: dict[str, Callable[[], str]] = {
    f.__name__: f
    for f in (
        fairness,
        fairness_tenants,
        firepool_results,
        firepool_policies,
        firepool_runtime,
        firepool_sweep,
        shared_default,
        shared_contended,
        bench_local,
        gfs_claims,
        gfs_beyond,
        gfs_margin,
        gfs_v2026,
        gfs_openb,
        gfs_philly,
        gfs_as_released_v2026,
        gfs_as_released_openb,
        gfs_as_released_philly,
        gfs_claims_as_released,
        gfs_money,
        gfs_speed,
    )
}


def render_page(text: str) -> str:
    """The page with every marked table replaced by what the results render to now."""

    def sub(m: re.Match[str]) -> str:
        name = m.group(2)
        if name not in TABLES:
            raise ValueError(f"unknown table {name!r} (known: {', '.join(TABLES)})")
        return m.group(1) + TABLES[name]() + m.group(4)

    return MARKER.sub(sub, text)


def render_plots(out: Path = IMG) -> list[Path]:
    """The evaluation's PNGs, from the same results files as the tables."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    meta = {"Software": None}  # no version stamp: the same files give the same bytes
    paths = []

    sl = _load("firepool/results.json")["start_latency"]
    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=80)
    for name, r in sl.items():
        qs = [r["start_p50_s"], r["start_p90_s"], r["start_p99_s"]]
        ax.plot([max(q, 1e-3) for q in qs], [0.5, 0.9, 0.99], marker="o", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("start latency (s, log)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("Firepool mix: start latency quantiles per policy")
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(out / "firepool_start_latency.png")
    fig.savefig(paths[-1], metadata=meta)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=80)
    ax.bar(list(sl), [r["mean_held_gpus"] for r in sl.values()])
    ax.set_ylabel("mean GPUs held")
    ax.set_title("Firepool mix: GPUs held per policy (mean over the run)")
    ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    paths.append(out / "firepool_held_gpus.png")
    fig.savefig(paths[-1], metadata=meta)
    plt.close(fig)

    res = _load("gfs/v2026/month.json")["results"]["medium"]
    names = sorted(res)
    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=80)
    xs = range(len(names))
    ax.bar(
        [x - 0.2 for x in xs], [res[n]["hp.mean_queue_s"] / 3600 for n in names], 0.4, label="HP"
    )
    ax.bar(
        [x + 0.2 for x in xs],
        [res[n]["spot.mean_queue_s"] / 3600 for n in names],
        0.4,
        label="spot",
    )
    ax.set_xticks(list(xs), names, rotation=60, ha="right", fontsize=6)
    ax.set_ylabel("mean queueing (h)")
    ax.set_title("v2026 full-fleet month, medium load: queueing per policy")
    ax.legend()
    fig.tight_layout()
    paths.append(out / "gfs_queueing.png")
    fig.savefig(paths[-1], metadata=meta)
    plt.close(fig)
    return paths


def main(argv: list[str] | None = None) -> int:
    """Rewrite the pages' tables (or, with --check, say which differ) and the plots."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if a page's tables differ"
    )
    args = ap.parse_args(argv)
    stale = []
    for page in sorted(PAGES.glob("*.md")):
        text = page.read_text()
        new = render_page(text)
        if new != text:
            stale.append(page)
            if not args.check:
                page.write_text(new)
    if args.check:
        for page in stale:
            print(f"{page.relative_to(ROOT)}: tables differ from results/ (rerun this script)")
        return 1 if stale else 0
    for path in render_plots():
        print(f"wrote {path.relative_to(ROOT)}")
    for page in stale:
        print(f"rewrote {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
