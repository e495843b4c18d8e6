"""Traces that contend: --capacity-scale and --time-scale (pure, deterministic, recorded),
and every pod list of the openb release."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stoker.cli.main import app
from stoker.traces.base import Trace, TraceJob, TraceNode
from stoker.traces.gfs_v2026 import TraceFormatError, write_jobs, write_nodes
from stoker.traces.load import shared_data_dir
from stoker.traces.openb import load_openb
from stoker.traces.scale import capacity_scale, keep_nodes, time_scale


def _trace() -> Trace:
    nodes = [TraceNode(f"a{i}", "A100", 8) for i in range(10)]
    nodes += [TraceNode(f"t{i}", "T4", 1) for i in range(3)]
    jobs = [
        TraceJob(f"j{i}", "org", "A100" if i % 2 else "T4", 1.0, 1, 100.0 * i, 50.0, "hp")
        for i in range(20)
    ]
    return Trace("x", nodes, jobs, "test")


def test_capacity_scale_keeps_a_share_of_each_models_nodes_and_every_job() -> None:
    trace = _trace()
    before = [n.name for n in trace.nodes]
    out = capacity_scale(trace, 0.25)
    assert [n.name for n in out.nodes] == ["a0", "a1", "a2", "t0"]  # ceil(2.5), ceil(0.75)
    assert out.jobs == trace.jobs and [n.name for n in trace.nodes] == before  # input kept
    assert "4 of 13 nodes" in out.notes["capacity_scale"]
    assert capacity_scale(trace, 0.25).nodes == out.nodes  # deterministic
    assert keep_nodes(trace.nodes, 0.01) == [trace.nodes[0], trace.nodes[10]]  # one per model
    assert keep_nodes(trace.nodes, 1.0) == trace.nodes
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="capacity_scale"):
            capacity_scale(trace, bad)


def test_time_scale_compresses_inter_arrival_times_only() -> None:
    trace = _trace()
    out = time_scale(trace, 4.0)
    assert [j.submit_time for j in out.jobs] == [25.0 * i for i in range(20)]
    assert all(j.duration == 50.0 for j in out.jobs) and out.nodes == trace.nodes
    assert trace.jobs[1].submit_time == 100.0  # the input is untouched
    assert out.notes["time_scale"].startswith("4:")
    with pytest.raises(ValueError, match="time_scale"):
        time_scale(trace, 0.0)


def test_sim_gfs_records_capacity_and_time_scale(tmp_path: Path) -> None:
    trace = _trace()
    folder = tmp_path / "trace"
    folder.mkdir()
    write_nodes(folder / "node_info_df.csv", trace.nodes)
    jobs = [
        TraceJob(f"j{i}", "org", "A100", 8.0, 1, 3600.0 * i, 7200.0, "spot" if i % 3 else "hp")
        for i in range(96)
    ]
    write_jobs(folder / "job_info_df.csv", jobs)
    base = ["sim", "gfs", "--trace", "v2026", "--trace-path", str(folder), "--days", "1"]
    base += ["--warm-days", "1", "--burn-in-days", "0", "--policy", "yarn-cs", "--no-plots"]
    runner = CliRunner()
    out = {}
    for name, extra in (
        ("plain", []),
        ("scaled", ["--capacity-scale", "0.2", "--time-scale", "2"]),
    ):
        res = runner.invoke(app, [*base, *extra, "--out", str(tmp_path / name)])
        assert res.exit_code == 0, res.output
        out[name] = json.loads((tmp_path / name / "results.json").read_text())
    setup = out["scaled"]["meta"]["setup"]
    assert (setup["capacity_scale"], setup["time_scale"]) == (0.2, 2.0)
    assert out["scaled"]["meta"]["nodes"] == 2 + 1 and out["plain"]["meta"]["nodes"] == 13
    # fewer GPUs for the jobs: more of the cluster is allocated
    alloc = lambda d: d["results"]["medium"]["yarn-cs"]["gpu_allocation_rate"]  # noqa: E731
    assert alloc(out["scaled"]) > alloc(out["plain"])
    bad = runner.invoke(app, [*base, "--capacity-scale", "0", "--out", str(tmp_path / "b")])
    assert bad.exit_code != 0 and "capacity_scale" in bad.output


def test_openb_pod_list_without_times_draws_them_from_the_default_list(tmp_path: Path) -> None:
    (tmp_path / "openb_node_list_gpu_node.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,V100M32\n"
    )
    (tmp_path / "openb_pod_list_default.csv").write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
        "creation_time,deletion_time,scheduled_time\n"
        "d0,1000,1,1,1000,,LS,Running,10,110,10\n"
        "d1,1000,1,1,1000,,BE,Running,20,60,20\n"
    )
    variant = tmp_path / "openb_pod_list_multigpu50.csv"
    variant.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
        + "".join(f"m{i},2000,1,{1 + i % 4 // 2 * 3},1000\n" for i in range(40))
        + "c0,2000,1,0,0\n"
    )
    trace = load_openb(variant, seed=3)
    assert len(trace.jobs) == 40 and trace.notes["cpu_only_pods_dropped"] == "1"
    assert {j.gpu_request for j in trace.jobs} == {1.0, 4.0}  # the variant's own shapes
    drawn = {(j.tenant, j.submit_time, j.duration) for j in trace.jobs}
    assert drawn == {("LS", 10.0, 100.0), ("BE", 20.0, 40.0)}  # both default pods drawn
    assert "drawn" in trace.notes["times"]
    assert [j.submit_time for j in load_openb(variant, seed=3).jobs] == [
        j.submit_time for j in trace.jobs
    ]
    (tmp_path / "openb_pod_list_default.csv").unlink()
    with pytest.raises(TraceFormatError, match="default list"):
        load_openb(variant)


@pytest.mark.skipif(shared_data_dir() is None, reason="../shared/data is not here")
def test_every_openb_pod_list_here_loads() -> None:
    folder = shared_data_dir() / "alibaba-gpu-v2023"  # type: ignore[operator]
    files = sorted(folder.glob("openb_pod_list_*.csv"))
    assert len(files) >= 4
    for file in files:
        trace = load_openb(file)
        assert trace.jobs and all(j.gpu_request > 0 and j.duration >= 0 for j in trace.jobs)
        assert {j.job_class for j in trace.jobs} == {"hp", "spot"}
