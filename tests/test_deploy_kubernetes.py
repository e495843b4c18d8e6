"""Every manifest stoker builds for Kubernetes, rendered and validated against the
Kubernetes 1.30-1.34 schemas (kubernetes-validate, strict: no unknown field passes), and the
committed ``deploy/kubernetes`` tree is exactly what the builders render."""

from __future__ import annotations

import base64
import dataclasses
import itertools
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from typer.testing import CliRunner

from stoker.cli.main import app
from stoker.core.model import Profile
from stoker.runtime.base import RuntimeProfile
from stoker.runtime.kubernetes import deploy, pods
from stoker.runtime.kubernetes.settings import KubeSettings, ShareMechanism

ROOT = Path(__file__).resolve().parent.parent
VERSIONS = ("1.30", "1.31", "1.32", "1.33", "1.34")
#: kinds that are not Kubernetes built-ins: no schema ships for them
NOT_BUILT_IN = {"ServiceMonitor"}


def _validate(obj: dict[str, Any]) -> None:
    for version in VERSIONS:
        assert kubernetes_validate.validate(obj, version, strict=True) == version, version


def test_the_schemas_cover_every_version() -> None:
    shipped = {".".join(v.split(".")[:2]) for v in kubernetes_validate.utils.all_versions()}
    assert set(VERSIONS) <= shipped


