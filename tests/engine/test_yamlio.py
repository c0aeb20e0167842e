"""bot/yamlio: YAML read the way Flux reads it (go-yaml v2 through sigs.k8s.io/yaml), fast, and never a traceback.

The expected values are what go-yaml v2 gives (go.yaml.in/yaml/v2 resolve.go, decode.go) and what
sigs.k8s.io/yaml's YAMLToJSON then makes of them; kustomize's own reading of the same texts is
checked end to end in tests/pipeline/test_render_yaml.py.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from bot.engine.core.errors import UnsafeYamlError
from bot.engine.render.yamlio import (
    FastSafeLoader,
    check_aliases,
    compose_stream,
    document_heads,
    dump,
    load_all,
    load_one,
    load_stream,
    split_documents,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class SlowLoader(FastSafeLoader):
    """The same resolver and constructors, built through SafeConstructor's generic path only."""

    def construct_document(self, node: yaml.Node) -> object:
        return yaml.constructor.BaseConstructor.construct_document(self, node)


def _load(text: str, loader: type) -> object:
    try:
        return repr(list(yaml.load_all(text, Loader=loader)))
    except yaml.YAMLError as exc:
        return type(exc).__name__


# == What kustomize writes: PyYAML and go-yaml v2 agree, and the fast constructor changes nothing ==

AGREED = [
    pytest.param("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: v\n", id="plain"),
    pytest.param("a: &x [1, 2]\nb: *x\n", id="alias"),
    pytest.param("<<: {a: 1}\nb: 2\n", id="merge-key"),
    pytest.param("h: 0x1f\nf: 1.5\nb: true\nc: false\nnul: ~\ne:\nq: '012'\n\"yes\": \"y\"\n", id="unambiguous-scalars"),
    pytest.param("s: !!str 12\nq: '012'\n", id="explicit-str"),
    pytest.param("a: 1\na: 2\n", id="duplicate-key-last-wins"),
    pytest.param("---\n---\nk: v\n...\n", id="empty-documents"),
]


@pytest.mark.parametrize("text", AGREED)
def test_fast_loader_matches_csafeloader_where_the_yaml_versions_agree(text: str) -> None:
    assert _load(text, FastSafeLoader) == _load(text, yaml.CSafeLoader)


@pytest.mark.parametrize("text", [p.values[0] for p in AGREED] + [
    "t: 2001-12-14\nn: 0o17\nf: 1e3\nb: y\nsexa: 1:30\neq: =\nbig: 123456789012345678901\n",
    "s: !!set {a, b}\no: !!omap [{a: 1}]\nbin: !!binary aGk=\ncustom: !secret x\ny: 1\n",
    "a: &m {on: 1}\nb: {<<: *m, off: 2}\nc: <<\n",
])
def test_fast_constructor_builds_what_the_generic_path_builds(text: str) -> None:
    assert _load(text, FastSafeLoader) == _load(text, SlowLoader)


def test_fast_loader_matches_on_every_example_file() -> None:
    files = sorted(EXAMPLES.rglob("*.yaml"))
    assert len(files) > 10
    for path in files:
        text = path.read_text()
        assert _load(text, FastSafeLoader) == _load(text, yaml.CSafeLoader), path


def test_an_alias_is_built_once_and_shared() -> None:
    doc = yaml.load("a: &x {k: [1]}\nb: *x\n", Loader=FastSafeLoader)
    assert doc["a"] is doc["b"]


# == Plain scalars as go-yaml v2 resolves them =======================================================

