"""Trace loaders (GFS v2026 release format, openb), the calibrated generator and its check."""

from __future__ import annotations

import csv
import hashlib
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import stoker.traces.load as trace_load
from stoker.cli.main import app
from stoker.traces import calibration as cal
from stoker.traces.check import compare, published, published_from_aggregates
from stoker.traces.check import published_from_calibration as embedded
from stoker.traces.generator import GeneratorConfig, fleet_nodes, generate_jobs
from stoker.traces.gfs_v2026 import (
    JOB_COLUMNS,
    TraceFormatError,
    load_jobs,
    load_nodes,
    load_v2026,
    write_jobs,
)
from stoker.traces.load import FLEET_REBUILT, NODE_LIST_NOTE, load_trace, shared_data_dir
from stoker.traces.openb import load_openb

DATA = shared_data_dir()
V2026 = DATA / "alibaba-spot-v2026" if DATA else None
OPENB = DATA / "alibaba-gpu-v2023" if DATA else None
needs_data = pytest.mark.skipif(DATA is None, reason="../shared/data is not here")

# rows as the upstream README shows them, plus a fractional request
NODES_CSV = """gpu_model,gpu_capacity_num,cpu_num,node_name
GPU-series-1,4,192,0
GPU-series-1,1,192,1
A10,1,128,2
A100-SXM4-80GB,8,128,3
"""
JOBS_CSV = (
    "job_name,organization,gpu_model,cpu_request,gpu_request,worker_num,submit_time,duration,"
    "job_type\n"
    """239255,13,A10,20,1,1,0,2764799,HP
253689,13,A10,8,1,1,0,15897599,HP
437260,57,A100-SXM4-80GB,15,1,16,9589663,41060,Spot
437261,57,A100-SXM4-80GB,15.0,1.0,94,9589663.0,71718.0,Spot
500000,55,A10,4,0.01,1,12,30,HP
"""
)

# a short, scaled run shared by the generator tests (about 6,000 jobs)
SHORT = GeneratorConfig(seed=7, days=21, start_day=60, scale=0.25)


@pytest.fixture(scope="module")
def short_jobs():
    return generate_jobs(SHORT)


def _write(tmp_path: Path, nodes: str = NODES_CSV, jobs: str = JOBS_CSV) -> Path:
    (tmp_path / "node_info_df.csv").write_text(nodes)
    (tmp_path / "job_info_df.csv").write_text(jobs)
    return tmp_path


def test_v2026_loads_upstream_rows(tmp_path: Path) -> None:
    trace = load_v2026(_write(tmp_path))
    assert [(n.name, n.gpu_model, n.gpus, n.cpu) for n in trace.nodes] == [
        ("0", "GPU-series-1", 4, 192.0),
        ("1", "GPU-series-1", 1, 192.0),
        ("2", "A10", 1, 128.0),
        ("3", "A100-SXM4-80GB", 8, 128.0),
    ]
    by_name = {j.name: j for j in trace.jobs}
    spot = by_name["437261"]
    assert (spot.tenant, spot.gpu_model, spot.job_class) == ("57", "A100-SXM4-80GB", "spot")
    assert (spot.gpu_request, spot.worker_num, spot.submit_time, spot.duration) == (
        1.0,
        94,
        9589663.0,
        71718.0,
    )
    assert by_name["500000"].gpu_request == pytest.approx(0.01)
    assert by_name["239255"].job_class == "hp"
    # sorted by submit time, then name
    assert [j.name for j in trace.jobs] == ["239255", "253689", "500000", "437260", "437261"]


def test_v2026_job_file_alone_uses_given_nodes(tmp_path: Path) -> None:
    (tmp_path / "jobs.csv").write_text(JOBS_CSV)
    with pytest.raises(TraceFormatError, match=r"node_info_df\.csv"):
        load_v2026(tmp_path / "jobs.csv")
    trace = load_v2026(tmp_path / "jobs.csv", nodes=fleet_nodes())
    assert len(trace.jobs) == 5 and len(trace.nodes) == cal.FLEET_NODES