def test_a_typo_fails_validation() -> None:
    pod = pods.pod_manifest(KubeSettings(), _shape(ShareMechanism.NONE, False, "pool"))
    pod["spec"]["containers"][0]["securityContxt"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(pod)


def _shape(
    mech: ShareMechanism,
    standby: bool,
    job_class: str,
    runtime_class: str | None = None,
    mem: int | None = None,
    network: bool = False,
) -> pods.PodShape:
    core = Profile("gpu", gpu_model="NVIDIA-H100-80GB-HBM3", share=0.9, standby_share=0.1)
    if mech is ShareMechanism.NONE:
        core = Profile("gpu", gpu_model="NVIDIA-H100-80GB-HBM3", gpus=2)
    grace = 30.0 if runtime_class else None  # a profile's own grace, or the settings'
    rt = RuntimeProfile(
        "gpu", preload=("torch",), runtime_class=runtime_class, network=network, grace_s=grace
    )
    gpus = ("node-1/0",) if core.gpus == 1 else ("node-1/0", "node-1/1")
    return pods.PodShape("pod-7", core, rt, "node-1", gpus, standby, job_class, mem)


# every share mechanism, role and class; a RuntimeClass and known GPU memory, or neither
CASES = [
    (mech, standby, job_class, rc, mem)
    for mech, standby, job_class, (rc, mem) in itertools.product(
        ShareMechanism, (False, True), ("pool", "hp", "spot"), ((None, None), ("gvisor", 81559))
    )
    if not (mech is ShareMechanism.NONE and standby)
]


@pytest.mark.parametrize(("mech", "standby", "job_class", "rc", "mem"), CASES)
def test_every_pod_the_runtime_builds_is_valid(
    mech: ShareMechanism, standby: bool, job_class: str, rc: str | None, mem: int | None
) -> None:
    s = KubeSettings(share=mech)
    shape = _shape(mech, standby, job_class, rc, mem, network=job_class == "spot")
    pod = pods.pod_manifest(s, shape)
    _validate(pod)
    _validate(pods.secret_manifest(s, shape.pod, "t0ken", "9b2d-uid"))
    spec, c = pod["spec"], pod["spec"]["containers"][0]
    limits, notes = c["resources"]["limits"], pod["metadata"]["annotations"]
    # the same hardened pod whatever the shape
    assert spec["securityContext"]["runAsNonRoot"] and spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert {m["mountPath"] for m in c["volumeMounts"]} == {"/workspace", "/tmp", "/dev/shm"}
    assert spec["priorityClassName"] == f"stoker-{job_class}"
    assert spec.get("runtimeClassName") == rc
    assert spec["terminationGracePeriodSeconds"] == (30 if rc else s.termination_grace_s)
    assert {e["name"] for e in c["env"]} >= {"STOKER_DEPS_INDEX_URL", "STOKER_DEPS_FIND_LINKS"}
    assert c["command"][:5] == ["python", "-m", "stoker.agent", "--dial", s.gateway_addr]
    assert json.loads(notes["stoker.dev/spec"])["standby"] is standby
    env = {e["name"]: e for e in c["env"]}
    assert env["STOKER_AGENT_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "stoker-pod-7-token"
    assert ("STOKER_STANDBY" in env) is standby
    share = "0.1" if standby else "0.9"
    if mech is ShareMechanism.NONE:
        assert limits["nvidia.com/gpu"] == "2" and "gpu-fraction" not in notes
    elif mech is ShareMechanism.TIME_SLICING:
        assert limits["nvidia.com/gpu"] == "1"
    elif mech is ShareMechanism.KAI:
        assert notes["gpu-fraction"] == share and "nvidia.com/gpu" not in limits
        assert spec["schedulerName"] == "kai-scheduler"
        assert pod["metadata"]["labels"]["kai.scheduler/queue"] == "default"
    else:
        want = (
            {"nvidia.com/gpumem": str(int(float(share) * 81559))}
            if mem
            else {"nvidia.com/gpumem-percentage": str(round(float(share) * 100))}
        )
        assert limits["nvidia.com/gpu"] == "1" and want.items() <= limits.items()


def test_impossible_pods_are_refused_with_a_reason() -> None:
    with pytest.raises(pods.PodSpecError, match="share mechanism"):
        shape = _shape(ShareMechanism.TIME_SLICING, True, "pool")
        pods.pod_manifest(KubeSettings(share=ShareMechanism.NONE), shape)
    multi = Profile("multi", gpus=2, share=0.5)
    shape = pods.PodShape("p", multi, RuntimeProfile("multi"), None, ("n/0", "n/1"))
    with pytest.raises(pods.PodSpecError, match="one-GPU"):
        pods.pod_manifest(KubeSettings(share=ShareMechanism.KAI), shape)


def test_pod_names_are_dns_labels_and_unique() -> None:
    from stoker.runtime.kubernetes.settings import object_name

    names = {object_name(p) for p in ("pod-1", "Pod-1", "pod_1", "x" * 90, "x" * 91)}
    assert len(names) == 5
    assert all(len(n) <= 63 and n.replace("-", "").isalnum() and n.islower() for n in names)


def _kustomize(root: Path, rel: str) -> list[dict[str, Any]]:
    """What ``kubectl kustomize root/rel`` renders: kubectl's own where it is installed,
    else :func:`_build`."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return _build(root, rel)
    out = subprocess.run(
        [kubectl, "kustomize", str(root / rel)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return [o for o in yaml.safe_load_all(out.stdout) if o]


def _build(root: Path, rel: str) -> list[dict[str, Any]]:
    """What ``kubectl kustomize root/rel`` renders, for what the tree uses: resources
    (files and directories), secretGenerator from files, JSON patches."""
    where = root / rel
    k = yaml.safe_load((where / "kustomization.yaml").read_text())
    objs: list[dict[str, Any]] = []
    for res in k.get("resources", []):
        if (where / res).is_dir():
            objs += _build(root, str(Path(rel) / res))
        else:
            objs += [o for o in yaml.safe_load_all((where / res).read_text()) if o]
    for gen in k.get("secretGenerator", []):
        assert gen["options"]["disableNameSuffixHash"] is True  # the Deployment names it
        data = {
            Path(f).name: base64.b64encode((where / f).read_bytes()).decode() for f in gen["files"]
        }
        meta = {
            "name": gen["name"],
            "namespace": gen["namespace"],
            "labels": gen["options"]["labels"],
        }
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": gen["type"],
                "metadata": meta,
                "data": data,
            }
        )
    for patch in k.get("patches", []):
        ops = yaml.safe_load((where / patch["path"]).read_text())
        t = patch["target"]
        hits = [
            i
            for i, o in enumerate(objs)
            if (o["kind"], o["metadata"]["name"]) == (t["kind"], t["name"])
        ]
        assert len(hits) == 1, patch
        objs[hits[0]] = deploy.json_patch(objs[hits[0]], ops)
    return objs


def _references(obj: dict[str, Any]) -> set[tuple[str, str, str | None]]:
    """(kind, name, key) of every Secret and ConfigMap a Deployment's pods read."""
    spec = obj["spec"]["template"]["spec"]
    refs: set[tuple[str, str, str | None]] = set()
    for v in spec.get("volumes", []):
        if "secret" in v:
            items = v["secret"].get("items") or [{"key": None}]
            refs |= {("Secret", v["secret"]["secretName"], i["key"]) for i in items}
        if "configMap" in v:
            refs.add(("ConfigMap", v["configMap"]["name"], None))
    for c in spec["containers"]:
        for e in c.get("env", []):
            for kind, ref in (("Secret", "secretKeyRef"), ("ConfigMap", "configMapKeyRef")):
                if ref in e.get("valueFrom", {}):
                    refs.add((kind, e["valueFrom"][ref]["name"], e["valueFrom"][ref]["key"]))
    return refs


@pytest.mark.parametrize("namespace", ["stoker", "gpu-team"])
@pytest.mark.parametrize("target", [deploy.BASE_DIR, deploy.POSTGRES_OVERLAY])
def test_every_deploy_manifest_is_valid_and_self_contained(
    tmp_path: Path, namespace: str, target: str
) -> None:
    """The base and the postgres overlay as kubectl would apply them: every object valid,
    and every Secret and ConfigMap the brokers read is in the same rendering (the base once
    named a database Secret only the overlay made: pods stuck in CreateContainerConfigError)."""
    cfg = deploy.DeployConfig(settings=KubeSettings(namespace=namespace), replicas=3)
    assert set(deploy.write_tree(cfg, tmp_path)) == {"secret.key", "admin.token", "viewer.token"}
    objs = _kustomize(tmp_path, target)
    kinds = sorted(o["kind"] for o in objs)
    postgres = target != deploy.BASE_DIR
    assert kinds == sorted(
        ["Namespace", "ServiceAccount", "Role", "RoleBinding", "ClusterRole"]
        + ["ClusterRoleBinding", "ConfigMap", "Deployment", "Service", "Service"]
        + ["PodDisruptionBudget", "NetworkPolicy", "NetworkPolicy", "NetworkPolicy"]
        + ["PriorityClass"] * 3
        + ["Secret"] * (2 if postgres else 1)
    )
    for obj in objs:
        _validate(obj)
        if obj["kind"] not in ("Namespace", "PriorityClass", "ClusterRole", "ClusterRoleBinding"):
            assert obj["metadata"]["namespace"] == namespace
    by = {(o["kind"], o["metadata"]["name"]): o for o in objs}
    dep = by[("Deployment", "stoker-broker")]
    for kind, name, key in _references(dep):
        assert (kind, name) in by, f"{kind} {name} is named but not rendered"
        held = by[(kind, name)].get("data") or by[(kind, name)].get("stringData")
        assert key is None or key in held, (kind, name, key)
    # several replicas only on PostgreSQL, and then always with the shared keys
    assert dep["spec"]["replicas"] == (3 if postgres else 1)
    env = {e["name"] for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert ("STOKER_DATABASE_URL" in env) is postgres
    command = dep["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--keys-dir") + 1] == deploy.KEYS_DIR
    # the keys Secret's key is one the broker opens
    from stoker.broker.secrets import SecretBox

    key_file = tmp_path / "key"
    key_file.write_bytes(base64.b64decode(by[("Secret", "stoker-keys")]["data"]["secret.key"]))
    assert SecretBox(key_file, create=False).key_count == 1
    # the tree with the same keys rendered again: nothing made, the keys kept
    before = (tmp_path / "base/keys/secret.key").read_bytes()
    assert deploy.write_tree(cfg, tmp_path) == []
    assert (tmp_path / "base/keys/secret.key").read_bytes() == before


def test_the_service_monitor_component() -> None:
    # no schema ships for a CRD: its shape is checked here instead
    (sm,) = deploy.service_monitor(deploy.DeployConfig())
    assert sm["kind"] in NOT_BUILT_IN and sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["spec"]["endpoints"] == [{"port": "api", "path": "/metrics", "interval": "30s"}]


def test_the_committed_tree_is_what_the_builders_render() -> None:
    tree = deploy.kustomize_tree(deploy.DeployConfig())
    committed = ROOT / "deploy/kubernetes"
    on_disk = {
        str(p.relative_to(committed)): p.read_text()
        for p in sorted(committed.rglob("*"))
        if p.is_file() and "keys" not in p.relative_to(committed).parts  # made, not committed
    }
    assert on_disk == tree, (
        "deploy/kubernetes is stale: run `stoker deploy render --out deploy/kubernetes`"
    )
    # every kustomization names files that exist (or, keys/, that render --out makes), and
    # nothing is left out of one
    listed = set()
    for rel, text in tree.items():
        if rel.endswith("kustomization.yaml"):
            base = Path(rel).parent
            k = yaml.safe_load(text)
            names = k["resources"] + [p["path"] for p in k.get("patches", [])]
            for res in names:
                path = (committed / base / res).resolve()
                assert path.exists(), (rel, res)
                listed.add(path)
            for gen in k.get("secretGenerator", []):
                assert all(f.startswith("keys/") for f in gen["files"]), gen
    for rel in tree:
        if not rel.endswith("kustomization.yaml"):
            assert (committed / rel).resolve() in listed, rel


def test_rbac_networking_and_priorities() -> None:
    cfg = deploy.DeployConfig()
    by = {(o["kind"], o["metadata"]["name"]): o for o in deploy.manifests(cfg)}
    role = by[("Role", "stoker-broker")]
    assert {r for rule in role["rules"] for r in rule["resources"]} == {"pods", "secrets", "events"}
    nodes = by[("ClusterRole", "stoker-broker-stoker-nodes")]
    assert nodes["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}
    ]
    values = {o["metadata"]["name"]: o["value"] for o in deploy.priority_classes(cfg)}
    assert values["stoker-spot"] < values["stoker-pool"] < values["stoker-hp"]
    agents = by[("NetworkPolicy", "stoker-pods")]["spec"]
    rendezvous = [{"protocol": "TCP", "port": 29500, "endPort": 30499}]
    pods = {"podSelector": {"matchLabels": cfg.settings.base_labels("pod")}}
    # a pod takes connections only from stoker pods (a gang's ranks), on the rendezvous ports
    assert agents["ingress"] == [{"from": [pods], "ports": rendezvous}]
    to_broker, to_ranks, dns = agents["egress"]
    assert to_ranks == {"to": [pods], "ports": rendezvous}
    assert to_broker["ports"] == [{"protocol": "TCP", "port": 8766}]
    assert (
        to_broker["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "broker"
    )
    assert {p["port"] for p in dns["ports"]} == {53}
    dep = by[("Deployment", "stoker-broker")]
    assert dep["spec"]["replicas"] == 2
    # a rolling upgrade must not stop the running pods with the old leader
    assert "--keep-pods" in dep["spec"]["template"]["spec"]["containers"][0]["command"]
    env = {e["name"]: e for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["STOKER_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "stoker-database",
        "key": "url",
    }
    gateway = by[("Service", "stoker-gateway")]
    assert gateway["spec"]["selector"]["stoker.dev/leader"] == "true"
    kube_toml = by[("ConfigMap", "stoker-config")]["data"]["kubernetes.toml"]
    import tomllib

    assert KubeSettings.from_dict(tomllib.loads(kube_toml)) == cfg.settings


def test_deploy_render_cli(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["deploy", "render"])
    assert res.exit_code == 0, res.output
    assert list(yaml.safe_load_all(res.stdout)) == deploy.manifests(deploy.DeployConfig())
    (tmp_path / "broker.toml").write_text("[policies]\nkeepalive_s = 30\n")
    (tmp_path / "deploy.toml").write_text(
        'replicas = 3\nbroker_config = "broker.toml"\n'
        '[kubernetes]\nnamespace = "ml"\nshare = "hami"\n'
    )
    out = tmp_path / "tree"
    res = runner.invoke(
        app, ["deploy", "render", "--config", str(tmp_path / "deploy.toml"), "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    dep = yaml.safe_load((out / "base/broker.yaml").read_text().split("---")[0].split("\n", 1)[1])
    assert dep["metadata"]["namespace"] == "ml"
    patch = yaml.safe_load((out / "overlays/postgres/broker-replicas.yaml").read_text())
    assert patch[0] == {"op": "replace", "path": "/spec/replicas", "value": 3}
    # the printed apply target is the overlay, and the keys it needs are there
    assert f"kubectl apply -k {out / 'overlays/postgres'}" in res.stderr
    assert sorted(p.name for p in (out / "base/keys").iterdir()) == [
        "admin.token",
        "secret.key",
        "viewer.token",
    ]
    assert "keepalive_s = 30" in (out / "base/config.yaml").read_text()
    # a bad value: one line naming it, exit 2, nothing written
    (tmp_path / "bad.toml").write_text('[kubernetes]\nshare = "mig"\n')
    res = runner.invoke(
        app,
        ["deploy", "render", "--config", str(tmp_path / "bad.toml"), "--out", str(tmp_path / "x")],
    )
    assert res.exit_code == 2 and "share" in res.output and not (tmp_path / "x").exists()
    (tmp_path / "typo.toml").write_text("replica = 2\n")
    res = runner.invoke(app, ["deploy", "render", "--config", str(tmp_path / "typo.toml")])
    assert res.exit_code == 2 and "'replica'" in res.output


def test_gpu_pods_tolerate_tainted_gpu_nodes_and_take_a_profiles_mig_slice() -> None:
    s = KubeSettings()
    gpu = pods.pod_manifest(s, _shape(ShareMechanism.TIME_SLICING, False, "hp"))
    assert gpu["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert gpu["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    cpu = Profile("cpu", gpus=0, share=1.0, standby_share=0.0, cpu=1.0, memory_gb=1.0)
    shape = pods.PodShape("p", cpu, RuntimeProfile("cpu"), None, ())
    assert "tolerations" not in pods.pod_manifest(s, shape)["spec"]  # only GPU pods
    # a MIG slice per profile, and the cluster's own taints instead of the default
    own = [{"key": "gpu-team", "operator": "Equal", "value": "ml", "effect": "NoExecute"}]
    s = KubeSettings.from_dict({"gpu_tolerations": own})
    mig = Profile("mig", gpu_model="NVIDIA-A100-SXM4-80GB", share=1.0, standby_share=0.0)
    rt = RuntimeProfile("mig", gpu_resource="nvidia.com/mig-1g.10gb")
    pod = pods.pod_manifest(s, pods.PodShape("m", mig, rt, None, ("n/0",)))
    _validate(pod)
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/mig-1g.10gb"] == "1" and "nvidia.com/gpu" not in limits
    assert pod["spec"]["tolerations"] == own
    assert pod["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    # read back from the spec annotation by a broker that re-adopts the pod
    note = json.loads(pod["metadata"]["annotations"]["stoker.dev/spec"])
    assert pods.runtime_profile(note).gpu_resource == "nvidia.com/mig-1g.10gb"
    with pytest.raises(ValueError, match=r"gpu_tolerations\[0\]"):
        KubeSettings.from_dict({"gpu_tolerations": [{"key": "x", "effekt": "NoSchedule"}]})


def test_the_priority_values_are_configurable_and_ordered(tmp_path: Path) -> None:
    (tmp_path / "deploy.toml").write_text(
        "[kubernetes.priority]\nhp_value = 900000\npool_value = 800000\n"
    )
    cfg = deploy.DeployConfig.load(tmp_path / "deploy.toml")
    values = {o["metadata"]["name"]: o["value"] for o in deploy.priority_classes(cfg)}
    assert values == {"stoker-hp": 900000, "stoker-pool": 800000, "stoker-spot": 1000}
    for obj in deploy.priority_classes(cfg):
        _validate(obj)
    # the runtime reads the same settings back from the ConfigMap
    kube_toml = deploy.config(cfg)[0]["data"]["kubernetes.toml"]
    import tomllib

    assert KubeSettings.from_dict(tomllib.loads(kube_toml)) == cfg.settings
    for bad, named in (
        ("hp_value = 100", "spot_value < pool_value < hp_value"),
        ("hp_value = 2000000000", "within"),
        ("hp_valu = 1", "unknown key 'hp_valu'"),
        ("hp_value = '1'", "kubernetes.priority.hp_value"),
    ):
        (tmp_path / "bad.toml").write_text(f"[kubernetes.priority]\n{bad}\n")
        with pytest.raises(ValueError, match=named):
            deploy.DeployConfig.load(tmp_path / "bad.toml")


def test_the_images_run_as_the_pods_user() -> None:
    """The image the Dockerfiles build runs as the user the manifests ask for (a
    runAsNonRoot pod whose image says root would still start, as a user it never meant)."""
    uid = KubeSettings().run_as_user
    for name in ("Dockerfile", "Dockerfile.profile"):
        lines = (ROOT / "deploy/images" / name).read_text().splitlines()
        users = [line.split()[1] for line in lines if line.startswith("USER ")]
        assert users[-1] == f"{uid}:{uid}", name


CHECKPOINT_VOLUMES = {
    "spot": "spot-checkpoints",  # a PersistentVolumeClaim's name
    "hp": {"nfs": {"server": "nfs.test", "path": "/checkpoints"}},  # or a volume source
}


@pytest.mark.parametrize("job_class", ["pool", "hp", "spot"])
def test_a_pod_mounts_only_its_own_jobs_checkpoint_dir(job_class: str) -> None:
    """A pod of a class with a checkpoint volume mounts its job's and rank's directory of
    it (subPath INSTANCE/JOB/RANK), and nothing else of it; pool pods, and pods started for
    no job, have no checkpoint dir. Every such pod, and every drop pod, is valid."""
    s = KubeSettings(checkpoint_volumes=CHECKPOINT_VOLUMES)
    base = _shape(ShareMechanism.TIME_SLICING, False, job_class)
    pod = pods.pod_manifest(s, dataclasses.replace(base, checkpoint=("j-1f", 2)))
    _validate(pod)
    spec, c = pod["spec"], pod["spec"]["containers"][0]
    mounts = [m for m in c["volumeMounts"] if m["name"] == "checkpoint"]
    volumes = [v for v in spec["volumes"] if v["name"] == "checkpoint"]
    note = json.loads(pod["metadata"]["annotations"]["stoker.dev/spec"])
    assert pods.checkpoint_of(note) == ("j-1f", 2)  # a broker that re-adopts it keeps it
    if job_class == "pool":
        assert mounts == volumes == [] and "--checkpoint" not in c["command"]
    else:
        assert mounts == [
            {"name": "checkpoint", "mountPath": "/stoker/checkpoint", "subPath": "stoker/j-1f/2"}
        ]
        source = s.checkpoint_volumes[job_class]
        assert volumes == [{"name": "checkpoint", **source}]
        assert c["command"][-2:] == ["--checkpoint", "/stoker/checkpoint"]
        assert spec["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"
    bare = pods.pod_manifest(s, base)  # no job named: no checkpoint dir
    assert "checkpoint" not in {v["name"] for v in bare["spec"]["volumes"]}

    drops = pods.drop_pods(s, "j-1f")
    assert len(drops) == 2 and len({d["metadata"]["name"] for d in drops}) == 2
    for drop in drops:
        _validate(drop)
        dspec, dc = drop["spec"], drop["spec"]["containers"][0]
        assert drop["metadata"]["labels"]["app.kubernetes.io/component"] == "checkpoint-drop"
        assert dspec["restartPolicy"] == "Never" and dspec["automountServiceAccountToken"] is False
        assert dspec["securityContext"]["runAsNonRoot"]
        assert dc["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert dc["volumeMounts"] == [
            {"name": "checkpoints", "mountPath": "/stoker/checkpoints", "subPath": "stoker"}
        ]
        assert dc["command"][-3:] == ["drop", "/stoker/checkpoints", "j-1f"]
    assert pods.drop_pods(KubeSettings(), "j-1f") == []
    (spot,) = pods.drop_pods(s, "j-1f", "spot")  # the class known: its volume only
    assert spot["spec"]["volumes"] == [{"name": "checkpoints", **s.checkpoint_volumes["spot"]}]
    assert pods.drop_pods(s, "j-1f", "pool") == []


def test_checkpoint_volume_settings_are_checked_and_round_trip(tmp_path: Path) -> None:
    for bad, named in (
        ({"pool": "x"}, "pool pods serve many jobs"),
        ({"batch": "x"}, "only hp or spot"),
        ({"spot": "Not_A_Name"}, "not a PersistentVolumeClaim name"),
        ({"spot": {"nfs": {"server": "a", "path": "/"}, "csi": {}}}, "one volume source"),
        ({"spot": 7}, "a claim name"),
        ({"spot": {"nfs": {"server": "a", "path": "/", "readOnly": True}}}, "writable"),
    ):
        with pytest.raises(ValueError, match=named):
            KubeSettings.from_dict({"checkpoint_volumes": bad})
    (tmp_path / "deploy.toml").write_text(
        '[kubernetes.checkpoint_volumes]\nspot = "spot-checkpoints"\n'
        'hp = { nfs = { server = "nfs.test", path = "/checkpoints" } }\n'
    )
    cfg = deploy.DeployConfig.load(tmp_path / "deploy.toml")
    assert (
        cfg.settings.checkpoint_volumes
        == KubeSettings(checkpoint_volumes=CHECKPOINT_VOLUMES).checkpoint_volumes
    )
    import tomllib

    kube_toml = deploy.config(cfg)[0]["data"]["kubernetes.toml"]
    assert KubeSettings.from_dict(tomllib.loads(kube_toml)) == cfg.settings
    assert "checkpoint_volumes" not in deploy.kube_toml(KubeSettings())  # the default tree


def test_a_jobs_checkpoint_key_is_one_plain_name() -> None:
    assert pods.checkpoint_key("j-0123abcd") == "j-0123abcd"
    keys = {pods.checkpoint_key(j) for j in ("..", ".", "../j-1", "a/b", ".hidden", "", "x" * 200)}
    assert len(keys) == 7
    assert all(k.startswith("h-") and "/" not in k and ".." not in k for k in keys)
