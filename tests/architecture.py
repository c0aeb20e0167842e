"""An import-linter contract type: a package imports only itself and an allowlist of pure modules.

import-linter's own `forbidden` contract takes a deny list; the engine's rule is an allow list ("nothing
outside the engine but the standard library's pure modules"), so a new I/O import fails without anyone
remembering to list it. Configured in pyproject.toml `[tool.importlinter]`, run by `.ci/run`.
"""

from __future__ import annotations

import re

import grimp
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck

_IMPORTED = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import|import\s+([\w.]+))")


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
                        named = _named(detail["line_contents"]) or imported
                        if not _covered(named, allowed):
                            violations.append({"importer": importer, "imported": named, "line_number": detail["line_number"]})
                    if not details and not _covered(imported, allowed):
                        violations.append({"importer": importer, "imported": imported, "line_number": 0})
        return ContractCheck(kept=not violations, metadata={"violations": violations})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for v in check.metadata["violations"]:
            output.print_error(f"{v['importer']} (l.{v['line_number']}) imports {v['imported']}, which is not allowed", bold=False)
        output.new_line()


def _named(line: str) -> str | None:
    """The module an import statement's text names (`from urllib.parse import quote` → `urllib.parse`)."""
    match = _IMPORTED.match(line)
    return (match.group(1) or match.group(2)) if match else None


def _covered(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)
