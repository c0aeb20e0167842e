"""What helm-controller gives Helm and what it gets back: composed values (with Secret values masked),
the release's objects, churn folded for diffs, and the API versions a chart sees as `.Capabilities`.
"""

from __future__ import annotations

import base64
import binascii
import copy
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bot.engine.core.errors import InputError
from bot.engine.render.chartrender import merge_maps
from bot.engine.render.facts import CRD, crd_kind
from bot.engine.render.helmrelease import ReleaseSpec
from bot.engine.core.model import Finding, GroupKind, Manifest, ObjectRef, Severity
from bot.engine.render.rendered import SECRET_MASK, object_ref
from bot.engine.render.yamlio import load_all, load_one

MAX_VALUES_BYTES = 4 * 1024 * 1024  # a ConfigMap or Secret holds 1 MiB; more is not a real values file
MAX_RELEASE_BYTES = 64 * 1024 * 1024
MAX_RELEASE_OBJECTS = 20_000
MIN_MASKED = 4  # shorter Secret values ("true", "1") would mask half the output
HOOK_ANNOTATION = "helm.sh/hook"
DEFAULT_KUBE_VERSION = "v1.34.0"  # a recent release: charts gating on kubeVersion see a current cluster

Objects = Mapping[tuple[str, str, str], Manifest]  # (kind, namespace, name) → rendered ConfigMap/Secret


class ValuesPathError(ValueError):
    """A valuesFrom targetPath that Helm's `--set` parser refuses."""


@dataclass(frozen=True)
class ComposedValues:
    """The values helm-controller hands to Helm for a release."""

    values: Mapping[str, Any]
    from_secrets: Mapping[str, str]  # leaf string (len >= 4) → "namespace/name" of the Secret it came from
    missing: tuple[Finding, ...] = ()
    open: bool = False  # a valuesFrom source is not in git (or encrypted): the values are not fully known


# -- values ---------------------------------------------------------------------------------------


def compose_values(spec: ReleaseSpec, objects: Objects) -> ComposedValues:
    """Compose a release's values as fluxcd/pkg chartutil/values.go ChartValuesFromReferences does.

    Each valuesFrom in order (merged at the root, or set at its targetPath), then `spec.values` on top.
    Upstream merges `spec.values` into the result before each targetPath: its nested maps are then
    shared, so a targetPath inside a map of `spec.values` changes `spec.values` itself and wins over
    it, while a top-level one loses ("target path precedence over all" in values_test.go). Python
    dicts share the same way, so this port keeps that.
    """
    inline: dict[str, Any] = copy.deepcopy(dict(spec.values))  # api/v2 GetValues decodes a fresh copy
    result: dict[str, Any] = {}
    secrets: dict[str, str] = {}
    findings: list[Finding] = []
    is_open = False
    namespace = spec.ref.namespace
    for ref in spec.values_from:
        what = f"valuesFrom {ref.kind}/{namespace}/{ref.name}"
        found = objects.get((ref.kind, namespace, ref.name))
        if found is None or (ref.kind == "Secret" and "sops" in found.body):
            is_open = True
            state = "is not in git" if found is None else "is SOPS-encrypted"
            findings.append(_finding(spec, Severity.INFO, "values-source-external", f"{what}{' (optional)' if ref.optional else ''} {state}; the values were composed without it"))
            continue
        data = _config_data(found.body)
        if ref.values_key not in data:
            if not ref.optional:
                findings.append(_finding(spec, Severity.ERROR, "values-missing", f"{what} has no key {ref.values_key!r}: helm-controller fails the release"))
            continue
        text = data[ref.values_key]
        try:
            if ref.target_path:
                result = merge_maps(result, inline)
                replace_path_value(result, ref.target_path, text, literal=ref.literal)
                added: Any = [text, text.strip("'\"")]
            else:
                added = _read_values(text, f"{what} key {ref.values_key}")
                result = merge_maps(result, added)
        except (ValuesPathError, InputError) as exc:
            findings.append(_finding(spec, Severity.ERROR, "values-invalid", f"{what}: {exc}"))
            continue
        if ref.kind == "Secret":
            secrets.update((leaf, f"{namespace}/{ref.name}") for leaf in _leaves(added))
    return ComposedValues(merge_maps(result, inline), secrets, tuple(findings), is_open)


def _finding(spec: ReleaseSpec, severity: Severity, check: str, message: str) -> Finding:
    return Finding(check, severity, f"HelmRelease {spec.id}: {message}", object=spec.ref, location=spec.origin)


