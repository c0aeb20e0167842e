"""The cold-start simulation (bot/engine/tiergraph/coldstart.py): one table test per rule, and properties on generated graphs.

Built from hand-made tier specs and facts (no kustomize): the simulation reads facts only.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Iterable, Mapping

import pytest

import bot.pipeline.check
from bot.engine.tiergraph.bootstrap import Bootstrap, BootstrapEntry
from bot.engine.tiergraph.checks import CheckContext
from bot.engine.tiergraph.coldstart import ColdStart, compare, simulate
from bot.pipeline.check import check_repository
from bot.engine.render.facts import tier_facts
from bot.engine.tiergraph.graph import TierGraph
from bot.engine.render.knowledge import default_knowledge
from bot.engine.core.model import HealthCheck, Manifest, ObjectRef, Severity, SourceRef, TierId, TierSpec
from bot.engine.tiergraph.providers import ProviderIndex
from tests.fluxrepo import dump, flux_repo, ks, kustomization, write_tree

KNOWLEDGE = default_knowledge()
NS = "flux-system"
SOURCE = SourceRef("GitRepository", "flux-system", NS)


def o(api_version: str, kind: str, name: str, namespace: str = "", **body: Any) -> Manifest:
    return Manifest(ObjectRef(api_version, kind, namespace, name), {"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": namespace}, **body})


def crd(group: str, kind: str) -> Manifest:
    plural = kind.lower() + "s"
    return o("apiextensions.k8s.io/v1", "CustomResourceDefinition", f"{plural}.{group}", spec={"group": group, "names": {"kind": kind, "plural": plural}})


def child(name: str, **spec: Any) -> Manifest:
    return o("kustomize.toolkit.fluxcd.io/v1", "Kustomization", name, NS, spec=spec)


def release(name: str, namespace: str, chart: str, *, values: Mapping | None = None, depends: Iterable[str] = ()) -> Manifest:
    spec: dict[str, Any] = {"chart": {"spec": {"chart": chart, "sourceRef": {"kind": "HelmRepository", "name": "charts", "namespace": NS}}}}
    if values is not None:
        spec["values"] = dict(values)
    if depends:
        spec["dependsOn"] = [{"name": d} for d in depends]
    return o("helm.toolkit.fluxcd.io/v2", "HelmRelease", name, namespace, spec=spec)


WIDGET_CRD = crd("example.com", "Widget")
WIDGET = o("example.com/v1", "Widget", "w", "default")
FOO_CLASS = o("example.com/v1", "FooClass", "fc")
CDI_CRD = crd("cdi.kubevirt.io", "CDI")
CDI_CR = o("cdi.kubevirt.io/v1beta1", "CDI", "cdi")
PROFILE = o("cdi.kubevirt.io/v1beta1", "StorageProfile", "longhorn-vm")
ISSUER = o("cert-manager.io/v1", "ClusterIssuer", "letsencrypt")
CHARTS = o("source.toolkit.fluxcd.io/v1", "HelmRepository", "charts", NS)
CERT_MANAGER = release("cert-manager", "cert-manager", "cert-manager", values={"crds": {"enabled": True}})
CDI_EXPR = HealthCheck("cdi.kubevirt.io/v1beta1", "CDI", "*", "*")


def spec(name: str, *, deps: Iterable[str] = (), wait: bool = False, parent: str | None = "flux-system", health: Iterable[HealthCheck] = (),
         retry: int | None = None, interval: int = 600, suspend: bool = False, source: SourceRef = SOURCE) -> TierSpec:
    return TierSpec(
        id=TierId(NS, name), path=name, source=source, depends_on=tuple(TierId(NS, d) for d in deps), wait=wait,
        health_checks=tuple(health), defined_in=TierId(NS, parent) if parent and parent != name else None,
        interval=interval, retry_interval=retry, suspend=suspend,
    )


def cluster(tiers: Mapping[str, tuple[TierSpec, Iterable[Manifest]]], bootstrap: Bootstrap = Bootstrap()) -> ColdStart:
    """Simulate: `tiers` maps a name to (spec, objects); `flux-system` (the entry) applies every other tier."""
    tiers = dict(tiers)
    if "flux-system" not in tiers:
        tiers = {"flux-system": (spec("flux-system", parent=None), [child(n) for n in tiers]), **tiers}
    graph = TierGraph(s for s, _ in tiers.values())
    facts = {TierId(NS, n): tier_facts(list(objs), KNOWLEDGE) for n, (_, objs) in tiers.items()}
    return simulate(graph, facts, ProviderIndex(None, KNOWLEDGE, facts), bootstrap)  # type: ignore[arg-type]


def t(name: str) -> TierId:
    return TierId(NS, name)


# -- one rule each ------------------------------------------------------------------------------------


def test_staged_apply_keeps_stage_one_when_a_class_kind_fails() -> None:
    """A kind with no CRD fails its stage (nothing of it applied); the CRDs of stage 1 stay applied."""
    result = cluster({
        "a": (spec("a"), [WIDGET_CRD, FOO_CLASS]),
        "b": (spec("b", deps=[]), [WIDGET]),
        "c": (spec("c", deps=["a"]), [crd("example.com", "FooClass")]),
    })
    a, b = result.tiers[t("a")], result.tiers[t("b")]
    assert a.ready_round is None and a.reason == "apply"
    assert a.blocked_by == "a waits for FooClass.example.com ← CRD fooclasss.example.com ← CustomResourceDefinition/fooclasss.example.com is in c ← c dependsOn a, which waits for c"
    # b's first apply races a's stage 1 (same round), its retry finds Widget's CRD served.
    assert (b.ready_round, b.failed_attempts) == (3, 1)
    assert not result.converges


def test_a_kind_nobody_provides_is_not_judged() -> None:
    """unknown-kind reports it; the simulation does not call the tier stuck for it."""
    assert cluster({"a": (spec("a"), [FOO_CLASS, WIDGET])}).converges


def test_crd_in_same_tier_is_stage_one() -> None:
    result = cluster({"a": (spec("a"), [WIDGET_CRD, WIDGET])})
    assert result.tiers[t("a")].ready_round == 2 and result.tiers[t("a")].failed_attempts == 0
    assert result.converges and result.rounds == 2


def test_retry_after_retry_interval() -> None:
    """A CR whose CRD another tier applies, without dependsOn: fails once, Ready after retryInterval."""
    result = cluster({"a": (spec("a"), [WIDGET_CRD]), "b": (spec("b", retry=120), [WIDGET])})
    b = result.tiers[t("b")]
    assert (b.ready_round, b.failed_attempts, b.max_delay_seconds) == (3, 1, 120)
    assert b.failed_on[0].kind == "Widget"
    no_retry = cluster({"a": (spec("a"), [WIDGET_CRD]), "b": (spec("b", interval=900), [WIDGET])})
    assert no_retry.tiers[t("b")].max_delay_seconds == 900  # retryInterval defaults to interval


def test_depends_on_waits_for_ready_and_delay_propagates() -> None:
    result = cluster({
        "a": (spec("a"), [WIDGET_CRD]),
        "b": (spec("b", deps=["a"]), [WIDGET]),
        "c": (spec("c", retry=60), [WIDGET]),
        "d": (spec("d", deps=["c"]), [o("v1", "ConfigMap", "x", "default")]),
    })
    assert result.tiers[t("b")].ready_round == 3 and result.tiers[t("b")].failed_attempts == 0
    assert result.tiers[t("d")].max_delay_seconds == 60  # behind c's failed apply


def test_revision_gate_only_for_the_same_source() -> None:
    """A dependency on another source (not rendered here) is Ready on its own revision: no gate, no block."""
    other = SourceRef("GitRepository", "other", NS)
    result = cluster({"ext": (spec("ext", source=other), []), "b": (spec("b", deps=["ext"]), [o("v1", "ConfigMap", "x", "default")])})
    assert result.converges and result.tiers[t("b")].ready_round == 3


def test_health_check_on_a_dependents_object_deadlocks() -> None:
    result = cluster({
        "certs": (spec("certs", health=[HealthCheck("cert-manager.io/v1", "ClusterIssuer", "letsencrypt", "")]), [crd("cert-manager.io", "ClusterIssuer")]),
        "issuers": (spec("issuers", deps=["certs"]), [ISSUER]),
    })
    certs = result.tiers[t("certs")]
    assert certs.ready_round is None and certs.reason == "deadlock"
    assert certs.blocked_by == "certs waits for ClusterIssuer/letsencrypt (healthChecks) ← applied by issuers, which dependsOn certs (each waits for the other)"
    assert result.tiers[t("issuers")].reason == "dependency"


def test_health_check_on_an_unordered_tiers_object_waits_for_it() -> None:
    result = cluster({
        "certs": (spec("certs", health=[HealthCheck("cert-manager.io/v1", "ClusterIssuer", "letsencrypt", "")]), [crd("cert-manager.io", "ClusterIssuer")]),
        "issuers": (spec("issuers"), [ISSUER]),
    })
    assert result.converges and result.tiers[t("certs")].ready_round == 3


def test_child_depending_on_its_waiting_parent_deadlocks() -> None:
    result = cluster({
        "parent": (spec("parent", wait=True), [child("kid")]),
        "kid": (spec("kid", parent="parent", deps=["parent"]), [o("v1", "ConfigMap", "x", "default")]),
    })
    parent = result.tiers[t("parent")]
    assert parent.reason == "deadlock" and "kid dependsOn parent, its own parent" in parent.blocked_by
    no_wait = cluster({
        "parent": (spec("parent"), [child("kid")]),
        "kid": (spec("kid", parent="parent", deps=["parent"]), [o("v1", "ConfigMap", "x", "default")]),
    })
    assert no_wait.converges


def test_helmrelease_brings_its_charts_crds() -> None:
    waited = cluster({"cm": (spec("cm", wait=True), [CHARTS, CERT_MANAGER]), "issuers": (spec("issuers", deps=["cm"]), [ISSUER])})
    assert waited.tiers[t("issuers")].failed_attempts == 0 and waited.converges
    # Without wait cm is Ready before helm-controller has installed the chart: issuers may fail once.
    unwaited = cluster({"cm": (spec("cm"), [CHARTS, CERT_MANAGER]), "issuers": (spec("issuers", deps=["cm"]), [ISSUER])})
    assert unwaited.tiers[t("issuers")].failed_attempts == 1 and unwaited.converges
    same = cluster({"cm": (spec("cm", wait=True), [CHARTS, CERT_MANAGER, ISSUER])})
    assert same.tiers[t("cm")].ready_round is None
    assert same.tiers[t("cm")].blocked_by == (
        "cm waits for ClusterIssuer.cert-manager.io ← installed by HelmRelease cert-manager/cert-manager ← HelmRelease/cert-manager is in cm, whose apply fails"
    )


def test_helmrelease_depends_on() -> None:
    """A HelmRelease installs only after its own dependsOn HelmReleases; a wait on it waits for that too."""
    app = release("app", "apps", "podinfo", depends=["db"])
    stuck = release("db", "apps", "postgres")
    result = cluster({
        "apps": (spec("apps", wait=True), [CHARTS, app]),
        "db": (spec("db", deps=["apps"], wait=True), [stuck]),
    })
    apps = result.tiers[t("apps")]
    assert apps.ready_round is None and apps.reason == "health"
    assert apps.blocked_by.startswith("apps waits for HelmRelease/app (wait: true)")
    fine = cluster({"apps": (spec("apps", wait=True), [CHARTS, app, stuck])})
    assert fine.converges


def test_runtime_crds_appear_once_the_operator_reconciles_its_cr() -> None:
    same = cluster({"cfg": (spec("cfg", wait=True), [CDI_CRD, CDI_CR, PROFILE])})
    assert same.tiers[t("cfg")].blocked_by == (
        "cfg waits for StorageProfile.cdi.kubevirt.io ← created by cdi-operator after it reconciles CDI/cdi ← CDI/cdi is in cfg, whose apply fails"
    )
    # wait: true passes the CDI CR at once (no Ready condition kstatus reads): the dependent may fail once.
    gap = cluster({"cfg": (spec("cfg", wait=True), [CDI_CRD, CDI_CR]), "profiles": (spec("profiles", deps=["cfg"], retry=60), [PROFILE])})
    assert (gap.tiers[t("profiles")].failed_attempts, gap.tiers[t("profiles")].max_delay_seconds) == (1, 60)
    read = cluster({"cfg": (spec("cfg", wait=True, health=[CDI_EXPR]), [CDI_CRD, CDI_CR]), "profiles": (spec("profiles", deps=["cfg"]), [PROFILE])})
    assert read.tiers[t("profiles")].failed_attempts == 0
    # healthCheckExprs alone wait for nothing.
    exprs_only = cluster({"cfg": (spec("cfg", health=[CDI_EXPR]), [CDI_CRD, CDI_CR]), "profiles": (spec("profiles", deps=["cfg"]), [PROFILE])})
    assert exprs_only.tiers[t("profiles")].failed_attempts == 1


def test_bootstrap_provides_crds_releases_and_order() -> None:
    tiers = {"issuers": (spec("issuers"), [ISSUER]), "cm": (spec("cm", deps=["issuers"]), [CHARTS, CERT_MANAGER])}
    bare = cluster(tiers)
    assert bare.tiers[t("issuers")].ready_round is None  # cert-manager installs only after issuers is Ready
    for bootstrap in (
        Bootstrap(crds=frozenset({("cert-manager.io", "ClusterIssuer")})),
        Bootstrap(crd_releases=frozenset({("cert-manager", "cert-manager")})),
        Bootstrap(releases=frozenset({("cert-manager", "cert-manager")})),
        Bootstrap(crd_charts=frozenset({"cert-manager"})),
    ):
        result = cluster(tiers, bootstrap)
        assert result.converges and result.tiers[t("issuers")].failed_attempts == 0, bootstrap
    ordered = cluster(
        {"a": (spec("a"), [WIDGET_CRD]), "b": (spec("b"), [WIDGET])},
        Bootstrap(tier_order=(t("a"), t("b")), entries=(BootstrapEntry("tier-order", "standup.sh", "tiers a, b in order"),)),
    )
    assert ordered.tiers[t("b")].failed_attempts == 0 and ordered.tiers[t("b")].ready_round == 3


def test_suspended_and_cycle() -> None:
    result = cluster({
        "s": (spec("s", suspend=True), []),
        "after-s": (spec("after-s", deps=["s"]), []),
        "x": (spec("x", deps=["y"]), []),
        "y": (spec("y", deps=["x"]), []),
    })
    assert result.tiers[t("s")].reason == "suspended" and t("s") not in result.never()
    assert result.tiers[t("after-s")].reason == "suspended" and t("after-s") not in result.never()
    assert result.timeline().endswith("suspended (or behind one): after-s, s")
    assert result.tiers[t("x")].ready_round is None and "cycle" in result.tiers[t("x")].blocked_by


def test_output_json_timeline_and_compare() -> None:
    stuck = cluster({"cfg": (spec("cfg", wait=True), [CDI_CRD, CDI_CR, PROFILE]), "apps": (spec("apps", deps=["cfg"]), [])})
    assert stuck.to_json()["converges"] is False
    assert stuck.to_json()["tiers"]["flux-system/apps"] == {
        "ready_round": None, "failed_attempts": 0, "max_delay_seconds": 0,
        "blocked_by": "apps dependsOn cfg ← " + stuck.tiers[t("cfg")].blocked_by,
    }
    assert stuck.timeline() == "round 1: flux-system · never: cfg (" + stuck.tiers[t("cfg")].blocked_by + "); apps behind cfg"
    many = cluster({f"t{i:02}": (spec(f"t{i:02}"), []) for i in range(12)})
    assert many.timeline() == "round 1: flux-system · round 2: t00, t01, t02, t03, t04, t05, t06, t07 and 4 more"
    fixed = cluster({"cfg": (spec("cfg", wait=True, health=[CDI_EXPR]), [CDI_CRD, CDI_CR]), "profiles": (spec("profiles", deps=["cfg"]), [PROFILE])})
    slow = cluster({"cfg": (spec("cfg", wait=True, interval=3600), [CDI_CRD, CDI_CR]), "profiles": (spec("profiles", deps=["cfg"], interval=3600), [PROFILE])})
    assert fixed.timeline() == "round 1: flux-system · round 2: cfg · round 3: profiles"
    assert compare(stuck, fixed) == "this change resolves a cold-start deadlock"
    assert compare(fixed, stuck).startswith("this change introduces a cold-start deadlock (apps, cfg")
    assert compare(fixed, slow) == "this change adds up to 1h to a cold start"
    assert compare(fixed, fixed) is None


# -- properties on generated graphs ----------------------------------------------------------------------

KINDS = [("example.com", f"Kind{i}") for i in range(6)] + [("example.com", "BarClass")]


def generated(rng: random.Random) -> dict[str, tuple[TierSpec, list[Manifest]]]:
    """A random acyclic cluster: CRDs, CRs, CDI operators and cert-manager releases spread over tiers."""
    n = rng.randint(2, 9)
    names = [f"t{i}" for i in range(n)]
    tiers: dict[str, tuple[TierSpec, list[Manifest]]] = {}
    for i, name in enumerate(names):
        deps = [d for d in names[:i] if rng.random() < 0.3]
        health = [CDI_EXPR] if rng.random() < 0.2 else []
        objs: list[Manifest] = []
        for group, kind in KINDS:
            roll = rng.random()
            if roll < 0.12:
                objs.append(crd(group, kind))
            elif roll < 0.3:
                objs.append(o(f"{group}/v1", kind, f"{kind.lower()}-{name}", "" if kind.endswith("Class") else "default"))
        if rng.random() < 0.2:
            objs += [CDI_CRD, o("cdi.kubevirt.io/v1beta1", "CDI", f"cdi-{name}")]
        if rng.random() < 0.2:
            objs.append(o("cdi.kubevirt.io/v1beta1", "StorageProfile", f"p-{name}"))
        if rng.random() < 0.15:
            objs += [CHARTS, release(f"cm-{name}", "cert-manager", "cert-manager", values={"crds": {"enabled": True}})]
        if rng.random() < 0.2:
            objs.append(o("cert-manager.io/v1", "ClusterIssuer", f"ci-{name}"))
        tiers[name] = (spec(name, deps=deps, wait=rng.random() < 0.5, health=health, interval=rng.choice([60, 300, 600])), objs)
    return tiers


def more_bootstrap(rng: random.Random, tiers: Mapping[str, tuple[TierSpec, list[Manifest]]]) -> Bootstrap:
    crds = {k for k in KINDS if rng.random() < 0.4} | ({("cdi.kubevirt.io", "StorageProfile")} if rng.random() < 0.3 else set())
    releases = {(m.ref.namespace, m.ref.name) for _, objs in tiers.values() for m in objs if m.ref.kind == "HelmRelease" and rng.random() < 0.5}
    return Bootstrap(crds=frozenset(crds), releases=frozenset(releases), crd_charts=frozenset({"cert-manager"} if rng.random() < 0.3 else set()))


@pytest.mark.parametrize("seed", range(60))
def test_generated_graphs_deterministic_and_bootstrap_only_helps(seed: int) -> None:
    rng = random.Random(seed)
    tiers = generated(rng)
    first = cluster(tiers)
    assert first == cluster(dict(reversed(list(tiers.items())))), "the result must not depend on input order"
    bootstrap = more_bootstrap(rng, tiers)
    helped = cluster(tiers, bootstrap)
    if first.converges:
        assert helped.converges
    for tier, outcome in first.tiers.items():
        if outcome.ready_round is not None:
            assert helped.tiers[tier].ready_round is not None, (tier, helped.tiers[tier])
            assert helped.tiers[tier].ready_round <= outcome.ready_round


# -- through `check` (real kustomize) -----------------------------------------------------------------------

def _tier_dir(path: str, *objects: Mapping[str, Any]) -> dict[str, str]:
    return {f"{path}/kustomization.yaml": kustomization("objects.yaml"), f"{path}/objects.yaml": dump(*objects)}


def _crd(group: str, kind: str) -> dict[str, Any]:
    return dict(crd(group, kind).body)


def _check(tmp_path: Path, tiers: Mapping[str, Mapping[str, Any]], dirs: Mapping[str, list], monkeypatch=None, bootstrap: Bootstrap | None = None):
    files = flux_repo(tiers)
    for path, objects in dirs.items():
        files.update(_tier_dir(path, *objects))
    write_tree(tmp_path, files)
    if bootstrap is not None:
        monkeypatch.setattr(bot.pipeline.check, "CheckContext", lambda **kw: CheckContext(**{**kw, "bootstrap": bootstrap}))
    return check_repository(tmp_path, "dev")


ISSUER_BODY = dict(ISSUER.body, spec={"selfSigned": {}})
WIDGET_BODY = dict(WIDGET.body, spec={})


def test_health_check_deadlock_finding(tmp_path: Path) -> None:
    health = [{"apiVersion": "cert-manager.io/v1", "kind": "ClusterIssuer", "name": "letsencrypt"}]
    report = _check(
        tmp_path,
        {"certs": ks("certs", "./certs", healthChecks=health), "issuers": ks("issuers", "./issuers", depends_on=["certs"])},
        {"certs": [_crd("cert-manager.io", "ClusterIssuer")], "issuers": [ISSUER_BODY]},
    )
    [finding] = [f for f in report.findings if f.check == "health-check-deadlock"]
    assert finding.severity == Severity.ERROR and finding.kustomization == t("certs")
    assert "certs waits for ClusterIssuer/letsencrypt (healthChecks) ← applied by issuers, which dependsOn certs" in finding.message
    assert report.cold_start is not None and not report.cold_start.converges


def test_child_depending_on_waiting_parent_is_a_deadlock_finding(tmp_path: Path) -> None:
    report = _check(
        tmp_path,
        {"parent": ks("parent", "./parent", wait=True)},
        {"parent": [ks("kid", "./kid", depends_on=["parent"])], "kid": [dict(o("v1", "ConfigMap", "x", "default").body, data={"k": "v"})]},
    )
    assert [(f.check, f.kustomization.name) for f in report.findings if f.severity == Severity.ERROR] == [("health-check-deadlock", "parent")]


def test_unordered_crd_is_a_warning_with_the_retry(tmp_path: Path) -> None:
    report = _check(tmp_path, {"a": ks("a", "./a"), "b": ks("b", "./b", retryInterval="2m")}, {"a": [_crd("example.com", "Widget")], "b": [WIDGET_BODY]})
    [finding] = [f for f in report.findings if f.check == "crd-not-ordered"]
    assert finding.severity == Severity.WARNING
    assert finding.message.endswith("Cold start: b is Ready in round 3 after 1 failed attempt, up to 2m late")


def test_bootstrap_makes_it_info_naming_the_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bootstrap = Bootstrap(
        crds=frozenset({("example.com", "Widget")}),
        entries=(BootstrapEntry("declared", ".fluxwarden.yaml", "1 CRD declared (Widget.example.com)"),),
    )
    report = _check(tmp_path, {"a": ks("a", "./a"), "b": ks("b", "./b")}, {"a": [_crd("example.com", "Widget")], "b": [WIDGET_BODY]}, monkeypatch, bootstrap)
    [finding] = [f for f in report.findings if f.check == "crd-not-ordered"]
    assert finding.severity == Severity.INFO
    assert finding.message.startswith("fine on a cold start only because of the bootstrap: 1 CRD declared (Widget.example.com) (.fluxwarden.yaml)")


def test_crd_in_a_tier_behind_a_never_ready_one_stays_an_error_with_the_chain(tmp_path: Path) -> None:
    """The parent applies a CR whose CRD only its own child's HelmRelease brings: a cold start never gets past it."""
    report = _check(
        tmp_path,
        {"apps": ks("apps", "./apps")},
        {"apps": [ks("cm", "./cm"), ISSUER_BODY], "cm": [dict(CHARTS.body, spec={"url": "https://charts.jetstack.io", "interval": "1h"}), dict(CERT_MANAGER.body, spec={**CERT_MANAGER.body["spec"], "interval": "1h"})]},
    )
    errors = [f for f in report.findings if f.severity == Severity.ERROR]
    assert [(f.check, f.kustomization.name) for f in errors] == [("crd-not-ordered", "apps")]
    assert errors[0].message.endswith(
        "apps waits for ClusterIssuer.cert-manager.io ← installed by HelmRelease cert-manager/cert-manager ← HelmRelease/cert-manager is in cm ← cm is applied by apps, whose apply fails"
    )


