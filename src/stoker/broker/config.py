"""Configuration: the broker's (profiles, limits, where its data lives) and the client's
(``STOKER_URL``/``STOKER_TOKEN`` over a file).

The broker reads a TOML file (``stoker up --config FILE``)::

    data_dir = "/var/lib/stoker"    # default: platformdirs' user data dir
    gpu_slots = 2                   # virtual GPU slots where NVML finds none
    max_code_bytes = 67108864
    keepalive_s = 60

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
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs

from stoker.api.config import ConfigError
from stoker.core.model import Profile
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
    max_timeout_s: float = 24 * 3600.0
    keepalive_s: float = 60.0
    find_links: tuple[Path, ...] = ()
    no_index: bool = False

    @property
    def db_path(self) -> Path:
        return self.data_dir / "stoker.db"

    @property
    def admin_token_path(self) -> Path:
        return self.data_dir / "admin.token"

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
        known = {
            "data_dir",
            "gpu_slots",
            "max_code_bytes",
            "max_timeout_s",
            "keepalive_s",
            "profiles",
            "find_links",
            "no_index",
        }
        for key in raw:
            if key not in known:
                raise ConfigError(f"config {path}: unknown key {key!r}")
        if "data_dir" in raw:
            cfg.data_dir = Path(raw["data_dir"]).expanduser()
        for key in (
            "gpu_slots",
            "max_code_bytes",
            "max_timeout_s",
            "keepalive_s",
            "no_index",
        ):
            if key in raw:
                setattr(cfg, key, type(getattr(cfg, key))(raw[key]))
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
