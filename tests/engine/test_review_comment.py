"""The review comment a reviewer reads, as golden files: the seed PR (real git, real kustomize) and its
reverse, a 1-tier change in an 80-tier repository with 200 pre-existing findings, a move between two
tiers, and a split at 3,000 characters. In each the first screen says what the change does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bot.engine.reporting.diff import ChangeKind
from bot.engine.core.model import Severity
from bot.engine.reporting.review import ClusterReview
from bot.pipeline.review import review_repository
from bot.engine.reporting.review_report import SUMMARY_MAX, format_review_markdown, graph_tiers
from tests.golden import GOLDEN_DIR, assert_golden
from tests.pipeline.test_review import seed_pr  # noqa: F401  (the fixture)
from tests.engine.test_review_report import (
    _EDGE,
    _NODE,
    assert_edges_avoid_summaries,
    change,
    cluster_diff,
    finding,
    mermaid_blocks,
    review,
    summary,
    tier_diff,
    yaml_diff,
)

SPLIT = "\n\n<!-- ====== next comment ====== -->\n\n"
FIRST_SCREEN = 25  # lines


def _anonymised(text: str, *shas: str) -> str:
    """Commit ids differ on every run (commit times): fixed stand-ins keep the golden file stable."""
    for sha, stand_in in zip(shas, ("b" * 40, "h" * 40)):
        text = text.replace(sha, stand_in).replace(sha[:12], stand_in[:12])
    return text


def _first_screen_holds_the_change(part: str, r: ClusterReview) -> None:
    """The verdict, what to do and what changed come before any finding or diff; every new/resolved finding before the diffs."""
    lines = part.splitlines()
    assert re.match(r"^### (✅|⚠️|❌) ", lines[1])
    top = part.split("**Findings:**")[0].split("<details>")[0]
    assert "**To do:**" in top or "**Nothing to do.**" in top
    assert "**What changed:**" in top
    listed = part.split("\n---\n")[0]
    new = [f.finding for f in r.findings if f.new and f.finding.severity is not Severity.INFO]
    for f in [*new, *r.resolved]:
        assert f"`{f.check}`" in listed, f.check
    assert "pre-existing" not in lines[1]  # never beside the verdict


# -- scenarios -----------------------------------------------------------------------------------


def eighty_tiers() -> ClusterReview:
    """80 tiers in two namespaces, one tier changed, 200 pre-existing findings, no new one."""
    tiers = [summary("flux-system/infra-0")]
    tiers += [summary(f"flux-system/infra-{i}", f"flux-system/infra-{i - 1}") for i in range(1, 20)]
    tiers += [summary(f"apps/app-{i:02}", f"flux-system/infra-{i % 20}") for i in range(60)]
    checks = [
        ("missing-provider", Severity.ERROR, "StorageClass longhorn is defined in a tier this one does not depend on"),
        ("dependency-not-waited", Severity.WARNING, "relies on a CRD from a tier with neither wait: true nor healthChecks"),
        ("prune-transient", Severity.WARNING, "HIGH IMPACT: " + "a very long explanation of the hand-over " * 40),
        ("unused-variable", Severity.INFO, "variable X is never used"),
    ]
    old = []
    for k in range(200):
        check, severity, message = checks[k % len(checks)]
        tier = tiers[(k * 7) % 80].id
        old.append((finding(check, severity, message, str(tier), f"ConfigMap/apps/obj-{k}", f"apps/app-{k % 60:02}/x.yaml:{k + 1}"), False))
    diff = cluster_diff(
        "prod",
        tier_diff(change(ChangeKind.CHANGED, "HelmRelease/apps/web", "apps/app-07", diff=yaml_diff(["    version: 1.4.2"], ["    version: 1.5.0"]), api_version="helm.toolkit.fluxcd.io/v2")),
    )
    return review("prod", tiers, diff, old)


def move_between_tiers() -> ClusterReview:
    """Two objects move from `storage` to `storage-profiles`; their finding moves with them (not new)."""
    tiers = [summary("platform"), summary("storage", "platform"), summary("storage-profiles", "storage"), summary("apps", "storage"), summary("monitoring", "platform")]
    moves = tier_diff(
        change(ChangeKind.MOVED, "StorageProfile//longhorn-vm", "storage-profiles", from_tier="storage", api_version="cdi.kubevirt.io/v1beta1"),
        change(ChangeKind.MOVED, "StorageProfile//longhorn-static", "storage-profiles", from_tier="storage", api_version="cdi.kubevirt.io/v1beta1"),
    )
    message = (
        "2 objects move from flux-system/storage (prune: true) to flux-system/storage-profiles: StorageProfile/longhorn-vm, "
        "StorageProfile/longhorn-static. flux-system/storage and flux-system/storage-profiles reconcile the new revision "
        "independently: unless flux-system/storage-profiles applies them first (taking over the owner labels), "
        "flux-system/storage prunes them and flux-system/storage-profiles recreates them later, with a new UID and lost state. "
        "Safe procedure (Flux FAQ): merge prune: false on flux-system/storage first, move the objects, confirm "
        "flux-system/storage-profiles owns them (`flux tree kustomization storage-profiles -n flux-system`), then restore prune: true."
    )
    findings = [
        (finding("prune-transient", Severity.WARNING, message, "storage", "StorageProfile//longhorn-vm", "storage-profiles/profiles.yaml:1"), True),
        (finding("missing-provider", Severity.WARNING, "StorageProfile longhorn-vm names StorageClass longhorn", "storage-profiles", "StorageProfile//longhorn-vm", "storage-profiles/profiles.yaml:1"), False),
    ]
    return review("prod", tiers, cluster_diff("prod", moves), findings)


# -- goldens -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def seed_reviews(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[ClusterReview, str, str]]:
    """The seed's PR (base: the deadlock, head: the fix) and its reverse, reviewed for real."""
    tmp = tmp_path_factory.mktemp("seed")
    root, base, head = seed_pr.__wrapped__(tmp)  # type: ignore[attr-defined]
    cache = tmp / "cache"
    return {
        "seed-pr": (review_repository(root, "prod", base, head, cache_dir=cache), base, head),
        "seed-pr-reverse": (review_repository(root, "prod", head, base, cache_dir=cache), head, base),
    }