def test_missing_namespace_fails_the_apply() -> None:
    """Objects in a Namespace another tier defines: the dry-run fails until that tier's first stage has run."""
    ns = o("v1", "Namespace", "media")
    cm = o("v1", "ConfigMap", "x", "media")
    unordered = cluster({"a": (spec("a"), [ns]), "b": (spec("b", retry=30), [cm])})
    assert (unordered.tiers[t("b")].failed_attempts, unordered.tiers[t("b")].max_delay_seconds) == (1, 30)
    stuck = cluster({"a": (spec("a"), [cm]), "b": (spec("b", deps=["a"]), [ns])})
    assert stuck.tiers[t("a")].blocked_by == "a waits for Namespace/media ← defined in b ← b dependsOn a, which waits for b"
    ordered = cluster({"a": (spec("a"), [ns]), "b": (spec("b", deps=["a"]), [cm])})
    assert ordered.tiers[t("b")].failed_attempts == 0
    system = cluster({"a": (spec("a"), [o("v1", "Namespace", "default")]), "b": (spec("b"), [o("v1", "ConfigMap", "x", "default")])})
    assert system.tiers[t("b")].failed_attempts == 0
    helmfile = cluster({"a": (spec("a"), [cm]), "b": (spec("b", deps=["a"]), [ns])}, Bootstrap(releases=frozenset({("media", "jellyfin")})))
    assert helmfile.converges  # helmfile sync created the release's namespace


