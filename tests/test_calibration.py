"""The simulator calibrated by the live path: ``calibrate`` measures the runtime's steps on
this host and writes calibration.json; ``stoker sim firepool --calibration`` draws those
steps from it and says in results.json which durations were measured and which assumed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from stoker.api.calibration import STEPS, Calibration, Measured
from stoker.api.config import ConfigError
from stoker.sim.params import CUDA_INIT, RuntimeParams
from test_sim_cli import SMALL, _app

SMALL_CAL = Calibration(
    source="a test",
    profile="plain",
    durations={
        "bind": Measured.of([0.004, 0.005, 0.006]),
        "rebind": Measured.of([0.002, 0.003]),
        "recycle": Measured.of([0.010]),
        "promote": Measured.of([0.002]),
        "stop": Measured.of([0.050, 0.070]),
    },
)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) not installed")
@pytest.mark.timeout(180)
def test_calibrate_measures_each_step_on_this_host(tmp_path: Path) -> None:
    from stoker.runtime.calibrate import calibrate

    cal = calibrate(tmp_path / "calibration.json", tmp_path / "work", repeats=2)
    again = Calibration.load(tmp_path / "calibration.json")
    assert again == cal and set(cal.durations) == set(STEPS)
    counts = {k: len(v.samples_s) for k, v in cal.durations.items()}
    assert counts == {"bind": 2, "rebind": 2, "recycle": 2, "promote": 2, "stop": 4}
    for got in cal.durations.values():
        assert all(0 < x < 60 for x in got.samples_s)
        assert got.p50_s is not None and got.p90_s is not None and got.p50_s <= got.p90_s
    assert not list((tmp_path / "work" / "runtime" / "pods").iterdir())  # nothing left


def test_calibrated_params_draw_measured_steps_and_keep_the_rest() -> None:
    params = RuntimeParams().calibrated(SMALL_CAL, "cal.json")
    rng = np.random.default_rng(0)
    assert {params.bind.sample(rng) for _ in range(50)} == {0.004, 0.005, 0.006}
    assert params.recycle.sample(rng) == 0.010
    # promotion: the measured local part plus CUDA initialisation, still assumed
    promote = [params.promote.sample(rng) for _ in range(200)]
    assert CUDA_INIT.a + 0.002 <= min(promote) and max(promote) <= CUDA_INIT.b + 0.002
    assert params.pod_start == RuntimeParams().pod_start  # the paper's, untouched
    table = params.table()
    assert table["bind"]["measured"] and "cal.json" in str(table["bind"]["source"])
    assert table["promote"]["measured"] and "CUDA" in str(table["promote"]["assumed_part"])
    assert not table["pod_start"]["measured"] and not table["stop"]["assumed_part"]
    # scaled (the sweep) keeps it measured
    assert params.bind.scaled(2.0).samples == (0.008, 0.010, 0.012)


def test_sim_firepool_with_a_calibration_file(tmp_path: Path) -> None:
    cal = tmp_path / "calibration.json"
    SMALL_CAL.write(cal)
    args = ["sim", "firepool", "--calibration", str(cal), *SMALL, "--no-sweep"]
    runs = []
    for out in ("a", "b"):
        res = CliRunner().invoke(_app(), [*args, "--out", str(tmp_path / out)])
        assert res.exit_code == 0, res.output
        runs.append(json.loads((tmp_path / out / "results.json").read_text()))
    assert runs[0] == runs[1]  # same seed, same results
    table = runs[0]["assumptions"]["runtime"]
    measured = {k for k, v in table.items() if v["measured"]}
    assert measured == set(STEPS)
    assert not table["pod_start"]["measured"] and "Firepool" in table["pod_start"]["source"]
    assert "CUDA" in table["promote"]["assumed_part"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "calibration"),
        ('{"source": "x", "profile": "p", "durations": {"bind": {"samples_s": []}}}', "samples_s"),
        ('{"source": "x", "profile": "p", "durations": {"boot": {"samples_s": [1]}}}', "boot"),
        ('{"source": "x", "profile": "p", "durations": {}, "extra": 1}', "extra"),
        ('{"source": "x", "profile": "p", "durations": {"stop": {"samples_s": [-1]}}}', "finite"),
    ],
)
def test_a_bad_calibration_file_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    cal = tmp_path / "calibration.json"
    cal.write_text(text)
    with pytest.raises(ConfigError, match=message):
        Calibration.load(cal)
    res = CliRunner().invoke(_app(), ["sim", "firepool", "--calibration", str(cal), *SMALL])
    assert res.exit_code == 1 and str(cal) in res.output.replace("\n", "")
