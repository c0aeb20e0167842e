"""The knowledge base: built-in APIs, Flux's own APIs, chart CRDs, runtime-created CRDs, derived kinds."""

from __future__ import annotations

import pytest

from bot.engine.core.errors import ConfigError
from bot.engine.render.knowledge import (
    CRD_MECHANISMS,
    ChartRule,
    KnowledgeBase,
    RuntimeCrdRule,
    default_knowledge,
    load_knowledge,
    normalise_chart_name,
)
from bot.engine.core.model import GroupKind, Severity


@pytest.fixture(scope="module")
def kb() -> KnowledgeBase:
    return default_knowledge()


def gk(group: str, kind: str) -> GroupKind:
    return GroupKind(group, kind)


# -- loading ---------------------------------------------------------------------------------


def test_default_knowledge_is_cached(kb):
    assert default_knowledge() is kb


def test_every_entry_has_a_source(kb):
    assert all(rule.source.startswith("https://") for rule in kb.runtime)
    assert all(rule.source.startswith("https://") for rule in kb.charts.values())
    assert all(rule.source.startswith("https://") for rule in kb.derived)


def test_every_chart_uses_a_known_mechanism(kb):
    assert len(kb.charts) >= 30
    assert {rule.mechanism for rule in kb.charts.values()} <= set(CRD_MECHANISMS)


# -- built-in and Flux ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api_version", "kind", "expected"),
    [
        ("apps/v1", "Deployment", True),
        ("v1", "Pod", True),
        ("v1", "Service", True),
        ("v1", "PersistentVolumeClaim", True),
        ("v1", "ServiceAccount", True),
        ("v1", "Namespace", True),
        ("networking.k8s.io/v1", "Ingress", True),
        ("networking.k8s.io/v1", "NetworkPolicy", True),
        ("storage.k8s.io/v1", "StorageClass", True),
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition", True),
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", True),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", True),
        ("batch/v1", "CronJob", True),
        ("policy/v1", "PodDisruptionBudget", True),
        ("scheduling.k8s.io/v1", "PriorityClass", True),
        ("resource.k8s.io/v1", "ResourceClaim", True),
        ("coordination.k8s.io/v1", "Lease", True),
        ("authorization.k8s.io/v1", "SubjectAccessReview", True),
        ("cdi.kubevirt.io/v1beta1", "StorageProfile", False),
        ("v1", "Widget", False),  # made-up kind in the core group
        ("apps/v1", "Rollout", False),
        ("autoscaling.k8s.io/v1", "VerticalPodAutoscaler", False),  # VPA CRD, not built-in `autoscaling`
        ("snapshot.storage.k8s.io/v1", "VolumeSnapshotClass", False),
        ("gateway.networking.k8s.io/v1", "HTTPRoute", False),
        ("monitoring.coreos.com/v1", "ServiceMonitor", False),
    ],
)
def test_is_builtin(kb, api_version, kind, expected):
    assert kb.is_builtin(GroupKind.of(api_version, kind)) is expected


@pytest.mark.parametrize(
    ("group", "kind", "expected"),
    [
        ("kustomize.toolkit.fluxcd.io", "Kustomization", True),
        ("helm.toolkit.fluxcd.io", "HelmRelease", True),
        ("source.toolkit.fluxcd.io", "OCIRepository", True),
        ("notification.toolkit.fluxcd.io", "Alert", True),
        ("image.toolkit.fluxcd.io", "ImagePolicy", True),
        ("fluxcd.controlplane.io", "ResourceSet", True),
        ("apps", "Deployment", False),
        ("cert-manager.io", "Certificate", False),
    ],
)
def test_is_preinstalled(kb, group, kind, expected):
    assert kb.is_preinstalled(gk(group, kind)) is expected


