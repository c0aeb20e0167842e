"""FastSafeLoader builds exactly what CSafeLoader builds, on kustomize output and on YAML's corners."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bot.yamlio import FastSafeLoader

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

CORNERS = [
    pytest.param("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: v\n", id="plain"),
    pytest.param("a: &x [1, 2]\nb: *x\n", id="alias"),
    pytest.param("<<: {a: 1}\nb: 2\n", id="merge-key"),
    pytest.param("t: 2001-12-14\nn: 0o17\nh: 0x1f\nf: 1e3\nb: yes\nnul: ~\ne:\nsexa: 1:30\n", id="yaml-1.1-scalars"),
    pytest.param("s: !!str 12\nbin: !!binary aGk=\nq: '012'\n", id="explicit-tags"),
    pytest.param("x: &a\n  y: *a\n", id="recursive-map"),
    pytest.param("- &r [*r]\n", id="recursive-seq"),
    pytest.param("a: 1\na: 2\n", id="duplicate-key-last-wins"),
    pytest.param("---\n---\nk: v\n...\n", id="empty-documents"),
]


def _load(text: str, loader: type) -> object:
    try:
        return repr(list(yaml.load_all(text, Loader=loader)))
    except yaml.YAMLError as exc:
        return type(exc).__name__


@pytest.mark.parametrize("text", CORNERS)
def test_fast_loader_matches_csafeloader(text: str) -> None:
    assert _load(text, FastSafeLoader) == _load(text, yaml.CSafeLoader)


@pytest.mark.parametrize("text", ["? [1]\n: 2\n", "? {a: 1}\n: 2\n", "a: !!python/object:os.system x\n", "a: [1\n"])
def test_fast_loader_rejects_what_csafeloader_rejects(text: str) -> None:
    with pytest.raises(yaml.YAMLError):
        list(yaml.load_all(text, Loader=yaml.CSafeLoader))
    with pytest.raises(yaml.YAMLError):
        list(yaml.load_all(text, Loader=FastSafeLoader))


def test_fast_loader_matches_on_every_example_file() -> None:
    files = sorted(EXAMPLES.rglob("*.yaml"))
    assert len(files) > 10
    for path in files:
        text = path.read_text()
        assert _load(text, FastSafeLoader) == _load(text, yaml.CSafeLoader), path


def test_an_alias_is_built_once_and_shared() -> None:
    doc = yaml.load("a: &x {k: [1]}\nb: *x\n", Loader=FastSafeLoader)
    assert doc["a"] is doc["b"]
