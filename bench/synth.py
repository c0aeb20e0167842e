"""A synthetic but realistic Flux repository, for benchmarking `fluxwarden check` at scale.

Shape (modelled on examples/home-ops, scaled up):

    .fluxwarden.yaml                  clusters: {dev: clusters/dev, prod: clusters/prod}
    clusters/base/kustomization.yaml  cluster-vars.yaml + one Flux Kustomization file per tier
    clusters/base/cluster-vars.yaml   ConfigMap flux-system/cluster-vars (placeholders)
    clusters/base/tier-NNN.yaml       kustomize.toolkit.fluxcd.io/v1 Kustomization, path ./tiers/tier-NNN
    clusters/<name>/kustomization.yaml  resources ../base + a patch of cluster-vars
    tiers/tier-NNN/                   kustomization.yaml + namespace.yaml, crds.yaml, custom-resources.yaml,
                                      apps-NN.yaml (Deployment + Service + ConfigMap per app)

* dependsOn: the first few tiers are roots; every other tier depends on 1-2 earlier tiers (chains).
* A handful of tiers ship CRDs (wait: true); tiers that depend on them directly carry their CRs.
* About 40% of tiers run postBuild.substituteFrom cluster-vars and use `${CLUSTER_NAME}`,
  `${CLUSTER_REGION}` and `${DOMAIN:=example.com}`; the other tiers carry no `${`.
* A couple of tiers have no kustomization.yaml (Flux generates one from every *.yaml below the path).
* The tree is committed to a fresh git repository (fixed author and dates, so the commit is
  deterministic too) so a later change can be diffed against it.

Everything is a pure function of the arguments: the same seed writes byte-identical files.
The repository checks clean: `fluxwarden check` reports no error finding and exits 0.

CLI: `python -m bench.synth OUT_DIR --tiers 200 --objects 20000 [--clusters dev,prod] [--seed 1]`.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import yaml

from bench import synth_charts


class _DUMPER(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """Fast safe dumper that writes shared sub-objects out in full (no &anchors, as people write YAML)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


FLUX_KS_API = "kustomize.toolkit.fluxcd.io/v1"
KUSTOMIZE_API = "kustomize.config.k8s.io/v1beta1"
VARS_NAME = "cluster-vars"
GIT_DATE = "2024-01-01T00:00:00+00:00"
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "fluxwarden-bench",
    "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "fluxwarden-bench",
    "GIT_COMMITTER_EMAIL": "bench@example.invalid",
    "GIT_AUTHOR_DATE": GIT_DATE,
    "GIT_COMMITTER_DATE": GIT_DATE,
    "GIT_CONFIG_NOSYSTEM": "1",
}
_APP_WORDS = (
    "api", "web", "worker", "cache", "gateway", "auth", "billing", "search", "ingest", "notifier",
    "scheduler", "reporter", "exporter", "frontend", "backend", "queue", "mailer", "indexer", "proxy", "sync",
)
_CRD_KINDS = ("Widget", "Gadget", "Gizmo", "Sprocket")
_REVISION = re.compile(r"revision: '(\d+)'")


@dataclass(frozen=True)
class SynthRepo:
    """What `generate` wrote: paths and counts."""

    root: Path
    clusters: tuple[str, ...]
    tiers: tuple[str, ...]  # tier names, tier-000 ...; each is flux-system/<name> with path ./tiers/<name>
    objects: int  # objects in the tier directories (what kustomize builds for all tiers together)
    files: int  # files written (not counting .git)
    tier_objects: dict[str, int]  # objects per tier directory
    roots: tuple[str, ...]  # tiers without dependsOn
    crd_tiers: tuple[str, ...]  # tiers shipping CRDs (wait: true)
    cr_tiers: tuple[str, ...]  # tiers with CRs of a CRD tier they depend on directly
    generated_tiers: tuple[str, ...]  # tiers with no kustomization.yaml (Flux generates it)
    substituted_tiers: tuple[str, ...]  # tiers with postBuild.substituteFrom cluster-vars
    wait_tiers: tuple[str, ...]  # tiers with wait: true
    depends_on: dict[str, tuple[str, ...]]
    commit: str  # the git commit holding the tree
    releases: tuple[synth_charts.ReleasePlan, ...] = ()  # HelmReleases (with releases=N), each in its tier's namespace
    charts: tuple[str, ...] = ()  # chart directories charts/<name> the releases use

    @property
    def entry_objects(self) -> int:
        """Objects the cluster entry renders: one Flux Kustomization per tier plus cluster-vars."""
        return len(self.tiers) + 1

    @property
    def report_objects(self) -> int:
        """What a `check` report counts for one cluster: the entry's objects plus every tier's."""
        return self.objects + self.entry_objects

    def tier_dir(self, name: str) -> Path:
        return self.root / "tiers" / name


