"""The objects a Flux Operator ResourceSet creates, rendered from the inputs git holds (pure).

Follows flux-operator (controlplaneio-fluxcd/flux-operator): the inputs are `spec.inputs` and the
`Static` ResourceSetInputProviders of `spec.inputsFrom` (internal/inputs/combine.go `Combine`,
flattened or permuted), each templated into `spec.resources` (as YAML text) and `spec.resourcesTemplate`
(internal/builder/resourceset.go `BuildResourceSet`), deduplicated, stamped with the owner labels and
`commonMetadata` (internal/controller/resourceset_controller.go `apply`). Providers that read a live API
(GitHub, GitLab, OCI registries, …) have no inputs in git: an info finding each.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import yaml

from bot.engine.core.errors import InputError
from bot.engine.render.gotemplate import Budget, LimitExceeded, Template, TemplateError, Unsupported, adler32
from bot.engine.core.model import Finding, Manifest, ObjectRef, Severity, TierId
from bot.engine.render.rendered import object_ref
from bot.engine.render.yamlio import load_all

GROUP = "fluxcd.controlplane.io"
RESOURCESET = "ResourceSet"
PROVIDER = "ResourceSetInputProvider"
STATIC = "Static"
OWNER_NAME_LABEL = f"resourceset.{GROUP}/name"
OWNER_NAMESPACE_LABEL = f"resourceset.{GROUP}/namespace"
RECONCILE_ANNOTATION = f"{GROUP}/reconcile"
MAX_PERMUTATIONS = 10_000  # internal/inputs/permuter.go maxPermutations
MAX_INPUTS = 2_000  # input sets one ResourceSet is rendered for (flattened)
MAX_OBJECTS = 20_000  # objects one ResourceSet may create
MAX_NESTING = 4  # ResourceSets that create ResourceSets
MAX_STEPS = 500_000  # template steps one ResourceSet may take over all its input sets
MAX_OUTPUT = 64 << 20  # characters its templates may write over all its input sets


class _Failed(Exception):
    """The operator fails this ResourceSet too (its message is theirs)."""


class _NotRendered(Exception):
    """Fluxwarden cannot render this ResourceSet (unsupported or past a bound)."""


@dataclass(frozen=True)
class RsetRender:
    """What one ResourceSet creates, in the operator's order, and what stopped or narrowed it."""

    objects: tuple[Mapping[str, Any], ...]
    findings: tuple[Finding, ...]


def is_resourceset(manifest: Manifest) -> bool:
    """A `fluxcd.controlplane.io` ResourceSet."""
    return manifest.ref.kind == RESOURCESET and manifest.ref.group == GROUP


def is_input_provider(manifest: Manifest) -> bool:
    """A `fluxcd.controlplane.io` ResourceSetInputProvider."""
    return manifest.ref.kind == PROVIDER and manifest.ref.group == GROUP


def _json_value(value: Any) -> Any:
    """A value as the operator holds it: decoded from JSON, so every number is a float64."""
    return json.loads(json.dumps(value, default=str), parse_int=float)


def normalise_key(name: str) -> str:
    """internal/inputs/keys.go NormalizeKeyForTemplate: the key a provider's inputs get under Permute
    (spaces and Go's `unicode.IsPunct` characters become `_`, what is not [a-z0-9] goes, empty words go)."""
    mapped = "".join("_" if c.isspace() or c in _GO_PUNCT else c for c in name.lower())
    mapped = re.sub(r"[^a-z0-9_]", "", mapped)
    return "_".join(w for w in mapped.split("_") if w)


_GO_PUNCT = frozenset("!\"#%&'()*,-./:;?@[\\]_{}")  # ASCII's unicode.IsPunct; `$+<=>^`|~` are symbols in Go


