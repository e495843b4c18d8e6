"""The deployment's manifests, built from one :class:`DeployConfig`.

``deploy/kubernetes/`` in the repository is exactly :func:`kustomize_tree` of the default
configuration (a test says so), and ``stoker deploy render`` writes the same tree for any
other configuration, so there is one source of truth. The tree::

    base/kustomization.yaml       the base: one broker on SQLite (kubectl apply -k DIR/base)
    base/namespace.yaml  rbac.yaml  config.yaml  broker.yaml  network-policy.yaml
    base/priority-classes.yaml
    base/keys/                    the Secret stoker-keys' files (made by render --out, never
                                  committed: secret.key, admin.token, viewer.token)
    components/service-monitor/   optional Prometheus Operator ServiceMonitor (a Component)
    overlays/postgres/            the replicas on PostgreSQL: the database Secret, and a patch
                                  giving the Deployment its replicas and STOKER_DATABASE_URL

The base is self-contained: every Secret and ConfigMap it names it makes (the keys Secret
from ``base/keys/`` by a secretGenerator), and the overlay brings the one it adds. The base
is a directory of its own: kustomize refuses an overlay inside the base it names (a cycle).

RBAC: the broker's ServiceAccount gets a namespace-scoped Role on pods, secrets and events
only; reading nodes (cluster-scoped: the runtime builds the core's cluster from them) needs a
ClusterRole of its own, read-only on nodes and nothing else.
"""

from __future__ import annotations

import copy
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from stoker.broker.auth import KEY_FILES, write_keys
from stoker.runtime.base import MASTER_PORT_BASE, MASTER_PORT_COUNT
from stoker.runtime.kubernetes.pods import container_security, pod_security
from stoker.runtime.kubernetes.settings import (
    LABEL_APP,
    LABEL_INSTANCE,
    LABEL_LEADER,
    LABEL_NETWORK,
    LABEL_PART,
    KubeSettings,
    PriorityClasses,
)

BROKER = "stoker-broker"
DATABASE_SECRET = "stoker-database"
KEYS_SECRET = "stoker-keys"  # the keys and tokens every replica shares (auth.KEY_FILES)
DATABASE_ENV = "STOKER_DATABASE_URL"
CONFIG_DIR = "/etc/stoker"
KEYS_DIR = f"{CONFIG_DIR}/keys"
DATA_DIR = "/var/lib/stoker"
#: the overlay that runs ``replicas`` brokers on PostgreSQL (what ``kubectl apply -k`` takes)
POSTGRES_OVERLAY = "overlays/postgres"
BASE_DIR = "base"

DEFAULT_BROKER_TOML = """\
# the broker's configuration (stoker up --config): profiles and policies
[policies]
keepalive_s = 60     # a fixed keep-alive for every profile

[profiles.plain]
share = 0.9          # leaves room beside an active pod for a standby
standby_share = 0.1
preload = []
"""


@dataclass(frozen=True, slots=True)
class DeployConfig:
    """What ``stoker deploy render`` is told: the cluster settings plus the broker's own."""

    settings: KubeSettings = field(default_factory=KubeSettings)
    replicas: int = 2
    broker_toml: str = DEFAULT_BROKER_TOML
    database_url: str = "postgresql+psycopg://stoker:CHANGE-ME@postgres.stoker.svc:5432/stoker"
    broker_cpu: str = "500m"
    broker_memory: str = "512Mi"

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"replicas: at least 1, not {self.replicas}")

    @staticmethod
    def load(path: str | Path) -> DeployConfig:
        """A deployment from a TOML file::

            replicas = 2
            broker_config = "broker.toml"   # its text goes into the ConfigMap
            database_url = "postgresql+psycopg://..."

            [kubernetes]                    # any KubeSettings field
            image = "registry.example/stoker:0.1.0"
            share = "hami"

        Unknown keys and bad values are errors that name them.
        """
        path = Path(path)
        try:
            raw = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ValueError(f"{path}: {exc}") from exc
        known = {"replicas", "broker_config", "database_url", "kubernetes"}
        for key in raw:
            if key not in known:
                raise ValueError(f"{path}: unknown key {key!r}")
        values: dict[str, Any] = {
            "settings": KubeSettings.from_dict(raw.get("kubernetes", {}), f"{path}: kubernetes")
        }
        if "replicas" in raw:
            values["replicas"] = int(raw["replicas"])
        if "database_url" in raw:
            values["database_url"] = str(raw["database_url"])
        if "broker_config" in raw:
            broker_path = path.parent / str(raw["broker_config"])
            try:
                values["broker_toml"] = broker_path.read_text()
            except OSError as exc:
                raise ValueError(f"{path}: broker_config: {exc}") from exc
        return DeployConfig(**values)