# -- runtime-created CRDs ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("group", "kind", "trigger"),
    [
        ("cdi.kubevirt.io", "StorageProfile", gk("cdi.kubevirt.io", "CDI")),
        ("cdi.kubevirt.io", "DataVolume", gk("cdi.kubevirt.io", "CDI")),
        ("cdi.kubevirt.io", "DataImportCron", gk("cdi.kubevirt.io", "CDI")),
        ("cdi.kubevirt.io", "VolumeCloneSource", gk("cdi.kubevirt.io", "CDI")),
        ("forklift.cdi.kubevirt.io", "OvirtVolumePopulator", gk("cdi.kubevirt.io", "CDI")),
        ("kubevirt.io", "VirtualMachine", gk("kubevirt.io", "KubeVirt")),
        ("pool.kubevirt.io", "VirtualMachinePool", gk("kubevirt.io", "KubeVirt")),
        ("instancetype.kubevirt.io", "VirtualMachineClusterPreference", gk("kubevirt.io", "KubeVirt")),
        ("migrations.kubevirt.io", "MigrationPolicy", gk("kubevirt.io", "KubeVirt")),
        ("s3.aws.upbound.io", "Bucket", gk("pkg.crossplane.io", "Provider")),
        ("kubernetes.crossplane.io", "Object", gk("pkg.crossplane.io", "Provider")),
        ("projectcalico.org", "GlobalNetworkPolicy", gk("operator.tigera.io", "APIServer")),
        ("networking.istio.io", "VirtualService", gk("install.istio.io", "IstioOperator")),
        ("serving.knative.dev", "Service", gk("operator.knative.dev", "KnativeServing")),
        ("eventing.knative.dev", "Broker", gk("operator.knative.dev", "KnativeEventing")),
        ("infrastructure.cluster.x-k8s.io", "DockerCluster", gk("operator.cluster.x-k8s.io", "InfrastructureProvider")),
        ("kustomize.toolkit.fluxcd.io", "Kustomization", gk("fluxcd.controlplane.io", "FluxInstance")),
    ],
)
def test_runtime_rule_names_the_trigger(kb, group, kind, trigger):
    rules = kb.runtime_rules(gk(group, kind))
    assert trigger in [rule.trigger for rule in rules]
    assert all(rule.creates(gk(group, kind)) for rule in rules)


def test_exact_kind_rules_come_first(kb):
    rules = kb.runtime_rules(gk("cdi.kubevirt.io", "StorageProfile"))
    assert rules[0].trigger == gk("cdi.kubevirt.io", "CDI")
    assert "strong" in rules[0].evidence


@pytest.mark.parametrize(
    ("group", "kind"),
    [
        ("cdi.kubevirt.io", "CDI"),  # cdis.cdi.kubevirt.io ships in cdi-operator.yaml itself
        ("kubevirt.io", "KubeVirt"),
        ("pkg.crossplane.io", "Provider"),
        ("apiextensions.crossplane.io", "CompositeResourceDefinition"),  # Crossplane's own static group
        ("crd.projectcalico.org", "IPPool"),  # static CRDs, not created by the operator
        ("apps", "Deployment"),
        ("cert-manager.io", "Certificate"),
        ("example.com", "Widget"),  # catch-all rules are left out by default
    ],
)
def test_not_runtime_created(kb, group, kind):
    assert kb.runtime_rules(gk(group, kind)) == []


def test_cdi_rule_does_not_create_its_own_trigger(kb):
    (cdi,) = kb.triggered_by(gk("cdi.kubevirt.io", "CDI"))
    assert not cdi.creates(gk("cdi.kubevirt.io", "CDI"))
    assert cdi.creates(gk("cdi.kubevirt.io", "StorageProfile"))


def test_open_ended_rules_only_on_request(kb):
    widget = gk("example.com", "Widget")
    triggers = {rule.trigger for rule in kb.runtime_rules(widget, include_open_ended=True)}
    assert gk("operators.coreos.com", "Subscription") in triggers
    assert gk("pkg.crossplane.io", "Configuration") in triggers


def test_crossplane_provider_excludes_core_groups(kb):
    (provider,) = kb.triggered_by(gk("pkg.crossplane.io", "Provider"))
    assert provider.creates(gk("ec2.aws.m.upbound.io", "Instance"))
    assert not provider.creates(gk("pkg.crossplane.io", "Function"))
    assert not provider.creates(gk("apiextensions.crossplane.io", "Composition"))
    assert "crossplane" in provider.charts


