"""The manifests the Kubernetes runtime creates: one pod per stoker pod, and its token Secret.

Pure functions of :class:`KubeSettings` and the pod's shape (no API calls), so every manifest
the runtime can build is rendered and validated by the tests.
"""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass
from typing import Any

from stoker.agent import STANDBY_ENV, TOKEN_ENV
from stoker.core.model import Profile
from stoker.runtime.base import RuntimeProfile
from stoker.runtime.kubernetes.settings import (
    ANNOTATION_SPEC,
    HOSTNAME_LABEL,
    LABEL_CLASS,
    LABEL_NETWORK,
    LABEL_POD,
    LABEL_PROFILE,
    LABEL_ROLE,
    KubeSettings,
    ShareMechanism,
    label_value,
    object_name,
)

WORKSPACE = "/workspace"
TOKEN_KEY = "token"
CONTAINER = "agent"


class PodSpecError(ValueError):
    """A pod this cluster's share mechanism cannot express (e.g. a standby without sharing)."""


@dataclass(frozen=True, slots=True)
class PodShape:
    """Everything one pod's manifest depends on besides the settings."""

    pod: str
    profile: Profile  # the core's shape: GPU model, GPUs, shares, CPU, memory
    runtime: RuntimeProfile  # the environment: image, preloads, RuntimeClass, network
    node: str | None  # the node the core placed it on (None: any node of the GPU model)
    gpu_ids: tuple[str, ...]
    standby: bool = False
    job_class: str = "pool"
    gpu_memory_mib: int | None = None  # per GPU on its node, where the node labels it


def runtime_profile(note: dict[str, Any]) -> RuntimeProfile:
    """The runtime profile a pod was made from, read back from its spec annotation."""
    rt = note["runtime"]
    return RuntimeProfile(
        note["profile"],
        preload=tuple(rt["preload"]),
        network=bool(rt["network"]),
        memory_mb=rt["memory_mb"],
        image=rt["image"],
        runtime_class=rt["runtime_class"],
        grace_s=rt.get("grace_s"),
        gpu_resource=rt.get("gpu_resource"),
    )


def grace_period(s: KubeSettings, rt: RuntimeProfile) -> int:
    """A pod's termination grace in whole seconds: the profile's, else the settings'."""
    return s.termination_grace_s if rt.grace_s is None else math.ceil(rt.grace_s)


def secret_name(pod: str) -> str:
    return f"{object_name(pod)}-token"


def _gpu_request(s: KubeSettings, shape: PodShape) -> tuple[dict[str, str], dict[str, str]]:
    """(resource limits, annotations) that give the pod its GPUs or its share of one."""
    p = shape.profile
    resource = shape.runtime.gpu_resource or s.gpu_resource  # a MIG slice, or whole GPUs
    share = p.standby_share if shape.standby else p.share
    if shape.standby and share <= 0.0:
        raise PodSpecError(f"profile {p.name}: a standby pod needs a standby_share above 0")
    fraction = share < 1.0
    if fraction and p.gpus != 1:
        raise PodSpecError(f"profile {p.name}: a GPU share below 1 needs a one-GPU profile")
    mech = s.share
    if fraction and mech is ShareMechanism.NONE:
        raise PodSpecError(
            f"profile {p.name}: share {share} needs a share mechanism (time-slicing, kai, hami)"
        )
    if not fraction or mech is ShareMechanism.TIME_SLICING:
        # time-slicing: one replica per GPU; stoker's core keeps the real shares
        return {resource: str(p.gpus)}, {}
    if mech is ShareMechanism.KAI:
        return {}, {"gpu-fraction": f"{share:g}"}
    # hami: a slice of the card's memory, in MiB where the node says how much it has
    if shape.gpu_memory_mib:
        return {
            resource: "1",
            "nvidia.com/gpumem": str(int(share * shape.gpu_memory_mib)),
        }, {}
    return {resource: "1", "nvidia.com/gpumem-percentage": str(round(share * 100))}, {}


