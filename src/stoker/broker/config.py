"""Configuration: the broker's (profiles, limits, where its data lives) and the client's
(``STOKER_URL``/``STOKER_TOKEN`` over a file).

The broker reads a TOML file (``stoker up --config FILE``), parsed by pydantic models that
forbid unknown keys and coerce nothing (``preload = "torch"`` is an error, not five
modules): a wrong key or value is a one-line :class:`ConfigError` naming the file and the
key::

    data_dir = "/var/lib/stoker"    # default: platformdirs' user data dir
    gpu_slots = 2                   # virtual GPU slots where NVML finds none
    gpu_model = "any"               # the GPU pool this host's GPUs belong to
    index_url = "https://download.pytorch.org/whl/cpu"  # packages and deps (default: PyPI)
    extra_index_urls = ["https://pypi.org/simple"]
    ca_bundle = "/etc/ssl/certs/corp-proxy.pem"   # CAs uv trusts besides its own
    max_code_bytes = 67108864
    max_file_bytes = 268435456      # a session file streamed in or out
    max_request_bytes = 1048576     # any other request body (a job, a secret)
    max_keepalive_s = 3600          # the longest keep-alive a session may renew for
    database_url = "postgresql://stoker@db/stoker"  # default: SQLite in data_dir
    tenant_history = "keep"         # a deleted tenant's jobs: keep (audit) or delete
    advertise_url = "http://10.0.0.5:8765"   # where other replicas reach this one
    runtime_dir = "/var/lib/stoker-pods"     # default: data_dir/runtime
    keys_dir = "/etc/stoker/keys"   # shared keys (needed on PostgreSQL); default: data_dir

    [cpu_slots]                     # room for CPU-only pods (profiles with gpus = 0)
    cpus = 8.0                      # CPUs they take together (each its profile's cpus)
    memory_mb = 16384               # memory they take together (each its memory_mb)

    [profiles.plain]
    gpus = 1                        # 0: a CPU-only profile (verifiers, tool calls)
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
    min_warm = 0                    # spare pods kept ready for callers not yet seen
    gpu_model = "NVIDIA-A100-80GB"  # its GPU pool (default: the broker's gpu_model)
    gpu_resource = "nvidia.com/mig-1g.10gb"  # Kubernetes: a MIG slice (default: the runtime's)
    image = "registry.example/stoker-torch:0.1.0"  # Kubernetes: the profile's image
    keepalive = "fitted"            # this profile's keep-alive kind (default: [policies]')
    keepalive_s = 30                # its seconds (default: [policies]')

    [policies]                      # every decision by its name in the core's registry
    preset = "gfs-lend"             # the starting set; the keys below override one each
    keepalive = "fitted"            # every profile's keep-alive: fixed | fitted | always-on
    keepalive_s = 60                # a fixed one's length, the fitted one's fallback (60 s)
    warm_budget = "queue-driven"
    standby = "beside-active"       # or none
    spot_quota = "forecast"         # or none

    [forecast]                      # the HP demand forecaster (stoker.forecast's registry)
    forecaster = "ridge"            # default: the preset's (ridge; naive for gfs-naive)
    query_every_s = 300             # query and hand the core the answer (GFS: 5 min)
    refit_every_s = 86400           # refit on the stored history (GFS: daily)
    horizon_h = 4
    history_days = 35               # history read from the store per refit

    [spot]
    grace_s = 30                    # SIGTERM, then SIGKILL this much later (checkpoint time)

    [storage]                       # bounded storage (stoker.broker.storage)
    output_budget_mb = 1024         # a tenant's stored output; past it, not stored
    keep_days = 30                  # finished jobs older are deleted (with their output)
    keep_jobs = 100000              # a tenant's newest finished jobs kept
    min_free_fraction = 0.05        # less free disk: new jobs get a 503

    [shares.default]                # tenant shares (stoker.core.shares); absent: none, every
    weight = 1                      #   queue in submit order. Fair-order weight
    max_queued = 1000               # jobs a tenant may have queued (429 past it)
    max_warm_pods = 16              # idle warm pods a tenant may keep
    max_timeout_s = 3600            # its jobs' longest time limit
    [shares.tenants.research]       # one tenant's own share (unset keys: none, not default's)
    weight = 2
    hp_gpus = { any = 2 }           # HP GPUs guaranteed per GPU pool
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stoker.api.config import ConfigError
from stoker.broker.storage import Retention
from stoker.core.config import ProfilePolicies
from stoker.core.gfs.config import GangRule
from stoker.core.model import Profile
from stoker.core.policies.keepalive import FIXED_KEEPALIVE_S
from stoker.core.policy_names import Knobs, apply, build
from stoker.core.registry import Preset, preset
from stoker.core.shares import Share, TenantShares
from stoker.forecast.registry import FORECASTERS
from stoker.runtime.base import RuntimeProfile
from stoker.units import DAY_S


class _Table(BaseModel):
    """A TOML table: unknown keys are errors, and values are taken as they are typed."""

    model_config = ConfigDict(extra="forbid", strict=True)


@dataclass(frozen=True, slots=True)
class BrokerProfile:
    """A profile as the broker knows it: the core's shape, the runtime's environment, and
    its own warm-pool settings (keep-alive, minimum warm count)."""

    core: Profile
    runtime: RuntimeProfile
    keepalive: str | None = None  # a keep-alive policy's name (None: the broker's)
    keepalive_s: float | None = None
    min_warm: int = 0
    # this profile's GPU pool (the node label's value; None: the broker's gpu_model): on
    # Kubernetes, one broker serves profiles on several GPU models
    gpu_model: str | None = None

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
        min_warm: int = 0,
    ) -> BrokerProfile:
        """A one-GPU profile whose active pods leave a tenth of the card for a standby (a
        CPU-only one with ``gpus=0``: one CPU and the memory limit, 2 GB by default)."""
        share, standby_share = (0.9, 0.1) if standby and gpus == 1 else (1.0, 0.0)
        # the runtime's safe default limits unless a memory limit is named
        limits = {} if memory_mb is None else {"memory_mb": memory_mb}
        rt = RuntimeProfile(name, packages=packages, preload=preload, network=network, **limits)
        core = Profile(
            name,
            gpus=gpus,
            share=share,
            standby_share=standby_share,
            recyclable=True,
            **_cpu_shape(rt, gpus),
        )
        return BrokerProfile(core, rt, min_warm=min_warm)


def _cpu_shape(rt: RuntimeProfile, gpus: int) -> dict[str, float]:
    """A CPU-only profile takes its limits' CPUs and memory from the CPU slots."""
    if gpus:
        return {}
    return {"cpu": rt.cpus or 0.0, "memory_gb": (rt.memory_mb or 0) / 1024}


