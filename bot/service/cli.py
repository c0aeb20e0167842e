"""The `fluxwarden` command line: the same engine the bot runs, for a terminal or CI."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import NoReturn, Sequence

from bot import __version__
from bot.adapters.cache import default_cache_dir
from bot.engine.render.config import RepoConfig, load_repo_config
from bot.adapters.workspace import read_config_file
from bot.engine.render.chartsource import FetchPolicy
from bot.pipeline.check import CheckOptions, check_repositories, repository_clusters, tune_gc, one_command
from bot.pipeline.progress import Progress
from bot.pipeline.releases import ChartOptions
from bot.service.progress_line import progress_line
from bot.engine.core.errors import FluxwardenError, InfraError, UserError
from bot.engine.reporting.report import format_markdown, format_text
from bot.adapters.workspace import read_config_text

EXIT_CLEAN, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, like every other usage error
        self.exit(EXIT_USAGE, f"fluxwarden: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fluxwarden", description="Precheck a Flux GitOps repository before merge.")
    parser.add_argument("--version", action="version", version=f"fluxwarden {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    check = sub.add_parser("check", help="render a cluster and check its tier graph")
    check.add_argument("--repo", default=".", type=Path, help="repository working tree (default: .)")
    check.add_argument("--cluster", help="cluster name (see `fluxwarden clusters`; default: the only one, else every one)")
    check.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    check.add_argument("--output", type=Path, help="write the report here instead of stdout")
    _render_arguments(check)
    check.add_argument("--jobs", type=int, help="parallel kustomize builds (default: CPU count + 1)")
    check.add_argument("--timeout", type=float, default=120.0, help="seconds one kustomize build may take")
    check.add_argument("--base", help="review a change: the git revision before it (renders both sides and diffs them)")
    check.add_argument("--head", help="with --base: the revision after the change (default: the working tree)")
    check.add_argument("--all", action="store_true", dest="all_findings", help="with --base: list the pre-existing findings too (default: a count per check)")
    check.add_argument(
        "--config-from-commit", action="store_true",
        help="with --base: each side reads its own commit's .fluxwarden.yaml (default: the working tree's, for both sides)",
    )
    _cache_arguments(check)
    _chart_arguments(check)
    check.add_argument(
        "--no-bootstrap", action="store_true",
        help="judge a bare cluster: nothing the repository installs before Flux (helmfiles, scripts, bootstrap: in .fluxwarden.yaml) is assumed present",
    )
    check.add_argument("--live", action="store_true", help="also check the merge preconditions on the live cluster (read-only)")
    check.add_argument("--kubeconfig", type=Path, help="with --live: kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    check.add_argument("--context", help="with --live: kubeconfig context (default: its current-context)")
    tier = sub.add_parser("tier-order", help="check the bootstrap tier order list against every cluster's graph (--fix edits it)")
    tier.add_argument("--repo", default=".", type=Path, help="repository working tree (default: .)")
    tier.add_argument("--fix", action="store_true", help="edit the tier order file in place (only the lines that must change)")
    _render_arguments(tier)
    tier.add_argument("--timeout", type=float, default=120.0, help="seconds one kustomize build may take")
    _cache_arguments(tier)
    drift = sub.add_parser("drift", help="compare a cluster with the render of the repository, once (read-only)")
    drift.add_argument("--repo", default=".", type=Path, help="repository working tree, e.g. a checkout of the default branch (default: .)")
    drift.add_argument("--cluster", help="cluster name (see `fluxwarden clusters`; default: the only one)")
    drift.add_argument("--kubeconfig", type=Path, help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    drift.add_argument("--context", help="kubeconfig context (default: its current-context)")
    drift.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    drift.add_argument("--stuck-after", type=float, default=1800.0, help="seconds a tier may wait on a dependency before it is stuck (default: 1800)")
    _render_arguments(drift)
    drift.add_argument("--timeout", type=float, default=120.0, help="seconds one kustomize build may take")
    _cache_arguments(drift)
    build = sub.add_parser("build", help="print a cluster's rendered objects (what kustomize-controller would apply) as YAML")
    build.add_argument("--repo", default=".", type=Path, help="repository working tree (default: .)")
    build.add_argument("--cluster", help="cluster name (see `fluxwarden clusters`; default: the only one)")
    build.add_argument(
        "--tier", action="append", default=[], metavar="NS/NAME",
        help="only this Kustomization, or this HelmRelease's chart (HelmRelease/NS/NAME; repeatable; default: every tier)",
    )
    build.add_argument("--show-secrets", action="store_true", help="print Secret values as git has them (SOPS values stay encrypted)")
    build.add_argument("--output", type=Path, help="write the YAML here instead of stdout")
    _render_arguments(build)
    build.add_argument("--jobs", type=int, help="parallel kustomize builds (default: CPU count + 1)")
    build.add_argument("--timeout", type=float, default=120.0, help="seconds one kustomize build may take")
    _cache_arguments(build)
    _chart_arguments(build)
    clusters = sub.add_parser("clusters", help="list the clusters found in a repository, each with its entry path and how it was found")
    clusters.add_argument("--repo", default=".", type=Path, help="repository working tree (default: .)")
    clusters.add_argument("--config", type=Path, help="use this .fluxwarden.yaml instead of the repository's (it may live outside the repo)")
    clusters.add_argument("--format", choices=("text", "json"), default="text")
    demo = sub.add_parser("demo", help="review the bundled example's CDI fix as a PR: the incident, and what the fix changes")
    demo.add_argument("--example", type=Path, help="the bundled example (default: examples/home-ops, from the Fluxwarden checkout)")
    _render_arguments(demo, config=False)
    serve = sub.add_parser("serve", help="run the GitHub webhook service")
    serve.add_argument("--config", type=Path, help="service configuration (see config/fluxwarden.example.yaml)")
    serve.add_argument("--host", help="listen address (default: config or 0.0.0.0)")
    serve.add_argument("--port", type=int, help="listen port (default: config or 8080)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return _invoke(argv)[0]


def run() -> NoReturn:
    """The `fluxwarden` program: `main`, then, after a command (not `serve`), the process ends at once.

    A command's objects (two renders, and the cycles its collector, off while it ran, never took) are left to
    the OS: the interpreter's own teardown collects and frees them all, 75-95 ms of a one-second review
    (bench/run.py --charts). Everything a command opens is closed before it returns (workers, scratch
    directories, the output file); only the standard streams are left to flush.
    """
    code, one_run = _invoke(None)
    if not one_run:
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _invoke(argv: Sequence[str] | None) -> tuple[int, bool]:
    """Run one command line: its exit code, and whether it was a command that ends the process (not `serve`)."""
    args = build_parser().parse_args(argv)
    tune_gc()
    one_run = args.command != "serve"
    with one_command() if one_run else nullcontext():
        return _run(args), one_run


def _run(args: argparse.Namespace) -> int:
    try:
        _check_output(getattr(args, "output", None))
        if getattr(args, "live", False) or args.command == "drift":
            _check_kubeconfig(args.kubeconfig)
        if args.command == "serve":
            return _serve(args)
        if args.command == "tier-order":
            return _tier_order(args)
        if args.command == "drift":
            return _drift(args)
        if args.command == "build":
            return _build(args)
        if args.command == "demo":
            return _demo(args)
        if args.command == "clusters":
            return _clusters(args)
        return _check(args)
    except FluxwardenError as exc:
        kind = "infrastructure error" if isinstance(exc, InfraError) else "error"
        print(f"fluxwarden: {kind}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug: one line, never a traceback (set FLUXWARDEN_DEBUG=1 to see it)
        if os.environ.get("FLUXWARDEN_DEBUG"):
            raise
        print(f"fluxwarden: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _check(args: argparse.Namespace) -> int:
    cache_dir = _cache_dir(args)
    options = CheckOptions(
        kustomize=args.kustomize, jobs=args.jobs, timeout=args.timeout, cache_dir=cache_dir, bootstrap=not args.no_bootstrap, charts=_charts(args),
        progress=Progress(),
    )
    if args.head and not args.base:
        raise UserError("--head needs --base")
    if (args.kubeconfig or args.context) and not args.live:
        raise UserError("--kubeconfig and --context need --live")
    if args.config_from_commit and not args.base:
        raise UserError("--config-from-commit needs --base")
    if args.config_from_commit and args.config:
        raise UserError("--config and --config-from-commit exclude each other")
    if args.base:
        return _review(args, options)
    config = _config(args)
    names = _clusters_to_check(args, config)
    live, _, read_config = _live(args, names[0])
    options = replace(options, live_config=read_config)
    with progress_line(options.progress, sys.stderr):
        reports = check_repositories(args.repo, names, options, live=live, config=config)
    if args.format == "json":
        data = reports[0].to_json() if len(reports) == 1 else {"clusters": [r.to_json() for r in reports]}
        text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    elif args.format == "markdown":
        text = "\n".join(format_markdown(r) for r in reports)
    else:
        text = "\n".join(format_text(r) for r in reports)
    _emit(args, text)
    return EXIT_FINDINGS if any(r.errors for r in reports) else EXIT_CLEAN


def _review(args: argparse.Namespace, options: CheckOptions) -> int:
    from bot.pipeline.review import review_repository  # GitPython is only needed for reviews
    from bot.engine.reporting.review_report import format_review_markdown, format_review_text, review_to_json

    # One configuration for both sides (--config, else the working tree's): a .fluxwarden.yaml the base
    # commit lacks (not committed yet, or added by the change) must not empty the base's render.
    if args.config_from_commit:
        config = None
    else:
        config = _config(args) or _working_tree_config(args.repo)
    names = _clusters_to_check(args, config)
    live, fetch_objects, read_config = _live(args, names[0])
    options = replace(options, live_config=read_config)
    with progress_line(options.progress, sys.stderr):
        reviews = [
            review_repository(
                args.repo, name, args.base, args.head, options, cache_dir=options.cache_dir, live=live, fetch_objects=fetch_objects,
                config=config,
            )
            for name in names
        ]
    if args.format == "json":
        data = review_to_json(reviews[0]) if len(reviews) == 1 else {"clusters": [review_to_json(r) for r in reviews]}
        text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    elif args.format == "markdown":
        text = "\n".join(format_review_markdown(reviews))
    else:
        text = "\n".join(format_review_text(r, all_findings=args.all_findings) for r in reviews)
    _emit(args, text)
    # A change is judged by what it adds: pre-existing errors do not fail it.
    return EXIT_FINDINGS if any(r.new_errors for r in reviews) else EXIT_CLEAN


def _clusters_to_check(args: argparse.Namespace, config: RepoConfig | None) -> list[str]:
    """`--cluster`, else every cluster of the repository (as `/precheck` with no cluster); --live reads one cluster."""
    if args.cluster:
        return [args.cluster]
    names = [entry.name for entry in repository_clusters(args.repo, config)]
    if not names:
        raise UserError(f"no cluster found in {args.repo}: name its entry in .fluxwarden.yaml `clusters:` (see `fluxwarden clusters`)")
    if len(names) > 1 and getattr(args, "live", False):
        raise UserError(f"--live reads one cluster: pass --cluster (one of {', '.join(names)})")
    return names


def _one_cluster(args: argparse.Namespace) -> str:
    """`--cluster`, else the repository's only cluster; several: a usage error naming them."""
    if args.cluster:
        return args.cluster
    entries = repository_clusters(args.repo, _config(args))
    if len(entries) == 1:
        return entries[0].name
    if not entries:
        raise UserError(f"no cluster found in {args.repo}: name its entry in .fluxwarden.yaml `clusters:` (see `fluxwarden clusters`)")
    listed = ", ".join(f"{e.name} ({e.path or '.'})" for e in entries)
    raise UserError(f"{args.repo} has {len(entries)} clusters: {listed}; pass --cluster NAME")


