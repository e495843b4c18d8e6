"""The manifests the Kubernetes runtime creates: one pod per stoker pod, and its token Secret.

Pure functions of :class:`KubeSettings` and the pod's shape (no API calls), so every manifest
the runtime can build is rendered and validated by the tests.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
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
#: where a pod of a class with a checkpoint volume mounts its job's own directory of it
#: (the agent then sets STOKER_CHECKPOINT_DIR, as the local runtime's sandbox does)
CHECKPOINT_DIR = "/stoker/checkpoint"
#: where a drop pod mounts this install's directory of a checkpoint volume
DROP_ROOT = "/stoker/checkpoints"
DROP_DEADLINE_S = 300  # a drop pod that has not finished by then is failed by the kubelet
_JOB_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,100}$")


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
    #: (job, rank) whose checkpoint directory the pod mounts, where its class has a
    #: checkpoint volume (hp and spot pods are started for one job: the broker names it)
    checkpoint: tuple[str, int] | None = None


def checkpoint_key(job: str) -> str:
    """A job's directory name on a checkpoint volume: the id itself where it is a plain
    name (the broker's ``j-<hex>``), else a digest (never ``..``, a slash or a dot file)."""
    if _JOB_KEY.match(job):
        return job
    return "h-" + hashlib.sha256(job.encode()).hexdigest()[:40]


def checkpoint_subpath(s: KubeSettings, job: str, rank: int) -> str:
    """The directory of one rank of a job on its class's volume: INSTANCE/JOB/RANK (two
    installs may share a volume)."""
    return f"{s.instance}/{checkpoint_key(job)}/{int(rank)}"


def checkpoint_mount(s: KubeSettings, shape: PodShape) -> str | None:
    """The subPath of the class's volume the pod mounts, or None: no volume for its class,
    or no job named at its creation (then it has no checkpoint dir at all)."""
    if shape.checkpoint is None or shape.job_class not in s.checkpoint_volumes:
        return None
    return checkpoint_subpath(s, *shape.checkpoint)


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


def checkpoint_of(note: dict[str, Any]) -> tuple[str, int] | None:
    """The (job, rank) a pod's checkpoint mount is for, from its spec annotation."""
    kept = note.get("checkpoint")
    if isinstance(kept, list) and len(kept) == 2:
        return str(kept[0]), int(kept[1])
    return None


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


def _shared_volume_security(s: KubeSettings) -> dict[str, Any]:
    """:func:`pod_security` for a pod that mounts a checkpoint volume: the kubelet applies
    fsGroup to the volume's root only where the root is not the group's already, not to
    every job's files on it at every pod's start (the default walks the whole volume)."""
    return {**pod_security(s), "fsGroupChangePolicy": "OnRootMismatch"}


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
        "checkpoint": list(shape.checkpoint) if shape.checkpoint else None,
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
    ckpt = checkpoint_mount(s, shape)
    if ckpt is not None:
        command += ["--checkpoint", CHECKPOINT_DIR]
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
    if ckpt is not None:
        # only the job's own directory of the class's volume is mounted: the job runs as
        # the agent's uid here (no capability to drop to another), so whatever the pod
        # mounts, the job can read and write; the rest of the volume is never in the pod
        spec["containers"][0]["volumeMounts"].append(
            {"name": "checkpoint", "mountPath": CHECKPOINT_DIR, "subPath": ckpt}
        )
        spec["volumes"].append({"name": "checkpoint", **s.checkpoint_volumes[shape.job_class]})
        spec["securityContext"] = _shared_volume_security(s)
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


def drop_pods(s: KubeSettings, job: str, job_class: str | None = None) -> list[dict[str, Any]]:
    """The Pods that remove an ended job's checkpoints: one for its class's checkpoint
    volume (none if the class has none), or one per distinct volume where ``job_class`` is
    not known. Each runs the stoker image's ``stoker.agent.checkpoint`` on this
    install's directory of the volume (subPath INSTANCE) and removes JOB there, never
    following a link (:func:`stoker.agent.checkpoint.drop`). No tenant code runs in it."""
    out = []
    seen: list[dict[str, Any]] = []
    key = checkpoint_key(job)
    volumes = s.checkpoint_volumes
    if job_class is not None:
        volumes = {job_class: volumes[job_class]} if job_class in volumes else {}
    for source in volumes.values():
        if source in seen:
            continue
        seen.append(source)
        digest = hashlib.sha256(json.dumps([job, source], sort_keys=True).encode()).hexdigest()
        command = ["python", "-m", "stoker.agent.checkpoint", "drop", DROP_ROOT, key]
        container = {
            "name": "drop",
            "image": s.image,
            "imagePullPolicy": s.image_pull_policy,
            "command": command,
            "resources": {
                "requests": {"cpu": "10m", "memory": "64Mi"},
                "limits": {"memory": "128Mi"},
            },
            "securityContext": container_security(),
            "volumeMounts": [
                {"name": "checkpoints", "mountPath": DROP_ROOT, "subPath": s.instance}
            ],
        }
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"stoker-drop-{digest[:16]}",
                    "namespace": s.namespace,
                    # not a stoker pod (component pod): the runtime's watch never sees it
                    "labels": s.base_labels("checkpoint-drop"),
                },
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "activeDeadlineSeconds": DROP_DEADLINE_S,
                    "securityContext": _shared_volume_security(s),
                    "containers": [container],
                    "volumes": [{"name": "checkpoints", **source}],
                },
            }
        )
    return out
