"""The broker's TOML configuration: policies by name, the forecaster's cadence, the spot
grace; a typo or a value of the wrong type is an error naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from stoker.api.config import ConfigError
from stoker.broker.config import BrokerConfig
from stoker.broker.sandbox_fusion import code_run_profile


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
spot_quota = "none"
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
    assert cfg.policies.overrides() == {
        "keepalive": "fitted",
        "spot_quota": "none",
    }
    assert (cfg.forecast.forecaster, cfg.forecast.query_every_s) == ("naive", 60.0)
    assert cfg.forecast.refit_every_s == 3600.0 and cfg.forecast.horizon_h == 4
    assert cfg.spot.grace_s == 5.0
    chosen = cfg.policies.build(cfg.spot.grace_s)
    assert type(chosen.policies.keepalive).__name__ == "FittedKeepAlive"  # named over preset
    assert chosen.policies.hpspot.quota.name == "none" and chosen.policies.hpspot.grace_s == 5


def test_a_preset_with_its_parameters_changed(tmp_path: Path) -> None:
    text = "[policies]\npreset = 'gfs-reserve-patient-lend+lend_idle=0.25+hp_evict_after_s=600'\n"
    hpspot = _load(tmp_path, text).policies.build(30.0).policies.hpspot
    assert (hpspot.lend_idle, hpspot.hp_evict_after_s, hpspot.reservation.backfill_free) == (
        0.25,
        600.0,
        True,
    )


def test_keepalive_s_alone_is_a_fixed_keepalive(tmp_path: Path) -> None:
    cfg = _load(tmp_path, "[policies]\nkeepalive_s = 7\n")
    fixed = cfg.build_policies().policies.keepalive
    assert type(fixed).__name__ == "FixedKeepAlive" and fixed.ttl_s == 7.0
    # the keep-alive's one default: a profile that names only its kind takes the seconds
    # from [policies], one that names only its seconds takes the kind
    cfg = _load(
        tmp_path,
        "[policies]\nkeepalive = 'fitted'\nkeepalive_s = 9\n"
        "[profiles.a]\nkeepalive = 'fixed'\n[profiles.b]\nkeepalive_s = 4\n[profiles.c]\n",
    )
    built = cfg.build_policies().policies
    a, b = built.profiles["a"].keepalive, built.profiles["b"].keepalive
    assert type(a).__name__ == "FixedKeepAlive" and a.ttl_s == 9.0
    assert type(b).__name__ == "FittedKeepAlive" and b.fallback_s == 4.0
    assert "c" not in built.profiles and built.keepalive.fallback_s == 9.0
    # the key an earlier release read at the top level: refused, saying where it went
    with pytest.raises(
        ConfigError, match=r"unknown key 'keepalive_s' \(it moved: set \[policies\]"
    ):
        _load(tmp_path, "keepalive_s = 7\n")
    default = BrokerConfig().policies.build(30.0)
    assert default.name == "gfs-lend" and default.forecaster == "default"
    # spot may run on the GPUs HP does not hold while no HP job waits (the forecast's
    # quota alone keeps idle GPUs from it: the live report of a spot job starving)
    assert default.policies.hpspot.lend_idle == 1.0
    assert default.policies.warm_cap.name == "keepalive"  # the HP forecast within the keep-alive


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[policies]\nkeep_alive = 'fixed'\n", "unknown key 'policies.keep_alive'"),
        ("[forecast]\nquery_every_s = 'often'\n", "forecast.query_every_s"),
        ("[spot]\ngrace = 3\n", "unknown key 'spot.grace'"),
        ("spot = 3\n", "spot: must be a table"),
        ("[spot]\ngrace_s = -1\n", "spot.grace_s"),
        ("[forecast]\nforecaster = 'oracle'\n", "forecast.forecaster"),
        ("[forecast]\nquery_every_s = 0\n", "forecast.query_every_s"),
        ("gpu_slots = 'two'\n", "gpu_slots"),
        ("colour = 'red'\n", "'colour'"),
        ("[policies]\npreset = 'best'\n", "policies.preset: unknown 'best'"),
        ("[policies]\npreset = 'gfs+lend_idle=7'\n", "policies.preset: lend_idle must be in"),
        ("[policies]\nkeepalive = 'forever'\n", "policies.keepalive: unknown 'forever'"),
        ("[policies]\nspot_quota = 'magic'\n", "policies.spot_quota: unknown 'magic'"),
        ("[policies]\nstandby = 'tight'\n", "policies.standby: unknown 'tight'"),
        # nothing is coerced: a string is not a list of modules, nor a number
        ("[profiles.t]\npreload = 'torch'\n", "profiles.t.preload: Input should be a valid list"),
        ("[profiles.t]\ngpus = '1'\n", "profiles.t.gpus: Input should be a valid integer"),
        ("[profiles.t]\nnetwork = 1\n", "profiles.t.network: Input should be a valid boolean"),
        ("[profiles.t]\nmin_warm = -1\n", "profiles.t.min_warm: Input should be greater"),
        ("[profiles.t]\nkeepalive = 'forever'\n", "profiles.t.keepalive: unknown 'forever'"),
        ("[profiles.t]\nwarm = 2\n", "unknown key 'profiles.t.warm'"),
        ("[profiles.t]\ngpus = 0\ncpus = 0\n", "profiles.t.cpus: a CPU-only profile needs"),
        ("[cpu_slots]\ncpus = '8'\n", "cpu_slots.cpus: Input should be a valid number"),
        ("[cpu_slots]\ngpus = 8\n", "unknown key 'cpu_slots.gpus'"),
        ("max_keepalive_s = 0\n", "max_keepalive_s: Input should be greater than 0"),
        ("data_dir = 5\n", "data_dir: Input should be a valid string"),
        ("sandbox_fusion_profile = 'gpu'\n", "sandbox_fusion_profile: no profile 'gpu'"),
        ("[profiles.t]\ngpu_resource = 'mig'\n", "profiles.t.gpu_resource: String should match"),
        ("[profiles.t]\ngpus = 0\ncpus = 1\nmemory_mb = 512\ngpu_resource = 'a/b'\n", "a CPU-only"),
        ("keys_dir = 1\n", "keys_dir: Input should be a valid string"),
    ],
)
def test_unknown_or_mistyped_keys_are_named(tmp_path: Path, text: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        _load(tmp_path, text)


def test_pools_a_user_sizes(tmp_path: Path) -> None:
    cfg = _load(
        tmp_path,
        """
