"""The review comment a reviewer reads, as golden files: the seed PR (real git, real kustomize) and its
reverse, a 1-tier change in an 80-tier repository with 200 pre-existing findings, a move between two
tiers, and a split at 3,000 characters. In each the first screen says what the change does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bot.engine.diff import ChangeKind
from bot.engine.model import Severity
from bot.engine.review import ClusterReview
from bot.pipeline.review import review_repository
from bot.engine.review_report import SUMMARY_MAX, format_review_markdown, graph_tiers
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