def _meta(cfg: DeployConfig, name: str, part: str, namespaced: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": cfg.settings.base_labels(part)}
    if namespaced:
        meta["namespace"] = cfg.settings.namespace
    return meta


def _broker_selector(cfg: DeployConfig) -> dict[str, str]:
    return {LABEL_APP: "stoker", LABEL_PART: "broker", LABEL_INSTANCE: cfg.settings.instance}


def _pod_selector(cfg: DeployConfig) -> dict[str, str]:
    return {LABEL_APP: "stoker", LABEL_PART: "pod", LABEL_INSTANCE: cfg.settings.instance}


def namespace(cfg: DeployConfig) -> list[dict[str, Any]]:
    meta = _meta(cfg, cfg.settings.namespace, "namespace", namespaced=False)
    # agent pods run as non-root with a read-only root: the namespace enforces it too
    meta["labels"]["pod-security.kubernetes.io/enforce"] = "restricted"
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": meta}]


def rbac(cfg: DeployConfig) -> list[dict[str, Any]]:
    s = cfg.settings
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(cfg, BROKER, "broker")}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(cfg, BROKER, "broker"),
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["pods"],
                "verbs": ["get", "list", "watch", "create", "delete", "patch"],
            },
            {
                "apiGroups": [""],
                "resources": ["secrets"],
                "verbs": ["get", "list", "create", "update", "delete"],
            },
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(cfg, BROKER, "broker"),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": BROKER},
        "subjects": [{"kind": "ServiceAccount", "name": BROKER, "namespace": s.namespace}],
    }
    nodes_name = f"{BROKER}-{s.namespace}-nodes"
    nodes_role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": _meta(cfg, nodes_name, "broker", namespaced=False),
        "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}],
    }
    nodes_binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": _meta(cfg, nodes_name, "broker", namespaced=False),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": nodes_name,
        },
        "subjects": [{"kind": "ServiceAccount", "name": BROKER, "namespace": s.namespace}],
    }
    return [sa, role, binding, nodes_role, nodes_binding]


def kube_toml(s: KubeSettings) -> str:
    """The runtime's settings as the broker reads them (``stoker up --kubernetes FILE``)."""
    lines = ["# the Kubernetes runtime's settings (stoker.runtime.kubernetes.settings)"]
    for key in (
        "namespace",
        "instance",
        "image",
        "gateway_service",
        "gateway_port",
        "gpu_model_label",
        "gpu_memory_label",
        "gpu_resource",
        "share",
        "kai_queue",
        "run_as_user",
        "start_timeout_s",
    ):
        lines.append(f"{key} = {_toml(getattr(s, key))}")
    lines.append(f"gpu_tolerations = {_toml(list(s.gpu_tolerations))}")
    if s.checkpoint_volumes:  # absent by default: the default tree stays as it was
        lines.append(f"checkpoint_volumes = {_toml(s.checkpoint_volumes)}")
    lines.append("\n[priority]  # the PriorityClasses: names and values (priority-classes.yaml)")
    p = s.priority
    lines += [f"{f} = {_toml(getattr(p, f))}" for f in PriorityClasses.__dataclass_fields__]
    return "\n".join(lines) + "\n"


