"""deploy/: `kubectl kustomize deploy/` renders, the pods meet the restricted Pod Security Standard, probes and
ports line up, no Secret value is inline, the config parses, and Fluxwarden's own `check` passes on a repo that
applies deploy/ with the example Flux Kustomization (deploy/flux-kustomization.yaml).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.pipeline.check import CheckOptions, check_repository
from bot.adapters.kustomize import locate_kustomize, run_build
from bot.engine.core.model import Severity
from bot.service.settings import load_service_config

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
NAMESPACE = "fluxwarden"
EXPECTED_KINDS = {"Namespace", "ServiceAccount", "ConfigMap", "Service", "Deployment", "PodDisruptionBudget", "NetworkPolicy", "ServiceMonitor"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    binary = locate_kustomize(None)
    text = run_build(binary, DEPLOY, sandbox_home=tmp_path_factory.mktemp("kustomize-home"), timeout=60)
    return [d for d in yaml.safe_load_all(text) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


@pytest.fixture(scope="module")
def deployment(rendered: list[dict[str, Any]]) -> dict[str, Any]:
    [found] = by_kind(rendered, "Deployment")
    return found


def containers(deployment: dict[str, Any]) -> list[dict[str, Any]]:
    pod = deployment["spec"]["template"]["spec"]
    return [*pod.get("initContainers", []), *pod["containers"], *pod.get("ephemeralContainers", [])]


def test_renders_every_resource_in_one_namespace(rendered: list[dict[str, Any]]) -> None:
    kinds = {d["kind"] for d in rendered}
    assert EXPECTED_KINDS <= kinds, EXPECTED_KINDS - kinds
    for doc in rendered:
        if doc["kind"] not in CLUSTER_SCOPED:
            assert doc["metadata"].get("namespace") == NAMESPACE, f"{doc['kind']}/{doc['metadata']['name']}"
    [ns] = by_kind(rendered, "Namespace")
    assert ns["metadata"]["name"] == NAMESPACE
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_two_replicas_spread_over_nodes(deployment: dict[str, Any], rendered: list[dict[str, Any]]) -> None:
    assert deployment["spec"]["replicas"] >= 2
    pod = deployment["spec"]["template"]["spec"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    spreads = {c["topologyKey"]: c for c in pod.get("topologySpreadConstraints", [])}
    assert spreads["kubernetes.io/hostname"]["whenUnsatisfiable"] == "DoNotSchedule"
    assert spreads["kubernetes.io/hostname"]["labelSelector"]["matchLabels"].items() <= labels.items()
    [pdb] = by_kind(rendered, "PodDisruptionBudget")
    assert 1 <= pdb["spec"]["minAvailable"] < deployment["spec"]["replicas"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_restricted_pod_security_on_every_container(deployment: dict[str, Any]) -> None:
    """The restricted Pod Security Standard's fields, on the pod and on each container."""
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    for volume in pod["volumes"]:
        assert not {"hostPath"} & volume.keys(), volume["name"]
    for container in containers(deployment):
        sc = container["securityContext"]
        name = container["name"]
        assert sc["runAsNonRoot"] is True and sc.get("runAsUser", 1) != 0, name
        assert sc["allowPrivilegeEscalation"] is False, name
        assert sc["readOnlyRootFilesystem"] is True, name
        assert sc["capabilities"]["drop"] == ["ALL"] and not sc["capabilities"].get("add"), name
        assert sc["seccompProfile"]["type"] == "RuntimeDefault", name
        assert not sc.get("privileged"), name


def test_writable_paths_are_empty_dirs(deployment: dict[str, Any]) -> None:
    pod = deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    [container] = pod["containers"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    for path in ("/var/cache/fluxwarden", "/tmp"):
        volume = volumes[mounts[path]["name"]]
        assert "emptyDir" in volume and volume["emptyDir"].get("sizeLimit"), path
    for path, mount in mounts.items():
        if path not in ("/var/cache/fluxwarden", "/tmp"):
            assert mount.get("readOnly") is True, path
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["FLUXWARDEN_CACHE_DIR"] == "/var/cache/fluxwarden"


def test_resources_and_image(deployment: dict[str, Any]) -> None:
    for container in containers(deployment):
        resources = container["resources"]
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= resources[kind].keys(), (container["name"], kind)
        image = container["image"]
        name, _, tag = image.rpartition(":")
        assert name and tag and tag != "latest" and "/" not in tag, image
        assert container.get("imagePullPolicy") != "Always" or "@sha256:" in image


def test_probes_point_at_healthz_and_readyz_on_the_service_port(deployment: dict[str, Any], rendered: list[dict[str, Any]]) -> None:
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 8080}

    def target(probe: dict[str, Any]) -> tuple[str, int]:
        get = probe["httpGet"]
        port = get["port"]
        return get["path"], ports[port] if isinstance(port, str) else port

    assert target(container["livenessProbe"]) == ("/healthz", 8080)
    assert target(container["readinessProbe"]) == ("/readyz", 8080)
    assert target(container["startupProbe"]) == ("/healthz", 8080)
    [service] = by_kind(rendered, "Service")
    [port] = service["spec"]["ports"]
    assert port["targetPort"] in ports and port["name"] == "http"
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    [monitor] = by_kind(rendered, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] == port["name"] and endpoint["path"] == "/metrics"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()


