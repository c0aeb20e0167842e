"""From kustomize's output to a finished tier: parse it, load postBuild variables, substitute, stamp Flux's metadata."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import posixpath
import re
from dataclasses import dataclass, replace
from typing import Any, Mapping, Protocol, Sequence

import yaml

from bot.engine.render import substitute as envsubst
from bot.engine.render.clusterobjects import ClusterObject, ConfigKey
from bot.engine.core.errors import InputError, LimitError, SubstitutionError
from bot.engine.core.model import Finding, Manifest, ObjectRef, Severity, SourceLocation, SubstituteFrom, TierSpec
from bot.engine.render.rendered import (
    CONFIG_KIND, MAY_SUBSTITUTE, ORIGIN_ANNOTATION, OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL, SECRET_MASK,
    RawDocument, RawTier, RenderedTier, SourceIndex, object_ref, render_failed, render_limit,
)
from bot.engine.core.tree import RepoTree
from bot.engine.render.yamlio import FastSafeLoader, check_aliases, nesting_limit, split_documents

_ORIGIN_PATH = re.compile(r"^(?:path|configuredIn): *(.+)$", re.MULTILINE)
# The origin annotation as kustomize writes it into an object's text (a block scalar under metadata.annotations).
_ORIGIN_IN_TEXT = re.compile(r"config\.kubernetes\.io/origin: *\|-?\n\s+(?:path|configuredIn): *(.+)$", re.MULTILINE)


def parse_output(text: str, root: str, max_documents: int | None = None) -> list[RawDocument]:
    """Split kustomize's output (built at repo path `root`); parse now what substitution cannot change, defer the rest.

    Raises InputError for output that is not YAML, LimitError past `max_documents` or yamlio's nesting bound.
    """
    texts = split_documents(text)
    if max_documents is not None and len(texts) > max_documents:
        raise LimitError(f"the build has {len(texts):,} objects; not rendered (limit: {max_documents:,} per Kustomization)")
    eager = [i for i, t in enumerate(texts) if not MAY_SUBSTITUTE.search(t) or CONFIG_KIND.search(t)]
    joined = "---\n".join(texts[i] if texts[i].endswith("\n") else texts[i] + "\n" for i in eager)
    try:
        bodies = [b for b in yaml.load_all(joined, Loader=FastSafeLoader) if b is not None]
        if len(bodies) != len(eager):
            bodies = [yaml.load(texts[i], Loader=FastSafeLoader) for i in eager]
    except LimitError:
        raise _located_limit([texts[i] for i in eager], root) from None
    except yaml.YAMLError as exc:
        limit = nesting_limit(exc)
        if limit is not None:
            raise _located_limit([texts[i] for i in eager], root) from None
        raise InputError(f"kustomize output is not valid YAML: {exc}") from None
    parsed = dict(zip(eager, bodies))
    out = []
    for index, doc_text in enumerate(texts):
        body = parsed.get(index)
        if index in parsed and not isinstance(body, dict):
            raise InputError("kustomize output contains a document that is not a mapping")
        out.append(RawDocument(doc_text, body, pop_origin(body, root) if body is not None else None))
    return out


def _located_limit(texts: Sequence[str], root: str) -> LimitError:
    """The bound the first document past it breaks, named by the file kustomize read it from (its origin annotation)."""
    for text in texts:
        try:
            yaml.load(text, Loader=FastSafeLoader)
            continue
        except LimitError as exc:
            limit = exc
        except yaml.YAMLError as exc:
            found = nesting_limit(exc)
            if found is None:
                continue
            limit = found
        match = _ORIGIN_IN_TEXT.search(text)
        origin = _origin_location(match.group(1), root) if match else None
        where = origin.file if origin is not None else _describe(text)
        return LimitError(f"{where} {limit}; not rendered", origin.file if origin is not None else None)
    return LimitError("kustomize output is past a parsing limit; not rendered")


def pop_origin(body: Any, root: str) -> SourceLocation | None:
    """Read and drop kustomize's origin annotation (and an annotations map it leaves empty).

    Its path is relative to the directory kustomize built, the mirror of repo path `root` (see
    generate.write_build_root), where every relative path lands where it does in the repository.
    """
    meta = body.get("metadata") if isinstance(body, dict) else None
    if not isinstance(meta, dict):
        return None
    annotations = meta.get("annotations")
    if not isinstance(annotations, dict) or ORIGIN_ANNOTATION not in annotations:
        return None
    raw = annotations.pop(ORIGIN_ANNOTATION)
    if not annotations:
        meta.pop("annotations")
    # The value is a tiny YAML map kustomize writes itself (`path: …` or `configuredIn: …`): a regex
    # reads it ~50x faster than a YAML parse, which matters at 20,000 objects.
    match = _ORIGIN_PATH.search(raw) if isinstance(raw, str) else None
    return _origin_location(match.group(1), root) if match is not None else None


def _origin_location(value: str, root: str) -> SourceLocation | None:
    """The repository file an origin annotation's path names, relative to the built directory `root`."""
    rel = value.strip().strip("'\"")
    if rel.startswith("/"):
        return None
    joined = posixpath.normpath(posixpath.join(root, rel))
    if joined in (".", "..") or joined.startswith("../"):
        return None
    return SourceLocation(joined)


