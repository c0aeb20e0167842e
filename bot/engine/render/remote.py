"""Remote resources: kustomize-controller fetches them, Fluxwarden never does (a PR is untrusted input).

kustomize-controller builds with remote bases allowed unless it runs with `--no-remote-bases=true`, which
is off by default (fluxcd/kustomize-controller main.go, PR #638 "While the `--no-remote-bases` is set to
`false` by default"). That flag refuses git remote bases only, "not remote targets pointing to a single
file" (fluxcd.io/flux/faq "Should I be using Kustomize remote bases?"): fluxcd/pkg kustomize
SecureBuild gives kustomize an on-disk filesystem confined to the root, so a clone has nowhere to go.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bot.engine.core.errors import InputError
from bot.engine.render.generate import RemoteEntry
from bot.engine.render.rendered import RenderedTier
from bot.engine.core.model import Finding, Severity, SourceLocation, TierId, TierSpec
from bot.engine.core.tree import RepoTree, yaml_files
from bot.engine.render.yamlio import load_all

REMOTE_NOT_FETCHED = "remote-resource-not-fetched"
# `--no-remote-bases` or `--no-remote-bases=true` (a Go bool flag), in a patch or a Deployment's args.
_FLAG = re.compile(r"""--no-remote-bases(?:=["']?(\w+))?""")
_MAX_FILES = 5_000
_MAX_SHOWN = 5


@dataclass(frozen=True)
class RemoteBasesRefused:
    """Where git says the cluster's kustomize-controller runs with `--no-remote-bases=true`."""

    source: str  # repo path of the patch, Deployment or FluxInstance


def no_remote_bases(snapshot: RepoTree, entry: str) -> RemoteBasesRefused | None:
    """Whether the cluster whose entry path is `entry` refuses remote bases, as its subtree says (bounded).

    A kustomize-controller patch or Deployment adding the flag, or a FluxInstance with
    `spec.cluster.multitenant: true` (the Flux Operator's multitenant profile adds `--no-remote-bases=true`:
    controlplaneio-fluxcd/flux-operator internal/controller/fluxinstance_controller_test.go).
    """
    for rel in yaml_files(snapshot, entry, _MAX_FILES):
        text = snapshot.read_text(rel) or ""
        if "no-remote-bases" in text and _flag_on(text):
            return RemoteBasesRefused(rel)
        if "multitenant" in text and "FluxInstance" in text and _multitenant(text, rel):
            return RemoteBasesRefused(rel)
    return None


def _flag_on(text: str) -> bool:
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        for match in _FLAG.finditer(line):
            if (match.group(1) or "true").lower() in ("true", "1", "t"):
                return True
    return False


def _multitenant(text: str, rel: str) -> bool:
    try:
        documents = load_all(text, rel)
    except InputError:
        return False
    for doc in documents:
        if isinstance(doc, Mapping) and doc.get("kind") == "FluxInstance":
            spec = doc.get("spec")
            cluster = spec.get("cluster") if isinstance(spec, Mapping) else None
            if isinstance(cluster, Mapping) and cluster.get("multitenant") is True:
                return True
    return False


def remote_finding(spec: TierSpec, entries: Sequence[RemoteEntry], refused: RemoteBasesRefused | None) -> Finding:
    """The one finding of a tier whose build left remote entries out: info, or the error of a refused remote base."""
    urls = list(dict.fromkeys(e.reference for e in entries))
    shown = ", ".join(urls[:_MAX_SHOWN]) + (f" and {len(urls) - _MAX_SHOWN} more" if len(urls) > _MAX_SHOWN else "")
    location = SourceLocation(entries[0].file)
    bases = [e.reference for e in entries if e.base]
    if refused is not None and bases:
        return Finding(
            REMOTE_NOT_FETCHED,
            Severity.ERROR,
            f"{spec.id} names the remote base(s) {', '.join(dict.fromkeys(bases))}, but kustomize-controller runs with "
            f"--no-remote-bases ({refused.source}): the build fails and nothing of the tier is applied. Vendor the base into "
            "the repository or point a Flux source (GitRepository, OCIRepository) at it",
            kustomization=spec.id,
            location=location,
        )
    return Finding(
        REMOTE_NOT_FETCHED,
        Severity.INFO,
        f"{spec.id} builds remote content kustomize-controller fetches and Fluxwarden never does: {shown}. "
        "The tier is rendered without it; its objects are not checked",
        kustomization=spec.id,
        location=location,
    )


def added_remote_findings(head: Mapping[TierId, RenderedTier], base: Mapping[TierId, RenderedTier] | None) -> list[Finding]:
    """A warning per tier that builds remote content its base side did not (a change adds it): unchecked content a
    PR brings in, as a chart the change touches and that cannot be rendered is (`chart-not-rendered`). Judged by
    URL over the whole base side, so a tier renamed or moved adds nothing."""
    before = {url for tier in (base or {}).values() for url in tier.remote}
    out = []
    for tid, tier in head.items():
        urls = list(dict.fromkeys(url for url in tier.remote if url not in before))
        if not urls:
            continue
        shown = ", ".join(urls[:_MAX_SHOWN]) + (f" and {len(urls) - _MAX_SHOWN} more" if len(urls) > _MAX_SHOWN else "")
        out.append(Finding(
            REMOTE_NOT_FETCHED,
            Severity.WARNING,
            f"{tid} now builds remote content (added by this change) that kustomize-controller fetches and Fluxwarden "
            f"never does: {shown}. Its objects are not checked: review them at their source",
            kustomization=tid,
            location=tier.spec.origin,
        ))
    return out
