"""Configuration: the broker's (profiles, limits, where its data lives) and the client's
(``STOKER_URL``/``STOKER_TOKEN`` over a file).

The broker reads a TOML file (``stoker up --config FILE``)::

    data_dir = "/var/lib/stoker"    # default: platformdirs' user data dir
    gpu_slots = 2                   # virtual GPU slots where NVML finds none
    gpu_model = "any"               # the GPU pool this host's GPUs belong to
    max_code_bytes = 67108864
    max_request_bytes = 1048576     # any other request body (a job, a secret)
    keepalive_s = 60                # a fixed keep-alive of 60 s (default: the preset's)

    [profiles.plain]
    share = 0.9                     # leaves room beside an active pod for a standby
    standby_share = 0.1
    preload = []
    packages = []
    memory_mb = 2048                # limits: these are the defaults; 0 means no limit
    pids_max = 256
    cpus = 1.0
    tmp_mb = 256                    # each of /tmp and /dev/shm
    workspace_mb = 1024
    output_mb = 16                  # per job, stdout and stderr together

    [policies]                      # every decision by its name in the core's registry
    preset = "firepool"             # the starting set; the keys below override one each
    keepalive = "fitted"            # fixed | fitted | always-on
    warm_budget = "queue-driven"
    standby = "beside-active"       # or none
    spot_quota = "forecast"         # or static

    [forecast]                      # the HP demand forecaster (stoker.forecast's registry)
    forecaster = "ridge"            # default: the preset's (ridge; naive for gfs-naive)
    query_every_s = 300             # query and hand the core the answer (GFS: 5 min)
    refit_every_s = 86400           # refit on the stored history (GFS: daily)
    horizon_h = 4
    history_days = 35               # history read from the store per refit

    [spot]
    grace_s = 30                    # SIGTERM, then SIGKILL this much later (checkpoint time)
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import platformdirs

from stoker.api.config import ConfigError
from stoker.core.model import Profile
from stoker.core.policy_names import Knobs, apply
from stoker.core.registry import FIXED_KEEPALIVE_S, Preset, preset
from stoker.forecast.registry import FORECASTERS
from stoker.runtime.base import RuntimeProfile


@dataclass(frozen=True, slots=True)
class BrokerProfile:
    """A profile as the broker knows it: the core's shape and the runtime's environment."""

    core: Profile
    runtime: RuntimeProfile

    @property
    def name(self) -> str:
        return self.core.name

    @staticmethod
    def simple(
        name: str,
        *,
        preload: tuple[str, ...] = (),
        packages: tuple[str, ...] = (),
        standby: bool = True,
        memory_mb: int | None = None,
        network: bool = False,
        gpus: int = 1,
    ) -> BrokerProfile:
        """A one-GPU profile whose active pods leave a tenth of the card for a standby."""
        share, standby_share = (0.9, 0.1) if standby and gpus == 1 else (1.0, 0.0)
        core = Profile(name, gpus=gpus, share=share, standby_share=standby_share, recyclable=True)
        # the runtime's safe default limits unless a memory limit is named
        limits = {} if memory_mb is None else {"memory_mb": memory_mb}
        rt = RuntimeProfile(name, packages=packages, preload=preload, network=network, **limits)
        return BrokerProfile(core, rt)


DEFAULT_PRESET = "firepool"  # Firepool's warm pools with GFS's hp/spot defaults


@dataclass
class PolicyConfig:
    """The core's policies by registry name: a preset, and per extension point an override
    (None keeps the preset's). The core's registry checks the names when the broker starts."""

    preset: str | None = None
    keepalive: str | None = None
    warm_budget: str | None = None
    standby: str | None = None
    spot_quota: str | None = None

    def build(self, keepalive_s: float | None, grace_s: float) -> Preset:
        """The core's preset (fresh policies) with the named policies swapped in; a fixed
        keep-alive of ``keepalive_s`` when it is given and no other kind is named.
        ValueError naming the key for an unknown name."""
        chosen = preset(self.preset or DEFAULT_PRESET)  # ValueError "preset: ..."
        overrides = self.overrides()
        if keepalive_s is not None:
            overrides.setdefault("keepalive", "fixed")
        knobs = Knobs(keepalive_s=FIXED_KEEPALIVE_S if keepalive_s is None else keepalive_s)
        apply(chosen.policies, overrides, knobs)
        chosen.policies.gangs.grace_s = grace_s
        return chosen

    def overrides(self) -> dict[str, str]:
        """The extension points set here, by name."""
        points = (f.name for f in fields(self) if f.name != "preset")
        return {k: v for k in points if (v := getattr(self, k)) is not None}


@dataclass
class ForecastConfig:
    """How the broker runs the HP demand forecaster (off the scheduling loop)."""

    forecaster: str | None = None  # None: the preset's (ridge, the default, for most)
    query_every_s: float = 300.0
    refit_every_s: float = 86400.0
    horizon_h: int = 4
    history_days: float = 35.0

    def check(self) -> None:
        """ValueError naming the first bad field."""
        if self.forecaster is not None and self.forecaster not in FORECASTERS:
            raise ValueError(
                f"forecaster: one of {', '.join(FORECASTERS)}, not {self.forecaster!r}"
            )
        for name in ("query_every_s", "refit_every_s", "horizon_h", "history_days"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be > 0")


@dataclass
class SpotConfig:
    """How an evicted spot job is stopped: SIGTERM, then SIGKILL ``grace_s`` later."""

    grace_s: float = 30.0

    def check(self) -> None:
        """ValueError naming the first bad field."""
        if not self.grace_s >= 0:
            raise ValueError("grace_s: must be >= 0")


#: a profile's limits a config may name (see :class:`stoker.runtime.base.RuntimeProfile`)
PROFILE_LIMITS = ("memory_mb", "pids_max", "cpus", "tmp_mb", "workspace_mb", "output_mb")


def default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("stoker"))


@dataclass
class BrokerConfig:
    """Everything a broker needs to start."""

    data_dir: Path = field(default_factory=default_data_dir)
    profiles: list[BrokerProfile] = field(default_factory=lambda: [BrokerProfile.simple("plain")])
    gpu_slots: int = 2
    max_code_bytes: int = 64 * 1024 * 1024
    max_request_bytes: int = 1024 * 1024
    max_timeout_s: float = 24 * 3600.0
    # a fixed keep-alive of this many seconds (unless [policies] keepalive names another
    # kind; then the fitted one's fallback); None: the preset's
    keepalive_s: float | None = None
    gpu_model: str = "any"
    find_links: tuple[Path, ...] = ()
    no_index: bool = False
    policies: PolicyConfig = field(default_factory=PolicyConfig)
    forecast: ForecastConfig = field(default_factory=ForecastConfig)
    spot: SpotConfig = field(default_factory=SpotConfig)

    @property
    def db_path(self) -> Path:
        return self.data_dir / "stoker.db"

    @property
    def admin_token_path(self) -> Path:
        return self.data_dir / "admin.token"

    @property
    def secret_key_path(self) -> Path:
        """The key sealing secrets and env values in the store (mode 600, never in it)."""
        return self.data_dir / "secret.key"

    @property
    def lock_path(self) -> Path:
        """Held by the one broker that owns this data dir and its pods."""
        return self.data_dir / "broker.lock"

    @property
    def pid_path(self) -> Path:
        """The running broker's pid and URL (``stoker down`` reads it)."""
        return self.data_dir / "broker.pid"

    @property
    def runtime_dir(self) -> Path:
        return self.data_dir / "runtime"

    @staticmethod
    def load(path: Path | str) -> BrokerConfig:
        """Read a TOML configuration file; unknown keys are errors (a typo never passes)."""
        try:
            raw = tomllib.loads(Path(path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"config {path}: {exc}") from exc
        cfg = BrokerConfig()
        kinds = {"gpu_slots": int, "max_code_bytes": int, "max_request_bytes": int}
        kinds |= {"max_timeout_s": float}
        kinds |= {"gpu_model": str, "keepalive_s": float, "no_index": bool}
        tables = ("profiles", "policies", "forecast", "spot")
        known = {"data_dir", "find_links", *kinds, *tables}
        for key in raw:
            if key not in known:
                raise ConfigError(f"config {path}: unknown key {key!r}")
        if "data_dir" in raw:
            cfg.data_dir = Path(raw["data_dir"]).expanduser()
        _set(cfg, {k: raw[k] for k in kinds if k in raw}, path, "", tuple(kinds), kinds)
        _table(cfg.policies, raw, "policies", path)
        _table(cfg.forecast, raw, "forecast", path)
        _table(cfg.spot, raw, "spot", path)
        for name, table in (("forecast", cfg.forecast), ("spot", cfg.spot)):
            try:
                table.check()
            except ValueError as exc:
                raise ConfigError(f"config {path}: {name}.{exc}") from exc
        try:  # every name checked now, not when the broker starts
            cfg.policies.build(cfg.keepalive_s, cfg.spot.grace_s)
        except ValueError as exc:
            raise ConfigError(f"config {path}: policies.{exc}") from exc
        if "find_links" in raw:
            cfg.find_links = tuple(Path(p) for p in raw["find_links"])
        if "profiles" in raw:
            cfg.profiles = []
            for name, p in raw["profiles"].items():
                try:
                    share = float(p.get("share", 0.9))
                    core = Profile(
                        name,
                        gpus=int(p.get("gpus", 1)),
                        share=share,
                        standby_share=float(p.get("standby_share", 0.1)),
                        recyclable=True,
                    )
                except (ValueError, TypeError) as exc:
                    raise ConfigError(f"config {path}: profiles.{name}: {exc}") from exc
                # a limit not named keeps the runtime's safe default; 0 means none at all
                limits = {k: p[k] or None for k in PROFILE_LIMITS if k in p}
                rt = RuntimeProfile(
                    name,
                    packages=tuple(p.get("packages", ())),
                    preload=tuple(p.get("preload", ())),
                    network=bool(p.get("network", False)),
                    **limits,
                )
                cfg.profiles.append(BrokerProfile(core, rt))
        return cfg


def _set(
    obj: object,
    raw: dict[str, Any],
    path: object,
    where: str,
    keys: tuple[str, ...],
    kinds: dict[str, type] | None = None,
) -> None:
    """Copy ``keys`` from a TOML table onto ``obj``, each converted to its type in ``kinds``
    (default: its current value's, str for None); an unknown key or a value of the wrong
    type is a ConfigError naming it."""
    for key in raw:
        if key not in keys:
            raise ConfigError(f"config {path}: unknown key {where}{key!r}")
    for key in keys:
        if key not in raw:
            continue
        current = getattr(obj, key)
        kind = (kinds or {}).get(key) or (str if current is None else type(current))
        try:
            setattr(obj, key, kind(raw[key]))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"config {path}: {where}{key}: {exc}") from exc


def _table(obj: object, raw: dict[str, Any], name: str, path: object) -> None:
    """A TOML table onto the dataclass ``obj`` (every field a key)."""
    table = raw.get(name, {})
    if not isinstance(table, dict):
        raise ConfigError(f"config {path}: {name} must be a table")
    _set(obj, table, path, f"{name}.", tuple(f.name for f in fields(obj)))  # type: ignore[arg-type]
