"""`fluxwarden demo`: the CDI incident the product exists for, as a PR on the bundled example, reviewed.

The example (examples/home-ops) is the repository after the fix; examples/home-ops-cdi-fix.patch is the
fix itself. The demo builds the seed's PR in a temporary git repository — the example with the patch
reversed as the base, the example as the head — and prints what `check` says of the base and what
`check --base` says of the PR.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

from bot.pipeline.check import CheckOptions, check_repository
from bot.engine.core.errors import UserError

CLUSTER = "prod"
EXAMPLE = Path("examples") / "home-ops"
PATCH = "home-ops-cdi-fix.patch"  # beside the example
# Fixed authorship and dates: the same example gives the same commits, so the output is reproducible.
_WHEN = "1767225600 +0000"  # 2026-01-01 00:00 UTC, git's raw date format
_AUTHOR = ("Fluxwarden demo", "demo@fluxwarden.invalid")
BASE_MESSAGE = "platform-config: CDI and its StorageProfiles in one tier"
HEAD_MESSAGE = "fix(gitops): CDI cold-start deadlock repaired in the graph (StorageProfiles to platform-config-cdi)"


def find_example(given: Path | None) -> Path:
    """The bundled example: `--example`, else ./examples/home-ops, else the one beside this source tree."""
    candidates = [given] if given is not None else [EXAMPLE, Path(__file__).resolve().parents[2] / EXAMPLE]
    for path in candidates:
        if path is not None and (path / "clusters").is_dir() and (path.parent / PATCH).is_file():
            return path
    where = given if given is not None else EXAMPLE
    raise UserError(f"the bundled example is not at {where} (with {PATCH} beside it); run from the Fluxwarden checkout or pass --example DIR")


def seed_pr_base(example: Path, root: Path) -> str:
    """A new repository at `root` whose one commit is the example before the fix (the PR's base): its SHA."""
    from bot.adapters.git import commit_patch

    shutil.copytree(example, root)
    # The example is the head: the patch reversed is the base.
    return commit_patch(root, example.parent / PATCH, BASE_MESSAGE, reverse=True, when=_WHEN, author=_AUTHOR)


def seed_pr_head(example: Path, root: Path) -> str:
    """The fix committed on top of the base (the PR's head): its SHA."""
    from bot.adapters.git import commit_patch

    return commit_patch(root, example.parent / PATCH, HEAD_MESSAGE, when=_WHEN, author=_AUTHOR)


def run_demo(example: Path | None = None, options: CheckOptions = CheckOptions()) -> tuple[str, bool]:
    """The demo's text, and whether the PR adds no error (what `check --base` would exit with)."""
    from bot.engine.reporting.report import format_text
    from bot.pipeline.review import review_repository
    from bot.engine.reporting.review_report import format_review_text

    source = find_example(example)
    # The demo is about the tier graph and runs the same on any machine: it fetches no chart (offline).
    options = replace(options, charts=replace(options.charts, policy=replace(options.charts.policy, offline=True)))
    with tempfile.TemporaryDirectory(prefix="fluxwarden-demo-") as tmp:
        root = Path(tmp) / "home-ops"
        cache = Path(tmp) / "cache"  # the review reuses the base's builds
        base = seed_pr_base(source, root)
        before = check_repository(root, CLUSTER, replace(options, cache_dir=cache))  # the working tree is the base
        head = seed_pr_head(source, root)
        review = review_repository(root, CLUSTER, base, head, options, cache_dir=cache)
    text = "\n".join([
        f"Fluxwarden demo: the CDI incident on the bundled example ({source}), cluster {CLUSTER}.",
        "A temporary git repository holds the PR that fixed it, as two commits:",
        f"  base {base[:12]}  {BASE_MESSAGE}",
        f"  head {head[:12]}  {HEAD_MESSAGE}",
        "",
        f"== 1. The base, checked (fluxwarden check --cluster {CLUSTER}): a cold cluster never converges ==",
        "",
        format_text(before).rstrip("\n"),
        "",
        f"== 2. The PR, reviewed (fluxwarden check --cluster {CLUSTER} --base {base[:12]} --head {head[:12]}) ==",
        "",
        format_review_text(review).rstrip("\n"),
        "",
        "On your repository: fluxwarden check --repo PATH --cluster NAME [--base origin/main]",
        "",
    ])
    return text, review.new_errors == 0