# Firepool's warm pools and GFS's hp/spot with gfs-lend's quota: while no HP job waits in a
# GPU pool, spot may run on the GPUs HP does not hold, past what the forecast leaves free
# (HP takes them back by eviction, and evictions shrink eta and the loan). GFS's own quota
# alone keeps idle GPUs from spot whenever HP is forecast to need them within the
# guaranteed hour: on a live broker with a short history, the last hour's peak
DEFAULT_PRESET = "gfs-lend"


class PolicyConfig(_Table):
    """The core's policies by registry name: a preset, and per extension point an override
    (None keeps the preset's). The core's registry checks the names when the file is read."""

    preset: str | None = Field(
        None,
        description=(
            "the starting set of policies, by name in the core's registry (default: gfs-lend)"
        ),
    )
    keepalive: str | None = Field(
        None,
        description=(
            "the keep-alive policy: fixed, fitted or always-on (default: the preset's, or fixed"
            " when only keepalive_s is set)"
        ),
    )
    keepalive_s: float | None = Field(
        None,
        ge=0,
        description=(
            "the keep-alive's seconds: a fixed one's length, the fitted one's fallback before"
            f" it has pauses to fit (default: {FIXED_KEEPALIVE_S:g})"
        ),
    )
    warm_budget: str | None = Field(
        None,
        description="the warm budget policy, e.g. queue-driven (default: the preset's)",
    )
    standby: str | None = Field(
        None,
        description="the standby policy: beside-active or none (default: the preset's)",
    )
    spot_quota: str | None = Field(
        None,
        description="the spot quota policy: forecast or none (default: the preset's)",
    )

    def build(
        self,
        grace_s: float,
        profiles: tuple[BrokerProfile, ...] | list[BrokerProfile] = (),
    ) -> Preset:
        """The core's preset (fresh policies) with the named policies swapped in; a fixed
        keep-alive of ``keepalive_s`` when it is given and no other kind is named; each
        profile's own keep-alive (a key it leaves unset is taken from here) and minimum
        warm count. ValueError naming the key for an unknown name."""
        chosen = preset(self.preset or DEFAULT_PRESET)  # ValueError "preset: ..."
        if chosen.cold_start or chosen.policies.hpspot.gang_rule is not GangRule.ALL_OR_NOTHING:
            # the authors' released rules are for comparisons in the simulator: the store
            # keeps no shortened gang, and a broker has its history from its first day
            raise ValueError(
                f"preset: {chosen.name!r} runs the authors' released rules (short gangs,"
                " a cold-started forecast) and is for the simulator only; a broker takes"
                " the corrected presets"
            )
        overrides = self.overrides()
        if self.keepalive_s is not None:
            overrides.setdefault("keepalive", "fixed")
        seconds = FIXED_KEEPALIVE_S if self.keepalive_s is None else self.keepalive_s
        apply(chosen.policies, overrides, Knobs(keepalive_s=seconds))
        chosen.policies.hpspot.grace_s = grace_s
        for p in profiles:
            own = None
            if p.keepalive is not None or p.keepalive_s is not None:
                kind = p.keepalive or overrides.get("keepalive", "fixed")
                knobs = Knobs(keepalive_s=seconds if p.keepalive_s is None else p.keepalive_s)
                own = build("keepalive", kind, knobs)  # ValueError "keepalive: ..."
            if own is not None or p.min_warm:
                chosen.policies.profiles[p.name] = ProfilePolicies(own, p.min_warm)
        return chosen

    def overrides(self) -> dict[str, str]:
        """The extension points set here, by name."""
        points = (k for k in type(self).model_fields if k not in ("preset", "keepalive_s"))
        return {k: v for k in points if (v := getattr(self, k)) is not None}