# -- charts -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({}, False),
        ({"crds": {"enabled": True}}, True),
        ({"crds": {"enabled": False}}, False),
        ({"installCRDs": True}, True),  # legacy key
        ({"installCRDs": False}, False),
        ({"crds": {"enabled": False}, "installCRDs": True}, True),  # the template ORs them
        ({"crds": {"keep": True}}, False),
        ({"crds": {"enabled": "false"}}, True),  # Go templates: a non-empty string is true
    ],
)
def test_cert_manager_crds(kb, values, expected):
    rule = kb.chart_rule("cert-manager")
    assert rule is not None and rule.crds_values_key == "crds.enabled" and rule.crds_default is False
    assert rule.crds_enabled(values) is expected


@pytest.mark.parametrize(
    ("chart", "values", "expected"),
    [
        ("kube-prometheus-stack", {}, True),
        ("kube-prometheus-stack", {"crds": {"enabled": False}}, False),
        ("kube-prometheus-stack", {"crds": {"enabled": "no"}}, True),  # Helm ignores a non-bool condition
        ("cloudnative-pg", {"crds": {"create": False}}, False),
        ("external-secrets", {}, True),
        ("cilium", {}, True),
        ("cilium", {"operator": {"skipCRDCreation": True}}, False),  # negated key
        ("mariadb-operator", {}, False),
        ("ingress-nginx", {}, False),
        ("keycloak-operator", {}, False),  # the chart does not bring them
        ("longhorn", {"anything": 1}, True),  # unconditional
    ],
)
def test_chart_crds_enabled(kb, chart, values, expected):
    assert kb.chart_rule(chart).crds_enabled(values) is expected


@pytest.mark.parametrize(
    ("chart", "group", "kind", "expected"),
    [
        ("cert-manager", "cert-manager.io", "ClusterIssuer", True),
        ("cert-manager", "acme.cert-manager.io", "Order", True),
        ("kube-prometheus-stack", "monitoring.coreos.com", "PrometheusRule", True),
        ("cilium", "cilium.io", "CiliumL2AnnouncementPolicy", True),
        ("external-secrets", "generators.external-secrets.io", "Password", True),
        ("argo-cd", "argoproj.io", "Application", True),
        ("argo-cd", "argoproj.io", "Rollout", False),  # shared group: only the chart's kinds
        ("eck-operator", "elasticsearch.k8s.elastic.co", "Elasticsearch", True),
        ("ingress-nginx", "networking.k8s.io", "Ingress", False),
    ],
)
def test_chart_provides(kb, chart, group, kind, expected):
    assert kb.chart_rule(chart).provides(gk(group, kind)) is expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("cert-manager", "cert-manager"),
        ("jetstack/cert-manager", "cert-manager"),
        ("oci://quay.io/jetstack/charts/cert-manager", "cert-manager"),
        ("oci://ghcr.io/cloudnative-pg/charts/cloudnative-pg:0.23.0", "cloudnative-pg"),
        ("oci://ghcr.io/x/cilium@sha256:abc", "cilium"),
    ],
)
def test_normalise_chart_name(name, expected):
    assert normalise_chart_name(name) == expected


def test_chart_lookup(kb):
    assert kb.chart_rule("oci://ghcr.io/cloudnative-pg/charts/cloudnative-pg").chart == "cloudnative-pg"
    assert kb.chart_rule("cnpg").chart == "cloudnative-pg"  # alias
    assert kb.chart_rule("cilium").at_runtime is True
    assert kb.chart_rule("no-such-chart") is None
    assert kb.chart_rule("") is None


def test_crds_dir_charts_are_marked(kb):
    assert kb.chart_rule("trivy-operator").crds_dir is True
    assert kb.chart_rule("kube-prometheus-stack").crds_dir is True
    assert kb.chart_rule("cert-manager").crds_dir is False


# -- derived kinds ------------------------------------------------------------------------------


