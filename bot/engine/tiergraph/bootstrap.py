"""What exists on a cluster before the first Flux reconcile: the bootstrap model (pure).

Many home-lab repositories install CRDs and core charts before Flux starts (a helmfile with
`--include-crds` for CRD-only releases, another for cilium, cert-manager, flux-operator…), or apply
tiers one by one from a script. A cold-start judgement that ignores them calls a converging repo broken.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bot.engine.render.config import RepoConfig, known_clusters
from bot.engine.core.errors import InputError, TierOrderError
from bot.engine.render.facts import TierFacts, facts_of_render
from bot.engine.render.knowledge import KnowledgeBase, bundle_crds, default_knowledge, normalise_chart_name
from bot.engine.core.model import Finding, Severity, SourceLocation, TierId, plural as _plural
from bot.engine.render.rendered import ClusterRender
from bot.engine.core.tree import CONFIG_FILE, RepoTree, normalise_repo_path
from bot.engine.ordering.tierorder import read_tier_order
from bot.engine.render.yamlio import load_all


@dataclass(frozen=True)
class BootstrapEntry:
    """One thing the bootstrap provides, with the repo file that says so (printed as an info line)."""

    # "crd-release" | "release" | "flux-instance" | "tier-order" | "declared" | "manifests" | "crds" (k3s, Talos,
    # CRD bundles by URL) | "unread" (a file read but not counted: malformed, remote, not run; presence-free)
    kind: str
    source: str  # repo-relative file (or ".fluxwarden.yaml" for declared entries)
    description: str  # e.g. "5 CRD-only releases (cert-manager, external-secrets, …)"


@dataclass(frozen=True)
class Bootstrap:
    """Present before Flux's first reconcile. Empty (the default) is a bare cluster (`--no-bootstrap`)."""

    # (namespace, name) of HelmReleases in git that the bootstrap installs: their chart's CRDs and their workload exist
    releases: frozenset[tuple[str, str]] = frozenset()
    # (namespace, name) of HelmReleases in git whose chart's CRDs only the bootstrap installs
    crd_releases: frozenset[tuple[str, str]] = frozenset()
    # chart names (as in the knowledge base) whose CRDs are installed, for releases with no HelmRelease in git
    crd_charts: frozenset[str] = frozenset()
    # (group, kind) of CRDs declared present (`.fluxwarden.yaml` bootstrap.crds)
    crds: frozenset[tuple[str, str]] = frozenset()
    # repo paths applied before Flux (`bootstrap.manifests`): every object they hold exists
    manifests: tuple[str, ...] = ()
    # (group, kind, helmfile) of kinds in the render whose API group names a bootstrap release or its chart,
    # when no chart the knowledge base knows says which CRDs it ships (kopiur → kopiur.home-operations.com)
    group_credits: frozenset[tuple[str, str, str]] = frozenset()
    # tiers a script applies and waits for, in this order, before Flux takes over (the seed's standup.sh)
    tier_order: tuple[TierId, ...] = ()
    entries: tuple[BootstrapEntry, ...] = field(default=())
    # (namespace, file that creates it): `kubectl create namespace`, a Namespace in an applied manifest, declared
    namespaces: frozenset[tuple[str, str]] = frozenset()
    # (kind, namespace, name) of the Secrets and ConfigMaps applied from the repository before Flux
    objects: frozenset[tuple[str, str, str]] = frozenset()

    @property
    def empty(self) -> bool:
        return not (
            self.releases or self.crd_releases or self.crd_charts or self.crds or self.manifests or self.tier_order
            or self.group_credits or self.namespaces
        )

    def namespace_source(self, namespace: str) -> str | None:
        """The file that creates `namespace` before Flux, if one does."""
        return next((source for ns, source in sorted(self.namespaces) if ns == namespace), None)

    def credited(self, group: str, kind: str) -> str | None:
        """The helmfile whose release (named for `group`) is credited with the kind's CRD, if one is."""
        return next((source for g, k, source in sorted(self.group_credits) if (g, k) == (group, kind)), None)


# ---------------------------------------------------------------------------------------------
# Discovery


CHECK_ID = "bootstrap"
FLUX_INSTANCE_CHART = "flux-instance"
TEMPLATE = "__fluxwarden_template__"  # what an unrendered `{{ … }}` reads as
_TEMPLATE_ACTION = re.compile(r"\{\{.*?\}\}", re.S)
_SCRIPT_NAMES = frozenset({"justfile", ".justfile", "Justfile", "Makefile", "makefile", "GNUmakefile"})
_SCRIPT_SUFFIXES = (".sh", ".bash", ".just", ".mk")
_TASKFILE = re.compile(r"^taskfile(\.dist)?\.ya?ml$", re.I)
_HELMFILE_NAME = re.compile(r"^helmfile[^/]*\.(ya?ml|gotmpl)$")
_HELMFILE_DIRS = ("helmfile.d", "helmfile")
_YAML_SUFFIXES = (".yaml", ".yml", ".gotmpl")
_K3S = re.compile(r"(^|[-_.])(k3s|rke2)([-_.]|$)")  # RKE2 embeds the same helm-controller
# machine.features.kubernetesTalosAPIAccess.enabled (or the KubeTalosAPIAccessConfig document of Talos
# 1.12+ multi-document configs, https://docs.siderolabs.com/talos/v1.14/reference/configuration/kubernetes/kubetalosapiaccessconfig):
# Talos registers serviceaccounts.talos.dev itself (https://www.talos.dev/latest/advanced/talos-api-access-from-k8s/).
_TALOS_API_ACCESS = re.compile(r"kubernetesTalosAPIAccess:(?:[ \t]*\n[ \t]+\S[^\n]*)*?\n[ \t]+enabled:[ \t]*true\b|kind:[ \t]*KubeTalosAPIAccessConfig\b")
TALOS_SERVICE_ACCOUNT = ("talos.dev", "ServiceAccount")
K3S_CRDS = frozenset({("helm.cattle.io", "HelmChart"), ("helm.cattle.io", "HelmChartConfig")})
_MAX_WALKED = 50_000  # repository paths looked at (names only; a few files are read)
_MAX_BASES = 8  # `bases:` followed this deep
_LISTED = 4  # names in a description before "…"


@dataclass(frozen=True)
class HelmfileRelease:
    """One release of a helmfile as written (a templated field reads as None)."""

    name: str
    namespace: str
    chart: str | None


@dataclass(frozen=True)
class Helmfile:
    """What a helmfile says: its releases, whether it carries `--include-crds`, the repo paths its hooks apply."""

    path: str
    releases: tuple[HelmfileRelease, ...]
    include_crds: bool  # `helmDefaults.args` has `--include-crds`: meant for `helmfile template`
    hook_manifests: tuple[str, ...]  # `kubectl apply -f/-k` of repo paths in presync/postsync hooks
    templated: int  # releases left out: their name or namespace is templated


