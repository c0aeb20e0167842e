"""A sanitised copy of the repository that kustomize may read: no symlink out, no oversized file.

kustomize follows symlinks and loads directories anywhere on disk, so we never point it at the
untrusted checkout. We copy what Flux's source-controller would put in the artifact into a private
directory, refusing (with a reason) every path that could read outside the repository.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Hashable, Iterable, Iterator, Mapping, Sequence

from bot.engine.render.config import RepoConfig, load_repo_config
from bot.adapters.sourceignore import IgnoreRules
from bot.engine.core.errors import ConfigError
from bot.engine.render.generate import NO_REMOTE, BuildLayout, KustomizationIndex, RemotePlan, build_layout
from bot.engine.core.model import TierSpec
from bot.engine.core.tree import CONFIG_FILE, KUSTOMIZATION_FILES, RefusedPath, RepoTree, blob_id, normalise_repo_path
from bot.engine.render.yamlio import MAX_FILE_BYTES


# source-controller excludes these from every GitRepository artifact (fluxcd/pkg sourceignore `VCSPatterns`).
VCS_IGNORE = (".git/", ".gitignore", ".gitmodules", ".gitattributes")
# ...and these too, but only when the repository has no ignore pattern of its own: fluxcd/source-controller
# artifact/storage SourceIgnoreFilter uses pkg/sourceignore `NewDefaultMatcher` (VCS + `DefaultPatterns`:
# ExcludeExt, ExcludeCI, ExcludeExtra) only when `LoadIgnorePatterns` found no pattern in any `.sourceignore`;
# otherwise VCS + the repository's patterns. A repository with a `.sourceignore` ships its `*.png` icons.
DEFAULT_IGNORE = (
    *VCS_IGNORE,
    "*.jpg",
    "*.jpeg",
    "*.gif",
    "*.png",
    "*.wmv",
    "*.flv",
    "*.tar.gz",
    "*.zip",
    "/.github/",
    ".circleci/",
    ".travis.yml",
    ".gitlab-ci.yml",
    "appveyor.yml",
    ".drone.yml",
    "cloudbuild.yaml",
    "codeship-services.yml",
    "codeship-steps.yml",
    "**/.goreleaser.yml",
    "**/.sops.yaml",
    "**/.flux.yaml",
)
MAX_FILES = 200_000
# Directories nested deeper than this are left out (an `unsafe-path` finding): real repositories nest a
# dozen levels; a PR's 1,000-deep tree is an attack on the walks below (and on kustomize).
MAX_DEPTH = 100
TOO_DEEP = f"is nested more than {MAX_DEPTH} directories deep; not read"
# The bootstrap view (see HiddenFiles): paths it lists beyond the artifact, files and bytes it reads of them.
MAX_HIDDEN_PATHS = 50_000
MAX_HIDDEN_READS = 2_000
MAX_HIDDEN_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class TreeFile:
    """One file of a commit: its blob id (content is read only when needed)."""

    oid: str
    executable: bool = False


class GitTree:
    """A commit's sanitised file list; content is read from git and written to disk only on demand.

    A review of a one-tier change builds one tier: writing the other thousands of files of both
    sides to disk would cost more than everything else it does.
    """

    def __init__(self, oid: str, files: dict[str, TreeFile], dirs: set[str], read_blob: Callable[[str], bytes], root: Path) -> None:
        self.oid = oid  # the commit's root tree: equal ids, equal content
        self.files = files
        self.dirs = dirs | {""}
        self.root = root
        self._read_blob = read_blob
        self._children: dict[str, tuple[list[str], list[str]]] = {d: ([], []) for d in self.dirs}
        for rel in sorted(self.dirs - {""}):
            self._children[posixpath.dirname(rel)][0].append(posixpath.basename(rel))
        for rel in sorted(files):
            self._children[posixpath.dirname(rel)][1].append(posixpath.basename(rel))
        self._written: set[str] = set()
        self._write_lock = threading.Lock()

    def read(self, rel: str) -> bytes | None:
        entry = self.files.get(rel)
        return None if entry is None else self._read_blob(entry.oid)

    def read_blob(self, oid: str) -> bytes:
        """A blob of the commit by id (the bootstrap view reads the files the listing left out this way)."""
        return self._read_blob(oid)

    def list_dir(self, rel: str) -> tuple[list[str], list[str]]:
        dirs, files = self._children.get(rel, ([], []))
        return list(dirs), list(files)

    def materialize(self, dirs: Iterable[str], files: Iterable[str]) -> None:
        """Write `files` and everything below `dirs` to disk (idempotent, thread-safe)."""
        wanted = [f for f in files if f in self.files]
        pending = list(dirs)
        while pending:
            current = pending.pop()
            if current not in self.dirs:
                continue
            (self.root / current).mkdir(parents=True, exist_ok=True)
            subdirs, names = self._children[current]
            pending.extend(posixpath.join(current, d) if current else d for d in subdirs)
            wanted.extend(posixpath.join(current, n) if current else n for n in names)
        # One writer at a time: a build that shares a file with one being written waits until it is
        # there, and a file counts as written only once it is.
        with self._write_lock:
            for rel in dict.fromkeys(wanted):
                if rel in self._written:
                    continue
                target = self.root / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                data = self.read(rel) or b""
                tmp = target.with_name(f".{target.name}.fluxwarden-tmp")
                tmp.write_bytes(data)
                if self.files[rel].executable:
                    tmp.chmod(0o755)
                os.replace(tmp, target)
                self._written.add(rel)


@dataclass(frozen=True)
class HiddenFiles:
    """What the artifact leaves out for an ignore rule only (`.sourceignore`, the default exclusions).

    A bootstrap runs from the repository checkout before Flux, not from Flux's artifact: its scripts and
    helmfiles are often `.sourceignore`d. Paths refused for safety (outside the repository, a symlink,
    over the size limit, too deep) are never here, nor `.git`.
    """

    files: Mapping[str, str]  # repo path → a commit's blob id, or (working tree) the same repo path under `source`
    dirs: frozenset[str]
    source: Path | None = None  # the working tree they are read from; None: blobs of the snapshot's commit


@dataclass(frozen=True)
class Snapshot:
    """A sanitised repository copy at `root`: every path in it resolves inside it.

    With `tree`, the copy is lazy: files reach `root` when `materialize` asks for them, and every
    other question is answered from the commit's file list.
    """

    root: Path
    refused: tuple[RefusedPath, ...]
    tree: GitTree | None = field(default=None, compare=False)
    # A symlink makes a path's content depend on another path: changed files no longer say what changed.
    has_symlinks: bool = False
    # The repository's `.fluxwarden.yaml`: configuration, not source, so read whatever `.sourceignore`
    # says (a `/*` that keeps only the manifest directories must not hide it). None: there is none.
    config_text: str | None = field(default=None, compare=False)
    config_error: str | None = field(default=None, compare=False)  # why it could not be read
    memo: dict[Hashable, Any] = field(default_factory=dict, compare=False, repr=False)  # see RepoTree.memo
    hidden: HiddenFiles | None = field(default=None, compare=False, repr=False)  # see bootstrap_view
    _views: dict[str, "BootstrapView"] = field(default_factory=dict, compare=False, repr=False)

    def bootstrap_view(self) -> RepoTree:
        """The whole repository as its own bootstrap reads it: this tree plus the files only ignore rules hid."""
        if self.hidden is None or not (self.hidden.files or self.hidden.dirs):
            return self
        view = self._views.get("bootstrap")
        if view is None:
            view = self._views.setdefault("bootstrap", BootstrapView(self, self.hidden))
        return view

    @property
    def identity(self) -> tuple[str, str | None]:
        """Where it is and which commit it reads (None: a working-tree copy)."""
        return (str(self.root), self.tree.oid if self.tree is not None else None)

    def read_config(self) -> str | None:
        """The `.fluxwarden.yaml` text (None: there is none); a ConfigError when it could not be read."""
        if self.config_error is not None:
            raise ConfigError(self.config_error)
        return self.config_text

    def path(self, rel: str) -> Path:
        """The snapshot path of a repo-relative path (already normalised and inside the repo)."""
        return self.root / rel if rel else self.root

    def read_bytes(self, rel: str) -> bytes | None:
        """A file's content, or None when it is not in the snapshot."""
        if self.tree is not None:
            return self.tree.read(rel)
        try:
            return self.path(rel).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    def read_text(self, rel: str) -> str | None:
        """A file's text, or None when it is not in the snapshot."""
        data = self.read_bytes(rel)
        return None if data is None else data.decode("utf-8", errors="replace")

    def is_dir(self, rel: str) -> bool:
        return rel in self.tree.dirs if self.tree is not None else self.path(rel).is_dir()

    def is_file(self, rel: str) -> bool:
        return rel in self.tree.files if self.tree is not None else self.path(rel).is_file()

    def exists(self, rel: str) -> bool:
        return (self.is_dir(rel) or self.is_file(rel)) if self.tree is not None else self.path(rel).exists()

    def list_dir(self, rel: str) -> tuple[list[str], list[str]]:
        """Sorted (sub-directory names, other entry names) of a directory; symlinked directories in neither.

        Like Go's filepath.Walk (and os.walk): a symlink to a directory is not descended into.
        """
        if self.tree is not None:
            return self.tree.list_dir(rel)
        dirs, files = [], []
        try:
            entries = sorted(os.scandir(self.path(rel)), key=lambda e: e.name)
        except OSError:
            return [], []
        for entry in entries:
            if entry.is_dir():
                if not entry.is_symlink():
                    dirs.append(entry.name)
            else:
                files.append(entry.name)
        return dirs, files

    def has_kustomization(self, rel: str) -> bool:
        """Whether a directory has its own kustomization file (so Flux does not generate one)."""
        return any(self.is_file(posixpath.join(rel, name) if rel else name) for name in KUSTOMIZATION_FILES)

    def file_digest(self, rel: str) -> str | None:
        """The git blob id of a file's content; None when it is not a file of the snapshot."""
        if self.tree is not None:
            entry = self.tree.files.get(rel)
            return entry.oid if entry else None
        data = self.read_bytes(rel)
        return None if data is None else blob_id(data)

    def entries(self, rel: str) -> list[str]:
        """Every entry name of a directory, symlinks included (what a build next to it could name)."""
        if self.tree is not None:
            dirs, files = self.tree.list_dir(rel)
            return dirs + files
        try:
            return sorted(os.listdir(self.path(rel)))
        except OSError:
            return []

    def real_path(self, rel: str) -> str | None:
        """The repo path `rel` lands on once symlinks are resolved (None: outside the repo).

        kustomize roots every kustomization it loads at its symlink-free path
        (kyaml filesys ConfirmDir → EvalSymlinks), so the paths in it are relative to where it really is.
        """
        if not self.has_symlinks:
            return rel
        real = os.path.realpath(self.path(rel))
        root = os.path.realpath(self.root)
        if real == root:
            return ""
        return real[len(root) + 1 :].replace(os.sep, "/") if real.startswith(root + os.sep) else None

    def materialize(self, dirs: Iterable[str], files: Iterable[str] = ()) -> None:
        """Make sure kustomize finds `files` and everything below `dirs` on disk (a copy is already there)."""
        if self.tree is not None:
            self.tree.materialize(dirs, files)

    def to_repo_path(self, absolute: str) -> str | None:
        """Map an absolute snapshot path back to a repo-relative one; None when outside the repo."""
        rel = os.path.relpath(absolute, self.root)
        return None if rel.startswith("..") else ("" if rel == "." else rel.replace(os.sep, "/"))




