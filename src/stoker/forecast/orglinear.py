"""OrgLinear, the forecaster of the GFS paper (DLinear-style, Gaussian NLL), on PyTorch.

Needs the optional extra: ``pip install 'stoker[forecast]'``. torch is imported when an
:class:`OrgLinear` is built, never at import of this module, so the base install works.

Training: every ``fit`` retrains from scratch (seeded: the same data give the same model,
whatever was fitted before) on the windows of :func:`stoker.forecast.features.training_samples`
(one week of hourly peaks in, ``horizon_h`` hours out, origins over the last 4 weeks), with
Adam on the Gaussian negative log-likelihood in normalised units, minibatches drawn by a
seeded generator, deterministic algorithms on, on CPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from stoker.forecast.base import (
    MINUTES_PER_HOUR,
    MINUTES_PER_WEEK,
    Cadence,
    Forecast,
    ForecastDependencyError,
    ForecastError,
    NotFittedError,
    SeriesKey,
)
from stoker.forecast.features import (
    MIN_STD,
    Samples,
    Vocab,
    check_now,
    query_sample,
    training_samples,
)
from stoker.forecast.series import Calendar

_WEEK_H = MINUTES_PER_WEEK // MINUTES_PER_HOUR


def _import_torch() -> Any:
    try:
        import torch
    except ModuleNotFoundError as exc:
        raise ForecastDependencyError(
            "the OrgLinear forecaster needs PyTorch: pip install 'stoker[forecast]' "
            "(or use the 'ridge' forecaster of the base install)"
        ) from exc
    return torch


class OrgLinear:
    """The paper's OrgLinear: trend/seasonal linear heads for mean and (softplus) std.

    ``lookback_h`` hours in (default a week), ``horizon_h`` out (default 4), origins over the
    last ``train_h`` hours (default 4 weeks, thinned past ``max_samples`` windows as in
    :func:`~stoker.forecast.features.training_samples`); moving-average ``kernel`` 25; embeddings of
    ``emb_dim``; ``epochs`` passes of minibatches of ``batch_size`` with Adam at ``lr``;
    ``seed`` for initialisation and batches; ``threads``: torch intra-op threads while
    training and predicting (None leaves torch's setting).
    """

    name = "orglinear"

    def __init__(
        self,
        *,
        calendar: Calendar | None = None,
        lookback_h: int = _WEEK_H,
        horizon_h: int = 4,
        train_h: int = 4 * _WEEK_H,
        max_samples: int = 20_000,
        kernel: int = 25,
        emb_dim: int = 4,
        epochs: int = 10,
        batch_size: int = 256,
        lr: float = 3e-3,
        weight_decay: float = 1e-5,
        seed: int = 0,
        threads: int | None = None,
        cadence: Cadence | None = None,
    ) -> None:
        self._torch = _import_torch()
        for name, value in (
            ("lookback_h", lookback_h),
            ("horizon_h", horizon_h),
            ("train_h", train_h),
            ("epochs", epochs),
            ("batch_size", batch_size),
            ("emb_dim", emb_dim),
        ):
            if value < 1:
                raise ForecastError(f"{name} must be >= 1, got {value}")
        if kernel < 1 or kernel % 2 == 0:
            raise ForecastError(f"kernel must be odd and >= 1, got {kernel}")
        self.calendar = calendar or Calendar()
        self.lookback_h = lookback_h
        self.horizon_h = horizon_h
        self.train_h = train_h
        self.max_samples = max_samples
        self.kernel = kernel
        self.emb_dim = emb_dim
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.seed = seed
        self.threads = threads
        self.cadence = cadence or Cadence()
        self._vocab: Vocab | None = None
        self._net: Any = None

    def _tensors(self, s: Samples) -> tuple[Any, ...]:
        torch = self._torch
        return (
            torch.as_tensor(s.x, dtype=torch.float32),
            torch.as_tensor(s.ids, dtype=torch.long),
            torch.as_tensor(s.hour, dtype=torch.long),
            torch.as_tensor(s.weekday, dtype=torch.long),
            torch.as_tensor(s.holiday, dtype=torch.long),
        )

    def _run(self, fn: Any) -> Any:
        """Call ``fn`` with the seed, deterministic algorithms and threads in force."""
        torch = self._torch
        was_deterministic = torch.are_deterministic_algorithms_enabled()
        old_threads = torch.get_num_threads()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            torch.use_deterministic_algorithms(True)
            if self.threads is not None:
                torch.set_num_threads(self.threads)
            try:
                return fn()
            finally:
                torch.use_deterministic_algorithms(was_deterministic)
                torch.set_num_threads(old_threads)

    def fit(self, histories: dict[SeriesKey, np.ndarray], now_min: int) -> None:
        """Retrain from scratch on the histories (all ending at ``now_min``)."""
        check_now(now_min)
        vocab = Vocab.of(list(histories))
        s = training_samples(
            histories,
            now_min,
            calendar=self.calendar,
            vocab=vocab,
            lookback_h=self.lookback_h,
            horizon_h=self.horizon_h,
            train_h=self.train_h,
            max_samples=self.max_samples,
        )
        self._net = self._run(lambda: self._train(s, vocab))
        self._vocab = vocab

    def _train(self, s: Samples, vocab: Vocab) -> Any:
        from stoker.forecast._orglinear_net import OrgLinearNet

        torch = self._torch
        net = OrgLinearNet(
            self.lookback_h,
            self.horizon_h,
            len(vocab.tenants) + 1,
            len(vocab.pools) + 1,
            len(vocab.clusters) + 1,
            kernel=self.kernel,
            emb_dim=self.emb_dim,
        )
        if len(s) == 0:
            return net.eval()
        inputs = self._tensors(s)
        target = torch.as_tensor(s.y, dtype=torch.float32)
        opt = torch.optim.Adam(net.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        gen = torch.Generator().manual_seed(self.seed)
        net.train()
        for _ in range(self.epochs):
            order = torch.randperm(len(s), generator=gen)
            for start in range(0, len(s), self.batch_size):
                idx = order[start : start + self.batch_size]
                mean, std = net(*(t[idx] for t in inputs))
                loss = torch.nn.functional.gaussian_nll_loss(mean, target[idx], std**2)
                opt.zero_grad()
                loss.backward()
                opt.step()
        return net.eval()

    def predict(
        self, key: SeriesKey, history: np.ndarray, now_min: int, horizon_h: int
    ) -> Forecast:
        """Hourly peak mean and std for the next ``horizon_h`` (<= the fitted horizon) hours."""
        check_now(now_min, horizon_h)
        if self._net is None or self._vocab is None:
            raise NotFittedError("OrgLinear.predict called before fit")
        if horizon_h > self.horizon_h:
            raise ForecastError(
                f"horizon_h must be <= the fitted {self.horizon_h}, got {horizon_h}"
            )
        s = query_sample(
            key,
            history,
            now_min,
            calendar=self.calendar,
            vocab=self._vocab,
            lookback_h=self.lookback_h,
            horizon_h=self.horizon_h,
        )
        torch = self._torch

        def forward() -> tuple[np.ndarray, np.ndarray]:
            with torch.no_grad():
                mean, std = self._net(*self._tensors(s))
            return mean[0].numpy().astype(float), std[0].numpy().astype(float)

        mean, std = self._run(forward)
        scale = float(s.scale[0])
        return Forecast(
            mean=np.maximum(mean[:horizon_h], 0.0) * scale,
            std=np.maximum(std[:horizon_h] * scale, MIN_STD),
        )