class HelmfileError(ValueError):
    """A helmfile that cannot be read (an info line, never an error)."""


@dataclass(frozen=True)
class ScriptRun:
    """A script line that runs a helmfile: `sync`/`apply` (everything) or `template` piped through a CRD filter."""

    script: str
    helmfile: str
    crds_only: bool


def discover_bootstrap(
    snapshot: RepoTree,
    config: RepoConfig,
    render: ClusterRender,
    facts: Mapping[TierId, TierFacts] | None = None,
    knowledge: KnowledgeBase | None = None,
) -> Bootstrap:
    """What the repository shows is installed before Flux's first reconcile of `render`'s cluster, and what it declares.

    Read (never run) from the whole repository (`RepoTree.bootstrap_view`): helmfiles and the scripts that run
    them, a tier-order script, k3s and Talos configuration, and `.fluxwarden.yaml` `bootstrap:`. Every
    assumption becomes an entry (an info line).
    """
    knowledge = knowledge or default_knowledge()
    if facts is None:
        facts = facts_of_render(render, knowledge)
    in_git = _helm_releases(facts)
    found = _Found()
    # Kinds no known chart or CRD in git provides: a bootstrap release named for their API group may.
    unclaimed = _unclaimed_kinds(facts, knowledge)
    others = [path for name, path in known_clusters(config, snapshot).items() if name != render.cluster and path != render.entry]
    # A bootstrap runs from the checkout, not from Flux's artifact: it reads what `.sourceignore` hides too.
    tree = snapshot.bootstrap_view()
    paths = [p for p in _walk(tree) if not _nearer_another_cluster(p, render.entry, others)]
    helmfile_paths = [p for p in paths if _is_helmfile(p)]
    runs = _script_runs(tree, paths, helmfile_paths)
    for path in sorted({*helmfile_paths, *(r.helmfile for r in runs)}):
        _read_helmfile(tree, path, [r for r in runs if r.helmfile == path], in_git, knowledge, found, unclaimed)
    _script_applies(tree, paths, knowledge, found)
    _script_namespaces(tree, paths, found)
    _distribution(tree, paths, in_git, knowledge, found)
    _tier_order(tree, config, render, found)
    _declared(tree, config, in_git, found)
    _manifest_objects(tree, found)
    return Bootstrap(
        releases=frozenset(found.releases),
        crd_releases=frozenset(found.crd_releases - found.releases),
        crd_charts=frozenset(found.crd_charts),
        crds=frozenset(found.crds),
        manifests=tuple(dict.fromkeys(found.manifests)),
        tier_order=found.tier_order,
        entries=tuple(found.entries),
        group_credits=frozenset(found.group_credits),
        namespaces=frozenset(found.namespaces),
        objects=frozenset(found.objects),
    )


def bootstrap_findings(bootstrap: Bootstrap) -> list[Finding]:
    """One info line per bootstrap entry: every assumption the cold-start judgement makes is printed."""
    return [
        Finding(CHECK_ID, Severity.INFO, f"bootstrap: {entry.description}", location=SourceLocation(entry.source) if entry.source else None)
        for entry in bootstrap.entries
    ]


def applied_before_flux(finding: Finding, bootstrap: Bootstrap) -> bool:
    """A "not in git" substituteFrom source that the bootstrap applies from the repository: it is in git."""
    ref = finding.object
    return finding.check == "substitution-source-external" and ref is not None and (ref.kind, ref.namespace, ref.name) in bootstrap.objects


def bare_cluster_findings() -> list[Finding]:
    """`--no-bootstrap`: the one info line saying nothing is assumed present before Flux."""
    return [Finding(CHECK_ID, Severity.INFO, "bootstrap: not read (--no-bootstrap): a bare cluster is judged, only Flux and built-in APIs present")]


@dataclass
class _Found:
    releases: set[tuple[str, str]] = field(default_factory=set)
    crd_releases: set[tuple[str, str]] = field(default_factory=set)
    crd_charts: set[str] = field(default_factory=set)
    crds: set[tuple[str, str]] = field(default_factory=set)
    manifests: list[str] = field(default_factory=list)
    tier_order: tuple[TierId, ...] = ()
    entries: list[BootstrapEntry] = field(default_factory=list)
    group_credits: set[tuple[str, str, str]] = field(default_factory=set)
    namespaces: set[tuple[str, str]] = field(default_factory=set)
    objects: set[tuple[str, str, str]] = field(default_factory=set)

    def add(self, kind: str, source: str, description: str) -> None:
        self.entries.append(BootstrapEntry(kind, source, description))


def _helm_releases(facts: Mapping[TierId, TierFacts]) -> frozenset[tuple[str, str]]:
    """(namespace, name) of every HelmRelease the cluster's render applies."""
    return frozenset((m.ref.namespace, m.ref.name) for tier_facts in facts.values() for m in tier_facts.helm_releases)


def _walk(snapshot: RepoTree) -> list[str]:
    """Every file path of the snapshot (bounded), depth first in name order."""
    out: list[str] = []
    stack = [""]
    while stack and len(out) < _MAX_WALKED:
        directory = stack.pop()
        dirs, files = snapshot.list_dir(directory)
        stack.extend(posixpath.join(directory, d) if directory else d for d in reversed(dirs))
        out.extend(posixpath.join(directory, f) if directory else f for f in files)
    return out


def _nearer_another_cluster(path: str, entry: str, others: list[str]) -> bool:
    """Whether a file sits with another cluster's entry rather than this one's (kubernetes/staging/bootstrap/…
    when checking kubernetes/main/flux/cluster): each cluster of a repository has its own bootstrap."""
    if not others:
        return False
    mine = _shared(path, entry)
    return any(_shared(path, other) > mine for other in others)


def _shared(a: str, b: str) -> int:
    """How many leading directories two repo paths share."""
    count = 0
    for x, y in zip(posixpath.dirname(a).split("/"), b.split("/")):
        if x != y or not x:
            break
        count += 1
    return count


def _is_helmfile(path: str) -> bool:
    """`helmfile.yaml`, `helmfile.yaml.gotmpl`, `helmfile-x.yaml`, or a YAML file in a `helmfile.d`/`helmfile` directory."""
    name, parent = posixpath.basename(path), posixpath.basename(posixpath.dirname(path))
    return bool(_HELMFILE_NAME.match(name)) or (parent in _HELMFILE_DIRS and name.endswith(_YAML_SUFFIXES))


def _is_script(path: str) -> bool:
    name = posixpath.basename(path)
    if name in _SCRIPT_NAMES or name.endswith(_SCRIPT_SUFFIXES) or _TASKFILE.match(name):
        return True
    parts = path.split("/")
    return any(p in (".taskfiles", ".justfiles", "taskfiles") for p in parts[:-1]) and name.endswith((".yaml", ".yml", ".just"))


