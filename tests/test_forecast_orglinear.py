"""OrgLinear (needs the forecast extra): learning, determinism, its decomposition."""

from __future__ import annotations

import numpy as np
import pytest

from stoker.forecast import ForecastError, NotFittedError, SeriesKey, make_forecaster
from stoker.forecast.evaluate import walk_forward
from test_forecast_models import DAY, WEEK, daily_pattern, flat_guess_mae, shifting_levels

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch


@pytest.mark.parametrize("make", [daily_pattern, shifting_levels])
def test_orglinear_learns_the_pattern(make) -> None:  # type: ignore[no-untyped-def]
    series = make()
    model = make_forecaster("orglinear", threads=1)
    score = walk_forward(series, model, warmup_min=4 * WEEK, refit_every_min=WEEK)
    assert score.overall.mae < 0.5 * flat_guess_mae(series, 4 * WEEK)
    assert 0.7 <= score.overall.coverage <= 1.0


def test_same_seed_same_forecast_and_global_rng_untouched() -> None:
    series = daily_pattern(noise=0.2, seed=4)
    now = 4 * WEEK + 300
    hist = {k: v[:now] for k, v in series.items()}
    key = SeriesKey("t1", "A100")
    torch.manual_seed(123)
    expect_next = torch.rand(3)
    torch.manual_seed(123)
    out = []
    for seed in (0, 0, 1):
        model = make_forecaster("orglinear", seed=seed, epochs=3, threads=1)
        model.fit(hist, now)
        out.append(model.predict(key, hist[key], now, 4))
    assert torch.equal(torch.rand(3), expect_next)  # fit and predict fork the RNG
    np.testing.assert_array_equal(out[0].mean, out[1].mean)
    np.testing.assert_array_equal(out[0].std, out[1].std)
    assert not np.array_equal(out[0].std, out[2].std)
    assert np.all(out[0].std > 0) and np.all(out[0].mean >= 0)


def test_decomposition_is_trend_plus_seasonal() -> None:
    from stoker.forecast._orglinear_net import OrgLinearNet

    net = OrgLinearNet(lookback=48, horizon=4, n_tenants=2, n_pools=2, n_clusters=2)
    x = torch.randn(3, 48)
    trend, seasonal = net.decompose(x)
    assert torch.allclose(trend + seasonal, x)
    flat_trend, flat_seasonal = net.decompose(torch.full((1, 48), 5.0))
    assert torch.allclose(flat_trend, torch.full((1, 48), 5.0))
    assert torch.allclose(flat_seasonal, torch.zeros(1, 48), atol=1e-6)
    # the middle of the trend is a 25-wide moving average
    assert torch.allclose(trend[:, 24], x[:, 12:37].mean(dim=1), atol=1e-6)


def test_orglinear_bad_input() -> None:
    key = SeriesKey("t", "p")
    model = make_forecaster("orglinear", epochs=1, threads=1)
    with pytest.raises(NotFittedError):
        model.predict(key, np.zeros(60), 60, 4)
    model.fit({key: np.zeros(2 * DAY)}, 2 * DAY)
    with pytest.raises(ForecastError, match="horizon_h"):
        model.predict(key, np.zeros(60), 60, 5)
    with pytest.raises(ForecastError, match="kernel"):
        make_forecaster("orglinear", kernel=24)
    with pytest.raises(ForecastError, match="epochs"):
        make_forecaster("orglinear", epochs=0)
    empty = make_forecaster("orglinear", epochs=1)
    empty.fit({}, 0)  # nothing to learn from yet: an untrained model still answers
    assert empty.predict(key, np.zeros(0), 0, 4).mean.shape == (4,)
