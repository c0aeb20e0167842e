"""The git adapter (the only module that imports GitPython): cached mirrors, export a revision, list what changed.

Reading a repository (`resolve`, `commit_snapshot`, `export_tree`, `changed_files`) goes through GitPython and
works on a working copy or on a bare mirror alike. Talking to a remote (`Mirrors`) runs the git CLI, one command
at a time, in a scrubbed environment with a throw-away HOME, under a per-mirror lock and a timeout. An access token only ever
travels in the environment of the one `git fetch` that needs it (as an `http.extraHeader` set through
GIT_CONFIG_COUNT): never in a URL, an argv, a config file or a log line, and every message we raise is masked.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import io
import logging
import os
import re
import shutil
import signal
import stat
import subprocess
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, urlsplit

if TYPE_CHECKING:  # GitPython is imported where the bot writes (and exports): a review reads with `Reader`
    import git

from bot.adapters.cache import BuildCache, versioned_key
from bot.engine.core.errors import InfraError, InputError, UserError
from bot.adapters.workspace import Snapshot, TreeEntry, TreeListing, build_snapshot, lazy_snapshot, list_commit

log = logging.getLogger(__name__)

SYMLINK_MODE = 0o120000
GIT_MIN_VERSION = (2, 31)  # GIT_CONFIG_COUNT/KEY/VALUE: per-command config that no argv shows
MASK = "***"
_STDERR_TAIL = 2000  # characters of git's stderr kept in an error message


class GitError(InfraError):
    """A git command against a remote or a mirror failed; the message never contains a credential."""


def _open(repo_dir: Path) -> git.Repo:
    import git
    try:
        return git.Repo(repo_dir, search_parent_directories=False)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise UserError(f"{repo_dir} is not a git repository (needed for --base/--head)") from None


@contextmanager
def _opened(repo_dir: Path) -> Iterator[git.Repo]:
    """A Repo for one operation, closed after it: its `git cat-file` helpers end with it, not at some later
    garbage collection (a Repo is in reference cycles, and the service collects rarely: 223 helpers, 844 MiB, in a soak)."""
    repo = _open(repo_dir)
    try:
        yield repo
    finally:
        repo.close()


def resolve(repo_dir: Path, rev: str) -> str:
    """The commit SHA a revision names; a user error when it does not exist."""
    with Reader(repo_dir) as reader:
        return reader.resolve(rev)


_OID = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
LOCAL_GIT_TIMEOUT = 300.0  # seconds for one local read (a listing of a huge tree); never a network operation


class Reader:
    """A local repository read with the git CLI: revisions, trees, blob sizes and contents.

    A review reads two commits and nothing else of git: through GitPython that cost ~40 ms of import and a
    `cat-file` helper per Repo, here one `git cat-file --batch` process for the objects and a command for the
    rest. Like GitPython's Repo(search_parent_directories=False), `repo_dir` must be the repository itself (a
    work tree's top or a git directory), never a directory inside one.
    """

    def __init__(self, repo_dir: Path) -> None:
        self.repo_dir = repo_dir
        self._git = shutil.which("git") or "git"
        self._lock = threading.Lock()
        self._batch: subprocess.Popen[bytes] | None = None
        if not repo_dir.is_dir():
            raise UserError(f"{repo_dir} is not a git repository (needed for --base/--head)")
        # In a bare repository (or a git directory) --show-toplevel fails after --absolute-git-dir has printed.
        done = self._call("rev-parse", "--absolute-git-dir", "--show-toplevel")
        lines = done.stdout.decode("utf-8", "surrogateescape").splitlines()
        here = os.path.realpath(repo_dir)
        git_dir = lines[0] if lines else None
        top = lines[1] if len(lines) > 1 and done.returncode == 0 else None
        if top is not None and os.path.realpath(top) == here:
            self.bare = False
        elif git_dir is not None and os.path.realpath(git_dir) == here:
            self.bare = True
        else:
            raise UserError(f"{repo_dir} is not a git repository (needed for --base/--head)")

    def _call(self, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        try:
            return subprocess.run(
                [self._git, "-C", str(self.repo_dir), *args], input=stdin, capture_output=True, timeout=LOCAL_GIT_TIMEOUT, check=False,
            )
        except subprocess.TimeoutExpired:
            raise GitError(f"git {args[0]} took longer than {LOCAL_GIT_TIMEOUT:g} s") from None
        except OSError as exc:
            raise GitError(f"git cannot be run ({exc.strerror})") from None

    def run(self, *args: str, stdin: bytes | None = None) -> bytes:
        """A git command's output; GitError with git's own words when it fails."""
        done = self._call(*args, stdin=stdin)
        if done.returncode != 0:
            raise GitError(f"git {args[0]} failed: {done.stderr.decode(errors='replace').strip()[-_STDERR_TAIL:]}")
        return done.stdout

    def resolve(self, rev: str) -> str:
        """The commit SHA a revision names; a user error when it names none."""
        done = self._call("rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")
        sha = done.stdout.decode(errors="replace").strip()
        if done.returncode != 0 or not _OID.fullmatch(sha):
            raise UserError(f"unknown git revision {rev!r}")
        return sha

    def tree_of(self, sha: str) -> str:
        """The tree id of commit `sha` (its first header line)."""
        kind, body = self.read_object(sha)
        first = body.split(b"\n", 1)[0].split()
        if kind != "commit" or len(first) != 2 or first[0] != b"tree":
            raise InputError(f"git object {sha[:12]} is not a commit")
        return first[1].decode()

    def blob(self, oid: str, *, of: str) -> bytes:
        """A blob's content (`of`: the commit it was listed in, for the message when it cannot be read)."""
        kind, data = self.read_object(oid, of=of)
        if kind != "blob":
            raise InputError(f"git object {oid[:12]} of {of[:12]} is a {kind}, not a file")
        return data

    def read_object(self, oid: str, *, of: str | None = None) -> tuple[str, bytes]:
        """An object's type and content from the `git cat-file --batch` process (one request at a time)."""
        if not _OID.fullmatch(oid):
            raise InputError(f"{oid[:40]!r} is not a git object id")
        with self._lock:
            try:
                batch = self._batch_process()
                assert batch.stdin is not None and batch.stdout is not None
                batch.stdin.write(oid.encode() + b"\n")
                batch.stdin.flush()
                header = batch.stdout.readline().split()
                if len(header) == 3:
                    size = int(header[2])
                    data = batch.stdout.read(size)
                    batch.stdout.read(1)  # the LF after the content
                    if len(data) == size:
                        return header[1].decode(), data
            except (OSError, ValueError):
                self._stop_batch()
        where = f" of {of[:12]}" if of else ""
        raise InputError(f"git object {oid[:12]}{where} cannot be read (missing): a shallow or partial clone?")

    def _batch_process(self) -> subprocess.Popen[bytes]:
        if self._batch is None or self._batch.poll() is not None:
            self._batch = subprocess.Popen(
                [self._git, "-C", str(self.repo_dir), "cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            )
        return self._batch

    def _stop_batch(self) -> None:
        batch, self._batch = self._batch, None
        if batch is None:
            return
        for stream in (batch.stdin, batch.stdout):
            if stream is not None:
                stream.close()
        batch.kill()
        batch.wait()

    def close(self) -> None:
        """End the `cat-file` process (idempotent)."""
        with self._lock:
            self._stop_batch()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _resolve(repo: git.Repo, rev: str) -> str:
    import git
    # One Repo per operation: each starts its own `git cat-file` helper on first use.
    try:
        return repo.commit(rev).hexsha
    except (git.BadName, ValueError, git.GitCommandError):
        raise UserError(f"unknown git revision {rev!r}") from None


def export_tree(repo_dir: Path, rev: str, dest: Path) -> str:
    """Write the files of `rev` into `dest` (symlinks as symlinks, for the snapshot to judge); return its SHA.

    One `git archive` stream instead of a blob read per file (~10x faster on a large repo). We
    extract it ourselves rather than with tarfile.extractall: every member is created below
    `dest` with no path component that is a symlink, so nothing is ever written outside it.
    """
    with _opened(repo_dir) as repo:
        sha = _resolve(repo, rev)
        dest.mkdir(parents=True, exist_ok=True)
        root = dest.resolve()
        commit = repo.commit(sha)
        if _has_export_attributes(commit):
            # `export-ignore`/`export-subst` would make git archive differ from the artifact Flux
            # builds (source-controller clones): a PR could hide a file from the check that way.
            _export_blobs(commit, root)
            return sha
        with tempfile.TemporaryFile() as stream:
            repo.git.archive("--format=tar", sha, output_stream=stream)
            stream.seek(0)
            with tarfile.open(fileobj=stream, mode="r:") as archive:
                for member in archive:
                    _extract_member(archive, member, root)
        return sha


_HAS_SYMLINKS = "has-symlinks"  # a listing's stand-in for a commit that is exported and copied instead


@contextmanager
def commit_snapshot(repo_dir: Path, rev: str, dest: Path, cache: BuildCache | None = None) -> Iterator[tuple[str, Snapshot]]:
    """The sanitised snapshot of `rev` in `dest`, and its SHA: lazy (files written as builds need them)
    when the commit has no symlink, else exported and copied whole.

    With `cache`, a tree listed before is not listed again (its listing is keyed by the tree id).
    """
    with Reader(repo_dir) as reader:
        sha = reader.resolve(rev)

        def read_blob(oid: str) -> bytes:
            return reader.blob(oid, of=sha)

        tree_oid = reader.tree_of(sha)
        key = versioned_key("tree-listing", tree_oid)
        listed = cache.get(key) if cache is not None else None
        if not isinstance(listed, ListedTree):
            entries = list_tree(reader, sha)
            listed = ListedTree(list_commit(entries, read_blob) or _HAS_SYMLINKS, {e.oid: e.size for e in entries if e.size is not None})
            if cache is not None:
                cache.put(key, listed)
        _BLOB_SIZES.learn(listed.sizes)
        listing = listed.listing
        if not isinstance(listing, TreeListing):
            export_tree(repo_dir, sha, dest / "export")
            snapshot = build_snapshot(dest / "export", dest)
        else:
            snapshot = lazy_snapshot(tree_oid, listing, read_blob, dest)
        yield sha, snapshot


@dataclass(frozen=True)
class ListedTree:
    """What the cache keeps of a tree: its listing (or the symlink stand-in) and the size of each blob it holds."""

    listing: TreeListing | str
    sizes: dict[str, int]


class BlobSizes:
    """The sizes of blobs listed before, by object id (a blob id names its content, so whichever repository it
    came from): a commit listed after its base asks git only for the blobs the change added."""

    LIMIT = 500_000  # ids kept; past it the memo starts again

    def __init__(self) -> None:
        self._sizes: dict[str, int] = {}
        self._lock = threading.Lock()

    def learn(self, sizes: dict[str, int]) -> None:
        with self._lock:
            if len(self._sizes) + len(sizes) > self.LIMIT:
                self._sizes = {}
            self._sizes.update(sizes)

    def get(self, oid: str) -> int | None:
        return self._sizes.get(oid)


_BLOB_SIZES = BlobSizes()
FEW_NEW_BLOBS = 256  # past this many blobs of unknown size, a listing asks `ls-tree -l` for all of them


def list_tree(repo: Reader, sha: str) -> list[TreeEntry]:
    """Every path of a commit (trees included) with its mode, type, object id and size, as `git ls-tree -l` lists them.

    ls-tree reads the commit as source-controller's clone does: no .gitattributes export rules apply. The sizes
    of blobs listed before come from `_BLOB_SIZES`; git is asked for the others only (`ls-tree -l` reads every
    blob's header, which for loose objects, as a new commit's are, is most of listing a tree).
    """
    rows = _ls_tree(repo, sha, sizes=False)
    unknown = sorted({oid for _, kind, oid, _, _ in rows if kind == "blob" and _BLOB_SIZES.get(oid) is None})
    if len(unknown) > FEW_NEW_BLOBS:  # a first listing: git reads each header once either way, ls-tree -l fastest
        return [TreeEntry(*row) for row in _ls_tree(repo, sha, sizes=True)]
    asked = _blob_sizes(repo, unknown) if unknown else {}
    return [
        TreeEntry(mode, kind, oid, (asked.get(oid) if oid in asked else _BLOB_SIZES.get(oid)) if kind == "blob" else None, path)
        for mode, kind, oid, _, path in rows
    ]


def _ls_tree(repo: Reader, sha: str, *, sizes: bool) -> list[tuple[int, str, str, int | None, str]]:
    """`git ls-tree -r -t -z` rows: mode, type, object id, size (with `sizes`, for blobs) and path."""
    out = repo.run("ls-tree", "-r", "-t", *(["-l"] if sizes else []), "-z", "--full-tree", sha)
    rows = []
    for record in out.split(b"\0"):
        if not record:
            continue
        meta, _, raw_path = record.partition(b"\t")
        mode, kind, oid, *size = meta.split()
        # `-` for a tree; `BAD` for a blob the object store lacks (a partial clone): its size is unknown, and
        # reading it, if a build ever does, says so (Reader.read_object).
        known = size[0] if size and size[0].isdigit() else None
        rows.append((int(mode, 8), kind.decode(), oid.decode(), int(known) if known is not None else None, raw_path.decode("utf-8", "surrogateescape")))
    return rows


def _blob_sizes(repo: Reader, oids: Sequence[str]) -> dict[str, int]:
    """The sizes of blobs, from one `git cat-file --batch-check` run."""
    out = repo.run("cat-file", "--batch-check=%(objectname) %(objecttype) %(objectsize)", stdin="".join(f"{oid}\n" for oid in oids).encode())
    sizes = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == b"blob":
            sizes[parts[0].decode()] = int(parts[2])
    return sizes


def _has_export_attributes(commit: git.Commit) -> bool:
    import git
    return any(
        isinstance(item, git.Blob) and item.name == ".gitattributes" and b"export-" in item.data_stream.read()
        for item in commit.tree.traverse()
    )


def _export_blobs(commit: git.Commit, root: Path) -> None:
    """The slow, attribute-blind export: one blob at a time."""
    import git
    for item in commit.tree.traverse():
        if isinstance(item, git.Tree):
            (root / item.path).mkdir(parents=True, exist_ok=True)
            continue
        if not isinstance(item, git.Blob):
            continue  # submodules (commits) are not part of a Flux artifact
        target = root / item.path
        target.parent.mkdir(parents=True, exist_ok=True)
        data = item.data_stream.read()
        if item.mode == SYMLINK_MODE:
            os.symlink(data.decode("utf-8", errors="replace"), target)
        else:
            target.write_bytes(data)
            if item.mode & stat.S_IXUSR:
                target.chmod(0o755)


def _extract_member(archive: tarfile.TarFile, member: tarfile.TarInfo, root: Path) -> None:
    name = member.name.rstrip("/")
    if not name or name.startswith("/") or ".." in Path(name).parts:
        return  # git never writes these; refuse rather than trust
    target = root / name
    parent = target.parent
    if parent != root and (parent.is_symlink() or not str(parent.resolve()).startswith(str(root) + os.sep)):
        return  # a member below a symlink would be written through it
    if member.isdir():
        target.mkdir(parents=True, exist_ok=True)
    elif member.issym():
        parent.mkdir(parents=True, exist_ok=True)
        os.symlink(member.linkname, target)
    elif member.isfile():
        parent.mkdir(parents=True, exist_ok=True)
        source = archive.extractfile(member)
        assert source is not None
        with open(target, "wb") as out:
            shutil.copyfileobj(source, out)
        if member.mode & stat.S_IXUSR:
            target.chmod(0o755)


def merge_base(repo_dir: Path, a: str, b: str) -> str:
    """The best common ancestor of two commits (what GitHub diffs a PR against); `a` when there is none."""
    with _opened(repo_dir) as repo:
        bases = repo.merge_base(_resolve(repo, a), _resolve(repo, b))
        return bases[0].hexsha if bases else _resolve(repo, a)


def first_parent_history(repo_dir: Path, rev: str, limit: int) -> list[str]:
    """The last `limit` commits of `rev`'s first-parent history (a branch as its pushes made it), oldest first."""
    with _opened(repo_dir) as repo:
        start = _resolve(repo, rev)
        return [c.hexsha for c in repo.iter_commits(start, first_parent=True, max_count=max(1, int(limit)))][::-1]


def commit_parents(repo_dir: Path, rev: str) -> list[str]:
    """The parent SHAs of a commit."""
    with _opened(repo_dir) as repo:
        return [p.hexsha for p in repo.commit(_resolve(repo, rev)).parents]


def commit_patch(repo_dir: Path, patch: Path, message: str, *, reverse: bool = False, when: str, author: tuple[str, str]) -> str:
    """Apply `patch` (reversed with `reverse`) to the working tree at `repo_dir`, a new repository when it has
    none, and commit everything with a fixed author and date (the same tree gives the same SHA): the SHA."""
    import git
    if (repo_dir / ".git").exists():
        repo = git.Repo(repo_dir)
    else:
        repo = git.Repo.init(repo_dir, initial_branch="main")
    repo.git.apply(*(["-R"] if reverse else []), str(patch.resolve()))
    repo.git.add(A=True)
    actor = git.Actor(*author)
    return repo.index.commit(message, author=actor, committer=actor, author_date=when, commit_date=when).hexsha


def commit_summary(repo_dir: Path, rev: str) -> str:
    """The first line of a commit's message."""
    with _opened(repo_dir) as repo:
        summary = repo.commit(_resolve(repo, rev)).summary
        return summary.decode("utf-8", "replace") if isinstance(summary, bytes) else str(summary)


def changed_files(repo_dir: Path, base: str, head: str | None) -> frozenset[str]:
    """Repo paths that differ between `base` and `head` (None: the working tree, untracked files included)."""
    with Reader(repo_dir) as reader:
        base_sha = reader.resolve(base)
        # NUL-separated names from git itself (a name may hold a line break). --no-renames: both sides of a rename.
        diff = ("diff", "--name-only", "-z", "--no-renames", "--no-ext-diff", "--no-textconv")
        if head is None:
            if reader.bare:
                raise UserError(f"{repo_dir} is a bare repository: name a head revision, there is no working tree")
            out = reader.run(*diff, base_sha, "--") + b"\0" + reader.run("ls-files", "--others", "--exclude-standard", "-z")
        else:
            out = reader.run(*diff, base_sha, reader.resolve(head), "--")
        return frozenset(p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p)


# --- mirrors ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FetchedRevisions:
    mirror: Path
    base_sha: str
    head_sha: str


@dataclass(frozen=True)
class BranchHeads:
    """Where branches of a remote point (None: no such branch); the existing ones are fetched into `mirror`."""

    mirror: Path
    heads: dict[str, str | None]


@dataclass(frozen=True)
class _Remote:
    """A validated clone URL: what git is told, which protocol that needs, and where its mirror lives."""

    url: str  # credential-free; what goes into the mirror's remote.origin.url
    protocol: str  # "https" or "file" (local paths count as file for protocol.*.allow)
    parts: tuple[str, ...]  # the mirror directory, relative to the mirrors root


_TRANSPORT_PREFIX = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*::")  # git's <transport>::<address>, e.g. ext::
_SHA = re.compile(r"[0-9a-fA-F]{40}|[0-9a-fA-F]{64}")
_REF_BAD = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//")
_SEGMENT_BAD = re.compile(r"[^A-Za-z0-9._-]")


def _redact_userinfo(url: str) -> str:
    return re.sub(r"(?<=//)[^/@]*@", MASK + "@", url)


def _refuse(clone_url: str, why: str) -> GitError:
    shown = _redact_userinfo(clone_url)
    shown = shown if len(shown) <= 200 else shown[:200] + "…"
    return GitError(f"refusing clone URL {shown!r}: {why}")


def _parse_remote(clone_url: str) -> _Remote:
    """Allow https, and file:// URLs or absolute local paths (tests, local mirrors); refuse everything else."""
    if not isinstance(clone_url, str) or not clone_url:
        raise GitError("refusing an empty clone URL")
    if clone_url.startswith("-"):
        raise _refuse(clone_url, "it would be read as a command-line option")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in clone_url):
        raise _refuse(clone_url, "it contains control characters")
    if _TRANSPORT_PREFIX.match(clone_url):
        raise _refuse(clone_url, "git remote helpers (<transport>::) are not allowed")
    if clone_url.startswith("/"):
        return _local_remote(clone_url)
    split = urlsplit(clone_url)
    scheme = split.scheme.lower()
    if scheme == "file":
        if split.netloc not in ("", "localhost") or not split.path.startswith("/"):
            raise _refuse(clone_url, "a file:// URL must name an absolute local path")
        return _local_remote(split.path)
    if scheme != "https":
        raise _refuse(clone_url, f"only https URLs are allowed (scheme {scheme or 'none'!r})")
    if "@" in split.netloc:
        raise _refuse(clone_url, "credentials do not belong in the URL; pass the token separately")
    if split.query or split.fragment:
        raise _refuse(clone_url, "a clone URL has no query or fragment")
    try:
        host, port = split.hostname, split.port
    except ValueError:
        raise _refuse(clone_url, "bad host or port") from None
    segments = [s for s in split.path.split("/") if s]
    if not host or not segments:
        raise _refuse(clone_url, "it names no host and repository path")
    if any(s in (".", "..") for s in segments):
        raise _refuse(clone_url, "dot segments in the path")
    netloc = f"[{host}]" if ":" in host else host
    netloc += f":{port}" if port is not None else ""
    url = f"https://{netloc}/{'/'.join(segments)}"
    return _Remote(url, "https", _mirror_parts(host + (f"_{port}" if port is not None else ""), segments))


def _local_remote(path: str) -> _Remote:
    normal = os.path.normpath(path)
    digest = hashlib.sha256(normal.encode()).hexdigest()[:12]
    name = _SEGMENT_BAD.sub("_", Path(normal).name.removesuffix(".git")) or "root"
    return _Remote(normal, "file", ("local", f"{name}-{digest}.git"))


def _mirror_parts(host: str, segments: list[str]) -> tuple[str, ...]:
    """root/<host>/<owner>/<repo>.git, each part reduced to a safe file name (a hash suffix if anything changed)."""
    raw = [host.lower(), *segments[:-1], segments[-1].removesuffix(".git")]
    safe = [_SEGMENT_BAD.sub("_", part) for part in raw]
    safe = ["_" + part if part.startswith(".") or not part else part for part in safe]
    if safe != raw:
        safe[-1] += "-" + hashlib.sha256("/".join(raw).encode()).hexdigest()[:8]
    safe[-1] += ".git"
    return tuple(safe)


def _check_ref(ref: str) -> str:
    """A full ref name (`refs/...`, git's check-ref-format rules) or a commit SHA; anything else is refused."""
    if _SHA.fullmatch(ref):
        return ref.lower()
    ok = (
        ref.startswith("refs/")
        and not _REF_BAD.search(ref)
        and not ref.endswith(("/", ".", ".lock"))
        and not any(c.startswith(".") or c.endswith(".lock") for c in ref.split("/"))
    )
    if not ok:
        raise GitError(f"refusing to fetch {ref[:200]!r}: expected a full ref name (refs/...) or a commit SHA")
    return ref


def _basic_credentials(token: str) -> str:
    return base64.b64encode(f"x-access-token:{token}".encode()).decode("ascii")


def _secrets(token: str | None, proxy: str | None = None) -> tuple[str, ...]:
    """Every form a credential could take in git's output, longest first."""
    found: set[str] = set()
    if token:
        found |= {token, quote(token, safe=""), _basic_credentials(token), base64.b64encode(token.encode()).decode()}
    if proxy:
        password = urlsplit(proxy).password
        if password:
            found |= {password, quote(password, safe="")}
    return tuple(sorted((s for s in found if s), key=len, reverse=True))


def _mask(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, MASK)
    return text


def _true_binary() -> str:
    return shutil.which("true") or "/bin/true"


def _git_invocation(
    git_bin: str,
    git_dir: Path | None,
    args: Sequence[str],
    *,
    home: Path,
    token: str | None = None,
    config: Sequence[tuple[str, str]] = (),
) -> tuple[list[str], dict[str, str]]:
    """The argv and the complete environment of one git command. Only the environment carries the token.

    Nothing of ours leaks in: no proxies, no GIT_* variables (GIT_TRACE_CURL would log the header), no
    system or global config, no credential helpers, no prompts, and a HOME of our own (no ~/.netrc).
    """
    argv = [git_bin]
    if git_dir is not None:
        argv += ["--git-dir", str(git_dir)]
    argv += list(args)
    entries: list[tuple[str, str]] = []
    if token:
        entries.append(("http.extraHeader", f"Authorization: Basic {_basic_credentials(token)}"))
    entries += [("credential.helper", ""), ("core.hooksPath", os.devnull), *config]
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(home),
        "LANG": "C",
        "LC_ALL": "C",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_ASKPASS": _true_binary(),
        "GCM_INTERACTIVE": "never",
        "GIT_CONFIG_COUNT": str(len(entries)),
    }
    for i, (key, value) in enumerate(entries):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    return argv, env


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # git-remote-https and upload-pack too, not just git
    except (ProcessLookupError, PermissionError):
        pass


