"""Golden files: compare rendered output with tests/golden/<name>; FLUXWARDEN_UPDATE_GOLDEN=1 rewrites them."""

from __future__ import annotations

import os
from pathlib import Path

GOLDEN_DIR = Path(__file__).parent / "golden"


def assert_golden(name: str, actual: str) -> None:
    """Fail with a readable diff when `actual` differs from the stored golden file."""
    path = GOLDEN_DIR / name
    if os.environ.get("FLUXWARDEN_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual, encoding="utf-8")
        return
    assert path.is_file(), f"missing golden file {path}; run with FLUXWARDEN_UPDATE_GOLDEN=1"
    expected = path.read_text(encoding="utf-8")
    if actual != expected:
        import difflib

        diff = "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True), "golden", "actual"))
        raise AssertionError(f"{name} differs from its golden file:\n{diff}")