def xrd(**spec):
    return {"apiVersion": "apiextensions.crossplane.io/v1", "kind": "CompositeResourceDefinition", "spec": spec}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            xrd(group="platform.example.org", names={"kind": "XPostgres"}, claimNames={"kind": "Postgres"}),
            {gk("platform.example.org", "XPostgres"), gk("platform.example.org", "Postgres")},
        ),
        (xrd(group="platform.example.org", names={"kind": "XNet"}), {gk("platform.example.org", "XNet")}),
        (xrd(names={"kind": "XNoGroup"}), set()),
        (xrd(group="g.example.org", names={"kind": 7}), set()),
        (
            {
                "apiVersion": "apiextensions.crossplane.io/v2",
                "kind": "CompositeResourceDefinition",
                "spec": {"group": "v2.example.org", "scope": "Namespaced", "names": {"kind": "App"}},
            },
            {gk("v2.example.org", "App")},
        ),
        (
            {
                "apiVersion": "templates.gatekeeper.sh/v1",
                "kind": "ConstraintTemplate",
                "spec": {"crd": {"spec": {"names": {"kind": "K8sRequiredLabels"}}}},
            },
            {gk("constraints.gatekeeper.sh", "K8sRequiredLabels")},
        ),
        ({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"group": "x", "names": {"kind": "Y"}}}, set()),
        ({"kind": "CompositeResourceDefinition"}, set()),
        ({}, set()),
    ],
)
def test_derived_kinds(kb, body, expected):
    assert kb.derived_kinds(body) == frozenset(expected)


# -- user rules ---------------------------------------------------------------------------------

USER_RULE = {
    "operator": "widget-operator",
    "trigger": {"group": "widgets.example.com", "kind": "WidgetSystem"},
    "creates": [
        {"group": "widgets.example.com", "kinds": ["Widget", "Gadget"]},
        {"groups": ["*.widgets.example.com"]},
    ],
    "note": "our in-house operator",
}


def test_user_rules_extend_a_copy(kb):
    extended = kb.with_user_rules([USER_RULE])
    widget = gk("widgets.example.com", "Widget")
    assert [rule.operator for rule in extended.runtime_rules(widget)] == ["widget-operator"]
    assert [rule.operator for rule in extended.runtime_rules(gk("eu.widgets.example.com", "Sprocket"))] == [
        "widget-operator"
    ]
    assert extended.runtime_rules(gk("widgets.example.com", "WidgetSystem")) == []
    assert kb.runtime_rules(widget) == []  # the default knowledge is untouched
    (rule,) = extended.triggered_by(gk("widgets.example.com", "WidgetSystem"))
    assert isinstance(rule, RuntimeCrdRule) and rule.source == ".fluxwarden.yaml"
    assert extended.chart_rule("cert-manager") == kb.chart_rule("cert-manager")


def test_user_rule_with_operator_charts(kb):
    extended = kb.with_user_rules([{**USER_RULE, "charts": ["widget-operator"]}])
    (rule,) = extended.triggered_by(gk("widgets.example.com", "WidgetSystem"))
    assert rule.charts == ("widget-operator",)


def test_user_chart_rules(kb):
    extended = kb.with_user_rules(
        [
            {
                "charts": {
                    "widget-operator": {
                        "provides": [{"group": "widgets.example.com"}],
                        "crds": {"mechanism": "templates", "values_key": "crds.install", "default": True},
                    },
                    "cert-manager": {
                        "provides": [{"group": "cert-manager.io"}],
                        "crds": {"mechanism": "crds_dir"},
                    },
                }
            }
        ]
    )
    widget = extended.chart_rule("widget-operator")
    assert isinstance(widget, ChartRule)
    assert widget.provides(gk("widgets.example.com", "Widget"))
    assert widget.crds_enabled({}) is True
    assert widget.crds_enabled({"crds": {"install": False}}) is False
    assert extended.chart_rule("cert-manager").crds_enabled({}) is True  # user rule replaced the built-in
    assert kb.chart_rule("cert-manager").crds_enabled({}) is False
    assert len(extended.runtime) == len(kb.runtime)


def test_user_rule_and_chart_in_one_entry(kb):
    entry = {
        **USER_RULE,
        "charts": {
            "widget-operator": {
                "provides": [{"group": "widgets.example.com", "kinds": ["WidgetSystem"]}],
                "crds": {"mechanism": "crds_dir"},
            }
        },
    }
    extended = kb.with_user_rules([entry])
    assert extended.triggered_by(gk("widgets.example.com", "WidgetSystem"))
    assert extended.chart_rule("widget-operator").provides(gk("widgets.example.com", "WidgetSystem"))


