"""The sanitised repository copy: what source-controller would ship, minus anything that reads outside."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from bot.pipeline.check import check_session
from bot.pipeline.session import Session
from bot.adapters.kustomize import locate_kustomize
from bot.adapters.sourceignore import IgnoreRules
from bot.adapters.workspace import DEFAULT_IGNORE, BootstrapView, Snapshot, TreeEntry, build_snapshot, lazy_snapshot, list_commit
from bot.engine.core.tree import blob_id, normalise_repo_path
from tests.fluxrepo import dump, flux_repo, ks, write_tree

FILES = {
    # root .sourceignore: plain glob, negation, dir-only, anchored, path with a slash, `**`
    ".sourceignore": "# a comment\n\n*.txt\n!keep.txt\nbuild/\n/rootonly.yaml\ndocs/*.md\n**/private/**\n",
    "a.txt": "x",
    "keep.txt": "x",
    "sub/b.txt": "x",
    "sub/keep.txt": "x",
    "build/x.yaml": "x",
    "sub/build/y.yaml": "x",
    "notdir/build": "a file named build",
    "rootonly.yaml": "x",
    "sub/rootonly.yaml": "x",
    "docs/r.md": "x",
    "docs/deep/r.md": "x",
    "z/private/s.yaml": "x",
    "z/public/s.yaml": "x",
    # nested .sourceignore: relative to its own directory
    "apps/.sourceignore": "local.yaml\n/anchored.yaml\n*.bak\n!important.bak\n",
    "apps/local.yaml": "x",
    "apps/x/local.yaml": "x",
    "local.yaml": "x",
    "apps/anchored.yaml": "x",
    "apps/x/anchored.yaml": "x",
    "apps/old.bak": "x",
    "apps/important.bak": "x",
    "other.bak": "x",
    # source-controller's default exclusions
    ".git/config": "x",
    ".git/objects/ab/cd": "x",
    ".gitignore": "x",
    "g/.gitmodules": "x",
    "img.png": "x",
    "deep/er/pic.png": "x",
    "sub/photo.jpg": "x",
    ".sops.yaml": "x",
    "sub/.sops.yaml": "x",
    "sub/x.sops.yaml": "kept: only the exact name is excluded",
    ".github/workflows/ci.yaml": "x",
    "sub/.github/ci.yaml": "x",
    "dist.tar.gz": "x",
    "sub/.flux.yaml": "x",
    "apps/app.yaml": "x",
}

SNAPSHOT_CASES = [
    ("a.txt", False, "root-glob"),
    ("sub/b.txt", False, "unanchored-glob-matches-in-subdirs"),
    ("keep.txt", True, "negation"),
    ("sub/keep.txt", True, "negation-in-subdir"),
    ("build/x.yaml", False, "dir-only-pattern"),
    ("sub/build/y.yaml", False, "dir-only-pattern-nested"),
    ("notdir/build", True, "dir-only-pattern-skips-files"),
    ("rootonly.yaml", False, "leading-slash-anchors"),
    ("sub/rootonly.yaml", True, "anchored-not-in-subdir"),
    ("docs/r.md", False, "slash-in-pattern-anchors"),
    ("docs/deep/r.md", True, "single-star-not-across-dirs"),
    ("z/private/s.yaml", False, "double-star"),
    ("z/public/s.yaml", True, "double-star-other-dir"),
    ("apps/local.yaml", False, "nested-sourceignore"),
    ("apps/x/local.yaml", False, "nested-sourceignore-below"),
    ("local.yaml", True, "nested-sourceignore-not-above"),
    ("apps/anchored.yaml", False, "nested-anchored"),
    ("apps/x/anchored.yaml", True, "nested-anchored-only-its-dir"),
    ("apps/old.bak", False, "nested-glob"),
    ("apps/important.bak", True, "nested-negation"),
    ("other.bak", True, "nested-rule-not-at-root"),
    ("apps/app.yaml", True, "plain-file"),
    (".git/config", False, "default-git-dir"),
    (".git/objects/ab/cd", False, "default-git-dir-deep"),
    (".gitignore", False, "default-gitignore"),
    ("g/.gitmodules", False, "default-gitmodules"),
    # A repository with ignore patterns of its own ships what the defaults would drop (only VCS files stay out).
    ("img.png", True, "own-patterns-keep-png"),
    ("sub/photo.jpg", True, "own-patterns-keep-jpg"),
    (".sops.yaml", True, "own-patterns-keep-sops-config"),
    (".github/workflows/ci.yaml", True, "own-patterns-keep-github"),
    ("dist.tar.gz", True, "own-patterns-keep-tarball"),
]

# Without any `.sourceignore` pattern, source-controller's defaults apply (pkg/sourceignore NewDefaultMatcher).
DEFAULT_CASES = [
    ("img.png", False, "default-png"),
    ("deep/er/pic.png", False, "default-png-deep"),
    ("sub/photo.jpg", False, "default-jpg"),
    (".sops.yaml", False, "default-sops-root"),
    ("sub/.sops.yaml", False, "default-sops-nested"),
    ("sub/x.sops.yaml", True, "sops-suffix-is-not-the-config"),
    (".github/workflows/ci.yaml", False, "default-github-root"),
    ("sub/.github/ci.yaml", True, "default-github-anchored"),
    ("dist.tar.gz", False, "default-tarball"),
    ("sub/.flux.yaml", False, "default-flux-yaml"),

]


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> Snapshot:
    base = tmp_path_factory.mktemp("snap")
    return build_snapshot(write_tree(base / "repo", FILES), base / "out")


@pytest.mark.parametrize("path,kept", [c[:2] for c in SNAPSHOT_CASES], ids=[c[2] for c in SNAPSHOT_CASES])
def test_sourceignore_and_defaults(snapshot: Snapshot, path: str, kept: bool) -> None:
    assert (snapshot.root / path).is_file() is kept
    assert (snapshot.read_text(path) is not None) is kept


@pytest.fixture(scope="module")
def default_snapshot(tmp_path_factory: pytest.TempPathFactory) -> Snapshot:
    base = tmp_path_factory.mktemp("snap-defaults")
    files = {path: text for path, text in FILES.items() if not path.endswith(".sourceignore")}
    files["apps/.sourceignore"] = "# only a comment: no pattern\n\n"
    return build_snapshot(write_tree(base / "repo", files), base / "out")


@pytest.mark.parametrize("path,kept", [c[:2] for c in DEFAULT_CASES], ids=[c[2] for c in DEFAULT_CASES])
def test_defaults_apply_without_own_patterns(default_snapshot: Snapshot, path: str, kept: bool) -> None:
    assert (default_snapshot.root / path).is_file() is kept


def test_ignored_paths_are_not_refusals(snapshot: Snapshot) -> None:
    assert snapshot.refused == ()
    assert not (snapshot.root / ".git").exists()  # an ignored dir is not created at all


IGNORE_RULE_CASES = [
    # pattern, base, path, is_dir, ignored
    ("*.txt", "", "a/b/c.txt", False, True),
    ("*.txt", "a", "c.txt", False, False),
    ("*.txt", "a", "a/b/c.txt", False, True),
    ("/top", "", "top", True, True),
    ("/top", "", "x/top", True, False),
    ("cache/", "", "x/cache", True, True),
    ("cache/", "", "x/cache", False, False),
    ("a/**/z", "", "a/z", False, True),
    ("a/**/z", "", "a/b/c/z", False, True),
    ("a?.yaml", "", "ab.yaml", False, True),
    ("a?.yaml", "", "a/.yaml", False, False),
    ("# not a rule", "", "# not a rule", False, False),
    ("", "", "anything", False, False),
    # character classes: ranges, sets, `!` and `^` negation, `]` first
    ("[a-c].yaml", "", "b.yaml", False, True),
    ("[a-c].yaml", "", "d.yaml", False, False),
    ("v[0-9][0-9]/", "", "x/v12", True, True),
    ("[!a-c].yaml", "", "b.yaml", False, False),
    ("[!a-c].yaml", "", "d.yaml", False, True),
    ("[^a-c].yaml", "", "d.yaml", False, True),
    ("[]x]", "", "]", False, True),
    ("[xy]/*.md", "apps", "apps/y/r.md", False, True),
    ("[xy]/*.md", "apps", "apps/z/r.md", False, False),
    ("[/]", "", "a/b", False, False),  # a class never matches the separator
    # escapes: a wildcard, a bracket, a leading `#` or `!`, a trailing space
    ("x\\*", "", "x*", False, True),
    ("x\\*", "", "xy", False, False),
    ("\\[x\\]", "", "[x]", False, True),
    ("\\[x\\]", "", "x", False, False),
    ("\\#notes", "", "#notes", False, True),
    ("\\!bang", "", "!bang", False, True),
    ("a?\\?", "", "ab?", False, True),
    ("a?\\?", "", "abc", False, False),
    ("trail\\ ", "", "trail ", False, True),
    ("trail   ", "", "trail", False, True),  # unescaped trailing spaces are dropped
    ("[z-a]", "", "b", False, False),  # an invalid range: the line matches nothing, as in git
]


@pytest.mark.parametrize(
    "pattern,base,path,is_dir,ignored", IGNORE_RULE_CASES, ids=[f"{c[0] or 'empty'}@{c[1] or 'root'}:{c[2]}" for c in IGNORE_RULE_CASES]
)
def test_ignore_rule(pattern: str, base: str, path: str, is_dir: bool, ignored: bool) -> None:
    rules = IgnoreRules()
    rules.add(pattern, base)
    assert rules.ignored(path, is_dir) is ignored


# Each rule set, written as a root (and a nested) `.gitignore` next to the same files, must leave exactly what
# `git ls-files --others --exclude-standard` lists: git is the reference for gitignore rules.
GIT_FILES = (
    "a.txt", "keep.txt", "sub/a.yaml", "sub/b.txt", "sub/keep.txt", "docs/r.md", "docs/keep.md", "docs/deep/r.md",
    "apps/x.yaml", "apps/y.txt", "apps/sub/z.yaml", "apps/v1/k.yaml", "z/private/s.yaml", "z/private/keep.yaml", "build/x",
    "notdir/build", "foo/bar/baz.yaml", "foo/keep", "b.yaml", "d.yaml", "#x", "!x", "x*", "xy", "[x]", "top.yaml", "q/top.yaml",
)
GIT_RULES = [
    ("*.txt\n!keep.txt", ""),
    ("docs/\n!docs/keep.md", ""),  # a file below an excluded directory stays out
    ("docs/*\n!docs/keep.md", ""),
    ("*\n!*/\n!*.yaml", ""),  # ignore everything but YAML, at any depth
    ("/*\n!/apps", ""),
    ("*.yaml\n!apps", ""),
    ("**/private/**\n!**/private/keep.yaml", ""),
    ("foo/**\n!foo/keep", ""),
    ("[a-c].yaml\n[!x]*/\n!docs/", ""),
    ("[^a-c].yaml", ""),
    ("\\#x\n\\!x\nx\\*\n\\[x\\]", ""),
    ("/top.yaml\napps/**/*.yaml", ""),
    ("*/", ""),
    ("a/**/z\nz/**/keep.yaml\nsub", ""),
    ("apps/\n!apps/x.yaml", ""),
    ("", "*.yaml\n!/x.yaml\nv[0-9]/"),
    ("apps/", "!x.yaml"),  # a nested file cannot re-include below a directory the root excludes
    ("*.yaml", "!sub/\n!*.yaml\n/sub/z.yaml"),
]


@pytest.mark.parametrize("root_rules,apps_rules", GIT_RULES, ids=[f"{r!r}+{a!r}" for r, a in GIT_RULES])
def test_ignore_rules_agree_with_git(tmp_path: Path, root_rules: str, apps_rules: str) -> None:
    files = dict.fromkeys(GIT_FILES, "x\n")
    files[".gitignore"] = files[".sourceignore"] = root_rules + "\n"
    files["apps/.gitignore"] = files["apps/.sourceignore"] = apps_rules + "\n"
    repo = write_tree(tmp_path / "repo", files)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    listed = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "--others", "--exclude-standard", "-z"], capture_output=True, text=True, check=True
    ).stdout
    by_git = {p for p in listed.split("\0") if p and os.path.basename(p) not in (".gitignore", ".sourceignore")}
    assert not any(rule.strip("/*") in path for rule in DEFAULT_IGNORE for path in GIT_FILES), "the defaults stay out of this"
    snapshot = build_snapshot(repo, tmp_path / "out")
    copied = {p.relative_to(snapshot.root).as_posix() for p in snapshot.root.rglob("*") if p.is_file() and p.name != ".sourceignore"}
    assert copied == by_git


def test_last_matching_rule_wins() -> None:
    rules = IgnoreRules()
    for line in ("*.yaml", "!keep*.yaml", "keep-not.yaml"):
        rules.add(line)
    assert [rules.ignored(p, False) for p in ("a.yaml", "keep.yaml", "keep-not.yaml")] == [True, False, True]


NORMALISE_CASES = [
    ("./apps", "apps"),
    ("/apps/", "apps"),
    ("apps/", "apps"),
    ("", ""),
    (".", ""),
    ("./", ""),
    ("/", ""),
    (" ./apps ", "apps"),
    ("apps//b", "apps/b"),
    ("./a/./b/", "a/b"),
    ("a/b/..", "a"),
    ("apps/../x", "x"),
    ("..", None),
    ("../x", None),
    ("a/../../x", None),
    ("/../x", None),
    ("./../../..", None),
]


@pytest.mark.parametrize("raw,normal", NORMALISE_CASES, ids=[repr(c[0]) for c in NORMALISE_CASES])
def test_normalise_repo_path(raw: str, normal: str | None) -> None:
    assert normalise_repo_path(raw) == normal


def test_symlinks_and_limits(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.yaml").write_text("secret: outside\n")
    repo = write_tree(
        tmp_path / "repo",
        {"shared/s.yaml": "kind: ConfigMap\n", "base/b.yaml": "b: 1\n", "big.yaml": "x" * 600, "small.yaml": "y\n"},
    )
    for link, target in {
        "out.yaml": str(outside / "secret.yaml"),
        "out-dir": str(outside),
        "rel-out.yaml": "../outside/secret.yaml",
        "dangling.yaml": "nowhere.yaml",
        "in.yaml": "shared/s.yaml",
        "in-dir": "base",
        "in-big.yaml": "big.yaml",
    }.items():
        os.symlink(target, repo / link)
    snap = build_snapshot(repo, tmp_path / "out", max_file_bytes=500)
    refused = {r.path: r.reason for r in snap.refused}
    assert refused == {
        "big.yaml": "is 600 bytes, over the 500-byte limit",
        "dangling.yaml": "is a dangling symlink",
        "in-big.yaml": "points at a file over the 500-byte limit",
        "out-dir": "is a symlink that resolves outside the repository; not read",
        "out.yaml": "is a symlink that resolves outside the repository; not read",
        "rel-out.yaml": "is a symlink that resolves outside the repository; not read",
    }
    for name in ("out.yaml", "out-dir", "rel-out.yaml", "dangling.yaml", "big.yaml", "in-big.yaml"):
        assert not os.path.lexists(snap.root / name)
    # inside links survive and can only land inside the snapshot
    assert snap.read_text("in.yaml") == "kind: ConfigMap\n"
    assert snap.read_text("in-dir/b.yaml") == "b: 1\n"
    assert (snap.root / "in-dir").resolve().is_relative_to(snap.root.resolve())
    assert snap.read_text("small.yaml") == "y\n"


def test_snapshot_never_writes_to_the_checkout(tmp_path: Path) -> None:
    """A render writes Flux's kustomization files next to the snapshot, never into it (its files may be hard links)."""
    cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"
    repo = write_tree(tmp_path / "repo", flux_repo({"a": ks("a", "./a", targetNamespace="t")}, {"a/x.yaml": cm, "b/kustomization.yaml": "resources: [x.yaml]\n", "b/x.yaml": cm}))
    write_tree(repo, {"clusters/dev/b.yaml": dump(ks("b", "./b", namePrefix="p-"))})
    before = {p.relative_to(repo): p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    snap = build_snapshot(repo, tmp_path / "out")
    report = check_session(Session.of(snap, locate_kustomize()), "dev")
    assert not report.findings
    assert {p.relative_to(repo): p.read_bytes() for p in repo.rglob("*") if p.is_file()} == before
    assert {p.relative_to(snap.root): p.read_bytes() for p in snap.root.rglob("*") if p.is_file()} == before


TO_REPO_PATH_CASES = [
    ("a/b.yaml", "a/b.yaml"),
    ("", ""),
    ("../outside", None),
]


@pytest.mark.parametrize("rel,expected", TO_REPO_PATH_CASES, ids=["inside", "root", "outside"])
def test_to_repo_path(tmp_path: Path, rel: str, expected: str | None) -> None:
    snap = build_snapshot(write_tree(tmp_path / "repo", {"a/b.yaml": "x"}), tmp_path / "out")
    assert snap.to_repo_path(os.path.normpath(snap.root / rel)) == expected


# --- list_commit + lazy_snapshot: a commit's listing, judged like a copy ------------------------------------------


def build_lazy_snapshot(tree_oid: str, entries: list[TreeEntry], read_blob, dest: Path) -> Snapshot | None:  # noqa: ANN001
    """What `gitrepo.commit_snapshot` does with a listing: None when the commit has a symlink."""
    listing = list_commit(entries, read_blob)
    return None if listing is None else lazy_snapshot(tree_oid, listing, read_blob, dest)

def _blob(path: str, oid: str, size: int = 10, mode: int = 0o100644) -> TreeEntry:
    return TreeEntry(mode, "blob", oid, size, path)


def _tree(path: str) -> TreeEntry:
    return TreeEntry(0o040000, "tree", "t" * 40, None, path)


def test_a_hand_made_tree_cannot_name_a_path_outside(tmp_path: Path) -> None:
    blobs = {"a" * 40: b"kind: A\n", "b" * 40: b"kind: B\n"}
    entries = [_tree("apps"), _blob("apps/ok.yaml", "a" * 40), _tree("apps/.."), _blob("apps/../../evil.yaml", "b" * 40), _blob("./dot.yaml", "b" * 40)]
    snapshot = build_lazy_snapshot("r" * 40, entries, blobs.__getitem__, tmp_path / "snap")
    assert snapshot is not None
    assert [r.path for r in snapshot.refused] == ["apps/.."]  # `./dot.yaml` hangs off no directory: never reached
    assert all(r.reason == "is not a plain path inside the repository" for r in snapshot.refused)
    snapshot.materialize([""])
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()) == ["snap/repo/apps/ok.yaml"]


