"""Bounded YAML parsing with PyYAML's C loader: size limits, alias-bomb refusal, tolerant tags."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar, Iterator

import yaml

from bot.errors import UnsafeYamlError

# Default bounds for one file or one kustomize output stream. A CRD bundle can be several MiB
# (kube-prometheus-stack ships ~4 MiB); 16 MiB leaves room without letting a PR exhaust memory.
MAX_FILE_BYTES = 16 * 1024 * 1024
# The most nodes a document may expand to through aliases, as a multiple of its text length.
# Plain Kubernetes YAML never expands; a billion-laughs bomb expands exponentially.
ALIAS_EXPANSION_FACTOR = 10
_ANCHOR = re.compile(r"(?:^|[\s\[{,:-])&[^\s\[\]{},]+")
_DOC_SEPARATOR = re.compile(r"^---[ \t]*(?:#.*)?$", re.MULTILINE)


class TolerantLoader(yaml.CSafeLoader):
    """CSafeLoader that reads custom tags (`!env_var`, `!secret`) as plain values and `=` as a string."""


def _construct_unknown(loader: TolerantLoader, _suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_mapping(node)


TolerantLoader.add_multi_constructor("!", _construct_unknown)
TolerantLoader.add_multi_constructor("tag:", _construct_unknown)
# A bare `=` resolves to the YAML 1.1 "value" type, which the safe loader rejects; real repos contain it.
TolerantLoader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node))


_STR, _MAP, _SEQ, _NULL = (f"tag:yaml.org,2002:{t}" for t in ("str", "map", "seq", "null"))
_RESOLVE_CACHE_LIMIT = 200_000


class FastSafeLoader(yaml.CSafeLoader):
    """CSafeLoader with a faster constructor for kustomize output; builds exactly what CSafeLoader builds.

    PyYAML parses in C but constructs in Python through generators (to allow recursive anchors):
    that is most of a 20,000-object render's Python time. Strings, maps, sequences and nulls take
    a direct path here; every other tag (ints, bools, timestamps, merge keys) goes through
    SafeConstructor as before. A node met twice (an alias) is built once and shared, as in
    SafeConstructor, so an alias bomb costs no more here than there.
    """

    # Implicit tags of plain scalars, memoised: kustomize output repeats the same keys and values.
    _resolved: ClassVar[dict[tuple[str, bool], str]] = {}

    def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
        if kind is not yaml.ScalarNode or not implicit[0]:
            return super().resolve(kind, value, implicit)
        key = (value, implicit[1])
        tag = self._resolved.get(key)
        if tag is None:
            tag = super().resolve(kind, value, implicit)
            if len(self._resolved) > _RESOLVE_CACHE_LIMIT:
                FastSafeLoader._resolved = {}
            self._resolved[key] = tag
        return tag

    def construct_document(self, node: yaml.Node) -> Any:
        built: dict[int, Any] = {}
        data = self._construct_fast(node, built)
        self.constructed_objects, self.recursive_objects, self.state_generators = {}, {}, []
        return data

    def _construct_fast(self, node: yaml.Node, built: dict[int, Any]) -> Any:
        tag = node.tag
        if tag == _STR and type(node) is yaml.ScalarNode:
            return node.value
        if tag == _NULL and type(node) is yaml.ScalarNode:
            return None
        if id(node) in built:
            return built[id(node)]
        if tag == _MAP and type(node) is yaml.MappingNode and not any(k.tag == "tag:yaml.org,2002:merge" for k, _ in node.value):
            mapping: dict[Any, Any] = {}
            built[id(node)] = mapping
            for key_node, value_node in node.value:
                key = self._construct_fast(key_node, built)
                try:
                    mapping[key] = self._construct_fast(value_node, built)
                except TypeError:  # an unhashable key: let SafeConstructor raise its error
                    return self.construct_object(node, deep=True)
            return mapping
        if tag == _SEQ and type(node) is yaml.SequenceNode:
            sequence: list[Any] = []
            built[id(node)] = sequence
            sequence.extend(self._construct_fast(child, built) for child in node.value)
            return sequence
        value = self.construct_object(node, deep=True)
        built[id(node)] = value
        return value


def _expanded_size(data: Any, budget: int) -> int:
    """Count nodes as a reader would see them after alias expansion, stopping past `budget`."""
    count = 0
    stack = [data]
    while stack:
        item = stack.pop()
        count += 1
        if count > budget:
            return count
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return count


def _check_size(text: str, name: str, max_bytes: int) -> None:
    if len(text) > max_bytes:
        raise UnsafeYamlError(f"{name} is {len(text):,} bytes, over the {max_bytes:,}-byte limit")


def _guard_aliases(data: Any, text: str, name: str) -> None:
    budget = max(10_000, ALIAS_EXPANSION_FACTOR * len(text))
    if _expanded_size(data, budget) > budget:
        raise UnsafeYamlError(f"{name} expands through YAML aliases past {budget:,} nodes (an alias bomb); refused")


def check_aliases(text: str, name: str) -> None:
    """Raise UnsafeYamlError for an alias bomb; other YAML errors are left for kustomize to report.

    kustomize expands aliases when it builds, so a bomb in a resource file must be refused before it runs.
    """
    if "*" not in text or not _ANCHOR.search(text):
        return
    try:
        for doc in yaml.load_all(text, Loader=TolerantLoader):
            _guard_aliases(doc, text, name)
    except (yaml.YAMLError, RecursionError):
        return


def load_all(text: str, name: str, *, max_bytes: int = MAX_FILE_BYTES) -> list[Any]:
    """Parse every document of a YAML stream, refusing oversized text and alias bombs."""
    _check_size(text, name, max_bytes)
    try:
        docs = list(yaml.load_all(text, Loader=TolerantLoader))
    except yaml.YAMLError as exc:
        raise UnsafeYamlError(f"{name} is not valid YAML: {_short_yaml_error(exc)}") from None
    except RecursionError:
        raise UnsafeYamlError(f"{name} nests too deeply to parse") from None
    if "&" in text and _ANCHOR.search(text):
        for doc in docs:
            _guard_aliases(doc, text, name)
    return [doc for doc in docs if doc is not None]


def load_one(text: str, name: str, *, max_bytes: int = MAX_FILE_BYTES) -> Any:
    """Parse a single-document YAML file (config, kustomization) with the same bounds."""
    docs = load_all(text, name, max_bytes=max_bytes)
    return docs[0] if docs else None


def split_documents(text: str) -> list[str]:
    """Split a kustomize output stream into document texts (kustomize writes `---` at column 0)."""
    return [part for part in _DOC_SEPARATOR.split(text) if part.strip()]


def _short_yaml_error(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{problem} (line {mark.line + 1})" if mark is not None else str(problem)


@dataclass(frozen=True)
class DocumentHead:
    """Where one document of a file starts, and the kind/name it declares."""

    line: int
    kind: str
    name: str
    namespace: str


def document_heads(text: str) -> Iterator[DocumentHead]:
    """Yield the start line, kind and metadata name of each document (for `file:line` links)."""
    try:
        nodes = list(yaml.compose_all(text, Loader=TolerantLoader))
    except yaml.YAMLError:
        return
    for node in nodes:
        if not isinstance(node, yaml.MappingNode):
            continue
        fields = {k.value: v for k, v in node.value if isinstance(k, yaml.ScalarNode)}
        kind = fields.get("kind")
        meta = fields.get("metadata")
        meta_fields = (
            {k.value: v for k, v in meta.value if isinstance(k, yaml.ScalarNode)}
            if isinstance(meta, yaml.MappingNode)
            else {}
        )
        name = meta_fields.get("name")
        namespace = meta_fields.get("namespace")
        yield DocumentHead(
            line=node.start_mark.line + 1,
            kind=kind.value if isinstance(kind, yaml.ScalarNode) else "",
            name=name.value if isinstance(name, yaml.ScalarNode) else "",
            namespace=namespace.value if isinstance(namespace, yaml.ScalarNode) else "",
        )