@pytest.mark.parametrize("name", ["seed-pr", "seed-pr-reverse"])
def test_seed_pr_golden(seed_reviews: dict, name: str) -> None:
    r, base, head = seed_reviews[name]
    link = f"https://github.com/acme/home-ops/blob/{head}"
    [part] = format_review_markdown([r], link_base=link)
    text = _anonymised(part, base, head)
    assert_golden(f"review/{name}.md", text)
    _first_screen_holds_the_change(text, r)
    assert_edges_avoid_summaries(mermaid_blocks(text)[0], r)


def test_seed_pr_says_what_it_fixes(seed_reviews: dict) -> None:
    r, _, head = seed_reviews["seed-pr"]
    lines = format_review_markdown([r], link_base=f"https://github.com/acme/home-ops/blob/{head}")[0].splitlines()
    assert lines[1].startswith("### ⚠️ prod: 3 new warnings · fixed: ")
    assert lines[2].startswith("**Fixed:** resolved a cold-start deadlock; fixed `second-order-crd` in `platform-config`")  # first, past tense
    [fixed] = [line for line in lines if line.startswith("- ✅ fixed `second-order-crd` · `platform-config` ·")]
    assert "https://" not in fixed  # where it was is on the base: no link into the head's tree
    # the StorageProfiles moved out of platform-config: its node says so
    assert re.search(r'\["platform-config<br/>[^"]*→ 2 moved out', "\n".join(lines))


def test_seed_pr_reverse_is_the_deadlock_again(seed_reviews: dict) -> None:
    r, _, _ = seed_reviews["seed-pr-reverse"]
    lines = format_review_markdown([r])[0].splitlines()
    assert lines[1].startswith("### ❌ prod: 1 new error")
    assert lines[2:5] == ["**To do:**", "", "1. Move `StorageProfile/longhorn-static` (and 1 more) into a new tier that depends on `platform-config` (keep `CDI cdi` there, with `wait: true`)"]
    assert any(line.startswith("- ❌ 🆕 `second-order-crd` · `platform-config` ·") for line in lines)


def test_eighty_tiers_golden() -> None:
    r = eighty_tiers()
    [part] = format_review_markdown([r])
    assert_golden("review/80-tiers-1-changed.md", part)
    lines = part.splitlines()
    assert lines[1:3] == ["### ✅ prod: no new findings", "**Nothing to do.**"]
    assert "- Only moves versions: chart `web` 1.4.2 → 1.5.0" in lines  # a version bump says so in one line
    # one count of the old findings, the same in the neutral line and in the folded counts
    assert "<sub>80 tiers, 240 objects · pre-existing, not from this change: 50 errors, 100 warnings, 50 notes</sub>" in lines
    assert "<summary>Pre-existing, not from this change: 50 errors, 100 warnings, 50 notes (counts per check)</summary>" in part
    assert not re.search(r"^- (❌|⚠️|ℹ️)", part, re.M)  # no list of old findings: one folded count per check
    _first_screen_holds_the_change(part, r)
    assert mermaid_blocks(part) == []  # no new error, no move: nothing for a graph to show


