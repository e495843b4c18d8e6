"""``stoker sim fairness``: a greedy tenant's flood against ordinary tenants, with and
without shares, on the one engine (deterministic, and the shares must matter)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from stoker.cli.main import app
from stoker.sim.fairness import FairnessConfig, run

SMALL = FairnessConfig(nodes=2, gpus_per_node=4, tenants=3, duration_s=1800.0)


def test_shares_shield_ordinary_tenants_from_a_greedy_one() -> None:
    doc = run(SMALL)
    none, fair = doc["none"], doc["shares"]
    assert (
        set(none["tenants"])
        == set(fair["tenants"])
        == {"greedy", *(f"tenant-{i}" for i in range(3))}
    )
    assert fair["ordinary_mean_slowdown"] < none["ordinary_mean_slowdown"] / 2
    assert fair["greedy_mean_slowdown"] >= none["greedy_mean_slowdown"] * 0.9
    # the same jobs ran either way
    assert sum(t["jobs"] for t in none["tenants"].values()) == sum(
        t["jobs"] for t in fair["tenants"].values()
    )
    assert run(SMALL) == doc  # same seed, same results


def test_cli_writes_results_and_refuses_bad_input(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "fair"
    r = runner.invoke(
        app, ["sim", "fairness", "--out", str(out), "--nodes", "2", "--hours", "0.25"]
    )
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "results.json").read_text())
    assert {"none", "shares", "settings", "environment"} <= set(doc)
    assert "Jain" in r.output
    r = runner.invoke(app, ["sim", "fairness", "--out", str(out), "--nodes", "0"])
    assert r.exit_code == 2 and "nodes: must be >= 1" in r.output
