"""`check --base`: the seed's own PR reviewed end to end on real git repos, and the build cache."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import git
import pytest

from bot.service.cli import main
from bot.engine.reporting.diff import ChangeKind
from bot.engine.core.model import Finding, Severity, TierId
from bot.pipeline.review import review_repository
from tests.gitrepo import EXAMPLE, commit_all, init_repo, pre_fix


@pytest.fixture()
def seed_pr(tmp_path: Path) -> tuple[Path, str, str]:
    """A repo whose base is the seed's pre-fix state and whose head is the fix (the example)."""
    root = tmp_path / "repo"
    shutil.copytree(EXAMPLE, root)
    pre_fix(root)
    repo = init_repo(root)
    base = repo.head.commit.hexsha
    shutil.rmtree(root / "platform-config")
    shutil.copytree(EXAMPLE / "platform-config", root / "platform-config")
    shutil.copytree(EXAMPLE / "platform-config-cdi", root / "platform-config-cdi")
    for name in ("kustomization.yaml", "apps-vms.yaml", "platform-config-cdi.yaml"):
        shutil.copy(EXAMPLE / "clusters/base" / name, root / "clusters/base" / name)
    head = commit_all(repo, "fix(gitops): CDI cold-start deadlock repaired in the graph")
    return root, base, head