# -- the plan (pure) --------------------------------------------------------------------------------


@dataclass
class _TierPlan:
    index: int
    name: str
    objects: int
    deps: list[int]
    wait: bool = False
    substituted: bool = False
    generated: bool = False
    crds: list[tuple[str, str, str]] | None = None  # (group, kind, plural)


def _plan(tiers: int, objects: int, rng: random.Random) -> list[_TierPlan]:
    width = max(3, len(str(tiers - 1)))
    per, extra = divmod(objects, tiers)
    plans = [_TierPlan(i, f"tier-{i:0{width}d}", per + (1 if i < extra else 0), []) for i in range(tiers)]
    n_roots = max(1, min(4, tiers // 40 + 1))
    for p in plans[n_roots:]:
        k = 2 if p.index >= 2 and rng.random() < 0.4 else 1
        p.deps = sorted(rng.sample(range(max(0, p.index - 12), p.index), k))
    # A handful of CRD tiers early in the graph; a few later tiers depend on each directly.
    n_crd = max(1, min(8, tiers // 30))
    crd_pool = range(max(1, min(tiers - 1, int(tiers * 0.6))))
    crd_indices = sorted(rng.sample(crd_pool, min(n_crd, len(crd_pool))))
    taken: set[int] = set(crd_indices)
    for c in crd_indices:
        p = plans[c]
        p.wait = True
        count = 1 if tiers < 60 else rng.randint(1, 2)
        p.crds = [
            (f"t{c:0{width}d}.bench.example.com", kind, kind.lower() + "s")
            for kind in _CRD_KINDS[:count]
        ]
        later = [d for d in range(max(c + 1, n_roots), min(tiers, c + 31)) if d not in taken]
        for d in rng.sample(later, min(3, len(later))):
            taken.add(d)
            others = [x for x in plans[d].deps if x not in crd_indices][:1]
            plans[d].deps = sorted({c, *others})
    crd_set = set(crd_indices)
    for p in plans:
        if p.crds is None and rng.random() < 0.15:
            p.wait = True
        p.substituted = rng.random() < 0.4
    # A couple of tiers without kustomization.yaml (never a CRD tier).
    candidates = [p.index for p in plans if p.index not in crd_set and p.index >= n_roots]
    for g in rng.sample(candidates, min(2, len(candidates))):
        plans[g].generated = True
    for p in plans:
        need = 1 + len(p.crds or ()) + sum(2 * len(plans[d].crds or ()) for d in p.deps)
        if p.objects < need:
            raise ValueError(f"{p.name} needs at least {need} objects; raise --objects (about {6 * tiers} for {tiers} tiers)")
    return plans


# -- objects ----------------------------------------------------------------------------------------


def _dump(docs: Iterable[dict[str, Any]]) -> str:
    return yaml.dump_all(list(docs), Dumper=_DUMPER, sort_keys=False, explicit_start=True, width=120)


def _namespace(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": name}},
    }


def _crd(group: str, kind: str, plural: str) -> dict[str, Any]:
    return synth_charts.crd_manifest(group, kind, plural, {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "required": ["size"],
                "properties": {
                    "size": {"type": "integer", "minimum": 0},
                    "owner": {"type": "string"},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            },
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    })


def _cr(group: str, kind: str, name: str, namespace: str, size: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{group}/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"size": size, "owner": namespace, "labels": {"app.kubernetes.io/part-of": namespace}},
    }


def _app(app: str, ns: str, substituted: bool, rng: random.Random) -> list[dict[str, Any]]:
    labels = {"app.kubernetes.io/name": app, "app.kubernetes.io/part-of": ns}
    config: dict[str, str] = {"revision": "1", "LOG_LEVEL": rng.choice(("info", "debug", "warn")), "PORT": "8080"}
    env: list[dict[str, Any]] = [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]
    annotations: dict[str, str] = {}
    if substituted:
        config["PUBLIC_URL"] = f"https://{app}.{ns}.${{DOMAIN:=example.com}}"
        config["CLUSTER"] = "${CLUSTER_NAME}"
        env.append({"name": "CLUSTER_REGION", "value": "${CLUSTER_REGION}"})
        annotations["bench.example.com/cluster"] = "${CLUSTER_NAME}"
    image = f"registry.example.com/{app.rsplit('-', 1)[0]}:v1.{rng.randint(0, 30)}.{rng.randint(0, 9)}"
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": app, "namespace": ns, "labels": labels, **({"annotations": annotations} if annotations else {})},
        "spec": {
            "replicas": rng.randint(1, 3),
            "selector": {"matchLabels": {"app.kubernetes.io/name": app}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": "default",
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [
                        {
                            "name": "main",
                            "image": image,
                            "ports": [{"name": "http", "containerPort": 8080}],
                            "env": env,
                            "envFrom": [{"configMapRef": {"name": f"{app}-config"}}],
                            "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10},
                            "resources": {
                                "requests": {"cpu": f"{rng.choice((5, 10, 25, 50))}m", "memory": f"{rng.choice((16, 32, 64))}Mi"},
                                "limits": {"memory": f"{rng.choice((128, 256))}Mi"},
                            },
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]},
                            },
                        }
                    ],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": app, "namespace": ns, "labels": labels},
        "spec": {"selector": {"app.kubernetes.io/name": app}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
    }
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{app}-config", "namespace": ns, "labels": labels},
        "data": config,
    }
    return [configmap, deployment, service]


def _extra(ns: str, k: int) -> dict[str, Any]:
    """Filler when a tier's count is not a multiple of 3: ServiceAccounts."""
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": f"robot-{k:02d}", "namespace": ns}}


def _tier_files(p: _TierPlan, plans: Sequence[_TierPlan], rng: random.Random, extra: dict[str, str] | None = None) -> dict[str, str]:
    ns = p.name
    files: dict[str, str] = {"namespace.yaml": _dump([_namespace(ns)])}
    used = 1
    if p.crds:
        files["crds.yaml"] = _dump(_crd(*c) for c in p.crds)
        used += len(p.crds)
    crs = []
    for d in p.deps:
        for group, kind, _plural in plans[d].crds or ():
            for k in range(2):
                crs.append(_cr(group, kind, f"{ns}-{kind.lower()}-{k}", ns, rng.randint(1, 5)))
    if crs:
        files["custom-resources.yaml"] = _dump(crs)
        used += len(crs)
    remaining = p.objects - used
    n_apps, n_extra = divmod(remaining, 3)
    apps = [_app(f"{_APP_WORDS[k % len(_APP_WORDS)]}-{k // len(_APP_WORDS)}", ns, p.substituted, rng) for k in range(n_apps)]
    per_file = 8
    chunks = [apps[i : i + per_file] for i in range(0, len(apps), per_file)] or [[]]
    extras = [_extra(ns, k) for k in range(n_extra)]
    for i, chunk in enumerate(chunks, 1):
        docs = [d for app in chunk for d in app]
        if i == len(chunks):
            docs += extras
        if docs:
            files[f"apps-{i:02d}.yaml"] = _dump(docs)
    files.update(extra or {})
    if not p.generated:
        files = {
            "kustomization.yaml": yaml.dump(
                {"apiVersion": KUSTOMIZE_API, "kind": "Kustomization", "resources": list(files)},
                Dumper=_DUMPER,
                sort_keys=False,
            ),
            **files,
        }
    return files


def _flux_kustomization(p: _TierPlan, plans: Sequence[_TierPlan]) -> str:
    spec: dict[str, Any] = {}
    if p.deps:
        spec["dependsOn"] = [{"name": plans[d].name} for d in p.deps]
    spec |= {
        "interval": "10m",
        "retryInterval": "2m",
        "timeout": "10m" if p.crds else "5m",
        "path": f"./tiers/{p.name}",
        "prune": True,
        "wait": p.wait,
        "sourceRef": {"kind": "GitRepository", "name": "flux-system"},
    }
    if p.substituted:
        spec["postBuild"] = {"substituteFrom": [{"kind": "ConfigMap", "name": VARS_NAME}]}
    notes = []
    if p.crds:
        notes.append("# Ships CRDs; wait: true so dependents apply their CRs only once the CRDs are established.")
    if p.generated:
        notes.append("# The path has no kustomization.yaml: Flux generates one from every *.yaml below it.")
    body = {
        "apiVersion": FLUX_KS_API,
        "kind": "Kustomization",
        "metadata": {"name": p.name, "namespace": "flux-system"},
        "spec": spec,
    }
    return "".join(n + "\n" for n in notes) + yaml.dump(body, Dumper=_DUMPER, sort_keys=False)


def _cluster_files(clusters: Sequence[str], plans: Sequence[_TierPlan]) -> dict[str, str]:
    files = {
        "clusters/base/cluster-vars.yaml": "# Substituted into tiers via postBuild.substituteFrom; each cluster patches the values.\n"
        + yaml.dump(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": VARS_NAME, "namespace": "flux-system"},
                "data": {"CLUSTER_NAME": "changeme", "CLUSTER_REGION": "local"},
            },
            Dumper=_DUMPER,
            sort_keys=False,
        ),
        "clusters/base/kustomization.yaml": yaml.dump(
            {
                "apiVersion": KUSTOMIZE_API,
                "kind": "Kustomization",
                "resources": ["cluster-vars.yaml", *(f"{p.name}.yaml" for p in plans)],
            },
            Dumper=_DUMPER,
            sort_keys=False,
        ),
    }
    for p in plans:
        files[f"clusters/base/{p.name}.yaml"] = _flux_kustomization(p, plans)
    for i, name in enumerate(clusters):
        data = {"CLUSTER_NAME": name, "CLUSTER_REGION": f"region-{i + 1}"}
        if i > 0:  # the first cluster keeps ${DOMAIN:=example.com}'s default
            data["DOMAIN"] = f"{name}.example.net"
        patch = yaml.dump(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": VARS_NAME, "namespace": "flux-system"}, "data": data},
            Dumper=_DUMPER,
            sort_keys=False,
        )
        files[f"clusters/{name}/kustomization.yaml"] = (
            f"apiVersion: {KUSTOMIZE_API}\nkind: Kustomization\nresources:\n  - ../base\npatches:\n  - patch: |-\n"
            + "".join(f"      {line}\n" for line in patch.splitlines())
        )
    files[".fluxwarden.yaml"] = yaml.dump(
        {"clusters": {name: {"path": f"clusters/{name}"} for name in clusters}}, Dumper=_DUMPER, sort_keys=False
    )
    return files


