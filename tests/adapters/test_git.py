"""Cached bare mirrors on real git repositories: a local bare "origin" stands in for GitHub."""

from __future__ import annotations

import base64
import fcntl
import os
import shutil
import threading
import time
from pathlib import Path

import git
import pytest

from bot.adapters import git as gitrepo
from bot.engine.core.errors import InfraError, InputError, UserError
from bot.adapters.git import FetchedRevisions, GitError, Mirrors, changed_files, export_tree
from tests.fakes.service import Origin as BaseOrigin

TOKEN = "ghs_NotARealTokenButLongEnough0123456789"
TOKEN_B64 = base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
REAL_GIT = shutil.which("git")


class Origin(BaseOrigin):
    """main = base; refs/pull/7/head = a change with a symlink and an executable; refs/heads/side elsewhere."""

    head: str
    side: str

    @property
    def url(self) -> str:
        return self.bare.as_uri()


def _seed(work: Path) -> None:
    (work / "apps").mkdir(parents=True)
    (work / "apps/kustomization.yaml").write_text("resources: [app.yaml]\n")
    (work / "apps/app.yaml").write_text("kind: ConfigMap\n")
    (work / "README.md").write_text("hello\n")


def _commit(repo: git.Repo, message: str) -> str:
    repo.git.add(A=True)
    repo.index.commit(message)
    return repo.head.commit.hexsha


@pytest.fixture()
def origin(tmp_path: Path) -> Origin:
    """main = base; refs/pull/7/head = a change with a symlink and an executable; refs/heads/side elsewhere."""
    origin = Origin(tmp_path, _seed)
    work, work_dir, base = origin.repo, origin.work, origin.main
    work.git.checkout("-b", "pr")
    (work_dir / "apps/app.yaml").write_text("kind: Secret\n")
    (work_dir / "README.md").unlink()
    os.symlink("apps/app.yaml", work_dir / "link.yaml")
    (work_dir / "hook.sh").write_text("#!/bin/sh\n")
    (work_dir / "hook.sh").chmod(0o755)
    origin.head = _commit(work, "head")
    origin.publish(origin.head, "refs/pull/7/head")  # what GitHub does for a PR: a ref outside refs/heads (the branch lives in a fork)

    work.git.checkout("-b", "side", base)
    (work_dir / "side.txt").write_text("side\n")
    origin.side = _commit(work, "side")
    origin.publish("side", "refs/heads/side")
    work.git.checkout("main")
    return origin


@pytest.fixture()
def mirrors(tmp_path: Path) -> Mirrors:
    return Mirrors(tmp_path / "mirrors", timeout=60)


