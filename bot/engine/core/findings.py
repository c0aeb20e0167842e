"""Every finding id Fluxwarden reports: its severity, a one-line summary and an explanation for a user (docs/reference.md's check table)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

from bot.engine.core.model import Severity


@dataclass(frozen=True)
class FindingKind:
    """One public finding id: its usual severity, when it fires (one line) and what it means for a user."""

    id: str
    severity: Severity
    summary: str
    explanation: str  # markdown; docs/reference.md's "fires when" cell, and `/fluxwarden explain <id>` later
    severity_note: str | None = None  # when the severity varies: docs/reference.md's severity cell


class Catalogue:
    """The finding ids, in docs/reference.md's order; an id is an interface (users silence and search by it)."""

    def __init__(self, kinds: Iterable[FindingKind]) -> None:
        self._kinds: dict[str, FindingKind] = {}
        for kind in kinds:
            if kind.id in self._kinds:
                raise ValueError(f"finding id {kind.id!r} is catalogued twice")
            self._kinds[kind.id] = kind

    def __iter__(self) -> Iterator[FindingKind]:
        return iter(self._kinds.values())

    def __len__(self) -> int:
        return len(self._kinds)

    def __contains__(self, id_: object) -> bool:
        return id_ in self._kinds

    def __getitem__(self, id_: str) -> FindingKind:
        return self._kinds[id_]

    def get(self, id_: str) -> FindingKind | None:
        return self._kinds.get(id_)

    def markdown_table(self) -> str:
        """docs/reference.md's check table."""
        rows = ["| id | severity | fires when |", "|---|---|---|"]
        rows += [f"| `{k.id}` | {k.severity_note or k.severity.value} | {k.explanation} |" for k in self]
        return "\n".join(rows) + "\n"


