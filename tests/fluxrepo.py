"""Build small Flux repositories on disk for tests: a cluster entry plus tiers, as YAML text."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml


def write_tree(root: Path, files: Mapping[str, str]) -> Path:
    """Write `files` (repo-relative path -> text) below `root`."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return root


def dump(*docs: Mapping[str, Any]) -> str:
    """Several objects as one YAML stream."""
    return "---\n".join(yaml.safe_dump(dict(d), sort_keys=False) for d in docs)


def ks(
    name: str,
    path: str,
    *,
    depends_on: Iterable[str] = (),
    wait: bool = False,
    prune: bool = True,
    namespace: str = "flux-system",
    source: str = "flux-system",
    source_kind: str = "GitRepository",
    post_build: Mapping[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A Flux Kustomization object."""
    body: dict[str, Any] = {
        "interval": "10m",
        "path": path,
        "prune": prune,
        "wait": wait,
        "sourceRef": {"kind": source_kind, "name": source},
    }
    deps = []
    for dep in depends_on:
        ns, _, dep_name = dep.rpartition("/")
        deps.append({"name": dep_name, **({"namespace": ns} if ns else {})})
    if deps:
        body["dependsOn"] = deps
    if post_build is not None:
        body["postBuild"] = dict(post_build)
    body.update(spec)
    return {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": name, "namespace": namespace},
        "spec": body,
    }


def obj(api_version: str, kind: str, name: str, namespace: str | None = None, **fields: Any) -> dict[str, Any]:
    """Any Kubernetes object."""
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, **fields}


def crd(group: str, kind: str, plural: str, scope: str = "Namespaced") -> dict[str, Any]:
    """A minimal, valid CustomResourceDefinition."""
    return obj(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        f"{plural}.{group}",
        spec={
            "group": group,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "scope": scope,
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    )


def kustomization(*resources: str) -> str:
    """A kustomize config listing resources."""
    return yaml.safe_dump({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": list(resources)})


def flux_repo(tiers: Mapping[str, dict[str, Any]], extra: Mapping[str, str] | None = None, cluster: str = "dev") -> dict[str, str]:
    """Files for a repo whose clusters/<cluster> applies `tiers` (name -> Kustomization object)."""
    files = {
        f"clusters/{cluster}/kustomization.yaml": kustomization(*(f"{n}.yaml" for n in tiers)),
        **{f"clusters/{cluster}/{n}.yaml": dump(k) for n, k in tiers.items()},
    }
    files.update(extra or {})
    return files
