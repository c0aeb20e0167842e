"""`fluxwarden demo`: the seed's PR built from the example and its patch, reviewed (README's first command)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from bot.service.cli import main
from bot.pipeline.demo import PATCH, seed_pr_base
from tests.gitrepo import EXAMPLE, pre_fix
from tests.golden import assert_golden

ROOT = Path(__file__).resolve().parents[2]


def test_demo_shows_the_incident_and_the_fix(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(ROOT)  # README runs it from the checkout: the default example is ./examples/home-ops
    assert main(["demo"]) == 0  # the fix adds warnings, no error
    out = capsys.readouterr().out
    first_screen = "\n".join(out.splitlines()[:12])
    assert "❌ prod: 1 error" in first_screen and "second-order-crd" in first_screen  # the base's deadlock
    assert "never: platform-config" in out
    assert "cold start: this change resolves a cold-start deadlock" in out  # the head resolves it
    assert "prune-transient" in out and "→ StorageProfile/longhorn-vm moved from flux-system/platform-config" in out
    assert "tier-order-stale" in out
    assert_golden("demo/demo.txt", out)


def test_the_patch_reversed_is_the_pre_fix_state(tmp_path: Path) -> None:
    """The demo's base is the state the tests call pre-fix (tests/gitrepo.py pre_fix)."""
    seed_pr_base(EXAMPLE, tmp_path / "demo")
    shutil.copytree(EXAMPLE, tmp_path / "tests")
    pre_fix(tmp_path / "tests")
    diff = subprocess.run(["diff", "-r", "-x", ".git", str(tmp_path / "demo"), str(tmp_path / "tests")], capture_output=True, text=True)
    assert diff.returncode == 0, diff.stdout


def test_demo_without_the_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--example", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"fluxwarden: error: the bundled example is not at {tmp_path} (with {PATCH} beside it)")


def test_readme_first_command_is_the_demo() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first = readme.split("```sh\n", 1)[1].split("\n```", 1)[0]
    assert first == "python3 -m venv .venv && .venv/bin/pip install -q . && .venv/bin/fluxwarden demo"


def test_readme_first_screen() -> None:
    """The README's first screen: what it is, the two commands, then one on a repository with `--repo` and nothing else."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = [b.split("\n```", 1)[0] for b in readme.split("```sh\n")[1:]]
    assert blocks[1].startswith("python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]'") and blocks[1].endswith("pytest -q -n 2")
    mine = readme.split("## On your repository", 1)[1]
    assert sorted(set(re.findall(r"--[a-z-]+", mine))) == ["--repo"]
    assert readme.count("A **tier** is") == 1 and "(docs/reference.md)" in readme
    assert len(readme.splitlines()) < 60