# -- scripts ----------------------------------------------------------------------------------


_YAML_BLOCK = re.compile(r"^\s*(?:-\s*|[\w.-]+:\s*)?\|[-+]?\s*$")  # `cmd: |`, `- |`: a YAML block scalar, not a pipe


# Text that names a command without running it: a comment, a just attribute (`[doc("helmfile sync")]`), a
# message (`echo`, `printf`, `gum log`, make's `$(info …)`), a Taskfile's description.
_NOT_A_COMMAND = re.compile(
    r"""^\s*(?:\#|\[[\w\s,()'"-]*[(:]|[@+-]*\s*(?:echo|printf|log|gum\s+(?:log|style|format)|just\s+log|\$\((?:info|warning|error)\b)\b"""
    r"""|(?:-\s*)?(?:desc|summary|description|prompt|msg|message|help|label)\s*:)"""
)


def _logical_lines(text: str) -> list[str]:
    """Shell lines with continuations joined (`\\`, and a line ending in a pipe), each `{{ … }}` (just, Task)
    written `{{}}` so that it stays one word; lines that are not commands (_NOT_A_COMMAND) left out."""
    lines: list[str] = []
    pending = ""
    for line in _TEMPLATE_ACTION.sub("{{}}", re.sub(r"\\\r?\n", " ", text)).splitlines():
        line = pending + line
        if line.rstrip().endswith("|") and not _YAML_BLOCK.match(line):
            pending = line.rstrip() + " "
            continue
        pending = ""
        if not _NOT_A_COMMAND.match(line):
            lines.append(line)
    return lines + ([pending] if pending and not _NOT_A_COMMAND.match(pending) else [])


def _script_runs(snapshot: RepoTree, paths: list[str], helmfiles: list[str]) -> list[ScriptRun]:
    """Every script line that runs a helmfile, with the helmfile it names and how its output is used.

    `helmfile … template | yq 'select(.kind == "CustomResourceDefinition")' | kubectl apply` installs
    only the chart's CRDs (onedr0p's cluster-template and its descendants); `sync` and `apply`
    install the releases; `template` piped into `kubectl apply` unfiltered installs everything
    (without Helm hooks). Other subcommands (`diff`, `lint`, `destroy`…) install nothing.
    """
    runs: list[ScriptRun] = []
    for script in paths:
        if not _is_script(script):
            continue
        text = snapshot.read_text(script) or ""
        if "helmfile" not in text:
            continue
        assigned: dict[str, str] = {}
        for line in _logical_lines(text):
            if (assignment := _ASSIGNMENT.match(line)) is not None:
                name, value = assignment.group(1), next(v for v in assignment.group(2, 3, 4) if v is not None)
                if "$(" in value or "`" in value:
                    assigned.pop(name, None)  # a command's output: not known
                else:
                    assigned[name] = value
            if "helmfile" not in line or line.lstrip().startswith("#"):
                continue
            head, _, tail = line.partition("|")
            # The command (after just's `@` or make's `-` quiet prefixes), not a path naming a helmfile directory.
            match = re.search(r"(?:^\s*[@+-]*|[\s;&(`])helmfile(\s.*)", head)
            if match is None:
                continue
            words = match.group(1).split()
            command = next((w for w in words if w in ("sync", "apply", "template", "diff", "destroy", "lint", "deps", "build", "list", "status", "write-values", "fetch", "repos", "init", "show-dag", "test")), None)
            if command not in ("sync", "apply", "template"):
                continue
            if command == "template" and "kubectl" not in tail and "CustomResourceDefinition" not in tail:
                continue  # rendered for reading, not applied
            target = _file_argument(match.group(1))
            target = _expand(target, assigned) if target else target
            # Without `-f`, helmfile reads its working directory: taken as the script's.
            resolved = _resolve(snapshot, script, target, helmfiles) if target else _default_in(snapshot, posixpath.dirname(script), helmfiles)
            crds_only = command == "template" and "CustomResourceDefinition" in tail
            runs.extend(ScriptRun(script, path, crds_only) for path in resolved)
    return runs


# `NAME=value`, `NAME="value"`, `NAME='value'` on a line of its own (bash's `local`, `readonly`, `declare`,
# `export` before it, with their flags): how a script names the helmfile it then runs as `--file "${NAME}"`.
_ASSIGNMENT = re.compile(
    r"""^\s*(?:(?:local|readonly|declare|typeset|export)(?:\s+-[A-Za-z]+)*\s+)?([A-Za-z_][A-Za-z0-9_]*)="""
    r"""(?:"([^"]*)"|'([^']*)'|([^\s"';&|]*))\s*(?:[;#].*)?$"""
)
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def _expand(target: str, assigned: Mapping[str, str]) -> str:
    """`${NAME}`/`$NAME` replaced by a plain assignment made earlier in the script (a few passes, for one
    naming another); any other variable is left for `_resolve` to read as "somewhere"."""
    for _ in range(4):
        expanded = _REFERENCE.sub(lambda m: assigned.get(m.group(1) or m.group(2), m.group(0)), target)
        if expanded == target:
            break
        target = expanded
    return target


def _file_argument(args: str) -> str | None:
    """The `-f`/`--file` argument of a helmfile command line, quotes stripped."""
    match = re.search(r"(?:^|\s)(?:-f|--file)(?:=|\s+)(\"[^\"]*\"|'[^']*'|\S+)", args)
    return match.group(1).strip("\"'") if match else None


def _resolve(snapshot: RepoTree, script: str, target: str, helmfiles: list[str]) -> list[str]:
    """The helmfile(s) a script's `-f` names: variables and `{{ … }}` before it are read as "somewhere"; the tail decides.

    `{{ source_directory() }}/helmfile/crds.yaml` in kubernetes/bootstrap/mod.just is
    kubernetes/bootstrap/helmfile/crds.yaml: a tail that exists next to the script wins, then one
    from the repository root, then the only helmfile whose path ends with it (the nearest to the script
    when several do). A directory (`-f helmfile.d`) is every helmfile in it.
    """
    tail = re.split(r"\}\}|\$\{[^}]*\}|\$\(?[A-Za-z_][A-Za-z0-9_]*\)?|\)", target)[-1]
    variable = tail != target
    tail = tail.lstrip("/")
    if not tail:
        return []
    base = posixpath.dirname(script)
    candidates = [posixpath.join(base, tail)] + ([tail] if variable or base else [])
    for candidate in candidates:
        rel = normalise_repo_path(candidate)
        if rel is not None and snapshot.is_file(rel):
            return [rel]
        if rel is not None and snapshot.is_dir(rel):
            return _default_in(snapshot, rel, helmfiles)
    ending = normalise_repo_path(tail)
    if not variable or ending is None:
        return []
    matches = [h for h in helmfiles if h == ending or h.endswith("/" + ending)]
    if not matches:
        return []
    return [max(matches, key=lambda h: (len(posixpath.commonpath([h, script])) if "/" in script else 0, -len(h)))]