def _run(argv: list[str], env: dict[str, str], *, cwd: Path, timeout: float, what: str, secrets: Sequence[str]) -> tuple[int, str, str]:
    """Run one git command in its own process group; (returncode, stdout, stderr), the latter masked."""
    log.debug("running %s", _mask(" ".join(argv), secrets))
    try:
        proc = subprocess.Popen(
            argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )
    except OSError as exc:
        raise GitError(f"{what}: cannot run git ({exc.strerror or exc})") from None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        proc.communicate()
        raise GitError(f"{what} timed out after {timeout:g}s") from None
    except BaseException:
        _kill_group(proc)
        proc.wait()
        raise
    out_text, err_text = (_mask(b.decode("utf-8", errors="replace"), secrets) for b in (out, err))
    return proc.returncode, out_text, err_text


def _failure(what: str, code: int, stderr: str) -> GitError:
    detail = stderr.strip()
    if len(detail) > _STDERR_TAIL:
        detail = "…" + detail[-_STDERR_TAIL:]
    return GitError(f"{what} failed (exit {code})" + (f": {detail}" if detail else ""))


@lru_cache(maxsize=8)
def _git_version(git_bin: str) -> tuple[int, int]:
    with tempfile.TemporaryDirectory(prefix="fluxwarden-git-") as home:
        argv, env = _git_invocation(git_bin, None, ["--version"], home=Path(home))
        code, out, err = _run(argv, env, cwd=Path(home), timeout=30, what="git --version", secrets=())
    found = re.search(r"(\d+)\.(\d+)", out)
    if code != 0 or not found:
        raise GitError(f"cannot tell the version of {git_bin}: {(out or err).strip()[:200]!r}")
    return int(found.group(1)), int(found.group(2))


