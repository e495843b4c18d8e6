"""Traces that contend: --capacity-scale and --time-scale (pure, deterministic, recorded),
and every pod list of the openb release."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stoker.cli.main import app
from stoker.traces.base import Trace, TraceJob, TraceNode
from stoker.traces.gfs_v2026 import TraceFormatError, write_jobs, write_nodes
from stoker.traces.load import shared_data_dir
from stoker.traces.openb import load_openb
from stoker.traces.scale import (
    CapacityScale,
    by_model,
    capacity_scale,
    keep_nodes,
    mean_demand,
    time_scale,
    worker_gpus,
)


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
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="capacity_scale"):
            capacity_scale(trace, bad)


def test_a_share_above_one_adds_copies_of_the_first_nodes() -> None:
    # the cluster a capacity plan would buy: every node, then copies in list order
    trace = _trace()
    out = capacity_scale(trace, 1.25)
    names = [n.name for n in out.nodes]
    assert names[:13] == [n.name for n in trace.nodes]  # every original, in order
    assert names[13:] == ["a0+copy1", "a1+copy1", "a2+copy1", "t0+copy1"]  # ceil(12.5), ceil(3.75)
    assert len(set(names)) == len(names) and out.jobs == trace.jobs
    originals = [trace.nodes[i] for i in (0, 1, 2, 10)]
    assert [(n.gpu_model, n.gpus) for n in out.nodes[13:]] == [
        (n.gpu_model, n.gpus) for n in originals
    ]
    assert "17 of 13 nodes, 108 of 83 GPUs" in out.notes["capacity_scale"]
    # past twice the list, copies of copies' originals again; per model too
    tripled = capacity_scale(trace, "T4=3")
    t4 = [n.name for n in tripled.nodes if n.gpu_model == "T4"]
    assert t4 == ["t0", "t1", "t2"] + [f"t{i}+copy{k}" for k in (1, 2) for i in range(3)]
    assert sum(n.gpu_model == "A100" for n in tripled.nodes) == 10
    assert capacity_scale(trace, 1.25).nodes == out.nodes  # deterministic


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


def test_capacity_scale_reads_the_per_model_and_fill_forms() -> None:
    assert CapacityScale.parse("0.3") == CapacityScale(0.3)
    assert CapacityScale.parse(0.3) == CapacityScale(0.3)
    per = CapacityScale.parse("0.5, T4=0.2 ,A100=1")
    assert per == CapacityScale(0.5, {"T4": 0.2, "A100": 1.0}) and str(per) == "0.5,A100=1,T4=0.2"
    assert CapacityScale.parse("fill:0.8,T4=1") == CapacityScale(1.0, {"T4": 1.0}, fill=0.8)
    assert CapacityScale.parse("1").whole and not CapacityScale.parse("T4=0.5").whole
    for bad, says in (
        ("0", "'0': a share must be finite and > 0, got 0"),
        ("T4=-0.5", "'T4=-0.5': a share must be finite and >= 0, got -0.5"),
        ("inf", "'inf': a share must be finite and > 0, got inf"),
        ("T4=x", "'T4=x': 'x' is not a number"),
        ("=0.5", "no GPU model before '='"),
        ("T4=0.5,T4=0.4", "T4 given twice"),
        ("0.3,fill:0.8", "one of a bare fraction or fill:TARGET"),
        ("fill:-1", "the target must be > 0"),
        ("fill:a", "fill:TARGET needs a number"),
        ("0.3,,T4=1", "an empty part between commas"),
        ("", "empty"),
    ):
        with pytest.raises(ValueError, match=re.escape(says)):
            CapacityScale.parse(bad)


def test_capacity_scale_per_model_keeps_each_models_own_share() -> None:
    trace = _trace()
    out = capacity_scale(trace, "A100=0.2")  # T4 not named: kept whole
    assert [n.name for n in out.nodes] == ["a0", "a1", "t0", "t1", "t2"]
    assert json.loads(out.notes["capacity_per_model"])["A100"] == {
        "nodes": 2,
        "of_nodes": 10,
        "gpus": 16,
        "of_gpus": 80,
        "mean_demand_gpus": pytest.approx(20 * 50.0 / 2 / 1950.0, abs=1e-3),
    }
    with pytest.raises(ValueError, match=r"no GPU model 'V100' in this trace .*A100, T4"):
        capacity_scale(trace, "V100=0.5")
    # a named model's 0 leaves it out (the simulator leaves its jobs out and counts them)
    dropped = capacity_scale(trace, "0.5,T4=0")
    assert [n.name for n in dropped.nodes] == [f"a{i}" for i in range(5)]
    assert dropped.notes["capacity_scale"].endswith("every job but those of T4")
    assert json.loads(dropped.notes["capacity_per_model"])["T4"]["nodes"] == 0
    with pytest.raises(ValueError, match="leaves no node"):
        capacity_scale(trace, "A100=0,T4=0")


def test_fill_sizes_each_model_of_the_real_openb_trace_to_its_demand() -> None:
    """On a real openb pod list: each GPU pool keeps the fewest GPUs (smallest nodes first,
    after one that holds the largest worker) that hold its mean demand over the window at
    the target, and its largest job; a model's demand is what its jobs ask over it."""
    folder = shared_data_dir()
    if folder is None:
        pytest.skip("../shared/data is not here")
    trace = load_openb(folder / "alibaba-gpu-v2023")
    end = trace.jobs[-1].submit_time + 1.0
    start = end - 30 * 86400.0
    demand = mean_demand(trace.jobs, start, end)
    out = capacity_scale(trace, "fill:0.8,A10=1", start, end)
    per_model = json.loads(out.notes["capacity_per_model"])
    every = {m: sorted(g, key=lambda n: n.gpus) for m, g in by_model(trace.nodes).items()}
    kept = by_model(out.nodes)
    assert kept["A10"] == every["A10"]  # named: its own share
    assert out.jobs == trace.jobs and len(out.nodes) < len(trace.nodes) / 50
    for model, nodes in kept.items():
        assert per_model[model]["gpus"] == sum(n.gpus for n in nodes)
        assert per_model[model]["mean_demand_gpus"] == round(demand.get(model, 0.0), 3)
        if model == "A10":
            continue
        jobs = [j for j in trace.jobs if j.gpu_model == model]
        biggest = max(worker_gpus(j) * j.worker_num for j in jobs)
        worker = max(int(worker_gpus(j)) for j in jobs)
        need = max(demand.get(model, 0.0) / 0.8, biggest)
        gpus = sum(n.gpus for n in nodes)
        assert gpus >= need and max(n.gpus for n in nodes) >= worker
        # the fewest: dropping its last (largest) node but one that holds the worker falls short
        assert (
            gpus - max(n.gpus for n in nodes) < need
            or len(nodes) == 1
            or (sorted(n.gpus for n in nodes)[-2] < worker)
        )
    # G2 carries most of the demand and is shrunk to it; a model asked for a fraction of
    # a GPU keeps one node
    assert per_model["G2"]["gpus"] >= demand["G2"] / 0.8 > per_model["G2"]["gpus"] - 8
    assert per_model["V100M16"]["nodes"] == 1
    assert capacity_scale(trace, "fill:0.8,A10=1", start, end).nodes == out.nodes


