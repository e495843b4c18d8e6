"""Each forecaster on a clean synthetic daily pattern, the scores, determinism, bad input."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from stoker.forecast import (
    FORECASTERS,
    Cadence,
    ForecastDependencyError,
    ForecastError,
    NotFittedError,
    SeriesKey,
    make_forecaster,
)
from stoker.forecast.evaluate import coverage, mae, walk_forward
from stoker.forecast.naive import NaiveLastWeek

DAY = 1440
WEEK = 7 * DAY


def daily_pattern(weeks: int = 5, noise: float = 0.0, seed: int = 0) -> dict[SeriesKey, np.ndarray]:
    """Three tenants of different sizes: a business-hours bump every day, nothing else."""
    rng = np.random.default_rng(seed)
    minute = np.arange(weeks * WEEK)
    hour = (minute % DAY) // 60
    busy = ((hour >= 9) & (hour < 17)).astype(float)
    out = {}
    for i, (base, amp) in enumerate([(2.0, 6.0), (10.0, 30.0), (0.0, 3.0)]):
        values = base + amp * busy
        if noise:
            values = np.maximum(0.0, values + rng.normal(0, noise * (1 + amp), len(minute)))
        out[SeriesKey(f"t{i}", "A100")] = np.round(values)
    return out


def flat_guess_mae(series: dict[SeriesKey, np.ndarray], warmup: int, horizon_h: int = 4) -> float:
    """MAE of forecasting every hour ahead as the history's mean hourly peak."""
    errs = []
    for values in series.values():
        peaks = values.reshape(-1, 60).max(axis=1)
        level = peaks[: warmup // 60].mean()
        errs.append(np.abs(peaks[warmup // 60 :] - level))
    return float(np.mean(np.concatenate(errs)))


@pytest.mark.parametrize("name", ["naive", "ridge"])
def test_base_forecasters_learn_a_daily_pattern(name: str) -> None:
    series = daily_pattern()
    score = walk_forward(series, make_forecaster(name), warmup_min=4 * WEEK, refit_every_min=WEEK)
    flat = flat_guess_mae(series, 4 * WEEK)
    assert score.overall.mae < 0.1 * flat
    assert score.overall.coverage >= 0.9
    assert score.overall.n == 3 * (7 * 24 - 4 + 1) * 4
    assert set(score.per_series) == set(series)


def shifting_levels(weeks: int = 5, seed: int = 1) -> dict[SeriesKey, np.ndarray]:
    """The daily pattern on a level that jumps once a day (long jobs come and go)."""
    rng = np.random.default_rng(seed)
    out = {}
    for key, values in daily_pattern(weeks).items():
        level = np.repeat(rng.integers(0, 20, weeks * 7), DAY).astype(float)
        out[key] = values + level
    return out


def test_ridge_beats_naive_when_levels_shift() -> None:
    series = shifting_levels()
    naive = walk_forward(
        series, make_forecaster("naive"), warmup_min=4 * WEEK, refit_every_min=WEEK
    )
    ridge = walk_forward(
        series, make_forecaster("ridge"), warmup_min=4 * WEEK, refit_every_min=WEEK
    )
    assert ridge.overall.mae < 0.5 * naive.overall.mae
    assert ridge.overall.mae < 0.5 * flat_guess_mae(series, 4 * WEEK)
    # the ridge deviation is calibrated at 0.9 in-sample; out of sample it stays near it
    # (the scored week holds only 21 unforecastable level jumps, hence the slack)
    assert 0.75 <= ridge.overall.coverage <= 1.0


def test_naive_is_last_weeks_peak_with_rms_error_std() -> None:
    key = SeriesKey("t", "p")
    peaks = np.arange(3 * 168, dtype=float)  # hourly peaks rising by one each hour
    history = np.repeat(peaks, 60)
    f = NaiveLastWeek(error_h=168)
    out = f.predict(key, history, len(history), 3)
    # hour k ahead: block k of the last week, i.e. peaks[-168 + k]
    np.testing.assert_allclose(out.mean, peaks[-168:-165])
    # each hour's peak minus the one a week before is 168 exactly
    np.testing.assert_allclose(out.std, [168.0] * 3)
    # past one week ahead it wraps to the latest same hour of the week
    long = f.predict(key, history, len(history), 170)
    assert long.mean[168] == long.mean[0]
    young = f.predict(key, np.ones(120), 120, 2)  # less than a week: a week ago was zero
    np.testing.assert_allclose(young.mean, [0, 0])
    np.testing.assert_allclose(young.std, [1.0, 1.0])


def test_coverage_and_mae_by_hand() -> None:
    actual = np.array([1.0, 2.0, 3.0, 10.0])
    mean = np.array([1.0, 1.0, 1.0, 1.0])
    std = np.array([1.0, 1.0, 2.0, 1.0])
    # quantiles: 1 + 1.2816 * std = 2.28, 2.28, 3.56, 2.28 -> the first three are covered
    assert coverage(actual, mean, std, 0.9) == pytest.approx(0.75)
    assert coverage(actual, mean, np.zeros(4), 0.9) == pytest.approx(0.25)
    assert mae(actual, mean) == pytest.approx((0 + 1 + 2 + 9) / 4)
    with pytest.raises(ForecastError, match="shape"):
        coverage(actual, mean[:2], std)
    with pytest.raises(ForecastError, match="q must"):
        coverage(actual, mean, std, 1.0)
    with pytest.raises(ForecastError, match="std"):
        coverage(actual, mean, -std)
    with pytest.raises(ForecastError, match="empty"):
        coverage(np.zeros(0), np.zeros(0), np.zeros(0))


def test_ridge_is_deterministic_and_orders_keys() -> None:
    series = daily_pattern(noise=0.2, seed=2)
    now = 4 * WEEK + 600
    hist = {k: v[:now] for k, v in series.items()}
    reversed_hist = dict(reversed(list(hist.items())))
    a, b = make_forecaster("ridge"), make_forecaster("ridge")
    a.fit(hist, now)
    b.fit(reversed_hist, now)
    key = SeriesKey("t1", "A100")
    fa, fb = a.predict(key, hist[key], now, 4), b.predict(key, hist[key], now, 4)
    np.testing.assert_array_equal(fa.mean, fb.mean)
    np.testing.assert_array_equal(fa.std, fb.std)
    assert np.all(fa.std > 0) and np.all(fa.mean >= 0)


def test_bad_input_errors() -> None:
    key = SeriesKey("t", "p")
    ridge = make_forecaster("ridge")
    with pytest.raises(NotFittedError):
        ridge.predict(key, np.zeros(60), 60, 4)
    ridge.fit({key: np.zeros(2 * WEEK)}, 2 * WEEK)
    with pytest.raises(ForecastError, match="horizon_h"):
        ridge.predict(key, np.zeros(60), 60, 5)
    with pytest.raises(ForecastError, match="horizon_h"):
        ridge.predict(key, np.zeros(60), 60, 0)
    with pytest.raises(ForecastError, match="now_min"):
        ridge.predict(key, np.zeros(60), -5, 1)
    with pytest.raises(ForecastError, match="finite"):
        ridge.fit({key: np.full(60, np.nan)}, 60)
    # an unseen tenant still gets a forecast (its id embedding is the "unknown" one)
    out = ridge.predict(SeriesKey("new", "p"), np.ones(WEEK), WEEK, 4)
    assert out.mean.shape == out.std.shape == (4,)
    with pytest.raises(ForecastError, match="forecaster must be one of"):
        make_forecaster("prophet")
    with pytest.raises(ForecastError, match="refit_every_min"):
        Cadence(refit_every_min=0)
    with pytest.raises(ForecastError, match="warmup_min"):
        walk_forward({key: np.zeros(WEEK)}, ridge, warmup_min=2 * WEEK)
    with pytest.raises(ForecastError, match="one length"):
        walk_forward({key: np.zeros(WEEK), SeriesKey("u", "p"): np.zeros(DAY)}, ridge)
    with pytest.raises(ForecastError, match="empty"):
        walk_forward({}, ridge)


def test_cadence_defaults_match_the_paper() -> None:
    for name in ("naive", "ridge"):
        f = make_forecaster(name)
        assert (f.cadence.refit_every_min, f.cadence.query_every_min) == (DAY, 5)
    assert make_forecaster("naive", cadence=Cadence(60, 1)).cadence.refit_every_min == 60
    assert FORECASTERS == ("naive", "ridge", "orglinear")


def test_orglinear_without_torch_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now fails
    with pytest.raises(ForecastDependencyError, match=r"stoker\[forecast\]"):
        make_forecaster("orglinear")


def test_training_samples_thin_to_max_samples() -> None:
    from stoker.forecast.features import Vocab, series_scales, training_samples
    from stoker.forecast.series import Calendar

    series = daily_pattern(weeks=2)
    now = 2 * WEEK
    kw = {
        "calendar": Calendar(),
        "vocab": Vocab.of(list(series)),
        "lookback_h": 24,
        "horizon_h": 4,
        "train_h": 48,
        "scales": series_scales(series, 24 + 48 + 3),
    }
    full = training_samples(series, now, **kw)
    assert len(full) == 3 * 48
    thin = training_samples(series, now, max_samples=50, **kw)  # stride ceil(144/50) = 3
    assert len(thin) == 3 * 16
    # the newest origin (targets right after now - 4 h ... now) is always kept
    np.testing.assert_array_equal(thin.y[15], full.y[47])
    with pytest.raises(ForecastError, match="max_samples"):
        training_samples(series, now, max_samples=0, **kw)


@pytest.mark.parametrize("name", ["naive", "ridge"])
def test_predict_many_is_predict_of_each_series(name: str) -> None:
    series = daily_pattern(noise=0.3, seed=5)
    now = 4 * WEEK + 125
    hist = {k: v[:now] for k, v in series.items()}
    model = make_forecaster(name)
    model.fit(hist, now)
    keys = [*sorted(hist, key=lambda k: k.tenant), SeriesKey("unseen", "A100")]
    rows = np.stack([hist.get(k, np.zeros(now)) for k in keys])
    batch = model.predict_many(keys, rows, now, 4)
    assert batch.keys == tuple(keys) and batch.mean.shape == batch.std.shape == (4, 4)
    for i, key in enumerate(keys):
        one = model.predict(key, rows[i], now, 4)
        np.testing.assert_allclose(batch[i].mean, one.mean, rtol=1e-12)
        np.testing.assert_allclose(batch[i].std, one.std, rtol=1e-12)
    with pytest.raises(ForecastError, match="rows for"):
        model.predict_many(keys, rows[:2], now, 4)
    with pytest.raises(ForecastError, match="2-D"):
        model.predict_many(keys, rows[0], now, 4)


def test_ridge_keeps_a_steady_large_tenant_beside_idle_bursty_ones() -> None:
    # the v2026 failure: tenants idle for days whose bursts, in units of a window's own mean
    # (near zero), read as targets of hundreds of scales and took over the least squares:
    # the steadiest, largest tenant was forecast at four to eight times its level
    rng = np.random.default_rng(3)
    minute = np.arange(5 * WEEK)
    series = {SeriesKey("big", "A10"): np.round(1600 + rng.normal(0, 5, len(minute)))}
    for i in range(3):
        bursty = np.zeros(len(minute))
        for start in rng.integers(0, len(minute) - 600, 12):
            bursty[start : start + int(rng.integers(60, 600))] = rng.integers(20, 200)
        series[SeriesKey(f"idle{i}", "A10")] = bursty
    model = make_forecaster("ridge")
    now = 4 * WEEK
    model.fit({k: v[:now] for k, v in series.items()}, now)
    keys = list(series)
    f = model.predict_many(keys, np.stack([series[k][:now] for k in keys]), now, 4)
    big = keys.index(SeriesKey("big", "A10"))
    # before: 13,600-14,100 GPUs, std above 300,000; now within 10 % (the bursts' ends
    # still teach the shared weights some fall after a high hour)
    assert np.all(np.abs(f.mean[big] - 1600) < 0.1 * 1600)
    assert np.all(f.std[big] < 0.35 * 1600)