def build_snapshot(source: Path, dest: Path, *, max_file_bytes: int = MAX_FILE_BYTES) -> Snapshot:
    """Copy `source` into `dest/repo` as source-controller would ship it, refusing unsafe paths."""
    source = source.resolve()
    root = dest / "repo"
    root.mkdir(parents=True)
    rules = IgnoreRules()
    for pattern in DEFAULT_IGNORE if not _has_ignore_patterns(source) else VCS_IGNORE:
        rules.add(pattern)
    refused: list[RefusedPath] = []
    linked: list[str] = []  # symlinks met (kept or refused)
    hidden: dict[str, str] = {}
    hidden_dirs: set[str] = set()
    count = 0

    def listing(rel_dir: str) -> Iterator[os.DirEntry[str]] | None:
        src_dir = source / rel_dir if rel_dir else source
        ignore_file = src_dir / ".sourceignore"
        if ignore_file.is_file() and not ignore_file.is_symlink() and ignore_file.stat().st_size <= max_file_bytes:
            for line in ignore_file.read_text(encoding="utf-8", errors="replace").splitlines():
                rules.add(line, rel_dir)
        try:
            return iter(sorted(os.scandir(src_dir), key=lambda e: e.name))
        except OSError as exc:
            refused.append(RefusedPath(rel_dir or ".", f"cannot be read ({exc.strerror})"))
            return None

    # Depth first in name order, with a stack rather than recursion: a PR's 1,000-deep tree must not
    # reach Python's recursion limit.
    stack = [("", entries)] if (entries := listing("")) is not None else []
    while stack:
        rel_dir, entries = stack[-1]
        entry = next(entries, None)
        if entry is None:
            stack.pop()
            continue
        rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
        count += 1
        if count > MAX_FILES:
            refused.append(RefusedPath(rel, f"the repository has more than {MAX_FILES:,} paths"))
            break
        if entry.is_symlink():
            linked.append(rel)
            _copy_symlink(source, root, rel, entry.path, rules, refused, max_file_bytes)
            continue
        is_dir = entry.is_dir(follow_symlinks=False)
        if rules.ignored(rel, is_dir):
            if entry.name != ".git":
                _hide_path(source, rel, len(stack), is_dir, hidden, hidden_dirs, max_file_bytes)
            continue
        if is_dir:
            if len(stack) > MAX_DEPTH:
                refused.append(RefusedPath(rel, TOO_DEEP))
                continue
            (root / rel).mkdir()
            if (entries := listing(rel)) is not None:
                stack.append((rel, entries))
        elif entry.is_file(follow_symlinks=False):
            size = entry.stat(follow_symlinks=False).st_size
            if size > max_file_bytes:
                refused.append(RefusedPath(rel, f"is {size:,} bytes, over the {max_file_bytes:,}-byte limit"))
                continue
            _link_or_copy(Path(entry.path), root / rel)
    try:
        config, config_error = read_config_text(source, max_file_bytes), None
    except ConfigError as exc:  # raised when the configuration is used: an explicit one may stand in
        config, config_error = None, str(exc)
    return Snapshot(
        root=root, refused=tuple(refused), has_symlinks=bool(linked), config_text=config, config_error=config_error,
        hidden=HiddenFiles(hidden, frozenset(hidden_dirs), source),
    )


