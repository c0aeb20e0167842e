"""`fluxwarden build`: a cluster's rendered objects as multi-document YAML, tier by tier, Secret values masked.

What kustomize-controller would apply, like `flux build ks` and flux-local's `build`: each tier's
objects after kustomize, the Flux overlay and postBuild substitution, in the order of its build.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import yaml

from bot.engine.reporting.diff import SOPS_VALUE, SOPS_VALUE_MASK, mask_secret
from bot.pipeline.check import BuiltCluster
from bot.engine.core.errors import UserError
from bot.engine.core.model import Finding, Manifest, ObjectRef, TierId
from bot.engine.render.rendered import RenderedRelease, RenderedTier
from bot.engine.render.yamlio import GoQuoting

LISTED = 10  # tier names listed in an "unknown tier" error before "and N more"


class _Dumper(GoQuoting, getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """Safe YAML with multi-line strings as `|` blocks, as a person (and kustomize) writes them.

    Strings kubectl or Flux would read as another type (`y`, `1e3`) are quoted (bot.engine.render.yamlio.GoQuoting).
    """


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _str)


def select_tiers(built: BuiltCluster, wanted: Sequence[str]) -> list[TierId]:
    """The tiers to print, in apply order: all, or those named (`namespace/name`, or a `name` only one tier has).

    A HelmRelease's name (`HelmRelease/ns/name`, or `ns/name` no tier has) selects the tier that applies it;
    `format_build` then prints only that release of the tier (see `selected_releases`).
    """
    if not wanted:
        return list(built.order)
    chosen: set[TierId] = set()
    for text in wanted:
        matches = [t for t in built.order if str(t) == text] or [t for t in built.order if "/" not in text and t.name == text]
        release = _release_named(built, text) if not matches else None
        if release is not None:
            chosen.add(release.tier)
            continue
        if len(matches) != 1:
            known = [str(t) for t in built.order]
            listed = ", ".join(known[:LISTED]) + (f" and {len(known) - LISTED} more" if len(known) > LISTED else "")
            why = "is ambiguous, give namespace/name" if matches else f"is not a Kustomization of cluster {built.render.cluster}"
            raise UserError(f"tier {text!r} {why} (tiers: {listed or 'none'})")
        chosen.add(matches[0])
    return [t for t in built.order if t in chosen]


def _release_named(built: BuiltCluster, text: str) -> RenderedRelease | None:
    """The HelmRelease `text` names (`HelmRelease/ns/name`, `ns/name` or a `name` only one has), if one does."""
    name = text.removeprefix("HelmRelease/").removeprefix("helmrelease/")
    releases = list(built.render.releases.values())
    found = [r for r in releases if f"{r.ref.namespace}/{r.ref.name}" == name] or [r for r in releases if "/" not in name and r.ref.name == name]
    return found[0] if len(found) == 1 else None


def selected_releases(built: BuiltCluster, wanted: Sequence[str]) -> frozenset[ObjectRef] | None:
    """The HelmReleases named among `wanted`; None when a tier is named or nothing is (print every release of the tiers)."""
    named = [_release_named(built, text) for text in wanted if not any(str(t) == text or t.name == text for t in built.order)]
    found = frozenset(r.ref for r in named if r is not None)
    return found or None


def tier_problem(tier: RenderedTier) -> str | None:
    """Why a tier's objects cannot be printed; None when it rendered."""
    if tier.failed:
        return "failed to render (see the findings on stderr); Flux would apply nothing"
    if not tier.rendered:
        return f"not rendered: it applies {tier.spec.source.kind}/{tier.spec.source.name}, not this repository"
    return None


def format_build(built: BuiltCluster, tiers: Iterable[TierId], show_secrets: bool = False, releases: frozenset[ObjectRef] | None = None) -> str:
    """The objects of `tiers` as one YAML stream, each tier after a comment line naming it, then each
    HelmRelease it applies, rendered, after `# HelmRelease NS/NAME (chart NAME VERSION)` (only `releases`, when given)."""
    out: list[str] = []
    by_tier: dict[TierId, list[RenderedRelease]] = {}
    for release in built.render.releases.values():
        by_tier.setdefault(release.tier, []).append(release)
    for tid in tiers:
        tier = built.render.tiers[tid]
        problem = tier_problem(tier)
        if releases is None:
            out.append(f"# Kustomization {tid} (path ./{tier.spec.path}){': ' + problem if problem else ''}\n")
            if problem is not None:
                continue
            out.extend(_documents(tier.manifests, show_secrets))
        for release in sorted(by_tier.get(tid, ()), key=lambda r: r.ref):
            if releases is not None and release.ref not in releases:
                continue
            why = "" if release.rendered else f": {release.outcome.value}: {release.reason}"
            out.append(f"# {release.heading()}{why}\n".replace("\n", " ").rstrip() + "\n")
            out.extend(_documents(release.manifests, show_secrets))
    return "".join(out)


def _documents(manifests: Iterable[Manifest], show_secrets: bool) -> Iterable[str]:
    for manifest in manifests:
        body = manifest.body if show_secrets else _masked(manifest.body)
        yield "---\n" + yaml.dump(body, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=4096, default_flow_style=False)


def _masked(body: Mapping[str, Any]) -> dict:
    """A Secret's values masked (a SOPS ciphertext says so: git has it encrypted), as the review diffs mask them."""
    masked = mask_secret(body)
    if masked.get("kind") == "Secret":
        for field in ("data", "stringData"):
            values, original = masked.get(field), body.get(field)
            if isinstance(values, dict) and isinstance(original, Mapping):
                for key, value in original.items():
                    if isinstance(value, str) and SOPS_VALUE.fullmatch(value.strip()):
                        values[key] = SOPS_VALUE_MASK
    return masked


def build_findings(built: BuiltCluster, tiers: Sequence[TierId], everything: bool) -> list[Finding]:
    """The render's findings about the printed tiers (and, for the whole cluster, those about no tier)."""
    wanted = set(tiers)
    return [f for f in built.render.findings if f.kustomization in wanted or (everything and f.kustomization is None)]


__all__ = ["build_findings", "format_build", "select_tiers", "selected_releases", "tier_problem"]
