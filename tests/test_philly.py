"""The Philly loader on rows in the upstream format, and on the real file where it is."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from stoker.cli.main import app
from stoker.traces.base import TraceFormatError
from stoker.traces.philly import load_philly

REAL = Path(__file__).resolve().parents[1].parent / "shared/data/philly-adaptdl/philly.csv"
HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"


def write(tmp_path: Path, rows: list[str], header: str = HEADER) -> Path:
    path = tmp_path / "philly.csv"
    path.write_text(header + "".join(r + "\n" for r in rows))
    return path


def test_small_file_in_upstream_format(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        [
            "2017-10-09 07:01:55,66.0,1,66.0,11cb48",
            "2017-10-08 23:59:00,2951.0,12,35412.0,6214e9",
            "2017-10-10 00:00:00,10.0,16,160.0,6214e9",
        ],
    )
    trace = load_philly(tmp_path, hp_share=1.0)  # the folder works as well as the file
    assert trace.notes["epoch"] == "2017-10-08T00:00:00+00:00"
    by_name = {j.name: j for j in trace.jobs}
    first, gang, big = by_name["philly-0"], by_name["philly-1"], by_name["philly-2"]
    assert first.submit_time == 86400 + 7 * 3600 + 60 + 55
    assert (first.tenant, first.gpu_model, first.job_class) == ("11cb48", "philly", "hp")
    assert (gang.worker_num, gang.gpu_request, gang.submit_time) == (2, 6.0, 86340.0)
    assert (big.worker_num, big.gpu_request, big.duration) == (2, 8.0, 10.0)
    assert [j.name for j in trace.jobs] == ["philly-1", "philly-0", "philly-2"]
    # nodes: the peak concurrent demand is 12 + 1 GPUs (jobs 1 and 0 overlap) -> 2 x 8
    assert [(n.gpu_model, n.gpus) for n in trace.nodes] == [("philly", 8)] * 2
    assert len(load_philly(path, num_nodes=5).nodes) == 5
    assert len(load_philly(path, capacity_factor=2.0).nodes) == 4
    assert all(j.job_class == "spot" for j in load_philly(path, hp_share=0.0).jobs)


def test_split_is_seeded(tmp_path: Path) -> None:
    rows = [f"2017-10-09 00:{i // 60:02d}:{i % 60:02d},60,1,60,c{i % 3}" for i in range(600)]
    path = write(tmp_path, rows)
    a = [j.job_class for j in load_philly(path, seed=1).jobs]
    b = [j.job_class for j in load_philly(path, seed=1).jobs]
    c = [j.job_class for j in load_philly(path, seed=2).jobs]
    assert a == b and a != c
    assert 0.8 < a.count("hp") / len(a) < 0.97


@pytest.mark.parametrize(
    ("rows", "header", "match"),
    [
        ([], "timestamp,duration,num_gpus,gpu_time\n", "missing column.*cluster"),
        ([], HEADER, "no jobs"),
        (["yesterday,1,1,1,c"], HEADER, "row 2: timestamp"),
        (["2017-10-09 00:00:00,-5,1,1,c"], HEADER, "row 2: duration must be >= 0"),
        (["2017-10-09 00:00:00,5,0,1,c"], HEADER, "row 2: num_gpus must be >= 1"),
        (["2017-10-09 00:00:00,5,1.5,1,c"], HEADER, "row 2: num_gpus '1.5' is not a valid int"),
        (["2017-10-09 00:00:00,5,1,5,c", "2017-10-09 00:00:00,x,1,5,c"], HEADER, "row 3: dur"),
        (["2017-10-09 00:00:00,inf,1,5,c"], HEADER, "row 2: duration 'inf' is not finite"),
    ],
)
def test_bad_files_name_row_and_column(
    tmp_path: Path, rows: list[str], header: str, match: str
) -> None:
    with pytest.raises(TraceFormatError, match=match):
        load_philly(write(tmp_path, rows, header))


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="no such file"):
        load_philly(tmp_path / "nope")
    path = write(tmp_path, ["2017-10-09 00:00:00,5,1,5,c"])
    with pytest.raises(ValueError, match="hp_share"):
        load_philly(path, hp_share=1.5)
    with pytest.raises(ValueError, match="gpus_per_node"):
        load_philly(path, gpus_per_node=0)


@pytest.mark.skipif(not REAL.exists(), reason="the shared Philly trace is not beside the project")
def test_real_file() -> None:
    trace = load_philly(REAL)
    assert len(trace.jobs) == 82_247
    assert len({j.tenant for j in trace.jobs}) == 15
    assert trace.notes["epoch"] == "2017-09-04T00:00:00+00:00"
    hp = sum(j.job_class == "hp" for j in trace.jobs) / len(trace.jobs)
    assert 0.88 < hp < 0.90
    assert trace.jobs[0].submit_time == 10 * 3600 + 30 * 60 + 41  # 2017-09-04 10:30:41
    # gangs split a job's GPUs into equal workers without losing any
    with REAL.open(newline="") as fh:
        expect = sum(int(float(row["num_gpus"])) for row in csv.DictReader(fh))
    assert sum(j.gpu_request * j.worker_num for j in trace.jobs) == expect
    assert len(trace.nodes) * 8 >= 1106


def synthetic_philly(tmp_path: Path, weeks: int = 5) -> Path:
    """Jobs in the upstream format with a daily pattern, two tenants, one an hour each."""
    rng = np.random.default_rng(0)
    start = np.datetime64("2017-09-04T00:00:00")
    rows = []
    for hour in range(weeks * 7 * 24):
        busy = 9 <= hour % 24 < 17
        for tenant, gpus in (("aa", 4 if busy else 1), ("bb", 8 if busy else 2)):
            when = start + np.timedelta64(hour * 3600 + int(rng.integers(0, 60)), "s")
            stamp = str(when).replace("T", " ")
            rows.append(f"{stamp},3000,{gpus},{3000 * gpus},{tenant}")
    return write(tmp_path, rows)


def test_forecast_eval_command(tmp_path: Path) -> None:
    path = synthetic_philly(tmp_path)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "forecast",
            "eval",
            "--trace-path",
            str(path),
            "--out",
            str(out),
            "-f",
            "naive",
            "-f",
            "ridge",
            "--refit-hours",
            "168",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "naive MAE" in result.output
    data = json.loads((out / "results.json").read_text())
    assert list(data["forecasters"]) == ["naive", "ridge"]
    naive = data["forecasters"]["naive"]
    assert [t["tenant"] for t in naive["per_tenant"]] == ["aa", "bb"]
    assert 0.0 <= naive["coverage_q90"] <= 1.0 and naive["mae"] >= 0
    assert len(naive["per_horizon_mae"]) == 4
    assert data["protocol"]["warmup_weeks"] == 4
    # one GPU pool: its forecast sums both tenants', scored against their summed peaks
    assert [p["pool"] for p in naive["per_pool"]] == [
        data["forecasters"]["naive"]["per_tenant"][0]["pool"]
    ]
    assert naive["per_pool"][0]["mean_actual"] >= max(t["mean_actual"] for t in naive["per_tenant"])
    assert data["trace_notes"]["holidays"] == "us"


def test_forecast_eval_on_generated_v2026_jobs_prints_json(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "forecast", "eval", "--trace", "v2026", "--days", "29", "-f", "naive", "-f",
            "ridge", "--refit-hours", "168", "--out", str(tmp_path), "--json",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["trace_notes"]["holidays"] == "china"
    assert data["trace_notes"]["epoch"].startswith("2024-03-01T00:00:00+08:00")
    ridge = data["forecasters"]["ridge"]
    pools = {p["pool"] for p in ridge["per_pool"]}
    assert pools == {t["pool"] for t in ridge["per_tenant"]} and len(pools) >= 2
    assert len({t["tenant"] for t in ridge["per_tenant"]}) > 20
    assert json.loads((tmp_path / "results.json").read_text()) == data


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trace", "openb"], "--trace must be one of philly, v2026"),
        (["-f", "prophet"], "--forecaster must be one of"),
        (["--warmup-weeks", "9"], "warmup_min must be in"),
    ],
)
def test_forecast_eval_errors(tmp_path: Path, args: list[str], message: str) -> None:
    path = synthetic_philly(tmp_path, weeks=1) if args[0] == "--warmup-weeks" else tmp_path
    result = CliRunner().invoke(app, ["forecast", "eval", "--trace-path", str(path), *args])
    assert result.exit_code == 1
    assert message in result.output


def test_forecast_eval_missing_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["forecast", "eval", "--trace-path", str(tmp_path / "nope.csv")]
    )
    assert result.exit_code == 1
    assert "nope.csv: no such file" in result.output
