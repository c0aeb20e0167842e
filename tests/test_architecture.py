"""The import contracts (pyproject.toml `[tool.importlinter]`) hold on this tree, and each one breaks on a probe import."""

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
    for name in ("bot", "handlers", "bench"):
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


ENGINE_PURE = "The engine is pure"
LAYERS = "Layers:"
CYCLES = "No package cycles"
FLOORS = "The engine's floors"


@pytest.mark.parametrize(
    ("module", "line", "contract", "broken"),
    [
        # the engine's allowlist: every name of an import line, every submodule a `from` line names
        ("bot/engine/core/model.py", "import subprocess", ENGINE_PURE, "bot.engine.core.model (l.{n}) imports subprocess"),
        ("bot/engine/core/model.py", "import json, subprocess", ENGINE_PURE, "bot.engine.core.model (l.{n}) imports subprocess"),
        ("bot/engine/core/model.py", "import json; import os.path", ENGINE_PURE, "bot.engine.core.model (l.{n}) imports os.path"),
        ("bot/engine/tiergraph/graph.py", "from urllib.request import urlopen", ENGINE_PURE, "bot.engine.tiergraph.graph (l.{n}) imports urllib.request"),
        ("bot/engine/tiergraph/graph.py", "from urllib import parse, request", ENGINE_PURE, "bot.engine.tiergraph.graph (l.{n}) imports urllib.request"),
        ("bot/engine/tiergraph/graph.py", "from importlib import import_module", ENGINE_PURE, "bot.engine.tiergraph.graph (l.{n}) imports importlib.import_module"),
        ("bot/engine/render/flux.py", "from helm_python import Chart", ENGINE_PURE, "bot.engine.render.flux (l.{n}) imports helm_python"),
        # layers, bench/ on top
        ("bot/engine/reporting/diff.py", "from bot.pipeline import check", LAYERS, "bot.engine is not allowed to import bot.pipeline"),
        ("bot/adapters/kube.py", "import handlers.registry", LAYERS, "bot.adapters is not allowed to import handlers"),
        ("bot/service/cli.py", "import bench.synth", LAYERS, "bot.service is not allowed to import bench"),
        # handlers get adapters from the composition root, never by import
        ("handlers/tier_order.py", "from bot.adapters import git", "Handlers never import an adapter", "handlers.tier_order -> bot.adapters.git (l.{n})"),
        ("handlers/comment.py", "from bot.adapters.kustomize import BuildStopped", "Handlers never import an adapter", "handlers.comment -> bot.adapters.kustomize (l.{n})"),
        # each client library only in its adapter
        ("handlers/comment.py", "import github", "PyGithub", "handlers.comment -> github (l.{n})"),
        ("bot/pipeline/check.py", "import requests", "PyGithub", "bot.pipeline.check -> requests (l.{n})"),
        ("handlers/comment.py", "import kubernetes_asyncio", "kubernetes-asyncio", "handlers.comment -> kubernetes_asyncio (l.{n})"),
        ("bot/pipeline/check.py", "import git", "GitPython", "bot.pipeline.check -> git (l.{n})"),
        ("bot/adapters/workspace.py", "from git import Repo", "GitPython", "bot.adapters.workspace -> git (l.{n})"),
        ("bot/pipeline/check.py", "import subprocess", "Child processes", "bot.pipeline.check -> subprocess (l.{n})"),
        ("bench/reference/compare.py", "import subprocess", "Child processes", "bench.reference.compare -> subprocess (l.{n})"),
        ("bot/pipeline/drift.py", "import aiohttp", "aiohttp", "bot.pipeline.drift -> aiohttp (l.{n})"),
        ("handlers/drift.py", "from apscheduler.triggers.cron import CronTrigger", "APScheduler", "handlers.drift -> apscheduler (l.{n})"),
        ("bot/pipeline/releases.py", "import helm_python", "Helm SDK", "bot.pipeline.releases -> helm_python (l.{n})"),
        ("bot/adapters/charts.py", "import pathspec", "pathspec", "bot.adapters.charts -> pathspec (l.{n})"),
        ("handlers/drift.py", "import prometheus_client", "prometheus_client", "handlers.drift -> prometheus_client (l.{n})"),
        ("bot/pipeline/renderer.py", "import multiprocessing", "Worker processes", "bot.pipeline.renderer -> multiprocessing (l.{n})"),
        ("bot/adapters/kube.py", "import http.client", "Chart fetching", "bot.adapters.kube -> http (l.{n})"),
        # the engine's floors: a floor imports only the floors below it, the two folders of one floor never each other
        ("bot/engine/core/model.py", "from bot.engine.reporting import review_report", FLOORS, "bot.engine.core.model -> bot.engine.reporting.review_report (l.{n})"),
        ("bot/engine/render/flux.py", "from bot.engine.tiergraph.graph import TierGraph", FLOORS, "bot.engine.render.flux -> bot.engine.tiergraph.graph (l.{n})"),
        ("bot/engine/render/yamlio.py", "from bot.engine.ordering import tierorder", FLOORS, "bot.engine.render.yamlio -> bot.engine.ordering.tierorder (l.{n})"),
        ("bot/engine/livestate/live.py", "import bot.engine.reporting.diff", FLOORS, "bot.engine.livestate.live -> bot.engine.reporting.diff (l.{n})"),
        ("bot/engine/tiergraph/checks/names.py", "from bot.engine.chatops import commands", FLOORS, "bot.engine.tiergraph.checks.names -> bot.engine.chatops.commands (l.{n})"),
        # cycles: between the floors of the engine, between the modules of a floor, of other layers
        ("bot/engine/core/model.py", "from bot.engine.reporting import review_report", CYCLES, "- .core -> .reporting (1 import)"),
        ("bot/engine/core/model.py", "from bot.engine.core import findings", CYCLES, ".model -> .findings"),
        ("bot/pipeline/memo.py", "from bot.pipeline import review", CYCLES, ".memo -> .review"),
        ("handlers/context.py", "import handlers.precheck", CYCLES, "No cycles are allowed in handlers"),
    ],
)
def test_a_forbidden_import_breaks_the_contract(tmp_path: Path, module: str, line: str, contract: str, broken: str) -> None:
    tree = _copy_tree(tmp_path)
    at = _insert(tree / module, line)
    result = _lint(tree)
    assert result.returncode == 1, result.stdout
    out = " ".join(result.stdout.split())
    assert broken.format(n=at) in out, out
    assert f"{contract}" in out.split("Broken contracts", 1)[1], out  # the contract the probe aims at is the one broken