def _hide_path(source: Path, rel: str, depth: int, is_dir: bool, files: dict[str, str], dirs: set[str], max_file_bytes: int) -> None:
    """Record an ignored path of a working tree for the bootstrap view: a regular file within the size limit, or
    a directory and what it holds (bounded, no symlink followed, no `.git`); never copied, read when asked."""
    pending = [(rel, depth)] if is_dir else []
    if not is_dir:
        try:
            info = (source / rel).lstat()
        except OSError:
            return
        if stat.S_ISREG(info.st_mode) and info.st_size <= max_file_bytes and len(files) + len(dirs) < MAX_HIDDEN_PATHS:
            files[rel] = rel
        return
    while pending and len(files) + len(dirs) < MAX_HIDDEN_PATHS:
        rel_dir, level = pending.pop()
        if level > MAX_DEPTH:
            continue
        dirs.add(rel_dir)
        try:
            entries = sorted(os.scandir(source / rel_dir), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            child = f"{rel_dir}/{entry.name}"
            if entry.name == ".git" or entry.is_symlink():
                continue  # a symlink is not followed here: where it lands is not judged for this view
            if entry.is_dir(follow_symlinks=False):
                pending.append((child, level + 1))
            elif entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_size <= max_file_bytes:
                files[child] = child


def ignore_patterns(text: str) -> bool:
    """Whether a `.sourceignore` text has a pattern line (pkg/sourceignore ReadPatterns: not `#`-led, not blank)."""
    return any(line.strip() and not line.startswith("#") for line in text.splitlines())


def _has_ignore_patterns(source: Path) -> bool:
    """Whether any `.sourceignore` below `source` has a pattern (pkg/sourceignore LoadIgnorePatterns walks every
    real directory but `.git`, ignored ones included); bounded like the copy."""
    stack, seen = [source], 0
    while stack and seen <= MAX_FILES:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        seen += len(entries)
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if entry.name != ".git":
                    stack.append(Path(entry.path))
            elif entry.name == ".sourceignore" and entry.is_file(follow_symlinks=False):
                try:
                    if entry.stat().st_size <= MAX_FILE_BYTES and ignore_patterns(Path(entry.path).read_text(encoding="utf-8", errors="replace")):
                        return True
                except OSError:
                    continue
    return False


def read_config_text(source: Path, max_file_bytes: int = MAX_FILE_BYTES) -> str | None:
    """The text of a working tree's `.fluxwarden.yaml` (None: absent), within the repository boundary.

    Read apart from the snapshot's copy: it configures the check, Flux never applies it, so the
    ignore rules that shape the artifact do not apply to it. A symlink may point inside the repo only.
    """
    source = source.resolve()
    path = source / CONFIG_FILE
    if not path.exists() and not path.is_symlink():
        return None
    target = Path(os.path.realpath(path))
    if target != source / CONFIG_FILE and source not in target.parents:
        raise ConfigError(f"{CONFIG_FILE} is a symlink that resolves outside the repository; not read")
    if not target.is_file():
        raise ConfigError(f"{CONFIG_FILE} is not a regular file")
    try:
        size = target.stat().st_size
        if size > max_file_bytes:
            raise ConfigError(f"{CONFIG_FILE} is {size:,} bytes, over the {max_file_bytes:,}-byte limit")
        return target.read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        raise ConfigError(f"{CONFIG_FILE} cannot be read ({exc.strerror})") from None


@dataclass(frozen=True)
class TreeEntry:
    """One line of `git ls-tree -r -t -l`: mode, type, object id, size (None for trees) and path."""

    mode: int
    kind: str  # blob, tree or commit (a submodule)
    oid: str
    size: int | None
    path: str


SYMLINK_MODE = 0o120000


@dataclass(frozen=True)
class TreeListing:
    """What a commit's snapshot keeps of its tree: the same paths `build_snapshot` would copy."""

    files: Mapping[str, TreeFile]
    dirs: frozenset[str]
    refused: tuple[RefusedPath, ...]
    config: TreeEntry | None = None  # the root `.fluxwarden.yaml`, ignored or not (see Snapshot.config_text)
    hidden: Mapping[str, TreeFile] = field(default_factory=dict)  # left out by ignore rules only (see HiddenFiles)
    hidden_dirs: frozenset[str] = frozenset()


def list_commit(entries: Sequence[TreeEntry], read_blob: Callable[[str], bytes], *, max_file_bytes: int = MAX_FILE_BYTES) -> TreeListing | None:
    """Judge a commit's `git ls-tree` entries like `build_snapshot` judges a copy (ignore rules, limits, odd paths).

    None when the commit has a symlink: where it lands is the filesystem's business, so such a
    commit is exported and copied by `build_snapshot`, which resolves links on disk.
    """
    if any(e.mode == SYMLINK_MODE for e in entries):
        return None
    children: dict[str, list[TreeEntry]] = {}
    for listed in entries:
        children.setdefault(posixpath.dirname(listed.path), []).append(listed)
    rules = IgnoreRules()
    own = any(
        e.kind == "blob" and posixpath.basename(e.path) == ".sourceignore" and not e.path.startswith(".git/")
        and (e.size or 0) <= max_file_bytes and ignore_patterns(read_blob(e.oid).decode("utf-8", errors="replace"))
        for e in entries
    )
    for pattern in VCS_IGNORE if own else DEFAULT_IGNORE:
        rules.add(pattern)
    refused: list[RefusedPath] = []
    files: dict[str, TreeFile] = {}
    dirs: set[str] = set()
    hidden: dict[str, TreeFile] = {}
    hidden_dirs: set[str] = set()
    count = 0

    def hide(top: TreeEntry, depth: int) -> None:
        """An ignored entry, and what an ignored tree holds, for the bootstrap view (bounded like the walk)."""
        pending = [(top, depth)]
        while pending and len(hidden) + len(hidden_dirs) < MAX_HIDDEN_PATHS:
            entry, level = pending.pop()
            if posixpath.basename(entry.path) == ".git" or normalise_repo_path(entry.path) != entry.path:
                continue
            if entry.kind == "tree" and level <= MAX_DEPTH:
                hidden_dirs.add(entry.path)
                pending.extend((child, level + 1) for child in children.get(entry.path, ()))
            elif entry.kind == "blob" and entry.size is not None and entry.size <= max_file_bytes:
                hidden[entry.path] = TreeFile(entry.oid, bool(entry.mode & stat.S_IXUSR))

    def listing(rel_dir: str) -> Iterator[TreeEntry]:
        entries = sorted(children.get(rel_dir, ()), key=lambda e: posixpath.basename(e.path))
        ignore_file = next((e for e in entries if e.kind == "blob" and posixpath.basename(e.path) == ".sourceignore"), None)
        if ignore_file is not None and (ignore_file.size or 0) <= max_file_bytes:
            for line in read_blob(ignore_file.oid).decode("utf-8", errors="replace").splitlines():
                rules.add(line, rel_dir)
        return iter(entries)

    stack = [("", listing(""))]  # the same walk as build_snapshot's, over git's listing
    while stack:
        entry = next(stack[-1][1], None)
        if entry is None:
            stack.pop()
            continue
        count += 1
        if count > MAX_FILES:
            refused.append(RefusedPath(entry.path, f"the repository has more than {MAX_FILES:,} paths"))
            break
        if normalise_repo_path(entry.path) != entry.path:
            # git fsck forbids `..`, `.` and empty components; a hand-made tree may still carry them.
            refused.append(RefusedPath(entry.path.encode("utf-8", "surrogateescape").decode("utf-8", "replace"), "is not a plain path inside the repository"))
            continue
        is_dir = entry.kind != "blob"
        if rules.ignored(entry.path, is_dir):
            hide(entry, len(stack))
            continue
        if is_dir:
            if len(stack) > MAX_DEPTH:
                refused.append(RefusedPath(entry.path, TOO_DEEP))
                continue
            dirs.add(entry.path)
            stack.append((entry.path, listing(entry.path)))
        elif entry.size is not None and entry.size > max_file_bytes:
            refused.append(RefusedPath(entry.path, f"is {entry.size:,} bytes, over the {max_file_bytes:,}-byte limit"))
        else:
            files[entry.path] = TreeFile(entry.oid, bool(entry.mode & stat.S_IXUSR))
    config = next((e for e in children.get("", ()) if e.path == CONFIG_FILE), None)
    return TreeListing(files, frozenset(dirs), tuple(refused), config, hidden, frozenset(hidden_dirs))


def lazy_snapshot(tree_oid: str, listing: TreeListing, read_blob: Callable[[str], bytes], dest: Path) -> Snapshot:
    """The snapshot of a commit, lazily: its listing, nothing on disk yet."""
    root = dest / "repo"
    root.mkdir(parents=True)
    tree = GitTree(tree_oid, dict(listing.files), set(listing.dirs), read_blob, root)
    try:
        config, config_error = _commit_config(listing.config, read_blob), None
    except ConfigError as exc:
        config, config_error = None, str(exc)
    hidden = HiddenFiles({rel: f.oid for rel, f in listing.hidden.items()}, listing.hidden_dirs)
    return Snapshot(root=root, refused=listing.refused, tree=tree, config_text=config, config_error=config_error, hidden=hidden)


class BootstrapView:
    """A snapshot with the files only ignore rules hid (implements engine/core/tree.RepoTree): what a bootstrap run
    from the checkout reads. Hidden files are read when asked, within MAX_HIDDEN_READS files and MAX_HIDDEN_BYTES."""

    def __init__(
        self, base: Snapshot, hidden: HiddenFiles, *, max_file_bytes: int = MAX_FILE_BYTES, max_reads: int = MAX_HIDDEN_READS,
        max_bytes: int = MAX_HIDDEN_BYTES,
    ) -> None:
        self.base = base
        self.hidden = hidden
        self.memo: dict[Hashable, Any] = {}  # its own: what is worked out on the artifact never mixes with this
        self._max_file_bytes = max_file_bytes
        self._max_reads = max_reads
        self._max_bytes = max_bytes
        self._children: dict[str, tuple[set[str], set[str]]] = {}
        for rel in hidden.dirs:
            self._children.setdefault(posixpath.dirname(rel), (set(), set()))[0].add(posixpath.basename(rel))
        for rel in hidden.files:
            self._children.setdefault(posixpath.dirname(rel), (set(), set()))[1].add(posixpath.basename(rel))
        self._read: set[str] = set()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def refused(self) -> tuple[RefusedPath, ...]:
        return self.base.refused

    @property
    def has_symlinks(self) -> bool:
        return self.base.has_symlinks

    @property
    def identity(self) -> Hashable:
        return (self.base.identity, "bootstrap")

    def bootstrap_view(self) -> RepoTree:
        return self

    def read_config(self) -> str | None:
        return self.base.read_config()

    def read_bytes(self, rel: str) -> bytes | None:
        if rel not in self.hidden.files:
            return self.base.read_bytes(rel)
        with self._lock:
            if rel not in self._read and (len(self._read) >= self._max_reads or self._bytes >= self._max_bytes):
                return None
        data = self._load(rel)
        with self._lock:
            if data is not None and rel not in self._read:
                self._read.add(rel)
                self._bytes += len(data)
        return data

    def _load(self, rel: str) -> bytes | None:
        stored = self.hidden.files[rel]
        if self.hidden.source is None:
            tree = self.base.tree
            return tree.read_blob(stored) if tree is not None else None
        return _read_inside(self.hidden.source, stored, self._max_file_bytes)

    def read_text(self, rel: str) -> str | None:
        data = self.read_bytes(rel)
        return None if data is None else data.decode("utf-8", errors="replace")

    def is_dir(self, rel: str) -> bool:
        return rel in self.hidden.dirs or self.base.is_dir(rel)

    def is_file(self, rel: str) -> bool:
        return rel in self.hidden.files or self.base.is_file(rel)

    def exists(self, rel: str) -> bool:
        return rel in self.hidden.files or rel in self.hidden.dirs or self.base.exists(rel)

    def list_dir(self, rel: str) -> tuple[list[str], list[str]]:
        dirs, files = self.base.list_dir(rel) if rel not in self.hidden.dirs else ([], [])
        more_dirs, more_files = self._children.get(rel, (set(), set()))
        return sorted({*dirs, *more_dirs}), sorted({*files, *more_files})

    def has_kustomization(self, rel: str) -> bool:
        return any(self.is_file(posixpath.join(rel, name) if rel else name) for name in KUSTOMIZATION_FILES)

    def file_digest(self, rel: str) -> str | None:
        if rel not in self.hidden.files:
            return self.base.file_digest(rel)
        if self.hidden.source is None:
            return self.hidden.files[rel]
        data = self.read_bytes(rel)
        return None if data is None else blob_id(data)

    def entries(self, rel: str) -> list[str]:
        dirs, files = self.list_dir(rel)
        names = set(dirs + files)
        if rel not in self.hidden.dirs:
            names.update(self.base.entries(rel))
        return sorted(names)

    def real_path(self, rel: str) -> str | None:
        return rel if rel in self.hidden.files or rel in self.hidden.dirs else self.base.real_path(rel)


def _read_inside(source: Path, rel: str, max_file_bytes: int) -> bytes | None:
    """A working tree's regular file, read only while every component of its path is a real directory of `source`
    (a path swapped for a symlink since the walk reads nothing) and within the size limit."""
    path = source / rel
    if os.path.realpath(path) != str(path):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > max_file_bytes:
            return None
        data = handle.read(max_file_bytes + 1)
    return data if len(data) <= max_file_bytes else None


def _commit_config(entry: TreeEntry | None, read_blob: Callable[[str], bytes], max_file_bytes: int = MAX_FILE_BYTES) -> str | None:
    """A commit's `.fluxwarden.yaml` text (None: absent), judged as `read_config_text` judges a working tree's."""
    if entry is None:
        return None
    if entry.kind != "blob":
        raise ConfigError(f"{CONFIG_FILE} is not a regular file")
    if entry.size is not None and entry.size > max_file_bytes:
        raise ConfigError(f"{CONFIG_FILE} is {entry.size:,} bytes, over the {max_file_bytes:,}-byte limit")
    return read_blob(entry.oid).decode("utf-8", errors="replace")


def _copy_symlink(
    source: Path,
    root: Path,
    rel: str,
    link_path: str,
    rules: IgnoreRules,
    refused: list[RefusedPath],
    max_file_bytes: int,
) -> None:
    """Keep a symlink only when it resolves inside the repo, re-pointed at the snapshot's copy."""
    target = Path(os.path.realpath(link_path))
    try:
        inside = target.relative_to(source)
    except ValueError:
        refused.append(RefusedPath(rel, "is a symlink that resolves outside the repository; not read"))
        return
    if not target.exists():
        refused.append(RefusedPath(rel, "is a dangling symlink"))
        return
    target_rel = inside.as_posix()
    if target.is_file() and target.stat().st_size > max_file_bytes:
        refused.append(RefusedPath(rel, f"points at a file over the {max_file_bytes:,}-byte limit"))
        return
    if rules.ignored(rel, target.is_dir()):
        return
    link = root / rel
    if target.is_file():
        # A file copy, not a link: its content is the repo's, wherever a build reaches it from.
        _link_or_copy(target, link)
        return
    # Re-point relative to the snapshot so kustomize can only ever land inside our copy.
    os.symlink(os.path.relpath(root / target_rel, link.parent), link)


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)