@pytest.fixture()
def fake_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Put a `git` first on PATH that runs `fetch_body` for `git fetch` and the real git for everything else."""
    assert REAL_GIT

    def install(fetch_body: str, version_line: str | None = None) -> Path:
        bindir = tmp_path / "fakebin"
        bindir.mkdir(exist_ok=True)
        script = bindir / "git"
        version = f'if [ "$1" = "--version" ]; then echo "{version_line}"; exit 0; fi\n' if version_line else ""
        script.write_text(f'#!/bin/sh\n{version}case " $* " in\n  *" fetch "*)\n{fetch_body}\n  ;;\nesac\nexec "{REAL_GIT}" "$@"\n')
        script.chmod(0o755)
        monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
        return bindir

    return install


def _dead(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


# --- fetching ---------------------------------------------------------------------------------------------------


def test_revisions_fetches_base_and_head_into_a_fresh_bare_mirror(mirrors: Mirrors, origin: Origin) -> None:
    fetched = mirrors.revisions(origin.url, "refs/heads/main", "refs/pull/7/head")
    assert fetched == FetchedRevisions(mirrors.path_for(origin.url), origin.main, origin.head)
    assert fetched.mirror.is_relative_to(mirrors.root) and fetched.mirror.name.endswith(".git")
    assert git.Repo(fetched.mirror).bare
    assert (mirrors.init_count, mirrors.fetch_count) == (1, 1)  # both refs in one fetch
    refs = git.Repo(fetched.mirror).git.for_each_ref(format="%(refname)").split()
    assert sorted(refs) == ["refs/heads/main", "refs/pull/7/head"]  # what the run needs, no tags, no other branches


def test_refetch_reuses_the_cached_mirror_and_sees_a_moved_ref(mirrors: Mirrors, origin: Origin) -> None:
    first = mirrors.fetch(origin.url, ["refs/heads/main"])
    (Path(origin.work) / "new.txt").write_text("new\n")
    moved = _commit(origin.repo, "moved main")
    origin.publish("main", "refs/heads/main")
    again = Mirrors(mirrors.root)  # a later run: a new instance on the same root
    second = again.revisions(origin.url, "refs/heads/main", "refs/heads/main")
    assert second.mirror == first
    assert second.base_sha == moved
    assert (mirrors.init_count, mirrors.fetch_count) == (1, 1)
    assert (again.init_count, again.fetch_count) == (0, 1)


def test_local_path_and_file_url_share_a_mirror(mirrors: Mirrors, origin: Origin) -> None:
    assert mirrors.path_for(str(origin.bare)) == mirrors.path_for(origin.url)
    assert mirrors.fetch(str(origin.bare), ["refs/heads/main"]) == mirrors.path_for(origin.url)


def test_fetch_by_sha_and_skip_when_already_present(mirrors: Mirrors, origin: Origin) -> None:
    mirror = mirrors.fetch(origin.url, [origin.side.upper()])  # only reachable from refs/heads/side on the origin
    assert gitrepo.resolve(mirror, origin.side) == origin.side
    assert mirrors.fetch_count == 1
    fetched = mirrors.revisions(origin.url, origin.side, origin.side)
    assert (fetched.base_sha, fetched.head_sha) == (origin.side, origin.side)
    assert mirrors.fetch_count == 1  # a commit never changes: no second round trip
    mirrors.revisions(origin.url, origin.side, "refs/pull/7/head")
    assert mirrors.fetch_count == 2  # refs move: always asked for


def test_checkout_exports_and_removes_its_directory(mirrors: Mirrors, origin: Origin) -> None:
    fetched = mirrors.revisions(origin.url, "refs/heads/main", "refs/pull/7/head")
    with mirrors.checkout(fetched.mirror, fetched.head_sha) as tree:
        assert (tree / "apps/app.yaml").read_text() == "kind: Secret\n"
        assert not (tree / "README.md").exists()
        assert (tree / "link.yaml").is_symlink()
    assert not tree.exists() and not tree.parent.exists()
    with pytest.raises(RuntimeError), mirrors.checkout(fetched.mirror, fetched.base_sha) as tree:
        assert (tree / "README.md").is_file()
        raise RuntimeError("the run failed")
    assert not tree.exists()


def test_changed_files_on_the_mirror(mirrors: Mirrors, origin: Origin) -> None:
    fetched = mirrors.revisions(origin.url, "refs/heads/main", "refs/pull/7/head")
    expected = frozenset({"apps/app.yaml", "README.md", "link.yaml", "hook.sh"})
    assert mirrors.changed_files(fetched.mirror, fetched.base_sha, fetched.head_sha) == expected
    assert changed_files(fetched.mirror, "refs/heads/main", "refs/pull/7/head") == expected
    with pytest.raises(UserError, match="bare"):
        changed_files(fetched.mirror, fetched.base_sha, None)


def test_export_tree_from_a_mirror_keeps_symlinks_and_modes(mirrors: Mirrors, origin: Origin, tmp_path: Path) -> None:
    fetched = mirrors.revisions(origin.url, "refs/heads/main", "refs/pull/7/head")
    dest = tmp_path / "export"
    assert export_tree(fetched.mirror, fetched.head_sha, dest) == origin.head
    link = dest / "link.yaml"
    assert link.is_symlink() and os.readlink(link) == "apps/app.yaml"
    assert link.read_text() == "kind: Secret\n"  # resolves inside the export
    assert os.access(dest / "hook.sh", os.X_OK) and not os.access(dest / "apps/app.yaml", os.X_OK)


def test_unknown_ref_is_a_git_error(mirrors: Mirrors, origin: Origin) -> None:
    with pytest.raises(GitError, match="refs/heads/nope"):
        mirrors.revisions(origin.url, "refs/heads/main", "refs/heads/nope")


def test_failing_fetch_is_a_clear_git_error_and_leaves_no_mirror(mirrors: Mirrors, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-origin.git"
    with pytest.raises(GitError) as caught:
        mirrors.fetch(missing.as_uri(), ["refs/heads/main"])
    message = str(caught.value)
    assert isinstance(caught.value, InfraError)
    assert message.startswith(f"git fetch from {missing} failed (exit 128)")
    assert "does not appear to be a git repository" in message
    assert not mirrors.path_for(missing.as_uri()).exists()


# --- credentials ----------------------------------------------------------------------------------------------


def test_invocation_carries_the_token_only_in_a_scrubbed_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "GIT_TRACE_CURL", "GIT_SSH_COMMAND", "GIT_DIR", "SECRET"):
        monkeypatch.setenv(name, "leak")
    argv, env = gitrepo._git_invocation(
        "git", tmp_path / "m.git", ["fetch", "--", "origin", "+refs/heads/main:refs/heads/main"], home=tmp_path, token=TOKEN
    )
    assert argv == ["git", "--git-dir", str(tmp_path / "m.git"), "fetch", "--", "origin", "+refs/heads/main:refs/heads/main"]
    assert not any(TOKEN in a or TOKEN_B64 in a for a in argv)  # what `ps` would show
    assert env["GIT_CONFIG_KEY_0"] == "http.extraHeader"
    assert env["GIT_CONFIG_VALUE_0"] == f"Authorization: Basic {TOKEN_B64}"
    assert [v for v in env.values() if TOKEN_B64 in v] == [env["GIT_CONFIG_VALUE_0"]]
    assert not any(TOKEN in v for v in env.values())  # only its base64 form, and only there
    count = int(env["GIT_CONFIG_COUNT"])
    config_keys = {f"GIT_CONFIG_{kind}_{i}" for kind in ("KEY", "VALUE") for i in range(count)}
    base = {"PATH", "HOME", "LANG", "LC_ALL", "GIT_TERMINAL_PROMPT", "GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_GLOBAL", "GIT_ASKPASS", "GCM_INTERACTIVE", "GIT_CONFIG_COUNT"}
    assert set(env) == base | config_keys
    assert (env["HOME"], env["GIT_TERMINAL_PROMPT"], env["GIT_CONFIG_NOSYSTEM"], env["GIT_CONFIG_GLOBAL"]) == (str(tmp_path), "0", "1", os.devnull)
    _, anonymous = gitrepo._git_invocation("git", None, ["--version"], home=tmp_path)
    assert "http.extraHeader" not in anonymous.values()


def test_mask_replaces_every_form_of_the_token() -> None:
    secrets = gitrepo._secrets(TOKEN, "http://user:pr0xy-pass@proxy:3128")
    text = f"a {TOKEN} b {TOKEN_B64} c Authorization: Basic {TOKEN_B64} d {base64.b64encode(TOKEN.encode()).decode()} e pr0xy-pass"
    masked = gitrepo._mask(text, secrets)
    assert TOKEN not in masked and TOKEN_B64 not in masked and "pr0xy-pass" not in masked
    assert masked.count("***") == 5


def test_failed_authenticated_fetch_leaks_the_token_nowhere(mirrors: Mirrors) -> None:
    url = "https://127.0.0.1:1/owner/repo.git"  # nothing listens on port 1: a fast, offline failure
    with pytest.raises(GitError) as caught:
        Mirrors(mirrors.root, credentials=lambda: TOKEN).fetch(url, ["refs/heads/main"])
    message = str(caught.value)
    assert "https://127.0.0.1:1/owner/repo" in message
    assert TOKEN not in message and TOKEN_B64 not in message
    for path in mirrors.root.rglob("*"):
        if path.is_file():
            assert TOKEN not in path.read_text(errors="replace") and TOKEN_B64 not in path.read_text(errors="replace")


def test_token_reaches_git_through_the_environment_and_is_masked_in_its_output(mirrors: Mirrors, origin: Origin, fake_git, tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    fake_git(
        f'    echo "$*" > "{seen}.argv"; echo "$GIT_CONFIG_VALUE_0" > "{seen}.header"\n'
        '    echo "fatal: header was $GIT_CONFIG_VALUE_0 for x-access-token:' + TOKEN + '" >&2; exit 128'
    )
    with pytest.raises(GitError) as caught:
        Mirrors(mirrors.root, credentials=lambda: TOKEN).fetch(origin.url, ["refs/heads/main"])
    message = str(caught.value)
    assert "fatal: header was Authorization: Basic *** for x-access-token:***" in message
    assert TOKEN not in message and TOKEN_B64 not in message
    assert Path(f"{seen}.header").read_text().strip() == f"Authorization: Basic {TOKEN_B64}"
    argv = Path(f"{seen}.argv").read_text()
    assert "fetch --prune --no-tags" in argv and TOKEN not in argv and TOKEN_B64 not in argv


def test_the_mirror_config_never_holds_the_token(mirrors: Mirrors, origin: Origin) -> None:
    fetched = Mirrors(mirrors.root, credentials=lambda: TOKEN).revisions(origin.url, "refs/heads/main", "refs/pull/7/head")
    config = (fetched.mirror / "config").read_text()
    assert TOKEN not in config and TOKEN_B64 not in config and "extraHeader" not in config
    assert f"url = {origin.bare}" in config


# --- refusals ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "ssh://git@github.com/owner/repo.git",
        "git@github.com:owner/repo.git",
        "git://github.com/owner/repo.git",
        "http://github.com/owner/repo.git",
        "ext::sh -c touch% /tmp/pwned",
        "fd::17",
        "-uhack",
        "--upload-pack=touch /tmp/pwned",
        "file://otherhost/srv/repo.git",
        "https://github.com/owner/repo.git\n[core]",
        "https://github.com/owner/../../etc",
        "https://github.com/",
        "relative/path",
        "",
    ],
)
def test_refused_clone_urls(mirrors: Mirrors, url: str) -> None:
    with pytest.raises(GitError, match="refusing"):
        mirrors.fetch(url, ["refs/heads/main"])
    assert not mirrors.root.exists()  # refused before anything touched the disk


def test_credentials_in_the_url_are_refused_without_echoing_them(mirrors: Mirrors) -> None:
    with pytest.raises(GitError, match="credentials") as caught:
        mirrors.fetch(f"https://x-access-token:{TOKEN}@github.com/owner/repo.git", ["refs/heads/main"])
    assert TOKEN not in str(caught.value)


@pytest.mark.parametrize("ref", ["main", "HEAD", "--upload-pack=x", "refs/heads/../x", "refs/heads/a:refs/heads/b", "+refs/heads/main", "refs/heads/a b", "refs/*", "abc123"])
def test_refused_refs(mirrors: Mirrors, origin: Origin, ref: str) -> None:
    with pytest.raises(GitError, match="refusing to fetch"):
        mirrors.fetch(origin.url, [ref])


def test_mirror_paths_are_sanitised(tmp_path: Path) -> None:
    mirrors = Mirrors(tmp_path)
    assert mirrors.path_for("https://GitHub.com/owner/repo.git") == tmp_path / "github.com/owner/repo.git"
    assert mirrors.path_for("https://github.com/owner/repo") == tmp_path / "github.com/owner/repo.git"
    odd = mirrors.path_for("https://ghe.example:8443/team/we%20ird/.hidden.git")
    assert odd.is_relative_to(tmp_path / "ghe.example_8443/team")
    assert odd.name.startswith("_.hidden-") and odd.name.endswith(".git") and "%" not in str(odd)


# --- locking, timeouts, the git binary ---------------------------------------------------------------------------


def test_concurrent_fetches_into_one_mirror_are_serialised(origin: Origin, fake_git, tmp_path: Path) -> None:
    events = tmp_path / "events"
    fake_git(f'    echo "start $$" >> "{events}"; sleep 0.3; "{REAL_GIT}" "$@"; rc=$?; echo "end $$" >> "{events}"; exit $rc')
    root = tmp_path / "mirrors"
    results: list[object] = []

    def run(ref: str) -> None:
        try:
            results.append(Mirrors(root, timeout=60).revisions(origin.url, "refs/heads/main", ref))
        except Exception as exc:  # pragma: no cover - reported by the assertion below
            results.append(exc)

    threads = [threading.Thread(target=run, args=(ref,)) for ref in ("refs/pull/7/head", "refs/heads/side")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert all(isinstance(r, FetchedRevisions) for r in results) and len(results) == 2, results
    lines = [line.split() for line in events.read_text().splitlines()]
    assert [kind for kind, _ in lines] == ["start", "end", "start", "end"]  # never two fetches at once
    assert lines[0][1] == lines[1][1] and lines[2][1] == lines[3][1]
    assert {r.head_sha for r in results} == {origin.head, origin.side}  # type: ignore[union-attr]


def test_a_mirror_locked_by_another_process_times_out(mirrors: Mirrors, origin: Origin) -> None:
    mirror = mirrors.path_for(origin.url)
    mirror.parent.mkdir(parents=True)
    waiting = Mirrors(mirrors.root, timeout=0.3)
    with open(mirror.with_name(mirror.name + ".lock"), "a+b") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another process's fetch, as far as flock can tell
        with pytest.raises(GitError, match="waiting for the lock"):
            waiting.fetch(origin.url, ["refs/heads/main"])
    assert waiting.fetch(origin.url, ["refs/heads/main"]) == mirror  # free again


def test_fetch_timeout_kills_git_and_its_children(origin: Origin, fake_git, tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    fake_git(f'    sleep 30 & echo $! > "{pidfile}"; wait; exit 0')
    mirrors = Mirrors(tmp_path / "mirrors", timeout=1.0)
    started = time.monotonic()
    with pytest.raises(GitError, match=r"git fetch from .* timed out after 1s"):
        mirrors.fetch(origin.url, ["refs/heads/main"])
    assert time.monotonic() - started < 10
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while not _dead(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _dead(child)  # the whole process group went, not just git


def test_old_git_is_refused(mirrors: Mirrors, origin: Origin, fake_git) -> None:
    fake_git("    exit 0", version_line="git version 2.30.9")
    with pytest.raises(GitError, match=r"git 2\.31 or newer is needed \(found 2\.30"):
        mirrors.fetch(origin.url, ["refs/heads/main"])


def test_missing_git_is_a_git_error(mirrors: Mirrors, origin: Origin, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(GitError, match="not found on PATH"):
        mirrors.fetch(origin.url, ["refs/heads/main"])


def test_export_ignores_export_attributes(tmp_path: Path) -> None:
    """A PR cannot hide a file from the check with `export-ignore` (Flux clones; it does not `git archive`)."""
    from bot.adapters.git import export_tree
    from tests.gitrepo import init_repo

    root = tmp_path / "r"
    root.mkdir()
    (root / ".gitattributes").write_text("hidden.yaml export-ignore\nsubst.txt export-subst\n")
    (root / "hidden.yaml").write_text("kind: ConfigMap\n")
    (root / "subst.txt").write_text("$Format:%H$\n")
    (root / "link").symlink_to("/etc/passwd")
    repo = init_repo(root)
    out = tmp_path / "out"
    export_tree(root, repo.head.commit.hexsha, out)
    assert (out / "hidden.yaml").read_text() == "kind: ConfigMap\n"
    assert (out / "subst.txt").read_text() == "$Format:%H$\n"
    assert os.readlink(out / "link") == "/etc/passwd"


def test_export_by_archive_keeps_symlinks_and_modes(tmp_path: Path) -> None:
    from bot.adapters.git import export_tree
    from tests.gitrepo import init_repo

    root = tmp_path / "r"
    (root / "d").mkdir(parents=True)
    (root / "d/run.sh").write_text("#!/bin/sh\n")
    (root / "d/run.sh").chmod(0o755)
    (root / "d/in-repo").symlink_to("run.sh")
    repo = init_repo(root)
    out = tmp_path / "out"
    export_tree(root, repo.head.commit.hexsha, out)
    assert os.access(out / "d/run.sh", os.X_OK)
    assert os.readlink(out / "d/in-repo") == "run.sh"


# --- commit_snapshot: a commit read lazily, equal to the exported copy ------------------------------------------

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "home-ops"


def _disk_tree(root: Path) -> dict[str, str]:
    """Every path below `root` → 'dir' or the file's content (what a snapshot copy holds)."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        out[rel] = "dir" if path.is_dir() else path.read_bytes().decode("utf-8", "replace")
    return out