class ShareConfig(_Table):
    """One tenant's share (:class:`stoker.core.shares.Share`)."""

    weight: float = Field(
        1.0,
        gt=0,
        description="the tenant's fair-order weight (weight 2 gets twice the turns of weight 1)",
    )
    hp_gpus: dict[str, float] = Field(
        {},
        description="HP GPUs guaranteed to the tenant, per GPU pool (GPU model -> GPUs)",
    )
    max_queued: int | None = Field(
        None,
        ge=0,
        description="jobs the tenant may have queued (a submit past it is a 429); unset: no cap",
    )
    max_warm_pods: int | None = Field(
        None,
        ge=0,
        description="idle warm pods the tenant may keep; unset: no cap",
    )
    max_timeout_s: float | None = Field(
        None,
        gt=0,
        description="the longest time limit the tenant's jobs may ask for; unset: no cap",
    )

    def build(self) -> Share:
        return Share(
            self.weight,
            dict(self.hp_gpus),
            self.max_queued,
            self.max_warm_pods,
            self.max_timeout_s,
        )


class SharesConfig(_Table):
    """Tenant shares: ``default`` for every tenant not in ``tenants``."""

    default: ShareConfig = Field(
        ShareConfig(),
        description="the share of every tenant not named in tenants",
    )
    tenants: dict[str, ShareConfig] = Field(
        {},
        description="one tenant's own share, by tenant name (unset keys: none, not default's)",
    )

    def build(self) -> TenantShares:
        """The core's :class:`~stoker.core.shares.TenantShares` (ValueError naming the key)."""
        tenants = {}
        for name, share in self.tenants.items():
            try:
                tenants[name] = share.build()
            except ValueError as exc:
                raise ValueError(f"tenants.{name}.{exc}") from exc
        try:
            return TenantShares(tenants, self.default.build())
        except ValueError as exc:
            raise ValueError(f"default.{exc}") from exc


