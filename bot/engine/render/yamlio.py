"""Bounded YAML parsing with PyYAML's C loader, reading YAML as Flux does: size limits, alias-bomb refusal, any tag."""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable, Iterator, cast

import yaml

from bot.engine.core.errors import InvalidYamlError, LimitError, UnsafeYamlError

# Default bounds for one file or one kustomize output stream. A CRD bundle can be several MiB
# (kube-prometheus-stack ships ~4 MiB); 16 MiB leaves room without letting a PR exhaust memory.
MAX_FILE_BYTES = 16 * 1024 * 1024
# The most nodes a document may expand to through aliases, as a multiple of its text length.
# Plain Kubernetes YAML never expands; a billion-laughs bomb expands exponentially.
ALIAS_EXPANSION_FACTOR = 10
# The deepest a document may nest mappings and sequences, aliases followed. Real manifests stay under 20
# (a CRD's openAPIV3Schema is the deepest); every walker of parsed YAML recurses, and Python's recursion
# limit (1,000 frames, a few per level) is the danger a PR could aim at.
MAX_NESTING = 100
# The most documents one file may hold (a generated bundle may have tens of thousands; a build's output has
# its own bound, RenderLimits.tier_objects).
MAX_DOCUMENTS = 100_000
# libyaml's own bound (0.2.5+, yaml_set_max_nest_level, default 1000): past it, the parser stops.
_LIBYAML_NESTING = "exceeded maximum nesting depth"
_ANCHOR = re.compile(r"(?:^|[\s\[{,:-])&[^\s\[\]{},]+")
# A document marker: `---` at column 0 followed by a blank, a line end (LF or CRLF) or the end. What
# follows it on the line (`--- !tag`, `--- # comment`) belongs to the next document.
_DOC_SEPARATOR = re.compile(r"^---(?:[ \t]+|(?=\r?$))", re.MULTILINE)


# How plain scalars resolve. Everything Fluxwarden parses is, in Flux, decoded by sigs.k8s.io/yaml,
# which is go-yaml v2 (YAML 1.1 booleans, `=` a string, timestamps kept as strings):
# - kustomize's output: kustomize-controller substitutes each object and decodes it with
#   `yaml.YAMLToJSON` (fluxcd/pkg kustomize/kustomize_varsub.go, varSubstitution), then applies what
#   `ssautil.ReadObjects` decodes (fluxcd/pkg ssa/utils/object.go: apimachinery's YAMLOrJSONDecoder,
#   sigs.k8s.io/yaml again). kustomize writes that output for a YAML 1.1 reader: kyaml quotes every
#   string go-yaml v2 would read as something else (kyaml/yaml/compatibility.go IsValueNonString:
#   `"y"`, `"on"`, `"1:30"`, timestamps) but not `=`, which v2 reads as a string and PyYAML as the
#   YAML 1.1 "value" type its safe loader cannot construct (bjw-s-labs/home-ops' AlertmanagerConfig
#   `matchType: =`).
# - kustomization.yaml: Flux's generator (fluxcd/pkg kustomize/kustomize_generator.go, yaml.Unmarshal)
#   and kustomize (api/types/kustomization.go Kustomization.Unmarshal, yaml.YAMLToJSON) read it the
#   same way: `commonLabels: {a: y}` is a bool there, and the build fails.
# - Resource files are read by kyaml (go-yaml v3: `yes`, `y`, `on` are strings), but we never take
#   values from them: `document_heads` reads the raw text of kind and name, `check_aliases` counts nodes.
# So plain scalars resolve as go-yaml v2's resolve() does (go.yaml.in/yaml/v2 resolve.go), and decode as
# its decoder does into interface{} (decode.go: a timestamp stays the string it was written as); our own
# configuration files (.fluxwarden.yaml, the service configuration) are read with the same rules.
_STR, _MAP, _SEQ, _NULL, _BOOL, _INT, _FLOAT, _MERGE = (
    f"tag:yaml.org,2002:{t}" for t in ("str", "map", "seq", "null", "bool", "int", "float", "merge")
)
_GO_BOOLS = {
    **dict.fromkeys(("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), True),
    **dict.fromkeys(("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"), False),
}
_GO_NULLS = frozenset(("", "~", "null", "Null", "NULL"))
_GO_SPECIAL_FLOATS = {
    **dict.fromkeys((".nan", ".NaN", ".NAN"), math.nan),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), math.inf),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), -math.inf),
}
# strconv.ParseInt(s, 0, 64) syntax once underscores are removed: 0x, 0b, 0o or a leading 0 for octal.
_GO_INT = re.compile(r"([-+]?)(0[xX][0-9a-fA-F]+|0[bB][01]+|0[oO][0-7]+|0[0-7]*|[1-9][0-9]*)")
_GO_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")  # resolve.go yamlStyleFloat
_GO_DOT_FLOAT = re.compile(r"\.[0-9]+(?:[eE][-+]?[0-9]+)?")  # what strconv.ParseFloat takes after a leading `.`
_INT64 = range(-(2**63), 2**63)
_UINT64 = range(2**64)