def test_move_between_tiers_golden() -> None:
    r = move_between_tiers()
    [part] = format_review_markdown([r])
    assert_golden("review/move-2-tiers.md", part)
    assert part.splitlines()[1:3] == ["### ⚠️ prod: 1 new warning", "**To do:** Set `prune: false` on `storage` for one merge, then move the objects and restore it."]
    assert "- 2 objects moved: `storage` → `storage-profiles` (2)" in part
    _first_screen_holds_the_change(part, r)
    [graph] = mermaid_blocks(part)
    assert "t_flux_system_storage -.->|2 moved| t_flux_system_storage_profiles" in graph
    assert 't_flux_system_storage["storage<br/>→ 2 moved out · ⚠️ 1 new"]' in graph
    assert_edges_avoid_summaries(graph, r)


def test_split_3000_golden() -> None:
    r = eighty_tiers()
    many = cluster_diff(
        "prod",
        *(tier_diff(*(change(ChangeKind.CHANGED, f"ConfigMap/apps/c{i}-{j}", f"apps/app-{i:02}", diff=yaml_diff([f"  k: {j}"] * 6, [f"  k: {j + 1}"] * 6)) for j in range(3))) for i in range(6)),
    )
    new = [(finding("dependency-not-waited", Severity.WARNING, "apps/app-03 relies on a CRD of infra-3, which has neither wait: true nor a healthChecks entry covering it", "apps/app-03", None, "clusters/base/app-03.yaml:9"), True)]
    r = review("prod", [*r.head.tiers], many, [*((f.finding, False) for f in r.findings), *new])
    parts = format_review_markdown([r], limit=3000)
    assert len(parts) >= 2
    assert_golden("review/split-80-tiers-3000.md", SPLIT.join(parts))
    # the same edit to c*-0 in six tiers is shown once, with the tiers it is made in
    assert "<b>The same change in 6 tiers</b> · ~ changed · 6 objects · 12 lines each" in SPLIT.join(parts)
    verdict = parts[0].splitlines()[1]
    for n, part in enumerate(parts, 1):
        assert len(part) <= 3000
        lines = part.splitlines()
        assert lines[1] == verdict  # every part starts with the verdict…
        assert f"<sub>Fluxwarden review · part {n} of {len(parts)}</sub>" in lines[:5]  # …and which part it is
    _first_screen_holds_the_change(parts[0], r)
    assert mermaid_blocks(SPLIT.join(parts)) == []  # a warning without a move: no graph


# -- every golden review file --------------------------------------------------------------------

GOLDEN_REVIEWS = sorted((GOLDEN_DIR / "review").glob("*.md"))


@pytest.mark.parametrize("path", GOLDEN_REVIEWS, ids=lambda p: p.name)
def test_golden_tables_fit(path: Path) -> None:
    """No table row over 400 characters of Markdown; no findings message cell over 120 characters (as shown)."""
    text = path.read_text(encoding="utf-8")
    header = None
    for line in text.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        assert len(line) <= 400, (path.name, len(line), line[:120])
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip("|"))]
        if header is None:
            header = cells
        elif "message" in header and not set(line) <= set("|-: "):
            shown = re.sub(r"\\(.)", r"\1", cells[header.index("message")].replace("`", ""))
            shown = shown.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&").replace("\u2060", "")
            assert len(shown) <= SUMMARY_MAX, (path.name, len(shown), shown)


@pytest.mark.parametrize("path", GOLDEN_REVIEWS, ids=lambda p: p.name)
def test_golden_mermaid_edges_never_touch_a_summary(path: Path) -> None:
    for block in mermaid_blocks(path.read_text(encoding="utf-8")):
        nodes = {m.group(1): m.group(2) for m in map(_NODE.match, block.splitlines()) if m}
        summaries = {n for n, label in nodes.items() if "unchanged" in label and "<br/>" not in label}
        for a, b in (m.groups() for m in map(_EDGE.match, block.splitlines()) if m):
            assert a in nodes and b in nodes
            assert not {a, b} & summaries, (path.name, a, b)


def test_graph_draws_only_what_the_findings_and_moves_need() -> None:
    assert graph_tiers(eighty_tiers()) == []
    assert {t.name for t in graph_tiers(move_between_tiers())} == {"storage", "storage-profiles"}


# -- the shapes of issue 24: each a golden, each with its first screen checked ------------------------------


def _deployment(image: str) -> list[str]:
    return ["spec:", "  template:", "    spec:", "      containers:", f"      - image: {image}"]