def _default_in(snapshot: RepoTree, directory: str, helmfiles: list[str]) -> list[str]:
    """What `helmfile` reads in `directory` without `-f`: its `helmfile.yaml` (or `.gotmpl`), else every file of its `helmfile.d`.

    A directory that is itself a `helmfile.d` (`-f helmfile.d`) is every helmfile in it.
    """
    for name in ("helmfile.yaml", "helmfile.yaml.gotmpl", "helmfile.yml"):
        rel = posixpath.join(directory, name) if directory else name
        if snapshot.is_file(rel):
            return [rel]
    folder = directory if posixpath.basename(directory) in _HELMFILE_DIRS else posixpath.join(directory, "helmfile.d") if directory else "helmfile.d"
    return [h for h in helmfiles if posixpath.dirname(h) == folder]


# -- helmfiles --------------------------------------------------------------------------------


def untemplate(text: str) -> str:
    """A helmfile template read as YAML without rendering: lines that are only `{{ … }}` actions go,
    any other action reads as a placeholder (so a templated field is known to be unknown)."""
    out = []
    for line in text.splitlines():
        stripped = _TEMPLATE_ACTION.sub("", line).strip()
        if not stripped and "{{" in line:
            continue  # `{{- if … }}`, `{{ end }}`, `{{ range … }}`
        out.append(_TEMPLATE_ACTION.sub(TEMPLATE, line))
    rest = "\n".join(out)
    # An action left open across lines: drop from it to the end of the line it closes on.
    return re.sub(r"\{\{[^\n]*(?:\n[^\n]*?)*?\}\}", TEMPLATE, rest)


def parse_helmfile(snapshot: RepoTree, path: str, depth: int = 0) -> Helmfile:
    """Read one helmfile (and its `bases:`) as written; raise HelmfileError when it is not YAML even untemplated."""
    text = snapshot.read_text(path)
    if text is None:
        raise HelmfileError(f"{path} is not in the repository")
    try:
        docs = load_all(untemplate(text), path)
    except InputError as exc:
        raise HelmfileError(str(exc)) from None
    releases: list[HelmfileRelease] = []
    templates: dict[str, Mapping] = {}
    include_crds = False
    hooks: list[str] = []
    templated = 0
    base_dir = posixpath.dirname(path)
    raw_releases: list[tuple[Mapping, Any]] = []
    for doc in docs:
        if not isinstance(doc, Mapping):
            continue
        for base in doc.get("bases") or () if isinstance(doc.get("bases"), list) else ():
            rel = normalise_repo_path(posixpath.join(base_dir, base)) if isinstance(base, str) and TEMPLATE not in base else None
            if rel is None or depth >= _MAX_BASES:
                continue
            try:
                inherited = parse_helmfile(snapshot, rel, depth + 1)
            except HelmfileError:
                continue
            releases.extend(inherited.releases)
            include_crds |= inherited.include_crds
            hooks.extend(inherited.hook_manifests)
            templates.update(_templates_of(snapshot, rel))
        defaults = raw if isinstance(raw := doc.get("helmDefaults"), Mapping) else {}
        args = raw if isinstance(raw := defaults.get("args"), list) else []
        include_crds |= any(isinstance(a, str) and a.strip() == "--include-crds" for a in args)
        if isinstance(doc.get("templates"), Mapping):
            templates.update({k: v for k, v in doc["templates"].items() if isinstance(v, Mapping)})
        for release in doc.get("releases") or () if isinstance(doc.get("releases"), list) else ():
            if isinstance(release, Mapping):
                raw_releases.append((release, doc.get("defaultInherit")))
    for release, default_inherit in raw_releases:
        merged = _inherited(release, templates, default_inherit)
        if merged.get("installed") is False:
            continue
        name, namespace, chart = merged.get("name"), merged.get("namespace") or "default", merged.get("chart")
        if not isinstance(name, str) or not isinstance(namespace, str) or TEMPLATE in name or TEMPLATE in namespace:
            templated += 1
            continue
        chart = chart if isinstance(chart, str) and TEMPLATE not in chart else None
        releases.append(HelmfileRelease(name, namespace, chart))
        hooks.extend(_hook_manifests(snapshot, base_dir, merged.get("hooks")))
    return Helmfile(path, tuple(dict.fromkeys(releases)), include_crds, tuple(dict.fromkeys(hooks)), templated)


def _templates_of(snapshot: RepoTree, path: str) -> dict[str, Mapping]:
    try:
        docs = load_all(untemplate(snapshot.read_text(path) or ""), path)
    except InputError:
        return {}
    out: dict[str, Mapping] = {}
    for doc in docs:
        if isinstance(doc, Mapping) and isinstance(doc.get("templates"), Mapping):
            out.update({k: v for k, v in doc["templates"].items() if isinstance(v, Mapping)})
    return out


def _inherited(release: Mapping, templates: Mapping[str, Mapping], default_inherit: Any) -> dict:
    """A release with the fields of the templates it inherits (`inherit: [{template: x}]`, `defaultInherit`) under its own."""
    names = [default_inherit] if isinstance(default_inherit, str) else []
    inherit = release.get("inherit")
    for item in inherit if isinstance(inherit, list) else ():
        if isinstance(item, Mapping) and isinstance(item.get("template"), str):
            names.append(item["template"])
    merged: dict = {}
    for name in names:
        merged.update(templates.get(name) or {})
    merged.update(release)
    return merged


def _hook_manifests(snapshot: RepoTree, base_dir: str, hooks: Any) -> list[str]:
    """Repo paths a release's presync/postsync hooks `kubectl apply` (run from the helmfile's directory)."""
    out = []
    for hook in hooks if isinstance(hooks, list) else ():
        if not isinstance(hook, Mapping) or hook.get("command") != "kubectl":
            continue
        events = raw if isinstance(raw := hook.get("events"), list) else []
        args = [a for a in hook.get("args") or () if isinstance(a, str)] if isinstance(hook.get("args"), list) else []
        if "apply" not in args or not set(events) & {"presync", "postsync"}:
            continue
        for index, arg in enumerate(args):
            value = None
            for flag in ("--kustomize", "--filename", "-k", "-f"):
                if arg.startswith(flag + "="):
                    value = arg[len(flag) + 1 :]
                elif arg == flag and index + 1 < len(args):
                    value = args[index + 1]
            if value is None or TEMPLATE in value or "://" in value:
                continue
            rel = normalise_repo_path(posixpath.join(base_dir, value))
            if rel is not None and snapshot.exists(rel):
                out.append(rel)
    return out