SCALARS = [
    # The trap itself: YAML 1.1's "value" type, which PyYAML's safe loader cannot construct.
    ("=", "="),
    # YAML 1.1 booleans, go-yaml v2's list (PyYAML lacks y/n).
    ("y", True), ("Y", True), ("yes", True), ("On", True), ("TRUE", True),
    ("n", False), ("NO", False), ("off", False), ("False", False),
    ("tRUE", "tRUE"), ("yES", "yES"),
    # Integers: strconv.ParseInt(s, 0, 64) after removing `_`: 0o and a leading 0 are octal.
    ("0o17", 15), ("017", 15), ("-017", -15), ("0x1F", 31), ("0B101", 5), ("+12", 12), ("1_000", 1000), ("00", 0),
    ("12345678901234567890", 12345678901234567890),  # ParseUint
    # Floats: go-yaml's yamlStyleFloat (no dot needed) and ParseFloat after a leading dot.
    ("1e3", 1000.0), ("09", 9.0), ("08", 8.0), (".5", 0.5), ("+.5", 0.5), ("1.", 1.0),
    ("123456789012345678901", 1.2345678901234568e20), ("-9223372036854775809", -9.223372036854776e18),
    (".inf", math.inf), ("-.Inf", -math.inf),
    # Strings: no sexagesimal numbers, timestamps decode to their own text, `.5_0` is not a float.
    ("1:30", "1:30"), ("2001-12-14", "2001-12-14"), ("2001-12-14t21:59:43.10-05:00", "2001-12-14t21:59:43.10-05:00"),
    (".5_0", ".5_0"), ("0x", "0x"), ("0o", "0o"), (".", "."), ("<<", "<<"),
    # Nulls.
    ("~", None), ("null", None), ("NULL", None), ("", None),
]


@pytest.mark.parametrize("text,expected", SCALARS, ids=[repr(t) for t, _ in SCALARS])
def test_plain_scalar_in_a_value_and_a_list(text: str, expected: object) -> None:
    doc = yaml.load(f"a: {text}\nl:\n- {text}\n", Loader=FastSafeLoader)
    assert doc["a"] == expected and type(doc["a"]) is type(expected)
    assert doc["l"] == [expected]


def test_quoted_scalars_are_strings() -> None:
    assert yaml.load("a: 'y'\nb: \"1e3\"\nc: '='\n", Loader=FastSafeLoader) == {"a": "y", "b": "1e3", "c": "="}


def test_the_alertmanager_config_that_failed_a_real_render() -> None:
    text = "spec:\n  route:\n    matchers:\n    - name: alertname\n      value: InfoInhibitor\n      matchType: =\n"
    assert load_one(text, "amc.yaml")["spec"]["route"]["matchers"][0]["matchType"] == "="
    assert yaml.load("enum:\n- =\n- '!='\n- =~\n", Loader=FastSafeLoader) == {"enum": ["=", "!=", "=~"]}  # the CRD's enum


def test_keys_become_json_keys() -> None:
    # sigs.k8s.io/yaml convertToJSONableObject: what the API server gets has string keys only.
    doc = yaml.load("y: 1\non: 2\n8080: a\n0x10: b\n1.5: c\n1e6: d\n.inf: e\n'n': f\n", Loader=FastSafeLoader)
    assert doc == {"true": 2, "8080": "a", "16": "b", "1.5": "c", "1e+06": "d", ".inf": "e", "n": "f"}
    merged = yaml.load("base: &b {on: 1}\nx: {<<: *b, 2: two}\n", Loader=FastSafeLoader)
    assert merged["x"] == {"true": 1, "2": "two"}


@pytest.mark.parametrize("text", ["~: a\n", ": a\n", "12345678901234567890: a\n", "? [1]\n: 2\n", "? {a: 1}\n: 2\n"])
def test_a_key_json_cannot_hold_is_a_yaml_error(text: str) -> None:
    with pytest.raises(yaml.YAMLError):
        yaml.load(text, Loader=FastSafeLoader)


# == Tags ============================================================================================

def test_custom_and_unknown_tags_read_as_the_node_written() -> None:
    text = (
        "env: !env_var HOME\nsecret: !secret db_password\nnum: !custom 12\n"
        "seq: !list [a]\nmap: !obj {k: v}\npy: !!python/object:os.system echo\n"
        "set: !!set {a, b}\nomap: !!omap [{a: 1}, {b: 2}]\nts: !!timestamp 2001-12-14\nbin: !!binary aGk=\n"
    )
    assert load_one(text, "f.yaml") == {
        "env": "HOME", "secret": "db_password", "num": "12", "seq": ["a"], "map": {"k": "v"}, "py": "echo",
        "set": {"a": None, "b": None}, "omap": [{"a": 1}, {"b": 2}], "ts": "2001-12-14", "bin": "hi",
    }