@dataclass(frozen=True)
class Variables:
    """A tier's postBuild variables: substituteFrom in order, then inline `substitute` wins."""

    values: Mapping[str, str]
    secret_names: frozenset[str]  # those whose value came from a Secret (shown masked)
    open_set: bool  # some substituteFrom source is not in git
    findings: tuple[Finding, ...]

    @property
    def masked(self) -> dict[str, str]:
        """What substitution inserts: a Secret's value as its mask, every value without its newlines (loadVars strips them)."""
        return {k: (SECRET_MASK.format(name=k) if k in self.secret_names else v.replace("\n", "")) for k, v in self.values.items()}


def tier_variables(spec: TierSpec, objects: SourceIndex, external: Mapping[ConfigKey, ClusterObject] | None = None) -> Variables:
    """The postBuild variables of a tier, its substituteFrom sources looked up in the cluster's builds, then
    among the objects only the cluster has (`external`: read live, or declared in `clusters.<name>.cluster_objects`)."""
    variables: dict[str, str] = {}
    secret_names: set[str] = set()
    findings: list[Finding] = []
    open_set = False
    if not spec.has_post_build:
        return Variables(variables, frozenset(), False, ())
    for source in spec.substitute_from:
        namespace = source.namespace or spec.id.namespace
        key = (source.kind, namespace, source.name)
        found = objects.get(key)
        data: Mapping[str, str]
        if found is not None:
            documents, position = found
            data = _config_data(documents[position].body or {})
        else:
            outside = (external or {}).get(key)
            if outside is not None and outside.found:
                data = outside.data or {}
            elif outside is not None and outside.error is None:
                # Read live and absent: kustomize-controller skips an optional source that is NotFound and fails
                # the build on any other (fluxcd/pkg kustomize/kustomize_varsub.go loadVars).
                if not source.optional:
                    findings.append(Finding(
                        "substitution-source-missing", Severity.ERROR,
                        f"substituteFrom {source.kind}/{namespace}/{source.name} is neither in git nor on the cluster "
                        f"(read from {outside.where}); Flux fails the build until it exists (or mark it `optional: true`)",
                        kustomization=spec.id, object=ObjectRef("v1", source.kind, namespace, source.name), location=spec.origin,
                    ))
                continue
            else:
                open_set = True
                why = f" and could not be read from the cluster ({outside.error})" if outside is not None else ""
                findings.append(
                    Finding(
                        "substitution-source-external",
                        Severity.INFO,
                        f"substituteFrom {source.kind}/{namespace}/{source.name}"
                        f"{' (optional)' if source.optional else ''} is not in git{why}; its variables could not be checked"
                        + ("" if source.optional else " and Flux fails the build if it is missing on the cluster"),
                        kustomization=spec.id,
                        object=ObjectRef("v1", source.kind, namespace, source.name),
                        location=spec.origin,
                    )
                )
                continue
        variables.update(data)
        if source.kind == "Secret":
            secret_names.update(data)
        else:
            secret_names.difference_update(data)
    variables.update(spec.substitute)
    secret_names.difference_update(spec.substitute)
    return Variables(variables, frozenset(secret_names), open_set, tuple(findings))