@pytest.mark.parametrize(
    ("old", "new", "match"),
    [
        ("12,30,HP", "12,30,Preemptible", "job_type: expected HP or Spot"),
        ("4,0.01,1,12", "4,x,1,12", "gpu_request: not a number"),
        ("4,0.01,1,12", "4,0,1,12", "gpu_request: must be above 0"),
        ("4,0.01,1,12", "4,0.01,0,12", "worker_num: not a count"),
        ("4,0.01,1,12,30", "4,0.01,1,12,-5", "duration: negative"),
        ("4,0.01,1,12,30", "4,0.01,1,,30", "submit_time: missing"),
        ("4,0.01,1,12,30,HP", "4,0.01,1,12", "job_type: expected HP or Spot, got ''"),
        ("500000,55,A10", "500000, ,A10", "organization: empty"),
    ],
)
def test_v2026_bad_values_name_file_line_and_column(
    tmp_path: Path, old: str, new: str, match: str
) -> None:
    assert old in JOBS_CSV
    _write(tmp_path, jobs=JOBS_CSV.replace(old, new, 1))
    with pytest.raises(TraceFormatError, match=match) as info:
        load_v2026(tmp_path)
    assert "job_info_df.csv:" in str(info.value)


def test_v2026_missing_column_and_file(tmp_path: Path) -> None:
    _write(tmp_path, jobs=JOBS_CSV.replace("job_type", "kind"))
    with pytest.raises(TraceFormatError, match=r"missing column.*job_type"):
        load_jobs(tmp_path)
    with pytest.raises(TraceFormatError, match="no such file"):
        load_nodes(tmp_path / "nope")
    _write(tmp_path, nodes=NODES_CSV.replace("A10,1,128", "A10,1.5,128"))
    with pytest.raises(TraceFormatError, match="gpu_capacity_num"):
        load_nodes(tmp_path)


@needs_data
def test_v2026_real_node_list() -> None:
    nodes = load_nodes(V2026)
    assert len(nodes) == cal.FLEET_NODES == 4_278
    assert sum(n.gpus for n in nodes) == cal.FLEET_GPUS == 10_412
    # the rebuilt fleet has the same shapes as the real list
    shapes = sorted((n.gpu_model, n.gpus, n.cpu) for n in nodes)
    assert shapes == sorted((n.gpu_model, n.gpus, n.cpu) for n in fleet_nodes())


@needs_data
def test_openb_real_files() -> None:
    trace = load_openb(OPENB)
    assert len(trace.nodes) == 1_213 and sum(n.gpus for n in trace.nodes) == 6_212
    # 8,152 pods, of which 1,088 CPU-only pods are left out
    assert trace.notes["cpu_only_pods_dropped"] == "1088"
    assert len(trace.jobs) == 8_152 - 1_088
    classes = {j.tenant: j.job_class for j in trace.jobs}
    assert classes == {"LS": "hp", "BE": "spot", "Burstable": "hp", "Guaranteed": "hp"}
    requests = np.array([j.gpu_request for j in trace.jobs])
    assert ((requests > 0) & (requests < 1)).sum() == 3_078  # the GPU-sharing pods
    assert set(requests[requests >= 1].tolist()) == {1.0, 2.0, 4.0, 8.0}
    biggest = {}
    for n in trace.nodes:
        biggest[n.gpu_model] = max(biggest.get(n.gpu_model, 0), n.gpus)
    assert all(j.gpu_request <= biggest[j.gpu_model] for j in trace.jobs)
    assert all(j.duration >= 0 for j in trace.jobs)


def test_openb_small_files_and_errors(tmp_path: Path) -> None:
    (tmp_path / "openb_node_list_gpu_node.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\nn1,96000,786432,8,V100M32\n"
    )
    header = (
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
        "creation_time,deletion_time,scheduled_time\n"
    )
    pods = (
        "p0,12000,16384,1,1000,,LS,Running,0,100,10\n"
        "p1,6000,12288,1,460,,BE,Running,5,50,\n"
        "p2,88000,327680,8,1000,,Burstable,Succeeded,20,40,20\n"
        "p3,4000,15258,0,0,,BE,Running,1,2,1\n"
        "p4,16000,32768,1,1000,V100M32|P100,Guaranteed,Running,30,60,31\n"
    )
    (tmp_path / "openb_pod_list_default.csv").write_text(header + pods)
    trace = load_openb(tmp_path)
    jobs = {j.name: j for j in trace.jobs}
    assert set(jobs) == {"p0", "p1", "p2", "p4"}
    assert (jobs["p0"].job_class, jobs["p0"].duration, jobs["p0"].submit_time) == ("hp", 90, 0)
    assert (jobs["p1"].job_class, jobs["p1"].gpu_request, jobs["p1"].duration) == (
        "spot",
        pytest.approx(0.46),
        45,  # never scheduled: deletion - creation
    )
    assert (jobs["p2"].gpu_request, jobs["p2"].gpu_model) == (8.0, "V100M32")  # only 8-GPU node
    assert jobs["p4"].gpu_model == "V100M32" and jobs["p4"].cpu_request == 16.0
    bad = header + "p5,1000,1,2,500,,LS,Running,0,1,0\n"
    (tmp_path / "openb_pod_list_default.csv").write_text(bad)
    with pytest.raises(TraceFormatError, match="gpu_milli"):
        load_openb(tmp_path)
    (tmp_path / "openb_pod_list_default.csv").write_text(header + "p6,1,1,1,1000,,XX,R,0,1,0\n")
    with pytest.raises(TraceFormatError, match="column qos"):
        load_openb(tmp_path)


