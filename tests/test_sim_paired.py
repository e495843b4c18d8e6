"""Job outcomes of a trace run and the paired bootstrap of two runs (``stoker.sim.paired``)."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stoker.sim.paired import (
    MARGIN,
    METRICS,
    VERDICTS,
    Change,
    JobOutcomes,
    PairedError,
    Tally,
    _weighted_percentile,
    compare_runs,
    find_runs,
    job_metrics,
    jobs_file,
    paired_bootstrap,
    tally,
)


def _outcomes(n_spot: int = 300, n_hp: int = 200, seed: int = 1) -> JobOutcomes:
    rng = np.random.default_rng(seed)
    n = n_spot + n_hp
    spot = np.array([True] * n_spot + [False] * n_hp)
    queue = rng.exponential(1000.0, n)
    run = rng.exponential(5000.0, n)
    evictions = np.where(spot, rng.poisson(0.2, n), 0)
    return JobOutcomes(
        name=np.array([f"job-{i:04d}" for i in range(n)], dtype=object),
        spot=spot,
        gpu_pool=np.array(["A100"] * n, dtype=object),
        gpus=np.ones(n),
        submitted=np.arange(n, dtype=float),
        queue_s=queue,
        jct_s=queue + run,
        evictions=evictions.astype(np.int64),
        periods_ok=np.where(spot, rng.integers(1, 5, n), 0).astype(np.int64),
    )


def _with(o: JobOutcomes, **changes: np.ndarray) -> JobOutcomes:
    fields = {f: getattr(o, f) for f in o.__slots__}
    return JobOutcomes(**(fields | changes))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0, 1e7, allow_nan=False), min_size=1, max_size=30),
    st.data(),
)
def test_weighted_percentile_is_numpys_on_the_drawn_sample(values, data) -> None:
    counts = np.array(
        [
            data.draw(st.lists(st.integers(0, 4), min_size=len(values), max_size=len(values)))
            for _ in range(3)
        ]
    )
    counts[:, 0] += 1  # every draw holds a job
    got = _weighted_percentile(np.array(values), counts, 99.0)
    for row, g in zip(counts, got, strict=True):
        sample = np.repeat(np.array(values), row)
        assert g == pytest.approx(float(np.percentile(sample, 99.0)), rel=1e-12, abs=1e-9)


def test_weighted_percentile_widens_past_undrawn_longest_jobs() -> None:
    # the 150 longest of 1,000 jobs are never drawn: the first slice of the largest
    # values (79) holds no draw, so the sum widens until it reaches the quantile
    rng = np.random.default_rng(2)
    values = rng.exponential(1000.0, 1000)
    counts = rng.integers(0, 3, size=(4, 1000)).astype(np.float64)
    counts[:, np.argsort(values)[-150:]] = 0
    got = _weighted_percentile(values, counts, 99.0)
    for row, g in zip(counts, got, strict=True):
        sample = np.repeat(values, row.astype(int))
        assert g == pytest.approx(float(np.percentile(sample, 99.0)), rel=1e-12)


def test_the_same_run_is_no_change_with_a_zero_interval() -> None:
    o = _outcomes()
    changes = paired_bootstrap(o, o, resamples=200)
    assert set(changes) == set(METRICS)
    for c in changes.values():
        assert (c.change, c.low, c.high, c.verdict) == (0.0, 0.0, 0.0, "no clear difference")


def test_a_change_every_job_shares_is_found_and_one_jobs_is_not() -> None:
    base = _outcomes()
    # every spot job queues 10 % longer: worse, the interval above 0
    slower = _with(
        base,
        queue_s=np.where(base.spot, base.queue_s * 1.1, base.queue_s),
        jct_s=np.where(base.spot, base.jct_s + base.queue_s * 0.1, base.jct_s),
    )
    c = paired_bootstrap(base, slower, resamples=300)
    assert c["spot.mean_queue_s"].verdict == "worse"
    assert c["spot.mean_queue_s"].change == pytest.approx(0.1)
    assert 0 < c["spot.mean_queue_s"].low <= 0.1 <= c["spot.mean_queue_s"].high + 1e-12
    assert c["hp.mean_queue_s"].verdict == "no clear difference"
    # one HP job waits a day less: the mean moves, but a draw without that job (about a
    # third of them) sees no change, so it is not told apart
    i = int(np.flatnonzero(~base.spot)[0])
    queue = base.queue_s.copy()
    queue[i] = 0.0
    one = _with(base, queue_s=queue, jct_s=base.jct_s - base.queue_s + queue)
    c = paired_bootstrap(base, one, resamples=300)
    assert c["hp.mean_queue_s"].change < 0
    assert c["hp.mean_queue_s"].verdict == "no clear difference"
    assert c["hp.mean_queue_s"].high == 0.0


def test_pairs_by_job_name_in_any_order_and_repeats_with_the_seed() -> None:
    base = _outcomes()
    other = _with(base, queue_s=base.queue_s * 0.8, jct_s=base.jct_s - base.queue_s * 0.2)
    shuffled = other.take(np.random.default_rng(5).permutation(len(other.name)))
    a = paired_bootstrap(base, other, resamples=100, seed=3)
    assert a == paired_bootstrap(base, shuffled, resamples=100, seed=3)
    assert a != paired_bootstrap(base, other, resamples=100, seed=4)
    assert a["spot.mean_queue_s"].verdict == a["hp.mean_queue_s"].verdict == "better"


def test_several_bases_compare_with_their_mean() -> None:
    base = _outcomes()
    half = _with(base, queue_s=base.queue_s * 0.5, jct_s=base.jct_s - base.queue_s * 0.5)
    other = _with(base, queue_s=base.queue_s * 0.75, jct_s=base.jct_s - base.queue_s * 0.25)
    c = paired_bootstrap([base, half], other, resamples=200)
    # the mean of the two bases' queueing is other's, draw by draw: no change at all
    q = c["spot.mean_queue_s"]
    assert q.base == pytest.approx(q.other) and q.change == pytest.approx(0.0, abs=1e-12)
    assert abs(q.low) < 1e-12 and abs(q.high) < 1e-12
    # one base is that run alone
    assert paired_bootstrap([base], other, resamples=50) == paired_bootstrap(
        base, other, resamples=50
    )


def test_runs_of_other_jobs_do_not_pair() -> None:
    base = _outcomes()
    with pytest.raises(PairedError, match="not the same jobs: 500 and 499"):
        paired_bootstrap(base, base.take(np.arange(499)))
    renamed = _with(base, name=np.array([f"x{i}" for i in range(500)], dtype=object))
    with pytest.raises(PairedError, match="not the same jobs"):
        paired_bootstrap(base, renamed)
    flipped = _with(base, spot=~base.spot)
    with pytest.raises(PairedError, match="spot in one run and HP in the other"):
        paired_bootstrap(base, flipped)
    with pytest.raises(PairedError, match="resamples"):
        paired_bootstrap(base, base, resamples=0)


def test_outcomes_read_back_exactly(tmp_path) -> None:
    o = _outcomes()
    path = tmp_path / "jobs" / "medium" / "gfs.csv.gz"
    o.write(path)
    back = JobOutcomes.read(path)
    assert job_metrics(back) == job_metrics(o)
    assert np.array_equal(back.queue_s, o.queue_s) and np.array_equal(back.name, o.name)
    bad = tmp_path / "bad.csv.gz"
    bad.write_bytes(b"not gzip")
    with pytest.raises(PairedError, match=r"bad\.csv\.gz: unreadable"):
        JobOutcomes.read(bad)
    odd = tmp_path / "odd.csv.gz"
    with gzip.open(odd, "wt") as f:
        f.write("name,class,pool,gpus,submitted,queue_s,jct_s,evictions,periods_ok\n")
        f.write("j1,batch,A100,1.0,0.0,1.0,2.0,0,1\n")
    with pytest.raises(PairedError, match=r"odd\.csv\.gz: unreadable job outcomes \('batch'\)"):
        JobOutcomes.read(odd)
    assert not list(tmp_path.rglob("*.part"))  # written aside, renamed whole


def test_find_runs_reads_any_depth_and_refuses_one_run_twice(tmp_path) -> None:
    o = _outcomes(20, 10)
    o.write(jobs_file(tmp_path / "a" / "month" / "low", "low", "gfs"))
    o.write(jobs_file(tmp_path / "b", "low", "lyra"))
    (tmp_path / "b" / "jobs" / "low" / "notes.csv.gz.part").write_text("half")  # not a run
    found = find_runs([tmp_path / "a", tmp_path / "b"])
    assert {load: sorted(r) for load, r in found.items()} == {"low": ["gfs", "lyra"]}
    o.write(jobs_file(tmp_path / "c", "low", "gfs"))
    with pytest.raises(PairedError, match="low/gfs is in both"):
        find_runs([tmp_path / "a", tmp_path / "c"])


def _slower_spot(o: JobOutcomes, factor: float) -> JobOutcomes:
    extra = np.where(o.spot, o.queue_s * (factor - 1), 0.0)
    return _with(o, queue_s=o.queue_s + extra, jct_s=o.jct_s + extra)


def test_replicates_pair_inside_each_and_tally_side_by_side(tmp_path) -> None:
    # two seeds: other jobs each, a policy 10 % slower for spot on one and 2 % on the other
    reps = []
    for rep, (seed, factor) in enumerate(((1, 1.10), (2, 1.02))):
        base = _outcomes(seed=seed)
        base = _with(base, name=np.array([f"s{seed}-{n}" for n in base.name], dtype=object))
        base.write(jobs_file(tmp_path / f"s{rep}", "low", "gfs"))
        _slower_spot(base, factor).write(jobs_file(tmp_path / f"s{rep}", "low", "lend"))
        reps.append(find_runs([tmp_path / f"s{rep}"]))
    # across replicates the jobs differ: they do not pair, and the message names the run
    with pytest.raises(PairedError, match="low/lend against gfs: not the same jobs"):
        compare_runs(
            {"low": {"gfs": reps[0]["low"]["gfs"], "lend": reps[1]["low"]["lend"]}},
            ["gfs"],
            resamples=50,
        )
    each = [compare_runs(r, ["gfs"], resamples=200) for r in reps]
    assert [c["low"]["lend"]["spot.mean_queue_s"].verdict for c in each] == ["worse", "worse"]
    summary = tally(each)
    q = summary["low"]["lend"]["spot.mean_queue_s"].as_dict()
    changes = [c["low"]["lend"]["spot.mean_queue_s"].change for c in each]
    assert q["replicates"] == 2 and q["changes"] == changes
    assert q["mean_change"] == pytest.approx(sum(changes) / 2)
    assert (q["min_change"], q["max_change"]) == (min(changes), max(changes))
    assert [q[v] for v in VERDICTS] == [0, 2, 0]
    hp = summary["low"]["lend"]["hp.mean_queue_s"].as_dict()
    assert hp["changes"] == [0.0, 0.0] and hp["no clear difference"] == 2
    # a policy in one replicate only is counted where it ran
    each[1]["low"]["extra"] = each[1]["low"]["lend"]
    assert tally(each)["low"]["extra"]["spot.mean_queue_s"].as_dict()["replicates"] == 1
    # a load without the base is left out, not an error
    assert compare_runs(reps[0], ["lyra"], resamples=10) == {}
    # within a margin: 10 % and 2 % slower spot is not shown non-inferior at 2 %, and at
    # 15 % it is; the unchanged HP figure is non-inferior, never superior
    assert q["ci_highs"] == [c["low"]["lend"]["spot.mean_queue_s"].high for c in each]
    assert q["within_margin"] == "not shown" and q["margin"] == MARGIN == 0.02
    queue = summary["low"]["lend"]["spot.mean_queue_s"]
    assert queue.within(0.15) == "non-inferior"
    assert summary["low"]["lend"]["hp.mean_queue_s"].within(0.0) == "non-inferior"
    # the base against the slower policy: faster on both seeds, by over 5 % on one only
    flipped = [
        compare_runs(
            {"low": {"gfs": r["low"]["lend"], "lend": r["low"]["gfs"]}}, ["gfs"], resamples=200
        )
        for r in reps
    ]
    faster = tally(flipped)["low"]["lend"]["spot.mean_queue_s"]
    assert faster.within(0.0) == "superior" and faster.within(0.05) == "non-inferior"
    # a compare file's cell reads back as the Change it was written from
    cell = each[0]["low"]["lend"]["spot.mean_queue_s"]
    assert Change.from_dict(cell.as_dict()) == cell
    with pytest.raises(PairedError, match="margin"):
        queue.within(1.5)


def test_margin_verdicts_over_replicates() -> None:
    def t(*highs: float) -> Tally:
        return Tally(highs, ("no clear difference",) * len(highs), highs, highs)

    assert t(-0.05, -0.03).within(0.02) == "superior"
    assert t(-0.05, -0.01).within(0.02) == "non-inferior"
    assert t(-0.05, 0.02).within(0.02) == "non-inferior"  # at the margin: not worse by more
    assert t(-0.05, 0.021).within(0.02) == "not shown"  # one replicate allows worse
    with pytest.raises(PairedError, match="no replicate"):
        t().within(0.02)