def read_config_file(path: Path) -> RepoConfig:
    """`--config FILE`: a `.fluxwarden.yaml` kept anywhere (the user named it; it is not repository content)."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ConfigError(f"{path} is over the {MAX_FILE_BYTES:,}-byte limit")
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        raise ConfigError(f"--config {path}: {exc.strerror}") from None
    return load_repo_config(text)



def write_build_root(
    snapshot: Snapshot,
    tier: TierSpec,
    root: str,
    components: Sequence[str],
    reached: Iterable[str],
    workdir: Path,
    plan: RemotePlan = NO_REMOTE,
    index: KustomizationIndex | None = None,
) -> tuple[Path, BuildLayout]:
    """Lay out `build_layout`'s mirror under `workdir/repo`; returns the directory to build and the layout."""
    layout = build_layout(snapshot, tier, root, components, reached, plan, index)
    mirror = workdir / "repo"
    build_dir = mirror / layout.root if layout.root else mirror
    build_dir.mkdir(parents=True, exist_ok=True)
    for directory in plan.directories:
        (mirror / directory).mkdir(parents=True, exist_ok=True)
    for path in layout.links:
        os.symlink(snapshot.path(path), mirror / path)
    (mirror / layout.file).write_text(layout.body, encoding="utf-8")
    for path, body in layout.rewritten:
        (mirror / path).write_text(body, encoding="utf-8")
    return build_dir, layout