@pytest.fixture
def example_commit(tmp_path: Path) -> tuple[Path, str]:
    from tests.gitrepo import commit_all, init_repo

    root = tmp_path / "repo"
    repo = init_repo(root, EXAMPLE)
    (root / ".sourceignore").write_text("docs/\n*.md\n!keep.md\n")
    (root / "docs").mkdir()
    (root / "docs/notes.yaml").write_text("kind: ConfigMap\n")
    (root / "keep.md").write_text("kept\n")
    (root / "apps/vms/unifi/.sourceignore").write_text("scratch.yaml\n")
    (root / "apps/vms/unifi/scratch.yaml").write_text("not: shipped\n")
    (root / "logo.png").write_bytes(b"\x89PNG")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    return root, commit_all(repo, "extras")


def test_commit_snapshot_writes_nothing_until_asked(example_commit: tuple[Path, str], tmp_path: Path) -> None:
    root, sha = example_commit
    with gitrepo.commit_snapshot(root, sha, tmp_path / "lazy") as (resolved, snapshot):
        assert resolved == sha and snapshot.tree is not None
        assert list(snapshot.root.iterdir()) == []
        assert snapshot.is_dir("apps/vms") and snapshot.is_file("apps/kustomization.yaml")
        assert snapshot.read_text("apps/kustomization.yaml") == (root / "apps/kustomization.yaml").read_text()
        snapshot.materialize(["apps/vms"], ["clusters/base/apps.yaml"])
        written = sorted(p.relative_to(snapshot.root).as_posix() for p in snapshot.root.rglob("*") if p.is_file())
        assert written == ["apps/vms/unifi/.sourceignore", "apps/vms/unifi/00-namespace.yaml", "apps/vms/unifi/20-datavolume.yaml", "apps/vms/unifi/30-vm.yaml", "clusters/base/apps.yaml"]