CATALOGUE = Catalogue((
    FindingKind(
        "dependency-cycle",
        Severity.ERROR,
        "dependsOn forms a cycle (the message shows the path)",
        "`dependsOn` forms a cycle (the message shows the path)",
    ),
    FindingKind(
        "missing-dependency",
        Severity.ERROR,
        "dependsOn names a Kustomization the cluster does not have (info when a tier that failed to render may have created it)",
        "`dependsOn` names a Kustomization the cluster does not have (info when a tier that failed to render may have created it: the `render-failed` is the error)",
    ),
    FindingKind(
        "second-order-crd",
        Severity.ERROR,
        "an object's CRD is created at run time by a controller reconciling a CR in the same tier, or in a tier this one does not depend on",
        "an object's CRD is created at run time by a controller reconciling a CR in the same tier, or in a tier this one does not depend on",
        severity_note="error, warning or info (cold start)",
    ),
    FindingKind(
        "crd-not-ordered",
        Severity.ERROR,
        "an object's CRD (in git or from a chart) is applied by a tier this one does not depend on",
        "an object's CRD (in git or from a chart) is applied by a tier this one does not depend on",
        severity_note="error, warning or info (cold start)",
    ),
    FindingKind(
        "dependency-not-waited",
        Severity.WARNING,
        "the tier this one relies on for a CRD/CR has neither wait: true nor a healthChecks entry covering it",
        "the tier relied on for a runtime CRD has neither `wait: true` nor a `healthChecks` entry covering the CR/HelmRelease, or waits on a CR whose status Flux cannot read (the CDI CR: `wait` passes before its CRDs exist; add `healthCheckExprs`)",
        severity_note="warning (error or info by the cold start)",
    ),
    FindingKind(
        "health-check-deadlock",
        Severity.ERROR,
        "a tier's wait or healthChecks cover an object that only a tier depending on it applies (or a child Kustomization that dependsOn it): neither ever becomes Ready",
        "on a cold start a tier never becomes Ready because its `healthChecks` (or `wait`) cover an object only a tier depending on it applies, or a child Kustomization that dependsOn it (the message shows the chain)",
    ),
    FindingKind(
        "unknown-kind",
        Severity.WARNING,
        "nobody known provides the kind",
        "nobody known provides the kind",
    ),
    FindingKind(
        "missing-provider",
        Severity.WARNING,
        "an object names a cluster-scoped provider (StorageClass, ClusterIssuer, IngressClass, GatewayClass, PriorityClass, RuntimeClass, its Namespace) that git defines in a tier this one does not depend on",
        "an object names a StorageClass, StorageProfile, ClusterIssuer, IngressClass, GatewayClass, PriorityClass, RuntimeClass or Namespace that git defines in a tier this one neither depends on nor is applied by (a parent's apply writes them before the child Kustomization exists; `default`, `kube-system`, `kube-public`, `kube-node-lease` always exist)",
        severity_note="warning; for a Namespace (its objects' dry-run fails without it) an error when the cold start never gets the tier Ready, with the chain; info when only the bootstrap provides it or holds the tier until it is applied",
    ),
    FindingKind(
        "literal-token",
        Severity.ERROR,
        "a ${…} ships literally: its tier has a postBuild that loads no variable, or none while the cluster substitutes that variable elsewhere or the token is in a name or label (info otherwise)",
        "a `${…}` ships literally: its tier has a `postBuild` that loads no variable, or has none while other tiers of the cluster substitute that variable or while the token is in a name, namespace or label value (info otherwise: a `${VAR}` that the application reads at run time is often meant). A token in a child Kustomization's `patches`, `images`, `namePrefix`/`nameSuffix` or `targetNamespace` is judged in the child's own build (its postBuild substitutes it), not in the parent",
    ),
    FindingKind(
        "undefined-variable",
        Severity.ERROR,
        "a variable without default is not defined for this cluster (it would become \"\")",
        "a variable without default is not defined for the cluster (it would become `\"\"`)",
    ),
    FindingKind(
        "graph-drift",
        Severity.WARNING,
        "a tier two clusters both have differs in a way that breaks one: a dependsOn whose target both have, or wait/prune flipped",
        "a tier two clusters both have differs in a way that breaks one: a `dependsOn` only one of them has although both have its target, or `wait`/`prune` flipped (tiers and paths that differ are meant; declare other intended differences under `graph_drift` in `.fluxwarden.yaml`)",
    ),
    FindingKind(
        "duplicate-object",
        Severity.WARNING,
        "one object (group, kind, namespace, name) is applied by two Kustomizations on the same cluster (error when one of them prunes a Namespace, CRD, PVC or PV: a prune then deletes what the next reconcile cannot restore)",
        "one object (group, kind, namespace, name) is applied by two Kustomizations of the same cluster (`spec.kubeConfig` targets apart): each apply takes it over, and the one that stops applying it deletes it if it applied last, until the other's next reconcile re-creates it; an error for a Namespace, CRD, PVC or PV that one of them prunes, whose deletion takes what no re-apply restores",
    ),
    FindingKind(
        "tier-order-stale",
        Severity.WARNING,
        "the tier order list misses a tier or lists one before a tier it depends on",
        "the tier order list misses a tier or lists one before its dependency",
    ),
    FindingKind(
        "render-failed",
        Severity.ERROR,
        "kustomize or postBuild substitution failed for a tier",
        "kustomize or substitution failed for a tier",
    ),
    FindingKind(
        "config-changed",
        Severity.WARNING,
        "the PR edits .fluxwarden.yaml, which takes effect only after merge",
        "(the bot) the PR edits `.fluxwarden.yaml`: it was reviewed under the base branch's configuration, and the edit takes effect after merge",
    ),
    FindingKind(
        "render-limit",
        Severity.ERROR,
        "a render went past one of Fluxwarden's bounds and stopped there",
        "a render went past what real repositories need and stopped there: a path rendered a third time in one chain of Kustomizations (a Kustomization that recreates itself under a growing name), nesting deeper than 32, more than 2,000 Kustomizations or 200,000 objects in a cluster, more than 1 GiB of kustomize output; one run also writes at most a quarter of the cache budget",
    ),
    FindingKind(
        "nothing-rendered",
        Severity.ERROR,
        "none of the cluster's content was rendered, so nothing was checked",
        "the cluster's content was not rendered: none of the Kustomizations its entry applies rendered an object (each failed, applies another source, or is empty), or the entry applies none and rendered no object itself. Nothing was checked, so it is never a pass: the message names each tier not checked and why; in a review it always counts as new",
    ),
    FindingKind(
        "invalid-name",
        Severity.ERROR,
        "an object's name or namespace is not a valid Kubernetes name (the API server refuses it)",
        "an object's name or namespace is not a valid Kubernetes name (DNS-1123 subdomain or label, DNS-1035 label for a Service, a path segment for RBAC): the API server refuses it; the name is never posted raw",
    ),
    FindingKind(
        "prune-transient",
        Severity.WARNING,
        "an object moves out of a pruning tier, which may delete it before the new tier applies it",
        "(with `--base`) an object moves out of a tier with `prune: true`: the old tier may prune it before the new one applies it",
    ),
    FindingKind(
        "unsafe-path",
        Severity.ERROR,
        "a path, symlink, plugin or file the render refuses to follow or read",
        "a symlink out of the repo, an absolute or `../` path out of the repo, a remote reference in a field the render cannot leave out (a patch or replacement `path`…) or reached through a symlink, a kustomize plugin, an oversized file or an alias bomb",
    ),
    FindingKind(
        "precondition-failed",
        Severity.ERROR,
        "a tier the change relies on is missing, suspended, not Ready or stale on the live cluster",
        "(with `--live`) a tier the change touches (or a dependency, or a required tier) is missing, suspended, not Ready, stale or behind its source's revision on the cluster, or a moved object is absent live or not owned by its source tier",
    ),
    FindingKind(
        "chart-not-rendered",
        Severity.INFO,
        "a HelmRelease's chart could not be had, so the release was not rendered",
        "a HelmRelease's chart could not be had (unreachable, not allowed, needs credentials, too large, offline, a Bucket or another Git repository): one finding per reason; its CRDs come from the knowledge base",
        severity_note="info, or warning for a HelmRelease the change edits",
    ),
    FindingKind(
        "chart-render-failed",
        Severity.ERROR,
        "a chart fails to render at the HelmRelease's values: helm-controller would fail the install",
        "a chart fails to render at the HelmRelease's values (`required`, `fail`, a bad values type, a failing postRenderer): helm-controller would fail the install",
    ),
    FindingKind(
        "helmrelease-invalid",
        Severity.ERROR,
        "a HelmRelease helm-controller cannot read",
        "a HelmRelease helm-controller cannot read (a field of the wrong type, no chart source)",
    ),
    FindingKind(
        "values-missing",
        Severity.ERROR,
        "a valuesFrom ConfigMap/Secret in git lacks its valuesKey",
        "a `valuesFrom` ConfigMap/Secret in git lacks its `valuesKey` (not `optional`), or its values are not YAML",
    ),
    FindingKind(
        "values-source-external",
        Severity.INFO,
        "a valuesFrom source is not in git; the release is rendered without it",
        "a `valuesFrom` source is not in git (created on the cluster, or SOPS-encrypted): the release is rendered without it",
    ),
    FindingKind(
        "chart-render-invalid",
        Severity.ERROR,
        "a chart renders a document Helm refuses",
        "a chart renders a document Helm refuses (no apiVersion, kind or name; not YAML)",
    ),
    FindingKind(
        "chart-invalid-name",
        Severity.ERROR,
        "an object a chart renders has a name or namespace the API server refuses: helm-controller's install fails",
        "an object a chart renders has a name or namespace the API server refuses",
    ),
    FindingKind(
        "chart-unknown-kind",
        Severity.WARNING,
        "a chart renders an object of a kind no CRD in git, no chart and no known operator provides: its install fails unless a controller adds it",
        "a chart renders an object of a kind no CRD in git, no chart and no known operator provides",
    ),
    FindingKind(
        "chart-duplicate-object",
        Severity.WARNING,
        "one object is applied by a chart and by a Kustomization, or by two charts: they take it from each other on every reconcile",
        "an object a chart renders is applied by a Kustomization or another chart too",
    ),
    FindingKind(
        "precondition-unknown",
        Severity.ERROR,
        "the live cluster (or a source, CRDs, a moved object) could not be read",
        "(with `--live`) the cluster, a source, the CRDs or a moved object could not be read (unreachable, 401, 403, timeout)",
    ),
    FindingKind(
        "remote-resource-not-fetched",
        Severity.INFO,
        "a tier's build names remote content (a remote base or a file by URL), which Fluxwarden never fetches",
        "a kustomization lists a remote resource, base, component or generator file (`https://…`, `github.com/…//dir?ref=…`): kustomize-controller fetches it by default, Fluxwarden never does (a PR is untrusted input), so the tier is rendered without it and what it holds is not checked; a well-known CRD bundle still counts as providing its kinds. A warning in a review for remote content the change adds (named, to be reviewed at its source). An error when git shows the cluster's kustomize-controller runs with `--no-remote-bases` (a patch, or a multitenant FluxInstance) and the entry is a git remote base: the build fails",
    ),
    FindingKind(
        "not-rendered",
        Severity.INFO,
        "a tier or an operator's sync Kustomization was not rendered, for a reason that says nothing wrong about it",
        "a tier was not rendered because Fluxwarden cannot see its content (it applies another source, or a FluxInstance's `kustomize.patches` could not be applied to its sync Kustomization): its objects are not checked, and the message says why",
    ),
    FindingKind(
        "resourceset-failed",
        Severity.WARNING,
        "a Flux Operator ResourceSet fails to build from its inputs (the operator stalls it)",
        "a Flux Operator `ResourceSet` fails to build from the inputs git holds: a template error (a missing input key, a parse error), output that is not YAML, a duplicate across steps, too many permutations; the operator stalls it and creates none of its objects",
    ),
    FindingKind(
        "resourceset-not-rendered",
        Severity.INFO,
        "a ResourceSet (or some of its inputs) was not rendered: a provider needs a live API, or a template function is not supported",
        "what a Flux Operator `ResourceSet` creates was not (fully) rendered: an input provider needs a live API (GitHub, GitLab, an OCI registry, …) or is not in git, or the template uses a function or action Fluxwarden does not implement (it never guesses); the objects it would create are not checked",
    ),
    FindingKind(
        "values-invalid",
        Severity.ERROR,
        "a valuesFrom entry cannot be merged (not YAML, or a targetPath helm-controller refuses)",
        "a HelmRelease's `valuesFrom` entry cannot be used: its values are not YAML, or its `targetPath` is one helm-controller refuses; helm-controller fails the release",
    ),
    FindingKind(
        "substitution-source-external",
        Severity.INFO,
        "a substituteFrom ConfigMap/Secret is not in git; its variables could not be checked",
        "a `postBuild.substituteFrom` ConfigMap or Secret is not in git (created on the cluster, or SOPS-encrypted): its variables are not known, so tokens it may define are not judged; unless `optional`, Flux fails the build when it is missing on the cluster",
    ),
    FindingKind(
        "substitution-source-missing",
        Severity.ERROR,
        "a substituteFrom ConfigMap/Secret is neither in git nor on the live cluster",
        "(with `--live`, or the bot reading the cluster) a `postBuild.substituteFrom` ConfigMap or Secret that no build in git holds was read from the cluster and is not there; it is not `optional`, so kustomize-controller fails the build until it exists",
    ),
    FindingKind(
        "bootstrap",
        Severity.INFO,
        "what the cold-start judgement assumes the bootstrap installs before Flux",
        "one line per bootstrap entry (`.fluxwarden.yaml` `bootstrap`, or read from the repository's bootstrap files): every assumption the cold start makes about what exists before Flux's first reconcile is printed; with `--no-bootstrap`, one line saying a bare cluster is judged",
    ),
    FindingKind(
        "precondition-checked",
        Severity.INFO,
        "which live preconditions were read, and their outcome",
        "(with `--live`) which tiers and moved objects were read on the cluster, and whether every precondition was met",
    ),
    FindingKind(
        "live-providers",
        Severity.INFO,
        "the API providers learned from the live cluster",
        "(with `--live`) the CRDs and API groups the cluster serves that git does not define: kinds they provide are not reported unknown",
    ),
))