def test_an_oversized_sourceignore_is_not_read(tmp_path: Path) -> None:
    def read_blob(oid: str) -> bytes:
        raise AssertionError(f"read {oid}")

    snapshot = build_lazy_snapshot("r" * 40, [_blob(".sourceignore", "c" * 40, size=10**9)], read_blob, tmp_path / "snap")
    assert snapshot is not None and [r.path for r in snapshot.refused] == [".sourceignore"]


def test_a_commit_with_a_symlink_is_left_to_the_copy(tmp_path: Path) -> None:
    assert build_lazy_snapshot("r" * 40, [_blob("link.yaml", "d" * 40, mode=0o120000)], lambda oid: b"", tmp_path / "snap") is None


def test_a_file_the_filesystem_cannot_hold_fails_its_tier_not_the_check(tmp_path: Path) -> None:
    from bot.pipeline.check import check_session
    from bot.adapters.kustomize import locate_kustomize
    long_name = "x" * 300 + ".yaml"  # git allows it; Linux file names stop at 255 bytes
    blobs = {"a" * 40: b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"}
    entries = [_tree("clusters"), _tree("clusters/dev"), _blob(f"clusters/dev/{long_name}", "a" * 40)]
    snapshot = build_lazy_snapshot("r" * 40, entries, blobs.__getitem__, tmp_path / "snap")
    report = check_session(Session.of(snapshot, locate_kustomize()), "dev")
    [failed] = [f for f in report.findings if f.check == "render-failed"]
    assert "cannot be written for kustomize (File name too long)" in failed.message


def test_materialize_returns_only_once_every_file_is_there(tmp_path: Path) -> None:
    """Two tiers sharing a base materialize it concurrently: neither may start kustomize on a half-written copy."""
    import threading
    import time

    def slow_blob(oid: str) -> bytes:
        time.sleep(0.005)
        return oid.encode()

    entries = [_tree("base"), *(_blob(f"base/f{i:02d}.yaml", f"{i:040d}") for i in range(20))]
    snapshot = build_lazy_snapshot("r" * 40, entries, slow_blob, tmp_path / "snap")
    missing: list[int] = []

    def build() -> None:
        snapshot.materialize(["base"])
        missing.append(sum(1 for i in range(20) if not (snapshot.root / f"base/f{i:02d}.yaml").is_file()))

    threads = [threading.Thread(target=build) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert missing == [0] * 6


def test_a_1000_deep_tree_is_walked_without_recursion_and_cut_at_the_depth_bound(tmp_path: Path) -> None:
    """Both walks (a copy, a commit's listing) are iterative: past MAX_DEPTH a directory is refused, not a RecursionError."""
    from bot.adapters.workspace import MAX_DEPTH

    src = tmp_path / "src"
    (src / "apps").mkdir(parents=True)
    deep, rels = str(src / "apps"), ["apps"]
    for _ in range(1000):  # os.mkdir, one level at a time: pathlib's mkdir(parents=True) recurses too
        deep += "/d"
        rels.append(rels[-1] + "/d")
        os.mkdir(deep)
    Path(deep, "x.yaml").write_text("x")
    Path(src, "apps", "ok.yaml").write_text("x")
    too_deep = rels[MAX_DEPTH]  # the first directory past the bound (apps is depth 1)
    try:
        snap = build_snapshot(src, tmp_path / "out")
        assert [(r.path, r.reason) for r in snap.refused] == [(too_deep, f"is nested more than {MAX_DEPTH} directories deep; not read")]
        assert (snap.root / rels[MAX_DEPTH - 1]).is_dir() and not (snap.root / too_deep).exists()
        assert (snap.root / "apps/ok.yaml").is_file()
    finally:
        subprocess.run(["rm", "-rf", str(src), str(tmp_path / "out")], check=True)  # shutil.rmtree recurses too

    entries = [_tree(r) for r in rels] + [_blob(rels[-1] + "/x.yaml", "a" * 40), _blob("apps/ok.yaml", "b" * 40)]
    listing = list_commit(entries, lambda oid: b"")
    assert listing is not None
    assert [(r.path, r.reason) for r in listing.refused] == [(too_deep, f"is nested more than {MAX_DEPTH} directories deep; not read")]
    assert rels[MAX_DEPTH - 1] in listing.dirs and too_deep not in listing.dirs
    assert set(listing.files) == {"apps/ok.yaml"}


@pytest.mark.parametrize("ignore,png_kept", [(None, False), ("# comment only\n", False), ("scripts/\n", True)], ids=["none", "comment-only", "own-pattern"])
def test_a_commit_drops_the_defaults_when_it_has_ignore_patterns(tmp_path: Path, ignore: str | None, png_kept: bool) -> None:
    """szinn/k8s-homelab's configMapGenerator of `icons/*.png`: with a `.sourceignore`, source-controller ships them."""
    blobs = {"a" * 40: b"x", "b" * 40: (ignore or "").encode()}
    entries = [_tree("app"), _blob("app/icon.png", "a" * 40), _blob(".gitattributes", "a" * 40)]
    if ignore is not None:
        entries.append(_blob("app/.sourceignore", "b" * 40, size=len(ignore)))
    snapshot = build_lazy_snapshot("r" * 40, entries, blobs.__getitem__, tmp_path / "snap")
    assert snapshot is not None
    assert snapshot.is_file("app/icon.png") is png_kept
    assert not snapshot.is_file(".gitattributes")  # VCS files never ship


# --- the bootstrap view: the whole repository, as a bootstrap run from the checkout reads it --------------------

# ahgraber/homelab-gitops-k3s: `.sourceignore` hides bootstrap/ and every dotfile from Flux's artifact.
HIDDEN_FILES = {
    ".sourceignore": "bootstrap/\n.*\ndocs/*.md\n",
    ".justfile": "bootstrap:\n    ./scripts/bootstrap/sync_hrs.sh\n",
    ".taskfiles/bootstrap.yaml": "tasks: {}\n",
    "bootstrap/helmfile.d/00-crds.yaml": "releases: [{name: a, namespace: a, chart: x/a}]\n",
    "bootstrap/helmfile.d/01-apps.yaml": "releases: [{name: b, namespace: b, chart: x/b}]\n",
    "bootstrap/huge.yaml": "x" * 2048,
    "docs/intro.md": "hello\n",
    "docs/kept.yaml": "kind: ConfigMap\n",
    "scripts/bootstrap/sync_hrs.sh": "helmfile --file bootstrap/helmfile.d/01-apps.yaml sync\n",
    "clusters/dev/kustomization.yaml": "resources: []\n",
}


def test_a_working_tree_view_reads_what_only_ignore_rules_hid(tmp_path: Path) -> None:
    source = write_tree(tmp_path / "repo", HIDDEN_FILES)
    (source / ".git").mkdir()
    (source / ".git/config").write_text("[core]\n")
    outside = write_tree(tmp_path / "outside", {"secret.yaml": "kind: Secret\n", "dir/x.yaml": "kind: Secret\n"})
    os.symlink(outside / "secret.yaml", source / "bootstrap/helmfile.d/02-out.yaml")  # out, inside an ignored directory
    os.symlink(outside / "dir", source / ".outside")  # out, with an ignored name
    snapshot = build_snapshot(source, tmp_path / "out", max_file_bytes=1024)
    assert snapshot.read_text("bootstrap/helmfile.d/01-apps.yaml") is None and snapshot.list_dir("") == (["clusters", "docs", "scripts"], [])
    view = snapshot.bootstrap_view()
    assert view is snapshot.bootstrap_view()  # one per snapshot: its read bounds hold for the whole discovery
    assert view.read_text("bootstrap/helmfile.d/01-apps.yaml") == HIDDEN_FILES["bootstrap/helmfile.d/01-apps.yaml"]
    assert view.read_text(".justfile") == HIDDEN_FILES[".justfile"]
    assert view.list_dir("") == ([".taskfiles", "bootstrap", "clusters", "docs", "scripts"], [".justfile", ".sourceignore"])
    assert view.list_dir("docs") == ([], ["intro.md", "kept.yaml"])  # an ignored file beside a kept one
    assert view.list_dir("bootstrap/helmfile.d") == ([], ["00-crds.yaml", "01-apps.yaml"])  # the symlink out: not listed
    assert view.read_bytes("bootstrap/helmfile.d/02-out.yaml") is None and not view.exists(".outside")
    assert not view.exists(".git") and view.read_bytes(".git/config") is None
    assert view.read_bytes("bootstrap/huge.yaml") is None  # over the size limit: refused as in the artifact
    assert view.read_text("scripts/bootstrap/sync_hrs.sh") == HIDDEN_FILES["scripts/bootstrap/sync_hrs.sh"]  # the artifact's own
    assert view.file_digest("bootstrap/helmfile.d/00-crds.yaml") == blob_id(HIDDEN_FILES["bootstrap/helmfile.d/00-crds.yaml"].encode())
    assert [r.path for r in snapshot.refused] == [".outside"]  # refused for safety, whatever .sourceignore says
    assert not (snapshot.root / "bootstrap").exists()  # never copied: read from the checkout when asked
    # A directory swapped for a symlink out after the walk: nothing is read through it.
    (source / "bootstrap/helmfile.d/00-crds.yaml").rename(tmp_path / "moved.yaml")
    os.rename(source / "bootstrap", tmp_path / "gone")
    write_tree(outside / "bootstrap", {"helmfile.d/00-crds.yaml": "kind: Secret\n"})
    os.symlink(outside / "bootstrap", source / "bootstrap")
    assert view.read_bytes("bootstrap/helmfile.d/00-crds.yaml") is None


def test_a_view_reads_a_bounded_number_of_hidden_files(tmp_path: Path) -> None:
    snapshot = build_snapshot(write_tree(tmp_path / "repo", HIDDEN_FILES), tmp_path / "out")
    assert snapshot.hidden is not None
    view = BootstrapView(snapshot, snapshot.hidden, max_reads=2)
    assert view.read_bytes(".justfile") is not None and view.read_bytes(".taskfiles/bootstrap.yaml") is not None
    assert view.read_bytes(".justfile") is not None  # read again: no new file
    assert view.read_bytes("bootstrap/helmfile.d/00-crds.yaml") is None  # a third file: over the bound
    assert view.read_bytes("docs/kept.yaml") is not None  # the artifact's own files are not counted


def test_a_commit_view_reads_hidden_blobs_lazily(tmp_path: Path) -> None:
    import git  # GitPython, as bot/adapters/git.py reads a commit

    from bot.adapters.git import commit_snapshot

    work = write_tree(tmp_path / "repo", HIDDEN_FILES)
    repo = git.Repo.init(work)
    repo.git.add(A=True)
    repo.index.commit("seed")
    with commit_snapshot(work, "HEAD", tmp_path / "snap") as (_, snapshot):
        assert snapshot.tree is not None  # the lazy kind: no symlink in the commit
        assert snapshot.read_text("bootstrap/helmfile.d/01-apps.yaml") is None and snapshot.is_file("docs/kept.yaml")
        view = snapshot.bootstrap_view()
        assert view.read_text("bootstrap/helmfile.d/01-apps.yaml") == HIDDEN_FILES["bootstrap/helmfile.d/01-apps.yaml"]
        assert view.list_dir("") == ([".taskfiles", "bootstrap", "clusters", "docs", "scripts"], [".justfile", ".sourceignore"])
        assert view.is_dir("bootstrap/helmfile.d") and view.is_file("docs/intro.md") and not view.is_file("docs/nothing.md")
        assert view.file_digest(".justfile") == blob_id(HIDDEN_FILES[".justfile"].encode())
        snapshot.materialize([""])
        assert not (snapshot.root / "bootstrap").exists()  # a build never sees it
    listing = list_commit(
        [_blob(".sourceignore", "i" * 40, size=9), _tree("bootstrap"), _blob("bootstrap/big.yaml", "b" * 40, size=10**9), _blob("bootstrap/ok.yaml", "o" * 40)],
        {"i" * 40: b"bootstrap\n"}.__getitem__,
    )
    assert listing is not None and set(listing.hidden) == {"bootstrap/ok.yaml"} and listing.hidden_dirs == {"bootstrap"}
