"""Real git repositories for tests (GitPython on tmp_path)."""

from __future__ import annotations

import shutil
from pathlib import Path

import git

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "home-ops"


def init_repo(path: Path, source: Path | None = None) -> git.Repo:
    """A new repository at `path`, optionally seeded with a copy of `source`, with one commit."""
    if source is not None:
        shutil.copytree(source, path)
    path.mkdir(parents=True, exist_ok=True)
    repo = git.Repo.init(path, initial_branch="main")
    with repo.config_writer() as cfg:
        cfg.set_value("user", "name", "Test")
        cfg.set_value("user", "email", "test@example.invalid")
        cfg.set_value("commit", "gpgsign", "false")
    commit_all(repo, "initial")
    return repo


def commit_all(repo: git.Repo, message: str) -> str:
    """Stage everything (deletions included) and commit; return the SHA."""
    repo.git.add(A=True)
    repo.index.commit(message)
    return repo.head.commit.hexsha


def pre_fix(root: Path) -> None:
    """Turn the example into the seed's pre-fix state: StorageProfiles back in platform-config."""
    (root / "platform-config-cdi/cdi-storageprofiles.yaml").rename(root / "platform-config/cdi-storageprofiles.yaml")
    shutil.rmtree(root / "platform-config-cdi")
    kfile = root / "platform-config/kustomization.yaml"
    kfile.write_text(kfile.read_text().rstrip("\n") + "\n  - cdi-storageprofiles.yaml\n")
    (root / "clusters/base/platform-config-cdi.yaml").unlink()
    base_k = root / "clusters/base/kustomization.yaml"
    base_k.write_text("".join(line for line in base_k.read_text().splitlines(True) if "platform-config-cdi" not in line))
    vms = root / "clusters/base/apps-vms.yaml"
    vms.write_text("".join(line for line in vms.read_text().splitlines(True) if "platform-config-cdi" not in line))