def _without(key):
    return {k: v for k, v in USER_RULE.items() if k != key}


@pytest.mark.parametrize(
    ("entry", "fragment"),
    [
        ("just a string", "runtime_crds[1]: must be a mapping"),
        (_without("operator"), "`operator` is required"),
        ({**USER_RULE, "operator": "  "}, "`operator` must be a non-empty string"),
        (_without("trigger"), "trigger: must be a mapping"),
        ({**USER_RULE, "trigger": {"group": "widgets.example.com"}}, "`kind` must be a non-empty string"),
        ({**USER_RULE, "trigger": {"group": "widgets.example.com/v1", "kind": "W"}}, "without a version"),
        (_without("creates"), "`creates` is required"),
        ({**USER_RULE, "creates": []}, "must name at least one kind or group pattern"),
        ({**USER_RULE, "creates": "Widget"}, "creates: must be a list"),
        ({**USER_RULE, "creates": [{"group": "x.example.com", "kinds": []}]}, "must not be empty"),
        ({**USER_RULE, "creates": [{"groups": ["a.*"], "group": "b"}]}, "not both"),
        ({**USER_RULE, "creats": []}, "unknown key(s) creats"),
        ({**USER_RULE, "evidence": "certain"}, "`evidence` must be one of"),
        ({"charts": {"w": {"provides": [], "crds": {"mechanism": "templates"}}}}, "charts.w"),
        ({"charts": {"w": {"provides": [{"group": "w.io"}], "crds": {"mechanism": "magic"}}}}, "crds.mechanism"),
        (
            {"charts": {"w": {"provides": [{"group": "w.io"}], "crds": {"mechanism": "templates", "default": "yes"}}}},
            "crds.default",
        ),
    ],
)
def test_invalid_user_rules(kb, entry, fragment):
    with pytest.raises(ConfigError) as raised:
        kb.with_user_rules([USER_RULE, entry])
    message = str(raised.value)
    assert "runtime_crds[1]" in message
    assert fragment in message


def test_invalid_user_rule_names_the_operator(kb):
    with pytest.raises(ConfigError, match=r"runtime_crds\[0\] \(operator 'widget-operator'\)"):
        kb.with_user_rules([{**USER_RULE, "creates": []}])


def test_user_rules_must_be_a_list(kb):
    with pytest.raises(ConfigError, match="must be a list"):
        kb.with_user_rules({"operator": "x"})  # type: ignore[arg-type]
    assert kb.with_user_rules([]).runtime == kb.runtime


def test_invalid_data_file_is_reported():
    with pytest.raises(ConfigError, match=r"runtime_crds\[0\].*`source` is required"):
        load_knowledge(
            "runtime_crds:\n- operator: x\n  trigger: {group: a.io, kind: A}\n  creates: [{group: a.io, kinds: [B]}]\n"
        )
    with pytest.raises(ConfigError, match="unknown section"):
        load_knowledge("bogus: 1\n")


def test_chart_aliases_in_the_knowledge_base_and_declared(kb) -> None:
    """A fork published under another name is the chart it forks: in the knowledge base, and as the user declares it."""
    assert kb.chart_rule("oci://ghcr.io/perfectra1n/charts/volsync-perfectra1n:0.14.0").chart == "volsync"
    assert kb.chart_rule("my-cert-manager") is None
    declared = kb.with_aliases([("my-cert-manager", "cert-manager")])
    assert declared.chart_rule("oci://ghcr.io/acme/mirror/my-cert-manager:v1.16").chart == "cert-manager"
    assert kb.chart_rule("my-cert-manager") is None  # a copy: the shipped knowledge is untouched
    with pytest.raises(ConfigError, match=r"charts\.aliases\.fork: 'no-such-chart' is not a chart the knowledge base knows"):
        kb.with_aliases([("fork", "no-such-chart")])