def _selects(selector: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    """A metav1.LabelSelector against labels (matchLabels and matchExpressions); a bad operator selects nothing."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if str(labels.get(key)) != str(value) or key not in labels:
            return False
    for expr in selector.get("matchExpressions") or []:
        if not isinstance(expr, dict):
            return False
        key, op, values = str(expr.get("key")), str(expr.get("operator")), [str(v) for v in expr.get("values") or []]
        if op == "In" and not (key in labels and str(labels[key]) in values):
            return False
        if op == "NotIn" and key in labels and str(labels[key]) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


def _provider_ref(api_version: str, kind: str, name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": name, "namespace": namespace}


def _inline_inputs(rset: Manifest, namespace: str) -> list[dict[str, Any]]:
    spec = rset.body.get("spec") or {}
    raw = spec.get("inputs") or []
    if not isinstance(raw, list):
        raise _Failed("spec.inputs is not a list")
    out = []
    for item in raw:
        if not isinstance(item, dict):
            raise _Failed("an entry of spec.inputs is not a map")
        values = _json_value(item)
        values["provider"] = _provider_ref(f"{GROUP}/v1", RESOURCESET, rset.ref.name, namespace)
        out.append(values)
    return out


def _providers(rset: Manifest, namespace: str, candidates: Sequence[Manifest], findings: list[Finding], tier: TierId | None) -> list[tuple[str, list[dict[str, Any]]]]:
    """The selected providers (sorted as the operator sorts them) with their exported inputs; the live ones are reported."""
    spec = rset.body.get("spec") or {}
    refs = spec.get("inputsFrom") or []
    if not isinstance(refs, list):
        raise _Failed("spec.inputsFrom is not a list")
    in_namespace = [p for p in candidates if (p.ref.namespace or namespace) == namespace]
    selected: dict[str, Manifest] = {}
    for ref in refs:
        if not isinstance(ref, dict):
            raise _Failed("an entry of spec.inputsFrom is not a map")
        if ref.get("name"):
            found = next((p for p in in_namespace if p.ref.name == str(ref["name"])), None)
            if found is None:
                raise _NotRendered(
                    f"its input provider {PROVIDER}/{namespace}/{ref['name']} is not in git (an object another system creates): its inputs are not known"
                )
            selected.setdefault(found.ref.name, found)
        elif isinstance(ref.get("selector"), dict):
            for provider in in_namespace:
                labels = (provider.body.get("metadata") or {}).get("labels") or {}
                if _selects(ref["selector"], labels if isinstance(labels, dict) else {}):
                    selected.setdefault(provider.ref.name, provider)
        else:
            raise _Failed("input provider reference must have either name or selector set")
    out = []
    live = []
    for name in sorted(selected):
        provider = selected[name]
        pspec = provider.body.get("spec") or {}
        kind = str(pspec.get("type") or "")
        if kind != STATIC:
            live.append((provider, kind))
            continue
        defaults = pspec.get("defaultValues") or {}
        if not isinstance(defaults, dict):
            raise _Failed(f"{PROVIDER} {name}: spec.defaultValues is not a map")
        values = _json_value(defaults)
        # The controller's id is adler32 of the provider's UID, which only the cluster knows; like
        # `flux-operator build rset --inputs-from-provider` (cmd/cli/build_resourceset.go), use its name.
        values["id"] = str(adler32(name))
        values["provider"] = _provider_ref(f"{GROUP}/v1", PROVIDER, name, namespace)
        out.append((name, [values]))
    for provider, kind in live:
        findings.append(Finding(
            "resourceset-not-rendered", Severity.INFO,
            f"ResourceSet {namespace}/{rset.ref.name}: input provider {provider.ref.name} (type {kind or 'unset'}) needs a live API; "
            "the objects it would add inputs for are not rendered",
            kustomization=tier, object=rset.ref, location=provider.origin or rset.origin,
        ))
    if live and _strategy(spec) == "Permute":
        raise _NotRendered("it permutes inputs of a provider that needs a live API: every input set depends on them")
    return out


def _strategy(spec: Mapping[str, Any]) -> str:
    strategy = spec.get("inputStrategy")
    name = strategy.get("name") if isinstance(strategy, dict) else None
    return str(name) if name else "Flatten"


def combined_inputs(rset: Manifest, providers: Sequence[Manifest], findings: list[Finding], tier: TierId | None = None) -> list[dict[str, Any]] | None:
    """The input sets a ResourceSet renders for (internal/inputs/combine.go); None: none at all, render once without inputs."""
    spec = rset.body.get("spec") or {}
    namespace = rset.ref.namespace
    inline = _inline_inputs(rset, namespace)
    from_providers = _providers(rset, namespace, providers, findings, tier)
    if not spec.get("inputsFrom") and not inline:
        return None
    strategy = _strategy(spec)
    if strategy == "Flatten":
        out = [*inline, *(values for _, sets in from_providers for values in sets)]
    elif strategy == "Permute":
        include_empty = bool((spec.get("inputStrategy") or {}).get("includeEmptyProviders"))
        scoped = []
        for name, sets in [(rset.ref.name, inline), *from_providers]:
            if not sets and not include_empty:
                continue
            key = normalise_key(name)
            if not key:
                raise _Failed(f"normalized provider name is empty: '{name}'")
            scoped.append((key, sets))
        total = 1
        for _, sets in scoped:
            total *= len(sets)
        if total > MAX_PERMUTATIONS:
            raise _Failed(f"the inputs would make {total} permutations, more than the operator allows ({MAX_PERMUTATIONS})")
        out = []
        if scoped and total:
            indices = [0] * len(scoped)
            while True:
                perm: dict[str, Any] = {}
                for (key, sets), i in zip(scoped, indices):
                    perm[key] = sets[i]
                perm["id"] = str(adler32("/".join(f"{key}={i}" for (key, _), i in zip(scoped, indices))))
                out.append(perm)
                pos = len(indices) - 1
                while pos >= 0:
                    indices[pos] += 1
                    if indices[pos] < len(scoped[pos][1]):
                        break
                    indices[pos] = 0
                    pos -= 1
                if pos < 0:
                    break
    else:
        raise _Failed(f"unknown input strategy: '{strategy}'")
    if len(out) > MAX_INPUTS:
        raise _NotRendered(f"it has {len(out)} input sets (limit: {MAX_INPUTS})")
    return out


def _documents(text: str, what: str) -> list[dict[str, Any]]:
    try:
        docs = load_all(text, what)
    except InputError as exc:
        raise _Failed(f"the {what} does not render to valid YAML: {exc}") from None
    out = []
    for doc in docs:
        if not isinstance(doc, dict):
            raise _Failed(f"the {what} renders a document that is not an object")
        if not doc:
            continue
        out.append(doc)
    return out


def _resources_text(resource: Any) -> str:
    """A `spec.resources` entry as the template the operator executes: its JSON as YAML (sigs.k8s.io/yaml
    JSONToYAML; keys sorted, no line folding, so an action never breaks across lines)."""
    return yaml.safe_dump(json.loads(json.dumps(resource, default=str)), default_flow_style=False, sort_keys=True, width=1 << 30, allow_unicode=True)


def _build(resources: Sequence[Any], template: str, inputs: list[dict[str, Any]] | None, budget: Budget) -> list[dict[str, Any]]:
    """internal/builder/resourceset.go BuildResourceSet: resources first, then the template's, first of a key wins."""
    sets: list[dict[str, Any] | None] = [None] if inputs is None else list(inputs)
    objects: list[dict[str, Any]] = []
    seen: set[tuple[str, str, str, str]] = set()

    def add(obj: dict[str, Any], dedup: bool) -> None:
        ref = object_ref(obj)
        if ref is None:
            raise _Failed("a resource lacks apiVersion, kind or metadata.name")
        meta = obj.get("metadata") or {}
        annotations = meta.get("annotations") if isinstance(meta, dict) else None
        if inputs is not None and isinstance(annotations, dict) and annotations.get(RECONCILE_ANNOTATION) == "disabled":
            return
        key = (ref.group, ref.kind, ref.namespace, ref.name)
        if dedup and key in seen:
            return
        seen.add(key)
        objects.append(obj)
        if len(objects) > MAX_OBJECTS:
            raise _NotRendered(f"it creates more than {MAX_OBJECTS} objects")

    for i, resource in enumerate(resources):
        parsed = Template.parse(_resources_text(resource))
        for values in sets:
            docs = _documents(_execute(parsed, values, f"resources[{i}]", budget), f"resources[{i}]")
            if len(docs) != 1:
                raise _Failed(f"resources[{i}] renders {len(docs)} objects, not one")
            add(docs[0], dedup=inputs is not None)
    if template:
        parsed = Template.parse(template)
        for values in sets:
            for doc in _documents(_execute(parsed, values, "resourcesTemplate", budget), "resourcesTemplate"):
                add(doc, dedup=True)
    return objects


def _execute(template: Template, values: dict[str, Any] | None, what: str, budget: Budget) -> str:
    try:
        return template.execute(values, budget)
    except TemplateError as exc:
        raise _Failed(f"{what}: {exc}") from None


def _stamp(objects: Iterable[dict[str, Any]], rset: Manifest) -> list[dict[str, Any]]:
    """Owner labels, then commonMetadata over them (ssa SetOwnerLabels, ssautil SetCommonMetadata)."""
    common = (rset.body.get("spec") or {}).get("commonMetadata")
    common = common if isinstance(common, dict) else {}
    out = []
    for obj in objects:
        meta = dict(obj.get("metadata") or {})
        labels = meta.get("labels")
        meta["labels"] = {**(labels if isinstance(labels, dict) else {}), OWNER_NAME_LABEL: rset.ref.name, OWNER_NAMESPACE_LABEL: rset.ref.namespace, **(common.get("labels") or {})}
        if common.get("annotations"):
            annotations = meta.get("annotations")
            meta["annotations"] = {**(annotations if isinstance(annotations, dict) else {}), **common["annotations"]}
        out.append({**obj, "metadata": meta})
    return out


def _ordered(objects: list[dict[str, Any]], rset: Manifest) -> list[dict[str, Any]]:
    """The ResourceSet's `spec.dependsOn` as ordering: the operator creates nothing until each dependency is
    ready, so a Flux Kustomization it creates waits for a Kustomization it depends on (`ready: true`, kstatus
    Ready), and a HelmRelease for a HelmRelease. A `readyExpr` (any CEL condition), a dependency without
    `ready` (it only has to exist) or of another kind orders nothing Fluxwarden's graph knows: ignored."""
    deps = (rset.body.get("spec") or {}).get("dependsOn") or []
    edges: dict[str, list[dict[str, str]]] = {"Kustomization": [], "HelmRelease": []}
    for dep in deps if isinstance(deps, list) else []:
        if not isinstance(dep, dict) or not dep.get("ready") or dep.get("readyExpr"):
            continue
        kind, group = str(dep.get("kind")), str(dep.get("apiVersion", "")).rpartition("/")[0]
        if (kind, group) in (("Kustomization", "kustomize.toolkit.fluxcd.io"), ("HelmRelease", "helm.toolkit.fluxcd.io")) and dep.get("name"):
            edges[kind].append({"name": str(dep["name"]), "namespace": str(dep.get("namespace") or rset.ref.namespace)})
    if not any(edges.values()):
        return objects
    out = []
    for obj in objects:
        ref = object_ref(obj)
        wanted = edges.get(ref.kind) if ref is not None and ref.group in ("kustomize.toolkit.fluxcd.io", "helm.toolkit.fluxcd.io") else None
        spec = obj.get("spec")
        if wanted and isinstance(spec, dict):
            given = spec.get("dependsOn")
            own: list[Any] = given if isinstance(given, list) else []
            obj = {**obj, "spec": {**spec, "dependsOn": [*own, *(d for d in wanted if d not in own)]}}
        out.append(obj)
    return out


def render_resourceset(rset: Manifest, providers: Sequence[Manifest] = (), tier: TierId | None = None) -> RsetRender:
    """The objects a ResourceSet creates from the inputs git holds, or the findings that say why not (or not all)."""
    findings: list[Finding] = []
    where = f"ResourceSet {rset.ref.namespace}/{rset.ref.name}"
    spec = rset.body.get("spec")
    try:
        if not isinstance(spec, dict):
            raise _Failed("it has no spec")
        steps = spec.get("steps") or []
        if steps and (spec.get("resources") or spec.get("resourcesTemplate")):
            raise _Failed("spec.steps is mutually exclusive with spec.resources and spec.resourcesTemplate")
        inputs = combined_inputs(rset, providers, findings, tier)
        budget = Budget(MAX_STEPS, MAX_OUTPUT)
        if spec.get("inputsFrom") and not inputs:
            return RsetRender((), tuple(findings))  # no inputs: the operator applies an empty set
        objects: list[dict[str, Any]] = []
        if steps:
            owner: dict[tuple[str, str, str, str], str] = {}
            for step in steps if isinstance(steps, list) else []:
                if not isinstance(step, dict):
                    raise _Failed("a step is not a map")
                built = _build(_list(step.get("resources")), str(step.get("resourcesTemplate") or ""), inputs, budget)
                for obj in built:
                    ref = object_ref(obj)
                    key = (ref.group, ref.kind, ref.namespace, ref.name) if ref else ("", "", "", "")
                    if owner.setdefault(key, str(step.get("name"))) != str(step.get("name")):
                        raise _Failed(f"duplicate resource {ref} in step {step.get('name')!r}, already defined in step {owner[key]!r}")
                objects += built
        else:
            objects = _build(_list(spec.get("resources")), str(spec.get("resourcesTemplate") or ""), inputs, budget)
    except Unsupported as exc:
        return _stopped(rset, tier, findings, f"{where} not rendered: unsupported {exc.what}")
    except (_NotRendered, LimitExceeded) as exc:
        return _stopped(rset, tier, findings, f"{where} not rendered: {exc}")
    except (_Failed, TemplateError) as exc:
        findings.append(Finding(
            "resourceset-failed", Severity.WARNING, f"{where} fails to build: {exc}; the Flux Operator stalls it and creates none of its objects",
            kustomization=tier, object=rset.ref, location=rset.origin,
        ))
        return RsetRender((), tuple(findings))
    return RsetRender(tuple(_ordered(_stamp(objects, rset), rset)), tuple(findings))


def _list(value: Any) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Failed("resources is not a list")
    return value


def _stopped(rset: Manifest, tier: TierId | None, findings: list[Finding], message: str) -> RsetRender:
    findings.append(Finding("resourceset-not-rendered", Severity.INFO, message + "; the objects it creates are not checked",
                            kustomization=tier, object=rset.ref, location=rset.origin))
    return RsetRender((), tuple(findings))


def expand(manifests: Sequence[Manifest], providers: Sequence[Manifest], tier: TierId | None) -> tuple[list[Manifest], list[Finding]]:
    """The objects every ResourceSet among `manifests` creates (those created by created ResourceSets too, a few
    levels deep), located at the ResourceSet that creates them."""
    created: list[Manifest] = []
    findings: list[Finding] = []
    pending = [m for m in manifests if is_resourceset(m)]
    known_providers = [*providers, *(m for m in manifests if is_input_provider(m) and m not in providers)]
    for _ in range(MAX_NESTING):
        if not pending:
            break
        nested: list[Manifest] = []
        for rset in pending:
            result = render_resourceset(rset, known_providers, tier)
            findings.extend(result.findings)
            for body in result.objects:
                ref = object_ref(body)
                if ref is None:
                    continue
                manifest = Manifest(ref, body, rset.origin)
                created.append(manifest)
                if is_resourceset(manifest):
                    nested.append(manifest)
                elif is_input_provider(manifest):
                    known_providers.append(manifest)
        pending = nested
    for rset in pending:
        findings.append(Finding("resourceset-not-rendered", Severity.INFO,
                                f"ResourceSet {rset.ref.namespace}/{rset.ref.name} not rendered: ResourceSets nest more than {MAX_NESTING} deep",
                                kustomization=tier, object=rset.ref, location=rset.origin))
    return created, findings


def referenced_providers(rset: Manifest) -> tuple[ObjectRef, ...]:
    """The providers a ResourceSet names (a selector names none)."""
    refs = (rset.body.get("spec") or {}).get("inputsFrom") or []
    return tuple(
        ObjectRef(f"{GROUP}/v1", PROVIDER, rset.ref.namespace, str(r["name"]))
        for r in (refs if isinstance(refs, list) else []) if isinstance(r, dict) and r.get("name")
    )
