"""ResourceSets in a real repository (git, kustomize): what they create is rendered and checked like any tier's objects."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.engine.render.chartsource import FetchPolicy
from bot.engine.core.model import Severity, TierId
from bot.pipeline.check import CheckOptions, check_repository
from bot.pipeline.releases import ChartOptions
from tests.fluxrepo import dump, kustomization, ks, obj, write_tree
from tests.gitrepo import commit_all, init_repo

FLUX = "flux-system"

# Shaped like controlplaneio-fluxcd/d2-fleet: clusters/<name> applies ./tenants, whose ResourceSets stamp
# out one Kustomization per tenant (inline inputs, and a Static provider picked by label).
TENANTS_RSET = """
apiVersion: fluxcd.controlplane.io/v1
kind: ResourceSet
metadata:
  name: tenants
  namespace: flux-system
spec:
  dependsOn:
    - apiVersion: kustomize.toolkit.fluxcd.io/v1
      kind: Kustomization
      name: infra
      namespace: flux-system
      ready: true
  inputs:
    - tenant: frontend
      needs: backend
  inputsFrom:
    - kind: ResourceSetInputProvider
      selector:
        matchLabels:
          role: tenant
  resources:
    - apiVersion: v1
      kind: Namespace
      metadata:
        name: << inputs.tenant >>
    - apiVersion: kustomize.toolkit.fluxcd.io/v1
      kind: Kustomization
      metadata:
        name: << inputs.tenant >>
        namespace: flux-system
      spec:
        interval: 10m
        path: ./apps/<< inputs.tenant >>
        prune: true
        sourceRef:
          kind: GitRepository
          name: flux-system
        dependsOn:
          - name: << inputs.needs >>
  resourcesTemplate: |
    <<- if eq inputs.tenant "backend" >>
    apiVersion: helm.toolkit.fluxcd.io/v2
    kind: HelmRelease
    metadata:
      name: << inputs.tenant >>-db
      namespace: << inputs.tenant >>
    spec:
      interval: 1h
      chart:
        spec:
          chart: postgres
          sourceRef: {kind: HelmRepository, name: charts, namespace: flux-system}
    <<- end >>
"""

BACKEND_PROVIDER = """
apiVersion: fluxcd.controlplane.io/v1
kind: ResourceSetInputProvider
metadata:
  name: backend
  namespace: flux-system
  labels:
    role: tenant
spec:
  type: Static
  defaultValues:
    tenant: backend
    needs: frontend
---
apiVersion: fluxcd.controlplane.io/v1
kind: ResourceSetInputProvider
metadata:
  name: previews
  namespace: flux-system
  labels:
    role: tenant
spec:
  type: GitHubPullRequest
  url: https://github.com/example/app
"""


def repo_files() -> dict[str, str]:
    return {
        "clusters/dev/kustomization.yaml": kustomization("infra.yaml", "tenants.yaml"),
        "clusters/dev/infra.yaml": dump(ks("infra", "./infra")),
        "clusters/dev/tenants.yaml": dump(ks("tenants", "./tenants", depends_on=["infra"])),
        "infra/kustomization.yaml": kustomization("repo.yaml"),
        "infra/repo.yaml": dump(obj("source.toolkit.fluxcd.io/v1", "HelmRepository", "charts", FLUX, spec={"interval": "1h", "url": "https://charts.example.com"})),
        "tenants/kustomization.yaml": kustomization("rset.yaml", "providers.yaml"),
        "tenants/rset.yaml": TENANTS_RSET,
        "tenants/providers.yaml": BACKEND_PROVIDER,
        "apps/frontend/kustomization.yaml": kustomization("cm.yaml"),
        "apps/frontend/cm.yaml": dump(obj("v1", "ConfigMap", "web", "frontend", data={"a": "b"})),
        "apps/backend/kustomization.yaml": kustomization("cm.yaml"),
        "apps/backend/cm.yaml": dump(obj("v1", "ConfigMap", "api", "backend", data={"a": "b"})),
    }


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("rset")
    repo = write_tree(root / "repo", repo_files())
    commit_all(init_repo(repo), "tenants")
    return check_repository(repo, "dev", CheckOptions(charts=ChartOptions(policy=FetchPolicy(offline=True))))


def test_the_kustomizations_a_resourceset_creates_are_tiers(report) -> None:  # type: ignore[no-untyped-def]
    tiers = {str(t.id): t for t in report.tiers}
    assert {"flux-system/frontend", "flux-system/backend"} <= set(tiers)
    # each renders from this repository: its objects are checked
    assert tiers["flux-system/frontend"].objects == 1 and tiers["flux-system/backend"].objects == 1


def test_their_dependency_cycle_is_an_error(report) -> None:  # type: ignore[no-untyped-def]
    cycles = [f for f in report.findings if f.check == "dependency-cycle"]
    assert cycles and cycles[0].severity is Severity.ERROR
    assert "frontend" in cycles[0].message and "backend" in cycles[0].message
    assert cycles[0].location is not None and cycles[0].location.file == "tenants/rset.yaml"


def test_the_live_provider_is_an_info_line(report) -> None:  # type: ignore[no-untyped-def]
    live = [f for f in report.findings if f.check == "resourceset-not-rendered"]
    assert [f.severity for f in live] == [Severity.INFO]
    assert "previews (type GitHubPullRequest) needs a live API" in live[0].message
    assert live[0].kustomization == TierId(FLUX, "tenants")


def test_the_created_helmrelease_is_checked(report) -> None:  # type: ignore[no-untyped-def]
    tenants = next(t for t in report.tiers if str(t.id) == "flux-system/tenants")
    assert tenants.objects == 8  # the ResourceSet, 2 providers, and what it creates: 2 Namespaces, 2 Kustomizations, 1 HelmRelease
    # the HelmRelease it creates goes to the chart stage like any other (offline here: not fetched, said so)
    assert report.releases_not_rendered == 1
    charts = [f for f in report.findings if f.check == "chart-not-rendered"]
    assert len(charts) == 1 and "backend/backend-db" in charts[0].message


def test_the_resourceset_depends_on_orders_its_kustomizations(report) -> None:  # type: ignore[no-untyped-def]
    frontend = next(t for t in report.tiers if str(t.id) == "flux-system/frontend")
    assert TierId(FLUX, "infra") in frontend.depends_on


# A FluxInstance the cluster's own ResourceSet creates (a fleet templating its instance per cluster): its sync,
# decryption patch and all, still makes the entry tier.
INSTANCE_RSET = """
apiVersion: fluxcd.controlplane.io/v1
kind: ResourceSet
metadata:
  name: flux
  namespace: flux-system
