"""``stoker sim shared``: warm pools and hp/spot jobs on one cluster, partitioned and shared,
through the CLI: the keys, their sanity, nothing lost, same seed same file."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from stoker.cli.main import app

SMALL = [
    "--scale",
    "0.03",
    "--days",
    "0.2",
    "--warm-days",
    "2",
    "--burn-in-days",
    "0.1",
    "--tail-days",
    "0.1",
    "--sessions-per-hour",
    "40",
    "--query-every-min",
    "30",
]
HEADLINE = (
    "pool.warm_or_standby_fraction",
    "pool.start_p90_s",
    "hp.mean_queue_s",
    "hp.p99_jct_s",
    "spot.eviction_rate",
    "spot.mean_queue_s",
    "idle_gpu_hours",
)


def _run(out: Path, *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["sim", "shared", "--out", str(out), *SMALL, *extra])
    return result.exit_code, result.output


def test_partitioned_and_shared_results(tmp_path: Path) -> None:
    code, output = _run(tmp_path / "a", "--seed", "3")
    assert code == 0, output
    doc = json.loads((tmp_path / "a" / "results.json").read_text())
    assert (tmp_path / "a" / "report.html").read_text().startswith("<!doctype html>")
    meta = doc["meta"]
    window_h = (meta["window"]["end"] - meta["window"]["start"]) / 3600
    part = doc["partition"]
    assert part["slice_nodes"] >= 1 and part["slice_gpus"] >= part["pool_alone.peak_gpus"] > 0
    assert part["slice_gpus"] < meta["pool_model_gpus"]  # hp/spot keep nodes of the model
    modes = ("partitioned", "shared")
    for mode in modes:
        m = doc[mode]
        for key in HEADLINE:
            assert key in m, (mode, key)
        # the warm pools' GPU model alone: a part of the whole
        for cls in ("hp", "spot"):
            assert 0 <= m[f"{cls}.pool_model.jobs"] <= m[f"{cls}.jobs"], mode
            done = m[f"{cls}.pool_model.finished"] + m[f"{cls}.pool_model.unfinished"]
            assert done == m[f"{cls}.pool_model.jobs"], mode
        assert m["spot.pool_model.evictions"] <= m["spot.evictions"], mode
        # nothing lost: every job of the input ended or is counted as open
        assert m["pool.requests"] > 0
        assert m["pool.finished"] + m["pool.unfinished"] == m["pool.requests"], mode
        assert m["trace.finished"] + m["trace.unfinished"] == m["trace.jobs"] > 0, mode
        for cls in ("hp", "spot"):
            assert m[f"{cls}.finished"] + m[f"{cls}.unfinished"] == m[f"{cls}.jobs"], mode
        assert 0.0 <= m["pool.warm_or_standby_fraction"] <= 1.0
        assert 0.0 <= m["spot.eviction_rate"] <= 1.0
        assert m["pool.start_p90_s"] >= 0.0
        # one accounting for both modes: idle = free + held by idle pods, never above the
        # cluster's GPU-hours in the window
        parts = m["idle.free_gpu_hours"] + m["idle.warm_standby_gpu_hours"]
        assert abs(m["idle_gpu_hours"] - parts) <= 1e-9 * max(1.0, parts)
        assert 0.0 < m["idle_gpu_hours"] <= meta["gpus"] * window_h + 1e-6
        assert m["idle_gpu_hours"] + m["hp_spot_gpu_hours"] <= meta["gpus"] * window_h + 1e-6
    # the same input in every mode
    for key in ("pool.requests", "trace.jobs", "hp.jobs", "spot.jobs"):
        assert len({doc[mode][key] for mode in modes}) == 1, key
    assert set(doc["comparison"]) >= set(HEADLINE)
    for row in doc["comparison"].values():
        assert set(row) == {"partitioned", "shared", "change_pct"}
    # same seed, same file; another seed, another file
    code, output = _run(tmp_path / "b", "--seed", "3")
    assert code == 0, output
    same = (tmp_path / "b" / "results.json").read_text()
    assert same == (tmp_path / "a" / "results.json").read_text()
    code, output = _run(tmp_path / "c", "--seed", "4")
    assert code == 0, output
    assert (tmp_path / "c" / "results.json").read_text() != same


def test_bad_input_is_one_line_and_nonzero(tmp_path: Path) -> None:
    code, output = _run(tmp_path, "--pool-model", "no-such-gpu")
    assert code != 0
    assert "pool_model" in output and len(output.strip().splitlines()) == 1
    code, output = _run(tmp_path, "--sessions-per-hour", "0")
    assert code != 0 and "sessions_per_hour" in output
    assert not (tmp_path / "results.json").exists()