def test_generator_round_trip(tmp_path: Path, short_jobs) -> None:
    write_jobs(tmp_path / "job_info_df.csv", short_jobs)
    header = (tmp_path / "job_info_df.csv").read_text().splitlines()[0]
    assert header == ",".join(JOB_COLUMNS)
    back = load_jobs(tmp_path)
    assert len(back) == len(short_jobs)
    for a, b in zip(short_jobs, back, strict=True):
        assert (a.name, a.tenant, a.gpu_model, a.job_class, a.worker_num) == (
            b.name,
            b.tenant,
            b.gpu_model,
            b.job_class,
            b.worker_num,
        )
        assert a.gpu_request == pytest.approx(b.gpu_request, abs=1e-4)
        assert (a.submit_time, a.duration, a.cpu_request) == (
            b.submit_time,
            b.duration,
            b.cpu_request,
        )


def test_generator_is_deterministic(tmp_path: Path, short_jobs) -> None:
    write_jobs(tmp_path / "a.csv", short_jobs)
    write_jobs(tmp_path / "b.csv", generate_jobs(SHORT))
    cfg = GeneratorConfig(seed=8, days=21, start_day=60, scale=0.25)
    write_jobs(tmp_path / "c.csv", generate_jobs(cfg))

    def digest(name: str) -> str:
        return hashlib.sha256((tmp_path / name).read_bytes()).hexdigest()

    assert digest("a.csv") == digest("b.csv")
    assert digest("a.csv") != digest("c.csv")


def test_generator_window_and_scale(short_jobs) -> None:
    submits = np.array([j.submit_time for j in short_jobs])
    assert submits.min() == 0 and submits.max() < SHORT.days * 86_400
    published_jobs = sum(
        cal.DAILY_HP_JOBS[d] + cal.DAILY_SPOT_JOBS[d]
        for d in range(SHORT.start_day, SHORT.start_day + 21)
    )
    expected = published_jobs * SHORT.scale + cal.INITIAL_JOBS * SHORT.scale
    assert len(short_jobs) == pytest.approx(expected, rel=0.05)
    for bad in (dict(days=0), dict(scale=0), dict(start_day=180, days=10)):
        with pytest.raises(ValueError):
            GeneratorConfig(**bad)


def test_generator_calibration_close(short_jobs) -> None:
    rows = {(r.section, r.name): r for r in compare(short_jobs, embedded(), **_window())}
    # HP share of the window's jobs within 2 points
    hp = rows[("volume", "HP share of jobs")]
    assert abs(hp.generated - hp.published) < 0.02
    # worker-count distribution: single-worker share within 3 points, multi-worker present
    single = rows[("worker_num share", "1")]
    assert abs(single.generated - single.published) < 0.03
    assert rows[("worker_num share", "2 to 8")].generated > 0.03
    # fractional requests (GPU demand bucket "0") near the published 10 %
    assert abs(rows[("GPU demand share", "0")].generated - 0.104) < 0.03
    # the load of the window within 25 % of the published concurrency
    assert abs(rows[("load", "mean concurrent GPUs (per unit scale)")].rel_error) < 0.25
    # spot durations follow the published median within 15 %
    assert abs(rows[("duration", "Spot median (s)")].rel_error) < 0.15
    # the hour-of-day shape of submissions follows the published one
    assert rows[("time shape", "hour-of-day corr.")].generated > 0.6
    assert all(j.gpu_model in cal.MODEL_ORDER for j in short_jobs)
    assert {j.tenant for j in short_jobs} <= {o.name for o in cal.ORGANIZATIONS}


