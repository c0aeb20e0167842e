"""The catalogue of finding ids (bot/engine/core/findings.py) is every id the code makes, docs/reference.md's table is made from it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from bot.engine.tiergraph.checks import RUNNERS
from bot.engine.core.findings import CATALOGUE, Catalogue, FindingKind
from bot.engine.core.model import Severity

ROOT = Path(__file__).resolve().parents[2]


def _ids_made_in(path: Path) -> set[str]:
    """The ids a module gives `Finding(...)`: literals, module constants, locals, and the literals its helpers are called with."""
    tree = ast.parse(path.read_text())
    constants = {
        target.id: node.value
        for node in tree.body if isinstance(node, ast.Assign)
        for target in node.targets if isinstance(target, ast.Name)
    }
    ids: set[str] = set()
    helpers: dict[str, tuple[int, str]] = {}  # function → (position, name) of the parameter it passes on as the id

    def strings(expr: ast.expr, scope: ast.AST | None) -> set[str]:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return {expr.value}
        if isinstance(expr, ast.IfExp):  # `"a" if ... else B`: both branches, never the condition
            return strings(expr.body, scope) | strings(expr.orelse, scope)
        found: set[str] = set()
        if isinstance(expr, ast.Name):
            if expr.id in constants:
                found |= strings(constants[expr.id], None)
            elif scope is not None:
                for assign in ast.walk(scope):
                    if isinstance(assign, ast.Assign) and any(isinstance(t, ast.Name) and t.id == expr.id for t in assign.targets):
                        found |= strings(assign.value, None)
        return found

    functions = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)]
    for function in functions:
        params = [a.arg for a in function.args.args]
        for call in ast.walk(function):
            if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "Finding" and call.args:
                first = call.args[0]
                if isinstance(first, ast.Name) and first.id in params:
                    helpers[function.name] = (params.index(first.id), first.id)
                else:
                    ids |= strings(first, function)
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in helpers:
            position, name = helpers[call.func.id]
            given = call.args[position] if position < len(call.args) else next((k.value for k in call.keywords if k.arg == name), None)
            if given is not None:
                ids |= strings(given, None)
    for node in ast.walk(tree):  # module-level Finding(...) calls
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Finding" and node.args and not any(node in ast.walk(f) for f in functions):
            ids |= strings(node.args[0], None)
    return ids


def _ids_in_code() -> dict[str, list[str]]:
    made: dict[str, list[str]] = {}
    for path in sorted([*(ROOT / "bot").rglob("*.py"), *(ROOT / "handlers").rglob("*.py")]):
        for id_ in _ids_made_in(path):
            made.setdefault(id_, []).append(str(path.relative_to(ROOT)))
    return made


def test_every_id_the_code_makes_is_catalogued_and_back() -> None:
    made = _ids_in_code()
    catalogued = {kind.id for kind in CATALOGUE}
    assert {id_: where for id_, where in made.items() if id_ not in catalogued} == {}
    assert sorted(catalogued - set(made)) == []  # an id nobody makes any more leaves the catalogue (and docs/reference.md)
    assert len(CATALOGUE) == 41


def test_reference_check_table_is_the_catalogue() -> None:
    readme = (ROOT / "docs" / "reference.md").read_text()
    table = CATALOGUE.markdown_table()
    assert table in readme
    rows = [line for line in readme.splitlines() if line.startswith("| `")]
    documented = [row.split("`")[1] for row in rows]
    assert sorted(documented) == sorted(kind.id for kind in CATALOGUE)


def test_every_check_names_catalogued_ids() -> None:
    named = [id_ for runner in RUNNERS for id_ in runner.finding_ids]  # type: ignore[attr-defined]
    assert len(named) == len(set(named)) == 17
    assert [id_ for id_ in named if id_ not in CATALOGUE] == []


def test_each_kind_has_a_summary_on_one_line_and_an_explanation() -> None:
    for kind in CATALOGUE:
        assert kind.summary and "\n" not in kind.summary and len(kind.summary) <= 240, kind.id
        assert kind.explanation and "|" not in kind.explanation.replace("\\|", ""), kind.id  # a table cell
        assert kind.severity in Severity
    assert CATALOGUE["render-failed"].severity == Severity.ERROR
    assert CATALOGUE.get("no-such-id") is None and "no-such-id" not in CATALOGUE


def test_an_id_catalogued_twice_is_refused() -> None:
    kind = FindingKind("x", Severity.INFO, "s", "e")
    with pytest.raises(ValueError, match="catalogued twice"):
        Catalogue((kind, kind))
