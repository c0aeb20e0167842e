"""Variables: `${…}` that ships literally, and variables no source defines for this cluster."""

from __future__ import annotations

from typing import Any, Iterator, Mapping

from bot.engine.tiergraph.checks.context import CheckContext, check, name_list, plural
from bot.engine.core.errors import SubstitutionError
from bot.engine.render.flux import SUBSTITUTE_ANNOTATION, is_flux_kustomization
from bot.engine.core.model import Finding, Manifest, Severity, TierId
from bot.engine.render.rendered import RenderedTier
from bot.engine.render.substitute import find_references

# ConfigMap keys that hold a whole file (dashboards, scripts) carry tokens meant for another tool.
_FILE_KEY_SUFFIXES = (".json", ".sh", ".py", ".js", ".lua", ".tpl", ".tmpl", ".conf", ".ini", ".toml", ".txt", ".yaml", ".yml", ".xml", ".html")


def _strings(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{path}[{index}]")


# Fields of a Flux Kustomization that its own build carries into its objects: fluxcd/pkg kustomize
# Generator.GenerateManifest writes them into the path's kustomization.yaml, so a `${…}` there reaches
# the Kustomization's own postBuild, which substitutes its build (kustomize-controller
# KustomizationReconciler.build). Components add content to that same build. Not `commonMetadata`: the
# controller stamps it in `apply`, after substitution (ssautil.SetCommonMetadata), so only the parent
# can substitute a token there; nor `path`, `components` (paths) or `postBuild`, read by the controller.
CARRIED_FIELDS = (
    "spec.patches",
    "spec.patchesStrategicMerge",
    "spec.patchesJson6902",
    "spec.images",
    "spec.namePrefix",
    "spec.nameSuffix",
    "spec.targetNamespace",
)


def carried(path: str) -> bool:
    """Whether a field path of a Flux Kustomization is one its own build substitutes."""
    return any(path == f or path.startswith((f + "[", f + ".")) for f in CARRIED_FIELDS)


def literal_tokens(manifest: Manifest) -> list[tuple[str, str]]:
    """(field path, `${…}` expression) pairs that Flux would expand if this tier's substitution ran.

    A Flux Kustomization's carried fields are left out: they are judged in its own tier's objects.
    """
    out: list[tuple[str, str]] = []
    is_config = manifest.ref.kind in ("ConfigMap", "Secret") and manifest.ref.group == ""
    is_kustomization = is_flux_kustomization(manifest)
    for path, text in _strings(manifest.body):
        if "${" not in text:
            continue
        if is_config and path.startswith(("data.", "stringData.", "binaryData.")) and path.endswith(_FILE_KEY_SUFFIXES):
            continue
        if is_kustomization and carried(path):
            continue
        try:
            out.extend((path, ref.expression) for ref in find_references(text))
        except SubstitutionError:
            out.append((path, "${…} (unparseable)"))  # Flux would fail on it too; still literal here
    return out


def _names(tokens: list[tuple[str, str]]) -> set[str]:
    out: set[str] = set()
    for _, expression in tokens:
        try:
            out.update(ref.name for ref in find_references(expression))
        except SubstitutionError:
            continue
    return out


def cluster_variables(tiers: Mapping[TierId, RenderedTier]) -> dict[str, list[TierId]]:
    """Variable name → the tiers that substitute it: defined by their postBuild, or used there and
    expected from a source that is not in git."""
    out: dict[str, list[TierId]] = {}
    for tid, tier in tiers.items():
        if not tier.substituted:
            continue
        for name in {*tier.variables, *(tier.undefined if tier.variables_open else ())}:
            out.setdefault(name, []).append(tid)
    return out


def substitution_disabled(manifest: Manifest) -> bool:
    """`kustomize.toolkit.fluxcd.io/substitute: disabled` as a label or an annotation (fluxcd/pkg
    kustomize/kustomize_varsub.go SubstituteVariables)."""
    return manifest.labels.get(SUBSTITUTE_ANNOTATION) == "disabled" or manifest.annotations.get(SUBSTITUTE_ANNOTATION) == "disabled"


@check("literal-token")
def literal_token(ctx: CheckContext) -> Iterator[Finding]:
    known: dict[str, list[TierId]] | None = None
    for tier_id, tier in ctx.render.tiers.items():
        if not tier.rendered or tier.substituted:
            continue
        # Only objects whose rendered text had a `${` can hold a token; the renderer noted which.
        candidates = tier.manifests if tier.token_candidates is None else [tier.manifests[i] for i in sorted(tier.token_candidates)]
        for manifest in candidates:
            if substitution_disabled(manifest):
                continue
            tokens = literal_tokens(manifest)
            if not tokens:
                continue
            if manifest.ref.kind == "Secret":
                shown = f"{plural(len(tokens), '${…} token')} in {name_list(p for p, _ in tokens)}"  # never a Secret's value
            else:
                shown = f"{name_list(e for _, e in tokens)} in {name_list((p for p, _ in tokens), 3)}"
            if known is None:
                known = cluster_variables(ctx.render.tiers)
            severity, why = _literal_verdict(tier, tokens, known)
            yield Finding(
                "literal-token",
                severity,
                f"{manifest.ref} contains {shown}; {tier_id} runs no substitution {why}",
                kustomization=tier_id,
                object=manifest.ref,
                location=ctx.locate(manifest),
            )


def _literal_verdict(tier: RenderedTier, tokens: list[tuple[str, str]], known: Mapping[str, list[TierId]]) -> tuple[Severity, str]:
    """How bad a literal token is, and the rest of the message (why, and what follows).

    Flux ships a `${…}` unchanged from a tier that does not substitute, and that is often meant:
    Helm values and application config use `${VAR}` for the program's own environment. So it is an
    error only when the author asked for substitution (a postBuild that loads nothing: Flux then skips
    it, fluxcd/pkg kustomize/kustomize_varsub.go), when the cluster substitutes that very variable in
    other tiers (a forgotten postBuild), or where no program reads it (a name, namespace or label
    value, which the API server refuses); otherwise an info line.
    """
    if tier.spec.has_post_build:
        return Severity.ERROR, (
            "(its postBuild loads no variable, and Flux substitutes only when at least one is defined), so it ships literally"
        )
    refused = [path for path, _ in tokens if path in ("metadata.name", "metadata.namespace") or path.startswith("metadata.labels.")]
    if refused:
        return Severity.ERROR, (
            f"(it has no spec.postBuild), so it ships literally, and the API server refuses `${{…}}` in "
            f"{name_list(refused, 3)} (not a valid name or label value): the apply fails"
        )
    elsewhere = sorted(name for name in _names(tokens) if name in known)
    if elsewhere:
        users = sorted({t for name in elsewhere for t in known[name]})
        return Severity.ERROR, (
            f"(it has no spec.postBuild), so it ships literally, while {plural(len(users), 'other tier')} "
            f"({name_list((str(t) for t in users), 3)}) {'substitutes' if len(users) == 1 else 'substitute'} {name_list('${' + n + '}' for n in elsewhere)}: "
            f"add the postBuild {'it uses' if len(users) == 1 else 'they use'} (or label the object kustomize.toolkit.fluxcd.io/substitute: disabled if the "
            f"literal is meant)"
        )
    return Severity.INFO, (
        "(it has no spec.postBuild), so it ships as written: fine when the application reads it at run time, as no "
        "tier of this cluster substitutes these variables; add spec.postBuild if Flux should"
    )


@check("undefined-variable")
def undefined_variable(ctx: CheckContext) -> Iterator[Finding]:
    cluster = ctx.render.cluster
    for tier_id, tier in ctx.render.tiers.items():
        for name, users in sorted(tier.undefined.items()):
            first = users[0]
            objects = name_list(str(m.ref) for m in users)
            if tier.variables_open:
                # A substitution source is not in git: the variable may well come from it.
                severity, message = Severity.INFO, (
                    f"${{{name}}} (no default) is used by {objects} and is not defined by any substitution source in "
                    f"git for {cluster}; it must come from a source that is not in git, or it becomes \"\""
                )
            else:
                severity, message = Severity.ERROR, (
                    f"${{{name}}} (no default) is not defined for {cluster}: used by {objects}; Flux substitutes an "
                    f"empty string (and since Flux 2.9, where strict substitution is the default, fails the build)"
                )
            children = [m.ref.name for m in users if is_flux_kustomization(m)]
            if children:
                # The parent substitutes a child's whole spec, patches included: an escape hands it down.
                message += (
                    f". If it is meant for the postBuild of {name_list(children)}, write it as $${{{name}}} so that "
                    f"{tier_id} passes it on"
                )
            yield Finding("undefined-variable", severity, message, kustomization=tier_id, object=first.ref, location=ctx.locate(first))