def test_document_tag_on_the_separator() -> None:
    assert load_all("--- !foo\nkind: A\n--- !!map\nkind: B\n", "f.yaml") == [{"kind": "A"}, {"kind": "B"}]


def test_explicit_core_tags() -> None:
    doc = load_one("a: !!int '0x10'\nb: !!bool 'y'\nc: !!float 1\nd: !!str 1e3\ne: !!null ''\n", "f.yaml")
    assert doc == {"a": 16, "b": True, "c": 1.0, "d": "1e3", "e": None}


@pytest.mark.parametrize("text", ["a: !!bool foo\n", "a: !!int foo\n", "a: !!float foo\n", "a: !!str {b: c}\n"])
def test_an_impossible_core_tag_is_invalid_yaml_not_a_traceback(text: str) -> None:
    # PyYAML's own constructors raise KeyError/ValueError here.
    with pytest.raises(UnsafeYamlError, match="not valid YAML"):
        load_one(text, "f.yaml")


# == Anchors ===========================================================================================

REDEFINED = "a: &x 1\nb: *x\nc: &x [2]\nd: *x\n---\ne: &x three\nf: *x\n"


def test_a_redefined_anchor_refers_to_its_latest_definition() -> None:
    with pytest.raises(yaml.composer.ComposerError):  # PyYAML alone refuses it
        list(yaml.load_all(REDEFINED, Loader=yaml.CSafeLoader))
    assert load_stream(REDEFINED) == [{"a": 1, "b": 1, "c": [2], "d": [2]}, {"e": "three", "f": "three"}]
    assert load_all(REDEFINED, "f.yaml")[0]["d"] == [2]
    assert [n.tag for n in compose_stream(REDEFINED)] == ["tag:yaml.org,2002:map"] * 2


def test_an_alias_bomb_behind_a_redefined_anchor_is_still_refused() -> None:
    bomb = "r: &a [x]\nr2: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
    )
    with pytest.raises(UnsafeYamlError, match="alias"):
        check_aliases(bomb, "the file")
    with pytest.raises(UnsafeYamlError, match="alias"):
        load_one(bomb, "f.yaml")


def test_an_undefined_alias_is_still_invalid() -> None:
    with pytest.raises(UnsafeYamlError, match="not valid YAML"):
        load_one("a: *nowhere\n", "f.yaml")


# == Documents and text =================================================================================

def test_comments_empty_documents_bom_and_crlf() -> None:
    text = "\ufeff# yaml-language-server: $schema=https://example.invalid/s.json\r\n---\r\n# only a comment\r\n---\r\n---\r\nkind: A\r\nv: |\r\n  x\r\n  y\r\n...\r\n"
    assert load_all(text, "f.yaml") == [{"kind": "A", "v": "x\ny\n"}]
    assert load_one("# nothing but a comment\n", "f.yaml") is None
    assert load_one("", "f.yaml") is None


def test_a_byte_order_mark_before_a_later_document() -> None:
    # Files concatenated with their BOMs: libyaml alone loses the mapping after one (kustomize does not).
    text = "kind: A\n---\n\ufeffkind: B\nmetadata:\n  name: b\n"
    assert load_all(text, "f.yaml") == [{"kind": "A"}, {"kind": "B", "metadata": {"name": "b"}}]
    assert [h.line for h in document_heads(text)] == [1, 3]


def test_tabs() -> None:
    assert load_one("a:\tb\nc: \"x\\ty\"\nd: |\n  x\ty\n", "f.yaml") == {"a": "b", "c": "x\ty", "d": "x\ty\n"}
    # Tab indentation, even inside a block scalar, is refused here as by kustomize (go-yaml).
    with pytest.raises(UnsafeYamlError, match="not valid YAML.*line 2"):
        load_one("a:\n\tb: c\n", "f.yaml")
    with pytest.raises(UnsafeYamlError, match="tab character.*line 2"):
        load_one("d: |\n  \tindented\n", "f.yaml")