def _toml(value: Any) -> str:
    """``value`` as a TOML value (strings, numbers, lists and inline tables of them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    return json.dumps(str(value))  # a TOML basic string is a JSON string


def config(cfg: DeployConfig) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta(cfg, "stoker-config", "broker"),
            "data": {"broker.toml": cfg.broker_toml, "kubernetes.toml": kube_toml(cfg.settings)},
        }
    ]


def _broker_container(cfg: DeployConfig) -> dict[str, Any]:
    s = cfg.settings
    return {
        "name": "broker",
        "image": s.image,
        "imagePullPolicy": s.image_pull_policy,
        "command": [
            "stoker",
            "up",
            "--host",
            "0.0.0.0",
            "--port",
            str(s.api_port),
            "--config",
            f"{CONFIG_DIR}/broker.toml",
            "--kubernetes",
            f"{CONFIG_DIR}/kubernetes.toml",
            "--data-dir",
            DATA_DIR,
            "--keys-dir",
            KEYS_DIR,
            # a rolling upgrade terminates the leader: its pods stay for the next leader to
            # adopt (uninstalling deletes the namespace, and the pods with it)
            "--keep-pods",
        ],
        # the database URL comes with the postgres overlay (postgres_patch)
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "ports": [
            {"name": "api", "containerPort": s.api_port, "protocol": "TCP"},
            {"name": "gateway", "containerPort": s.gateway_port, "protocol": "TCP"},
        ],
        "readinessProbe": {
            "httpGet": {"path": "/v1/ready", "port": "api"},
            "periodSeconds": 2,
            "failureThreshold": 2,
        },
        "livenessProbe": {
            "httpGet": {"path": "/v1/health", "port": "api"},
            "periodSeconds": 10,
            "failureThreshold": 3,
        },
        "resources": {
            "requests": {"cpu": cfg.broker_cpu, "memory": cfg.broker_memory},
            "limits": {"memory": cfg.broker_memory},
        },
        "securityContext": container_security(),
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "data", "mountPath": DATA_DIR},
            {"name": "keys", "mountPath": KEYS_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }


def broker(cfg: DeployConfig) -> list[dict[str, Any]]:
    s = cfg.settings
    selector = _broker_selector(cfg)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(cfg, BROKER, "broker"),
        "spec": {
            "replicas": 1,  # one broker per SQLite store; the postgres overlay sets replicas
            "selector": {"matchLabels": selector},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": dict(selector)},
                "spec": {
                    "serviceAccountName": BROKER,
                    "priorityClassName": s.priority.hp,
                    "securityContext": pod_security(s),
                    "affinity": {
                        "podAntiAffinity": {
                            "preferredDuringSchedulingIgnoredDuringExecution": [
                                {
                                    "weight": 100,
                                    "podAffinityTerm": {
                                        "labelSelector": {"matchLabels": dict(selector)},
                                        "topologyKey": "kubernetes.io/hostname",
                                    },
                                }
                            ]
                        }
                    },
                    "containers": [_broker_container(cfg)],
                    "volumes": [
                        {"name": "config", "configMap": {"name": "stoker-config"}},
                        {"name": "data", "emptyDir": {}},
                        {
                            "name": "keys",
                            "secret": {"secretName": KEYS_SECRET, "defaultMode": 0o440},
                        },
                        {"name": "tmp", "emptyDir": {}},
                    ],
                },
            },
        },
    }
    api = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(cfg, BROKER, "broker"),
        "spec": {
            "selector": dict(selector),
            "ports": [{"name": "api", "port": s.api_port, "targetPort": "api", "protocol": "TCP"}],
        },
    }
    # the gateway selects the leader only: agents always dial the replica that schedules
    gateway = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(cfg, s.gateway_service, "broker"),
        "spec": {
            "selector": {**selector, LABEL_LEADER: "true"},
            "ports": [
                {
                    "name": "gateway",
                    "port": s.gateway_port,
                    "targetPort": "gateway",
                    "protocol": "TCP",
                }
            ],
        },
    }
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(cfg, BROKER, "broker"),
        "spec": {"minAvailable": 1, "selector": {"matchLabels": dict(selector)}},
    }
    return [deployment, api, gateway, pdb]


def network_policies(cfg: DeployConfig) -> list[dict[str, Any]]:
    s = cfg.settings
    dns = {
        "to": [
            {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
                },
                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
            }
        ],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }
    # the ranks of a multi-worker job dial rank 0's pod on its rendezvous port, and only there
    ranks = {
        "podSelector": {"matchLabels": _pod_selector(cfg)},
    }
    rendezvous = [
        {
            "protocol": "TCP",
            "port": MASTER_PORT_BASE,
            "endPort": MASTER_PORT_BASE + MASTER_PORT_COUNT - 1,
        }
    ]
    agents_in = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(cfg, "stoker-pods", "pod"),
        "spec": {
            # agent pods reach the broker's gateway (and DNS), and take connections only
            # from each other's ranks on the rendezvous ports
            "podSelector": {"matchLabels": _pod_selector(cfg)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [ranks], "ports": rendezvous}],
            "egress": [
                {
                    "to": [{"podSelector": {"matchLabels": _broker_selector(cfg)}}],
                    "ports": [{"protocol": "TCP", "port": s.gateway_port}],
                },
                {"to": [ranks], "ports": rendezvous},
                dns,
            ],
        },
    }
    open_net = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(cfg, "stoker-pods-network", "pod"),
        "spec": {
            # pods of a profile with network = true may also reach outside the cluster
            "podSelector": {"matchLabels": {**_pod_selector(cfg), LABEL_NETWORK: "open"}},
            "policyTypes": ["Egress"],
            "egress": [
                {
                    "to": [
                        {
                            "ipBlock": {
                                "cidr": "0.0.0.0/0",
                                "except": ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"],
                            }
                        }
                    ]
                }
            ],
        },
    }
    broker_in = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(cfg, BROKER, "broker"),
        "spec": {
            "podSelector": {"matchLabels": _broker_selector(cfg)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"ports": [{"protocol": "TCP", "port": s.api_port}]},
                {
                    "from": [{"podSelector": {"matchLabels": _pod_selector(cfg)}}],
                    "ports": [{"protocol": "TCP", "port": s.gateway_port}],
                },
            ],
        },
    }
    return [agents_in, open_net, broker_in]


def priority_classes(cfg: DeployConfig) -> list[dict[str, Any]]:
    p = cfg.settings.priority
    out = []
    for name, value, what, preempt in (
        (p.hp, p.hp_value, "stoker hp pods: guaranteed, never evicted for spot", True),
        (p.pool, p.pool_value, "stoker warm-pool pods (agent and RL loops)", False),
        (p.spot, p.spot_value, "stoker spot pods: preemptible, below hp and pool", False),
    ):
        out.append(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": _meta(cfg, name, "priority", namespaced=False),
                "value": value,
                "globalDefault": False,
                # stoker's core decides every eviction; only hp may make room in the cluster
                "preemptionPolicy": "PreemptLowerPriority" if preempt else "Never",
                "description": what,
            }
        )
    return out


def service_monitor(cfg: DeployConfig) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "ServiceMonitor",
            "metadata": _meta(cfg, BROKER, "broker"),
            "spec": {
                "selector": {"matchLabels": cfg.settings.base_labels("broker")},
                "endpoints": [{"port": "api", "path": "/metrics", "interval": "30s"}],
            },
        }
    ]


def database_secret(cfg: DeployConfig) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": _meta(cfg, DATABASE_SECRET, "broker"),
            "stringData": {"url": cfg.database_url},
        }
    ]


#: base file -> the builder of its objects, in apply order
BASE = {
    "namespace.yaml": namespace,
    "priority-classes.yaml": priority_classes,
    "rbac.yaml": rbac,
    "config.yaml": config,
    "broker.yaml": broker,
    "network-policy.yaml": network_policies,
}


def postgres_patch(cfg: DeployConfig) -> list[dict[str, Any]]:
    """The overlay's JSON patch of the Deployment: its replicas, and the database URL from
    the overlay's Secret."""
    env = {
        "name": DATABASE_ENV,
        "valueFrom": {"secretKeyRef": {"name": DATABASE_SECRET, "key": "url"}},
    }
    return [
        {"op": "replace", "path": "/spec/replicas", "value": cfg.replicas},
        {"op": "add", "path": "/spec/template/spec/containers/0/env/-", "value": env},
    ]