def missing_sources(spec: TierSpec, objects: SourceIndex) -> list[ConfigKey]:
    """The substituteFrom sources of a tier that no build holds."""
    keys = [(s.kind, s.namespace or spec.id.namespace, s.name) for s in spec.substitute_from] if spec.has_post_build else []
    return [k for k in keys if k not in objects]


def sources_present(spec: TierSpec, objects: SourceIndex) -> bool:
    """Whether every substituteFrom source of a tier is among the builds seen so far."""
    return all((s.kind, s.namespace or spec.id.namespace, s.name) in objects for s in spec.substitute_from)


def with_injected(spec: TierSpec, injected: tuple[SubstituteFrom, ...]) -> TierSpec:
    """A tier as a cluster-wide substitution makes it (an admission webhook, the Flux Operator's): the cluster's
    sources first, so that the tier's own substituteFrom and substitute win."""
    if not injected:
        return spec
    return replace(spec, has_post_build=True, substitute_from=(*injected, *(s for s in spec.substitute_from if s not in injected)))


def finish_key(raw: RawTier, variables: Variables, graph_only: bool, strict: bool) -> str | None:
    """A hash of everything `finish_tier` reads besides `raw.documents` (named by its content key)."""
    if raw.content_key is None:
        return None
    spec = raw.spec
    return hashlib.sha256(json.dumps(
        # The masked values: what substitution inserts (a Secret's value never reaches the key, nor the cache's file names).
        [raw.content_key, sorted(variables.masked.items()), sorted(variables.secret_names), variables.open_set, graph_only, str(spec.id),
         spec.has_post_build, spec.substitute_always, spec.common_metadata, spec.decryption, str(spec.origin),
         strict, raw.failed],
        sort_keys=True, default=str,
    ).encode()).hexdigest()


class FinishStore(Protocol):
    """Finished tiers kept by their finish key (bot/pipeline/memo.py `FinishMemo`)."""

    def get(self, finish_key: str | None) -> tuple[RenderedTier, list[Finding]] | None: ...

    def put(self, finish_key: str, rendered: RenderedTier, findings: list[Finding]) -> None: ...


def finish_built(
    raw: RawTier, objects: SourceIndex, tree: RepoTree, *, strict: bool, graph_only: bool = False, injected: tuple[SubstituteFrom, ...] = (),
    external: Mapping[ConfigKey, ClusterObject] | None = None, store: FinishStore | None = None,
) -> tuple[RenderedTier, list[Finding]]:
    """One built tier of `tree` finished (`finish_tier`) with the cluster's injected sources, from `store` when it was done before.

    `external`: the ConfigMaps and Secrets only the cluster has."""
    spec = with_injected(raw.spec, injected)
    raw = raw if spec is raw.spec else replace(raw, spec=spec)
    if raw.failed and not raw.documents:
        return RenderedTier(spec=spec, failed=True, inputs=raw.inputs), []
    variables = tier_variables(spec, objects, external)
    # A graph needs a build's Flux Kustomizations only: without one there is nothing to finish, or to keep.
    key = None if graph_only and not raw.document_index.kustomizations else finish_key(raw, variables, graph_only, strict)
    remembered = store.get(key) if store is not None else None
    if remembered is not None:
        rendered, kept = remembered
        return replace(rendered, spec=spec, inputs=raw.inputs), list(kept)
    root = tree.real_path(spec.path) or spec.path  # where kustomize built it (origins are relative to it)
    rendered, findings = finish_tier(raw, variables, root=root, strict=strict, graph_only=graph_only, key=key)
    if key is not None and store is not None:
        store.put(key, rendered, findings)
    return rendered, findings