def _go_int(text: str) -> int | None:
    """The integer go-yaml v2 reads from a plain scalar, or None."""
    plain = text.replace("_", "")
    match = _GO_INT.fullmatch(plain)
    if match is None:
        return None
    sign, digits = match.groups()
    if len(digits) > 1 and digits[0] == "0" and digits[1] in "0123456789":
        value = int(digits, 8)  # 017: Go's base 0 reads a leading zero as octal; Python's int() refuses it
    else:
        value = int(digits, 0)
    value = -value if sign == "-" else value
    # ParseInt, then ParseUint (which takes no sign); past both, the float rule may still read it.
    return value if value in _INT64 or (not sign and value in _UINT64) else None


def _go_tag(value: str) -> str:
    """The tag go-yaml v2 resolves a plain scalar to (resolve.go resolve, with no explicit tag)."""
    if value in _GO_NULLS:
        return _NULL
    first = value[0]
    if first in "yYnNtTfFoO":
        return _BOOL if value in _GO_BOOLS else _STR
    if value == "<<":
        return _MERGE  # as a key; as any other value it reads back as the string (see _construct_merge_value)
    if first == ".":
        return _FLOAT if value in _GO_SPECIAL_FLOATS or _GO_DOT_FLOAT.fullmatch(value) else _STR
    if first in "+-0123456789":
        # A timestamp (2001-12-14) decodes to its own text: like every other non-number, a string.
        if value in _GO_SPECIAL_FLOATS:
            return _FLOAT
        if _go_int(value) is not None:
            return _INT
        if _GO_FLOAT.fullmatch(value.replace("_", "")):
            return _FLOAT
    return _STR


def _construct_bool(loader: FastSafeLoader, node: yaml.ScalarNode) -> bool:
    value = loader.construct_scalar(node)
    if value not in _GO_BOOLS:
        raise yaml.constructor.ConstructorError(None, None, f"cannot decode {value!r} as a bool", node.start_mark)
    return _GO_BOOLS[value]


def _construct_int(loader: FastSafeLoader, node: yaml.ScalarNode) -> int:
    value = loader.construct_scalar(node)
    number = _go_int(value)
    if number is None:  # `!!int foo`, `!!int 1e3`: go-yaml refuses them too
        raise yaml.constructor.ConstructorError(None, None, f"cannot decode {value!r} as an int", node.start_mark)
    return number


def _construct_float(loader: FastSafeLoader, node: yaml.ScalarNode) -> float:
    value = loader.construct_scalar(node)
    if value in _GO_SPECIAL_FLOATS:
        return _GO_SPECIAL_FLOATS[value]
    number = _go_int(value)
    if number is not None:
        return float(number)  # `!!float 1` is 1.0
    if not (_GO_FLOAT.fullmatch(value.replace("_", "")) or _GO_DOT_FLOAT.fullmatch(value)):
        raise yaml.constructor.ConstructorError(None, None, f"cannot decode {value!r} as a float", node.start_mark)
    return float(value.replace("_", ""))


def _construct_binary(loader: FastSafeLoader, node: yaml.ScalarNode) -> str:
    """`!!binary` decodes to the string of its bytes (go-yaml v2 decode.go), not to Python bytes."""
    data = loader.construct_yaml_binary(node)
    return data.decode("utf-8", errors="replace")


def _construct_text(loader: FastSafeLoader, node: yaml.ScalarNode) -> str:
    """The scalar as written (a timestamp decodes to its own text, as in go-yaml v2)."""
    return loader.construct_scalar(node)


def _construct_merge_value(loader: FastSafeLoader, node: yaml.Node) -> Any:
    """`<<` where it is not a mapping key is the string "<<"."""
    return loader.construct_scalar(node) if isinstance(node, yaml.ScalarNode) else _construct_by_kind(loader, "", node)


