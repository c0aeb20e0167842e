"""The import contract (pyproject.toml `[tool.importlinter]`) holds on this tree and catches an I/O import in the engine."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())", "--no-cache"]


def _copy_tree(dest: Path) -> Path:
    """The packages, the contract and its configuration, without the rest of the checkout."""
    for name in ("bot", "handlers"):
        shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    (dest / "tests").mkdir()
    for name in ("__init__.py", "architecture.py"):
        shutil.copy(ROOT / "tests" / name, dest / "tests" / name)
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def _lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(LINT, cwd=cwd, capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(cwd)})


def test_the_tree_keeps_every_contract(tmp_path: Path) -> None:
    result = _lint(_copy_tree(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        ("bot/engine/model.py", "import subprocess", "bot.engine.model (l.{n}) imports subprocess"),
        ("bot/engine/graph.py", "from urllib.request import urlopen", "bot.engine.graph (l.{n}) imports urllib.request"),
        ("bot/engine/diff.py", "from bot.pipeline import check", "bot.engine is not allowed to import bot.pipeline"),
        ("bot/adapters/kube.py", "import handlers.registry", "bot.adapters is not allowed to import handlers"),
    ],
)
def test_a_forbidden_import_breaks_the_contract(tmp_path: Path, module: str, line: str, broken: str) -> None:
    tree = _copy_tree(tmp_path)
    path = tree / module
    lines = path.read_text().splitlines()
    at = next(i for i, text in enumerate(lines) if text.startswith(("import ", "from "))) + 1  # after `from __future__`
    lines.insert(at, line)
    path.write_text("\n".join(lines) + "\n")
    result = _lint(tree)
    assert result.returncode == 1
    assert broken.format(n=at + 1) in " ".join(result.stdout.split())