max_keepalive_s = 600
[policies]
keepalive_s = 20
[cpu_slots]
cpus = 8
memory_mb = 8192
[profiles.verify]
gpus = 0
cpus = 0.5
memory_mb = 1024
min_warm = 2
keepalive = "always-on"
[profiles.gpu]
min_warm = 1
[profiles.fit]
keepalive = "fitted"
keepalive_s = 5
""",
    )
    assert (cfg.cpu_slots.cpus, cfg.cpu_slots.memory_mb, cfg.max_keepalive_s) == (8.0, 8192, 600)
    verify = cfg.profiles[0].core
    assert (verify.gpus, verify.cpu, verify.memory_gb, verify.cpu_only) == (0, 0.5, 1.0, True)
    own = cfg.build_policies().policies.profiles
    assert type(own["verify"].keepalive).__name__ == "AlwaysOn" and own["verify"].min_warm == 2
    assert own["gpu"].keepalive is None and own["gpu"].min_warm == 1  # the broker's keep-alive
    assert own["fit"].keepalive.fallback_s == 5.0 and own["fit"].min_warm == 0


def test_the_code_run_profile(tmp_path: Path) -> None:
    both = "[profiles.big]\n[profiles.verify]\ngpus = 0\ncpus = 1.0\nmemory_mb = 512\n"
    assert code_run_profile(_load(tmp_path, both)) == "verify"  # the first CPU-only one
    assert code_run_profile(_load(tmp_path, "[profiles.big]\n")) == "big"
    named = _load(tmp_path, "sandbox_fusion_profile = 'big'\n" + both)
    assert code_run_profile(named) == "big"


def test_a_profile_names_its_own_gpu_pool_resource_and_image(tmp_path: Path) -> None:
    """On Kubernetes one broker serves several GPU models, MIG slices among them."""
    cfg = _load(
        tmp_path,
        "gpu_model = 'NVIDIA-H100-80GB-HBM3'\nkeys_dir = '/etc/stoker/keys'\n"
        "[profiles.big]\n"
        "[profiles.small]\ngpu_model = 'NVIDIA-A100-SXM4-80GB'\n"
        "gpu_resource = 'nvidia.com/mig-1g.10gb'\nshare = 1.0\nstandby_share = 0.0\n"
        "image = 'registry.example/stoker-torch:0.1.0'\n",
    )
    big, small = cfg.profiles
    assert big.gpu_model is None and big.runtime.gpu_resource is None  # the broker's
    assert small.gpu_model == "NVIDIA-A100-SXM4-80GB"
    assert small.runtime.gpu_resource == "nvidia.com/mig-1g.10gb"
    assert small.runtime.image == "registry.example/stoker-torch:0.1.0"
    assert cfg.secret_key_path == Path("/etc/stoker/keys/secret.key")
    assert cfg.viewer_token_path == Path("/etc/stoker/keys/viewer.token")


def test_an_as_released_preset_is_for_the_simulator_only(tmp_path: Path) -> None:
    for name in ("gfs-as-released", "fgd-as-released", "gfs+gang_rule=partial"):
        with pytest.raises(ConfigError, match="for the simulator only"):
            _load(tmp_path, f"[policies]\npreset = {name!r}\n")