def _construct_by_kind(loader: FastSafeLoader, _suffix: str, node: yaml.Node) -> Any:
    """Any other tag (`!env_var`, `!secret`, `!!set`, `!!python/object`): the node as written, as go-yaml v2 reads it."""
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_mapping(cast(yaml.MappingNode, node), deep=True)  # a composed node is one of the three


def _construct_plain(loader: FastSafeLoader, node: yaml.Node) -> Any:
    """The plain map or sequence under a YAML 1.1 type tag (`!!set`, `!!omap`, `!!pairs`)."""
    return _construct_by_kind(loader, "", node)


def _json_key(key: Any, node: yaml.Node) -> Any:
    """A mapping key as sigs.k8s.io/yaml turns it into a JSON key (yaml.go convertToJSONableObject).

    JSON keys are strings: `true:` (or `y:`, `on:`) is "true", `8080:` is "8080". A null key, or an
    integer past int64, is an error there ("unsupported map key"), so Flux fails on it too. A
    sequence or mapping is left for SafeConstructor to refuse as unhashable.
    """
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, float):
        return _go_float32_text(key)
    if isinstance(key, int) and key in _INT64:
        return str(key)
    if key is None or isinstance(key, int):
        raise yaml.constructor.ConstructorError(
            None, None, f"mapping key {key!r} cannot become a JSON key (sigs.k8s.io/yaml rejects it)", node.start_mark
        )
    return key


def _go_float32_text(value: float) -> str:
    """strconv.FormatFloat(value, 'g', -1, 32), with go-yaml's names for infinities and NaN."""
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    single = struct.unpack("f", struct.pack("f", value))[0]
    for precision in range(1, 10):  # the shortest decimal that reads back as the same float32
        text = f"{single:.{precision - 1}e}"
        if struct.unpack("f", struct.pack("f", float(text)))[0] == single:
            break
    mantissa, exponent_text = text.split("e")
    exponent = int(exponent_text)
    sign, digits = ("-", mantissa[1:]) if mantissa.startswith("-") else ("", mantissa)
    digits = digits.replace(".", "").rstrip("0") or "0"
    if exponent < -4 or exponent >= 6:  # %e form; shortest 'g' decides at precision 6
        return f"{sign}{digits[0]}{'.' + digits[1:] if len(digits) > 1 else ''}e{'+' if exponent >= 0 else '-'}{abs(exponent):02d}"
    if exponent < 0:
        return f"{sign}0.{'0' * (-exponent - 1)}{digits}"
    whole, fraction = digits[: exponent + 1].ljust(exponent + 1, "0"), digits[exponent + 1 :]
    return f"{sign}{whole}{'.' + fraction if fraction else ''}"


_RESOLVE_CACHE_LIMIT = 200_000


def share_mapping_keys(enabled: bool) -> bool:
    """Keep each distinct mapping key of a build's output once (`FastSafeLoader.share_keys`): for a process that
    runs one command and ends. The setting before."""
    before, FastSafeLoader.share_keys = FastSafeLoader.share_keys, enabled
    return before


def clear_resolve_cache() -> None:
    """Forget the memoised scalar tags (the end of the last open run: a long-lived process keeps no run's strings)."""
    FastSafeLoader._resolved = {}