def _clusters(args: argparse.Namespace) -> int:
    """List the clusters discovery finds: 0 when there is one or more, 1 when there is none."""
    entries = repository_clusters(args.repo, _config(args))
    if args.format == "json":
        sys.stdout.write(json.dumps([{"name": e.name, "entry": e.path, "how": e.how} for e in entries], indent=2) + "\n")
    elif not entries:
        print(f"no cluster found in {args.repo}: name its entry in .fluxwarden.yaml `clusters:`")
    else:
        width = max(len(e.name) for e in entries)
        entry_width = max(len(e.path or ".") for e in entries)
        for e in entries:
            print(f"{e.name:{width}}  {e.path or '.':{entry_width}}  {e.how}")
    return EXIT_CLEAN if entries else EXIT_FINDINGS


def _config(args: argparse.Namespace) -> RepoConfig | None:
    """`--config FILE`, read; None: the repository's own `.fluxwarden.yaml` is used."""
    return read_config_file(args.config) if args.config is not None else None


def _working_tree_config(repo: Path) -> RepoConfig:
    """The working tree's `.fluxwarden.yaml` (read whatever `.sourceignore` says; the defaults when there is none)."""
    if not repo.is_dir():
        raise UserError(f"{repo} is not a directory")
    return load_repo_config(read_config_text(repo))