def test_a_block_scalar_holding_document_markers() -> None:
    text = "kind: A\ndata:\n  x: |\n    ---\n    b: c\n    ---\n---\nkind: B\n"
    assert [d["kind"] for d in load_all(text, "f.yaml")] == ["A", "B"]
    assert len(split_documents(text)) == 2


@pytest.mark.parametrize(
    "text,parts",
    [
        ("a: 1\n---\nb: 2\n", ["a: 1\n", "\nb: 2\n"]),
        ("a: 1\r\n---\r\nb: 2\r\n", ["a: 1\r\n", "\r\nb: 2\r\n"]),
        ("a: 1\n--- # next\nb: 2\n", ["a: 1\n", "# next\nb: 2\n"]),
        ("a: 1\n--- !tag\nb: 2\n", ["a: 1\n", "!tag\nb: 2\n"]),
        ("a: 1\n---\n---\nb: 2\n---", ["a: 1\n", "\nb: 2\n"]),
        ("a: |\n  ---\nb: --- x\nc: ----\n", ["a: |\n  ---\nb: --- x\nc: ----\n"]),
    ],
    ids=["lf", "crlf", "comment", "tag", "empty-documents", "not-markers"],
)
def test_split_documents(text: str, parts: list[str]) -> None:
    assert split_documents(text) == parts
    assert [d for d in (yaml.load(p, Loader=FastSafeLoader) for p in parts) if d is not None] == load_all(text, "f.yaml")


def test_duplicate_keys_last_wins() -> None:
    # go-yaml v2 (kustomization.yaml, Flux's decoding) keeps the last; kustomize's v3 refuses it in a resource file.
    assert load_one("namePrefix: a-\nnamePrefix: b-\n", "kustomization.yaml") == {"namePrefix": "b-"}


def test_a_very_long_file_and_a_very_long_line() -> None:
    doc = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\ndata:\n  k: \"{i}\"\n"
    text = "---\n".join(doc.format(i=i) for i in range(60_000))  # ~5 MiB
    assert len(load_all(text, "big.yaml")) == 60_000
    long_line = "a: " + "x" * 2_000_000 + "\n"
    assert len(load_one(long_line, "f.yaml")["a"]) == 2_000_000
    with pytest.raises(UnsafeYamlError, match="limit"):
        load_one(long_line, "f.yaml", max_bytes=1_000_000)


# == document_heads (file:line links) on the same traps ===============================================

def test_document_heads_on_real_world_quirks() -> None:
    text = (
        "\ufeff# yaml-language-server: $schema=x\r\n---\r\n# only a comment\r\n---\r\n"  # lines 1-4
        "apiVersion: v1\r\nkind: ConfigMap\r\nmetadata:\r\n  name: &n first\r\n  labels: {a: *n, b: &n x}\r\n"  # 5-9
        "data:\r\n  matchType: =\r\n  s: !secret foo\r\n"  # 10-12
        "--- !tagged\r\nkind: Secret\r\nmetadata:\r\n  name: second\r\n"  # 13-16
    )
    assert [(h.line, h.kind, h.name) for h in document_heads(text)] == [(5, "ConfigMap", "first"), (13, "Secret", "second")]


def test_document_heads_of_invalid_yaml_is_empty() -> None:
    assert list(document_heads("kind: A\nmetadata:\n\tname: x\n")) == []


# == Writing YAML that kustomize reads back as written ================================================

@pytest.mark.parametrize("value", ["1234e56", "0123458", "y", "n", "on", "1e3", "017", "0o17", "~", "null", "true", "12", "", "2001-12-14", "=", "1:30"])
def test_dump_round_trips_through_go_yaml_v2_rules(value: str) -> None:
    text = dump({"images": [{"name": "nginx", "newTag": value}]})
    assert yaml.load(text, Loader=FastSafeLoader)["images"][0]["newTag"] == value


def test_dump_keeps_types_and_order() -> None:
    body = {"kind": "Kustomization", "resources": ["b.yaml", "a.yaml"], "replicas": 3, "flag": True, "none": None}
    text = dump(body)
    assert text.startswith("kind: Kustomization\nresources:\n- b.yaml\n- a.yaml\n")
    assert yaml.load(text, Loader=FastSafeLoader) == body