def test_sim_gfs_capacity_scale_errors_name_the_bad_part(tmp_path: Path) -> None:
    trace = _trace()
    folder = tmp_path / "trace"
    folder.mkdir()
    write_nodes(folder / "node_info_df.csv", trace.nodes)
    write_jobs(folder / "job_info_df.csv", trace.jobs)
    base = ["sim", "gfs", "--trace", "v2026", "--trace-path", str(folder), "--days", "0.01"]
    base += ["--warm-days", "0", "--burn-in-days", "0", "--policy", "yarn-cs", "--no-plots"]
    runner = CliRunner()
    for value, says in (
        ("A100=-2", "capacity_scale: 'A100=-2': a share must be finite and >= 0, got -2"),
        ("V100=0.5", "capacity_scale: no GPU model 'V100' in this trace (its models: A100, T4)"),
        ("fill:x", "capacity_scale: 'fill:x': fill:TARGET needs a number"),
    ):
        out = tmp_path / value.replace(":", "_")
        res = runner.invoke(app, [*base, "--capacity-scale", value, "--out", str(out)])
        assert res.exit_code == 2, res.output
        lines = res.output.strip().splitlines()
        assert lines == [f"error: {says}"] and not (out / "results.json").exists()
    res = runner.invoke(
        app, [*base, "--capacity-scale", "fill:0.5,T4=1", "--out", str(tmp_path / "ok")]
    )
    assert res.exit_code == 0, res.output
    setup = json.loads((tmp_path / "ok" / "results.json").read_text())["meta"]["setup"]
    assert setup["capacity_scale"] == "fill:0.5,T4=1"
    assert setup["capacity_per_model"]["T4"]["nodes"] == 3
    assert setup["capacity_per_model"]["A100"]["nodes"] < 10
    res = runner.invoke(app, [*base, "--capacity-scale", "T4=0", "--out", str(tmp_path / "d")])
    assert res.exit_code == 0, res.output
    meta = json.loads((tmp_path / "d" / "results.json").read_text())["meta"]
    assert meta["jobs_left_out_model_dropped"] == 10 and meta["jobs_left_out_too_large"] == 0
    assert meta["nodes"] == 10
    # a share above 1 runs on the grown cluster, the copies' cards in the core's pools
    res = runner.invoke(app, [*base, "--capacity-scale", "1.5", "--out", str(tmp_path / "g")])
    assert res.exit_code == 0, res.output
    meta = json.loads((tmp_path / "g" / "results.json").read_text())["meta"]
    assert (meta["nodes"], meta["gpus"]) == (15 + 5, 15 * 8 + 5)  # ceil(1.5 x 10), ceil(4.5)
    grown = meta["setup"]
    assert grown["capacity_scale"] == 1.5
    assert grown["capacity_per_model"]["A100"] == {
        "nodes": 15, "of_nodes": 10, "gpus": 120, "of_gpus": 80,
        "mean_demand_gpus": grown["capacity_per_model"]["A100"]["mean_demand_gpus"],
    }  # fmt: skip