def _live(args: argparse.Namespace, cluster: str):
    """With --live: the cluster's state, read now (async, before the sync engine), a reader for moved objects and
    one for the substituteFrom ConfigMaps/Secrets that git lacks (read by name while rendering; Secret values only masked).

    An unreachable cluster, a bad credential or a forbidden read is not an exception here: the state
    records it and the report carries a `precondition-unknown` error.
    """
    if not args.live:
        return None, None, None
    from bot.adapters.kube import ClusterAccess, ConfigReader, ObjectReader, fetch_live_state  # kubernetes-asyncio: only with --live

    access = ClusterAccess(kubeconfig=args.kubeconfig, context=args.context)
    return fetch_live_state(access, cluster), ObjectReader(access), ConfigReader(access)


def _check_output(path: Path | None) -> None:
    """`--output` that cannot be written fails before the run (one line), not after minutes of rendering."""
    if path is None:
        return
    if path.is_dir():
        raise UserError(f"--output {path} is a directory")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UserError(f"--output {path}: directory {parent} does not exist")
    if not os.access(path if path.exists() else parent, os.W_OK):
        raise UserError(f"--output {path} is not writable")


def _check_kubeconfig(kubeconfig: Path | None) -> None:
    """Reading a cluster needs a kubeconfig: without one, say so in one line before the run.

    kubernetes-asyncio's loader (and bot.adapters.kube's operator log) would print their own lines and then a
    misleading "expected key current-context" about a file that does not exist.
    """
    for name in ("kubernetes_asyncio", "bot.adapters.kube"):  # the error line says it; no log lines besides it
        logger = logging.getLogger(name)
        logger.addHandler(logging.NullHandler())
        logger.propagate = False
    if kubeconfig is not None:
        if not kubeconfig.is_file():
            raise UserError(f"--kubeconfig {kubeconfig} does not exist")
        return
    env = os.environ.get("KUBECONFIG", "")
    if env:
        if not any(Path(p).is_file() for p in env.split(os.pathsep) if p):
            raise UserError("no kubeconfig: no file of $KUBECONFIG exists; pass --kubeconfig FILE")
    elif not (Path.home() / ".kube" / "config").is_file():
        raise UserError("no kubeconfig: $KUBECONFIG is not set and ~/.kube/config does not exist; pass --kubeconfig FILE")