def _config_data(body: Mapping[str, Any]) -> dict[str, str]:
    """A ConfigMap's `data`, or a Secret's `data` decoded with `stringData` over it (as the API server stores it)."""
    out: dict[str, str] = {}
    data = body.get("data")
    for key, value in (data.items() if isinstance(data, Mapping) else ()):
        text = "" if value is None else str(value)
        if body.get("kind") == "Secret":
            try:
                text = base64.b64decode(text, validate=True).decode("utf-8", errors="replace")
            except (binascii.Error, ValueError):
                pass  # not base64: the API server refuses it; read it as written
        out[str(key)] = text
    string_data = body.get("stringData") if body.get("kind") == "Secret" else None
    for key, value in (string_data.items() if isinstance(string_data, Mapping) else ()):
        out[str(key)] = "" if value is None else str(value)
    return out


def _read_values(text: str, name: str) -> dict[str, Any]:
    """Helm chart/common ReadValues: YAML whose document is a mapping (empty gives {})."""
    doc = load_one(text, name, max_bytes=MAX_VALUES_BYTES)
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ValuesPathError(f"{name} is not a YAML mapping")
    return doc


def _leaves(value: Any) -> Iterable[str]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    elif value is not None and not isinstance(value, bool) and len(str(value)) >= MIN_MASKED:
        yield str(value)


def replace_path_value(values: dict[str, Any], path: str, value: str, *, literal: bool = False) -> None:
    """Set `value` at `path` in place, as fluxcd/pkg chartutil ReplacePathValue (`helm --set`) does.

    A value quoted at both ends is set as a string without its quotes (`--set-string`); otherwise
    Helm's strvals types it (true/false/null, integers without a leading zero) and reads `,` `{}`
    `[]` as its syntax. `literal` sets the text as written (ReplacePathLiteralValue).
    """
    if literal:
        _Strvals(f"{path}={_escape_literal(value)}", strings=True).parse_into(values)
        return
    if len(value) >= 1 and (value[0] == value[-1] == "'" or value[0] == value[-1] == '"'):
        _Strvals(path + "=" + value.strip("'\""), strings=True).parse_into(values)
        return
    _Strvals(f"{path}={value}", strings=False).parse_into(values)


def _escape_literal(value: str) -> str:
    for char in ("\\", ",", "[", "]", "{", "}"):
        value = value.replace(char, "\\" + char)
    return value


_MAX_INDEX = 65536  # helm pkg/strvals MaxIndex
_MAX_NESTING = 30  # helm pkg/strvals MaxNestedNameLevel
_INT = re.compile(r"[+-]?[0-9]+")


