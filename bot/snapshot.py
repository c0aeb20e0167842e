"""A sanitised copy of the repository that kustomize may read: no symlink out, no oversized file.

kustomize follows symlinks and loads directories anywhere on disk, so we never point it at the
untrusted checkout. We copy what Flux's source-controller would put in the artifact into a private
directory, refusing (with a reason) every path that could read outside the repository.
"""

from __future__ import annotations

import os
import posixpath
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from bot.yamlio import MAX_FILE_BYTES

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")

# source-controller excludes these from every GitRepository artifact
# (fluxcd/source-controller internal/index + pkg/sourceignore `VCSPatterns` and `getSOPSPatterns`/defaults).
DEFAULT_IGNORE = (
    ".git/",
    ".gitignore",
    ".gitmodules",
    ".gitattributes",
    "*.jpg",
    "*.jpeg",
    "*.gif",
    "*.png",
    "*.wmv",
    "*.flv",
    "*.tar.gz",
    "*.zip",
    "/.github/",
    "**/.goreleaser.yml",
    "**/.sops.yaml",
    "**/.flux.yaml",
)
MAX_FILES = 200_000


@dataclass(frozen=True)
class RefusedPath:
    """A repository path left out of the snapshot, and why."""

    path: str  # repo-relative, posix
    reason: str


class IgnoreRules:
    """gitignore-style patterns as `.sourceignore` uses them (anchoring, `**`, `!`, trailing `/`)."""

    def __init__(self) -> None:
        self._rules: list[tuple[re.Pattern[str], bool, bool]] = []

    def add(self, pattern: str, base: str = "") -> None:
        """Add one pattern line, relative to directory `base` (repo-relative, "" for the root)."""
        line = pattern.rstrip("\n").rstrip()
        if not line or line.startswith("#"):
            return
        negate = line.startswith("!")
        if negate:
            line = line[1:]
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        anchored = "/" in line
        line = line.lstrip("/")
        body = _glob_to_regex(line)
        prefix = re.escape(base + "/") if base else ""
        regex = f"^{prefix}{body}$" if anchored else f"^{prefix}(?:.*/)?{body}$"
        self._rules.append((re.compile(regex), negate, dir_only))

    def ignored(self, path: str, is_dir: bool) -> bool:
        """True when the last matching rule excludes `path`."""
        result = False
        for regex, negate, dir_only in self._rules:
            if dir_only and not is_dir:
                continue
            if regex.match(path):
                result = not negate
        return result


def _glob_to_regex(glob: str) -> str:
    out = []
    i = 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return "".join(out)


@dataclass(frozen=True)
class Snapshot:
    """A sanitised repository copy at `root` (kustomize reads only below `root.parent`)."""

    root: Path
    refused: tuple[RefusedPath, ...]

    def path(self, rel: str) -> Path:
        """The snapshot path of a repo-relative path (already normalised and inside the repo)."""
        return self.root / rel if rel else self.root

    def read_text(self, rel: str) -> str | None:
        """A file's text, or None when it is not in the snapshot."""
        target = self.path(rel)
        try:
            return target.read_text(encoding="utf-8", errors="replace")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    def has_kustomization(self, rel: str) -> bool:
        """Whether a directory has its own kustomization file (so Flux does not generate one)."""
        base = self.path(rel)
        return any((base / name).is_file() for name in KUSTOMIZATION_FILES)

    def to_repo_path(self, absolute: str) -> str | None:
        """Map an absolute snapshot path back to a repo-relative one; None when outside the repo."""
        rel = os.path.relpath(absolute, self.root)
        return None if rel.startswith("..") else ("" if rel == "." else rel.replace(os.sep, "/"))


def normalise_repo_path(path: str) -> str | None:
    """Normalise a path written in the repo (`./apps`, `/apps/`) to `apps`; None when it climbs out."""
    cleaned = posixpath.normpath("/" + path.strip()).lstrip("/")
    raw = posixpath.normpath(path.strip().lstrip("/")) if path.strip() else "."
    if raw == ".." or raw.startswith("../"):
        return None
    return "" if cleaned in ("", ".") else cleaned


def build_snapshot(source: Path, dest: Path, *, max_file_bytes: int = MAX_FILE_BYTES) -> Snapshot:
    """Copy `source` into `dest/repo` as source-controller would ship it, refusing unsafe paths."""
    source = source.resolve()
    root = dest / "repo"
    root.mkdir(parents=True)
    rules = IgnoreRules()
    for pattern in DEFAULT_IGNORE:
        rules.add(pattern)
    refused: list[RefusedPath] = []
    count = 0

    def walk(rel_dir: str) -> None:
        nonlocal count
        src_dir = source / rel_dir if rel_dir else source
        ignore_file = src_dir / ".sourceignore"
        if ignore_file.is_file() and not ignore_file.is_symlink():
            for line in ignore_file.read_text(encoding="utf-8", errors="replace").splitlines():
                rules.add(line, rel_dir)
        try:
            entries = sorted(os.scandir(src_dir), key=lambda e: e.name)
        except OSError as exc:
            refused.append(RefusedPath(rel_dir or ".", f"cannot be read ({exc.strerror})"))
            return
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            count += 1
            if count > MAX_FILES:
                if count == MAX_FILES + 1:
                    refused.append(RefusedPath(rel, f"the repository has more than {MAX_FILES:,} paths"))
                return
            if entry.is_symlink():
                _copy_symlink(source, root, rel, entry.path, rules, refused, max_file_bytes)
                continue
            is_dir = entry.is_dir(follow_symlinks=False)
            if rules.ignored(rel, is_dir):
                continue
            if is_dir:
                (root / rel).mkdir()
                walk(rel)
            elif entry.is_file(follow_symlinks=False):
                size = entry.stat(follow_symlinks=False).st_size
                if size > max_file_bytes:
                    refused.append(RefusedPath(rel, f"is {size:,} bytes, over the {max_file_bytes:,}-byte limit"))
                    continue
                _link_or_copy(Path(entry.path), root / rel)

    walk("")
    return Snapshot(root=root, refused=tuple(refused))


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
        # A file copy, not a link: kustomize's root-only load restrictor rejects a symlink into a sibling dir.
        _link_or_copy(target, link)
        return
    # Re-point relative to the snapshot so kustomize can only ever land inside our copy.
    os.symlink(os.path.relpath(root / target_rel, link.parent), link)


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)