def _render_arguments(parser: argparse.ArgumentParser, *, config: bool = True) -> None:
    """`--kustomize` for every command that renders; `--config`, a .fluxwarden.yaml in place of the repository's."""
    parser.add_argument("--kustomize", help="kustomize or kubectl binary (default: $FLUXWARDEN_KUSTOMIZE, PATH, the venv's kubectl)")
    if config:
        parser.add_argument("--config", type=Path, help="use this .fluxwarden.yaml instead of the repository's (it may live outside the repo)")


def _cache_arguments(parser: argparse.ArgumentParser) -> None:
    """`--cache-dir` and `--no-cache`: every command that renders shares one build cache."""
    parser.add_argument("--cache-dir", type=Path, help="build cache (default: $FLUXWARDEN_CACHE_DIR or ~/.cache/fluxwarden)")
    parser.add_argument("--no-cache", action="store_true", help="build every tier, read and write no cache")


def _chart_arguments(parser: argparse.ArgumentParser) -> None:
    """How HelmReleases' charts are fetched: mirrors, hosts a private address may be reached at, offline, or not at all."""
    parser.add_argument("--chart-mirror", action="append", default=[], metavar="HOST=URL", help="fetch HOST's charts from URL (repeatable)")
    parser.add_argument(
        "--allow-chart-host", action="append", default=[], metavar="HOST[:PORT]",
        help="also fetch charts from this host, even at a private or loopback address (repeatable)",
    )
    parser.add_argument(
        "--chart-credentials-file", type=Path, metavar="FILE",
        help="chart credentials by host or secretRef: a YAML `credentials:` list as in the service settings (secrets from env or files)",
    )
    parser.add_argument("--offline", action="store_true", help="render charts from the cache and mirrors only")
    parser.add_argument("--no-charts", action="store_true", help="do not render HelmReleases' charts (the knowledge base judges their CRDs)")