class FastSafeLoader(yaml.CSafeLoader):
    """CSafeLoader reading YAML the way Flux does (go-yaml v2, see above), with a faster constructor.

    PyYAML parses in C but constructs in Python through generators (to allow recursive anchors):
    that is most of a 20,000-object render's Python time. Strings, maps, sequences, nulls, bools
    and ints take a direct path here; every other tag (floats, merge keys, custom tags) goes through
    SafeConstructor with the constructors below. A node met twice (an alias) is built once and
    shared, as in SafeConstructor, so an alias bomb costs no more here than there.
    """

    # Implicit tags of plain scalars, memoised: kustomize output repeats the same keys and values.
    _resolved: ClassVar[dict[str, str]] = {}
    # With `share_keys` (a process that runs one command: the CLI), the mapping keys of this stream (one build's
    # output) are kept once each: 40 MiB of a 20,000-object cold check's 200 MiB were copies of the same keys.
    # Not in the service: there the shared strings, left among a run's garbage, kept ~50 MiB of its heap resident
    # after the run (tests/hardening/test_memory.py).
    share_keys: ClassVar[bool] = False
    _keys: dict[str, str] | None = None
    _document: yaml.Node | None = None  # the document being constructed, and its subtrees' nesting (see `nesting`)
    _heights: dict[int, int]

    def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
        if kind is not yaml.ScalarNode or not implicit[0]:
            return super().resolve(kind, value, implicit)
        tag = self._resolved.get(value)
        if tag is None:
            tag = _go_tag(value)
            if len(self._resolved) > _RESOLVE_CACHE_LIMIT:
                FastSafeLoader._resolved = {}
            self._resolved[value] = tag
        return tag

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        mapping = super().construct_mapping(node, deep=deep)
        if all(type(key) is str for key in mapping):
            return mapping
        return {_json_key(key, node): value for key, value in mapping.items()}

    def construct_document(self, node: yaml.Node) -> Any:
        built: dict[int, Any] = {}
        if self._keys is None and self.share_keys:
            self._keys = {}
        self._document, self._heights = node, {}
        data = self._construct_fast(node, built, 1)
        self.constructed_objects, self.recursive_objects, self.state_generators = {}, {}, []
        self._heights = {}
        return data

    def _within(self, node: yaml.Node, depth: int) -> None:
        """Refuse a node met again (an alias) or left to SafeConstructor when its subtree takes the document past MAX_NESTING."""
        if type(node) is not yaml.ScalarNode and depth - 1 + nesting(node, self._heights) > MAX_NESTING:
            raise self._too_deep()

    def _too_deep(self) -> LimitError:
        assert self._document is not None
        return LimitError(f"nests {nesting(self._document, {}):,} levels deep (limit: {MAX_NESTING})")

    def _construct_fast(self, node: yaml.Node, built: dict[int, Any], depth: int) -> Any:
        tag = node.tag
        if type(node) is yaml.ScalarNode:
            if tag == _STR:
                return node.value
            if tag == _NULL:
                return None
            if tag == _BOOL and node.value in _GO_BOOLS:
                return _GO_BOOLS[node.value]
            if tag == _INT:
                number = _go_int(node.value)
                if number is not None:
                    return number
        if id(node) in built:
            self._within(node, depth)  # an alias: its subtree nests again where it is used
            return built[id(node)]
        if depth > MAX_NESTING and type(node) is not yaml.ScalarNode:
            raise self._too_deep()
        if tag == _MAP and type(node) is yaml.MappingNode and not any(k.tag == _MERGE for k, _ in node.value):
            mapping: dict[Any, Any] = {}
            built[id(node)] = mapping
            for key_node, value_node in node.value:
                key = self._construct_fast(key_node, built, depth + 1)
                if type(key) is str:
                    keys = self._keys
                    if keys is not None:  # share_keys: one string per distinct key (`metadata`, `labels`, …)
                        shared = keys.get(key)
                        if shared is None:
                            if len(keys) > _RESOLVE_CACHE_LIMIT:
                                keys.clear()
                            shared = keys[key] = key
                        key = shared
                else:
                    key = _json_key(key, key_node)
                try:
                    mapping[key] = self._construct_fast(value_node, built, depth + 1)
                except TypeError:  # an unhashable key: let SafeConstructor raise its error
                    self._within(node, depth)
                    return self.construct_object(node, deep=True)
            return mapping
        if tag == _SEQ and type(node) is yaml.SequenceNode:
            sequence: list[Any] = []
            built[id(node)] = sequence
            sequence.extend(self._construct_fast(child, built, depth + 1) for child in node.value)
            return sequence
        self._within(node, depth)  # SafeConstructor recurses, a few frames a level
        value = self.construct_object(node, deep=True)
        built[id(node)] = value
        return value


FastSafeLoader.add_constructor(_BOOL, _construct_bool)
FastSafeLoader.add_constructor(_INT, _construct_int)
FastSafeLoader.add_constructor(_FLOAT, _construct_float)
FastSafeLoader.add_constructor("tag:yaml.org,2002:timestamp", _construct_text)
FastSafeLoader.add_constructor("tag:yaml.org,2002:binary", _construct_binary)
FastSafeLoader.add_constructor(_MERGE, _construct_merge_value)
for _tag in ("set", "omap", "pairs"):  # YAML 1.1 types go-yaml v2 reads as the plain map or sequence
    FastSafeLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _construct_plain)
FastSafeLoader.add_multi_constructor("", _construct_by_kind)  # every other tag


