"""What the Kubernetes runtime and the deployment need to know of the cluster.

One :class:`KubeSettings` drives both the pods the runtime creates and the manifests
``stoker deploy render`` writes, so the two never disagree (the namespace, the labels the
NetworkPolicy selects, the PriorityClass names, the gateway port the agents dial).
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from dataclasses import dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

from stoker.agent.deps import FIND_LINKS_ENV, INDEX_ENV

#: every label and annotation stoker sets lives under this prefix
PREFIX = "stoker.dev"
LABEL_APP = "app.kubernetes.io/name"
LABEL_PART = "app.kubernetes.io/component"
LABEL_INSTANCE = f"{PREFIX}/instance"
LABEL_POD = f"{PREFIX}/pod"
LABEL_PROFILE = f"{PREFIX}/profile"
LABEL_ROLE = f"{PREFIX}/role"  # active | standby
LABEL_CLASS = f"{PREFIX}/class"  # pool | hp | spot
LABEL_TENANT = f"{PREFIX}/tenant"  # sha256 of the tenant, never the tenant itself
LABEL_LEADER = f"{PREFIX}/leader"  # "true" on the broker replica that schedules
LABEL_NETWORK = f"{PREFIX}/network"  # "open" on pods of a profile with network = true
ANNOTATION_SPEC = f"{PREFIX}/spec"  # what a restarted broker needs to re-adopt a pod
HOSTNAME_LABEL = "kubernetes.io/hostname"

#: the highest value a PriorityClass not of the system may have
USER_PRIORITY_MAX = 1_000_000_000
#: the taint GPU nodes commonly carry (GPU Operator, cloud GPU node pools)
GPU_TAINT_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
_TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
#: the job classes whose pods may mount a checkpoint volume: hp and spot pods start cold
#: for one job and never serve another (core/actions.py), so the broker can name the job's
#: own directory when it creates the pod. Pool pods serve many jobs, and a pod's volumes
#: are fixed when it is created
CHECKPOINT_CLASSES = ("hp", "spot")


class ShareMechanism(StrEnum):
    """How a zero-VRAM standby pod gets a fractional share of the device it stands beside.

    ``time-slicing``: the NVIDIA device plugin advertises each GPU as N replicas of
    ``gpu_resource``; every stoker pod takes one replica per GPU and stoker's core keeps
    the shares (no memory isolation between the pods). ``kai``: the KAI scheduler places
    pods with a ``gpu-fraction`` annotation. ``hami``: HAMi's device plugin splits a GPU by
    ``nvidia.com/gpumem`` (MiB; ``nvidia.com/gpumem-percentage`` where the node does not
    label its GPU memory). ``none``: whole GPUs only; standby pods are refused.
    """

    TIME_SLICING = "time-slicing"
    KAI = "kai"
    HAMI = "hami"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class PriorityClasses:
    """PriorityClass names and values: spot below pool below hp, so the cluster's own
    scheduler never evicts hp pods for spot ones.

    The values are cluster-wide and hp may preempt any pod below it, other teams' included:
    the default hp (10000) is above pods with no class (0) and far below the 100000 and up
    that clusters commonly give their own critical workloads, so stoker's hp pods take room
    from best-effort pods only. Set ``[kubernetes.priority]`` to fit your cluster's scale.
    """

    hp: str = "stoker-hp"
    pool: str = "stoker-pool"
    spot: str = "stoker-spot"
    hp_value: int = 10000
    pool_value: int = 5000
    spot_value: int = 1000

    def __post_init__(self) -> None:
        if not self.spot_value < self.pool_value < self.hp_value:
            raise ValueError(
                "priority: spot_value < pool_value < hp_value, not"
                f" {self.spot_value}, {self.pool_value}, {self.hp_value}"
            )
        if self.hp_value > USER_PRIORITY_MAX or self.spot_value < -USER_PRIORITY_MAX:
            raise ValueError(f"priority: values within +-{USER_PRIORITY_MAX} (Kubernetes' limit)")

    def name(self, job_class: str) -> str:
        """The PriorityClass of a pod of ``job_class`` (``pool``, ``hp`` or ``spot``)."""
        names = {"hp": self.hp, "pool": self.pool, "spot": self.spot}
        if job_class not in names:
            raise ValueError(f"job_class: 'pool', 'hp' or 'spot', not {job_class!r}")
        return names[job_class]


@dataclass(frozen=True, slots=True)
class KubeSettings:
    """Where stoker runs in the cluster and how its pods are built."""

    namespace: str = "stoker"
    instance: str = "stoker"  # label value separating two stoker installs in one namespace
    image: str = "ghcr.io/stoker-dev/stoker:0.1.0"  # the shared base image of every profile
    image_pull_policy: str = "IfNotPresent"
    #: the agent gateway as pods dial it (the broker's Service) and the port it listens on
    gateway_service: str = "stoker-gateway"
    gateway_port: int = 8766
    dial: str = ""  # HOST:PORT the agents dial instead of the Service (a broker outside)
    api_port: int = 8765
    gpu_model_label: str = "nvidia.com/gpu.product"
    gpu_memory_label: str = "nvidia.com/gpu.memory"  # MiB per GPU (GPU feature discovery)
    gpu_resource: str = "nvidia.com/gpu"
    share: ShareMechanism = ShareMechanism.TIME_SLICING
    kai_queue: str = "default"  # KAI needs every pod in a queue
    kai_scheduler: str = "kai-scheduler"
    priority: PriorityClasses = field(default_factory=PriorityClasses)
    run_as_user: int = 65534
    workspace_mb: int = 10240  # the emptyDir a pod's jobs may write
    start_timeout_s: float = 600.0  # image pulls take minutes on a fresh node
    stop_timeout_s: float = 120.0
    termination_grace_s: int = 5
    #: where a pod's agent installs a job's deps from (uv's index; "" for none, then only
    #: ``deps_find_links``): the pods must be let reach it (a profile with network = true,
    #: or an in-cluster mirror a NetworkPolicy of yours opens)
    deps_index_url: str = "https://pypi.org/simple"
    deps_find_links: str = ""  # a URL of wheels besides (or instead of) the index
    #: the tolerations of pods that take GPUs (tainted GPU nodes); CPU-only pods get none
    gpu_tolerations: tuple[dict[str, Any], ...] = (GPU_TAINT_TOLERATION,)
    #: job class (hp, spot) -> the volume its jobs' checkpoints live on: a
    #: PersistentVolumeClaim's name, or a volume source as a table (``{nfs = {server = ...,
    #: path = ...}}``). A pod mounts only its own job's and rank's directory of it (subPath
    #: INSTANCE/JOB/RANK) at /stoker/checkpoint; ReadWriteMany, for a resumed job whose new
    #: pod lands on another node. Read back normalised: every value a volume source
    checkpoint_volumes: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _LABEL_VALUE.match(self.instance) or len(self.instance) > 63:
            raise ValueError(f"instance: not a label value: {self.instance!r}")
        object.__setattr__(self, "share", ShareMechanism(self.share))
        for n, t in enumerate(self.gpu_tolerations):
            if not isinstance(t, dict) or not set(t) <= _TOLERATION_KEYS:
                raise ValueError(
                    f"gpu_tolerations[{n}]: a table of {', '.join(sorted(_TOLERATION_KEYS))}"
                )
        volumes = {
            str(cls): _volume_source(cls, src) for cls, src in self.checkpoint_volumes.items()
        }
        object.__setattr__(self, "checkpoint_volumes", volumes)

    @staticmethod
    def from_dict(raw: dict[str, Any], where: str = "kubernetes") -> KubeSettings:
        """Settings from a TOML table; an unknown key or a bad value is an error naming it."""
        known = {f.name: f for f in fields(KubeSettings)}
        values: dict[str, Any] = {}
        for key, value in raw.items():
            if key not in known:
                raise ValueError(f"{where}: unknown key {key!r}")
            if key == "priority":
                values[key] = _priority(value, f"{where}.priority")
                continue
            default = getattr(KubeSettings(), key)
            try:
                values[key] = type(default)(value)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{where}.{key}: {exc}") from exc
        try:
            return KubeSettings(**values)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from exc

    @staticmethod
    def load(path: str | Path) -> KubeSettings:
        """Settings from a TOML file (what ``stoker up --kubernetes FILE`` reads)."""
        try:
            raw = tomllib.loads(Path(path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ValueError(f"{path}: {exc}") from exc
        return KubeSettings.from_dict(raw, str(path))

    @property
    def gateway_addr(self) -> str:
        """HOST:PORT the agent in a pod dials: the gateway Service's cluster DNS name."""
        return self.dial or f"{self.gateway_service}.{self.namespace}.svc:{self.gateway_port}"

    def deps_env(self) -> dict[str, str]:
        """A pod's environment saying where its agent installs a job's deps from."""
        return {INDEX_ENV: self.deps_index_url, FIND_LINKS_ENV: self.deps_find_links}

    def base_labels(self, part: str) -> dict[str, str]:
        """Labels every object of this install carries; ``part`` is broker or pod."""
        return {LABEL_APP: "stoker", LABEL_PART: part, LABEL_INSTANCE: self.instance}


