"""What `stoker bench local` says beside its figures: the host, a warm job's end steps, and
the flags on a step or process far above the others."""

from __future__ import annotations

import sys
from pathlib import Path

from stoker.broker.bench_host import end_steps_ms, host_environment, outliers


def test_host_environment_names_what_the_figures_depend_on() -> None:
    host = host_environment()
    assert host["kernel"] and host["cgroup"] in ("v1", "v2", "hybrid (v1 + v2)")
    assert host["open_files"]["soft"] > 0 and host["loadavg_1m_start"] >= 0
    assert host["venv"]["path"] == str(Path(sys.prefix).resolve())
    assert host["source"]["mount"].startswith("/") and host["source"]["fstype"]


def test_end_steps_are_medians_between_record_times() -> None:
    rows = [
        {
            "submitted": 0.0,
            "started": 0.002,
            "exited": 0.003,
            "drained": 0.3,
            "finished": 0.301,
            "committed": 0.302,
        },
        {
            "submitted": 1.0,
            "started": 1.004,
            "exited": 1.005,
            "drained": 1.4,
            "finished": 1.402,
            "committed": None,
        },
        {
            "submitted": 2.0,
            "started": 2.003,
            "exited": 2.004,
            "drained": 2.5,
            "finished": 2.501,
            "committed": 2.503,
        },
    ]
    steps = end_steps_ms(rows)
    assert round(steps["queue_and_bind"], 6) == 3.0
    assert round(steps["drain_and_clean"], 6) == 395.0
    assert round(steps["commit"], 6) == 2.0  # of the two records that have it
    assert outliers(steps) == ["drain_and_clean"]


def test_outliers_need_a_ratio_and_a_floor() -> None:
    assert outliers({"a": 1.0, "b": 1.2, "c": 30.0}) == ["c"]
    assert outliers({"a": 0.1, "b": 0.1, "c": 4.0}) == []  # under the floor
    assert outliers({"a": 20.0, "b": 30.0, "c": 40.0}) == []  # all alike
    assert outliers({"a": 100.0}) == []