SECRETISH = re.compile(r"(secret|token|password|private[_-]?key|credential)", re.I)


def test_secrets_by_name_only(deployment: dict[str, Any], rendered: list[dict[str, Any]]) -> None:
    assert not by_kind(rendered, "Secret"), "no Secret object (and so no value) ships in deploy/"
    pod = deployment["spec"]["template"]["spec"]
    secret_volumes = {v["name"]: v["secret"] for v in pod["volumes"] if "secret" in v}
    assert {v["secretName"] for v in secret_volumes.values()} == {"fluxwarden-webhook", "fluxwarden-github-app"}
    [container] = pod["containers"]
    mounted = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    env = container["env"]
    for variable in env:
        if SECRETISH.search(variable["name"]):
            assert variable["name"].endswith("_FILE"), f"{variable['name']}: secrets as files, not values"
            assert any(variable["value"].startswith(mounted[name] + "/") for name in secret_volumes), variable
        assert "secretKeyRef" not in variable.get("valueFrom", {}), variable["name"]
    names = {e["name"] for e in env}
    assert {"FLUXWARDEN_WEBHOOK_SECRET_FILE", "FLUXWARDEN_GITHUB_PRIVATE_KEY_FILE"} <= names
    [config] = by_kind(rendered, "ConfigMap")
    for key, value in yaml.safe_load(config["data"]["config.yaml"]).items():
        assert not (isinstance(value, dict) and {"secret", "token", "private_key"} & value.keys()), key


def test_config_map_is_generated_and_parses_with_the_pod_environment(deployment: dict[str, Any], rendered: list[dict[str, Any]], tmp_path: Path) -> None:
    [config] = by_kind(rendered, "ConfigMap")
    assert re.fullmatch(r"fluxwarden-config-[a-z0-9]{10}", config["metadata"]["name"]), "a content hash rolls the pods"
    pod = deployment["spec"]["template"]["spec"]
    [volume] = [v for v in pod["volumes"] if "configMap" in v]
    assert volume["configMap"]["name"] == config["metadata"]["name"]
    [container] = pod["containers"]
    mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == volume["name"])
    config_arg = container["args"][container["args"].index("--config") + 1]
    assert config_arg == f"{mount}/config.yaml"
    # The pod's environment, with the mounted files made real in tmp_path: the service starts with it.
    (tmp_path / "config.yaml").write_text(config["data"]["config.yaml"])
    env: dict[str, str] = {}
    for variable in container["env"]:
        if "value" in variable:
            value = variable["value"]
            if value.startswith("/var/run/secrets/"):
                local = tmp_path / Path(value).name
                local.write_text("-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n" if "key" in value else "webhook-secret")
                value = str(local)
            env[variable["name"]] = value
    loaded = load_service_config(tmp_path / "config.yaml", env)
    assert loaded.webhook_secret == b"webhook-secret"
    assert loaded.github.app_id and loaded.github.installation_id and loaded.github.private_key
    assert loaded.port == 8080 and str(loaded.cache_dir) == "/var/cache/fluxwarden"
    assert loaded.repos and all(r.clusters for r in loaded.repos)


