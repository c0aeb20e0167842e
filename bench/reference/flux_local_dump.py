"""flux-local's view of a cluster: every Kustomization and the object identities each builds (JSON).

Run with flux-local's own Python (3.13, see bench/reference/compare.py), inside the repository:
    flux_local_dump.py ENTRY_PATH OUT.json
"""
import asyncio
import json
import logging
import sys
from pathlib import Path
from flux_local import git_repo

def ident(doc):
    api = doc.get("apiVersion", "")
    group = api.rsplit("/", 1)[0] if "/" in api else ""
    meta = doc.get("metadata") or {}
    return f"{group}/{doc.get('kind')}/{meta.get('namespace') or ''}/{meta.get('name')}"

async def main(path, out):
    result = {}
    errors = {}
    async def visit(p, ks, cmd):
        try:
            docs = await cmd.objects(target_namespace=ks.target_namespace)
        except Exception as exc:  # noqa: BLE001 - a reference failure is data here
            errors[ks.namespaced_name] = str(exc)[:300]
            return
        result[ks.namespaced_name] = {"path": ks.path, "objects": sorted(ident(d) for d in docs)}
    sel = git_repo.ResourceSelector(path=git_repo.PathSelector(path=Path(path)))
    sel.kustomization.visitor = git_repo.ResourceVisitor(func=visit)
    sel.kustomization.skip_crds = False
    sel.kustomization.skip_secrets = False
    sel.kustomization.namespace = None
    sel.helm_release.enabled = False
    sel.helm_repo.enabled = False
    sel.oci_repo.enabled = False
    try:
        manifest = await git_repo.build_manifest(selector=sel)
        listed = sorted(ks.namespaced_name for c in manifest.clusters for ks in c.kustomizations)
    except Exception as exc:
        listed = None
        errors["<manifest>"] = str(exc)[:500]
    json.dump({"listed": listed, "built": result, "errors": errors}, open(out, "w"), indent=1)

logging.basicConfig(level=logging.WARNING)
asyncio.run(main(sys.argv[1], sys.argv[2]))