def test_declared_chart_alias_provides_its_crds(tmp_path) -> None:
    """mirceanton-shaped: volsync from a mirror under another name; ReplicationSources in a tier that depends on it."""
    from bot.engine.render.config import load_repo_config
    from bot.pipeline.check import check_repository
    from tests.fluxrepo import dump, flux_repo, kustomization, ks, obj, write_tree

    oci = obj("source.toolkit.fluxcd.io/v1", "OCIRepository", "volsync", "storage-system", spec={"interval": "1h", "url": "oci://ghcr.io/acme/charts-mirror/volsync-acme", "ref": {"tag": "0.14.0"}})
    release = obj("helm.toolkit.fluxcd.io/v2", "HelmRelease", "volsync", "storage-system", spec={"interval": "1h", "chartRef": {"kind": "OCIRepository", "name": "volsync"}})
    source = obj("volsync.backube/v1alpha1", "ReplicationSource", "immich", "media", spec={"sourcePVC": "immich"})
    files = flux_repo(
        {"volsync": ks("volsync", "./storage", wait=True), "media": ks("media", "./media", depends_on=["volsync"])},
        {
            "storage/kustomization.yaml": kustomization("volsync.yaml"),
            "storage/volsync.yaml": dump(obj("v1", "Namespace", "storage-system"), oci, release),
            "media/kustomization.yaml": kustomization("immich.yaml"),
            "media/immich.yaml": dump(obj("v1", "Namespace", "media"), source),
        },
    )
    root = write_tree(tmp_path / "repo", files)
    from bot.pipeline.releases import ChartOptions
    from bot.pipeline.session import CheckOptions

    options = CheckOptions(charts=ChartOptions(render=False))
    before = [f for f in check_repository(root, "dev", options).findings if f.check == "unknown-kind"]
    # Unknown chart: only assumed, from the graph.
    assert [f.severity for f in before] == [Severity.INFO] and "assumed served" in before[0].message and "chart volsync-acme not known" in before[0].message
    write_tree(root, {".fluxwarden.yaml": "charts:\n  aliases: {volsync-acme: volsync}\n"})
    assert load_repo_config((root / ".fluxwarden.yaml").read_text()).chart_aliases == (("volsync-acme", "volsync"),)
    after = check_repository(root, "dev", options).findings
    assert [f for f in after if f.check == "unknown-kind"] == []
    assert [f for f in after if f.severity is not Severity.INFO] == []


# == Well-known CRD bundles fetched by URL ========================================================

from bot.engine.render.knowledge import bundle_crds, bundle_provides, default_knowledge as _default  # noqa: E402


def test_bundle_credit_of_known_urls() -> None:
    kb = _default()
    cert_manager = bundle_provides("https://github.com/cert-manager/cert-manager/releases/download/v1.8.2/cert-manager.crds.yaml", kb)
    assert cert_manager is not None and cert_manager(GroupKind("cert-manager.io", "ClusterIssuer")) and cert_manager(GroupKind("acme.cert-manager.io", "Order"))
    assert not cert_manager(GroupKind("trust.cert-manager.io", "Bundle"))
    snapshots = bundle_crds("github.com/kubernetes-csi/external-snapshotter//client/config/crd?ref=v6.0.1", kb)
    assert snapshots == ({("snapshot.storage.k8s.io", k) for k in ("VolumeSnapshot", "VolumeSnapshotClass", "VolumeSnapshotContent")}, set())
    kyverno = bundle_provides("github.com/kyverno/kyverno//config/crds?ref=kyverno-chart-v2.5.2", kb)
    assert kyverno is not None and kyverno(GroupKind("kyverno.io", "ClusterPolicy"))
    gateway = bundle_provides("https://github.com/kubernetes-sigs/gateway-api/releases/download/v1.2.0/standard-install.yaml", kb)
    assert gateway is not None and gateway(GroupKind("gateway.networking.k8s.io", "HTTPRoute"))


def test_a_url_not_known_credits_nothing() -> None:
    kb = _default()
    assert bundle_provides("https://raw.githubusercontent.com/movetokube/postgres-operator/1.1.1/deploy/crds/db.movetokube.com_postgres_crd.yaml", kb) is None
    assert bundle_provides("https://github.com/cert-manager/cert-manager/releases/download/v1.8.2/cert-manager.yaml", kb) is None  # the whole install, not the CRD asset