class ForecastConfig(_Table):
    """How the broker runs the HP demand forecaster (off the scheduling loop)."""

    forecaster: str | None = Field(
        None,
        description=(
            "the HP demand forecaster by name in stoker.forecast's registry (default: the preset's)"
        ),
    )
    query_every_s: float = Field(
        300.0,
        gt=0,
        description="how often the forecaster is queried and its answer handed to the core",
    )
    refit_every_s: float = Field(
        86400.0,
        gt=0,
        description="how often the forecaster is refitted on the stored history",
    )
    horizon_h: int = Field(4, gt=0, description="how far ahead the forecast reaches")
    history_days: float = Field(
        35.0,
        gt=0,
        description="the history read from the store at each refit",
    )

    def check(self) -> None:
        """ValueError naming the forecaster when the registry does not know it."""
        if self.forecaster is not None and self.forecaster not in FORECASTERS:
            raise ValueError(
                f"forecaster: one of {', '.join(FORECASTERS)}, not {self.forecaster!r}"
            )


class SpotConfig(_Table):
    """How an evicted spot job is stopped: SIGTERM, then SIGKILL ``grace_s`` later."""

    grace_s: float = Field(
        30.0,
        ge=0,
        description=(
            "an evicted spot job gets SIGTERM, then SIGKILL this much later (its checkpoint time)"
        ),
    )


class StorageConfig(_Table):
    """What the broker keeps and how much disk it may fill (:mod:`stoker.broker.storage`):
    a tenant's stored output budget (MB), how long and how many finished jobs are kept
    (None: no bound), how often they are pruned, the free disk fraction below which new
    jobs are refused."""

    output_budget_mb: int | None = Field(
        1024, ge=0, description="a tenant's stored job output; past it, output is not stored"
    )
    keep_days: float | None = Field(
        30.0, gt=0, description="finished jobs older than this are deleted with their output"
    )
    keep_jobs: int | None = Field(
        100_000, ge=0, description="a tenant's newest finished jobs kept; older ones deleted"
    )
    prune_every_s: float = Field(60.0, gt=0, description="how often retention runs")
    min_free_fraction: float = Field(
        0.05,
        ge=0,
        lt=1,
        description="below this free fraction of the data dir's disk, new jobs get a 503",
    )

    def build(self) -> Retention:
        mb = self.output_budget_mb
        return Retention(
            output_budget_bytes=None if mb is None else mb * 1024 * 1024,
            keep_s=None if self.keep_days is None else self.keep_days * DAY_S,
            keep_jobs=self.keep_jobs,
            prune_every_s=self.prune_every_s,
            min_free_fraction=self.min_free_fraction,
        )


class CpuSlots(_Table):
    """Room on this host for CPU-only pods (profiles with ``gpus = 0``): each pod takes its
    profile's ``cpus`` and ``memory_mb`` from these (cgroup limits: a pod's CPUs are a
    quota, so more slots than cores oversubscribe, as I/O-bound verifiers allow)."""

    cpus: float = Field(
        8.0,
        ge=0,
        description="CPUs the CPU-only pods take together (each its profile's cpus)",
    )
    memory_mb: int = Field(
        16384,
        ge=0,
        description="memory the CPU-only pods take together (each its profile's memory_mb)",
    )


#: a profile's limits a config may name (see :class:`stoker.runtime.base.RuntimeProfile`)
PROFILE_LIMITS = ("memory_mb", "pids_max", "cpus", "tmp_mb", "workspace_mb", "output_mb")