_LOCKS_GUARD = threading.Lock()
_THREAD_LOCKS: dict[str, threading.Lock] = {}


@contextmanager
def _mirror_lock(mirror: Path, timeout: float) -> Iterator[None]:
    """Exclusive use of one mirror: a lock shared by every thread of this process, then a file lock for the others."""
    deadline = time.monotonic() + timeout
    with _LOCKS_GUARD:
        lock = _THREAD_LOCKS.setdefault(str(mirror), threading.Lock())
    if not lock.acquire(timeout=max(timeout, 0.0)):
        raise GitError(f"timed out after {timeout:g}s waiting for the lock on mirror {mirror}")
    try:
        mirror.parent.mkdir(parents=True, exist_ok=True)
        with open(mirror.with_name(mirror.name + ".lock"), "a+b") as handle:
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise GitError(f"timed out after {timeout:g}s waiting for the lock on mirror {mirror}") from None
                    time.sleep(0.05)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        lock.release()


_MIRROR_CONFIG = (
    ("core.logAllRefUpdates", "false"),
    ("gc.autoDetach", "false"),  # auto-gc runs inside the fetch, so inside the lock
)


class _Session:
    """One operation on one mirror: a throw-away HOME, the token, the timeout, and the git binary."""

    def __init__(self, git_bin: str, home: Path, mirror: Path, remote: _Remote, token: str | None, proxy: str | None, timeout: float) -> None:
        self.git_bin, self.home, self.mirror, self.remote = git_bin, home, mirror, remote
        self.token, self.proxy, self.timeout = token, proxy, timeout
        self.secrets = _secrets(token, proxy)

    def run(self, args: Sequence[str], *, git_dir: Path | None = None, check: bool = True, remote: bool = False, init: bool = False) -> tuple[int, str]:
        config: list[tuple[str, str]] = []
        if remote:  # only the protocol this URL needs, and the token only for the command that talks to it
            config += [("protocol.allow", "never"), (f"protocol.{self.remote.protocol}.allow", "always")]
            if self.proxy:
                config.append(("http.proxy", self.proxy))
        argv, env = _git_invocation(
            self.git_bin, None if init else git_dir or self.mirror, args, home=self.home, token=self.token if remote else None, config=config
        )
        what = f"git {args[0]} " + (f"from {self.remote.url}" if remote else f"in {git_dir or self.mirror}")
        code, out, err = _run(argv, env, cwd=self.home, timeout=self.timeout, what=what, secrets=self.secrets)
        if check and code != 0:
            raise _failure(what, code, err)
        return code, out