def _read_helmfile(
    snapshot: RepoTree,
    path: str,
    runs: list[ScriptRun],
    in_git: frozenset[tuple[str, str]],
    knowledge: KnowledgeBase,
    found: _Found,
    unclaimed: frozenset[tuple[str, str]] = frozenset(),
) -> None:
    """Count one helmfile's releases as the scripts that run it (or its own flags) say.

    CRD-only, in this order: a script runs it with `template` piped through a CRD filter (and none
    with `sync`/`apply`); else no script runs it and it carries `--include-crds` in
    `helmDefaults.args` (helm install always installs a chart's crds/, so the flag only serves
    `helm template`: the file is meant to be templated for its CRDs), or it is named for CRDs
    (`crds.yaml`, `crds/helmfile.yaml`). Otherwise its releases are installed whole. A helmfile that
    no script runs counts only under a `bootstrap` directory or when it installs Flux (what starts
    Flux runs before it); any other is named in an info line and not counted.
    """
    try:
        helmfile = parse_helmfile(snapshot, path)
    except HelmfileError as exc:
        found.add("unread", path, f"helmfile {path} not read ({exc}); nothing from it is assumed present")
        return
    if not helmfile.releases and not helmfile.templated:
        return  # a base, an environment or values file
    scripts = sorted({r.script for r in runs})
    installs_flux = any(_chart_of(r, knowledge) in ("flux-operator", FLUX_INSTANCE_CHART, "flux2") for r in helmfile.releases)
    if runs:
        crds_only = all(r.crds_only for r in runs)
        how = f"run by {', '.join(scripts)}"
    else:
        stem = posixpath.basename(path).split(".")[0]
        crds_only = helmfile.include_crds or stem == "crds" or posixpath.basename(posixpath.dirname(path)) == "crds"
        how = "run by no script found; " + ("its helmDefaults.args carry --include-crds" if helmfile.include_crds else "named for CRDs" if crds_only else "taken as installed")
        if not installs_flux and not any(part.startswith("bootstrap") for part in path.lower().split("/")):
            found.add("unread", path, f"helmfile {path} not counted: no script runs it and it is not in a bootstrap directory")
            return
    names = [f"{r.namespace}/{r.name}" for r in helmfile.releases]
    skipped = f"; {_plural(helmfile.templated, 'release')} with a templated name not read" if helmfile.templated else ""
    unmatched: list[str] = []
    unknown: list[str] = []
    for release in helmfile.releases:
        key = (release.namespace, release.name)
        if key in in_git:
            (found.crd_releases if crds_only else found.releases).add(key)
            continue
        chart = _chart_of(release, knowledge)
        if chart is None:
            unknown.append(release.name)
            continue
        found.crd_charts.add(chart)
        unmatched.append(f"{release.name} (chart {chart})")
    if crds_only:
        summary = f"{_plural(len(names), 'CRD-only release')} from {path} ({_short(names)}): their charts' CRDs exist before Flux"
    else:
        summary = f"{_plural(len(names), 'release')} from {path} ({_short(names)}) installed with their CRDs before Flux"
    notes = [how]
    credited = sorted(
        (group, kind) for group, kind in unclaimed
        if any(names_group(name, group) for r in helmfile.releases for name in (r.name, r.chart or "") if knowledge.chart_rule(name) is None)
    )
    if credited:
        found.group_credits.update((group, kind, path) for group, kind in credited)
        kinds = [f"{kind}.{group}" for group, kind in credited]
        notes.append(f"credited by API group (chart not known): {_short(kinds)}")
    if unmatched:
        notes.append(f"no HelmRelease in git for {_short(unmatched)}: only the chart's CRDs are counted" if not crds_only else f"no HelmRelease in git for {_short(unmatched)}: counted by chart")
    if unknown:
        notes.append(f"chart unknown (templated, no HelmRelease in git) for {_short(unknown)}: not counted")
    found.add("crd-release" if crds_only else "release", path, f"{summary} ({'; '.join(notes)}{skipped})")
    if not crds_only:
        for release in helmfile.releases:
            if _chart_of(release, knowledge) == FLUX_INSTANCE_CHART or release.name == FLUX_INSTANCE_CHART:
                found.add(
                    "flux-instance", path,
                    f"FluxInstance from release {release.namespace}/{release.name} in {path}: the Flux Operator installs Flux (its CRDs are always present)",
                )
        if helmfile.hook_manifests:
            found.manifests.extend(helmfile.hook_manifests)
            found.add("manifests", path, f"applied by release hooks in {path} before Flux: {_short(helmfile.hook_manifests)}")


_GROUP_SUFFIXES = ("-operator", "-controller", "-crds", "-crd")
_GENERIC_LABELS = frozenset({"io", "com", "org", "dev", "net", "k8s", "x-k8s", "cloud", "app", "apps", "sh"})


def names_group(name: str, group: str) -> bool:
    """Whether a release or chart name names an API group: `kopiur` names kopiur.home-operations.com,
    `litellm-operator` names litellm.home-operations.com, `external-secrets` names external-secrets.io."""
    name = name.rstrip("/").rsplit("/", 1)[-1].lower()
    candidates = {name} | {name[: -len(s)] for s in _GROUP_SUFFIXES if name.endswith(s)}
    labels = [label for label in group.lower().split(".") if label not in _GENERIC_LABELS]
    return any(len(c) >= 3 and (c in labels or c.replace("-", "") in labels) for c in candidates)


def _unclaimed_kinds(facts: Mapping[TierId, TierFacts], knowledge: KnowledgeBase) -> frozenset[tuple[str, str]]:
    """(group, kind) the render uses that are not built in, not Flux's, not defined by a CRD in git and not
    shipped by a chart the knowledge base knows: the kinds a bootstrap release may be credited with by name."""
    defined = {gk for tier_facts in facts.values() for gk, _ in tier_facts.crds}
    rules = list(knowledge.charts.values())
    return frozenset(
        (gk.group, gk.kind)
        for gk in {gk for tier_facts in facts.values() for gk in tier_facts.kinds}
        if gk.group and not knowledge.is_builtin(gk) and not knowledge.is_preinstalled(gk) and gk not in defined
        and not any(rule.provides(gk) for rule in rules)
    )


def _chart_of(release: HelmfileRelease, knowledge: KnowledgeBase) -> str | None:
    """The chart as the knowledge base names it; a templated chart falls back on the release name when that is a known chart."""
    for candidate in (release.chart, None if release.chart else release.name):
        if candidate:
            rule = knowledge.chart_rule(candidate)
            if rule is not None:
                return rule.chart
    return normalise_chart_name(release.chart) if release.chart else None