# -- writing ----------------------------------------------------------------------------------------


def _git(root: Path, *args: str) -> str:
    env = {**os.environ, **_GIT_ENV, "HOME": str(root), "XDG_CONFIG_HOME": str(root / ".git")}
    out = subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True, text=True)
    return out.stdout.strip()


def _commit(root: Path, message: str) -> str:
    _git(root, "add", "-A")
    _git(root, "-c", "commit.gpgsign=false", "commit", "-q", "--allow-empty", "-m", message)
    return _git(root, "rev-parse", "HEAD")


def generate(
    root: Path,
    tiers: int = 200,
    objects: int = 20000,
    clusters: Sequence[str] = ("dev", "prod"),
    seed: int = 1,
    *,
    git: bool = True,
    releases: int = 0,
) -> SynthRepo:
    """Write the synthetic repository below `root` (created; must be empty) and commit it.

    With `releases`, the tiers also apply that many HelmReleases of the charts in `bench/synth_charts.py`
    (written to `charts/`): objects then counts the HelmReleases, their values ConfigMaps and the operators' CRs too.
    """
    if tiers < 1:
        raise ValueError("tiers must be at least 1")
    if not clusters or len(set(clusters)) != len(clusters) or "base" in clusters:
        raise ValueError("clusters must be distinct names other than 'base'")
    root = Path(root)
    if root.exists() and any(root.iterdir()):
        raise ValueError(f"{root} exists and is not empty")
    rng = random.Random(seed)
    plans = _plan(tiers, objects, rng)
    files = _cluster_files(tuple(clusters), plans)
    extras, counts, release_plans, charts = _chart_extras(plans, releases, seed, files)
    tier_objects: dict[str, int] = {}
    for p in plans:
        for rel, text in _tier_files(p, plans, rng, extras.get(p.name)).items():
            files[f"tiers/{p.name}/{rel}"] = text
        tier_objects[p.name] = p.objects + counts.get(p.name, 0)
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    commit = ""
    if git:
        _git(root, "init", "-q", "-b", "main")
        commit = _commit(root, f"synthetic Flux repo: {tiers} tiers, {objects} objects, seed {seed}")
    return SynthRepo(
        root=root,
        clusters=tuple(clusters),
        tiers=tuple(p.name for p in plans),
        objects=sum(tier_objects.values()),
        files=len(files),
        tier_objects=tier_objects,
        roots=tuple(p.name for p in plans if not p.deps),
        crd_tiers=tuple(p.name for p in plans if p.crds),
        cr_tiers=tuple(p.name for p in plans if any(plans[d].crds for d in p.deps)),
        generated_tiers=tuple(p.name for p in plans if p.generated),
        substituted_tiers=tuple(p.name for p in plans if p.substituted),
        wait_tiers=tuple(p.name for p in plans if p.wait),
        depends_on={p.name: tuple(plans[d].name for d in p.deps) for p in plans},
        commit=commit,
        releases=tuple(release_plans),
        charts=charts,
    )