def test_a_lazy_import_inside_a_function_breaks_the_contract(tmp_path: Path) -> None:
    """helm_python is imported lazily (in the worker's functions): such an import counts as any other."""
    tree = _copy_tree(tmp_path)
    path = tree / "bot/pipeline/releases.py"
    text = path.read_text()
    path.write_text(text + "\n\ndef _probe() -> None:\n    import helm_python  # noqa: F401\n")
    result = _lint(tree)
    assert result.returncode == 1
    n = len(text.splitlines()) + 4
    assert f"bot.pipeline.releases -> helm_python (l.{n})" in " ".join(result.stdout.split())


def _insert(path: Path, line: str) -> int:
    """Insert `line` after the module's first import (`from __future__`); its 1-based line number."""
    lines = path.read_text().splitlines()
    at = next(i for i, text in enumerate(lines) if text.startswith(("import ", "from "))) + 1
    lines.insert(at, line)
    path.write_text("\n".join(lines) + "\n")
    return at + 1


# -- state: the pure engine keeps none between calls (issue 25, point 5) --------------------------------

_MUTATORS = {"append", "add", "clear", "extend", "insert", "pop", "popitem", "remove", "discard", "setdefault", "update", "__setitem__"}
_MUTABLE_CALLS = {"dict", "list", "set", "defaultdict", "OrderedDict", "Counter", "deque", "bytearray"}


def _module_caches(source: str) -> list[str]:
    """Module-level names bound to a dict, list or set that the module itself writes into (a cache), not constant tables."""
    import ast

    tree = ast.parse(source)
    mutable: set[str] = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else []
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        is_mutable = isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)) or (
            isinstance(value, ast.Call) and getattr(value.func, "id", getattr(value.func, "attr", None)) in _MUTABLE_CALLS
        )
        if is_mutable:
            mutable |= {t.id for t in targets if isinstance(t, ast.Name)}
    written: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS and isinstance(node.func.value, ast.Name):
            written.add(node.func.value.id)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            for target in node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]:
                if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                    written.add(target.value.id)
                elif isinstance(node, ast.AugAssign) and isinstance(target, ast.Name):
                    written.add(target.id)
        elif isinstance(node, ast.Global):
            written |= set(node.names)
    return sorted(mutable & written)


# Process-wide registries that are not memos: their lifetime is the process's by nature.
_PROCESS_REGISTRIES = {
    "bot/adapters/git.py": ["_THREAD_LOCKS"],  # one lock per mirror directory, shared by every thread (a lock table)
    "bot/adapters/github.py": ["_KNOWN_SECRETS"],  # configured tokens the process-wide log filter redacts
    "bot/pipeline/session.py": ["_OPEN_RUNS", "_WORK_DIRS"],  # the runs in progress: the last one releases memory; a shutdown removes their dirs
}


@pytest.mark.parametrize("layer", ["bot/engine", "bot/adapters", "bot/pipeline"])
def test_no_module_level_cache(layer: str) -> None:
    """A memo lives on the object that owns its lifetime (a snapshot's `memo`, the run's `RunMemo`, the locator's
    `KustomizeProbes`), never in a module."""
    found = {
        rel: names
        for path in sorted((ROOT / layer).rglob("*.py"))
        if (names := _module_caches(path.read_text(encoding="utf-8"))) != _PROCESS_REGISTRIES.get(rel := str(path.relative_to(ROOT)), [])
    }
    assert found == {}  # (an allowed registry that is gone shows as [] here: drop it from the list)


@pytest.mark.parametrize(
    "source",
    [
        "_SEEN: dict[str, int] = {}\ndef f(k):\n    _SEEN[k] = 1\n",
        "_SEEN = {}\ndef f(k):\n    return _SEEN.setdefault(k, k)\n",
        "_SEEN = set()\ndef f(k):\n    _SEEN.add(k)\n",
        "_N = []\ndef f():\n    global _N\n    _N = [1]\n",
    ],
)
def test_a_module_cache_is_found(source: str) -> None:
    assert _module_caches(source)


def test_a_constant_table_is_not_a_cache() -> None:
    assert _module_caches("_ORDER = {'a': 1}\ndef f(k):\n    return _ORDER.get(k)\n") == []
