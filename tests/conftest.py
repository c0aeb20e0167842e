"""Test-wide settings: every test gets its own build cache (no test reads another's cached builds)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _private_build_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path_factory.mktemp("fluxwarden-cache")
    monkeypatch.setenv("FLUXWARDEN_CACHE_DIR", str(cache))
    return cache
