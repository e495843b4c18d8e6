"""The OrgLinear network (PyTorch). Imported only by :mod:`stoker.forecast.orglinear`, and only
when an OrgLinear forecaster is built, so the base install never needs torch."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

# in normalised units (a share of the series' scale, itself >= 1 GPU). Idle tenants give
# exact-zero windows; a tiny floor lets their variance collapse, and the NLL's mean gradient
# (error / variance) then swamps every other sample.
_STD_FLOOR = 0.05


class OrgLinearNet(nn.Module):
    """DLinear with a distributional head and id and calendar embeddings.

    The input window (B, L) is split by a moving average (kernel ``kernel``, edges
    replicated) into trend and seasonal parts; one linear map per part gives the mean of the
    H hours ahead, another pair the pre-softplus deviation. Embeddings of tenant, pool (GPU
    model) and cluster, and of each target hour's hour of day, weekday and holiday, add a
    learned offset to both, per hour ahead.
    """

    def __init__(
        self,
        lookback: int,
        horizon: int,
        n_tenants: int,
        n_pools: int,
        n_clusters: int,
        kernel: int = 25,
        emb_dim: int = 4,
    ) -> None:
        super().__init__()
        if kernel % 2 != 1:
            raise ValueError(f"kernel must be odd, got {kernel}")
        self.kernel = kernel
        self.mean_trend = nn.Linear(lookback, horizon)
        self.mean_seasonal = nn.Linear(lookback, horizon)
        self.std_trend = nn.Linear(lookback, horizon)
        self.std_seasonal = nn.Linear(lookback, horizon)
        # start from persistence: both mean heads read the last hour only, so mean = the
        # last hourly peak (trend + seasonal = x). DLinear starts from the window average
        # (1/L everywhere), a poor start where demand is long jobs that hold their level.
        for head in (self.mean_trend, self.mean_seasonal):
            nn.init.zeros_(head.weight)
            nn.init.zeros_(head.bias)
            with torch.no_grad():
                head.weight[:, -1] = 1.0
        self.tenant = nn.Embedding(n_tenants, emb_dim)
        self.pool = nn.Embedding(n_pools, emb_dim)
        self.cluster = nn.Embedding(n_clusters, emb_dim)
        self.hour = nn.Embedding(24, emb_dim)
        self.weekday = nn.Embedding(7, emb_dim)
        self.holiday = nn.Embedding(2, emb_dim)
        self.mean_emb = nn.Linear(6 * emb_dim, 1)
        self.std_emb = nn.Linear(6 * emb_dim, 1)
        # embeddings start neutral: random offsets of the order of the series' scale would
        # undo the persistence start
        for head in (self.mean_emb, self.std_emb):
            nn.init.zeros_(head.weight)
            nn.init.zeros_(head.bias)

    def decompose(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(trend, seasonal) of windows ``x`` (B, L): moving average and the remainder."""
        half = (self.kernel - 1) // 2
        padded = torch.cat([x[:, :1].expand(-1, half), x, x[:, -1:].expand(-1, half)], dim=1)
        trend = F.avg_pool1d(padded.unsqueeze(1), self.kernel, stride=1).squeeze(1)
        return trend, x - trend

    def forward(
        self,
        x: torch.Tensor,
        ids: torch.Tensor,
        hour: torch.Tensor,
        weekday: torch.Tensor,
        holiday: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and std (B, H) of the normalised hourly peaks ahead."""
        trend, seasonal = self.decompose(x)
        horizon = hour.shape[1]
        static = torch.cat(
            [self.tenant(ids[:, 0]), self.pool(ids[:, 1]), self.cluster(ids[:, 2])], dim=1
        )
        z = torch.cat(
            [
                static.unsqueeze(1).expand(-1, horizon, -1),
                self.hour(hour),
                self.weekday(weekday),
                self.holiday(holiday),
            ],
            dim=2,
        )
        mean = self.mean_trend(trend) + self.mean_seasonal(seasonal) + self.mean_emb(z)[..., 0]
        raw = self.std_trend(trend) + self.std_seasonal(seasonal) + self.std_emb(z)[..., 0]
        return mean, F.softplus(raw) + _STD_FLOOR
