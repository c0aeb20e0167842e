"""Deep and wide YAML never reaches a user as a RecursionError: yamlio, the kustomization-tree reader and
`.fluxwarden.yaml` end in the product's own errors (a LimitError, a render-limit finding), whatever the shape.

The generated shapes are the ones Python's recursion meets: block maps and lists, compact lists, flow
brackets, anchors whose aliases nest again, tags and merge keys that take SafeConstructor's recursive path,
re-defined anchors (the Python composer), and streams of many documents, each at sizes around the bound
and far past it (10,000 levels).
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Callable

import pytest
import yaml

from bot.adapters.workspace import build_snapshot
from bot.engine.render.config import load_repo_config
from bot.engine.core.errors import ConfigError, FluxwardenError, LimitError, UnsafeYamlError
from bot.engine.render.generate import KustomizationIndex, flux_kustomization
from bot.engine.core.model import SourceRef, TierId, TierSpec
from bot.engine.render.yamlio import (
    MAX_DOCUMENTS,
    MAX_NESTING,
    check_aliases,
    compose_stream,
    document_heads,
    duplicate_keys,
    load_all,
    load_one,
)


def block_map(depth: int) -> str:
    return "".join("  " * i + f"k{i}:\n" for i in range(depth)) + "  " * depth + "leaf\n"


def block_list(depth: int) -> str:
    return "".join("  " * i + "-\n" for i in range(depth)) + "  " * depth + "leaf\n"


def compact_list(depth: int) -> str:
    return "- " * depth + "leaf\n"


def flow_list(depth: int) -> str:
    return "[" * depth + "]" * depth + "\n"


def flow_map(depth: int) -> str:
    return "{a: " * depth + "x" + "}" * depth + "\n"


def alias_chain(depth: int) -> str:
    """Anchors each 10 deep, every one holding the previous by alias: shallow text, `depth` deep data."""
    links = max(1, depth // 10)
    return "".join(f"l{i}: &l{i} " + "[" * 10 + (f"*l{i - 1}" if i else "x") + "]" * 10 + "\n" for i in range(links))


def tagged(depth: int) -> str:
    return "x: !custom " + "[" * depth + "]" * depth + "\n"


def merged(depth: int) -> str:
    return "base: &b " + "{a: " * depth + "x" + "}" * depth + "\nuse: {<<: *b, c: 1}\n"


def redefined_anchor(depth: int) -> str:
    return "a: &x 1\nb: *x\nc: &x " + "[" * depth + "]" * depth + "\n"


def long_keys(depth: int) -> str:
    return "".join("  " * i + "k" * 1_000 + f"{i}:\n" for i in range(depth)) + "  " * depth + "leaf\n"  # (1,024: YAML's longest implicit key)


SHAPES: dict[str, Callable[[int], str]] = {
    "block-map": block_map,
    "block-list": block_list,
    "compact-list": compact_list,
    "flow-list": flow_list,
    "flow-map": flow_map,
    "alias-chain": alias_chain,
    "tagged": tagged,
    "merge-key": merged,
    "redefined-anchor": redefined_anchor,
    "long-keys": long_keys,
}
DEPTHS = [MAX_NESTING - 2, MAX_NESTING + 1, 340, 999, 1_001, 10_000]


def readers() -> dict[str, Callable[[str], object]]:
    return {
        "load_all": lambda text: load_all(text, "f.yaml"),
        "load_one": lambda text: load_one(text, "f.yaml"),
        "compose_stream": compose_stream,
        "check_aliases": lambda text: check_aliases(text, "f.yaml"),
        "document_heads": lambda text: list(document_heads(text)),
        "duplicate_keys": lambda text: list(duplicate_keys(text)),
    }


def under_the_limit(shape: str, depth: int) -> bool:
    """Whether the generated document nests within MAX_NESTING (the top mapping of most shapes adds a level)."""
    return depth + 2 <= MAX_NESTING and shape != "long-keys" or shape == "long-keys" and depth < MAX_NESTING - 1


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("shape", SHAPES)
def test_no_reader_raises_anything_but_our_errors(shape: str, depth: int) -> None:
    if shape == "long-keys" and depth > 1_001:
        depth = 1_001  # 50 MB of keys otherwise; the size bound is tested elsewhere
    text = SHAPES[shape](depth)
    for name, read in readers().items():
        try:
            read(text)
        except (FluxwardenError, yaml.YAMLError) as exc:
            assert not under_the_limit(shape, depth), f"{name} refused {shape} at {depth}: {exc}"
            if name in ("load_all", "load_one", "compose_stream") and not isinstance(exc, yaml.YAMLError):
                assert isinstance(exc, (LimitError, UnsafeYamlError)), f"{name}: {exc!r}"
                assert f"(limit: {MAX_NESTING})" in str(exc) or "-byte limit" in str(exc)  # indentation grows as depth²
        else:
            if name in ("load_all", "load_one", "compose_stream"):
                assert under_the_limit(shape, depth), f"{name} accepted {shape} at {depth} levels"


@pytest.mark.parametrize("shape", ["block-map", "flow-list", "alias-chain"])
def test_the_limit_names_the_depth(shape: str) -> None:
    with pytest.raises(LimitError) as refused:
        load_all(SHAPES[shape](340), "deep.yaml")
    assert str(refused.value).startswith("deep.yaml nests ")
    assert "(limit: 100)" in str(refused.value)
    if shape != "flow-list":  # an exact figure below libyaml's own bound of 1,000
        assert any(f"{n} levels" in str(refused.value) for n in (340, 341))


def test_a_recursive_alias_is_invalid_as_in_go_yaml() -> None:
    for text in ("x: &a\n  k: *a\n", "- &r [*r]\n"):
        with pytest.raises(FluxwardenError, match="value contains itself"):
            load_all(text, "f.yaml")


def test_random_mixtures_of_brackets_indentation_and_aliases() -> None:
    """Random walks mixing every construct: whatever the text, a value, our error or a YAML error."""
    rng = random.Random(23)
    pieces = ["[", "]", "{", "}", "a: ", "- ", "\n", "  ", "&x ", "*x", "!t ", "<<: ", ", ", "k", "---\n", "'", '"', "|\n"]
    for _ in range(300):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 3_000)))
        text += "[" * rng.choice([0, 50, 400, 2_000])
        for read in readers().values():
            try:
                read(text)
            except (FluxwardenError, yaml.YAMLError):
                pass


def test_many_documents_are_bounded() -> None:
    assert len(load_all("---\na: 1\n" * MAX_DOCUMENTS, "f.yaml")) == MAX_DOCUMENTS
    with pytest.raises(LimitError, match=f"more than {MAX_DOCUMENTS:,} YAML documents"):
        load_all("---\na: 1\n" * (MAX_DOCUMENTS + 1), "f.yaml")


def test_recursion_headroom() -> None:
    """Parsing at the bound leaves most of the stack: a walker of the result may recurse a few frames a level."""
    data = load_one(flow_list(MAX_NESTING), "f.yaml")

    def walk(value: object) -> int:
        return 1 + max((walk(v) for v in value), default=0) if isinstance(value, list) else 0

    assert walk(data) == MAX_NESTING and sys.getrecursionlimit() >= 4 * MAX_NESTING


# == The kustomization tree and `.fluxwarden.yaml` =====================================================

TIER = TierSpec(id=TierId("flux-system", "app"), path="app", source=SourceRef("GitRepository", "flux-system", "flux-system"))


def kustomization_texts(depth: int) -> dict[str, str]:
    """kustomization.yaml files whose fields kustomize-controller and our reader walk, made deep or wide."""
    deep_patch = "patches:\n- patch: |\n    kind: ConfigMap\n  target: " + flow_map(depth)
    return {
        "deep-resources": "resources: " + flow_list(depth),
        "deep-patches": deep_patch,
        "deep-inline-generator": "generators:\n- " + flow_map(depth),
        "deep-labels": "commonLabels: " + flow_map(depth),
        "deep-images": "images:\n- name: x\n  newTag: " + flow_map(depth),
        "block-deep": "resources:\n" + "\n".join("  " + line for line in block_list(min(depth, 1_001)).splitlines()) + "\n",  # (depth² bytes)
        "alias-deep": alias_chain(depth) + "resources: [a.yaml]\n",
        "wide": "resources:\n" + "".join(f"- r{i}.yaml\n" for i in range(20_000)),
        "many-docs": "resources: [a.yaml]\n" + "---\nx: 1\n" * (MAX_DOCUMENTS + 1),
    }


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 1_001, 10_000])
@pytest.mark.parametrize("case", list(kustomization_texts(1)))
def test_kustomization_tree_reader(tmp_path: Path, case: str, depth: int) -> None:
    text = kustomization_texts(depth)[case]
    source = tmp_path / "repo"
    (source / "app").mkdir(parents=True)
    (source / "app" / "kustomization.yaml").write_text(text)
    (source / "app" / "a.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n")
    snapshot = build_snapshot(source, tmp_path / "snap")
    index = KustomizationIndex(snapshot)
    dirs, files, problems = index.reach("app", [], aliases=True)
    if case != "wide":
        assert [(p.check, p.file) for p in problems] == [("render-limit", "app/kustomization.yaml")], problems
        assert "(limit: " in problems[0].reason
    try:
        flux_kustomization(TIER, text, None, [])
    except FluxwardenError:
        pass


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 1_001, 10_000])
@pytest.mark.parametrize("shape", ["block-map", "flow-map", "flow-list", "alias-chain", "redefined-anchor"])
def test_fluxwarden_yaml(shape: str, depth: int) -> None:
    body = SHAPES[shape](depth)
    for text in (body, "clusters:\n  dev: " + body.replace("\n", " ") + "\n", "sources: " + body.replace("\n", " ") + "\n"):
        with pytest.raises(ConfigError) as refused:
            load_repo_config(text)
        assert ".fluxwarden.yaml" in str(refused.value)