def one_app_bump() -> ClusterReview:
    """One app's chart and image move: 6 tiers, one changed, nothing new."""
    tiers = [summary("flux-system"), summary("infra", "flux-system"), summary("apps", "infra"), *(summary(f"apps/app-{i}", "flux-system/apps") for i in range(3))]
    diff = cluster_diff(
        "prod",
        tier_diff(
            change(ChangeKind.CHANGED, "HelmRelease/apps/grafana", "apps/app-1", diff=yaml_diff(["    version: 8.5.1"], ["    version: 8.6.0"]), api_version="helm.toolkit.fluxcd.io/v2"),
            change(ChangeKind.CHANGED, "Deployment/apps/grafana-sidecar", "apps/app-1", diff=yaml_diff(_deployment("kiwigrid/k8s-sidecar:1.27.4"), _deployment("kiwigrid/k8s-sidecar:1.28.0")), api_version="apps/v1"),
        ),
    )
    return review("prod", tiers, diff, [])


def twenty_commit_pr() -> ClusterReview:
    """A 20-commit PR: 18 tiers touched, two tiers added and one removed, charts and images moved, one new warning."""
    infra = [summary("flux-system"), *(summary(f"infra-{i}", "flux-system") for i in range(4))]
    apps = [summary(f"apps/app-{i:02}", f"flux-system/infra-{i % 4}") for i in range(20)]
    tiers = [*infra, *apps, summary("apps/new-a", "flux-system/infra-0"), summary("apps/new-b", "apps/new-a")]
    changes = []
    for i in range(14):
        tier = f"apps/app-{i:02}"
        if i % 3 == 0:
            changes.append(tier_diff(change(ChangeKind.CHANGED, f"HelmRelease/apps/app-{i:02}", tier, diff=yaml_diff([f"    version: 1.{i}.0"], [f"    version: 1.{i}.1"]), api_version="helm.toolkit.fluxcd.io/v2")))
        else:
            changes.append(tier_diff(change(ChangeKind.CHANGED, f"Deployment/apps/app-{i:02}", tier, diff=yaml_diff(_deployment(f"ghcr.io/acme/app-{i:02}:2.{i}.0"), _deployment(f"ghcr.io/acme/app-{i:02}:2.{i}.1")), api_version="apps/v1")))
    changes.append(tier_diff(change(ChangeKind.ADDED, "Deployment/apps/new-a", "apps/new-a", api_version="apps/v1"), change(ChangeKind.ADDED, "Service/apps/new-a", "apps/new-a")))
    changes.append(tier_diff(change(ChangeKind.ADDED, "ConfigMap/apps/new-b", "apps/new-b")))
    changes.append(tier_diff(change(ChangeKind.REMOVED, "Deployment/apps/old", "apps/app-19", api_version="apps/v1")))
    changes.append(tier_diff(change(ChangeKind.CHANGED, "ConfigMap/flux-system/cluster-vars", "infra-2", diff=yaml_diff(["  DOMAIN: example.com"], ["  DOMAIN: example.org"]))))
    new = (finding("dependency-not-waited", Severity.WARNING, "apps/new-b relies on a CRD of apps/new-a, which has neither wait: true nor a healthChecks entry covering it", "apps/new-b", None, "apps/new-b/ks.yaml:9"), True)
    return review("prod", tiers, cluster_diff("prod", *changes, added=("apps/new-a", "apps/new-b"), removed=("apps/gone",)), [new])


def repo_wide_change() -> ClusterReview:
    """One label added to every app's Deployment (77 tiers), and three tiers with their own change."""
    tiers = [summary("flux-system"), *(summary(f"apps/app-{i:02}", "flux-system/flux-system") for i in range(80))]
    label = yaml_diff(["metadata:", "  labels:", "    app: x"], ["metadata:", "  labels:", "    app: x", "    team: platform"])
    same = [tier_diff(change(ChangeKind.CHANGED, f"Deployment/apps/app-{i:02}", f"apps/app-{i:02}", diff=label, api_version="apps/v1")) for i in range(77)]
    own = [
        tier_diff(change(ChangeKind.CHANGED, f"ConfigMap/apps/app-{i:02}", f"apps/app-{i:02}", diff=yaml_diff([f"  size: {i}"], [f"  size: {i * 2}"])))
        for i in range(77, 80)
    ]
    return review("prod", tiers, cluster_diff("prod", *same, *own), [])


