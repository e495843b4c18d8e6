"""The broker's TOML configuration: policies by name, the forecaster's cadence, the spot
grace; a typo or a value of the wrong type is an error naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from stoker.api.config import ConfigError
from stoker.broker.config import BrokerConfig


def _load(tmp_path: Path, text: str) -> BrokerConfig:
    path = tmp_path / "broker.toml"
    path.write_text(text)
    return BrokerConfig.load(path)


def test_policies_forecast_and_spot_tables(tmp_path: Path) -> None:
    cfg = _load(
        tmp_path,
        """
gpu_slots = 3
gpu_model = "a100"
[policies]
preset = "always_on"
keepalive = "fitted"
spot_quota = "static"
[forecast]
forecaster = "naive"
query_every_s = 60
refit_every_s = 3600
[spot]
grace_s = 5
""",
    )
    assert (cfg.gpu_slots, cfg.gpu_model) == (3, "a100")
    assert cfg.policies.preset == "always_on"
    assert cfg.policies.overrides() == {"keepalive": "fitted", "spot_quota": "static"}
    assert (cfg.forecast.forecaster, cfg.forecast.query_every_s) == ("naive", 60.0)
    assert cfg.forecast.refit_every_s == 3600.0 and cfg.forecast.horizon_h == 4
    assert cfg.spot.grace_s == 5.0
    chosen = cfg.policies.build(cfg.keepalive_s, cfg.spot.grace_s)
    assert type(chosen.policies.keepalive).__name__ == "FittedKeepAlive"  # named over preset
    assert chosen.policies.gangs.quota.name == "static-0.3" and chosen.policies.gangs.grace_s == 5


def test_keepalive_s_alone_is_a_fixed_keepalive(tmp_path: Path) -> None:
    fixed = _load(tmp_path, "keepalive_s = 7\n").policies.build(7.0, 30.0).policies.keepalive
    assert type(fixed).__name__ == "FixedKeepAlive" and fixed.ttl_s == 7.0
    default = BrokerConfig().policies.build(None, 30.0)
    assert default.name == "firepool" and default.forecaster == "default"


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[policies]\nkeep_alive = 'fixed'\n", "policies.'keep_alive'"),
        ("[forecast]\nquery_every_s = 'often'\n", "forecast.query_every_s"),
        ("[spot]\ngrace = 3\n", "spot.'grace'"),
        ("spot = 3\n", "spot must be a table"),
        ("[spot]\ngrace_s = -1\n", "spot.grace_s"),
        ("[forecast]\nforecaster = 'oracle'\n", "forecast.forecaster"),
        ("[forecast]\nquery_every_s = 0\n", "forecast.query_every_s"),
        ("gpu_slots = 'two'\n", "gpu_slots"),
        ("colour = 'red'\n", "'colour'"),
        ("[policies]\npreset = 'best'\n", "policies.preset: unknown 'best'"),
        ("[policies]\nkeepalive = 'forever'\n", "policies.keepalive: unknown 'forever'"),
        ("[policies]\nspot_quota = 'magic'\n", "policies.spot_quota: unknown 'magic'"),
    ],
)
def test_unknown_or_mistyped_keys_are_named(tmp_path: Path, text: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        _load(tmp_path, text)