spec:
  inputs:
    - cluster: dev
  resources:
    - apiVersion: fluxcd.controlplane.io/v1
      kind: FluxInstance
      metadata:
        name: flux
        namespace: flux-system
      spec:
        distribution: {version: "2.x", registry: ghcr.io/fluxcd}
        sync:
          kind: GitRepository
          url: https://github.com/example/fleet
          ref: refs/heads/main
          path: clusters/<< inputs.cluster >>
        kustomize:
          patches:
            - target: {kind: Kustomization}
              patch: |
                - op: add
                  path: /spec/decryption
                  value: {provider: sops, secretRef: {name: sops-age}}
"""

SOPS_SECRET = """
apiVersion: v1
kind: Secret
metadata:
  name: token
  namespace: flux-system
stringData:
  token: ENC[AES256_GCM,data:abc,iv:def,tag:ghi,type:str]
sops:
  age:
    - recipient: age1xyz
  mac: ENC[AES256_GCM,data:m,iv:i,tag:t,type:str]
  version: 3.9.0
"""


@pytest.mark.parametrize("through", ["resourceset", "none"])
def test_a_fluxinstance_a_resourceset_creates_makes_the_entry_tier(tmp_path: Path, through: str) -> None:
    files = {
        "clusters/dev/kustomization.yaml": kustomization("secret.yaml", *(["instance.yaml"] if through == "resourceset" else [])),
        "clusters/dev/secret.yaml": SOPS_SECRET,
        "clusters/dev/instance.yaml": INSTANCE_RSET,
    }
    repo = write_tree(tmp_path / "repo", files)
    commit_all(init_repo(repo), "fleet")
    report = check_repository(repo, "dev", CheckOptions(charts=ChartOptions(render=False)))
    sops = [f for f in report.findings if f.check == "render-failed" and "SOPS" in f.message]
    entry = report.tiers[0]
    if through == "resourceset":
        assert sops == []  # the instance's decryption patch reached the entry tier
        assert entry.id == TierId(FLUX, FLUX) and entry.rendered
    else:
        assert len(sops) == 1  # without the instance, nothing decrypts it: the control proves the case above


# The flux-instance chart with its instance settings in a ConfigMap (`valuesFrom`), as a cluster that keeps
# per-cluster values apart from the release does.
INSTANCE_RELEASE = """
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: flux
  namespace: flux-system
spec:
  interval: 1h
  chart:
    spec:
      chart: flux-instance
      sourceRef: {kind: HelmRepository, name: controlplane, namespace: flux-system}
  valuesFrom:
    - kind: ConfigMap
      name: flux-instance-values
  values:
    instance:
      distribution: {version: "2.x"}
"""

INSTANCE_VALUES = """
apiVersion: v1
kind: ConfigMap
metadata:
  name: flux-instance-values
  namespace: flux-system
data:
  values.yaml: |
    instance:
      sync:
        kind: GitRepository
        url: https://github.com/example/fleet
        ref: refs/heads/main
        path: clusters/dev
      kustomize:
        patches:
          - target: {kind: Kustomization}
            patch: |
              - op: add
                path: /spec/decryption
                value: {provider: sops, secretRef: {name: sops-age}}
"""


@pytest.mark.parametrize("with_values", [True, False])
def test_a_flux_instance_release_with_values_from_a_configmap_makes_the_entry_tier(tmp_path: Path, with_values: bool) -> None:
    files = {
        "clusters/dev/kustomization.yaml": kustomization("secret.yaml", "release.yaml", *(["values.yaml"] if with_values else [])),
        "clusters/dev/secret.yaml": SOPS_SECRET,
        "clusters/dev/release.yaml": INSTANCE_RELEASE,
        "clusters/dev/values.yaml": INSTANCE_VALUES,
    }
    repo = write_tree(tmp_path / "repo", files)
    commit_all(init_repo(repo), "fleet")
    report = check_repository(repo, "dev", CheckOptions(charts=ChartOptions(render=False)))
    failed = [f.message for f in report.findings if f.check == "render-failed"]
    if with_values:
        assert failed == []  # decrypted: the patch in the ConfigMap reached the entry tier
        assert report.tiers[0].id == TierId(FLUX, FLUX)
    else:
        assert len(failed) == 1 and "SOPS" in failed[0]  # the values not in git: the sync is not known