def _chart_extras(
    plans: Sequence[_TierPlan], releases: int, seed: int, files: dict[str, str]
) -> tuple[dict[str, dict[str, str]], dict[str, int], list[synth_charts.ReleasePlan], tuple[str, ...]]:
    """The charts (into `files`) and, per tier, the files and object counts its HelmReleases add."""
    if releases <= 0:
        return {}, {}, [], ()
    rng = random.Random(seed * 7919 + 1)  # its own stream: a repository without releases is byte-identical to before
    names = [p.name for p in plans]
    release_plans = synth_charts.assign_releases(
        releases, names, [p.name for p in plans if p.crds], {p.name for p in plans if p.substituted}, rng
    )
    used = sorted({r.chart for r in release_plans})
    for shape in synth_charts.CHARTS:
        if shape.name in used:
            files.update(synth_charts.chart_files(shape, rng))
    docs: dict[str, list[dict[str, Any]]] = {}
    crs: dict[str, list[dict[str, Any]]] = {}
    by_name = {p.name: p for p in plans}
    for release in release_plans:
        docs.setdefault(release.tier, []).extend(synth_charts.release_docs(release, rng))
        owner = by_name[release.tier]
        if any(s.name == release.chart and s.operator for s in synth_charts.CHARTS) and owner.wait:
            # Its waited tier installs the chart's CRDs: a tier depending on it directly may apply their CRs.
            for p in plans:
                if owner.index in p.deps:
                    crs.setdefault(p.name, []).append(synth_charts.operator_cr(release.chart, p.name, len(crs.get(p.name, ()))))
    extras: dict[str, dict[str, str]] = {}
    counts: dict[str, int] = {}
    for tier, items in docs.items():
        extras.setdefault(tier, {})["releases.yaml"] = _dump(items)
        counts[tier] = counts.get(tier, 0) + len(items)
    for tier, items in crs.items():
        extras.setdefault(tier, {})["operator-resources.yaml"] = _dump(items)
        counts[tier] = counts.get(tier, 0) + len(items)
    return extras, counts, release_plans, tuple(used)