def json_patch(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """``obj`` with the ``add`` and ``replace`` operations of an RFC 6902 patch applied (all
    the overlay uses), as kustomize applies them."""
    out = copy.deepcopy(obj)
    for op in ops:
        *parents, last = op["path"].lstrip("/").split("/")
        node: Any = out
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            if op["op"] == "add":
                node.insert(len(node) if last == "-" else int(last), op["value"])
            else:
                node[int(last)] = op["value"]
        elif op["op"] == "replace" and last not in node:
            raise KeyError(f"{op['path']}: nothing to replace")
        else:
            node[last] = op["value"]
    return out


def manifests(cfg: DeployConfig, service_monitor_too: bool = True) -> list[dict[str, Any]]:
    """What ``kubectl apply -k overlays/postgres`` applies, but the keys Secret (a stream
    re-applied must never bring new keys): the base with the overlay's patch, the
    ServiceMonitor, the database Secret."""
    out = [obj for build in BASE.values() for obj in build(cfg)]
    patch = postgres_patch(cfg)
    out = [json_patch(o, patch) if o["kind"] == "Deployment" else o for o in out]
    if service_monitor_too:
        out += service_monitor(cfg)
    return out + database_secret(cfg)


def dump(objs: list[dict[str, Any]]) -> str:
    """Objects as one YAML stream, keys in the order they were built."""
    return yaml.safe_dump_all(objs, sort_keys=False, default_flow_style=False)


def _kustomization(kind: str = "Kustomization", **body: Any) -> str:
    head = {
        "apiVersion": "kustomize.config.k8s.io/v1alpha1"
        if kind == "Component"
        else "kustomize.config.k8s.io/v1beta1",
        "kind": kind,
    }
    return yaml.safe_dump({**head, **body}, sort_keys=False)


HEADER = "# generated by `stoker deploy render`; edit the builders, not this file\n"


def kustomize_tree(cfg: DeployConfig) -> dict[str, str]:
    """Relative path -> file content of the whole Kustomize tree."""
    files = {f"{BASE_DIR}/{name}": HEADER + dump(build(cfg)) for name, build in BASE.items()}
    keys = {
        "name": KEYS_SECRET,
        "namespace": cfg.settings.namespace,
        "type": "Opaque",
        "files": [f"keys/{name}" for name in KEY_FILES],
        "options": {
            "labels": cfg.settings.base_labels("broker"),
            # one fixed name: the Deployment names it, and a key must never change by itself
            "disableNameSuffixHash": True,
        },
    }
    files[f"{BASE_DIR}/kustomization.yaml"] = HEADER + _kustomization(
        resources=list(BASE), secretGenerator=[keys]
    )
    files["components/service-monitor/kustomization.yaml"] = HEADER + _kustomization(
        "Component", resources=["service-monitor.yaml"]
    )
    files["components/service-monitor/service-monitor.yaml"] = HEADER + dump(service_monitor(cfg))
    target = {"group": "apps", "version": "v1", "kind": "Deployment", "name": BROKER}
    files[f"{POSTGRES_OVERLAY}/kustomization.yaml"] = HEADER + _kustomization(
        resources=[f"../../{BASE_DIR}", "database-secret.yaml"],
        patches=[{"path": "broker-replicas.yaml", "target": target}],
    )
    files[f"{POSTGRES_OVERLAY}/database-secret.yaml"] = HEADER + dump(database_secret(cfg))
    files[f"{POSTGRES_OVERLAY}/broker-replicas.yaml"] = HEADER + yaml.safe_dump(
        postgres_patch(cfg), sort_keys=False
    )
    return dict(sorted(files.items()))


def write_tree(cfg: DeployConfig, out: Path) -> list[str]:
    """Write :func:`kustomize_tree` into ``out``, and the keys Secret's files into
    ``out/base/keys`` where missing (kept where there: new keys would leave every sealed value
    unreadable); the key files made."""
    tree = kustomize_tree(cfg)
    for rel, text in tree.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return write_keys(out / BASE_DIR / "keys")
