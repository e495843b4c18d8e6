"""The OrgLinear network (PyTorch), as the GFS authors built it. Imported only by
:mod:`stoker.forecast.orglinear`, and only when an OrgLinear forecaster is built, so the base
install never needs torch.

Their model (``estimator/model/OrgLinear.py`` in Xu-Sheng-lin/GFS-asplos-26), written anew:
DLinear's moving-average split of each series' window of hourly peaks into trend and
seasonal parts; each part, with the time features of the forecast start and the series'
class context, goes through its own linear head, and the two heads sum to the mean; a third
head reads the raw window (not a part) with the same features and gives sigma through a
softplus. The class context: an embedding of each of the series' classes (GPU model,
cluster, tenant), mixed by a small self-attention across the three.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

N_CLASSES = 3  # GPU model, cluster, tenant
N_TIME_FEATURES = 3  # workday, weekday, hour of the forecast start


class OrgLinearNet(nn.Module):
    """Mean and sigma (B, C, H) of the next H hourly peaks of C series, from windows (B, C, L).

    ``class_sizes``: how many ids each class has (id 0 included); ``emb_dim``: size of each
    class and time embedding (the authors: 8); ``attn_dim``: the attention's query and key
    size (16); ``kernel``: the moving average's width (25, edges replicated).
    """

    def __init__(
        self,
        lookback: int,
        horizon: int,
        class_sizes: tuple[int, int, int],
        *,
        kernel: int = 25,
        emb_dim: int = 8,
        attn_dim: int = 16,
    ) -> None:
        super().__init__()
        if kernel % 2 != 1:
            raise ValueError(f"kernel must be odd, got {kernel}")
        self.kernel = kernel
        self.classes = nn.ModuleList(nn.Embedding(n, emb_dim) for n in class_sizes)
        self.workday = nn.Embedding(2, emb_dim)
        self.weekday = nn.Embedding(7, emb_dim)
        self.hour = nn.Embedding(24, emb_dim)
        self.q = nn.Linear(emb_dim, attn_dim)
        self.k = nn.Linear(emb_dim, attn_dim)
        self.v = nn.Linear(emb_dim, emb_dim)
        self.norm = 1.0 / math.sqrt(attn_dim)
        width = lookback + (N_TIME_FEATURES + N_CLASSES) * emb_dim
        self.seasonal_head = nn.Linear(width, horizon)
        self.trend_head = nn.Linear(width, horizon)
        self.sigma_head = nn.Linear(width, horizon)
        # the authors start every weight of the three heads at 1 / lookback (the window's
        # average, DLinear's start), the features' columns included; biases keep torch's
        for head in (self.seasonal_head, self.trend_head, self.sigma_head):
            nn.init.constant_(head.weight, 1.0 / lookback)

    def decompose(
        self, x: torch.Tensor, inner: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(trend, seasonal) of windows ``x`` (..., L): moving average and the remainder.

        ``inner``: the trend at positions ``half .. L - half - 1`` (half = (kernel - 1) / 2),
        already taken from the whole series (:func:`moving_average`: the same sums in the
        same order, so the same floats); only the edges, which replicate the window's ends,
        are computed here. Training windows overlap, so this saves most of the pooling.
        """
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        half = (self.kernel - 1) // 2
        if inner is None:
            padded = torch.cat(
                [flat[:, :1].expand(-1, half), flat, flat[:, -1:].expand(-1, half)], dim=1
            )
            trend = moving_average(padded, self.kernel).reshape(shape)
        else:
            left = torch.cat([flat[:, :1].expand(-1, half), flat[:, : 2 * half]], dim=1)
            right = torch.cat([flat[:, -2 * half :], flat[:, -1:].expand(-1, half)], dim=1)
            trend = torch.cat(
                [
                    moving_average(left, self.kernel).reshape(*shape[:-1], half),
                    inner,
                    moving_average(right, self.kernel).reshape(*shape[:-1], half),
                ],
                dim=-1,
            )
        return trend, x - trend

    def class_context(self, ids: torch.Tensor) -> torch.Tensor:
        """Each series' classes (C, 3) -> its attention output (C, 3 * emb_dim)."""
        emb = torch.stack([table(ids[:, i]) for i, table in enumerate(self.classes)], dim=1)
        # as the authors: the 1/sqrt(d) factor multiplies the softmax's output, not its input
        att = torch.softmax(self.q(emb) @ self.k(emb).transpose(1, 2), dim=-1) * self.norm
        return (att @ self.v(emb)).reshape(len(ids), -1)

    def forward(
        self,
        x: torch.Tensor,
        time: torch.Tensor,
        ids: torch.Tensor,
        inner_trend: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``x`` (B, C, L) windows, ``time`` (B, 3) workday/weekday/hour of each forecast
        start, ``ids`` (C, 3) classes of each series -> mean and sigma (B, C, H).
        ``inner_trend``: the windows' trend away from their edges, if known (:meth:`decompose`)."""
        b, c, _ = x.shape
        trend, seasonal = self.decompose(x, inner_trend)
        time_features = torch.cat(
            [self.workday(time[:, 0]), self.weekday(time[:, 1]), self.hour(time[:, 2])], dim=1
        )
        features = torch.cat(
            [
                time_features.unsqueeze(1).expand(b, c, -1),
                self.class_context(ids).unsqueeze(0).expand(b, c, -1),
            ],
            dim=2,
        )
        mean = self.seasonal_head(torch.cat([seasonal, features], dim=2)) + self.trend_head(
            torch.cat([trend, features], dim=2)
        )
        sigma = F.softplus(self.sigma_head(torch.cat([x, features], dim=2)))
        return mean, sigma


def moving_average(rows: torch.Tensor, kernel: int) -> torch.Tensor:
    """Mean of every ``kernel`` consecutive values of each row (R, N) -> (R, N - kernel + 1)."""
    return F.avg_pool1d(rows.unsqueeze(1), kernel, stride=1).squeeze(1)


def nll_skipping_zeros(mean: torch.Tensor, sigma: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The authors' loss: Gaussian negative log-likelihood over the labels that are not 0.

    The caller skips a batch without any such label (its mean would be NaN). Sigma is held
    above 1e-6 GPUs so a softplus that underflows to 0 cannot make the Normal improper.
    """
    keep = y != 0
    normal = torch.distributions.Normal(mean[keep], sigma[keep].clamp_min(1e-6))
    return -normal.log_prob(y[keep]).mean()