def bump_chart(root: Path, chart: str, *, commit: bool = False) -> str:
    """Bump a chart of the repository (patch version and default image tag), as a chart-bump PR would; its new version."""
    directory = Path(root) / "charts" / chart
    meta = directory / "Chart.yaml"
    text = meta.read_text(encoding="utf-8")
    match = re.search(r"^version: (\d+)\.(\d+)\.(\d+)$", text, re.MULTILINE)
    if match is None:
        raise ValueError(f"charts/{chart}/Chart.yaml has no version to bump")
    version = f"{match.group(1)}.{match.group(2)}.{int(match.group(3)) + 1}"
    meta.write_text(text[: match.start()] + f"version: {version}" + text[match.end() :], encoding="utf-8")
    text = meta.read_text(encoding="utf-8")
    app = re.search(r"^appVersion: v?(\d+)\.(\d+)\.(\d+)$", text, re.MULTILINE)
    if app is not None:  # the image tag defaults to appVersion: the Deployment's image changes too
        bumped = f"appVersion: v{app.group(1)}.{app.group(2)}.{int(app.group(3)) + 1}"
        meta.write_text(text[: app.start()] + bumped + text[app.end() :], encoding="utf-8")
    if commit:
        _commit(Path(root), f"charts/{chart}: bump to {version}")
    return version