def _short(names: list[str] | tuple[str, ...]) -> str:
    items = list(dict.fromkeys(names))
    return ", ".join(items) if len(items) <= _LISTED else ", ".join(items[:_LISTED]) + f", … ({len(items) - _LISTED} more)"


# -- distributions ----------------------------------------------------------------------------


def _distribution(snapshot: RepoTree, paths: list[str], in_git: frozenset[tuple[str, str]], knowledge: KnowledgeBase, found: _Found) -> None:
    """k3s's built-in helm-controller APIs where the repo shows k3s; Talos inline manifests."""
    k3s = next((p for p in paths if any(_K3S.search(part.lower()) for part in p.split("/"))), None)
    if k3s is None:
        k3s = next((p for p in paths if _is_script(p) and re.search(r"/var/lib/rancher/(k3s|rke2)", snapshot.read_text(p) or "")), None)
    if k3s is not None:
        found.crds.update(K3S_CRDS)
        found.add("crds", k3s, f"k3s/RKE2 (seen in {k3s}): its built-in helm.cattle.io HelmChart and HelmChartConfig APIs exist")
    api_access = None
    for path in paths:
        # `.j2`: a Talos config rendered by a template tool (minijinja in onedr0p/home-ops' talos/*.yaml.j2)
        if not path.endswith((".yaml", ".yml", ".gotmpl", ".j2")) or not ("talos" in path.lower() or posixpath.basename(path).startswith("talconfig")):
            continue
        text = snapshot.read_text(path) or ""
        if api_access is None and _TALOS_API_ACCESS.search(text):
            api_access = path
        if "inlineManifests" not in text and "extraManifests" not in text:
            continue
        _talos(path, text, in_git, knowledge, found)
    _cni_before_flux(snapshot, paths, in_git, found)
    if api_access is not None:
        found.crds.add(TALOS_SERVICE_ACCOUNT)
        found.add("crds", api_access, f"Talos API access from Kubernetes (enabled in {api_access}): Talos serves the ServiceAccount.talos.dev CRD")


# The built-in CNI switched off: Talos `cluster.network.cni.name: none` (talhelper `cniConfig: {name: none}`), or
# `name: custom` with `urls` Talos applies itself at bootstrap (xunholy/k8s-gitops: a rendered cilium manifest),
# k3s/RKE2 `flannel-backend: none` (or `--flannel-backend=none`). Flux's own pods need a pod network, so the
# CNI was installed before Flux (https://www.talos.dev/latest/kubernetes-guides/network/deploying-cilium/,
# https://www.talos.dev/latest/reference/configuration/v1alpha1/config/#Config.cluster.network.cni).
_NO_CNI = re.compile(
    r"(?:\bcni(?:Config)?:\s*(?:\{\s*|\n\s+)name:\s*[\"']?(?:none|custom)\b)|(?:flannel-backend[\"']?\s*[:=]\s*[\"']?none\b)",
    re.I,
)
CNI_CHARTS = frozenset({"cilium", "calico", "tigera-operator", "flannel", "canal", "kube-ovn", "antrea", "kube-router", "weave-net"})


def _cni_before_flux(snapshot: RepoTree, paths: list[str], in_git: frozenset[tuple[str, str]], found: _Found) -> None:
    """A config that disables the built-in CNI: the CNI's HelmRelease in git was installed before Flux."""
    cnis = sorted(key for key in in_git if key[1] in CNI_CHARTS)
    if not cnis or all(key in found.releases for key in cnis):
        return
    for path in paths:
        lowered = path.lower()
        if not path.endswith((".yaml", ".yml", ".j2", ".gotmpl", ".sh", ".toml")) and not _is_script(path):
            continue
        if not ("talos" in lowered or "talconfig" in lowered or _K3S.search(lowered) or "k3s" in lowered or "rke2" in lowered or _is_script(path)):
            continue
        if _NO_CNI.search(snapshot.read_text(path) or ""):
            found.releases.update(cnis)
            names = _short([f"{ns}/{name}" for ns, name in cnis])
            found.add("release", path, f"the built-in CNI is disabled in {path}: the CNI ({names}) was installed before Flux, whose pods need it")
            return


def _talos(path: str, text: str, in_git: frozenset[tuple[str, str]], knowledge: KnowledgeBase, found: _Found) -> None:
    """`cluster.inlineManifests` (applied by Talos when the cluster boots): their CRDs exist, and a chart
    rendered into them (cilium, often) is its HelmRelease in git; `extraManifests` are remote."""
    try:
        docs = load_all(untemplate(text), path)
    except InputError:
        found.add("unread", path, f"Talos configuration {path} not read; its inline manifests are not assumed present")
        return
    objects: list[Mapping] = []
    remote: list[str] = []
    for doc in docs:
        cluster = doc.get("cluster") if isinstance(doc, Mapping) else None
        if not isinstance(cluster, Mapping):
            continue
        for item in cluster.get("inlineManifests") or () if isinstance(cluster.get("inlineManifests"), list) else ():
            contents = item.get("contents") if isinstance(item, Mapping) else None
            if not isinstance(contents, str):
                continue
            try:
                objects.extend(o for o in load_all(untemplate(contents), path) if isinstance(o, Mapping))
            except InputError:
                continue
        extra = cluster.get("extraManifests")
        remote += [u for u in extra if isinstance(u, str)] if isinstance(extra, list) else []
    crds = set()
    for obj in objects:
        spec = raw if isinstance(raw := obj.get("spec"), Mapping) else {}
        names = raw if isinstance(raw := spec.get("names"), Mapping) else {}
        if obj.get("kind") == "CustomResourceDefinition" and isinstance(spec.get("group"), str) and isinstance(names.get("kind"), str):
            crds.add((spec["group"], names["kind"]))
    found.crds.update(crds)
    releases, charts = _helm_rendered(objects, in_git, knowledge)
    found.releases.update(releases)
    found.crd_charts.update(charts)
    if objects:
        kinds = sorted({str(o.get("kind")) for o in objects})
        notes = [f"{_plural(len(crds), 'CRD')} among them"] if crds else []
        if releases:
            notes.append(f"rendered from the HelmRelease(s) {_short([f'{ns}/{name}' for ns, name in sorted(releases)])} in git: installed before Flux")
        if charts:
            notes.append(f"rendered from chart(s) {_short(sorted(charts))}: their CRDs counted")
        found.add("manifests", path, f"{_plural(len(objects), 'object')} in Talos inlineManifests of {path} ({_short(kinds)}) exist before Flux" + "".join(f"; {n}" for n in notes))
    known: list[str] = []
    unknown: list[str] = []
    for url in dict.fromkeys(remote):
        bundle, charts = bundle_crds(url, knowledge)
        found.crds.update(bundle)
        found.crd_charts.update(charts)
        (known if bundle or charts else unknown).append(url.rstrip("/").rsplit("/", 1)[-1])
    if known:
        found.add("crds", path, f"CRD bundles in Talos extraManifests of {path} exist before Flux: {_short(known)}")
    if unknown:
        found.add("unread", path, f"{_plural(len(unknown), 'Talos extraManifests URL')} in {path} not read (remote: {_short(unknown)}): declare what they install under bootstrap: in .fluxwarden.yaml")


