"""An import-linter contract type: a package imports only itself and an allowlist of pure modules.

import-linter's own `forbidden` contract takes a deny list; the engine's rule is an allow list ("nothing
outside the engine but the standard library's pure modules"), so a new I/O import fails without anyone
remembering to list it. Configured in pyproject.toml `[tool.importlinter]`, run by `.ci/run`.
"""

from __future__ import annotations

import ast
import re

import grimp
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck

_FROM = re.compile(r"^\s*from\s+([\w.]+)\s+import")


class AllowlistContract(Contract):
    """Every import of a module in `source_modules` is of a module inside them or in `allowed_modules`.

    An allowed entry covers its submodules (`collections` allows `collections.abc`); a dotted entry
    (`urllib.parse`) allows only that part of its package, judged from the import statement's text because
    import-linter squashes an external package to its top-level name.
    """

    type_name = "allowlist"

    source_modules = fields.ListField(subfield=fields.ModuleExpressionField())
    allowed_modules = fields.ListField(subfield=fields.StringField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        sources = sorted({str(expr.expression) for expr in self.source_modules})  # type: ignore[attr-defined]
        allowed = tuple(self.allowed_modules)  # type: ignore[arg-type]
        inside = tuple(sources)
        violations = []
        for source in sources:
            for importer in sorted(graph.find_descendants(source) | {source}):
                for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                    if _covered(imported, inside):
                        continue
                    details = graph.get_import_details(importer=importer, imported=imported)
                    for detail in details:
                        for named in _named(detail["line_contents"], imported, allowed):
                            if not _covered(named, allowed):
                                violations.append({"importer": importer, "imported": named, "line_number": detail["line_number"]})
                    if not details and not _covered(imported, allowed):
                        violations.append({"importer": importer, "imported": imported, "line_number": 0})
        return ContractCheck(kept=not violations, metadata={"violations": violations})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for v in check.metadata["violations"]:
            output.print_error(f"{v['importer']} (l.{v['line_number']}) imports {v['imported']}, which is not allowed", bold=False)
        output.new_line()


def _named(line: str, imported: str, allowed: tuple[str, ...]) -> list[str]:
    """Every module of `imported`'s package that an import line names, each judged on its own.

    `import json, subprocess` names both (grimp reports the line once per package, so reading only its first
    name let the second through); `from urllib import parse, request` names `urllib.parse` and
    `urllib.request`; `from urllib.parse import quote` names `urllib.parse`. A line that is not a whole
    statement (the first line of a parenthesised `from x import (`) is judged by its `from` module.
    """
    top = imported.split(".")[0]
    names = [n for n in _statement_modules(line.strip(), allowed) if n.split(".")[0] == top]
    if names:
        return names
    match = _FROM.match(line)
    return [match.group(1)] if match and match.group(1).split(".")[0] == top else [imported]


def _statement_modules(line: str, allowed: tuple[str, ...]) -> list[str]:
    try:
        tree = ast.parse(line)
    except SyntaxError:
        try:
            tree = ast.parse(line + ")")  # `from x import (` continued on the next lines
        except SyntaxError:
            return []
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            # `from urllib import request` imports the submodule urllib.request: judged as such when the
            # allowlist names only some of the package's submodules (`urllib.parse`).
            partial = any(a.startswith(node.module + ".") for a in allowed)
            names.extend(f"{node.module}.{alias.name}" if partial and alias.name != "*" else node.module for alias in node.names)
    return names


def _covered(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)