def finish_tier(
    raw: RawTier, variables: Variables, *, root: str, strict: bool, graph_only: bool = False, key: str | None = None
) -> tuple[RenderedTier, list[Finding]]:
    """postBuild substitution and commonMetadata for one tier built at repo path `root` (graph_only: its discovery objects only)."""
    spec = raw.spec
    findings: list[Finding] = list(variables.findings)
    bad_names = envsubst.check_variable_names(variables.values)
    if bad_names:
        findings.append(render_failed(spec.id, f"postBuild variable name(s) {', '.join(sorted(bad_names))} are invalid; the build fails", spec.origin))
    # kustomize-controller substitutes only when at least one variable was loaded
    # (fluxcd/pkg kustomize/kustomize_varsub.go: `if len(vars) > 0`).
    # `postBuild.substituteStrategy: Always` (kustomize-controller PR #1672) lifts that gate.
    substituting = spec.has_post_build and (bool(variables.values) or spec.substitute_always)
    masked = variables.masked
    manifests: list[Manifest] = []
    undefined: dict[str, list[Manifest]] = {}
    failed = raw.failed or bool(bad_names)  # an invalid variable name fails the whole build in Flux
    documents = [raw.documents[i] for i in raw.document_index.kustomizations] if graph_only else raw.documents
    prepared = _prepare(documents, substituting, masked, spec, root, strict, findings)
    candidates: list[int] = []
    for doc, prepared_doc in zip(documents, prepared):
        if prepared_doc is None:
            failed = True
            continue
        body, origin, used_undefined = prepared_doc
        ref = object_ref(body) if isinstance(body, dict) else None
        if ref is None:
            findings.append(render_failed(spec.id, "an object lacks apiVersion, kind or metadata.name; kustomize-controller rejects the build", origin))
            failed = True
            continue
        body = _with_flux_metadata(body, spec)
        manifest = Manifest(ref, body, origin)
        if ref.kind == "Secret" and "sops" in body and not spec.decryption:
            findings.append(render_failed(spec.id, f"{ref} is SOPS-encrypted but the Kustomization has no spec.decryption; the apply fails", origin))
            failed = True
        if "${" in doc.text:
            candidates.append(len(manifests))
        manifests.append(manifest)
        for name in used_undefined:
            undefined.setdefault(name, []).append(manifest)
    rendered = RenderedTier(
        spec=spec,
        manifests=tuple(manifests),
        rendered=True,
        failed=failed,
        substituted=substituting or (spec.has_post_build and variables.open_set),
        variables_open=variables.open_set,
        variables=frozenset(variables.values),
        undefined={k: tuple(v) for k, v in undefined.items()},
        inputs=raw.inputs,
        token_candidates=frozenset(candidates),
        finish_key=key,
        remote=tuple(dict.fromkeys(e.reference for e in raw.remote)),
    )
    return rendered, findings