def test_missing_namespace_finding_by_cold_start(tmp_path: Path) -> None:
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "media"}}
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "media"}, "data": {"k": "v"}}
    report = _check(tmp_path / "stuck", {"a": ks("a", "./a"), "b": ks("b", "./b", depends_on=["a"])}, {"a": [cm], "b": [ns]})
    [finding] = [f for f in report.findings if f.check == "missing-provider"]
    assert finding.severity == Severity.ERROR
    assert finding.message.endswith("Cold start: a never becomes Ready: a waits for Namespace/media ← defined in b ← b dependsOn a, which waits for b")
    report = _check(tmp_path / "retry", {"a": ks("a", "./a"), "b": ks("b", "./b")}, {"a": [cm], "b": [ns]})
    [finding] = [f for f in report.findings if f.check == "missing-provider"]
    assert finding.severity == Severity.WARNING and "after 1 failed attempt, up to 10m late" in finding.message


def test_timeline_says_which_kinds_it_could_not_judge(tmp_path):
    """A kind nobody known provides is not taken as a converging cold start silently: the line counts it."""
    from tests.fluxrepo import dump, flux_repo, kustomization, ks, obj, write_tree
    from bot.pipeline.check import check_repository

    files = flux_repo({"a": ks("a", "./a")}, {
        "a/kustomization.yaml": kustomization("objects.yaml"),
        "a/objects.yaml": dump(obj("example.com/v1", "Widget", "w", "default", spec={}), obj("v1", "ConfigMap", "c", "default")),
    })
    report = check_repository(write_tree(tmp_path, files), "dev")
    assert report.cold_start.unjudged and str(report.cold_start.unjudged[0]) == "Widget.example.com"
    assert "not judged: 1 kind nobody known provides, taken as served (Widget)" in report.cold_start.timeline()
    assert report.cold_start.to_json()["unjudged"] == ["Widget.example.com"]


def test_a_tier_whose_build_failed_is_never_listed_as_ready(tmp_path):
    """A tier kustomize could not build has no known objects: the cold-start line says so instead of a round."""
    from tests.fluxrepo import dump, flux_repo, kustomization, ks, obj, write_tree
    from bot.pipeline.check import check_repository

    files = flux_repo({"good": ks("good", "./good"), "broken": ks("broken", "./broken")}, {
        "good/kustomization.yaml": kustomization("objects.yaml"),
        "good/objects.yaml": dump(obj("v1", "ConfigMap", "c", "default")),
        "broken/kustomization.yaml": kustomization("missing.yaml"),
    })
    report = check_repository(write_tree(tmp_path, files), "dev")
    assert any(f.check == "render-failed" and f.kustomization == TierId(NS, "broken") for f in report.findings)
    line = report.cold_start.timeline()
    rounds = line.split(" · not judged")[0]
    assert "good" in rounds and "broken" not in rounds
    assert "not judged, build failed: broken" in line
    assert report.cold_start.to_json()["unrendered"] == ["flux-system/broken"]
