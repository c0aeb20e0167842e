"""invalid-name: an object (a Flux Kustomization too) whose name or namespace the API server refuses.

The rules are the API server's (k8s.io/apimachinery/pkg/api/validation, pkg/apis/core/validation, and
apiextensions-apiserver's customresource validator, which uses NameIsDNSSubdomain for every custom
resource): a DNS-1123 subdomain for most kinds, a DNS-1123 label for a Namespace and for the namespace of
any object, a DNS-1035 label for a Service, and only a path segment (no `/`, no `%`, not `.` or `..`) for
RBAC objects and the kinds below whose rules we do not know. Such a name is reported, not passed on as
text: Flux cannot apply the object, and a PR comment never quotes it raw (bot/engine/core/markdown.py).
"""

from __future__ import annotations

import re
from typing import Iterator

from bot.engine.core import markdown as md
from bot.engine.tiergraph.checks.context import CheckContext, check
from bot.engine.core.model import Finding, GroupKind, Severity

_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
DNS1123_LABEL = (re.compile(_LABEL), 63, "a DNS-1123 label: at most 63 lower-case letters, digits and '-', alphanumeric at both ends")
DNS1123_SUBDOMAIN = (
    re.compile(rf"{_LABEL}(?:\.{_LABEL})*"),
    253,
    "a DNS-1123 subdomain: at most 253 lower-case letters, digits, '-' and '.', alphanumeric at both ends",
)
DNS1035_LABEL = (re.compile(r"[a-z](?:[-a-z0-9]*[a-z0-9])?"), 63, "a DNS-1035 label: at most 63 lower-case letters, digits and '-', starting with a letter")
PATH_SEGMENT = (re.compile(r"(?!\.{1,2}$)[^/%]+"), None, "a path segment: no '/' or '%', not '.' or '..'")

# Names the API server checks only as a path segment (ValidateRBACName, and kinds whose rules differ or
# are unknown to us): leniency here can only miss a finding, never invent one.
_PATH_SEGMENT_GROUPS = ("rbac.authorization.k8s.io", "certificates.k8s.io", "events.k8s.io", "metrics.k8s.io")
_SPECIAL = {GroupKind("", "Namespace"): DNS1123_LABEL, GroupKind("", "Service"): DNS1035_LABEL, GroupKind("", "Event"): PATH_SEGMENT}
_TOKEN = re.compile(r"\$\{[^}]*\}")  # a variable left in a name is literal-token/undefined-variable's finding


def name_rule(gk: GroupKind) -> tuple[re.Pattern[str], int | None, str]:
    """The API server's rule for `metadata.name` of kind `gk`."""
    if gk in _SPECIAL:
        return _SPECIAL[gk]
    if gk.group in _PATH_SEGMENT_GROUPS or gk.group.endswith(".openshift.io"):  # OpenShift's aggregated APIs
        return PATH_SEGMENT
    return DNS1123_SUBDOMAIN


_MASKED = re.compile(r"<masked:[^>]*>")


def problem(value: str, rule: tuple[re.Pattern[str], int | None, str]) -> str | None:
    """Why `value` breaks `rule`, or None when it is valid."""
    pattern, limit, what = rule
    candidate = _TOKEN.sub("x", value) if "${" in value else value
    # A substituted Secret value is masked (rendered.SECRET_MASK): not known, so not judged (`${SECRET_DOMAIN/./-}`).
    candidate = _MASKED.sub("x", candidate) if "<masked:" in candidate else candidate
    if pattern.fullmatch(candidate) and (limit is None or len(candidate) <= limit):
        return None
    return what


@check("invalid-name")
def invalid_name(ctx: CheckContext) -> Iterator[Finding]:
    namespaces: dict[str, str | None] = {"": None}  # a repository has few namespaces and thousands of objects in them
    for tier_id, tier in ctx.render.tiers.items():
        # A variable the tier's substituteFrom may define on the cluster (a source not in git) read as "" here:
        # a name built from it (`${SECRET_DOMAIN/./-}-production`) is not the name Flux applies, so not judged.
        unknown = {m.ref for ms in tier.undefined.values() for m in ms} if tier.variables_open else set()
        for gk, objects in sorted(ctx.facts[tier_id].kinds.items()):
            rule = name_rule(gk)
            pattern, limit, _ = rule
            for stub in objects:
                ref = stub.ref
                if unknown and ref in unknown:
                    continue
                name = ref.name
                if (
                    namespaces.get(ref.namespace, "") is None and "${" not in name and "<masked:" not in name
                    and pattern.fullmatch(name) and (limit is None or len(name) <= limit)
                ):
                    continue  # nearly every object: a valid name in a valid namespace (`problem` would say None twice)
                if ref.namespace not in namespaces:
                    namespaces[ref.namespace] = problem(ref.namespace, DNS1123_LABEL)
                for field, value, broken in (("name", ref.name, problem(ref.name, rule)), ("namespace", ref.namespace, namespaces[ref.namespace])):
                    if broken is None:
                        continue
                    yield Finding(
                        "invalid-name",
                        Severity.ERROR,
                        f"{gk.kind} {field} {md.visible(repr(value), 120)} is not {broken}; the API server refuses the object, so Flux cannot apply it",
                        kustomization=tier_id,
                        object=ref,
                        location=ctx.locate(stub),
                    )
