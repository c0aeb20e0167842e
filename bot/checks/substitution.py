"""Variables: `${…}` that ships literally, and variables no source defines for this cluster."""

from __future__ import annotations

from typing import Any, Iterator

from bot.checks import CheckContext, check, name_list, plural
from bot.errors import SubstitutionError
from bot.flux import SUBSTITUTE_ANNOTATION
from bot.model import Finding, Manifest, Severity
from bot.substitute import find_references

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


def literal_tokens(manifest: Manifest) -> list[tuple[str, str]]:
    """(field path, `${…}` expression) pairs that Flux would expand if substitution ran."""
    out = []
    is_config = manifest.ref.kind in ("ConfigMap", "Secret") and manifest.ref.group == ""
    for path, text in _strings(manifest.body):
        if "${" not in text:
            continue
        if is_config and path.startswith(("data.", "stringData.", "binaryData.")) and path.endswith(_FILE_KEY_SUFFIXES):
            continue
        try:
            out.extend((path, ref.expression) for ref in find_references(text))
        except SubstitutionError:
            out.append((path, "${…} (unparseable)"))  # Flux would fail on it too; still literal here
    return out


@check(("literal-token", Severity.ERROR, "a ${…} appears in a tier whose Kustomization runs no postBuild substitution: it would ship literally"))
def literal_token(ctx: CheckContext) -> Iterator[Finding]:
    for tier_id, tier in ctx.render.tiers.items():
        if not tier.rendered or tier.substituted:
            continue
        why = (
            "its postBuild loads no variable (Flux substitutes only when at least one is defined)"
            if tier.spec.has_post_build
            else "it has no spec.postBuild"
        )
        # Only objects whose rendered text had a `${` can hold a token; the renderer noted which.
        candidates = tier.manifests if tier.token_candidates is None else [tier.manifests[i] for i in sorted(tier.token_candidates)]
        for manifest in candidates:
            if manifest.annotations.get(SUBSTITUTE_ANNOTATION) == "disabled":
                continue
            tokens = literal_tokens(manifest)
            if not tokens:
                continue
            if manifest.ref.kind == "Secret":
                shown = f"{plural(len(tokens), '${…} token')} in {name_list(p for p, _ in tokens)}"  # never a Secret's value
            else:
                shown = f"{name_list(e for _, e in tokens)} in {name_list((p for p, _ in tokens), 3)}"
            yield Finding(
                "literal-token",
                Severity.ERROR,
                f"{manifest.ref} contains {shown}; {tier_id} runs no substitution ({why}), so it ships literally",
                kustomization=tier_id,
                object=manifest.ref,
                location=ctx.locate(manifest),
            )


@check(("undefined-variable", Severity.ERROR, "a variable without default is not defined for this cluster (it would become \"\")"))
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
            yield Finding("undefined-variable", severity, message, kustomization=tier_id, object=first.ref, location=ctx.locate(first))