def test_commit_snapshot_holds_what_the_exported_copy_holds(example_commit: tuple[Path, str], tmp_path: Path) -> None:
    """Same paths, contents, ignore rules, refusals, executable bits and content ids as export + build_snapshot."""
    from bot.adapters.workspace import build_snapshot

    root, sha = example_commit
    export_tree(root, sha, tmp_path / "export")
    eager = build_snapshot(tmp_path / "export", tmp_path / "eager")
    with gitrepo.commit_snapshot(root, sha, tmp_path / "lazy") as (_, lazy):
        lazy.materialize([""])
        assert _disk_tree(lazy.root) == _disk_tree(eager.root)
        assert "docs" not in _disk_tree(lazy.root) and "keep.md" in _disk_tree(lazy.root)
        assert "apps/vms/unifi/scratch.yaml" not in _disk_tree(lazy.root)
        assert os.access(lazy.root / "run.sh", os.X_OK)
        assert lazy.refused == eager.refused
        for rel in _disk_tree(eager.root):
            assert lazy.is_dir(rel) == eager.is_dir(rel) and lazy.file_digest(rel) == eager.file_digest(rel), rel
            assert lazy.list_dir(rel) == eager.list_dir(rel), rel


@pytest.mark.parametrize("cluster", ["dev", "prod"])
def test_a_lazy_commit_checks_like_its_copy(example_commit: tuple[Path, str], tmp_path: Path, cluster: str) -> None:
    """The whole engine on a lazy snapshot: same report, same cache keys (a copy's cache serves the commit)."""
    from bot.adapters.cache import BuildCache
    from bot.pipeline.check import check_session
    from bot.pipeline.session import Session
    from bot.adapters.kustomize import locate_kustomize
    from bot.adapters.workspace import build_snapshot
    from tests.pipeline.test_render import logging_binary

    root, sha = example_commit
    binary = locate_kustomize()
    export_tree(root, sha, tmp_path / "export")
    eager_cache = BuildCache(tmp_path / "cache")
    eager = check_session(Session.of(build_snapshot(tmp_path / "export", tmp_path / "eager"), binary, cache=eager_cache), cluster)
    assert eager_cache.misses > 0
    logging, log = logging_binary(tmp_path, binary)
    with gitrepo.commit_snapshot(root, sha, tmp_path / "lazy") as (_, lazy):
        report = check_session(Session.of(lazy, logging, cache=BuildCache(tmp_path / "cache")), cluster)
    assert report == eager
    # No build ran (the log holds only `version --client` probes): every one came from the copy's entries.
    assert set(log.read_text().split()) <= {"--client"}