def _window() -> dict[str, float]:
    return {"days": SHORT.days, "start_day": SHORT.start_day, "scale": SHORT.scale}


def test_tenants_have_diurnal_hp_demand(short_jobs) -> None:
    # the biggest tenants submit more HP jobs in the working day (10-18 h) than in the
    # night (1-9 h), as the published hour-of-day profile does (ratio 1.8); a flat
    # process would give about 1
    hod = np.array(cal.HOUR_OF_DAY_JOBS, dtype=float)
    assert hod[10:18].sum() / hod[1:9].sum() > 1.6
    for tenant in ("13", "57", None):  # the two biggest tenants, and all together
        t = np.array(
            [
                j.submit_time
                for j in short_jobs
                if j.job_class == "hp" and tenant in (None, j.tenant)
            ]
        )
        counts = np.bincount(((t[t > 0] % 86_400) // 3_600).astype(int), minlength=24)
        assert counts[10:18].sum() / counts[1:9].sum() > 1.3, tenant


@needs_data
def test_embedded_calibration_matches_aggregates() -> None:
    files = published_from_aggregates(V2026 / "aggregates")
    mine = embedded()
    for field in mine.__dataclass_fields__:
        if field == "source":
            continue
        a, b = getattr(files, field), getattr(mine, field)
        if isinstance(a, dict):
            assert a.keys() == b.keys(), field
            assert [a[k] for k in b] == pytest.approx(list(b.values()), rel=5e-3), field
        elif isinstance(a, tuple):
            assert a == pytest.approx(b, rel=1e-3, abs=0.1), field
        else:
            assert a == pytest.approx(b, rel=1e-3), field
    hours = {
        r["hour_of_day"]: r
        for r in csv.DictReader((V2026 / "aggregates/extra_hour_of_day_patterns.csv").open())
    }
    assert [float(hours[str(h)]["gpu_seconds"]) for h in range(24)] == pytest.approx(
        cal.HOUR_OF_DAY_GPU_SECONDS
    )
    assert [float(hours[str(h)]["median_duration"]) for h in range(24)] == pytest.approx(
        cal.HOUR_OF_DAY_MEDIAN_DURATION_S
    )
    assert len(cal.ORGANIZATIONS) == cal.TENANTS == 84
    assert sum(o.jobs for o in cal.ORGANIZATIONS) == cal.TOTAL_JOBS


def test_published_falls_back_to_calibration(tmp_path: Path) -> None:
    assert published(tmp_path / "absent").source.startswith("embedded")
    assert published(None).source.startswith("embedded")


def test_load_trace_kinds(tmp_path: Path) -> None:
    trace = load_trace("v2026", None, 3, days=7, start_day=40, scale=0.05)
    assert sum(n.gpus for n in trace.nodes) == cal.FLEET_GPUS
    assert trace.jobs and all(j.submit_time < 7 * 86_400 for j in trace.jobs)
    real = load_trace("v2026", _write(tmp_path), 0, days=1)
    assert [j.name for j in real.jobs] == ["239255", "253689", "500000"]
    with pytest.raises(ValueError, match="kind"):
        load_trace("alibaba", None, 0)
    with pytest.raises(ValueError, match="path"):
        load_trace("openb", None, 0)
    with pytest.raises(ValueError, match="scale"):
        load_trace("v2026", tmp_path, 0, scale=0.5)


def test_the_data_folder_beside_the_checkout_is_found_from_any_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # <root>/checkout/src/stoker/traces/load.py finds <root>/shared/data from anywhere (the
    # lookup once went one folder too high and found it only from the checkout itself)
    data = tmp_path / "shared" / "data"
    data.mkdir(parents=True)
    module = tmp_path / "checkout" / "src" / "stoker" / "traces" / "load.py"
    monkeypatch.setattr(trace_load, "__file__", str(module))
    monkeypatch.delenv(trace_load.DATA_ENV, raising=False)
    elsewhere = tmp_path / "elsewhere" / "deeper"
    elsewhere.mkdir(parents=True)
    monkeypatch.chdir(elsewhere)
    assert shared_data_dir() == data
    monkeypatch.setenv(trace_load.DATA_ENV, str(tmp_path / "elsewhere"))
    assert shared_data_dir() == tmp_path / "elsewhere"  # the variable comes first


def test_a_v2026_trace_says_which_node_list_it_has(tmp_path: Path) -> None:
    # generated jobs on a data folder without the node list: the fleet rebuilt, and said
    bare = load_trace("v2026", None, 3, days=1, start_day=40, scale=0.01, data_dir=tmp_path)
    assert bare.notes[NODE_LIST_NOTE] == FLEET_REBUILT
    assert sum(n.gpus for n in bare.nodes) == cal.FLEET_GPUS
    folder = tmp_path / trace_load.V2026_DIR
    folder.mkdir()
    _write(folder)
    real = load_trace("v2026", None, 3, days=1, start_day=40, scale=0.01, data_dir=tmp_path)
    assert real.notes[NODE_LIST_NOTE] == str(folder / "node_info_df.csv")
    assert len(real.nodes) == 4  # NODES_CSV's
    # a release folder's own node list is the one named, whatever the data folder has
    (tmp_path / "release").mkdir()
    own = _write(tmp_path / "release")
    loaded = load_trace("v2026", own, 0, data_dir=tmp_path)
    assert loaded.notes[NODE_LIST_NOTE] == str(own / "node_info_df.csv")
    # ... and the data folder's is not even read then (a broken one would raise)
    (folder / "node_info_df.csv").write_text("not,a,node,list\n1,2\n")
    again = load_trace("v2026", own, 0, data_dir=tmp_path)
    assert [n.name for n in again.nodes] == [n.name for n in loaded.nodes]
    with pytest.raises(TraceFormatError):
        load_trace("v2026", None, 3, days=1, start_day=40, scale=0.01, data_dir=tmp_path)
    # a job file alone takes the data folder's list, and names it
    _write(folder)
    (tmp_path / "jobs-only").mkdir()
    alone = (own / "job_info_df.csv").rename(tmp_path / "jobs-only" / "job_info_df.csv")
    bare_release = load_trace("v2026", alone, 0, data_dir=tmp_path)
    assert bare_release.notes[NODE_LIST_NOTE] == str(folder / "node_info_df.csv")


def test_cli_generate_and_check(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "gen"
    args = ["--days", "3", "--start-day", "50", "--scale", "0.05"]
    res = runner.invoke(app, ["traces", "generate", "--out", str(out), "--seed", "2", *args])
    assert res.exit_code == 0, res.output
    assert (out / "job_info_df.csv").is_file() and (out / "node_info_df.csv").is_file()
    res = runner.invoke(
        app, ["traces", "check", "--trace-path", str(out), *args, "--json", str(out / "c.json")]
    )
    assert res.exit_code == 0, res.output
    assert "HP share of jobs" in res.output and "rel. error" in res.output
    assert (out / "c.json").is_file()
    res = runner.invoke(app, ["traces", "check", "--trace-path", str(tmp_path / "none.csv")])
    assert res.exit_code == 2 and "no such file" in res.output
    res = runner.invoke(app, ["traces", "show", "--trace-path", str(out)])
    assert res.exit_code == 0, res.output
    assert "A100-SXM4-80GB" in res.output and "432" in res.output  # its 432 nodes
    res = runner.invoke(app, ["traces", "show", "--trace", "openb"])
    assert res.exit_code == 2 and "path" in res.output


def test_window_opens_on_its_own_history() -> None:
    # a window from day 10 is the history from day 0 cut at day 10: the jobs running then
    # enter at t=0 with what is left of them, the later ones keep their place
    full = generate_jobs(GeneratorConfig(seed=5, days=13, scale=0.05))
    window = generate_jobs(GeneratorConfig(seed=5, days=3, start_day=10, scale=0.05))
    opens = 10 * 86_400.0

    def key(j):
        return (j.tenant, j.gpu_model, j.gpu_request, j.worker_num, j.job_class)

    running = sorted(
        (*key(j), j.submit_time + j.duration - opens)
        for j in full
        if j.submit_time < opens < j.submit_time + j.duration
    )
    later = sorted(
        (*key(j), j.submit_time - opens, j.duration) for j in full if j.submit_time >= opens
    )
    assert running, "some jobs run across day 10"
    assert sorted((*key(j), j.duration) for j in window if j.submit_time == 0) == running
    assert (
        sorted((*key(j), j.submit_time, j.duration) for j in window if j.submit_time > 0) == later
    )