def _charts(args: argparse.Namespace) -> ChartOptions:
    """The chart options a command's flags give (credentials never come from a flag: a file names where they are)."""
    mirrors = {}
    for item in args.chart_mirror:
        host, sep, url = item.partition("=")
        if not sep or not host.strip() or not url.startswith(("http://", "https://", "oci://")):
            raise UserError(f"--chart-mirror takes HOST=URL with an http(s):// or oci:// URL (got {item!r})")
        mirrors[host.strip().lower()] = url.strip()
    allowed = frozenset(h.strip().lower() for h in args.allow_chart_host if h.strip())
    credentials = {}
    if args.chart_credentials_file is not None:
        from bot.service.settings import read_chart_credentials

        credentials = read_chart_credentials(args.chart_credentials_file, os.environ)
    policy = FetchPolicy(allow_hosts=allowed, mirrors=mirrors, offline=args.offline, credentials=credentials)
    return ChartOptions(render=not args.no_charts, policy=policy)


def _cache_dir(args: argparse.Namespace) -> Path | None:
    """The build cache a command uses (None: --no-cache)."""
    return None if args.no_cache else (args.cache_dir or default_cache_dir())


def _tier_order(args: argparse.Namespace) -> int:
    """Print the order every cluster needs; 0 right (or fixed), 1 stale and not fixed, 2 impossible/usage."""
    from bot.pipeline.tier_state import read_tree_state

    state = read_tree_state(args.repo, kustomize=args.kustomize, timeout=args.timeout, cache_dir=_cache_dir(args), config=_config(args))
    fix = state.plan()  # TierOrderConflict and unreadable lists are FluxwardenErrors: one line, exit 2
    sys.stdout.write(fix.report())
    if not fix.needed:
        return EXIT_CLEAN
    sys.stdout.write(fix.diff())
    if not args.fix:
        print(f"run with --fix to edit {fix.file}")
        return EXIT_FINDINGS
    path = args.repo / fix.file
    with open(path, "w", encoding="utf-8", newline="") as handle:
        handle.write(fix.new_text)
    print(f"edited {fix.file}")
    return EXIT_CLEAN