def test_a_commit_with_a_symlink_is_exported_whole(tmp_path: Path) -> None:
    from tests.gitrepo import commit_all, init_repo

    root = tmp_path / "repo"
    repo = init_repo(root, EXAMPLE)
    os.symlink("../apps/whoami/whoami.yaml", root / "clusters/whoami-link.yaml")
    os.symlink("/etc/passwd", root / "outside.yaml")
    sha = commit_all(repo, "links")
    with gitrepo.commit_snapshot(root, sha, tmp_path / "snap") as (_, snapshot):
        assert snapshot.tree is None  # resolved on disk by build_snapshot
        assert snapshot.read_text("clusters/whoami-link.yaml") == (root / "apps/whoami/whoami.yaml").read_text()
        assert [r.path for r in snapshot.refused] == ["outside.yaml"]


def test_a_missing_blob_is_an_input_error(example_commit: tuple[Path, str], tmp_path: Path) -> None:
    """A shallow or partial clone lacks objects: one clear error, not a traceback."""
    root, sha = example_commit
    repo = git.Repo(root)
    oid = repo.commit(sha).tree["apps/kustomization.yaml"].hexsha
    loose = root / ".git/objects" / oid[:2] / oid[2:]
    with gitrepo.commit_snapshot(root, sha, tmp_path / "lazy") as (_, snapshot):
        loose.unlink()
        with pytest.raises(InputError, match=r"cannot be read .*shallow or partial clone"):
            snapshot.read_text("apps/kustomization.yaml")