class _Strvals:
    """A port of helm pkg/strvals parser.go (the `--set` syntax), enough for a targetPath assignment."""

    def __init__(self, text: str, *, strings: bool) -> None:
        self.text, self.pos, self.strings = text, 0, strings

    def parse_into(self, data: dict[str, Any]) -> None:
        while self._key(data, 0):
            pass

    def _until(self, stop: str) -> tuple[str, str | None]:
        """Characters up to one of `stop` (a backslash escapes the next); (text, None) at the end."""
        out: list[str] = []
        while self.pos < len(self.text):
            char = self.text[self.pos]
            self.pos += 1
            if char in stop:
                return "".join(out), char
            if char == "\\":
                if self.pos >= len(self.text):
                    return "".join(out), None
                char = self.text[self.pos]
                self.pos += 1
            out.append(char)
        return "".join(out), None

    def _typed(self, text: str) -> Any:
        if self.strings:
            return text
        lowered = text.lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        if lowered == "null":
            return None
        if text == "0":
            return 0
        if text and text[0] != "0" and _INT.fullmatch(text) and -(2**63) <= int(text) < 2**63:
            return int(text)
        return text

    def _key(self, data: dict[str, Any], level: int) -> bool:
        """Parse one `key...=value`; False at the end of the text."""
        key, last = self._until("=[,.")
        if last is None:
            if not key:
                return False
            raise ValuesPathError(f"key {key!r} has no value")
        if last == "[":
            index = self._index()
            existing = data.get(key, [])
            if not isinstance(existing, list):
                raise ValuesPathError(f"{key!r} is not a list")
            _set(data, key, self._list_item(existing, index, level))
            return True
        if last == "=":
            _set(data, key, self._value())
            return True
        if last == ",":
            _set(data, key, "")
            raise ValuesPathError(f"key {key!r} has no value (cannot end with ,)")
        level += 1
        if level > _MAX_NESTING:
            raise ValuesPathError(f"value name nested level is greater than maximum supported nested level of {_MAX_NESTING}")
        inner = data.get(key, {})
        if not isinstance(inner, dict):
            raise ValuesPathError(f"{key!r} is not a map")
        more = self._key(inner, level)
        if not inner:
            if more:
                raise ValuesPathError(f"key map {key!r} has no value")
            return False  # `a.` at the very end: strvals stops without setting anything
        _set(data, key, inner)
        return more

    def _index(self) -> int:
        text, last = self._until("]")
        if last is None or not _INT.fullmatch(text):
            raise ValuesPathError(f"error parsing index {text!r}")
        index = int(text)
        if index < 0:
            raise ValuesPathError(f"negative {index} index not allowed")
        if index > _MAX_INDEX:
            raise ValuesPathError(f"index of {index} is greater than maximum supported index of {_MAX_INDEX}")
        return index

    def _list_item(self, items: list[Any], index: int, level: int) -> list[Any]:
        rest, last = self._until("[.=")
        if rest:
            raise ValuesPathError(f"unexpected data at end of array index: {rest!r}")
        if last is None:
            raise ValuesPathError("list index has no value")
        if last == "=":
            return _set_index(items, index, self._value())
        if last == "[":
            inner_index = self._index()
            current = items[index] if index < len(items) else None
            if current is not None and not isinstance(current, list):
                raise ValuesPathError(f"item {index} is not a list")
            return _set_index(items, index, self._list_item(current or [], inner_index, level))
        inner = items[index] if index < len(items) and isinstance(items[index], dict) else {}
        if index < len(items):
            items[index] = inner
        self._key(inner, level)
        return _set_index(items, index, inner)

    def _value(self) -> Any:
        """The value after `=`: a `{a,b}` list or one scalar up to the next `,`."""
        if self.pos >= len(self.text):
            return ""
        if self.text[self.pos] == "{":
            self.pos += 1
            items = []
            while True:
                text, last = self._until(",}")
                if last is None:
                    raise ValuesPathError("list must terminate with '}'")
                items.append(self._typed(text))
                if last == "}":
                    if self.pos < len(self.text) and self.text[self.pos] == ",":
                        self.pos += 1
                    return items
        text, _ = self._until(",")
        return self._typed(text)


def _set(data: dict[str, Any], key: str, value: Any) -> None:
    if key:
        data[key] = value


def _set_index(items: list[Any], index: int, value: Any) -> list[Any]:
    if len(items) <= index:
        items = items + [None] * (index + 1 - len(items))  # a new list, as Go's grown slice is
    items[index] = value
    return items


def values_without_secrets(values: ComposedValues) -> dict[str, Any]:
    """The composed values with every leaf that came from a Secret masked: safe to keep and to judge by key."""
    def walk(node: Any) -> Any:
        if isinstance(node, Mapping):
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        if isinstance(node, str) and node in values.from_secrets:
            return SECRET_MASK.format(name=f"values from Secret {values.from_secrets[node]}")
        return node

    return walk(values.values)


def mask_secret_values(text: str, secrets: Mapping[str, str] | Iterable[str]) -> str:
    """Replace every value that came from a Secret (and its base64, and each long line of it) with a mask."""
    named = secrets if isinstance(secrets, Mapping) else dict.fromkeys(secrets, "")
    masks: dict[str, str] = {}
    for value, secret in named.items():
        label = SECRET_MASK.format(name=f"values from Secret {secret}" if secret else "values from a Secret")
        forms = {value, base64.b64encode(value.encode()).decode(), *(line.strip() for line in value.splitlines())}
        for form in forms:
            if len(form) >= MIN_MASKED:
                masks.setdefault(form, label)
    if not masks:
        return text
    pattern = re.compile("|".join(re.escape(form) for form in sorted(masks, key=len, reverse=True)))
    return pattern.sub(lambda match: masks[match.group(0)], text)


# -- objects --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChartObject:
    """One object a release renders, with the chart file it came from."""

    manifest: Manifest  # origin: the HelmRelease's, so a finding links to the file a PR can change
    template: str  # "chart podinfo 6.5.0: templates/deployment.yaml"
    hook: str | None = None  # the `helm.sh/hook` annotation: created by a hook, not kept in the release


@dataclass(frozen=True)
class ReleaseObjects:
    """What a rendered release applies: its objects, the CRDs it defines, and what went wrong reading them."""

    objects: tuple[ChartObject, ...]
    crds: tuple[tuple[GroupKind, ObjectRef], ...]  # (kind defined, the CRD)
    findings: tuple[Finding, ...] = ()
    created_namespace: str | None = None  # install.createNamespace

    @property
    def manifests(self) -> tuple[Manifest, ...]:
        """Every object, hooks included."""
        return tuple(o.manifest for o in self.objects)