def new_cycle() -> ClusterReview:
    """The PR adds `dependsOn: storage` to `backup`, which storage already (transitively) waits for."""
    tiers = [summary("platform"), summary("storage", "platform", "backup"), summary("volumes", "storage"), summary("backup", "volumes", "storage"), summary("apps", "platform")]
    message = (
        "dependsOn forms a cycle: flux-system/storage → flux-system/backup → flux-system/storage; "
        "Flux never applies any of these Kustomizations"
    )
    cycle = (finding("dependency-cycle", Severity.ERROR, message, "storage", None, "clusters/prod/backup.yaml:12"), True)
    diff = cluster_diff("prod")
    return review("prod", tiers, diff, [cycle], touched=("backup",))


def fix_pr() -> ClusterReview:
    """The PR adds the missing `wait: true`: the deadlock it resolves and the error it fixes come first."""
    tiers = [summary("platform"), summary("platform-config", "platform"), summary("apps", "platform-config")]
    fixed = finding(
        "health-check-deadlock", Severity.ERROR, "on a cold start flux-system/platform-config never becomes Ready: its healthChecks cover an object flux-system/apps applies",
        "platform-config", None, "clusters/prod/platform-config.yaml:14",
    )
    old = (finding("unused-variable", Severity.INFO, "variable CLUSTER_REGION is never used", "apps", None, "clusters/prod/apps.yaml:20"), False)
    diff = cluster_diff("prod")
    r = review("prod", tiers, diff, [old], touched=("platform-config",), resolved=(fixed,))
    from dataclasses import replace

    return replace(r, cold_start_change="this change resolves a cold-start deadlock")


def moves() -> ClusterReview:
    """Three objects move from `monitoring` into a new tier `monitoring-crs`; one more tier's config changes."""
    tiers = [summary("platform"), summary("monitoring", "platform"), summary("monitoring-crs", "monitoring"), summary("apps", "platform")]
    moved = tier_diff(*(
        change(ChangeKind.MOVED, f"ServiceMonitor/monitoring/{n}", "monitoring-crs", from_tier="monitoring", api_version="monitoring.coreos.com/v1")
        for n in ("node-exporter", "kube-state-metrics", "kubelet")
    ))
    other = tier_diff(change(ChangeKind.CHANGED, "ConfigMap/apps/settings", "apps", diff=yaml_diff(["  replicas: 2"], ["  replicas: 3"])))
    transient = (finding(
        "prune-transient", Severity.WARNING,
        "3 objects move from flux-system/monitoring (prune: true) to flux-system/monitoring-crs: flux-system/monitoring may prune them before "
        "flux-system/monitoring-crs applies them; merge prune: false on flux-system/monitoring first",
        "monitoring", "ServiceMonitor/monitoring/node-exporter", "monitoring-crs/monitors.yaml:1",
    ), True)
    return review("prod", tiers, cluster_diff("prod", moved, other, added=("monitoring-crs",)), [transient])


SHAPE_GOLDENS = {
    "shape-one-app-bump": one_app_bump,
    "shape-20-commit-pr": twenty_commit_pr,
    "shape-repo-wide-change": repo_wide_change,
    "shape-new-cycle": new_cycle,
    "shape-fix-pr": fix_pr,
    "shape-moves": moves,
}


@pytest.mark.parametrize("name", sorted(SHAPE_GOLDENS))
def test_shape_golden(name: str) -> None:
    r = SHAPE_GOLDENS[name]()
    parts = format_review_markdown([r])
    assert all(len(p) <= 65536 for p in parts)
    assert_golden(f"review/{name}.md", SPLIT.join(parts))
    _first_screen_holds_the_change(parts[0], r)
    assert_edges_avoid_summaries(mermaid_blocks(SPLIT.join(parts))[0], r) if mermaid_blocks(SPLIT.join(parts)) else None


def test_each_shape_says_what_it_is() -> None:
    """The line a reviewer reads first under the verdict, per shape."""
    first = {name: format_review_markdown([make()])[0] for name, make in SHAPE_GOLDENS.items()}
    assert "**Nothing to do.**" in first["shape-one-app-bump"] and "grafana" in first["shape-one-app-bump"].split("**Findings:**")[0]
    assert "The same change in 77 tiers" in first["shape-repo-wide-change"]
    assert "**To do:** Remove the `dependsOn` this PR added (`backup` → `storage`)." in first["shape-new-cycle"].split("**What changed:**")[0]
    assert first["shape-fix-pr"].splitlines()[2].startswith("**Fixed:** resolved a cold-start deadlock")
    assert "Set `prune: false` on `monitoring` for one merge" in first["shape-moves"].split("**What changed:**")[0]
    cycle_graph = mermaid_blocks(first["shape-new-cycle"])
    assert cycle_graph and "t_flux_system_storage" in cycle_graph[0] and "t_flux_system_backup" in cycle_graph[0]  # both ends