class _ProfileFile(_Table):
    """``[profiles.NAME]``."""

    gpus: int = Field(
        1,
        ge=0,
        description="GPUs per pod; 0 makes a CPU-only profile (verifiers, tool calls)",
    )
    share: float = Field(
        0.9,
        gt=0,
        le=1,
        description=(
            "the fraction of each GPU an active pod takes (0.9 leaves room for a standby)"
        ),
    )
    standby_share: float = Field(
        0.1,
        ge=0,
        lt=1,
        description="the fraction of a GPU a zero-VRAM standby pod takes beside an active one",
    )
    preload: list[str] = Field(
        [],
        description=('modules the pod\'s zygote imports before any job binds (e.g. ["torch"])'),
    )
    packages: list[str] = Field(
        [],
        description="packages installed into the profile's base environment",
    )
    network: bool = Field(False, description="whether the profile's pods may reach the network")
    memory_mb: int | None = Field(
        None,
        ge=0,
        description="memory limit per pod (unset: the runtime's default; 0: no limit)",
    )
    pids_max: int | None = Field(
        None,
        ge=0,
        description="process limit per pod (unset: the runtime's default; 0: no limit)",
    )
    cpus: float | None = Field(
        None,
        ge=0,
        description="CPU limit per pod (unset: the runtime's default; 0: no limit)",
    )
    tmp_mb: int | None = Field(
        None,
        ge=0,
        description=(
            "size of each of /tmp and /dev/shm in a pod (unset: the runtime's default; 0: no limit)"
        ),
    )
    workspace_mb: int | None = Field(
        None,
        ge=0,
        description="size of a pod's workspace (unset: the runtime's default; 0: no limit)",
    )
    output_mb: int | None = Field(
        None,
        ge=0,
        description=(
            "output per job, stdout and stderr together (unset: the runtime's default; 0: no limit)"
        ),
    )
    min_warm: int = Field(0, ge=0, description="spare pods kept ready for callers not yet seen")
    keepalive: str | None = Field(
        None,
        description=(
            "this profile's keep-alive policy: fixed, fitted or always-on (unset: [policies]'"
            " keepalive, else fixed)"
        ),
    )
    keepalive_s: float | None = Field(
        None,
        ge=0,
        description=(
            "this profile's keep-alive seconds: a fixed one's length, the fitted one's fallback"
            " (unset: [policies]' keepalive_s)"
        ),
    )
    gpu_model: str | None = Field(
        None,
        min_length=1,
        description="the GPU pool this profile's pods take (unset: the broker's gpu_model)",
    )
    # Kubernetes: the extended resource a pod asks for (e.g. nvidia.com/mig-1g.10gb for a
    # MIG slice; None: the runtime's gpu_resource), and the profile's image
    gpu_resource: str | None = Field(
        None,
        pattern=r"^[a-z0-9.-]+/[A-Za-z0-9._-]+$",
        description="Kubernetes: the extended resource a pod asks for (e.g. a MIG slice)",
    )
    image: str | None = Field(
        None, min_length=1, description="Kubernetes: this profile's image (unset: the broker's)"
    )

    def profile(self, name: str) -> BrokerProfile:
        """The broker's profile; ValueError naming the field for a shape the core refuses."""
        # a limit not named keeps the runtime's safe default; 0 means none at all
        limits = {k: v or None for k in PROFILE_LIMITS if (v := getattr(self, k)) is not None}
        rt = RuntimeProfile(
            name,
            packages=tuple(self.packages),
            preload=tuple(self.preload),
            network=self.network,
            image=self.image,
            gpu_resource=self.gpu_resource,
            **limits,
        )
        if self.gpu_resource and self.gpus == 0:
            raise ValueError("gpu_resource: a CPU-only profile (gpus = 0) asks for no GPU")
        if self.gpus == 0 and not (rt.cpus and rt.memory_mb):
            raise ValueError("cpus: a CPU-only profile needs cpus and memory_mb limits above 0")
        cpu_only = self.gpus == 0
        core = Profile(
            name,
            gpus=self.gpus,
            share=1.0 if cpu_only else self.share,
            standby_share=0.0 if cpu_only else self.standby_share,
            recyclable=True,
            **_cpu_shape(rt, self.gpus),
        )
        return BrokerProfile(
            core, rt, self.keepalive, self.keepalive_s, self.min_warm, self.gpu_model
        )