class _RedefinableComposer(yaml.composer.Composer):
    """Composes with a later anchor of the same name replacing the earlier one, as go-yaml and kustomize do.

    PyYAML refuses a re-defined anchor ("found duplicate anchor"); the YAML spec says an alias
    refers to the most recent node with that anchor, and helm-values-style files rely on it.
    """

    _composing = 0  # nodes open above this one: the Python composer recurses, two frames a level

    if TYPE_CHECKING:  # the C parser _RedefiningLoader mixes in provides them

        def check_event(self, *choices: type[yaml.Event]) -> bool: ...

        def peek_event(self) -> yaml.Event | None: ...

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if not self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            if isinstance(event, yaml.NodeEvent) and event.anchor is not None:
                self.anchors.pop(event.anchor, None)
        if self._composing > MAX_NESTING:
            raise LimitError(f"nests more than {MAX_NESTING} levels deep (limit: {MAX_NESTING})")
        self._composing += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._composing -= 1


class _RedefiningLoader(_RedefinableComposer, FastSafeLoader):
    """FastSafeLoader with the Python composer (C events): only for texts that re-define an anchor."""

    def __init__(self, stream: str) -> None:
        FastSafeLoader.__init__(self, stream)
        self.anchors: dict[str, yaml.Node] = {}


def _redefines_anchor(exc: yaml.YAMLError) -> bool:
    return isinstance(exc, yaml.composer.ComposerError) and "duplicate anchor" in str(exc.context)


class GoQuoting:
    """Dumper mixin: quote every string go-yaml v2 would read as something else (`y`, `1e3`, `0123458`)."""

    def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
        if kind is yaml.ScalarNode and implicit[0]:
            return _go_tag(value)
        return super().resolve(kind, value, implicit)  # type: ignore[misc]


class _KubeDumper(GoQuoting, yaml.SafeDumper):
    """SafeDumper writing what kustomize and Flux read back as written."""


def dump(data: Any) -> str:
    """YAML for kustomize and Flux to read back as written (a kustomization.yaml Fluxwarden writes).

    kustomize decodes kustomization.yaml with go-yaml v2 rules (see above): PyYAML's own dumper
    leaves an image tag `1234e56` unquoted, which kustomize then reads as a number and rejects.
    """
    return yaml.dump(data, Dumper=_KubeDumper, sort_keys=False)


# A byte order mark may open any document of a stream (YAML 1.2 §5.2), as where files were concatenated;
# go-yaml skips it, libyaml counts it as a column and then loses the mapping it starts.
_LINE_START_BOM = re.compile("^\ufeff", re.MULTILINE)


def _without_boms(text: str) -> str:
    return _LINE_START_BOM.sub("", text) if "\ufeff" in text else text


def nesting(node: yaml.Node, heights: dict[int, int]) -> int:
    """How many mappings and sequences deep a node tree goes, aliases followed (iterative; `heights` memoises by node).

    An alias inside its own anchor's node is refused as go-yaml refuses it (go-yaml decode.go `alias`,
    "anchor 'a' value contains itself"): Flux never reads such a document, and it would nest without end.
    """
    stack: list[tuple[yaml.Node, bool]] = [(node, False)]
    open_nodes: set[int] = set()
    while stack:
        item, leaving = stack.pop()
        key = id(item)
        if type(item) is yaml.ScalarNode:
            heights[key] = 0
            continue
        children = [c for pair in item.value for c in pair] if type(item) is yaml.MappingNode else item.value
        if leaving:
            open_nodes.discard(key)
            heights[key] = 1 + max((heights[id(c)] for c in children), default=0)
            continue
        if key in heights:
            continue
        if key in open_nodes:
            raise yaml.constructor.ConstructorError(None, None, "an anchor's value contains itself", item.start_mark)
        open_nodes.add(key)
        stack.append((item, True))
        stack.extend((c, False) for c in children if id(c) not in heights)
    return heights[id(node)]


def nesting_limit(exc: yaml.YAMLError) -> LimitError | None:
    """libyaml's own nesting bound as ours, when that is what stopped a parse."""
    if _LIBYAML_NESTING in str(exc):
        return LimitError(f"nests more than 1,000 levels deep (limit: {MAX_NESTING})")
    return None


def load_stream(text: str) -> list[Any]:
    """Every document of a YAML stream (None for an empty one), read as Flux reads it.

    Raises yaml.YAMLError, or LimitError past MAX_NESTING or MAX_DOCUMENTS.
    """
    return _read_stream(yaml.load_all, text)