def _volume_source(job_class: str, raw: Any) -> dict[str, Any]:
    """One ``checkpoint_volumes`` entry as a Pod's volume source (its own copy)."""
    where = f"checkpoint_volumes.{job_class}"
    if job_class not in CHECKPOINT_CLASSES:
        why = " (pool pods serve many jobs)" if job_class == "pool" else ""
        raise ValueError(f"{where}: only {' or '.join(CHECKPOINT_CLASSES)} jobs{why}")
    if isinstance(raw, str):
        if not _DNS_SUBDOMAIN.match(raw):
            raise ValueError(f"{where}: not a PersistentVolumeClaim name: {raw!r}")
        return {"persistentVolumeClaim": {"claimName": raw}}
    if not (isinstance(raw, dict) and len(raw) == 1 and isinstance(next(iter(raw.values())), dict)):
        raise ValueError(f"{where}: a claim name, or a table of one volume source")
    kind, body = next(iter(raw.items()))
    # the pod writes its checkpoints there: a read-only source is a configuration mistake
    # (and the job never gets a say in how the volume is mounted)
    if body.get("readOnly"):
        raise ValueError(f"{where}: the volume must be writable")
    return {str(kind): json.loads(json.dumps(body))}


def _priority(raw: Any, where: str) -> PriorityClasses:
    """The ``[kubernetes.priority]`` table: any field of :class:`PriorityClasses`."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: must be a table")
    known = {f.name: f for f in fields(PriorityClasses)}
    for key, value in raw.items():
        if key not in known:
            raise ValueError(f"{where}: unknown key {key!r}")
        if not isinstance(value, type(getattr(PriorityClasses(), key))):
            raise ValueError(f"{where}.{key}: {value!r} is not a {known[key].type}")
    try:
        return PriorityClasses(**raw)
    except ValueError as exc:
        raise ValueError(f"{where.rsplit('.', 1)[0]}: {exc}") from exc


def tenant_hash(tenant: str) -> str:
    """A tenant as a label value: a hash, so labels (visible cluster-wide to anyone who may
    list pods) never carry a tenant's name."""
    return hashlib.sha256(tenant.encode()).hexdigest()[:32]


def label_value(text: str) -> str:
    """``text`` if it is a valid label value, else a readable prefix plus a short hash."""
    if len(text) <= 63 and _LABEL_VALUE.match(text):
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    head = re.sub(r"[^A-Za-z0-9_.-]", "-", text)[:50].strip("-_.")
    return f"{head}-{digest}" if head else digest


def object_name(pod: str) -> str:
    """The Kubernetes name of stoker pod ``pod``: a DNS-1123 label, unique per pod id."""
    clean = re.sub(r"[^a-z0-9-]", "-", pod.lower()).strip("-")
    if clean == pod and len(clean) <= 55:
        return f"stoker-{clean}"
    digest = hashlib.sha256(pod.encode()).hexdigest()[:10]
    return f"stoker-{clean[:40].strip('-')}-{digest}"
