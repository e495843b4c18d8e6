"""The base install's forecaster: DLinear-style linear model fitted in closed form (ridge).

DLinear's trend/seasonal split followed by linear heads is, without a nonlinearity, one
linear map of the input window, so it can be fitted exactly by least squares instead of
gradient descent. This forecaster does that with numpy only, one global model for all series
(each in units of its own scale, its mean hourly peak over the fit's span; see
:mod:`stoker.forecast.features`), per hour ahead:

    mean_k = (x_last + w_k . [window, one-hot(hour, weekday, holiday of hour k),
                              one-hot(tenant, GPU pool, cluster), 1]) * scale

with ``window`` the hourly peaks over the series' scale and ``x_last`` its last one: the
model learns the change from the last hour, so the penalty shrinks towards persistence
(towards zero change), not towards zero demand. On ``stoker forecast eval``'s walk-forward
(v2026: 42 generated days, weekly refits; Philly: refits every 2 weeks) that gave MAE
6.06 and 5.93 GPUs against 6.67 and 6.64 for the level itself;
and a second ridge regression of the absolute in-sample residuals on the same features
gives a heteroscedastic deviation ``std_k = c_k * sqrt(pi/2) * |r|_hat_k``, where ``c_k`` is set
so that the in-sample 0.9 quantile (mean + z_0.9 std) covers 90 % of the training targets:
the spot quota reads exactly that quantile.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.linalg import cho_factor, cho_solve
from scipy.stats import norm

from stoker.forecast.base import (
    MINUTES_PER_HOUR,
    MINUTES_PER_WEEK,
    BatchPredictor,
    Cadence,
    ForecastError,
    Forecasts,
    NotFittedError,
    SeriesKey,
)
from stoker.forecast.features import (
    MIN_STD,
    Samples,
    Vocab,
    check_now,
    query_samples,
    series_scales,
    training_samples,
)
from stoker.forecast.series import Calendar

_WEEK_H = MINUTES_PER_WEEK // MINUTES_PER_HOUR
_SPREAD_FLOOR = 0.05  # normalised units, as OrgLinear's std floor: idle series stay finite


class RidgeLinear(BatchPredictor):
    """Closed-form ridge regression on the last week of hourly peaks plus calendar and ids.

    ``lookback_h``: input window (default one week, so it sees last week's same hour);
    ``train_h``: hours of origins fitted on (default 4 weeks); ``horizon_h``: hours ahead
    fitted (default 4; a query for more raises); ``alpha``: ridge penalty per sample (0.1:
    on Philly weeks 8-9, 0.0001, 0.01, 0.1, 0.3 and 1 gave MAE 6.71, 6.37, 5.75, 5.81 and
    6.40 GPUs). ``max_samples``: training origins are thinned beyond this many (see
    :func:`~stoker.forecast.features.training_samples`), so hundreds of series fit in seconds.
    """

    name = "ridge"

    def __init__(
        self,
        *,
        calendar: Calendar | None = None,
        lookback_h: int = _WEEK_H,
        horizon_h: int = 4,
        train_h: int = 4 * _WEEK_H,
        max_samples: int = 20_000,
        alpha: float = 0.1,
        coverage_q: float = 0.9,
        cadence: Cadence | None = None,
    ) -> None:
        self.calendar = calendar or Calendar()
        self.lookback_h = lookback_h
        self.horizon_h = horizon_h
        self.train_h = train_h
        self.max_samples = max_samples
        self.alpha = alpha
        self.coverage_q = coverage_q
        self.cadence = cadence or Cadence()
        self._vocab: Vocab | None = None
        self._w_mean: np.ndarray | None = None  # (horizon, features)
        self._w_abs: np.ndarray | None = None
        self._c: np.ndarray | None = None  # (horizon,)
        self._scales: dict[SeriesKey, float] = {}  # GPUs, per series, from the last fit

    @staticmethod
    def _onehots(parts: list[tuple[np.ndarray, int]]) -> list[np.ndarray]:
        out = []
        for values, size in parts:
            onehot = np.zeros((len(values), size))
            onehot[np.arange(len(values)), values] = 1.0
            out.append(onehot)
        return out

    def _common(self, s: Samples, vocab: Vocab) -> np.ndarray:
        """The columns every hour ahead shares: the window, the ids, an intercept."""
        ids = self._onehots(
            [
                (s.ids[:, 0], len(vocab.tenants) + 1),
                (s.ids[:, 1], len(vocab.gpu_pools) + 1),
                (s.ids[:, 2], len(vocab.clusters) + 1),
            ]
        )
        return np.concatenate([s.x, *ids, np.ones((len(s), 1))], axis=1)

    def _calendar_columns(self, s: Samples, k: int) -> np.ndarray:
        """Hour ``k`` ahead's own columns: hour of day, weekday, holiday."""
        hour, weekday = self._onehots([(s.hour[:, k], 24), (s.weekday[:, k], 7)])
        return np.concatenate([hour, weekday, s.holiday[:, k : k + 1].astype(float)], axis=1)

    @property
    def query_hours(self) -> int:
        """The input window: ``lookback_h`` hours."""
        return self.lookback_h

    @property
    def fit_minutes(self) -> int:
        """Every block a training sample reads: ``train_h`` origins of ``lookback_h`` hours
        in and ``horizon_h`` out."""
        return (self.train_h + self.lookback_h + self.horizon_h - 1) * MINUTES_PER_HOUR

    def _spread(self, a: np.ndarray, w_abs: np.ndarray) -> np.ndarray:
        """sqrt(pi/2) * predicted |residual|: a Normal's std from its mean absolute value."""
        return np.maximum(a @ w_abs, _SPREAD_FLOOR) * np.sqrt(np.pi / 2)

    def fit(self, histories: dict[SeriesKey, np.ndarray], now_min: int) -> None:
        """Refit on the last ``train_h`` hours of every series (ending at ``now_min``)."""
        check_now(now_min)
        vocab = Vocab.of(list(histories))
        scales = series_scales(histories, self.fit_minutes // MINUTES_PER_HOUR)
        s = training_samples(
            histories,
            now_min,
            calendar=self.calendar,
            vocab=vocab,
            lookback_h=self.lookback_h,
            horizon_h=self.horizon_h,
            train_h=self.train_h,
            scales=scales,
            max_samples=self.max_samples,
        )
        w_mean, w_abs, c = [], [], []
        z = float(norm.ppf(self.coverage_q))
        common = self._common(s, vocab)
        common_gram = common.T @ common  # the costly block, shared by every hour ahead
        for k in range(self.horizon_h):
            cal = self._calendar_columns(s, k)
            a = np.concatenate([common, cal], axis=1)
            cross = common.T @ cal
            gram = np.block([[common_gram, cross], [cross.T, cal.T @ cal]])
            # penalty per sample, so its strength does not depend on how many series there are
            gram += self.alpha * max(1, len(s)) * np.eye(len(gram))
            factor = cho_factor(gram)
            y = s.y[:, k] - s.x[:, -1]  # the change from the last hour: shrunk to persistence
            wm = cho_solve(factor, a.T @ y)
            resid = y - a @ wm
            wa = cho_solve(factor, a.T @ np.abs(resid))  # same features: same factor
            ratio = resid / self._spread(a, wa)
            # c_k: the in-sample q-quantile of the standardised residual, over z_q
            ck = float(np.quantile(ratio, self.coverage_q)) / z if len(ratio) else 1.0
            w_mean.append(wm)
            w_abs.append(wa)
            c.append(max(ck, 0.1))
        self._vocab = vocab
        self._scales = scales
        self._w_mean = np.stack(w_mean)
        self._w_abs = np.stack(w_abs)
        self._c = np.array(c)

    def predict_peaks(
        self,
        keys: Sequence[SeriesKey],
        peaks: np.ndarray,
        now_min: int,
        horizon_h: int,
        recorded_min: int | None = None,
    ) -> Forecasts:
        """Hourly peak mean and std of every series for the next ``horizon_h`` (<= the
        fitted horizon) hours, from the last ``lookback_h`` hourly peaks, in one pass of
        matrix products."""
        check_now(now_min, horizon_h)
        if self._vocab is None or self._w_mean is None or self._w_abs is None or self._c is None:
            raise NotFittedError("RidgeLinear.predict called before fit")
        if horizon_h > self.horizon_h:
            raise ForecastError(
                f"horizon_h must be <= the fitted {self.horizon_h}, got {horizon_h}"
            )
        s = query_samples(
            keys,
            peaks,
            now_min,
            calendar=self.calendar,
            vocab=self._vocab,
            lookback_h=self.lookback_h,
            horizon_h=horizon_h,
            scales=self._scales,
        )
        mean = np.empty((len(keys), horizon_h))
        std = np.empty((len(keys), horizon_h))
        common = self._common(s, self._vocab)
        for k in range(horizon_h):
            a = np.concatenate([common, self._calendar_columns(s, k)], axis=1)
            mean[:, k] = s.x[:, -1] + a @ self._w_mean[k]
            std[:, k] = self._c[k] * self._spread(a, self._w_abs[k])
        scale = s.scale[:, None]
        return Forecasts(
            keys=tuple(keys),
            mean=np.maximum(mean, 0.0) * scale,
            std=np.maximum(std * scale, MIN_STD),
        )