def test_base_is_the_incident(seed_pr: tuple[Path, str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, base, _ = seed_pr
    code = main(["check", "--repo", str(root), "--cluster", "prod", "--base", base, "--head", base, "--cache-dir", str(tmp_path / "c"), "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    errors = [(f["check"], f["kustomization"], f["new"]) for f in report["findings"] if f["severity"] == "error"]
    assert errors == [("second-order-crd", "flux-system/platform-config", False)]
    assert code == 0  # nothing new: the same revision on both sides
    seed = next(f for f in report["findings"] if f["check"] == "second-order-crd")
    chain = "platform-config waits for StorageProfile.cdi.kubevirt.io ← created by cdi-operator after it reconciles CDI/cdi ← CDI/cdi is in platform-config, whose apply fails"
    assert chain in seed["message"]
    cold = report["cold_start"]
    assert cold["converges"] is False and cold["change"] is None
    assert cold["tiers"]["flux-system/platform-config"]["ready_round"] is None
    assert cold["tiers"]["flux-system/platform-config"]["blocked_by"] == chain
    assert cold["tiers"]["flux-system/apps-vms"]["blocked_by"].startswith("apps-vms dependsOn platform-config ← ")


def test_seed_fix_reviewed(seed_pr: tuple[Path, str, str], tmp_path: Path) -> None:
    root, base, head = seed_pr
    review = review_repository(root, "prod", base, head, cache_dir=tmp_path / "cache")
    by_check = {(r.finding.check, r.new) for r in review.findings}
    # The fix removes the deadlock, and the move it makes is a prune transient to check live first.
    assert ("second-order-crd", False) not in by_check and ("second-order-crd", True) not in by_check
    assert ("prune-transient", True) in by_check
    assert ("tier-order-stale", True) in by_check
    assert review.new_errors == 0
    # The base deadlocks on a cold start (platform-config never Ready); the head converges.
    assert review.cold_start_change == "this change resolves a cold-start deadlock"
    assert review.head.cold_start is not None and review.head.cold_start.converges
    transient = next(r.finding for r in review.findings if r.finding.check == "prune-transient")
    assert transient.severity == Severity.WARNING
    assert transient.kustomization in (TierId("flux-system", "platform-config"), TierId("flux-system", "platform-config-cdi"))
    assert "platform-config" in transient.message and "Ready" in transient.message
    moves = list(review.diff.moves)
    assert {c.ref.name for c in moves} == {"longhorn-vm", "longhorn-static"}
    assert all(c.kind == ChangeKind.MOVED and c.from_tier == TierId("flux-system", "platform-config") for c in moves)
    assert TierId("flux-system", "platform-config-cdi") in review.changed_tiers
    assert TierId("flux-system", "apps") not in review.changed_tiers


def test_warm_cache_makes_unchanged_tiers_free(seed_pr: tuple[Path, str, str], tmp_path: Path) -> None:
    root, base, head = seed_pr
    cache = tmp_path / "cache"
    cold = review_repository(root, "prod", base, head, cache_dir=cache)
    warm = review_repository(root, "prod", base, head, cache_dir=cache)
    assert cold.kustomize_builds > 0
    assert warm.kustomize_builds == 0
    assert [r.finding for r in warm.findings] == [r.finding for r in cold.findings]
    # A working-tree edit to one tier rebuilds that tier only.
    profiles = root / "platform-config-cdi/cdi-storageprofiles.yaml"
    profiles.write_text(profiles.read_text().replace("cloneStrategy: snapshot", "cloneStrategy: copy"))
    one = review_repository(root, "prod", head, None, cache_dir=cache)
    assert one.kustomize_builds == 1
    assert [t.tier.name for t in one.diff.tiers] == ["platform-config-cdi"]
    change = one.diff.tiers[0].changes[0]
    assert change.kind == ChangeKind.CHANGED and "-  cloneStrategy: snapshot" in change.diff.replace("  cloneStrategy", "  cloneStrategy")


def _commit_edit(root: Path, path: str, old: str, new: str) -> str:
    file = root / path
    text = file.read_text() if file.exists() else ""
    assert old in text
    file.write_text(text.replace(old, new, 1) if old else text + new)
    return commit_all(git.Repo(root), f"edit {path}")


def test_head_reuses_the_builds_of_untouched_tiers_without_a_cache(tmp_path: Path) -> None:
    """Affected-only rendering needs no cache: head tiers no changed path touches take the base's build."""
    root = tmp_path / "repo"
    base = init_repo(root, EXAMPLE).head.commit.hexsha
    same = review_repository(root, "prod", base, base)
    head = _commit_edit(root, "apps/whoami/whoami.yaml", "replicas: 2", "replicas: 3")
    one = review_repository(root, "prod", base, head)
    assert one.kustomize_builds == same.kustomize_builds + 1  # the base's builds, plus apps at head
    assert [t.tier.name for t in one.diff.tiers] == ["apps"]
    assert "+  replicas: 3" in one.diff.tiers[0].changes[0].diff


@pytest.mark.parametrize(
    "path,old,new",
    [
        pytest.param(".sourceignore", "", "# nothing ignored, but every path may now be\n", id="sourceignore"),
        pytest.param(".fluxwarden.yaml", "", "# the repo config\n", id="repo-config"),
    ],
)
def test_a_change_that_can_touch_any_tier_rebuilds_them_all(tmp_path: Path, path: str, old: str, new: str) -> None:
    root = tmp_path / "repo"
    base = init_repo(root, EXAMPLE).head.commit.hexsha
    same = review_repository(root, "prod", base, base)
    head = _commit_edit(root, path, old, new)
    both = review_repository(root, "prod", base, head)
    assert both.kustomize_builds == 2 * same.kustomize_builds


def test_bad_revision_is_a_usage_error(seed_pr: tuple[Path, str, str], capsys: pytest.CaptureFixture[str]) -> None:
    root, _, _ = seed_pr
    assert main(["check", "--repo", str(root), "--cluster", "prod", "--base", "no-such-ref"]) == 2
    assert capsys.readouterr().err.strip() == "fluxwarden: error: unknown git revision 'no-such-ref'"


def test_head_without_base(seed_pr: tuple[Path, str, str], capsys: pytest.CaptureFixture[str]) -> None:
    root, _, head = seed_pr
    assert main(["check", "--repo", str(root), "--cluster", "prod", "--head", head]) == 2
    assert "--head needs --base" in capsys.readouterr().err


def _f(check: str, message: str, severity: Severity = Severity.ERROR, tier: str | None = "a") -> Finding:
    return Finding(check, severity, message, kustomization=TierId("flux-system", tier) if tier else None)


@pytest.mark.parametrize(
    "base,head,new",
    [
        ([], [_f("x", "m")], [True]),
        ([_f("x", "m")], [_f("x", "m")], [False]),
        ([_f("x", "2 objects")], [_f("x", "3 objects")], [False]),
        ([_f("u", "${A}")], [_f("u", "${A}"), _f("u", "${B}")], [False, True]),
        ([_f("u", "${A}", Severity.INFO)], [_f("u", "${A}", Severity.ERROR)], [True]),
        ([_f("graph-drift", "d1", Severity.WARNING, None)], [_f("graph-drift", "d1", Severity.WARNING, None), _f("graph-drift", "d2", Severity.WARNING, None)], [False, True]),
    ],
    ids=["added", "same", "message-changed", "second-in-same-object", "severity-raised", "second-drift"],
)
def test_mark_new_pairs_each_base_finding_once(base: list, head: list, new: list[bool]) -> None:
    from bot.engine.reporting.review import mark_new

    assert [r.new for r in mark_new(tuple(head), tuple(base))] == new


def test_a_finding_moved_with_its_object_is_not_new_and_a_gone_one_is_resolved() -> None:
    from bot.engine.core.model import ObjectRef, SourceLocation
    from bot.engine.reporting.review import mark_new, resolved_findings

    sp = ObjectRef("cdi.kubevirt.io/v1beta1", "StorageProfile", "", "longhorn-vm")
    before = Finding("missing-provider", Severity.WARNING, "m", TierId("flux-system", "platform-config"), sp, SourceLocation("platform-config/sp.yaml", 3))
    after = Finding("missing-provider", Severity.WARNING, "m", TierId("flux-system", "platform-config-cdi"), sp, SourceLocation("platform-config-cdi/sp.yaml", 3))
    deadlock = Finding("second-order-crd", Severity.ERROR, "d", TierId("flux-system", "platform-config"), sp)
    info = Finding("unused-variable", Severity.INFO, "i", TierId("flux-system", "a"))
    assert [r.new for r in mark_new((after,), (before, deadlock, info))] == [False]
    assert resolved_findings((after,), (before, deadlock, info)) == (deadlock,)  # info findings are not "fixed"
    # substitution checks: the variable is part of the identity
    obj = ObjectRef("v1", "ConfigMap", "a", "c")
    var = lambda name, tier: Finding("undefined-variable", Severity.ERROR, f"${{{name}}} (no default) is not defined", TierId("flux-system", tier), obj)  # noqa: E731
    assert [r.new for r in mark_new((var("A", "b"), var("B", "b")), (var("A", "a"),))] == [False, True]


def test_merge_base_is_what_a_pr_is_reviewed_against(tmp_path: Path) -> None:
    from bot.adapters.git import merge_base
    from tests.fluxrepo import write_tree

    root = tmp_path / "r"
    repo = init_repo(root)
    fork_point = repo.head.commit.hexsha
    repo.git.checkout("-b", "feature")
    write_tree(root, {"f.txt": "feature\n"})
    feature = commit_all(repo, "feature")
    repo.git.checkout("main")
    write_tree(root, {"m.txt": "main moved on\n"})
    main_tip = commit_all(repo, "main")
    assert merge_base(root, main_tip, feature) == fork_point


def test_an_object_left_in_an_unchanged_tier_is_a_move_there(tmp_path: Path) -> None:
    """Unchanged tiers are not diffed, but they still hold objects a changed tier lets go of."""
    root = tmp_path / "repo"
    shutil.copytree(EXAMPLE, root)
    shared = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shared\n  namespace: whoami\ndata:\n  k: v\n"
    (root / "apps/vms/unifi/dup.yaml").write_text(shared)
    (root / "apps/whoami/shared.yaml").write_text(shared)
    whoami = root / "apps/whoami/kustomization.yaml"
    whoami.write_text(whoami.read_text().replace("resources:\n", "resources:\n  - shared.yaml\n", 1))
    repo = init_repo(root)
    base = repo.head.commit.hexsha
    (root / "apps/vms/unifi/dup.yaml").unlink()
    head = commit_all(repo, "apps-vms lets go of the shared ConfigMap")
    review = review_repository(root, "prod", base, head, cache_dir=tmp_path / "cache")
    [change] = [c for t in review.diff.tiers for c in t.changes]
    assert (change.kind, change.ref.name, change.from_tier, change.tier) == (
        ChangeKind.MOVED, "shared", TierId("flux-system", "apps-vms"), TierId("flux-system", "apps"))


def test_the_touched_tier_is_built_ahead_once_and_reviewed_as_without_a_cache(tmp_path: Path) -> None:
    """With the base's commit seen before, the head's touched tier builds while the base renders: one build, same review."""
    root = tmp_path / "repo"
    base = init_repo(root, EXAMPLE).head.commit.hexsha
    cache = tmp_path / "cache"
    review_repository(root, "prod", base, base, cache_dir=cache)  # the base is known from now on
    head = _commit_edit(root, "apps/whoami/whoami.yaml", "replicas: 2", "replicas: 3")
    warm = review_repository(root, "prod", base, head, cache_dir=cache)
    cold = review_repository(root, "prod", base, head)
    assert warm.kustomize_builds == 1
    assert warm.diff == cold.diff and warm.findings == cold.findings and warm.head == cold.head


def test_a_tier_broken_by_the_change_is_reported_against_the_head_spec(tmp_path: Path) -> None:
    """A build started ahead with the base's spec that fails is built again for the head's own spec."""
    root = tmp_path / "repo"
    base = init_repo(root, EXAMPLE).head.commit.hexsha
    cache = tmp_path / "cache"
    review_repository(root, "prod", base, base, cache_dir=cache)
    (root / "apps/whoami/whoami.yaml").write_text((root / "apps/whoami/whoami.yaml").read_text().replace("replicas: 2", "replicas: [2"))
    # The head also moves the apps Kustomization down its file: a location from the base's spec would show.
    kustomization = root / "clusters/base/apps.yaml"
    kustomization.write_text("# moved\n# down\n" + kustomization.read_text())
    head = commit_all(git.Repo(root), "break apps")
    warm = review_repository(root, "prod", base, head, cache_dir=cache)
    cold = review_repository(root, "prod", base, head)
    failed = [r.finding for r in warm.findings if r.finding.check == "render-failed"]
    assert failed and failed == [r.finding for r in cold.findings if r.finding.check == "render-failed"]
    assert all(f.kustomization == TierId("flux-system", "apps") for f in failed)


def test_nothing_rendered_on_both_sides_is_never_pre_existing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A cluster that renders nothing before and after a change checked nothing: the CLI fails, the bot's status is failure."""
    from handlers.precheck import result_state

    root = tmp_path / "repo"
    (root / "clusters/dev").mkdir(parents=True)
    (root / "clusters/dev/kustomization.yaml").write_text("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: []\n")
    (root / "README.md").write_text("one\n")
    repo = init_repo(root)
    base = repo.head.commit.hexsha
    (root / "README.md").write_text("two\n")
    head = commit_all(repo, "docs")
    review = review_repository(root, "dev", base, head)
    assert [(r.finding.check, r.new) for r in review.findings] == [("nothing-rendered", True)]
    assert review.new_errors == 1
    assert result_state(review).status.state == "failure"
    assert main(["check", "--repo", str(root), "--cluster", "dev", "--base", base, "--head", head, "--no-cache"]) == 1
    assert "nothing-rendered" in capsys.readouterr().out


def test_seed_fix_says_it_resolves_the_deadlock(seed_pr: tuple[Path, str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, base, head = seed_pr
    args = ["check", "--repo", str(root), "--cluster", "prod", "--base", base, "--head", head, "--cache-dir", str(tmp_path / "c")]
    main([*args, "--format", "text"])
    assert "cold start: this change resolves a cold-start deadlock" in capsys.readouterr().out
    main([*args, "--format", "json"])
    cold = json.loads(capsys.readouterr().out)["cold_start"]
    assert cold["change"] == "this change resolves a cold-start deadlock" and cold["converges"] is True
    main([*args, "--format", "markdown"])
    assert "Cold start: this change resolves a cold-start deadlock" in capsys.readouterr().out
    # Reverting the fix introduces the deadlock again.
    main(["check", "--repo", str(root), "--cluster", "prod", "--base", head, "--head", base, "--cache-dir", str(tmp_path / "c"), "--format", "text"])
    assert "cold start: this change introduces a cold-start deadlock (apps, apps-vms, platform-config never Ready)" in capsys.readouterr().out


def _deadlock_pr(root: Path) -> tuple[str, str]:
    """Base: apps uses ExternalSecrets from infra without a dependsOn (a warning). Head: apps also applies a child
    Kustomization holding the dragonfly operator and a Dragonfly CR itself: apps deadlocks (mirceanton-shaped)."""
    from tests.fluxrepo import dump, flux_repo, ks, kustomization, obj, write_tree

    helm = lambda name, ns, **spec: obj("helm.toolkit.fluxcd.io/v2", "HelmRelease", name, ns, spec={"interval": "1h", **spec})  # noqa: E731
    write_tree(root, flux_repo(
        {"infra": ks("infra", "./infra", wait=True), "apps": ks("apps", "./apps")},
        {
            "infra/kustomization.yaml": kustomization("external-secrets.yaml"),
            "infra/external-secrets.yaml": dump(
                obj("v1", "Namespace", "external-secrets"),
                obj("source.toolkit.fluxcd.io/v1", "HelmRepository", "external-secrets", "external-secrets", spec={"interval": "1h", "url": "https://charts.external-secrets.io"}),
                helm("external-secrets", "external-secrets", chart={"spec": {"chart": "external-secrets", "version": "0.10.0", "sourceRef": {"kind": "HelmRepository", "name": "external-secrets"}}}),
            ),
            "apps/kustomization.yaml": kustomization("secret.yaml"),
            "apps/secret.yaml": dump(obj("v1", "Namespace", "web"), obj("external-secrets.io/v1", "ExternalSecret", "web", "web", spec={"target": {"name": "web"}})),
        },
        cluster="prod",
    ))
    repo = init_repo(root)
    base = repo.head.commit.hexsha
    write_tree(root, {
        "apps/kustomization.yaml": kustomization("secret.yaml", "operators.yaml", "cache.yaml"),
        "apps/operators.yaml": dump(ks("operators", "./apps/operators", wait=True)),
        "apps/operators/kustomization.yaml": kustomization("dragonfly.yaml"),
        "apps/operators/dragonfly.yaml": dump(
            obj("source.toolkit.fluxcd.io/v1", "OCIRepository", "dragonfly-operator", "web", spec={"interval": "1h", "url": "oci://ghcr.io/dragonflydb/dragonfly-operator/helm/dragonfly-operator", "ref": {"tag": "v1.1.11"}}),
            helm("dragonfly-operator", "web", chartRef={"kind": "OCIRepository", "name": "dragonfly-operator"}),
        ),
        "apps/cache.yaml": dump(obj("dragonflydb.io/v1alpha1", "Dragonfly", "cache", "web", spec={"replicas": 1})),
    })
    return base, commit_all(repo, "feat: dragonfly for web")


def test_a_sibling_regraded_by_a_new_deadlock_is_shown_under_its_cause(tmp_path: Path) -> None:
    from bot.engine.reporting.review_report import format_review_markdown, format_review_text
    from bot.pipeline.releases import ChartOptions
    from bot.pipeline.session import CheckOptions

    root = tmp_path / "repo"
    base, head = _deadlock_pr(root)
    review = review_repository(root, "prod", base, head, CheckOptions(charts=ChartOptions(render=False)))
    new = {(r.finding.check, r.finding.object.kind if r.finding.object else None): r for r in review.findings if r.new and r.finding.severity is Severity.ERROR}
    cause, sibling = new[("crd-not-ordered", "Dragonfly")], new[("crd-not-ordered", "ExternalSecret")]
    assert "never becomes Ready" in sibling.finding.message  # was "Ready in round 3 after 1 failed attempt" in the base
    assert cause.caused_by is None and sibling.caused_by == cause.finding
    assert review.new_errors == 1
    assert review.resolved == ()  # the base's warning is re-graded, not fixed
    text = format_review_text(review)
    assert text.splitlines()[0].startswith("❌ prod: 1 new error")
    assert "follows from it: error crd-not-ordered  flux-system/apps ExternalSecret/web/web" in text
    assert "fixed:" not in text
    comment = "".join(format_review_markdown([review]))
    assert comment.count("🆕 `crd-not-ordered`") == 1
    assert "  - follows from it: ❌ `crd-not-ordered` · `ExternalSecret/web`" in comment


def test_a_finding_hidden_by_a_render_failure_or_a_cycle_is_not_fixed() -> None:
    from bot.engine.reporting.review import resolved_findings, unjudged_tiers

    apps, infra = TierId("flux-system", "apps"), TierId("flux-system", "infra")
    warning = Finding("crd-not-ordered", Severity.WARNING, "needs the CRD", apps)
    failed = Finding("render-failed", Severity.ERROR, "kustomize build failed", apps)
    cycle = Finding("dependency-cycle", Severity.ERROR, "dependsOn forms a cycle: flux-system/apps → flux-system/infra → flux-system/apps; Flux never applies any of these Kustomizations", apps)
    assert unjudged_tiers((cycle,)) == {apps, infra}
    assert resolved_findings((failed,), (warning,)) == ()
    assert resolved_findings((cycle,), (warning,)) == ()
    assert resolved_findings((), (warning,)) == (warning,)  # judged and gone: fixed
    other = Finding("render-failed", Severity.ERROR, "kustomize build failed", infra)
    assert resolved_findings((other,), (warning,)) == (warning,)


def test_a_new_cycle_is_anchored_on_the_depends_on_the_change_added(tmp_path: Path) -> None:
    """The cycle's finding points at the `dependsOn` entry this change wrote, not at the cycle's first tier."""
    from tests.fluxrepo import dump, flux_repo, kustomization, ks, obj, write_tree

    def files(cycle: bool) -> dict[str, str]:
        tiers = {
            "alpha": ks("alpha", "./alpha"),
            "beta": ks("beta", "./beta", depends_on=["alpha"]),
            "gamma": ks("gamma", "./gamma", depends_on=["beta", "delta"] if cycle else ["beta"]),
            "delta": ks("delta", "./delta", depends_on=["gamma"]),
        }
        extra = {f"{n}/kustomization.yaml": kustomization("cm.yaml") for n in tiers}
        extra.update({f"{n}/cm.yaml": dump(obj("v1", "ConfigMap", n, "default")) for n in tiers})
        return flux_repo(tiers, extra)

    root = write_tree(tmp_path / "repo", files(False))
    repo = init_repo(root)
    base = repo.head.commit.hexsha
    write_tree(root, files(True))
    head = commit_all(repo, "gamma waits for delta")
    review = review_repository(root, "dev", base, head, cache_dir=tmp_path / "cache")
    [cycle] = [r for r in review.findings if r.finding.check == "dependency-cycle"]
    assert cycle.new
    location = cycle.finding.location
    assert location is not None and location.file == "clusters/dev/gamma.yaml"
    text = (root / location.file).read_text().splitlines()
    assert location.line is not None and text[location.line - 1].strip() == "- name: delta"
