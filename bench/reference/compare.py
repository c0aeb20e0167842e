"""Compare Fluxwarden's render of a cluster with flux-local's (the field's reference renderer).

    # flux-local's side, in its own venv (../shared/tools/flux-local/setup.sh), run inside the repository:
    PATH=~/.cache/flux-local-ref/bin:$PATH ~/.cache/flux-local-ref/venv/bin/python bench/reference/flux_local_dump.py ENTRY /tmp/fl.json
    # ours, and the comparison:
    .venv/bin/python -m bench.reference.compare --repo REPO --cluster NAME --flux-local /tmp/fl.json [-v]

Prints which Kustomizations each lists, and for each one both render whether the object identities
(group/kind/namespace/name) agree; `-v` shows the differing identities.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from bot.engine.render.config import cluster_entry
from bot.pipeline.session import Session
from bot.adapters.kustomize import locate_kustomize
from bot.adapters.workspace import build_snapshot


def _identity(api_version: str, kind: str, namespace: str, name: str) -> str:
    group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
    return f"{group}/{kind}/{namespace}/{name}"


def fluxwarden_view(repo: Path, cluster: str) -> dict:
    """Every tier of the cluster and the object identities it renders, as flux_local_dump.py writes flux-local's."""
    with tempfile.TemporaryDirectory() as tmp:
        snapshot = build_snapshot(repo, Path(tmp))
        renderer = Session.of(snapshot, locate_kustomize(None)).renderer()
        render = renderer.render_cluster(cluster, cluster_entry(renderer.config, cluster, snapshot))
        built = {
            f"{tid.namespace}/{tid.name}": {"path": t.spec.path, "objects": sorted(_identity(m.ref.api_version, m.ref.kind, m.ref.namespace, m.ref.name) for m in t.manifests)}
            for tid, t in render.tiers.items()
        }
        failed = {f"{tid.namespace}/{tid.name}": "failed" if t.failed else "not rendered" for tid, t in render.tiers.items() if t.failed or not t.rendered}
    return {"listed": sorted(built), "built": built, "errors": failed}


def compare(reference: dict, ours: dict, verbose: bool = False) -> list[str]:
    """The comparison as lines of text."""
    ref_listed, our_listed = set(reference["listed"] or []), set(ours["listed"])
    lines = [
        f"flux-local lists {len(ref_listed)}, fluxwarden lists {len(our_listed)}",
        f"  listed by flux-local, missing in fluxwarden: {sorted(ref_listed - our_listed)}",
        f"  fluxwarden only: {sorted(our_listed - ref_listed)}",
    ]
    both = sorted(set(reference["built"]) & set(ours["built"]))
    agree = 0
    for name in both:
        a, b = set(reference["built"][name]["objects"]), set(ours["built"][name]["objects"])
        if a == b:
            agree += 1
            continue
        lines.append(f"  differs {name}: flux-local only {len(a - b)}, fluxwarden only {len(b - a)}")
        if verbose:
            lines += [f"     flux-local: {x}" for x in sorted(a - b)[:8]] + [f"     fluxwarden: {x}" for x in sorted(b - a)[:8]]
    lines.append(f"rendered by both: {len(both)}, identical object identities: {agree}")
    lines.append(f"flux-local errors: {reference['errors']}")
    lines.append(f"fluxwarden tiers failed or not rendered: {ours['errors']}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", type=Path, required=True)
    parser.add_argument("--cluster", required=True)
    parser.add_argument("--flux-local", type=Path, required=True, help="flux_local_dump.py's JSON")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()
    print("\n".join(compare(json.loads(args.flux_local.read_text()), fluxwarden_view(args.repo, args.cluster), args.verbose)))


if __name__ == "__main__":
    main()