def _drift(args: argparse.Namespace) -> int:
    """Print the drift report once: 0 the cluster matches git, 1 drift, 2 usage or the cluster unreadable."""
    from datetime import timedelta

    from bot.engine.livestate.drift import DriftOptions, format_markdown, format_text, report_to_json
    from bot.pipeline.drift import drift_repository
    from bot.adapters.kube import ClusterAccess  # kubernetes-asyncio: only for commands that read a cluster

    if args.stuck_after < 0:
        raise UserError("--stuck-after must not be negative")
    access = ClusterAccess(kubeconfig=args.kubeconfig, context=args.context)
    options = DriftOptions(stuck_after=timedelta(seconds=args.stuck_after))
    report = drift_repository(
        args.repo, _one_cluster(args), access, check=CheckOptions(kustomize=args.kustomize, timeout=args.timeout), options=options,
        cache_dir=_cache_dir(args), config=_config(args),
    )
    if report.error is not None:
        raise InfraError(report.error)
    if args.format == "json":
        sys.stdout.write(json.dumps(report_to_json(report), indent=2, ensure_ascii=False) + "\n")
    elif args.format == "markdown":
        sys.stdout.write(format_markdown(report))
    else:
        sys.stdout.write(format_text(report))
    return EXIT_FINDINGS if report.items else EXIT_CLEAN


def _build(args: argparse.Namespace) -> int:
    """Print the rendered objects: 0 rendered, 1 a requested tier failed or was not rendered (findings on stderr), 2 usage."""
    from bot.engine.reporting.verdict import nothing_rendered
    from bot.pipeline.check import render_repository
    from bot.pipeline.export import build_findings, format_build, select_tiers, selected_releases, tier_problem

    cache_dir = _cache_dir(args)
    options = CheckOptions(kustomize=args.kustomize, jobs=args.jobs, timeout=args.timeout, cache_dir=cache_dir, charts=_charts(args), progress=Progress())
    cluster = _one_cluster(args)
    with progress_line(options.progress, sys.stderr), render_repository(args.repo, cluster, options, config=_config(args)) as built:
        tiers = select_tiers(built, args.tier)  # an unknown tier is a UserError: exit 2
        everything = not args.tier
        findings = build_findings(built, tiers, everything) + (nothing_rendered(built.render) if everything else [])
        text = format_build(built, tiers, show_secrets=args.show_secrets, releases=selected_releases(built, args.tier))
        failed = any(tier_problem(built.render.tiers[t]) for t in tiers) if args.tier else any(built.render.tiers[t].failed for t in tiers)
    for finding in findings:
        where = f" ({finding.location})" if finding.location else ""
        scope = " ".join(str(x) for x in (finding.kustomization, finding.object) if x)
        print(f"fluxwarden: {finding.severity.value} {finding.check}{' ' + scope if scope else ''}: {finding.message}{where}".replace("\n", " "), file=sys.stderr)
    _emit(args, text)
    return EXIT_FINDINGS if failed or any(f.check == "nothing-rendered" for f in findings) else EXIT_CLEAN


def _demo(args: argparse.Namespace) -> int:
    """Print the review of the example's CDI fix; 0 when the PR adds no error (it does not)."""
    from bot.pipeline.demo import run_demo

    text, clean = run_demo(args.example, CheckOptions(kustomize=args.kustomize))
    sys.stdout.write(text)
    return EXIT_CLEAN if clean else EXIT_FINDINGS


def _serve(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from bot.service.app import serve  # aiohttp, PyGithub: only for the service
    from bot.service.settings import load_service_config

    config = load_service_config(args.config)
    config = replace(config, host=args.host or config.host, port=args.port or config.port)
    serve(config)
    return EXIT_CLEAN


def _emit(args: argparse.Namespace, text: str) -> None:
    if args.output:
        args.output.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    run()