def touch_one_tier(root: Path, index: int, *, commit: bool = False) -> str:
    """Change one object of one tier (bump a ConfigMap's `revision`), as a one-tier PR would; return the tier.

    `index` picks the tier in name order (tier-000 is 0; negative counts from the end). With
    `commit=True` the change is committed on top, so `HEAD~1` is the base of the "PR".
    """
    names = sorted(p.name for p in (Path(root) / "tiers").iterdir() if p.is_dir())
    tier = names[index]
    directory = Path(root) / "tiers" / tier
    for path in sorted(directory.glob("apps-*.yaml")):
        text = path.read_text(encoding="utf-8")
        match = _REVISION.search(text)
        if match:
            bumped = f"revision: '{int(match.group(1)) + 1}'"
            path.write_text(text[: match.start()] + bumped + text[match.end() :], encoding="utf-8")
            break
    else:
        raise ValueError(f"{tier} has no ConfigMap with a revision to change")
    if commit:
        _commit(Path(root), f"{tier}: bump revision")
    return tier


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.synth", description="Write a synthetic Flux repository.")
    parser.add_argument("out", type=Path, help="output directory (created; must be empty)")
    parser.add_argument("--tiers", type=int, default=200)
    parser.add_argument("--objects", type=int, default=20000)
    parser.add_argument("--clusters", default="dev,prod", help="comma-separated cluster names (default: dev,prod)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--releases", type=int, default=0, help="HelmReleases of the charts under charts/ (default 0: none)")
    parser.add_argument("--no-git", action="store_true", help="do not git init/commit")
    args = parser.parse_args(argv)
    try:
        repo = generate(
            args.out,
            tiers=args.tiers,
            objects=args.objects,
            clusters=tuple(c for c in args.clusters.split(",") if c),
            seed=args.seed,
            git=not args.no_git,
            releases=args.releases,
        )
    except ValueError as exc:
        print(f"bench.synth: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"{repo.root}: {len(repo.tiers)} tiers, {repo.objects} objects in {repo.files} files; "
        f"clusters {', '.join(repo.clusters)}; roots {len(repo.roots)}, CRD tiers {len(repo.crd_tiers)}, "
        f"CR tiers {len(repo.cr_tiers)}, generated kustomization {len(repo.generated_tiers)}, "
        f"substituted {len(repo.substituted_tiers)}, wait {len(repo.wait_tiers)}"
        + (f"; {len(repo.releases)} HelmReleases over {len(repo.charts)} charts" if repo.releases else "")
        + (f"; commit {repo.commit[:12]}" if repo.commit else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