@pytest.mark.parametrize("tree_size", [10, 1000])  # below and above FEW_NEW_BLOBS: `cat-file --batch-check`, then `ls-tree -l`
def test_a_commit_missing_a_blob_is_listed_and_only_reading_that_file_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tree_size: int) -> None:
    """A partial clone lacks a blob nothing may read (a page of docs): the commit still lists (ls-tree -l prints
    `BAD` for its size), the other files read, and the missing one is an input error when read."""
    from tests.gitrepo import commit_all, init_repo

    root = tmp_path / "repo"
    repo = init_repo(root, EXAMPLE)
    (root / "docs").mkdir()
    for i in range(tree_size):
        (root / f"docs/page-{i}.md").write_text(f"page {i}\n")
    (root / "docs/lost.md").write_text("lost\n")
    sha = commit_all(repo, "with docs")
    oid = repo.commit(sha).tree["docs/lost.md"].hexsha
    (root / ".git/objects" / oid[:2] / oid[2:]).unlink()
    monkeypatch.setattr(gitrepo, "_BLOB_SIZES", gitrepo.BlobSizes())
    with gitrepo.commit_snapshot(root, sha, tmp_path / "lazy") as (_, snapshot):
        assert snapshot.read_text("apps/kustomization.yaml") == (root / "apps/kustomization.yaml").read_text()
        with pytest.raises(InputError, match=r"cannot be read .*shallow or partial clone"):
            snapshot.read_text("docs/lost.md")