class _BrokerFile(_Table):
    """The whole file."""

    data_dir: str | None = Field(
        None,
        description=(
            "where the broker keeps its store, tokens, keys and logs (default: platformdirs' user"
            " data dir)"
        ),
    )
    keys_dir: str | None = Field(
        None,
        description=(
            "where secret.key, admin.token and viewer.token are read (a mounted Secret all"
            " replicas share; default: data_dir)"
        ),
    )
    runtime_dir: str | None = Field(
        None,
        description=(
            "where the local runtime keeps its pods (default: data_dir/runtime); replicas on one "
            "host share it"
        ),
    )
    find_links: list[str] = Field(
        [],
        description="local directories of wheels that profiles' packages are installed from",
    )
    no_index: bool = Field(
        False,
        description="install profiles' packages from find_links only, never from an index",
    )
    gpu_slots: int = Field(2, ge=0, description="virtual GPU slots where NVML finds no GPU")
    index_url: str | None = Field(
        None,
        pattern=r"^https?://\S+$",
        description="the package index for profile packages and job deps (default: PyPI)",
    )
    extra_index_urls: list[Annotated[str, Field(pattern=r"^https?://\S+$")]] = Field(
        [], description="more package indexes, read after index_url"
    )
    ca_bundle: str | None = Field(
        None,
        description="a PEM file of CAs uv trusts besides its own (a TLS-intercepting proxy's)",
    )
    gpu_model: str = Field("any", description="the GPU pool this host's GPUs belong to")
    max_code_bytes: int = Field(
        64 * 1024 * 1024,
        gt=0,
        description="the largest code archive a job may upload",
    )
    max_file_bytes: int = Field(
        256 * 1024 * 1024,
        gt=0,
        description="the largest file streamed into or out of a session's workspace",
    )
    max_request_bytes: int = Field(
        1024 * 1024,
        gt=0,
        description="the largest body of any other request (a job, a secret)",
    )
    max_timeout_s: float = Field(
        24 * 3600.0,
        gt=0,
        description="the longest time limit a job may ask for",
    )
    max_keepalive_s: float = Field(
        3600.0,
        gt=0,
        description="the longest keep-alive a session may renew its warm pod for",
    )
    database_url: str | None = Field(
        None,
        description=(
            "the store: a postgresql:// URL lets several replicas share it (default: SQLite in "
            "data_dir; env STOKER_DATABASE_URL overrides)"
        ),
    )
    advertise_url: str | None = Field(
        None,
        description=(
            "where the other replicas reach this one (they forward writes to it while it leads)"
        ),
    )
    sandbox_fusion_profile: str | None = Field(
        None,
        description=(
            "the profile /sandbox-fusion/run_code runs code on (default: the first CPU-only "
            "profile, else the first)"
        ),
    )
    tenant_history: Literal["keep", "delete"] = Field(
        "keep",
        description=(
            "a deleted tenant's finished jobs: keep (audit; the name is not reused) or delete"
        ),
    )
    cpu_slots: CpuSlots = Field(CpuSlots(), description="room on this host for CPU-only pods")
    profiles: dict[str, _ProfileFile] | None = Field(
        None,
        description="the profiles, by name (default: one one-GPU profile named plain)",
    )
    policies: PolicyConfig = Field(
        PolicyConfig(),
        description="the core's policies by registry name",
    )
    forecast: ForecastConfig = Field(ForecastConfig(), description="the HP demand forecaster")
    spot: SpotConfig = Field(SpotConfig(), description="how evicted spot jobs are stopped")
    shares: SharesConfig | None = Field(
        None,
        description="tenant shares (absent: none, every queue in submit order)",
    )
    storage: StorageConfig = Field(
        StorageConfig(), description="stored output budget, retention and the disk floor"
    )


def default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("stoker"))