def _helm_rendered(objects: list[Mapping], in_git: frozenset[tuple[str, str]], knowledge: KnowledgeBase) -> tuple[set[tuple[str, str]], set[str]]:
    """HelmReleases in git (namespace, name) and known charts that `helm template` output was rendered from.

    `helm template NAME CHART -n NS` labels what it renders `app.kubernetes.io/managed-by: Helm`, most
    charts add `app.kubernetes.io/instance: NAME` and `helm.sh/chart: CHART-VERSION`; a render taken
    from a cluster also carries `meta.helm.sh/release-name`/`-namespace`.
    """
    releases: set[tuple[str, str]] = set()
    charts: set[str] = set()
    for obj in objects:
        meta = raw if isinstance(raw := obj.get("metadata"), Mapping) else {}
        labels = raw if isinstance(raw := meta.get("labels"), Mapping) else {}
        annotations = raw if isinstance(raw := meta.get("annotations"), Mapping) else {}
        if labels.get("app.kubernetes.io/managed-by") != "Helm" and "meta.helm.sh/release-name" not in annotations:
            continue
        name = annotations.get("meta.helm.sh/release-name") or labels.get("app.kubernetes.io/instance")
        namespace = annotations.get("meta.helm.sh/release-namespace") or meta.get("namespace")
        if isinstance(name, str) and isinstance(namespace, str) and (namespace, name) in in_git:
            releases.add((namespace, name))
            continue
        chart = labels.get("helm.sh/chart")
        rule = knowledge.chart_rule(re.sub(r"-v?\d[\w.+-]*$", "", chart)) if isinstance(chart, str) else None
        if rule is not None:
            charts.add(rule.chart)
    return releases, charts


# -- tier order and declarations ----------------------------------------------------------------


def _tier_order(snapshot: RepoTree, config: RepoConfig, render: ClusterRender, found: _Found) -> None:
    """The configured tier-order script, when a loop over its list waits for each tier to be Ready.

    `for tier in "${TIER_ORDER[@]}"; do … kubectl wait kustomization/$tier --for=condition=Ready`
    (or `flux resume`/`flux reconcile kustomization` without `--wait=false`) applies the tiers one
    at a time; a loop that only suspends them, or none at all, orders nothing.
    """
    setting = config.tier_order
    if setting is None:
        return
    text = snapshot.read_text(setting.file)
    if text is None:
        return  # tier-order-stale says the file is missing
    try:
        order = read_tier_order(text, setting.variable)
    except TierOrderError:
        return  # tier-order-stale says why
    if not _waits_in_order(text, setting.variable):
        found.add("unread", setting.file, f"tier order {setting.variable} in {setting.file} not counted: no loop over it waits for each tier to be Ready")
        return
    tiers = []
    for name in order.names:
        matches = [t for t in render.tiers if str(t) == name or ("/" not in name and t.name == name)]
        tid = next((t for t in matches if t.namespace == "flux-system"), matches[0] if len(matches) == 1 else None)
        if tid is not None and tid not in tiers:
            tiers.append(tid)
    if tiers:
        found.tier_order = tuple(tiers)
        found.add("tier-order", setting.file, f"{setting.file} applies {_plural(len(tiers), 'tier')} one by one, each Ready before the next: {' → '.join(t.name for t in tiers)}")


def _waits_in_order(text: str, variable: str) -> bool:
    """Whether a `for x in "${VAR[@]}"` (or `$VAR`) loop's body waits for each tier to be Ready."""
    loop = re.compile(rf"for\s+(\w+)\s+in\s+\"?\$\{{?{re.escape(variable)}(?:\[[@*]\])?\}}?\"?\s*;?\s*(?:\n\s*)?do\b(.*?)\bdone\b", re.S)
    for match in loop.finditer(re.sub(r"\\\r?\n", " ", text)):  # `\` continuations joined
        body = match.group(2)
        if re.search(r"kubectl\b[^\n]*\bwait\b[^\n]*condition=Ready", body, re.S):
            return True
        if re.search(r"flux\s+(?:resume|reconcile)\s+(?:kustomization|ks)\b(?![^\n]*--wait=false)", body):
            return True
    return False


def _declared(snapshot: RepoTree, config: RepoConfig, in_git: frozenset[tuple[str, str]], found: _Found) -> None:
    """`.fluxwarden.yaml` `bootstrap:`: what discovery cannot see, taken as written."""
    declared = config.bootstrap
    if declared.helmreleases:
        keys = [tuple(ref.split("/", 1)) for ref in declared.helmreleases]
        found.releases.update(keys)  # type: ignore[arg-type]
        missing = [ref for ref, key in zip(declared.helmreleases, keys) if key not in in_git]
        note = f" ({_short(missing)} not in this cluster's render)" if missing else ""
        found.add("declared", CONFIG_FILE, f"{_plural(len(keys), 'HelmRelease')} declared installed before Flux: {_short(list(declared.helmreleases))}{note}")
    if declared.crds:
        found.crds.update(tuple(ref.rsplit("/", 1)) for ref in declared.crds)  # type: ignore[misc]
        found.add("declared", CONFIG_FILE, f"{_plural(len(declared.crds), 'CRD')} declared present before Flux: {_short(list(declared.crds))}")
    if declared.namespaces:
        found.namespaces.update((n, CONFIG_FILE) for n in declared.namespaces)
        found.add("namespaces", CONFIG_FILE, f"{_plural(len(declared.namespaces), 'namespace')} declared created before Flux: {_short(list(declared.namespaces))}")
    if declared.manifests:
        missing = [p for p in declared.manifests if not snapshot.exists(p)]
        found.manifests.extend(p for p in declared.manifests if p not in missing)
        note = f" ({_short(missing)} not in the repository: ignored)" if missing else ""
        found.add("declared", CONFIG_FILE, f"{_plural(len(declared.manifests), 'path')} declared applied before Flux: {_short(list(declared.manifests))}{note}")


# -- manifests a script applies -------------------------------------------------------------------

# Anything else applied from a URL is named in an info line, not assumed (knowledge.bundle_crds).
_URL = re.compile(r"https?://[^\s\"')]+")