def test_network_policy(rendered: list[dict[str, Any]], deployment: dict[str, Any]) -> None:
    [policy] = by_kind(rendered, "NetworkPolicy")
    spec = policy["spec"]
    assert set(spec["policyTypes"]) == {"Ingress", "Egress"}
    assert spec["podSelector"]["matchLabels"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    ingress_ports = {p["port"] for rule in spec["ingress"] for p in rule.get("ports", [])}
    assert ingress_ports == {8080}
    egress = {(p.get("protocol", "TCP"), p["port"]) for rule in spec["egress"] for p in rule.get("ports", [])}
    assert {("UDP", 53), ("TCP", 53), ("TCP", 443), ("TCP", 6443)} <= egress
    dns = next(r for r in spec["egress"] if any(p["port"] == 53 for p in r["ports"]))
    assert dns["to"], "DNS only to the cluster's DNS pods"


# --- Fluxwarden's own check on a repository that applies deploy/ with the example Flux Kustomization ---

MONITORING_CRDS_TIER = """\
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: monitoring-crds
  namespace: flux-system
spec:
  interval: 1h
  path: ./infra/monitoring-crds
  prune: false
  wait: true
  sourceRef:
    kind: GitRepository
    name: flux-system
"""
PROMETHEUS_OPERATOR_CRDS = """\
apiVersion: v1
kind: Namespace
metadata:
  name: monitoring
---
apiVersion: source.toolkit.fluxcd.io/v1
kind: HelmRepository
metadata:
  name: prometheus-community
  namespace: monitoring
spec:
  interval: 12h
  url: https://prometheus-community.github.io/helm-charts
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: prometheus-operator-crds
  namespace: monitoring
spec:
  interval: 1h
  chart:
    spec:
      chart: prometheus-operator-crds
      version: 24.0.1
      sourceRef:
        kind: HelmRepository
        name: prometheus-community
        namespace: monitoring
"""
DELETE_SERVICE_MONITOR = """  patches:
    - patch: '{"$patch": "delete", "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor", "metadata": {"name": "fluxwarden"}}'
"""


def fleet_repo(root: Path, *, crd_tier: bool = True, flux_kustomization: str | None = None) -> Path:
    """A fleet repo that vendors deploy/ and applies it with the example (optionally edited) Flux Kustomization."""
    shutil.copytree(DEPLOY, root / "deploy")
    cluster = root / "clusters/example"
    cluster.mkdir(parents=True)
    (cluster / "fluxwarden.yaml").write_text(flux_kustomization or (DEPLOY / "flux-kustomization.yaml").read_text())
    resources = ["fluxwarden.yaml"]
    if crd_tier:
        (cluster / "monitoring-crds.yaml").write_text(MONITORING_CRDS_TIER)
        (root / "infra/monitoring-crds").mkdir(parents=True)
        (root / "infra/monitoring-crds/crds.yaml").write_text(PROMETHEUS_OPERATOR_CRDS)
        resources.insert(0, "monitoring-crds.yaml")
    (cluster / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n" + "".join(f"  - {r}\n" for r in resources)
    )
    # The example's GitRepository `fluxwarden` is this vendored copy, so Fluxwarden renders it too.
    (root / ".fluxwarden.yaml").write_text(
        "clusters:\n  example: {path: clusters/example}\nsources:\n"
        "  - {kind: GitRepository, name: flux-system, namespace: flux-system}\n"
        "  - {kind: GitRepository, name: fluxwarden, namespace: flux-system}\n"
    )
    return root


def test_fluxwarden_check_passes_on_the_example(tmp_path: Path) -> None:
    report = check_repository(fleet_repo(tmp_path), "example", CheckOptions(timeout=60))
    assert [f for f in report.findings if f.severity != Severity.INFO] == [], [f"{f.check}: {f.message}" for f in report.findings]
    tiers = {str(t.id): t for t in report.tiers}
    assert tiers["flux-system/fluxwarden"].rendered and tiers["flux-system/fluxwarden"].objects >= len(EXPECTED_KINDS)
    assert tiers["flux-system/fluxwarden"].depends_on and "monitoring-crds" in str(tiers["flux-system/fluxwarden"].depends_on)
    assert report.order.index(tiers["flux-system/monitoring-crds"].id) < report.order.index(tiers["flux-system/fluxwarden"].id)


def test_without_the_crd_tier_the_dependency_is_an_error(tmp_path: Path) -> None:
    """Copying the example without a tier named monitoring-crds: Fluxwarden says so before Flux waits forever."""
    report = check_repository(fleet_repo(tmp_path, crd_tier=False), "example", CheckOptions(timeout=60))
    assert {(f.check, f.severity) for f in report.findings if f.severity != Severity.INFO} == {
        ("missing-dependency", Severity.ERROR),
        ("unknown-kind", Severity.WARNING),
    }


def test_without_the_operator_delete_the_service_monitor(tmp_path: Path) -> None:
    """No Prometheus Operator: drop dependsOn and delete the ServiceMonitor (servicemonitor.yaml shows the patch)."""
    example = (DEPLOY / "flux-kustomization.yaml").read_text()
    edited = example.replace("  dependsOn:\n    - name: monitoring-crds\n", "").replace("  patches:\n", DELETE_SERVICE_MONITOR, 1)
    assert edited.count("$patch") == 1 and "  dependsOn:" not in edited
    report = check_repository(fleet_repo(tmp_path, crd_tier=False, flux_kustomization=edited), "example", CheckOptions(timeout=60))
    assert [f for f in report.findings if f.severity != Severity.INFO] == []
    # And without the patch, the only complaint is the expected warning about the unknown kind.
    plain = example.replace("  dependsOn:\n    - name: monitoring-crds\n", "")
    report = check_repository(fleet_repo(tmp_path / "plain", crd_tier=False, flux_kustomization=plain), "example", CheckOptions(timeout=60))
    assert [(f.check, f.severity) for f in report.findings if f.severity != Severity.INFO] == [("unknown-kind", Severity.WARNING)]