def _prepare(
    documents: Sequence[RawDocument], substituting: bool, masked: Mapping[str, str], spec: TierSpec, root: str, strict: bool, findings: list[Finding]
) -> list[tuple[Any, SourceLocation | None, tuple[str, ...]] | None]:
    """Substitute what needs it, then parse every unparsed document in one YAML stream (None: failed)."""
    out: list[tuple[Any, SourceLocation | None, tuple[str, ...]] | None] = []
    to_parse: list[tuple[int, str, bool]] = []  # (index in out, text, substituted)
    for doc in documents:
        # `$$` collapses to `$` even in a document with no reference (fluxcd/pkg envsubst).
        if substituting and MAY_SUBSTITUTE.search(doc.text) and not doc.substitution_disabled:
            try:
                result = envsubst.substitute(doc.text, masked, strict=strict)
            except SubstitutionError as exc:
                findings.append(render_failed(spec.id, f"{object_ref(doc.body) if doc.body else _describe(doc.text)}: {exc}", doc.origin))
                out.append(None)
                continue
            to_parse.append((len(out), result.text, True))
            out.append((None, doc.origin, result.undefined))
        elif doc.body is None:
            to_parse.append((len(out), doc.text, False))
            out.append((None, doc.origin, ()))
        else:
            out.append((doc.body, doc.origin, ()))
    bodies = _load_stream([text for _, text, _ in to_parse])
    for (index, text, substituted), body in zip(to_parse, bodies):
        _, origin, undefined = out[index]  # type: ignore[misc]
        try:
            if substituted:
                check_aliases(text, f"{_describe(text)} after substitution")  # values can add anchors/aliases
            if body is None:
                body = yaml.load(text, Loader=FastSafeLoader)  # the stream failed: find which document
        except LimitError as exc:
            findings.append(render_limit(spec.id, f"{_describe(text)} {exc}; not rendered", origin))
            out[index] = None
            continue
        except InputError as exc:
            findings.append(render_failed(spec.id, str(exc), origin))
            out[index] = None
            continue
        except yaml.YAMLError as exc:
            limit = nesting_limit(exc)
            if limit is not None:
                findings.append(render_limit(spec.id, f"{_describe(text)} {limit}; not rendered", origin))
                out[index] = None
                continue
            findings.append(render_failed(spec.id, f"{_describe(text)}: substituted YAML is invalid: {str(exc).splitlines()[0]}", origin))
            out[index] = None
            continue
        origin = pop_origin(body, root) or origin  # the text still carries kustomize's origin annotation
        out[index] = (body, origin, undefined)
    return out


def _config_data(body: Mapping[str, Any]) -> dict[str, str]:
    """Key/values of a ConfigMap or Secret as the controller reads them (Secret data decoded)."""
    out: dict[str, str] = {}
    if body.get("kind") == "Secret":
        for key, value in (body.get("data") or {}).items():
            try:
                out[str(key)] = base64.b64decode(str(value), validate=False).decode("utf-8", errors="replace")
            except (binascii.Error, ValueError):
                out[str(key)] = ""
        for key, value in (body.get("stringData") or {}).items():
            out[str(key)] = "" if value is None else str(value)
    else:
        for key, value in (body.get("data") or {}).items():
            out[str(key)] = "" if value is None else str(value)
    return out


def _load_stream(texts: list[str]) -> list[Any]:
    """Parse many documents in one C-loader call; [None, …] when the stream fails (callers retry one by one)."""
    if not texts:
        return []
    try:
        bodies = [b for b in yaml.load_all("---\n".join(t if t.endswith("\n") else t + "\n" for t in texts), Loader=FastSafeLoader) if b is not None]
    except (yaml.YAMLError, LimitError):
        return [None] * len(texts)
    return bodies if len(bodies) == len(texts) else [None] * len(texts)


def _describe(text: str) -> str:
    """`Kind/name` of a document we could not parse, read from its text."""
    kind = re.search(r"^kind: *(\S+)", text, re.MULTILINE)
    name = re.search(r"^  name: *(\S+)", text, re.MULTILINE)
    return f"{kind.group(1) if kind else 'object'}/{name.group(1) if name else '?'}"


def _with_flux_metadata(body: Mapping[str, Any], spec: TierSpec) -> Mapping[str, Any]:
    """The labels and annotations kustomize-controller sets on every object before it applies it.

    First the owner labels (kustomization_controller.go → fluxcd/pkg ssa manager.go SetOwnerLabels),
    then `commonMetadata`, overriding same keys (fluxcd/pkg ssa/utils meta.go SetCommonMetadata).
    Raw builds are shared between tiers: the maps changed are copies, the rest of the body is shared.
    """
    meta = body.get("metadata")
    meta = dict(meta) if isinstance(meta, dict) else {}
    labels = meta.get("labels")
    meta["labels"] = {
        **(labels if isinstance(labels, dict) else {}),
        OWNER_NAME_LABEL: spec.id.name,
        OWNER_NAMESPACE_LABEL: spec.id.namespace,
        **(spec.common_metadata.get("labels") or {}),
    }
    annotations = spec.common_metadata.get("annotations")
    if annotations:
        existing = meta.get("annotations")
        meta["annotations"] = {**(existing if isinstance(existing, dict) else {}), **annotations}
    return {**body, "metadata": meta}