def pod_security(s: KubeSettings) -> dict[str, Any]:
    """The pod-level security context of every stoker pod (agents and brokers alike)."""
    return {
        "runAsNonRoot": True,
        "runAsUser": s.run_as_user,
        "runAsGroup": s.run_as_user,
        "fsGroup": s.run_as_user,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security() -> dict[str, Any]:
    """Non-root, no privilege escalation, no capabilities, read-only root (writes go to
    emptyDir volumes), the runtime's default seccomp profile."""
    return {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_labels(s: KubeSettings, shape: PodShape) -> dict[str, str]:
    labels = {
        **s.base_labels("pod"),
        LABEL_POD: label_value(shape.pod),
        LABEL_PROFILE: label_value(shape.profile.name),
        LABEL_ROLE: "standby" if shape.standby else "active",
        LABEL_CLASS: shape.job_class,
    }
    if shape.runtime.network:
        labels[LABEL_NETWORK] = "open"  # the NetworkPolicy lets these pods out of the cluster
    return labels


def pod_manifest(s: KubeSettings, shape: PodShape) -> dict[str, Any]:
    """The Pod for ``shape``: the agent dialing the gateway, non-root, read-only root."""
    p, rt = shape.profile, shape.runtime
    limits, annotations = _gpu_request(s, shape)
    memory_mb = rt.memory_mb or int(p.memory_gb * 1024)
    spec_note = {
        "pod": shape.pod,
        "profile": p.name,
        "gpus": list(shape.gpu_ids),
        "standby": shape.standby,
        "class": shape.job_class,
        "runtime": {
            "image": rt.image,
            "preload": list(rt.preload),
            "runtime_class": rt.runtime_class,
            "network": rt.network,
            "memory_mb": rt.memory_mb,
            "grace_s": rt.grace_s,
            "gpu_resource": rt.gpu_resource,
        },
    }
    env = [
        {"name": "STOKER_POD", "value": shape.pod},
        {"name": "STOKER_GPUS", "value": "" if shape.standby else ",".join(shape.gpu_ids)},
        {"name": "HOME", "value": WORKSPACE},
        {"name": "TMPDIR", "value": "/tmp"},
        {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        *({"name": k, "value": v} for k, v in sorted(s.deps_env().items())),
        {
            "name": TOKEN_ENV,
            "valueFrom": {"secretKeyRef": {"name": secret_name(shape.pod), "key": TOKEN_KEY}},
        },
    ]
    if shape.standby:
        # the device is mounted, but nothing in the pod may initialise CUDA before promotion
        env += [
            {"name": STANDBY_ENV, "value": "1"},
            {"name": "CUDA_VISIBLE_DEVICES", "value": ""},
        ]
    command = ["python", "-m", "stoker.agent", "--dial", s.gateway_addr, "--pod", shape.pod]
    command += ["--workspace", WORKSPACE]
    if rt.preload:
        command += ["--preload", ",".join(rt.preload)]
    node_selector = {s.gpu_model_label: p.gpu_model} if p.gpu_model != "any" else {}
    if shape.node:
        node_selector[HOSTNAME_LABEL] = shape.node
    spec: dict[str, Any] = {
        "restartPolicy": "Never",  # a pod that dies is reported to the core, never restarted
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": grace_period(s, rt),
        "priorityClassName": s.priority.name(shape.job_class),
        "securityContext": pod_security(s),
        "containers": [
            {
                "name": CONTAINER,
                "image": rt.image or s.image,
                "imagePullPolicy": s.image_pull_policy,
                "command": command,
                "workingDir": WORKSPACE,
                "env": env,
                "resources": {
                    "requests": {"cpu": f"{p.cpu:g}", "memory": f"{memory_mb}Mi"},
                    "limits": {"memory": f"{memory_mb}Mi", **limits},
                },
                "securityContext": container_security(),
                "volumeMounts": [
                    {"name": "workspace", "mountPath": WORKSPACE},
                    {"name": "tmp", "mountPath": "/tmp"},
                    {"name": "shm", "mountPath": "/dev/shm"},
                ],
            }
        ],
        "volumes": [
            {"name": "workspace", "emptyDir": {"sizeLimit": f"{s.workspace_mb}Mi"}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
            {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
        ],
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    if p.gpus and s.gpu_tolerations:  # GPU nodes are commonly tainted for GPU pods only
        spec["tolerations"] = [dict(t) for t in s.gpu_tolerations]
    if rt.runtime_class:
        spec["runtimeClassName"] = rt.runtime_class
    if s.share is ShareMechanism.KAI:
        spec["schedulerName"] = s.kai_scheduler
    labels = pod_labels(s, shape)
    if s.share is ShareMechanism.KAI:
        labels["kai.scheduler/queue"] = s.kai_queue
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": object_name(shape.pod),
            "namespace": s.namespace,
            "labels": labels,
            "annotations": {ANNOTATION_SPEC: json.dumps(spec_note, sort_keys=True), **annotations},
        },
        "spec": spec,
    }


def secret_manifest(
    s: KubeSettings, pod: str, token: str, owner_uid: str | None = None
) -> dict[str, Any]:
    """The pod's token Secret; owned by its Pod (``owner_uid``) so Kubernetes deletes it
    with the pod, whoever deletes the pod."""
    meta: dict[str, Any] = {
        "name": secret_name(pod),
        "namespace": s.namespace,
        "labels": {**s.base_labels("pod"), LABEL_POD: label_value(pod)},
    }
    if owner_uid is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": object_name(pod),
                "uid": owner_uid,
                "blockOwnerDeletion": False,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": meta,
        "data": {TOKEN_KEY: base64.b64encode(token.encode()).decode()},
    }