class Mirrors:
    """One cached bare mirror per repository under `root`; fetches what a run needs."""

    # The history reads on a fetched mirror, as methods: handlers get them through their Git protocol.
    merge_base = staticmethod(merge_base)
    first_parent_history = staticmethod(first_parent_history)
    commit_parents = staticmethod(commit_parents)
    commit_summary = staticmethod(commit_summary)

    def __init__(
        self, root: Path, *, timeout: float = 120.0, proxy: str | None = None, credentials: Callable[[], str | None] | None = None
    ) -> None:
        self.root = Path(root).absolute()
        self.timeout = timeout
        # The access token for remotes (e.g. the GitHub App's installation token), asked for per remote operation.
        self.credentials = credentials
        self.proxy = proxy  # the only proxy git will use: nothing is inherited from our environment
        self._stats_lock = threading.Lock()
        self._fetches = 0
        self._inits = 0

    @property
    def fetch_count(self) -> int:
        """How many `git fetch` commands this instance ran (SHAs already in a mirror need none)."""
        return self._fetches

    @property
    def init_count(self) -> int:
        """How many mirrors this instance created."""
        return self._inits

    def path_for(self, clone_url: str) -> Path:
        """The mirror directory of a clone URL (refused like `fetch` would refuse it)."""
        return self.root.joinpath(*_parse_remote(clone_url).parts)

    def fetch(self, clone_url: str, refs: Sequence[str]) -> Path:
        """Bring `refs` (full ref names or commit SHAs) into the mirror of `clone_url`; return the mirror."""
        with self._session(clone_url) as session:
            self._fetch_locked(session, [_check_ref(r) for r in refs])
        return session.mirror

    def revisions(self, clone_url: str, base_ref: str, head_ref: str) -> FetchedRevisions:
        """Fetch both refs and resolve them to commit SHAs, under one lock so no other run moves them between."""
        base_ref, head_ref = _check_ref(base_ref), _check_ref(head_ref)
        with self._session(clone_url) as session:
            self._fetch_locked(session, [base_ref, head_ref])
            base_sha, head_sha = (self._resolve_locked(session, ref) for ref in (base_ref, head_ref))
        return FetchedRevisions(session.mirror, base_sha, head_sha)

    @contextmanager
    def checkout(self, mirror: Path, sha: str) -> Iterator[Path]:
        """A temporary export of the tree at `sha` (symlinks as symlinks), removed when the block ends."""
        with tempfile.TemporaryDirectory(prefix="fluxwarden-checkout-") as tmp:
            dest = Path(tmp) / "tree"
            export_tree(mirror, sha, dest)
            yield dest

    def changed_files(self, mirror: Path, base_sha: str, head_sha: str) -> frozenset[str]:
        """Paths that differ between two fetched commits."""
        return changed_files(mirror, base_sha, head_sha)

    # --- the bot's own branches (fetch, commit, push) ---

    def branch_heads(self, clone_url: str, branches: Sequence[str]) -> BranchHeads:
        """Ask the remote where `branches` point (None: no such branch) and fetch those that exist into the mirror."""
        refs = [_check_ref(f"refs/heads/{b}") for b in branches]
        with self._session(clone_url) as session:
            created = self._ensure_mirror(session)
            try:
                _, out = session.run(["ls-remote", "--", "origin", *refs], remote=True)
            except GitError:
                if created:  # a URL that never answered leaves no empty mirror behind
                    shutil.rmtree(session.mirror, ignore_errors=True)
                raise
            found = {}
            for line in out.splitlines():
                sha, _, ref = line.partition("\t")
                if ref in refs and _SHA.fullmatch(sha):
                    found[ref] = sha.lower()
            if found:
                self._fetch_locked(session, list(found))
        return BranchHeads(session.mirror, {b: found.get(r) for b, r in zip(branches, refs)})

    def commit_file(
        self,
        clone_url: str,
        parent_sha: str,
        path: str,
        content: bytes,
        message: str,
        author: tuple[str, str],
        *,
        reuse: str | None = None,
    ) -> str:
        """A commit on `parent_sha` whose only change is `path` := `content` (its file mode kept), by `author`
        (name, email), written into the mirror; no working tree, no hooks, no signing, no config of ours read.

        When `reuse` (e.g. the bot branch's current head) already is exactly that change, it is returned instead,
        so an unchanged fix is not pushed again.
        """
        import git
        from git import Actor, IndexFile
        from git.index.typ import BaseIndexEntry
        from git.objects import Blob, Commit
        from gitdb.base import IStream

        with self._session(clone_url, talks_to_remote=False) as session:
            repo = _open(session.mirror)
            parent = repo.commit(_check_ref(parent_sha))
            index = IndexFile.new(repo, parent.tree)
            key = (path, 0)
            if key not in index.entries:
                raise GitError(f"{path} is not a file in {parent_sha[:12]}")
            old = index.entries[key]
            blob = repo.odb.store(IStream(Blob.type, len(content), io.BytesIO(content)))
            index.entries[key] = type(old).from_base(BaseIndexEntry((old.mode, blob.binsha, 0, path)))
            tree = index.write_tree()
            if reuse is not None:
                try:
                    existing = repo.commit(_check_ref(reuse))
                except (ValueError, git.BadName):
                    existing = None
                if existing is not None and existing.tree.hexsha == tree.hexsha and [p.hexsha for p in existing.parents] == [parent.hexsha]:
                    return existing.hexsha
            actor = Actor(*author)
            commit = Commit.create_from_tree(repo, tree, message, parent_commits=[parent], head=False, author=actor, committer=actor)
            return commit.hexsha

    def push_branch(self, clone_url: str, sha: str, branch: str, *, force: bool = True) -> None:
        """Point the remote's `branch` at `sha` (a commit in the mirror); `force` replaces whatever it held."""
        ref = _check_ref(f"refs/heads/{branch}")
        sha = _check_ref(sha)
        with self._session(clone_url) as session:
            spec = f"{'+' if force else ''}{sha}:{ref}"
            session.run(["push", "--no-verify", "--quiet", "--", "origin", spec], remote=True)

    def delete_branch(self, clone_url: str, branch: str) -> None:
        """Delete the remote's `branch` (nothing happens when it is already gone)."""
        ref = _check_ref(f"refs/heads/{branch}")
        with self._session(clone_url) as session:
            _, out = session.run(["ls-remote", "--", "origin", ref], remote=True)
            if any(line.partition("\t")[2] == ref for line in out.splitlines()):
                session.run(["push", "--no-verify", "--quiet", "--", "origin", f":{ref}"], remote=True)

    # --- internals ---

    @contextmanager
    def _session(self, clone_url: str, *, talks_to_remote: bool = True) -> Iterator[_Session]:
        """A locked session on the mirror of `clone_url`; the token only for sessions that talk to the remote."""
        token = self.credentials() if talks_to_remote and self.credentials is not None else None
        remote = _parse_remote(clone_url)
        git_bin = shutil.which("git")
        if git_bin is None:
            raise GitError("git is not installed (not found on PATH)")
        version = _git_version(git_bin)
        if version < GIT_MIN_VERSION:
            need = ".".join(map(str, GIT_MIN_VERSION))
            raise GitError(f"git {need} or newer is needed (found {version[0]}.{version[1]} at {git_bin})")
        mirror = self.root.joinpath(*remote.parts)
        with _mirror_lock(mirror, self.timeout), tempfile.TemporaryDirectory(prefix="fluxwarden-git-") as home:
            yield _Session(git_bin, Path(home), mirror, remote, token, self.proxy, self.timeout)

    def _ensure_mirror(self, session: _Session) -> bool:
        """Create the mirror if it is missing; True when it was just created."""
        mirror = session.mirror
        if (mirror / "HEAD").is_file() and (mirror / "objects").is_dir():
            _, url = session.run(["config", "--get", "remote.origin.url"], check=False)
            if url.strip() != session.remote.url:
                session.run(["config", "remote.origin.url", session.remote.url])
            return False
        if mirror.exists():
            log.warning("replacing %s: not a git mirror (an interrupted init?)", mirror)
            shutil.rmtree(mirror)
        staging = Path(tempfile.mkdtemp(prefix=mirror.name + ".init-", dir=mirror.parent))
        try:
            session.run(["init", "--bare", "--quiet", "--initial-branch=main", str(staging)], git_dir=staging, init=True)
            for key, value in (*_MIRROR_CONFIG, ("remote.origin.url", session.remote.url)):
                session.run(["config", key, value], git_dir=staging)
            os.rename(staging, mirror)  # a mirror exists whole or not at all
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        with self._stats_lock:
            self._inits += 1
        return True

    def _fetch_locked(self, session: _Session, refs: Sequence[str]) -> None:
        created = self._ensure_mirror(session)
        wanted = list(dict.fromkeys(refs))
        # A commit is immutable: a SHA the mirror already holds needs no round trip. Refs move, so always fetch them.
        wanted = [r for r in wanted if not (_SHA.fullmatch(r) and self._has_commit(session, r))]
        if not wanted:
            return
        refspecs = [r if _SHA.fullmatch(r) else f"+{r}:{r}" for r in wanted]
        args = ["fetch", "--prune", "--no-tags", "--no-write-fetch-head", "--no-recurse-submodules", "--", "origin", *refspecs]
        with self._stats_lock:
            self._fetches += 1
        try:
            session.run(args, remote=True)
        except GitError:
            if created:  # a URL that never fetched leaves no empty mirror behind
                shutil.rmtree(session.mirror, ignore_errors=True)
            raise

    def _has_commit(self, session: _Session, sha: str) -> bool:
        code, _ = session.run(["cat-file", "-e", f"{sha}^{{commit}}"], check=False)
        return code == 0

    def _resolve_locked(self, session: _Session, ref: str) -> str:
        code, out = session.run(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"], check=False)
        if code != 0:
            raise GitError(f"{ref} is not a commit in {session.remote.url}")
        return out.strip()