def compose_stream(text: str) -> list[yaml.Node]:
    """The node trees of a YAML stream (tags resolved, nothing constructed); raises yaml.YAMLError or LimitError."""
    nodes = _read_stream(yaml.compose_all, text)
    heights: dict[int, int] = {}
    for node in nodes:
        depth = nesting(node, heights)
        if depth > MAX_NESTING:
            raise LimitError(f"nests {depth:,} levels deep (limit: {MAX_NESTING})")
    return nodes


def _read_stream(read: Callable[..., Iterator[Any]], text: str) -> list[Any]:
    """`read` with the C loader, again with the slower one that lets an anchor be re-defined only when it must."""
    text = _without_boms(text)
    try:
        return _bounded(read(text, Loader=FastSafeLoader))
    except yaml.YAMLError as exc:
        if not _redefines_anchor(exc):
            limit = nesting_limit(exc)
            if limit is not None:
                raise limit from None
            raise
    try:
        return _bounded(read(text, Loader=_RedefiningLoader))
    except yaml.YAMLError as exc:
        limit = nesting_limit(exc)
        if limit is not None:
            raise limit from None
        raise


def _bounded(documents: Iterator[Any]) -> list[Any]:
    """The documents of a stream, refused past MAX_DOCUMENTS."""
    out = []
    for count, document in enumerate(documents, 1):
        if count > MAX_DOCUMENTS:
            raise LimitError(f"holds more than {MAX_DOCUMENTS:,} YAML documents (limit: {MAX_DOCUMENTS:,})")
        out.append(document)
    return out


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
        for doc in load_stream(text):
            _guard_aliases(doc, text, name)
    except (yaml.YAMLError, LimitError):
        return  # a build that reads it fails on the same bounds


def load_all(text: str, name: str, *, max_bytes: int = MAX_FILE_BYTES) -> list[Any]:
    """Parse every document of a YAML stream, refusing oversized text and alias bombs."""
    _check_size(text, name, max_bytes)
    try:
        docs = load_stream(text)
    except yaml.YAMLError as exc:
        raise InvalidYamlError(f"{name} is not valid YAML: {_short_yaml_error(exc)}") from None
    except LimitError as exc:
        raise LimitError(f"{name} {exc}", exc.file) from None
    if "&" in text and _ANCHOR.search(text):
        for doc in docs:
            _guard_aliases(doc, text, name)
    return [doc for doc in docs if doc is not None]


def load_one(text: str, name: str, *, max_bytes: int = MAX_FILE_BYTES) -> Any:
    """Parse a single-document YAML file (config, kustomization) with the same bounds."""
    docs = load_all(text, name, max_bytes=max_bytes)
    return docs[0] if docs else None


def split_documents(text: str) -> list[str]:
    """Split a YAML stream into document texts at its `---` markers (kustomize writes them at column 0).

    Inside a block scalar a `---` line is indented, so it never splits one.
    """
    return [part for part in _DOC_SEPARATOR.split(text) if part.strip()]


def _short_yaml_error(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{problem} (line {mark.line + 1})" if mark is not None else str(problem)


# go-yaml v3 (kustomize's reader of resource files) refuses a key a mapping repeats, but names no file,
# and its line numbers count the object as kustomize re-encoded it (kyaml decode.go mapping: `%#v`).
_DUPLICATE_KEY_ERROR = re.compile(r'mapping key "((?:[^"\\]|\\.)*)" already defined')


def duplicate_keys(text: str) -> Iterator[tuple[str, int]]:
    """Each key a mapping of `text` repeats, as written (go-yaml v3 compares the text), with its 1-based line."""
    try:
        nodes = compose_stream(text)
    except (yaml.YAMLError, LimitError):
        return
    stack: list[yaml.Node] = list(nodes)
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:  # an alias: its node was walked already
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            keys: set[str] = set()
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    if key.value in keys:
                        yield key.value, key.start_mark.line + 1
                    keys.add(key.value)
                stack.extend((key, value))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)


def find_duplicate_key(message: str, files: Iterable[str], read: Callable[[str], str | None]) -> tuple[str, int] | None:
    """The file and line of the repeated key a kustomize error names (first file in name order), if any."""
    match = _DUPLICATE_KEY_ERROR.search(message)
    if match is None:
        return None
    key = match.group(1).encode().decode("unicode_escape", errors="replace")
    for rel in sorted(files):
        text = read(rel)
        if text is None or len(text) > MAX_FILE_BYTES or key not in text:
            continue
        line = next((line for repeated, line in duplicate_keys(text) if repeated == key), None)
        if line is not None:
            return rel, line
    return None


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
        nodes = compose_stream(text)
    except (yaml.YAMLError, LimitError):
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