def test_a_tree_listed_before_is_read_from_the_cache(example_commit: tuple[Path, str], tmp_path: Path) -> None:
    """The listing of a tree id is kept: the second snapshot of the commit takes it from the cache."""
    import dataclasses

    from bot.adapters.cache import BuildCache
    from bot.adapters.workspace import TreeListing

    root, sha = example_commit
    cache = BuildCache(tmp_path / "cache")
    with gitrepo.commit_snapshot(root, sha, tmp_path / "first", cache) as (_, first):
        assert first.is_file("keep.md")
    [entry] = list(cache.directory.rglob("*.pickle"))
    listed = cache.get(entry.stem)
    assert isinstance(listed, gitrepo.ListedTree) and isinstance(listing := listed.listing, TreeListing) and listing.refused == first.refused
    # Spoil the cached listing: a snapshot that obeys it did not list the tree again.
    files = {path: f for path, f in listing.files.items() if path != "keep.md"}
    cache.put(entry.stem, dataclasses.replace(listed, listing=dataclasses.replace(listing, files=files)))
    with gitrepo.commit_snapshot(root, sha, tmp_path / "second", cache) as (_, second):
        assert not second.is_file("keep.md") and second.is_file("apps/kustomization.yaml")


def test_a_commit_listed_after_its_base_has_the_sizes_git_gives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blob sizes known from a listing before stand in for `ls-tree -l`; git is asked for the new blobs only, and
    a new blob over the size limit is refused as from a full listing."""
    from bot.adapters.workspace import MAX_FILE_BYTES
    from tests.gitrepo import commit_all, init_repo

    root = tmp_path / "repo"
    repo = init_repo(root, EXAMPLE)
    base = commit_all(repo, "base")
    (root / "apps/new.yaml").write_text("kind: ConfigMap\n")
    (root / "apps/big.yaml").write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    (root / "keep.md").write_text("changed\n")
    head = commit_all(repo, "head")
    monkeypatch.setattr(gitrepo, "_BLOB_SIZES", gitrepo.BlobSizes())
    asked: list[int] = []
    real = gitrepo._blob_sizes
    monkeypatch.setattr(gitrepo, "_blob_sizes", lambda r, oids: asked.append(len(oids)) or real(r, oids))

    reader = gitrepo.Reader(root)

    def full(rev: str) -> list[gitrepo.TreeEntry]:
        return [gitrepo.TreeEntry(*row) for row in gitrepo._ls_tree(reader, rev, sizes=True)]

    with gitrepo.commit_snapshot(root, base, tmp_path / "base") as _:
        pass
    [first] = asked  # nothing known yet: every blob of a small tree asked at once (a large one: `ls-tree -l`)
    assert gitrepo.list_tree(reader, head) == full(head) and asked == [first, 3]
    reader.close()
    with gitrepo.commit_snapshot(root, head, tmp_path / "head") as (_, snapshot):
        assert [r.path for r in snapshot.refused] == ["apps/big.yaml"] and snapshot.read_text("keep.md") == "changed\n"


def test_the_reader_takes_a_repository_itself_never_a_directory_inside_one(tmp_path: Path) -> None:
    """As GitPython's Repo(search_parent_directories=False): a work tree's top or a bare repository, not a subdirectory."""
    from tests.gitrepo import commit_all, init_repo

    root = tmp_path / "repo"
    sha = commit_all(init_repo(root, EXAMPLE), "base")
    bare = tmp_path / "bare.git"
    git.Repo.clone_from(root, bare, bare=True)
    assert gitrepo.resolve(root, "HEAD") == sha and gitrepo.resolve(bare, "HEAD") == sha
    for not_a_repository in (root / "apps", tmp_path, tmp_path / "absent"):
        with pytest.raises(UserError, match="is not a git repository"):
            gitrepo.resolve(not_a_repository, "HEAD")
    with pytest.raises(UserError, match="is a bare repository"):
        changed_files(bare, "HEAD", None)
    assert changed_files(bare, "HEAD", "HEAD") == frozenset()


@pytest.mark.parametrize("rev", ["no-such-ref", "--output=/tmp/x", "HEAD^{tree}", "HEAD:apps", "a" * 40, ""])
def test_the_reader_resolves_only_commits(example_commit: tuple[Path, str], rev: str) -> None:
    root, _ = example_commit
    with pytest.raises(UserError, match="unknown git revision"):
        gitrepo.resolve(root, rev)


def test_the_reader_reads_objects_by_id_only(example_commit: tuple[Path, str]) -> None:
    root, sha = example_commit
    reader = gitrepo.Reader(root)
    try:
        tree = reader.tree_of(sha)
        for bad in ("HEAD", tree + "\n" + sha, "../x"):
            with pytest.raises(InputError, match="is not a git object id"):
                reader.read_object(bad)
        with pytest.raises(InputError, match="is a tree, not a file"):
            reader.blob(tree, of=sha)
        with pytest.raises(InputError, match="cannot be read"):
            reader.blob("0" * 40, of=sha)
        entries = {e.path: e for e in gitrepo.list_tree(reader, sha)}
        assert reader.blob(entries["keep.md"].oid, of=sha) == (root / "keep.md").read_bytes()  # the process recovers
    finally:
        reader.close()


def test_a_commit_with_a_symlink_is_exported_whole_also_from_the_cache(tmp_path: Path) -> None:
    from bot.adapters.cache import BuildCache
    from tests.gitrepo import commit_all, init_repo

    root = tmp_path / "repo"
    repo = init_repo(root, EXAMPLE)
    os.symlink("../apps/whoami/whoami.yaml", root / "clusters/whoami-link.yaml")
    sha = commit_all(repo, "link")
    cache = BuildCache(tmp_path / "cache")
    for attempt in ("listed", "cached"):
        with gitrepo.commit_snapshot(root, sha, tmp_path / attempt, cache) as (_, snapshot):
            assert snapshot.tree is None, attempt
            assert snapshot.read_text("clusters/whoami-link.yaml") == (root / "apps/whoami/whoami.yaml").read_text()


def test_a_commit_rendered_before_is_one_cache_entry(example_commit: tuple[Path, str], tmp_path: Path) -> None:
    """A commit's cluster render is kept whole: with every build and summary entry gone, it still renders, unbuilt."""
    from bot.adapters.cache import BuildCache
    from bot.pipeline.check import analyse
    from bot.pipeline.session import Session
    from bot.adapters.kustomize import locate_kustomize

    root, sha = example_commit
    cache_dir = tmp_path / "cache"
    binary = locate_kustomize()
    with gitrepo.commit_snapshot(root, sha, tmp_path / "first") as (_, snapshot):
        first = analyse(Session.of(snapshot, binary, cache=BuildCache(cache_dir)).renderer(), "prod")
    kept = ("render-", "tree-", "findings")
    for path in cache_dir.rglob("*.pickle"):
        if not path.stem.startswith(kept) and not path.stem.endswith("-objects"):
            path.unlink()
    with gitrepo.commit_snapshot(root, sha, tmp_path / "again") as (_, snapshot):
        again = analyse(Session.of(snapshot, binary, cache=BuildCache(cache_dir)).renderer(), "prod")
    assert again.renderer.builds_run == 0
    assert again.report == first.report
    assert [(t, len(r.manifests), r.inputs) for t, r in again.render.tiers.items()] == [(t, len(r.manifests), r.inputs) for t, r in first.render.tiers.items()]
    assert [m.ref for m in again.render.tiers[next(iter(again.render.tiers))].manifests] == [m.ref for m in first.render.tiers[next(iter(first.render.tiers))].manifests]


def test_changed_files_with_a_line_break_in_a_file_name(tmp_path: Path) -> None:
    """A file name with a line break must not hide the other changes (GitPython's diff parser dropped them)."""
    from tests.gitrepo import init_repo

    work = tmp_path / "w"
    work.mkdir()
    (work / "a.yaml").write_text("a: 1\n")
    repo = init_repo(work)
    base = repo.head.commit.hexsha
    odd = "apps/evil\n\n<!-- x -->\n@octocat `x` |.yaml"
    (work / "apps").mkdir()
    (work / odd).write_text("x: 1\n")
    (work / "apps" / "z.yaml").write_text("z: 1\n")
    (work / "a.yaml").write_text("a: 2\n")
    (work / "b.yaml").write_text("b: 1\n")
    repo.git.add("a.yaml", "apps")
    repo.git.commit("-q", "-m", "head")
    expected = {"a.yaml", odd, "apps/z.yaml"}
    assert changed_files(work, base, "HEAD") == expected
    assert changed_files(work, base, None) == expected | {"b.yaml"}  # the working tree: untracked files too
