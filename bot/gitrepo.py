"""The git adapter (the only module that imports GitPython): export a revision, list what changed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import git

from bot.errors import UserError

SYMLINK_MODE = 0o120000


def _open(repo_dir: Path) -> git.Repo:
    try:
        return git.Repo(repo_dir, search_parent_directories=False)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise UserError(f"{repo_dir} is not a git repository (needed for --base/--head)") from None


def resolve(repo_dir: Path, rev: str) -> str:
    """The commit SHA a revision names; a user error when it does not exist."""
    repo = _open(repo_dir)
    try:
        return repo.commit(rev).hexsha
    except (git.BadName, ValueError, git.GitCommandError):
        raise UserError(f"unknown git revision {rev!r}") from None


def export_tree(repo_dir: Path, rev: str, dest: Path) -> str:
    """Write the files of `rev` into `dest` (symlinks as symlinks, for the snapshot to judge); return its SHA."""
    repo = _open(repo_dir)
    commit = repo.commit(resolve(repo_dir, rev))
    dest.mkdir(parents=True, exist_ok=True)
    for item in commit.tree.traverse():
        if item.type == "tree":
            (dest / item.path).mkdir(parents=True, exist_ok=True)
            continue
        if item.type != "blob":
            continue  # submodules (commits) are not part of a Flux artifact
        target = dest / item.path
        target.parent.mkdir(parents=True, exist_ok=True)
        data = item.data_stream.read()
        if item.mode == SYMLINK_MODE:
            os.symlink(data.decode("utf-8", errors="replace"), target)
        else:
            target.write_bytes(data)
            if item.mode & stat.S_IXUSR:
                target.chmod(0o755)
    return commit.hexsha


def changed_files(repo_dir: Path, base: str, head: str | None) -> frozenset[str]:
    """Repo paths that differ between `base` and `head` (None: the working tree, untracked files included)."""
    repo = _open(repo_dir)
    base_commit = repo.commit(resolve(repo_dir, base))
    if head is None:
        diffs = base_commit.diff(None)
        paths = {p for d in diffs for p in (d.a_path, d.b_path) if p}
        paths.update(repo.untracked_files)
    else:
        diffs = base_commit.diff(repo.commit(resolve(repo_dir, head)))
        paths = {p for d in diffs for p in (d.a_path, d.b_path) if p}
    return frozenset(paths)
