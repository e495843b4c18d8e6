"""OrgLinear as the GFS authors built it (needs the forecast extra): it learns, its parts
(decomposition, class attention, time features of the forecast start, the loss that skips
zero labels, the training windows), determinism, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from stoker.forecast import Calendar, ForecastError, NotFittedError, SeriesKey, make_forecaster
from stoker.forecast.evaluate import walk_forward
from stoker.forecast.series import hourly_peaks
from test_forecast_models import DAY, WEEK, daily_pattern, flat_guess_mae

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

# a short input keeps these tests fast; the default is the authors' 672 hours
FAST = {"lookback_h": 168, "threads": 1}


def test_orglinear_learns_a_daily_pattern() -> None:
    series = daily_pattern()
    model = make_forecaster("orglinear", **FAST)
    score = walk_forward(series, model, warmup_min=4 * WEEK, refit_every_min=WEEK)
    assert score.overall.mae < 0.5 * flat_guess_mae(series, 4 * WEEK)
    assert 0.7 <= score.overall.coverage <= 1.0
    assert 1 <= model.last_fit["epochs"] <= 10


def test_defaults_are_the_authors() -> None:
    model = make_forecaster("orglinear")
    assert (model.lookback_h, model.horizon_h, model.kernel, model.emb_dim) == (672, 4, 25, 8)
    assert (model.attn_dim, model.stride_min, model.val_days) == (16, 5, 7.0)
    assert (model.epochs, model.batch_size, model.lr, model.patience) == (10, 32, 4e-5, 3)
    assert model.train_days is None


def test_same_seed_same_forecast_and_global_rng_untouched() -> None:
    series = daily_pattern(noise=0.2, seed=4)
    now = 2 * WEEK + 300
    hist = {k: v[:now] for k, v in series.items()}
    keys = sorted(hist, key=lambda k: k.tenant)
    rows = np.stack([hist[k] for k in keys])
    torch.manual_seed(123)
    expect_next = torch.rand(3)
    torch.manual_seed(123)
    out = []
    for seed in (0, 0, 1):
        model = make_forecaster("orglinear", seed=seed, epochs=2, **FAST)
        model.fit(hist, now)
        out.append(model.predict_many(keys, rows, now, 4))
    assert torch.equal(torch.rand(3), expect_next)  # fit and predict fork the RNG
    np.testing.assert_array_equal(out[0].mean, out[1].mean)
    np.testing.assert_array_equal(out[0].std, out[1].std)
    assert not np.array_equal(out[0].std, out[2].std)
    assert np.all(out[0].std > 0) and np.all(out[0].mean >= 0)
    # one call for all series gives what one call per series gives
    for i, key in enumerate(keys):
        one = model.predict(key, rows[i], now, 4)
        np.testing.assert_allclose(out[2][i].mean, one.mean, rtol=1e-5)


def test_decomposition_is_trend_plus_seasonal() -> None:
    from stoker.forecast._orglinear_net import OrgLinearNet

    net = OrgLinearNet(lookback=48, horizon=4, class_sizes=(2, 2, 2))
    x = torch.randn(3, 5, 48)
    trend, seasonal = net.decompose(x)
    assert torch.allclose(trend + seasonal, x)
    flat_trend, flat_seasonal = net.decompose(torch.full((1, 1, 48), 5.0))
    assert torch.allclose(flat_trend, torch.full((1, 1, 48), 5.0))
    assert torch.allclose(flat_seasonal, torch.zeros(1, 1, 48), atol=1e-6)
    # the middle of the trend is a 25-wide moving average
    assert torch.allclose(trend[:, :, 24], x[:, :, 12:37].mean(dim=2), atol=1e-6)
    # every weight of the three heads starts at 1 / lookback, as the authors'
    for head in (net.seasonal_head, net.trend_head, net.sigma_head):
        assert torch.all(head.weight == 1.0 / 48)
        assert head.in_features == 48 + 6 * 8


def test_class_attention_mixes_the_three_classes() -> None:
    from stoker.forecast._orglinear_net import OrgLinearNet

    torch.manual_seed(0)
    net = OrgLinearNet(lookback=24, horizon=4, class_sizes=(3, 2, 5), emb_dim=8, attn_dim=16)
    ids = torch.tensor([[1, 1, 1], [1, 1, 2], [2, 1, 1]])
    ctx = net.class_context(ids)
    assert ctx.shape == (3, 24)
    assert not torch.allclose(ctx[0], ctx[1]) and not torch.allclose(ctx[0], ctx[2])
    # the authors scale the softmax's output by 1/sqrt(16): each row of weights sums to 1/4,
    # so the context of three equal embeddings is v(e) / 4 in each slot
    same = torch.tensor([[0, 0, 0]])
    for table in net.classes:
        table.weight.data[0] = net.classes[0].weight.data[0]
    v = net.v(net.classes[0].weight[0])
    assert torch.allclose(net.class_context(same)[0], (v / 4).repeat(3), atol=1e-6)


def test_loss_skips_zero_labels() -> None:
    from stoker.forecast._orglinear_net import nll_skipping_zeros

    mean = torch.tensor([[1.0, 5.0, 2.0]])
    sigma = torch.tensor([[1.0, 0.5, 2.0]])
    y = torch.tensor([[1.5, 0.0, 3.0]])
    normal = torch.distributions.Normal(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0]))
    expect = -normal.log_prob(torch.tensor([1.5, 3.0])).mean()
    assert torch.allclose(nll_skipping_zeros(mean, sigma, y), expect)
    mean[0, 1] = 100.0  # what is forecast for a zero label does not count
    assert torch.allclose(nll_skipping_zeros(mean, sigma, y), expect)


def test_time_features_of_the_forecast_start_on_chinas_calendar() -> None:
    cal = Calendar.from_iso("2024-03-01T00:00:00+08:00", holidays="china")
    model = make_forecaster("orglinear", calendar=cal, **FAST)
    day = lambda d, h: (d - 1) * DAY + h * 60  # noqa: E731 (minute of 2024-03-d, hour h)
    # 2024-04-04 Thu (Qingming: holiday), 04-07 Sun (a swapped workday), 03-05 Tue 09:00
    minutes = np.array([day(35, 10), day(38, 23), day(5, 9)])
    np.testing.assert_array_equal(model._time(minutes).numpy(), [[0, 3, 10], [1, 6, 23], [1, 1, 9]])


def test_training_windows_are_hourly_peaks_around_each_start() -> None:
    from stoker.forecast.orglinear import _Windows

    rng = np.random.default_rng(0)
    matrix = rng.integers(0, 9, (2, 3 * DAY)).astype(float)
    w = _Windows(torch, matrix, lookback=24, horizon=4, stride=5, kernel=25)
    # starts every 5 minutes, counted back from the newest whose labels are recorded
    assert w.starts[-1] == 3 * DAY - 4 * 60 and np.all(np.diff(w.starts) == 5)
    assert w.starts[0] in range(5)
    for i in (0, 7, len(w) - 1):
        x, y, _ = w.batch(np.array([i]))
        s = int(w.starts[i])
        for c in range(2):
            np.testing.assert_allclose(x[0, c].numpy(), hourly_peaks(matrix[c, :s], 24))
            np.testing.assert_allclose(y[0, c].numpy(), hourly_peaks(matrix[c, : s + 240], 4))


@pytest.mark.parametrize(("lookback", "kernel"), [(672, 25), (24, 5), (24, 25), (30, 1)])
def test_a_windows_trend_from_the_whole_series_is_the_same_floats(
    lookback: int, kernel: int
) -> None:
    # training reads each window's trend away from its edges off the series' own moving
    # average (the same sums in the same order); it must be the pooled window's, bit for bit
    from stoker.forecast._orglinear_net import OrgLinearNet
    from stoker.forecast.orglinear import _Windows

    rng = np.random.default_rng(1)
    matrix = rng.integers(0, 40, (3, 40 * DAY)) * rng.random((3, 40 * DAY))
    matrix[:, : 5 * DAY] = 0.0  # a quiet start, as a young tenant's record
    w = _Windows(torch, matrix, lookback=lookback, horizon=4, stride=5, kernel=kernel)
    net = OrgLinearNet(lookback, 4, (2, 2, 2), kernel=kernel)
    idx = rng.choice(len(w), 64, replace=False)
    x, _, inner = w.batch(idx)
    assert (inner is None) == (kernel == 1)
    trend, seasonal = net.decompose(x, inner)
    expect_trend, expect_seasonal = net.decompose(x)
    assert torch.equal(trend, expect_trend) and torch.equal(seasonal, expect_seasonal)


def test_orglinear_bad_input() -> None:
    key = SeriesKey("t", "p")
    model = make_forecaster("orglinear", epochs=1, **FAST)
    with pytest.raises(NotFittedError):
        model.predict(key, np.zeros(60), 60, 4)
    model.fit({key: np.zeros(2 * DAY)}, 2 * DAY)  # every label zero: nothing to learn
    with pytest.raises(ForecastError, match="horizon_h"):
        model.predict(key, np.zeros(60), 60, 5)
    with pytest.raises(ForecastError, match="kernel"):
        make_forecaster("orglinear", kernel=24)
    with pytest.raises(ForecastError, match="epochs"):
        make_forecaster("orglinear", epochs=0)
    with pytest.raises(ForecastError, match="lr"):
        make_forecaster("orglinear", lr=0.0)
    empty = make_forecaster("orglinear", epochs=1)
    empty.fit({}, 0)  # nothing to learn from yet: an untrained model still answers
    assert empty.predict(key, np.zeros(0), 0, 4).mean.shape == (4,)


def test_each_fit_trains_on_from_the_last_one() -> None:
    from stoker.forecast.features import Vocab

    series = daily_pattern(noise=0.2, seed=4)
    first, second = 2 * WEEK, 2 * WEEK + DAY

    def upto(now: int, drop: str | None = None) -> dict[SeriesKey, np.ndarray]:
        return {k: v[:now] for k, v in series.items() if k.tenant != drop}

    def state(model) -> dict[str, np.ndarray]:
        return {n: t.numpy().copy() for n, t in model._net.state_dict().items()}

    fresh = make_forecaster("orglinear", epochs=1, **FAST)
    fresh.fit(upto(second), second)
    runs = {}
    for warm in (True, False):
        model = make_forecaster("orglinear", epochs=1, warm_start=warm, **FAST)
        model.fit(upto(first, drop="t1"), first)  # t1 is new to the second fit
        before = state(model)
        model.fit(upto(second), second)
        runs[warm] = (model, before)
    # from scratch, a refit is the fit of its data alone; the authors' (warm) is not
    cold = state(runs[False][0])
    assert all(np.array_equal(cold[n], v) for n, v in state(fresh).items())
    model, before = runs[True]
    assert not np.array_equal(state(model)["trend_head.weight"], cold["trend_head.weight"])
    # the carry-over itself: heads as they were, a tenant's row by its name, a new one fresh
    from stoker.forecast._orglinear_net import OrgLinearNet

    old_vocab = Vocab.of(list(upto(first, drop="t1")))
    model._net = OrgLinearNet(168, 4, (2, 2, len(old_vocab.tenants) + 1))
    model._net.load_state_dict({n: torch.as_tensor(v) for n, v in before.items()})
    model._vocab = old_vocab
    vocab = Vocab.of(list(series))
    net = OrgLinearNet(168, 4, (2, 2, len(vocab.tenants) + 1))
    untouched = net.classes[2].weight.detach().clone()
    model._carry_over(net, vocab)
    after = net.state_dict()
    np.testing.assert_array_equal(after["trend_head.weight"].numpy(), before["trend_head.weight"])
    tenants = before["classes.2.weight"]
    np.testing.assert_array_equal(after["classes.2.weight"][vocab.tenants["t2"]].numpy(),
                                  tenants[old_vocab.tenants["t2"]])  # fmt: skip
    np.testing.assert_array_equal(after["classes.2.weight"][vocab.tenants["t1"]].numpy(),
                                  untouched[vocab.tenants["t1"]].numpy())  # fmt: skip