def _script_applies(snapshot: RepoTree, paths: list[str], knowledge: KnowledgeBase, found: _Found) -> None:
    """Repo paths and CRD bundles a script applies with kubectl: `kubectl apply -f/-k PATH`,
    `kustomize build PATH | … | kubectl apply -f -`; a pipe that keeps only some kinds (`select(.kind == …)`) is left out."""
    for script in paths:
        if not _is_script(script):
            continue
        text = snapshot.read_text(script) or ""
        if "kubectl" not in text or "apply" not in text:
            continue
        local: list[str] = []
        applies_urls = False
        for line in _logical_lines(text):
            if line.lstrip().startswith("#") or not re.search(r"\bkubectl\b[^|]*\bapply\b", line):
                continue
            if "select(" in line or "helmfile" in line:
                continue  # a kind filter (namespaces only…), or a helmfile run read above
            apply = line[re.search(r"\bkubectl\b[^|]*\bapply\b", line).start():]  # type: ignore[union-attr]
            for value in re.findall(r"(?:-f|--filename|-k|--kustomize)(?:=|\s+)(\"[^\"]*\"|'[^']*'|\S+)", apply):
                value = value.strip("\"'")
                if "://" in value or value.startswith("$"):
                    applies_urls = True
                elif value != "-":
                    local.append(value)
            built = re.search(r"\b(?:kustomize\s+build|kubectl\s+kustomize)\s+(\"[^\"]*\"|'[^']*'|\S+)[^|]*\|", line)
            if built and re.search(r"(?:-f|--filename)(?:=|\s+)-(?:[\s;)]|$)", apply):
                local.append(built.group(1).strip("\"'"))
        resolved = [r for r in (_resolve_path(snapshot, script, v) for v in local) if r is not None]
        if resolved:
            found.manifests.extend(resolved)
            found.add("manifests", script, f"applied by {script} before Flux: {_short(list(dict.fromkeys(resolved)))}")
        if not applies_urls:
            continue
        known: list[str] = []
        unknown: list[str] = []
        for url in dict.fromkeys(_URL.findall(text)):
            if not url.endswith((".yaml", ".yml")):
                continue
            crds, charts = bundle_crds(url, knowledge)
            found.crds.update(crds)
            found.crd_charts.update(charts)
            (known if crds or charts else unknown).append(url.rsplit("/", 1)[-1])
        if known:
            found.add("crds", script, f"CRD bundles applied from URLs by {script} before Flux: {_short(known)}")
        if unknown:
            found.add("unread", script, f"{_plural(len(unknown), 'manifest URL')} applied by {script} not read (remote: {_short(unknown)}): declare what they install under bootstrap: in .fluxwarden.yaml")


_CREATE_NAMESPACE = re.compile(r"\bkubectl\b[^|;&]*?\bcreate\s+(?:namespace|ns)\s+([a-z0-9][-a-z0-9]*)(?=[\s;|&)]|$)")


def _script_namespaces(snapshot: RepoTree, paths: list[str], found: _Found) -> None:
    """Namespaces a script creates (`kubectl create namespace|ns X`, often piped into `kubectl apply`)."""
    for script in paths:
        if not _is_script(script):
            continue
        text = snapshot.read_text(script) or ""
        if "create" not in text or "kubectl" not in text:
            continue
        names = [m.group(1) for line in _logical_lines(text) for m in _CREATE_NAMESPACE.finditer(line)]
        if names:
            found.namespaces.update((n, script) for n in names)
            found.add("namespaces", script, f"{_plural(len(set(names)), 'namespace')} created by {script} before Flux: {_short(sorted(set(names)))}")


_MAX_MANIFEST_FILES = 2_000  # files read below the bootstrap's manifest paths


def _manifest_objects(snapshot: RepoTree, found: _Found) -> None:
    """What the manifests applied before Flux hold: their CRDs are served, their Namespaces exist, their
    Secrets and ConfigMaps are in git (a substituteFrom of them is no external source)."""
    files: list[str] = []
    for root in dict.fromkeys(found.manifests):
        if snapshot.is_file(root):
            files.append(root)
            continue
        stack = [root]
        while stack and len(files) < _MAX_MANIFEST_FILES:
            directory = stack.pop()
            subdirs, names = snapshot.list_dir(directory)
            stack.extend(posixpath.join(directory, d) for d in subdirs)
            files.extend(posixpath.join(directory, n) for n in names if n.endswith((".yaml", ".yml")))
    crds: set[tuple[str, str]] = set()
    for rel in dict.fromkeys(files[:_MAX_MANIFEST_FILES]):
        if posixpath.basename(rel) in ("kustomization.yaml", "kustomization.yml"):
            continue
        try:
            docs = load_all(snapshot.read_text(rel) or "", rel)
        except InputError:
            continue
        default_namespace = _kustomize_namespace(snapshot, posixpath.dirname(rel))
        for doc in docs:
            if not isinstance(doc, Mapping):
                continue
            meta = raw if isinstance(raw := doc.get("metadata"), Mapping) else {}
            kind, name = doc.get("kind"), meta.get("name")
            if not isinstance(name, str) or not isinstance(kind, str):
                continue
            spec = raw if isinstance(raw := doc.get("spec"), Mapping) else {}
            crd_names = raw if isinstance(raw := spec.get("names"), Mapping) else {}
            if kind == "CustomResourceDefinition" and isinstance(spec.get("group"), str) and isinstance(crd_names.get("kind"), str):
                crds.add((spec["group"], crd_names["kind"]))
            elif kind == "Namespace":
                found.namespaces.add((name, rel))
            elif kind in ("Secret", "ConfigMap"):
                found.objects.add((kind, str(meta.get("namespace") or default_namespace or "default"), name))
    found.crds.update(crds)


def _kustomize_namespace(snapshot: RepoTree, directory: str) -> str | None:
    """The `namespace:` a kustomization in `directory` sets on what it lists."""
    for name in ("kustomization.yaml", "kustomization.yml"):
        text = snapshot.read_text(posixpath.join(directory, name) if directory else name)
        if text is None:
            continue
        match = re.search(r"^namespace:\s*[\"']?([a-z0-9][-a-z0-9]*)", text, re.M)
        return match.group(1) if match else None
    return None


def _resolve_path(snapshot: RepoTree, script: str, target: str) -> str | None:
    """A local path a script names: next to the script, else from the repository root (variables before it read as either)."""
    tail = re.split(r"\}\}|\$\{[^}]*\}|\$\(?[A-Za-z_][A-Za-z0-9_]*\)?|\)", target)[-1].lstrip("/")
    if not tail or "*" in tail or "$" in tail or "{{" in tail:
        return None
    for candidate in (posixpath.join(posixpath.dirname(script), tail), tail):
        rel = normalise_repo_path(candidate)
        if rel is not None and rel and snapshot.exists(rel):
            return rel
    return None