def release_objects(
    files: Sequence[tuple[str, str]],
    crds: Sequence[tuple[str, str]],
    spec: ReleaseSpec,
    cluster_scoped: Callable[[GroupKind], bool],
    *,
    chart: str = "",
    upgrade: bool = False,
) -> ReleaseObjects:
    """Read a rendered release (template files, then the chart's crds/ files) into its objects.

    crds/ files are applied only when the release's CRD policy is not Skip (helm-controller
    internal/action/crds.go applyCRDs; `install.crds`, or `upgrade.crds` for an upgrade); CRDs in
    templates are ordinary objects and always applied. Helm's kube client gives namespaced objects
    without a namespace the release namespace (helm pkg/kube Client.Build, NamespaceParam().DefaultNamespace()).
    """
    policy = spec.upgrade_crds if upgrade else spec.install_crds
    inputs = [*files, *(crds if policy != "Skip" else ())]
    label = f"chart {chart}: " if chart else "chart: "
    objects: list[ChartObject] = []
    defined: list[tuple[GroupKind, ObjectRef]] = []
    findings: list[Finding] = []
    total = 0
    for path, text in inputs:
        total += len(text)
        if total > MAX_RELEASE_BYTES or len(objects) >= MAX_RELEASE_OBJECTS:
            findings.append(_finding(spec, Severity.ERROR, "render-limit", f"the rendered chart is larger than {MAX_RELEASE_BYTES >> 20} MiB or {MAX_RELEASE_OBJECTS} objects; the rest was not read"))
            break
        try:
            docs = load_all(text, f"{label}{path}")
        except InputError as exc:
            findings.append(_finding(spec, Severity.ERROR, "chart-render-invalid", str(exc)))
            continue
        for doc in docs:
            ref = object_ref(doc) if isinstance(doc, dict) else None
            if ref is None:
                findings.append(_finding(spec, Severity.ERROR, "chart-render-invalid", f"{label}{path}: a document without apiVersion, kind and metadata.name (Helm refuses it)"))
                continue
            if cluster_scoped(ref.group_kind):
                ref = ObjectRef(ref.api_version, ref.kind, "", ref.name)
            elif not ref.namespace:
                ref = ObjectRef(ref.api_version, ref.kind, spec.namespace, ref.name)
                # Written into the body too: the object Helm applies has it, and a chart that starts writing
                # `namespace: {{ .Release.Namespace }}` changes nothing a diff should show.
                doc = {**doc, "metadata": {**doc["metadata"], "namespace": spec.namespace}}
            annotations = (doc.get("metadata") or {}).get("annotations")
            hook = annotations.get(HOOK_ANNOTATION) if isinstance(annotations, dict) else None
            objects.append(ChartObject(Manifest(ref, doc, spec.origin), f"{label}{path}", str(hook) if hook else None))
            kind = crd_kind(doc) if ref.group_kind == CRD else None
            if kind is not None:
                defined.append((kind, ref))
    created = spec.namespace if spec.create_namespace else None
    if created and not any(o.manifest.ref.kind == "Namespace" and o.manifest.ref.name == created for o in objects):
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": created}}
        objects.append(ChartObject(Manifest(ObjectRef("v1", "Namespace", "", created), body, spec.origin), "install.createNamespace"))
    return ReleaseObjects(tuple(objects), tuple(defined), tuple(findings), created)


# -- diffs ----------------------------------------------------------------------------------------

# Labels every chart bump rewrites on every object: noise in a diff. `checksum/*` annotations are kept:
# they change only when the config they hash changes, and they are what rolls the pods.
CHURN_LABELS = ("helm.sh/chart", "app.kubernetes.io/version")
_POD_TEMPLATE_METADATA = (("spec", "template", "metadata"), ("spec", "jobTemplate", "spec", "template", "metadata"))


def fold_churn(body: Mapping[str, Any]) -> Mapping[str, Any]:
    """A copy of `body` without the chart-version labels in its metadata and its pod template's."""
    out = copy.deepcopy(dict(body))
    for path in (("metadata",), *_POD_TEMPLATE_METADATA):
        node: Any = out
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        labels = node.get("labels") if isinstance(node, dict) else None
        if isinstance(labels, dict):
            for label in CHURN_LABELS:
                labels.pop(label, None)
    return out


# -- capabilities ---------------------------------------------------------------------------------

