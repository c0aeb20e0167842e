"""Who provides an API: built-in Kubernetes, the Flux installation, a Helm chart, or an operator at run time.

The facts live in `bot/engine/data/knowledge.yaml` (read once through importlib.resources); this module
validates them into frozen rules.  Users extend them with `.fluxwarden.yaml` `runtime_crds:`
entries of the same schema (see `KnowledgeBase.with_user_rules`).
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from importlib.resources import files
from typing import Any

import yaml

from bot.engine.core.errors import ConfigError
from bot.engine.core.model import GroupKind

DATA_FILE = "knowledge.yaml"
USER_SOURCE = ".fluxwarden.yaml"

CRD_MECHANISMS = ("templates", "crds_dir", "subchart", "hook", "runtime", "external", "none")
EVIDENCE_LEVELS = ("strong", "medium", "weak")

_RUNTIME_KEYS = frozenset({"operator", "trigger", "creates", "exclude_groups", "charts", "source", "note", "evidence"})
_CHART_KEYS = frozenset({"aliases", "provides", "crds", "source", "note", "evidence"})
_CRDS_KEYS = frozenset({"mechanism", "crds_dir", "values_key", "legacy_keys", "default", "negate"})
_DERIVED_KEYS = frozenset({"name", "match", "creates", "source", "note", "evidence"})


@dataclass(frozen=True)
class RuntimeCrdRule:
    """An operator that creates CRDs (or an aggregated API) only when it reconciles a trigger CR."""

    operator: str
    trigger: GroupKind
    kinds: frozenset[GroupKind]
    group_patterns: tuple[str, ...]
    source: str
    note: str
    exclude_groups: tuple[str, ...] = ()
    charts: tuple[str, ...] = ()  # charts that install the operator itself
    evidence: str = ""

    @property
    def open_ended(self) -> bool:
        """Whether the rule may create a CRD in any group at all (a bare `*` pattern)."""
        return "*" in self.group_patterns

    def creates(self, gk: GroupKind) -> bool:
        """Whether reconciling the trigger CR would create the API of `gk` (never the trigger's own kind)."""
        if gk == self.trigger:
            return False
        if gk in self.kinds:
            return True
        if any(fnmatch.fnmatchcase(gk.group, pattern) for pattern in self.exclude_groups):
            return False
        return any(fnmatch.fnmatchcase(gk.group, pattern) for pattern in self.group_patterns)

    def _rank(self, gk: GroupKind) -> int:
        """0 for an exact kind, 1 for a group pattern, 2 for a catch-all rule: most specific first."""
        if gk in self.kinds:
            return 0
        return 2 if self.open_ended else 1


@dataclass(frozen=True)
class ChartRule:
    """What CRDs a Helm chart brings, and which values decide whether it installs them."""

    chart: str
    groups: frozenset[str]
    kinds: frozenset[GroupKind]
    crds_values_key: str | None
    crds_default: bool
    at_runtime: bool  # the chart's controller registers the CRDs when it starts (cilium, crossplane)
    source: str
    group_patterns: tuple[str, ...] = ()
    crds_legacy_keys: tuple[str, ...] = ()
    crds_negate: bool = False  # the key disables CRDs when truthy (cilium operator.skipCRDCreation)
    mechanism: str = "templates"  # one of CRD_MECHANISMS
    crds_dir: bool = False  # CRDs sit in a crds/ directory: subject to HelmRelease install.crds/upgrade.crds
    aliases: tuple[str, ...] = ()
    note: str = ""
    evidence: str = ""

    def provides(self, gk: GroupKind) -> bool:
        """Whether `gk` is one of the kinds the chart defines (ignoring whether values enable it)."""
        return (
            gk.group in self.groups
            or gk in self.kinds
            or any(fnmatch.fnmatchcase(gk.group, pattern) for pattern in self.group_patterns)
        )

    def crds_enabled(self, values: Mapping[str, Any]) -> bool:
        """Whether these HelmRelease `values` install the CRDs; keys are dotted paths, absent means the default."""
        if self.mechanism in ("none", "external"):
            return False
        if self.crds_values_key is None:
            return True
        values = values if isinstance(values, Mapping) else {}
        if self.mechanism == "subchart":
            # Helm honours a dependency `condition` only when it resolves to a bool.
            found, value = _lookup(values, self.crds_values_key)
            return value if found and isinstance(value, bool) else self.crds_default
        present = False
        for key in (self.crds_values_key, *self.crds_legacy_keys):
            found, value = _lookup(values, key)
            if not found:
                continue
            present = True
            if _truthy(value) != self.crds_negate:
                return True
        return False if present else self.crds_default


@dataclass(frozen=True)
class DerivedTarget:
    """Where in an object's body the created kind's group and kind are written."""

    kind_path: str
    group: str | None = None
    group_path: str | None = None

    def resolve(self, body: Mapping[str, Any]) -> GroupKind | None:
        """The GroupKind this target names in `body`, or None when a field is missing or not a string."""
        group = self.group if self.group is not None else _string_at(body, self.group_path or "")
        kind = _string_at(body, self.kind_path)
        if group is None or not kind:
            return None
        return GroupKind(group, kind)


@dataclass(frozen=True)
class DerivedRule:
    """A kind whose objects define new kinds from their own spec (Crossplane XRD, Gatekeeper template)."""

    name: str
    match: GroupKind
    targets: tuple[DerivedTarget, ...]
    source: str
    note: str = ""
    evidence: str = ""

    def kinds_for(self, body: Mapping[str, Any]) -> frozenset[GroupKind]:
        """The GroupKinds that the controller will create a CRD for, read from `body`."""
        found = (target.resolve(body) for target in self.targets)
        return frozenset(gk for gk in found if gk is not None)


class KnowledgeBase:
    """Immutable lookup over the built-in, Flux, chart, runtime and derived knowledge."""

    def __init__(
        self,
        builtin: Mapping[str, frozenset[str]],
        preinstalled: Mapping[str, frozenset[str]],
        charts: Mapping[str, ChartRule],
        runtime: Iterable[RuntimeCrdRule],
        derived: Iterable[DerivedRule],
    ) -> None:
        self._builtin = dict(builtin)
        self._preinstalled = dict(preinstalled)
        self._charts = dict(charts)
        self._aliases = {alias: rule.chart for rule in self._charts.values() for alias in rule.aliases}
        self._runtime = tuple(runtime)
        self._derived = tuple(derived)
        # Asked once per rendered object (20,000 in a large repo): answered by a lookup, not a scan.
        self._by_trigger: dict[GroupKind, list[RuntimeCrdRule]] = {}
        for rule in self._runtime:
            self._by_trigger.setdefault(rule.trigger, []).append(rule)
        self._derived_from = frozenset(rule.match for rule in self._derived)

    # -- read-only views -------------------------------------------------------------------

    @property
    def runtime(self) -> tuple[RuntimeCrdRule, ...]:
        """Every runtime rule, built-in ones first, then user rules."""
        return self._runtime

    @property
    def charts(self) -> Mapping[str, ChartRule]:
        """Chart rules by chart name."""
        return dict(self._charts)

    @property
    def derived(self) -> tuple[DerivedRule, ...]:
        """Every derived-kind rule."""
        return self._derived

    # -- queries ---------------------------------------------------------------------------

    def is_builtin(self, gk: GroupKind) -> bool:
        """Whether kube-apiserver itself serves `gk` (Kubernetes 1.28 - 1.35)."""
        return gk.kind in self._builtin.get(gk.group, frozenset())

    def is_builtin_group(self, group: str) -> bool:
        """Whether `group` is one of Kubernetes' own API groups."""
        return group in self._builtin

    def is_preinstalled(self, gk: GroupKind) -> bool:
        """Whether `gk` belongs to an API the Flux installation itself provides."""
        return gk.group in self._preinstalled

    def runtime_rules(self, gk: GroupKind, *, include_open_ended: bool = False) -> list[RuntimeCrdRule]:
        """Rules that would create `gk`, most specific first (exact kind, then group pattern).

        Catch-all rules (OLM, Crossplane Configuration: a bare `*` pattern) match every kind, so they
        are left out unless `include_open_ended`; use `triggered_by` when their trigger CR is present.
        """
        if self.is_builtin(gk) or self.is_builtin_group(gk.group):
            return []
        matching = [
            rule
            for rule in self._runtime
            if rule.creates(gk) and (include_open_ended or not rule.open_ended or gk in rule.kinds)
        ]
        return sorted(matching, key=lambda rule: rule._rank(gk))

    def triggered_by(self, gk: GroupKind) -> list[RuntimeCrdRule]:
        """Rules whose trigger CR is of kind `gk`."""
        return list(self._by_trigger.get(gk, ()))

    def chart_rule(self, chart_name: str) -> ChartRule | None:
        """The rule for a chart name (also accepts `repo/chart`, OCI URLs, `:tag` and `@digest`)."""
        name = normalise_chart_name(chart_name)
        if not name:
            return None
        rule = self._charts.get(name)
        if rule is None and name in self._aliases:
            rule = self._charts.get(self._aliases[name])
        return rule

    def derived_kinds(self, manifest_body: Mapping[str, Any]) -> frozenset[GroupKind]:
        """Kinds an object defines for a controller to create at run time (e.g. an XRD's); empty otherwise."""
        if not isinstance(manifest_body, Mapping):
            return frozenset()
        api_version, kind = manifest_body.get("apiVersion"), manifest_body.get("kind")
        if not isinstance(api_version, str) or not isinstance(kind, str):
            return frozenset()
        gk = GroupKind.of(api_version, kind)
        if gk not in self._derived_from:
            return frozenset()
        found: set[GroupKind] = set()
        for rule in self._derived:
            if rule.match == gk:
                found |= rule.kinds_for(manifest_body)
        return frozenset(found)

    def with_aliases(self, aliases: Iterable[tuple[str, str]]) -> "KnowledgeBase":
        """A copy where each (alias, chart) names a known chart (`.fluxwarden.yaml` `charts.aliases`); an unknown chart raises ConfigError."""
        aliases = tuple(aliases)
        if not aliases:
            return self
        charts = dict(self._charts)
        for alias, target in aliases:
            rule = self.chart_rule(target)
            if rule is None:
                raise ConfigError(f"{USER_SOURCE}: charts.aliases.{alias}: {target!r} is not a chart the knowledge base knows")
            charts[rule.chart] = replace(charts[rule.chart], aliases=(*charts[rule.chart].aliases, normalise_chart_name(alias)))
        return KnowledgeBase(self._builtin, self._preinstalled, charts, self._runtime, self._derived)

    def with_user_rules(self, entries: list[Mapping]) -> "KnowledgeBase":
        """A copy extended with `.fluxwarden.yaml` `runtime_crds:` entries; invalid ones raise ConfigError.

        Each entry is a runtime rule (same schema as knowledge.yaml `runtime_crds`), optionally with
        `charts:` either listing the charts that install the operator or mapping chart names to chart
        rules (same schema as knowledge.yaml `charts`).  An entry may also hold only `charts:`.
        User chart rules replace built-in ones of the same name.
        """
        if entries is None:
            entries = []
        if not isinstance(entries, list):
            raise ConfigError(f"{USER_SOURCE}: `runtime_crds` must be a list")
        runtime = list(self._runtime)
        charts = dict(self._charts)
        for index, entry in enumerate(entries):
            label = _entry_label(index, entry)
            if not isinstance(entry, Mapping):
                raise ConfigError(f"{label}: must be a mapping, got {type(entry).__name__}")
            chart_specs = entry.get("charts")
            if isinstance(chart_specs, Mapping):
                for name, spec in chart_specs.items():
                    rule = _parse_chart(name, spec, f"{label} charts.{name}", user=True)
                    charts[rule.chart] = rule
                rest = {key: value for key, value in entry.items() if key != "charts"}
                if not rest:
                    continue
                runtime.append(_parse_runtime(rest, label, user=True))
            else:
                runtime.append(_parse_runtime(entry, label, user=True))
        return KnowledgeBase(self._builtin, self._preinstalled, charts, runtime, self._derived)


@functools.lru_cache(maxsize=1)
def default_knowledge() -> KnowledgeBase:
    """The knowledge base shipped in bot/engine/data/knowledge.yaml, parsed once."""
    text = files("bot.engine").joinpath("data").joinpath(DATA_FILE).read_text(encoding="utf-8")
    return load_knowledge(text)


def load_knowledge(text: str, origin: str = DATA_FILE) -> KnowledgeBase:
    """Parse and validate knowledge YAML text (the packaged file's schema)."""
    try:
        doc = yaml.load(text, Loader=yaml.CSafeLoader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{origin}: not valid YAML: {exc}") from None
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{origin}: must be a mapping")
    unknown = set(doc) - {"builtin", "preinstalled", "charts", "runtime_crds", "derived"}
    if unknown:
        raise ConfigError(f"{origin}: unknown section(s) {', '.join(sorted(unknown))}")
    builtin = _parse_group_kinds(doc.get("builtin"), f"{origin} builtin")
    preinstalled = _parse_group_kinds(doc.get("preinstalled"), f"{origin} preinstalled")
    raw_charts = doc.get("charts") or {}
    if not isinstance(raw_charts, Mapping):
        raise ConfigError(f"{origin} charts: must map chart names to rules")
    charts = {}
    for name, spec in raw_charts.items():
        rule = _parse_chart(name, spec, f"{origin} charts.{name}", user=False)
        charts[rule.chart] = rule
    runtime = [
        _parse_runtime(entry, f"{origin} runtime_crds[{index}]", user=False)
        for index, entry in enumerate(_as_list(doc.get("runtime_crds"), f"{origin} runtime_crds"))
    ]
    derived = [
        _parse_derived(entry, f"{origin} derived[{index}]")
        for index, entry in enumerate(_as_list(doc.get("derived"), f"{origin} derived"))
    ]
    return KnowledgeBase(builtin, preinstalled, charts, runtime, derived)


def normalise_chart_name(chart_name: str) -> str:
    """`oci://ghcr.io/x/charts/cert-manager:v1.2` or `jetstack/cert-manager` -> `cert-manager`."""
    if not isinstance(chart_name, str):
        return ""
    name = chart_name.strip().rstrip("/")
    name = name.rsplit("/", 1)[-1]
    name = name.split("@", 1)[0]
    name = name.split(":", 1)[0]
    return name.strip().lower()


# -- parsing ---------------------------------------------------------------------------------


def _entry_label(index: int, entry: Any) -> str:
    label = f"{USER_SOURCE} runtime_crds[{index}]"
    if isinstance(entry, Mapping) and isinstance(entry.get("operator"), str) and entry["operator"].strip():
        label += f" (operator {entry['operator'].strip()!r})"
    return label


def _fail(label: str, message: str) -> ConfigError:
    return ConfigError(f"{label}: {message}")


def _as_list(value: Any, label: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _fail(label, "must be a list")
    return value


def _check_keys(raw: Mapping[str, Any], allowed: frozenset[str], label: str) -> None:
    unknown = [str(key) for key in raw if key not in allowed]
    if unknown:
        raise _fail(label, f"unknown key(s) {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(allowed))}")


def _text(raw: Mapping[str, Any], key: str, label: str, *, required: bool, default: str = "") -> str:
    value = raw.get(key)
    if value is None:
        if required:
            raise _fail(label, f"`{key}` is required")
        return default
    if not isinstance(value, str) or (required and not value.strip()):
        raise _fail(label, f"`{key}` must be a non-empty string")
    return value.strip()


def _evidence(raw: Mapping[str, Any], label: str) -> str:
    value = _text(raw, "evidence", label, required=False)
    if value and value not in EVIDENCE_LEVELS:
        raise _fail(label, f"`evidence` must be one of {', '.join(EVIDENCE_LEVELS)}")
    return value


def _group_kind(raw: Any, label: str) -> GroupKind:
    if not isinstance(raw, Mapping):
        raise _fail(label, "must be a mapping {group: ..., kind: ...}")
    _check_keys(raw, frozenset({"group", "kind"}), label)
    group, kind = raw.get("group", ""), raw.get("kind")
    if group is None:
        group = ""
    if not isinstance(group, str) or group != group.strip() or "/" in group:
        raise _fail(label, "`group` must be an API group name without a version (\"\" for core)")
    if not isinstance(kind, str) or not kind.strip():
        raise _fail(label, "`kind` must be a non-empty string")
    return GroupKind(group, kind.strip())


def _string_list(value: Any, label: str, *, allow_empty: bool = False) -> tuple[str, ...]:
    if value is None:
        value = []
    if not isinstance(value, list) or not all(isinstance(item, str) and item.strip() for item in value):
        raise _fail(label, "must be a list of non-empty strings")
    if not value and not allow_empty:
        raise _fail(label, "must not be empty")
    return tuple(item.strip() for item in value)


def _group_entries(value: Any, label: str) -> tuple[frozenset[GroupKind], frozenset[str], tuple[str, ...]]:
    """Parse `creates:`/`provides:` lists: ({group, kinds}) kinds, ({group}) whole groups, ({groups}) patterns."""
    kinds: set[GroupKind] = set()
    groups: set[str] = set()
    patterns: list[str] = []
    for index, item in enumerate(_as_list(value, label)):
        where = f"{label}[{index}]"
        if not isinstance(item, Mapping):
            raise _fail(where, "must be a mapping with `group` (+ `kinds`) or `groups`")
        _check_keys(item, frozenset({"group", "kinds", "groups"}), where)
        if "groups" in item:
            if "group" in item or "kinds" in item:
                raise _fail(where, "use either `groups:` (patterns) or `group:` with `kinds:`, not both")
            patterns.extend(_string_list(item["groups"], f"{where}.groups"))
            continue
        group = item.get("group")
        if group is None:
            group = ""
        if not isinstance(group, str) or "/" in group:
            raise _fail(where, "`group` must be an API group name without a version")
        if "kinds" in item:
            kinds.update(GroupKind(group, kind) for kind in _string_list(item["kinds"], f"{where}.kinds"))
        else:
            groups.add(group)
    return frozenset(kinds), frozenset(groups), tuple(dict.fromkeys(patterns))


def _parse_runtime(raw: Any, label: str, *, user: bool) -> RuntimeCrdRule:
    if not isinstance(raw, Mapping):
        raise _fail(label, "must be a mapping")
    _check_keys(raw, _RUNTIME_KEYS, label)
    operator = _text(raw, "operator", label, required=True)
    trigger = _group_kind(raw.get("trigger"), f"{label} trigger")
    if "creates" not in raw:
        raise _fail(label, "`creates` is required (a list of {group, kinds} or {groups: [patterns]})")
    kinds, groups, patterns = _group_entries(raw.get("creates"), f"{label} creates")
    if groups:
        # `{group: G}` without kinds in a runtime rule means the whole group: a literal pattern.
        patterns = tuple(dict.fromkeys((*patterns, *sorted(groups))))
    if not kinds and not patterns:
        raise _fail(label, "`creates` must name at least one kind or group pattern")
    charts = raw.get("charts")
    chart_names = _string_list(charts, f"{label} charts", allow_empty=True) if not isinstance(charts, Mapping) else ()
    return RuntimeCrdRule(
        operator=operator,
        trigger=trigger,
        kinds=kinds,
        group_patterns=patterns,
        source=_text(raw, "source", label, required=not user, default=USER_SOURCE),
        note=_text(raw, "note", label, required=False),
        exclude_groups=_string_list(raw.get("exclude_groups"), f"{label} exclude_groups", allow_empty=True),
        charts=tuple(normalise_chart_name(name) for name in chart_names),
        evidence=_evidence(raw, label),
    )


def _parse_chart(name: Any, raw: Any, label: str, *, user: bool) -> ChartRule:
    chart = normalise_chart_name(name) if isinstance(name, str) else ""
    if not chart:
        raise _fail(label, "chart name must be a non-empty string")
    if not isinstance(raw, Mapping):
        raise _fail(label, "must be a mapping with `provides` and `crds`")
    _check_keys(raw, _CHART_KEYS, label)
    if "provides" not in raw:
        raise _fail(label, "`provides` is required (use [] for a chart without CRDs)")
    kinds, groups, patterns = _group_entries(raw.get("provides"), f"{label} provides")
    crds = raw.get("crds")
    if not isinstance(crds, Mapping):
        raise _fail(label, "`crds` must be a mapping with at least `mechanism`")
    _check_keys(crds, _CRDS_KEYS, f"{label} crds")
    mechanism = crds.get("mechanism")
    if mechanism not in CRD_MECHANISMS:
        raise _fail(label, f"`crds.mechanism` must be one of {', '.join(CRD_MECHANISMS)}")
    defines_any = bool(kinds or groups or patterns)
    if (mechanism == "none") == defines_any:
        raise _fail(label, "`crds.mechanism: none` goes with `provides: []` and only with it")
    key = crds.get("values_key")
    if key is not None and (not isinstance(key, str) or not key.strip()):
        raise _fail(label, "`crds.values_key` must be a dotted values path or null")
    default = crds.get("default", True)
    flags = (("default", default), ("negate", crds.get("negate", False)), ("crds_dir", crds.get("crds_dir", False)))
    for flag, value in flags:
        if not isinstance(value, bool):
            raise _fail(label, f"`crds.{flag}` must be true or false")
    legacy = _string_list(crds.get("legacy_keys"), f"{label} crds.legacy_keys", allow_empty=True)
    if legacy and key is None:
        raise _fail(label, "`crds.legacy_keys` needs `crds.values_key`")
    return ChartRule(
        chart=chart,
        groups=groups,
        kinds=kinds,
        crds_values_key=key.strip() if isinstance(key, str) else None,
        crds_default=default,
        at_runtime=mechanism == "runtime",
        source=_text(raw, "source", label, required=not user, default=USER_SOURCE),
        group_patterns=patterns,
        crds_legacy_keys=legacy,
        crds_negate=bool(crds.get("negate", False)),
        mechanism=mechanism,
        crds_dir=mechanism == "crds_dir" or bool(crds.get("crds_dir", False)),
        aliases=tuple(
            normalise_chart_name(alias)
            for alias in _string_list(raw.get("aliases"), f"{label} aliases", allow_empty=True)
        ),
        note=_text(raw, "note", label, required=False),
        evidence=_evidence(raw, label),
    )


def _parse_derived(raw: Any, label: str) -> DerivedRule:
    if not isinstance(raw, Mapping):
        raise _fail(label, "must be a mapping")
    _check_keys(raw, _DERIVED_KEYS, label)
    targets = []
    for index, item in enumerate(_as_list(raw.get("creates"), f"{label} creates")):
        where = f"{label} creates[{index}]"
        if not isinstance(item, Mapping):
            raise _fail(where, "must be a mapping")
        _check_keys(item, frozenset({"group", "group_path", "kind_path"}), where)
        if ("group" in item) == ("group_path" in item):
            raise _fail(where, "needs exactly one of `group` (literal) or `group_path`")
        kind_path = _text(item, "kind_path", where, required=True)
        group = item.get("group")
        if group is not None and not isinstance(group, str):
            raise _fail(where, "`group` must be a string")
        group_path = _text(item, "group_path", where, required=False) or None
        targets.append(DerivedTarget(kind_path=kind_path, group=group, group_path=group_path))
    if not targets:
        raise _fail(label, "`creates` must not be empty")
    return DerivedRule(
        name=_text(raw, "name", label, required=True),
        match=_group_kind(raw.get("match"), f"{label} match"),
        targets=tuple(targets),
        source=_text(raw, "source", label, required=True),
        note=_text(raw, "note", label, required=False),
        evidence=_evidence(raw, label),
    )


def _parse_group_kinds(value: Any, label: str) -> dict[str, frozenset[str]]:
    out: dict[str, set[str]] = {}
    for index, item in enumerate(_as_list(value, label)):
        where = f"{label}[{index}]"
        if not isinstance(item, Mapping):
            raise _fail(where, "must be a mapping {group, kinds, source}")
        _check_keys(item, frozenset({"group", "kinds", "source", "note"}), where)
        group = item.get("group")
        if not isinstance(group, str):
            raise _fail(where, "`group` must be a string (\"\" for core)")
        _text(item, "source", where, required=True)
        out.setdefault(group, set()).update(_string_list(item.get("kinds"), f"{where}.kinds"))
    return {group: frozenset(kinds) for group, kinds in out.items()}


# -- values and field paths ------------------------------------------------------------------


def _lookup(values: Mapping[str, Any], dotted: str) -> tuple[bool, Any]:
    """(found, value) for a dotted Helm values path such as `crds.enabled`."""
    return _lookup_path(values, dotted)


def _truthy(value: Any) -> bool:
    """Go-template truthiness, as Helm's `if` sees it (the string "false" is true)."""
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value != 0
    if isinstance(value, (str, list, tuple, Mapping)):
        return len(value) > 0
    return True


def _string_at(body: Mapping[str, Any], dotted: str) -> str | None:
    if not dotted:
        return None
    found, value = _lookup_path(body, dotted)
    if not found or not isinstance(value, str):
        return None
    value = value.strip()
    return value or None


def _lookup_path(body: Mapping[str, Any], dotted: str) -> tuple[bool, Any]:
    current: Any = body
    for part in dotted.split("."):
        if not isinstance(current, Mapping) or part not in current:
            return False, None
        current = current[part]
    return True, current


# Well-known CRD bundles fetched by URL (`kubectl apply -f https://…`, a kustomization's remote resource): what
# they define, read from the projects' release assets. Anything else fetched from a URL is named, not assumed.
_GATEWAY_API = ("GatewayClass", "Gateway", "HTTPRoute", "GRPCRoute", "ReferenceGrant", "BackendTLSPolicy")
_GATEWAY_API_EXPERIMENTAL = ("TCPRoute", "TLSRoute", "UDPRoute")
# kubernetes-csi/external-snapshotter client/config/crd (its kustomization.yaml): the v1 snapshot CRDs.
_SNAPSHOT_KINDS = ("VolumeSnapshot", "VolumeSnapshotClass", "VolumeSnapshotContent")


def bundle_crds(url: str, knowledge: KnowledgeBase) -> tuple[set[tuple[str, str]], set[str]]:
    """(CRDs, chart names) a well-known CRD bundle URL installs; both empty when it is not one we know.

    kubernetes-sigs/gateway-api `standard-install.yaml`/`experimental-install.yaml`
    (https://gateway-api.sigs.k8s.io/guides/#installing-gateway-api); prometheus-operator's
    `bundle.yaml`/`stripped-down-crds.yaml` (the monitoring.coreos.com CRDs, as the
    prometheus-operator-crds chart); cert-manager's release asset `cert-manager.crds.yaml` (the CRDs the
    cert-manager chart installs: https://cert-manager.io/docs/installation/helm/#option-1-installing-crds-with-kubectl);
    the git remote bases kubernetes-csi/external-snapshotter `//client/config/crd` and kyverno/kyverno `//config/crds`; a single CRD file named
    `<plural>.<group>.yaml` whose kind the knowledge base knows (external-dns `dnsendpoints.externaldns.k8s.io.yaml`).
    """
    bare = url.split("?", 1)[0].rstrip("/")
    name = bare.rsplit("/", 1)[-1]
    if "gateway-api" in url and name.endswith("-install.yaml"):
        kinds = _GATEWAY_API + (_GATEWAY_API_EXPERIMENTAL if name.startswith("experimental") else ())
        return {("gateway.networking.k8s.io", k) for k in kinds}, set()
    if "prometheus-operator" in url and name in ("bundle.yaml", "stripped-down-crds.yaml"):
        rule = knowledge.chart_rule("prometheus-operator-crds")
        return set(), {rule.chart} if rule else set()
    if "cert-manager/cert-manager" in url and name == "cert-manager.crds.yaml":
        rule = knowledge.chart_rule("cert-manager")
        return set(), {rule.chart} if rule else set()
    if "kyverno/kyverno" in url and bare.endswith("//config/crds"):  # the CRDs the kyverno chart ships
        rule = knowledge.chart_rule("kyverno")
        return set(), {rule.chart} if rule else set()
    if "kubernetes-csi/external-snapshotter" in url and bare.endswith("client/config/crd"):
        return {("snapshot.storage.k8s.io", k) for k in _SNAPSHOT_KINDS}, set()
    match = re.fullmatch(r"([a-z0-9]+)\.([a-z0-9.-]+\.[a-z]+)\.ya?ml", name)
    if match:
        plural, group = match.groups()
        for rule in knowledge.charts.values():
            for gk in rule.kinds:
                if gk.group == group and gk.kind.lower() + "s" == plural:
                    return {(gk.group, gk.kind)}, set()
    return set(), set()


def bundle_provides(url: str, knowledge: KnowledgeBase) -> Callable[[GroupKind], bool] | None:
    """Whether a kind is among the CRDs of the well-known bundle `url` (see `bundle_crds`); None for a URL we do not know."""
    crds, charts = bundle_crds(url, knowledge)
    rules = [r for r in (knowledge.chart_rule(c) for c in charts) if r is not None]
    if not crds and not rules:
        return None
    return lambda gk: (gk.group, gk.kind) in crds or any(rule.provides(gk) for rule in rules)
