"""OrgLinear, the GFS authors' forecaster (their ``estimator/``), on PyTorch.

Needs the optional extra: ``pip install 'stoker[forecast]'``. torch is imported when an
:class:`OrgLinear` is built, never at import of this module, so the base install works.

As the authors' estimator does (Xu-Sheng-lin/GFS-asplos-26, ``estimator/``; its defaults
are ``simulator.py``'s arguments):

- one model for all series, which are the channels of one input: a sample is every
  series' window of the ``lookback_h`` (672) hourly peaks before a forecast start, its
  labels the ``horizon_h`` (4) hourly peaks after it, in GPUs (no scaling);
- samples every ``stride_min`` (5) minutes; the last ``val_days`` (7) of targets validate,
  the samples before them train; the training set is the whole history so far;
- time features of the forecast start: workday (the trace's calendar: China's for the GFS
  trace), weekday, hour;
- Adam at ``lr`` (4e-5), minibatches of ``batch_size`` (32) shuffled, ``epochs`` (10) with
  the rate halved every 3 epochs after the first, early stopping on the validation loss
  with ``patience`` (3), keeping the best epoch's weights; the loss is the Gaussian NLL over
  the labels that are not zero; every ``fit`` (daily) trains the one model further from
  the weights the last fit kept, with a fresh optimiser and schedule (their
  ``GPURequestEstimator`` is built once and its ``train`` called each day).

Where ours differs (each is needed for a short or young record, or for determinism): a
tenant, GPU model or cluster a later fit sees first gets a fresh embedding row, the rows
of those seen before carry over (theirs has fixed class sizes); ``warm_start=False``
retrains from scratch at every fit (stoker's earlier choice); the
minutes before a series' record count as zero demand, so a history shorter than the input
still trains (the authors' start 5 months before their window); sample starts are counted
back from ``now_min`` (theirs forward from the trace's start); with fewer than a batch of
validation samples the model trains on everything, without early stopping; a batch with
every label zero is skipped (its loss is undefined); training is seeded and deterministic,
on CPU. Means below zero are read as zero and deviations are held above
:data:`~stoker.forecast.features.MIN_STD`.

Two corrections, each an option (``scale``, ``fallback``) so the authors' behaviour stays
one switch away. With ``scale`` (the default) each series is divided by its own peak
(at least 1 GPU) before training and prediction, and the answer is multiplied back:
in raw GPUs a GPU pool of hundreds of GPUs gives the Gaussian loss values near 1e13, the fit
never converges, and its 0.9-quantile over-covers the GPU pool so far that the spot quota is
zero (issue 33: coverage 1.000 and a mean error of 386 GPUs against ridge's 23.7).
``fallback``: a fit whose best validation loss is not finite (degenerate) is not used: the
last good fit is kept, else the forecasts come from last week's peaks
(:class:`~stoker.forecast.naive.NaiveLastWeek`), and the reason is logged and kept in
``last_fit``.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from stoker.forecast.base import (
    MINUTES_PER_DAY,
    MINUTES_PER_HOUR,
    BatchPredictor,
    Cadence,
    ForecastDependencyError,
    ForecastError,
    Forecasts,
    NotFittedError,
    SeriesKey,
    check_peaks,
)
from stoker.forecast.features import MIN_STD, Vocab, check_now
from stoker.forecast.naive import NaiveLastWeek
from stoker.forecast.series import Calendar, check_history

FOUR_WEEKS_H = 672
_WEEK_H = 168
log = logging.getLogger("stoker.forecast")


def _import_torch() -> Any:
    try:
        import torch
    except ModuleNotFoundError as exc:
        raise ForecastDependencyError(
            "the OrgLinear forecaster needs PyTorch: pip install 'stoker[forecast]' "
            "(or use the 'ridge' forecaster of the base install)"
        ) from exc
    return torch


class _Windows:
    """Every sample of a (C, T) minute matrix, gathered by batch without copying it whole.

    Sample ``i`` is the forecast start ``starts[i]`` (a minute of the matrix, counted back
    from its end by ``stride``): its input the ``lookback`` hourly peaks before it (minutes
    before the matrix are zero), its labels the ``horizon`` peaks from it. Starts that share
    a minute of the hour share one array of hourly peaks, gathered from by batch, and one
    of their ``kernel``-hour moving average: a window's trend away from its edges is that
    of the whole series (the samples overlap, so pooling each window anew is most of a
    training step's time).
    """

    def __init__(
        self,
        torch: Any,
        matrix: np.ndarray,
        lookback: int,
        horizon: int,
        stride: int,
        kernel: int,
    ):
        from stoker.forecast._orglinear_net import moving_average

        c, t = matrix.shape
        self.torch = torch
        self.lookback = lookback
        half = (kernel - 1) // 2
        # the inner trend needs both edges inside the window (and an edge to replicate)
        self.inner = lookback - 2 * half if half and lookback >= 2 * half else None
        self.trends: dict[int, Any] = {}
        lead = lookback * MINUTES_PER_HOUR
        padded = np.concatenate([np.zeros((c, lead)), matrix], axis=1)
        last = t - horizon * MINUTES_PER_HOUR  # the newest start whose labels are recorded
        self.starts = np.arange(last, -1, -stride)[::-1] if last >= 0 else np.zeros(0, np.int64)
        self.peaks: dict[int, Any] = {}
        for phase in np.unique(self.starts % MINUTES_PER_HOUR).tolist():
            n = (padded.shape[1] - phase) // MINUTES_PER_HOUR
            block = padded[:, phase : phase + n * MINUTES_PER_HOUR]
            peaks = torch.as_tensor(
                block.reshape(c, n, MINUTES_PER_HOUR).max(axis=2), dtype=torch.float32
            )
            # views (hour, C, span): row h is every series' span from hour h, so a batch is
            # one copy of whole rows
            self.peaks[phase] = peaks.unfold(1, lookback + horizon, 1).transpose(0, 1)
            if self.inner is not None:
                # hour j + half's trend is the moving average's column j
                trend = moving_average(peaks, kernel)
                self.trends[phase] = trend.unfold(1, self.inner, 1).transpose(0, 1)

    def __len__(self) -> int:
        return len(self.starts)

    def batch(self, idx: np.ndarray) -> tuple[Any, Any, Any]:
        """Inputs (B, C, L), labels (B, C, H) and the inputs' inner trend (B, C, L - 2 half;
        None when the window is too short for one) of samples ``idx``."""
        torch = self.torch
        starts = self.starts[idx]
        out = inner = None
        for phase, peaks in self.peaks.items():
            sel = np.flatnonzero(starts % MINUTES_PER_HOUR == phase)
            if not len(sel):
                continue
            # start s of this phase reads hourly blocks s // 60 onward of the padded matrix
            hours = torch.as_tensor(starts[sel] // MINUTES_PER_HOUR)
            part = peaks.index_select(0, hours)  # (b, C, L + H)
            rows = torch.as_tensor(sel)
            if out is None:
                out = torch.empty((len(idx), *part.shape[1:]))
            out[rows] = part
            if self.inner is not None:
                trend = self.trends[phase].index_select(0, hours)
                if inner is None:
                    inner = torch.empty((len(idx), *trend.shape[1:]))
                inner[rows] = trend
        assert out is not None
        return out[:, :, : self.lookback], out[:, :, self.lookback :], inner


class OrgLinear(BatchPredictor):
    """The GFS authors' OrgLinear (see the module's docstring for what and where it differs).

    ``lookback_h`` (672) hours in, ``horizon_h`` (4) out; moving-average ``kernel`` (25);
    class and time embeddings of ``emb_dim`` (8), attention of ``attn_dim`` (16); training
    as the module says, with ``stride_min``, ``val_days``, ``epochs``, ``batch_size``,
    ``lr``, ``patience``; ``train_days``: only the last this many days of history train
    (None: all of it, as the authors); ``seed`` for initialisation and batches;
    ``threads``: torch intra-op threads while training and predicting (default 1: the
    model is small, and more threads on a shared machine mostly wait; None leaves torch's);
    ``warm_start``: each fit continues from the last fit's weights (the authors'), else
    starts from scratch. ``scale``: each series in units of its own peak (the module's
    docstring; False: raw GPUs, as the authors); ``fallback``: a degenerate fit is not used.
    """

    name = "orglinear"

    def __init__(
        self,
        *,
        calendar: Calendar | None = None,
        lookback_h: int = FOUR_WEEKS_H,
        horizon_h: int = 4,
        kernel: int = 25,
        emb_dim: int = 8,
        attn_dim: int = 16,
        stride_min: int = 5,
        val_days: float = 7.0,
        train_days: float | None = None,
        epochs: int = 10,
        batch_size: int = 32,
        lr: float = 4e-5,
        patience: int = 3,
        seed: int = 0,
        threads: int | None = 1,
        warm_start: bool = True,
        scale: bool = True,
        fallback: bool = True,
        cadence: Cadence | None = None,
    ) -> None:
        self._torch = _import_torch()
        for name, value in (
            ("lookback_h", lookback_h),
            ("horizon_h", horizon_h),
            ("emb_dim", emb_dim),
            ("attn_dim", attn_dim),
            ("stride_min", stride_min),
            ("epochs", epochs),
            ("batch_size", batch_size),
            ("patience", patience),
        ):
            if value < 1:
                raise ForecastError(f"{name} must be >= 1, got {value}")
        if kernel < 1 or kernel % 2 == 0:
            raise ForecastError(f"kernel must be odd and >= 1, got {kernel}")
        if val_days < 0 or (train_days is not None and train_days <= 0):
            raise ForecastError("val_days must be >= 0 and train_days > 0")
        if not lr > 0:
            raise ForecastError(f"lr must be > 0, got {lr}")
        self.calendar = calendar or Calendar()
        self.lookback_h = lookback_h
        self.horizon_h = horizon_h
        self.kernel = kernel
        self.emb_dim = emb_dim
        self.attn_dim = attn_dim
        self.stride_min = stride_min
        self.val_days = val_days
        self.train_days = train_days
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.patience = patience
        self.seed = seed
        self.threads = threads
        self.warm_start = warm_start
        self.scale = scale
        self.fallback = fallback
        self.cadence = cadence or Cadence()
        self._vocab: Vocab | None = None
        self._net: Any = None
        self._scales: dict[SeriesKey, float] = {}
        # last week's peaks, while no fit is good (fallback); None when a net answers
        self._naive: NaiveLastWeek | None = None
        # epochs run, best validation loss, samples; "fallback" when a fit was not used
        self.last_fit: dict[str, Any] = {}

    def _time(self, minutes: np.ndarray) -> Any:
        """(n, 3) workday, weekday, hour of each absolute minute, as the net reads them."""
        hour, weekday, _ = self.calendar.features(minutes)
        workday = self.calendar.workday(minutes)
        return self._torch.as_tensor(np.stack([workday, weekday, hour], axis=1))

    def _ids(self, vocab: Vocab, keys: Sequence[SeriesKey]) -> Any:
        # the authors' class order: GPU model, cluster, organisation
        rows = [(vocab.gpu_pools.get(k.gpu_pool, 0), vocab.clusters.get(k.cluster, 0),
                 vocab.tenants.get(k.tenant, 0)) for k in keys]  # fmt: skip
        return self._torch.as_tensor(np.array(rows, dtype=np.int64).reshape(len(keys), 3))

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

    @property
    def query_hours(self) -> int:
        """The input window: ``lookback_h`` hours."""
        return self.lookback_h

    @property
    def fit_minutes(self) -> int | None:
        """``train_days`` (None: the whole record)."""
        return None if self.train_days is None else int(self.train_days * MINUTES_PER_DAY)

    def fit(self, histories: dict[SeriesKey, np.ndarray], now_min: int) -> None:
        """Train on the histories (all ending at ``now_min``): further from the last fit's
        weights with ``warm_start``, else from scratch."""
        check_now(now_min)
        keys = sorted(histories, key=lambda k: (k.gpu_pool, k.cluster, k.tenant))
        rows = [check_history(histories[k], f"histories[{k}]") for k in keys]
        length = max((len(r) for r in rows), default=0)
        if self.train_days is not None:
            length = min(length, int(self.train_days * MINUTES_PER_DAY))
        matrix = np.zeros((len(keys), length))
        for i, r in enumerate(rows):
            tail = r[len(r) - min(len(r), length) :]
            matrix[i, length - len(tail) :] = tail
        scales = np.ones(len(keys))
        if self.scale and len(keys):
            scales = np.maximum(matrix.max(axis=1), 1.0)
            matrix = matrix / scales[:, None]
        vocab = Vocab.of(keys)
        net = self._run(lambda: self._train(matrix, keys, vocab, now_min))
        loss = self.last_fit.get("val_loss", math.nan)
        if self.fallback and not math.isfinite(loss) and self.last_fit.get("validated"):
            kept = "the last good fit" if self._net is not None else "last week's peaks"
            reason = f"degenerate fit (best validation loss {loss}); forecasting from {kept}"
            log.warning("orglinear: %s", reason)
            self.last_fit["fallback"] = reason
            if self._net is None:
                self._naive = NaiveLastWeek(error_h=self.lookback_h - _WEEK_H)
            return
        self._net, self._vocab, self._naive = net, vocab, None
        self._scales = dict(zip(keys, scales.tolist(), strict=True))

    def _train(self, matrix: np.ndarray, keys: list[SeriesKey], vocab: Vocab, now_min: int) -> Any:
        from stoker.forecast._orglinear_net import OrgLinearNet, nll_skipping_zeros

        torch = self._torch
        net = OrgLinearNet(
            self.lookback_h,
            self.horizon_h,
            (len(vocab.gpu_pools) + 1, len(vocab.clusters) + 1, len(vocab.tenants) + 1),
            kernel=self.kernel,
            emb_dim=self.emb_dim,
            attn_dim=self.attn_dim,
        )
        if self.warm_start and self._net is not None and self._vocab is not None:
            self._carry_over(net, vocab)
        windows = _Windows(
            torch, matrix, self.lookback_h, self.horizon_h, self.stride_min, self.kernel
        )
        self.last_fit = {"samples": float(len(windows)), "epochs": 0.0, "val_loss": float("nan")}
        if not keys or len(windows) == 0:
            return net.eval()
        ids = self._ids(vocab, keys)
        time = self._time(now_min - matrix.shape[1] + windows.starts)
        # validation: samples whose labels start in the last val_days; training: those whose
        # labels end before them
        split = matrix.shape[1] - int(self.val_days * MINUTES_PER_DAY)
        val = np.flatnonzero(windows.starts >= split)
        train = np.flatnonzero(windows.starts + self.horizon_h * MINUTES_PER_HOUR <= split)
        if len(val) < self.batch_size or not len(train):
            train, val = np.arange(len(windows)), np.zeros(0, np.int64)
        self.last_fit["validated"] = bool(len(val))

        def loss_of(idx: np.ndarray) -> Any:
            x, y, inner = windows.batch(idx)
            if not bool((y != 0).any()):
                return None
            mean, sigma = net(x, time[idx], ids, inner)
            return nll_skipping_zeros(mean, sigma, y)

        opt = torch.optim.Adam(net.parameters(), lr=self.lr)
        gen = torch.Generator().manual_seed(self.seed)
        best, best_state, stale, epochs = float("inf"), None, 0, 0
        for epoch in range(self.epochs):
            # the authors' "type1" schedule: halved every 3 epochs after the first
            for group in opt.param_groups:
                group["lr"] = self.lr * 0.5 ** (max(epoch - 1, 0) // 3)
            net.train()
            order = train[torch.randperm(len(train), generator=gen).numpy()]
            for start in range(0, len(order), self.batch_size):
                loss = loss_of(order[start : start + self.batch_size])
                if loss is None:
                    continue
                opt.zero_grad()
                loss.backward()
                opt.step()
            epochs = epoch + 1
            if not len(val):
                continue
            net.eval()
            with torch.no_grad():
                losses = [
                    float(v)
                    for s in range(0, len(val), self.batch_size)
                    if (v := loss_of(val[s : s + self.batch_size])) is not None
                ]
            score = float(np.mean(losses)) if losses else float("inf")
            if score < best:
                best, best_state, stale = score, copy.deepcopy(net.state_dict()), 0
            else:
                stale += 1
                if stale >= self.patience:
                    break
        if best_state is not None:
            net.load_state_dict(best_state)
        self.last_fit.update({"epochs": float(epochs), "val_loss": best})
        return net.eval()

    def _carry_over(self, net: Any, vocab: Vocab) -> None:
        """Start ``net`` from the last fit's weights: every head, time embedding and the
        attention as they were; a class row by its name (rows of names new to ``vocab`` and
        of none keep their fresh start)."""
        assert self._net is not None and self._vocab is not None
        old, new = self._net.state_dict(), net.state_dict()
        old_vocab = self._vocab
        pairs = [(old_vocab.gpu_pools, vocab.gpu_pools), (old_vocab.clusters, vocab.clusters),
                 (old_vocab.tenants, vocab.tenants)]  # fmt: skip
        for name, tensor in old.items():
            if not name.startswith("classes."):
                new[name] = tensor.clone()
        for i, (before, now) in enumerate(pairs):
            rows = [(now[n], before[n]) for n in now if n in before] + [(0, 0)]
            table = new[f"classes.{i}.weight"]
            for to, frm in rows:
                table[to] = old[f"classes.{i}.weight"][frm]
        net.load_state_dict(new)

    def predict_peaks(
        self,
        keys: Sequence[SeriesKey],
        peaks: np.ndarray,
        now_min: int,
        horizon_h: int,
        recorded_min: int | None = None,
    ) -> Forecasts:
        """Hourly peak mean and std of every series for the next ``horizon_h`` (<= the
        fitted horizon) hours, from the last ``lookback_h`` hourly peaks: one forward pass
        for all of them."""
        check_now(now_min, horizon_h)
        if self._naive is not None:
            return self._naive.predict_peaks(keys, peaks, now_min, horizon_h, recorded_min)
        if self._net is None or self._vocab is None:
            raise NotFittedError("OrgLinear.predict called before fit")
        if horizon_h > self.horizon_h:
            raise ForecastError(
                f"horizon_h must be <= the fitted {self.horizon_h}, got {horizon_h}"
            )
        x = check_peaks(keys, peaks, self.lookback_h)
        # each series in its own units (a key new since the fit: its input's peak)
        scales = np.array(
            [
                self._scales.get(k) or max(float(x[i].max(initial=0.0)), 1.0)
                for i, k in enumerate(keys)
            ]
            if self.scale
            else np.ones(len(keys))
        )
        x = x / scales[:, None]
        torch = self._torch
        vocab = self._vocab

        def forward() -> tuple[np.ndarray, np.ndarray]:
            with torch.no_grad():
                mean, sigma = self._net(
                    torch.as_tensor(x, dtype=torch.float32)[None],
                    self._time(np.array([now_min])),
                    self._ids(vocab, keys),
                )
            return mean[0].numpy().astype(float), sigma[0].numpy().astype(float)

        mean, sigma = self._run(forward)
        mean, sigma = mean * scales[:, None], sigma * scales[:, None]
        return Forecasts(
            keys=tuple(keys),
            mean=np.maximum(mean[:, :horizon_h], 0.0),
            std=np.maximum(sigma[:, :horizon_h], MIN_STD),
        )