# A table: the group/versions a default kube-apiserver serves, and their kinds (kubernetes api discovery,
# `kubectl api-resources` on a kind cluster of each release; since 1.24 new beta APIs are off by default,
# so only GA versions appear). Each release lists what it adds to the one before.
_BUILTIN_APIS: dict[int, dict[str, str]] = {
    33: {
        "v1": "Binding ComponentStatus ConfigMap Endpoints Event LimitRange Namespace Node PersistentVolume "
        "PersistentVolumeClaim Pod PodTemplate ReplicationController ResourceQuota Secret Service ServiceAccount",
        "admissionregistration.k8s.io/v1": "MutatingWebhookConfiguration ValidatingAdmissionPolicy "
        "ValidatingAdmissionPolicyBinding ValidatingWebhookConfiguration",
        "apiextensions.k8s.io/v1": "CustomResourceDefinition",
        "apiregistration.k8s.io/v1": "APIService",
        "apps/v1": "ControllerRevision DaemonSet Deployment ReplicaSet StatefulSet",
        "authentication.k8s.io/v1": "SelfSubjectReview TokenReview",
        "authorization.k8s.io/v1": "LocalSubjectAccessReview SelfSubjectAccessReview SelfSubjectRulesReview SubjectAccessReview",
        "autoscaling/v1": "HorizontalPodAutoscaler",
        "autoscaling/v2": "HorizontalPodAutoscaler",
        "batch/v1": "CronJob Job",
        "certificates.k8s.io/v1": "CertificateSigningRequest",
        "coordination.k8s.io/v1": "Lease",
        "discovery.k8s.io/v1": "EndpointSlice",
        "events.k8s.io/v1": "Event",
        "flowcontrol.apiserver.k8s.io/v1": "FlowSchema PriorityLevelConfiguration",
        "networking.k8s.io/v1": "IPAddress Ingress IngressClass NetworkPolicy ServiceCIDR",  # IPAddress, ServiceCIDR: GA 1.33
        "node.k8s.io/v1": "RuntimeClass",
        "policy/v1": "PodDisruptionBudget",
        "rbac.authorization.k8s.io/v1": "ClusterRole ClusterRoleBinding Role RoleBinding",
        "scheduling.k8s.io/v1": "PriorityClass",
        "storage.k8s.io/v1": "CSIDriver CSINode CSIStorageCapacity StorageClass VolumeAttachment",
    },
    34: {
        "resource.k8s.io/v1": "DeviceClass ResourceClaim ResourceClaimTemplate ResourceSlice",  # DRA GA
        "storage.k8s.io/v1": "VolumeAttributesClass",  # GA 1.34
    },
    35: {},
}


def kube_minor(kube_version: str) -> int:
    """The minor of `v1.34.0` (34), clamped to the releases the table knows."""
    match = re.match(r"v?1\.(\d+)", kube_version.strip())
    minor = int(match.group(1)) if match else int(DEFAULT_KUBE_VERSION.split(".")[1])
    return min(max(minor, min(_BUILTIN_APIS)), max(_BUILTIN_APIS))


def api_versions(kube_version: str, crd_manifests: Iterable[Manifest]) -> tuple[str, ...]:
    """`.Capabilities.APIVersions`: `group/version` and `group/version/Kind` of the built-in APIs and of every
    served version of the CRDs (helm pkg/action GetVersionSet lists both forms from discovery)."""
    kinds: dict[str, set[str]] = {}
    for minor in sorted(_BUILTIN_APIS):
        if minor <= kube_minor(kube_version):
            for group_version, names in _BUILTIN_APIS[minor].items():
                kinds.setdefault(group_version, set()).update(names.split())
    for manifest in crd_manifests:
        spec = manifest.body.get("spec")
        spec = spec if isinstance(spec, dict) else {}
        crd_names = spec.get("names")
        group, kind = spec.get("group"), crd_names.get("kind") if isinstance(crd_names, dict) else None
        if manifest.ref.group_kind != CRD or not isinstance(group, str) or not isinstance(kind, str):
            continue
        versions = spec.get("versions")
        served = [
            v["name"] for v in (versions if isinstance(versions, list) else [])
            if isinstance(v, dict) and isinstance(v.get("name"), str) and v.get("served", True) is not False
        ]
        if not served and isinstance(spec.get("version"), str):  # apiextensions v1beta1
            served = [spec["version"]]
        for version in served:
            kinds.setdefault(f"{group}/{version}", set()).add(kind)
    out = set(kinds) | {f"{gv}/{kind}" for gv, names in kinds.items() for kind in names}
    return tuple(sorted(out))