@dataclass
class BrokerConfig:
    """Everything a broker needs to start."""

    data_dir: Path = field(default_factory=default_data_dir)
    profiles: list[BrokerProfile] = field(default_factory=lambda: [BrokerProfile.simple("plain")])
    gpu_slots: int = 2
    max_code_bytes: int = 64 * 1024 * 1024
    max_file_bytes: int = 256 * 1024 * 1024
    max_request_bytes: int = 1024 * 1024
    max_timeout_s: float = 24 * 3600.0
    # the longest keep-alive a caller may renew its warm pod for (a session's renew)
    max_keepalive_s: float = 3600.0
    gpu_model: str = "any"
    find_links: tuple[Path, ...] = ()
    no_index: bool = False
    # where profile packages and job deps come from (None: PyPI), and extra CAs uv trusts
    # (a TLS-intercepting proxy's PEM bundle)
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    ca_bundle: Path | None = None
    # the store: None is SQLite in data_dir (one broker); a postgresql:// URL lets several
    # replicas share one store, one of them leading (env STOKER_DATABASE_URL overrides)
    database_url: str | None = None
    # where the other replicas forward writes to this one when it leads
    advertise_url: str | None = None
    # the keys every replica shares (a mounted Secret: secret.key, admin.token,
    # viewer.token), read and never written; None: made in data_dir on first use, which
    # only one broker may do (env STOKER_KEYS_DIR overrides)
    keys_dir: Path | None = None
    # the local runtime's pods (None: data_dir/runtime); replicas on one host share it, so
    # whichever leads adopts the pods of the one before
    runtime_root: Path | None = None
    # the profile /sandbox-fusion/run_code runs code on (None: the first CPU-only profile,
    # else the first)
    sandbox_fusion_profile: str | None = None
    # a deleted tenant's finished jobs: kept (its name then not reused) or deleted with it
    tenant_history: str = "keep"
    cpu_slots: CpuSlots = field(default_factory=CpuSlots)
    policies: PolicyConfig = field(default_factory=PolicyConfig)
    forecast: ForecastConfig = field(default_factory=ForecastConfig)
    spot: SpotConfig = field(default_factory=SpotConfig)
    # tenants' fair-order weights, guaranteed HP GPUs and caps (None: none)
    shares: SharesConfig | None = None
    # stored output budget, retention, the disk floor
    storage: StorageConfig = field(default_factory=StorageConfig)

    def build_policies(self) -> Preset:
        """The core's policies for this configuration (preset, overrides, per profile,
        tenant shares)."""
        chosen = self.policies.build(self.spot.grace_s, self.profiles)
        if self.shares is not None:
            chosen.policies.shares = self.shares.build()
        return chosen

    @property
    def db_path(self) -> Path:
        return self.data_dir / "stoker.db"

    @property
    def store_url(self) -> str:
        """The store's URL: ``database_url``, else the SQLite file in ``data_dir``."""
        return self.database_url or f"sqlite:///{self.db_path}"

    @property
    def keys_path(self) -> Path:
        """Where the keys and tokens are: ``keys_dir``, else ``data_dir``."""
        return self.keys_dir or self.data_dir

    @property
    def admin_token_path(self) -> Path:
        return self.keys_path / "admin.token"

    @property
    def viewer_token_path(self) -> Path:
        """The dashboard's read-only token."""
        return self.keys_path / "viewer.token"

    @property
    def secret_key_path(self) -> Path:
        """The keys sealing secrets and env values in the store (mode 600, never in it;
        one per line, the newest first)."""
        return self.keys_path / "secret.key"

    def shared_keys_missing(self) -> str | None:
        """Why this broker must not start (None: it may): replicas on one PostgreSQL store
        each making their own key could not open each other's secrets nor match each
        other's idempotency digests."""
        if self.database_url and self.database_url.startswith("postgresql") and not self.keys_dir:
            return (
                "keys_dir: a broker on PostgreSQL (several replicas) needs the keys every"
                " replica shares: set keys_dir (or STOKER_KEYS_DIR) to the mounted Secret"
                " stoker-keys (see docs/guides/kubernetes.md, 'Secrets and keys')"
            )
        return None

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
        return self.runtime_root or self.data_dir / "runtime"

    @staticmethod
    def load(path: Path | str) -> BrokerConfig:
        """Read a TOML configuration file; a wrong key or value is a one-line ConfigError
        naming the file and the key (a typo never passes, nothing is coerced)."""
        where = f"config {path}"
        try:
            raw = tomllib.loads(Path(path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{where}: {exc}") from exc
        try:
            f = _BrokerFile.model_validate(raw)
        except ValidationError as exc:
            raise ConfigError(f"{where}: {_first_error(exc)}") from exc
        # the keys the file and the broker share by name; the rest are converted below
        same = set(_BrokerFile.model_fields) - {
            "data_dir",
            "keys_dir",
            "runtime_dir",
            "find_links",
            "profiles",
            "extra_index_urls",
            "ca_bundle",
        }
        cfg = BrokerConfig(
            **{k: getattr(f, k) for k in sorted(same)},
            find_links=tuple(Path(p) for p in f.find_links),
            extra_index_urls=tuple(f.extra_index_urls),
        )
        if f.ca_bundle is not None:
            bundle = Path(f.ca_bundle).expanduser()
            if not bundle.is_file():
                raise ConfigError(f"{where}: ca_bundle: no such file {str(bundle)!r}")
            cfg.ca_bundle = bundle
        if f.data_dir is not None:
            cfg.data_dir = Path(f.data_dir).expanduser()
        if f.keys_dir is not None:
            cfg.keys_dir = Path(f.keys_dir).expanduser()
        if f.runtime_dir is not None:
            cfg.runtime_root = Path(f.runtime_dir).expanduser()
        try:
            f.forecast.check()
        except ValueError as exc:
            raise ConfigError(f"{where}: forecast.{exc}") from exc
        if f.profiles is not None:
            cfg.profiles = []
            for name, p in f.profiles.items():
                try:
                    cfg.profiles.append(p.profile(name))
                except ValueError as exc:
                    raise ConfigError(f"{where}: profiles.{name}.{exc}") from exc
        for p in cfg.profiles:  # a CPU-only profile whose pod the slots can never hold
            need_cpu, need_mb = p.core.cpu, p.core.memory_gb * 1024
            if p.core.cpu_only and (
                need_cpu > cfg.cpu_slots.cpus or need_mb > cfg.cpu_slots.memory_mb
            ):
                raise ConfigError(
                    f"{where}: profiles.{p.name}: a CPU-only pod takes {need_cpu:g} CPUs and"
                    f" {need_mb:g} MB, more than [cpu_slots] gives ({cfg.cpu_slots.cpus:g} CPUs,"
                    f" {cfg.cpu_slots.memory_mb} MB): its jobs could never start"
                )
        names = [p.name for p in cfg.profiles]
        if cfg.sandbox_fusion_profile is not None and cfg.sandbox_fusion_profile not in names:
            raise ConfigError(
                f"{where}: sandbox_fusion_profile: no profile {cfg.sandbox_fusion_profile!r}"
                f" (known: {', '.join(names)})"
            )
        try:  # every name checked now, not when the broker starts
            cfg.policies.build(cfg.spot.grace_s)
        except ValueError as exc:
            raise ConfigError(f"{where}: policies.{exc}") from exc
        if f.shares is not None:
            try:
                f.shares.build()
            except ValueError as exc:
                raise ConfigError(f"{where}: shares.{exc}") from exc
            cfg.shares = f.shares
        for p in cfg.profiles:
            try:
                cfg.policies.build(cfg.spot.grace_s, [p])
            except ValueError as exc:
                raise ConfigError(f"{where}: profiles.{p.name}.{exc}") from exc
        return cfg


def _first_error(exc: ValidationError) -> str:
    """The first of pydantic's errors as one line: ``KEY: what is wrong (got VALUE)``."""
    return _error_line(exc.errors()[0])


def check_file(path: Path | str) -> list[str]:
    """Every error of a broker configuration file, one line each (none: it would start):
    all of the file's key and value errors at once, else the first of the checks that
    :meth:`BrokerConfig.load` makes across keys (names, profiles against the slots)."""
    where = f"config {path}"
    try:
        raw = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        return [f"{where}: {exc}"]
    try:
        _BrokerFile.model_validate(raw)
    except ValidationError as exc:
        return [f"{where}: {_error_line(err)}" for err in exc.errors()]
    try:
        BrokerConfig.load(path).build_policies()
    except (ConfigError, ValueError) as exc:
        return [str(exc)]
    return []


# keys an earlier release read, and where they are set now
_MOVED = {"keepalive_s": "[policies] keepalive_s"}


def _error_line(err: Any) -> str:
    key = ".".join(str(part) for part in err["loc"])
    if err["type"] == "extra_forbidden":
        moved = _MOVED.get(key)
        return f"unknown key {key!r}" + (f" (it moved: set {moved})" if moved else "")
    if err["type"] in ("model_type", "dict_type"):
        return f"{key}: must be a table (got {err.get('input')!r})"
    return f"{key}: {err['msg']} (got {err.get('input')!r})"
