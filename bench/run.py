"""Benchmark `fluxwarden check` on a synthetic repository and print the figures side by side.

    python -m bench.run [--tiers 200] [--objects 20000] [--jobs 2] [--cluster dev] [--seed 1] [--repeat 1] [--keep DIR]
    python -m bench.run --charts [--releases 150] [--repeat 3] ...   # the HelmRelease scenario (charts rendered by Helm)

Each figure is one `measure_*` function that takes the shared `Bench` state and returns table rows
(and may leave numbers in `bench.results` for later rows). To add a measurement, write a function
and put it in `MEASUREMENTS`. The warm `check --base` row prints `n/a (not built yet)` when the
installed CLI has no `--base`, and measures it when it has.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from bench.synth import SynthRepo, bump_chart, generate, touch_one_tier
from bench.synth_charts import SINGLE_RELEASE_CHART
from bot.adapters.kustomize import KustomizeBinary, locate_kustomize
from bot.pipeline.renderer import default_jobs

NOT_BUILT = "n/a (not built yet)"


@dataclass(frozen=True)
class Row:
    """One line of the table."""

    figure: str  # (a) .. (e)
    label: str
    value: str
    note: str = ""


@dataclass
class Bench:
    """Everything the measurements share."""

    repo: SynthRepo
    work: Path  # scratch space (raw kustomize copies, sandbox HOME)
    binary: KustomizeBinary
    cluster: str
    jobs: int
    touch_index: int
    repeat: int = 1  # timed runs per figure; the fastest counts (the machine may be shared)
    results: dict[str, Any] = field(default_factory=dict)

    @property
    def raw_tree(self) -> Path:
        """A plain copy of the repo for raw kustomize runs (Flux's generated kustomization.yaml written in)."""
        target = self.work / "raw"
        if not target.exists():
            shutil.copytree(self.repo.root, target, ignore=shutil.ignore_patterns(".git"))
            for tier in self.repo.generated_tiers:
                directory = target / "tiers" / tier
                resources = sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*.y*ml"))
                (directory / "kustomization.yaml").write_text(
                    "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n"
                    + "".join(f"  - {r}\n" for r in resources),
                    encoding="utf-8",
                )
        return target


# -- helpers ----------------------------------------------------------------------------------------


def _kustomize_env(home: Path) -> dict[str, str]:
    """kustomize as a user runs it: Go's own defaults (all cores, default GC), nothing from our environment.

    The engine tunes Go for builds side by side (one core each, bot/adapters/kustomize.py); the raw floor is
    kustomize at its best alone, so the engine is not compared against a handicapped baseline.
    """
    home.mkdir(parents=True, exist_ok=True)
    return {"HOME": str(home), "PATH": str(home / "empty-path"), "LANG": "C.UTF-8"}


def kustomize_seconds(bench: Bench, directory: Path) -> float:
    """Wall time of one `kustomize build` of `directory` (output discarded; failure raises)."""
    start = time.perf_counter()
    proc = subprocess.run(
        bench.binary.argv(str(directory)),
        cwd=directory,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=_kustomize_env(bench.work / "home"),
    )
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"kustomize failed on {directory}: {proc.stderr.decode(errors='replace').strip()}")
    return elapsed


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _python_for_cli() -> list[str]:
    """The `fluxwarden` console script next to this interpreter, else `python -m bot.cli`."""
    script = Path(sys.executable).parent / "fluxwarden"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "bot.service.cli"]


def _run_probe(code: str, *args: str) -> dict[str, Any]:
    """Run `code` in a fresh interpreter (so RUSAGE_* see nothing of ours); it prints one JSON line."""
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"probe failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# The engine, in-process in a fresh interpreter: wall time of check_repository() alone (imports
# excluded), its own peak RSS (RUSAGE_SELF) and the largest kustomize child (RUSAGE_CHILDREN),
# and the CPU seconds (user + system) each side spent during the call.
_ENGINE_PROBE = textwrap.dedent(
    """
    import json, resource, sys, time
    from pathlib import Path
    from bot.pipeline.check import CheckOptions, check_repository, tune_gc
    repo, cluster, jobs = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    tune_gc()  # as the CLI and the service do
    import bot.engine.tiergraph.coldstart
    simulation = [0.0]  # seconds spent in the cold-start simulation (set up, rounds, result)
    def timed(fn):
        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                simulation[0] += time.perf_counter() - t0
        return wrapper
    for name in ("__init__", "run", "result"):
        setattr(bot.engine.tiergraph.coldstart.Simulation, name, timed(getattr(bot.engine.tiergraph.coldstart.Simulation, name)))
    def cpu(who):
        usage = resource.getrusage(who)
        return usage.ru_utime + usage.ru_stime
    self_cpu0, children_cpu0 = cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    report = check_repository(repo, cluster, CheckOptions(jobs=jobs))
    wall = time.perf_counter() - start
    print(json.dumps({
        "wall": wall,
        "simulation": simulation[0],
        "errors": report.errors,
        "warnings": report.warnings,
        "tiers": len(report.tiers),
        "objects": report.objects,
        "error_checks": sorted({f.check for f in report.findings if f.severity.value == "error"}),
        "self_maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "children_maxrss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
        "self_cpu": cpu(resource.RUSAGE_SELF) - self_cpu0,
        "children_cpu": cpu(resource.RUSAGE_CHILDREN) - children_cpu0,
    }))
    """
)

# The real CLI as the only child of a fresh interpreter: wall time including interpreter start-up,
# exit code, and RUSAGE_CHILDREN's ru_maxrss (KiB on Linux) = the largest process of the CLI's tree.
_CLI_PROBE = textwrap.dedent(
    """
    import json, resource, subprocess, sys, time
    argv = json.loads(sys.argv[1])
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - start
    print(json.dumps({
        "wall": wall,
        "rc": proc.returncode,
        "stderr": proc.stderr.decode(errors="replace")[-500:],
        "maxrss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
    }))
    """
)


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def _s(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1000:.0f} ms"


def _mib(kib: int) -> str:
    return f"{kib / 1024:.0f} MiB"


# -- measurements -----------------------------------------------------------------------------------


def measure_check_in_process(bench: Bench) -> list[Row]:
    """(a) cold check via bot.pipeline.check.check_repository, timed around the call; (d) its RSS split."""
    out = min(
        (_run_probe(_ENGINE_PROBE, str(bench.repo.root), bench.cluster, str(bench.jobs)) for _ in range(bench.repeat)),
        key=lambda r: r["wall"],
    )
    bench.results["engine"] = out
    verdict = f"{out['errors']} errors, {out['warnings']} warnings" + (
        f" ({', '.join(out['error_checks'])})" if out["error_checks"] else ""
    )
    return [
        Row("(a)", "cold check, in-process (check_repository)", _s(out["wall"]), f"{verdict}; {out['tiers']} tiers, {out['objects']:,} objects"),
        Row(
            "(a)",
            "cold-start simulation, inside that check",
            _s(out["simulation"]),
            f"{100 * out['simulation'] / out['wall']:.2f} % of the check (target < 10 %)",
        ),
        Row(
            "(b)",
            "CPU of that check: Python / kustomize",
            f"{out['self_cpu']:.1f} s / {out['children_cpu']:.1f} s",
            f"user+sys; CPU-bound wall floor on {os.cpu_count()} cores: "
            f"{_s(max(out['self_cpu'], (out['self_cpu'] + out['children_cpu']) / (os.cpu_count() or 1)))}",
        ),
        Row("(d)", "peak RSS, engine Python process", _mib(out["self_maxrss_kib"]), "RUSAGE_SELF of the in-process run"),
        Row("(d)", "peak RSS, largest kustomize child", _mib(out["children_maxrss_kib"]), "RUSAGE_CHILDREN of the in-process run"),
    ]


def _run_cli(bench: Bench, repo: Path, *extra: str | Path, output: Path | None = None) -> dict[str, Any]:
    """`fluxwarden check` on `repo` for the bench's cluster, as the only child of a fresh interpreter."""
    argv = [
        *_python_for_cli(), "check", "--repo", str(repo), "--cluster", bench.cluster,
        "--jobs", str(bench.jobs), "--format", "json", "--output", str(output or os.devnull), *map(str, extra),
    ]
    out = _run_probe(_CLI_PROBE, json.dumps(argv))
    if out["rc"] not in (0, 1):
        raise RuntimeError(f"{' '.join(argv[1:])} exited {out['rc']}: {out['stderr'].strip()}")
    return out


def measure_check_cli(bench: Bench) -> list[Row]:
    """(a) cold check via the CLI subprocess; (d) peak RSS of its process tree."""
    # --no-cache: cold means cold, whatever an earlier run (or repeat) left in the default cache dir.
    out = min((_run_cli(bench, bench.repo.root, "--no-cache") for _ in range(bench.repeat)), key=lambda r: r["wall"])
    bench.results["cli"] = out
    return [
        Row("(a)", "cold check, CLI subprocess", _s(out["wall"]), f"exit {out['rc']} (incl. interpreter start-up)"),
        Row("(d)", "peak RSS, CLI process tree", _mib(out["maxrss_kib"]), "RUSAGE_CHILDREN ru_maxrss: largest single process"),
    ]


def measure_kustomize_sum(bench: Bench) -> list[Row]:
    """(b) kustomize on every tier dir, one after another; the ratio of check wall time to that sum."""
    raw = bench.raw_tree
    runs = []
    for _ in range(bench.repeat):
        cpu0 = _children_cpu()
        times = {tier: kustomize_seconds(bench, raw / "tiers" / tier) for tier in bench.repo.tiers}
        runs.append((sum(times.values()), times, _children_cpu() - cpu0))
    _, times, cpu = min(runs, key=lambda r: r[0])
    total = sum(times.values())
    bench.results["kustomize_sum"] = total
    per = sorted(times.values())
    rows = [
        Row(
            "(b)",
            "sum of per-tier kustomize (sequential)",
            _s(total),
            f"{len(per)} builds; median {_s(statistics.median(per))}, max {_s(per[-1])}; {cpu:.1f} s CPU (user+sys)",
        )
    ]
    for key, label in (("engine", "in-process"), ("cli", "CLI")):
        if key in bench.results:
            ratio = bench.results[key]["wall"] / total
            rows.append(Row("(b)", f"ratio wall/sum, {label}", f"{ratio:.2f}", f"target <= 0.60 on 2 cores ({'met' if ratio <= 0.6 else 'NOT met'})"))
    return rows


def measure_one_tier_floor(bench: Bench) -> list[Row]:
    """(c) raw floor for a one-tier PR: kustomize on the tier at base and at head; the cluster entry apart."""
    raw = bench.raw_tree
    tier = bench.repo.tiers[bench.touch_index]
    best = lambda directory: min(kustomize_seconds(bench, directory) for _ in range(bench.repeat))  # noqa: E731
    base = best(raw / "tiers" / tier)
    entry = best(raw / "clusters" / bench.cluster)
    touched = touch_one_tier(raw, bench.touch_index)
    head = best(raw / "tiers" / touched)
    bench.results["one_tier_floor"] = base + head
    bench.results["entry_render"] = entry
    return [
        Row("(c)", "one-tier PR raw floor (kustomize only)", _s(base + head), f"{touched}: base {_s(base)} + head {_s(head)}"),
        Row("(c)", "cluster entry render (kustomize only)", _s(entry), f"clusters/{bench.cluster} (its ConfigMap patch loads kustomize's OpenAPI schema)"),
    ]


def _cli_has_base() -> bool:
    """Whether this fluxwarden's `check` has `--base` (the PR review mode)."""
    proc = subprocess.run([*_python_for_cli(), "check", "--help"], capture_output=True, text=True)
    return "--base" in proc.stdout


def measure_warm_base(bench: Bench) -> list[Row]:
    """(c) warm `check --base` for a PR touching one tier, next to the raw floor.

    On a clone of the repo with its own --cache-dir: `check --base HEAD` (no change; fills the
    cache as checking main would), then commit a one-tier change and time
    `check --base HEAD~1 --head HEAD` with that cache. Shows NOT_BUILT when the CLI has no --base.
    """
    if not _cli_has_base():
        return [Row("(c)", "warm check --base, one-tier PR", NOT_BUILT, "compare with the raw floor above")]
    clone = bench.work / "pr"
    shutil.copytree(bench.repo.root, clone, symlinks=True)
    cache = bench.work / "cache"
    prime = _run_cli(bench, clone, "--base", "HEAD", "--cache-dir", cache)
    primed = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True, check=True).stdout.strip()
    runs = []
    for attempt in range(bench.repeat):
        # Each attempt is a new head on the primed base (one more bump each time): never a commit the cache has seen.
        subprocess.run(["git", "reset", "-q", "--hard", primed], cwd=clone, check=True)
        for _ in range(attempt):
            touch_one_tier(clone, bench.touch_index)
        tier = touch_one_tier(clone, bench.touch_index, commit=True)
        result = bench.work / f"warm-review-{attempt}.json"
        runs.append((_run_cli(bench, clone, "--base", "HEAD~1", "--head", "HEAD", "--cache-dir", cache, output=result), result))
    warm, result = min(runs, key=lambda r: r[0]["wall"])
    review = json.loads(result.read_text(encoding="utf-8"))
    bench.results["warm_base"] = warm["wall"]
    floor, entry = bench.results.get("one_tier_floor"), bench.results.get("entry_render")
    versus = ""
    if floor and entry:
        target = 2 * floor + entry
        verdict = "met" if warm["wall"] <= target else "NOT met"
        versus = f"; target 2 x floor + entry = {_s(target)} ({verdict}); {warm['wall'] / (floor + entry):.2f}x floor + entry"
    spread = f"; median of {len(runs)} {_s(statistics.median(r[0]['wall'] for r in runs))}" if len(runs) > 1 else ""
    return [
        Row("(c)", "check --base, empty cache, no change", _s(prime["wall"]), "fills the cache (renders base and head)"),
        Row(
            "(c)",
            "warm check --base, one-tier PR",
            _s(warm["wall"]),
            f"{tier}: exit {warm['rc']}, changed tiers {review.get('changedTiers')}, {len(review.get('changes', []))} object change(s){versus}{spread}",
        ),
        Row("(d)", "peak RSS, warm check --base tree", _mib(warm["maxrss_kib"]), "RUSAGE_CHILDREN ru_maxrss: largest single process"),
    ]


def measure_counts(bench: Bench) -> list[Row]:
    """(e) what was checked."""
    repo = bench.repo
    seen = bench.results.get("engine", {})
    return [
        Row("(e)", "tiers / objects (tier dirs)", f"{len(repo.tiers)} / {repo.objects:,}", f"{repo.files:,} files; the entry adds {repo.entry_objects} objects"),
        Row(
            "(e)",
            "tiers / objects seen by check",
            f"{seen.get('tiers', '?')} / {seen.get('objects', 0):,}",
            f"expected {len(repo.tiers) + 1} / {repo.report_objects:,} (entry tier included)",
        ),
        Row(
            "(e)",
            "graph shape",
            f"{len(repo.roots)} roots",
            f"{len(repo.crd_tiers)} CRD tiers, {len(repo.cr_tiers)} CR tiers, {len(repo.substituted_tiers)} substituted, "
            f"{len(repo.wait_tiers)} wait, {len(repo.generated_tiers)} without kustomization.yaml",
        ),
    ]


# -- the charts scenario (--charts) ------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    """A process's children, from each of its threads' /proc/<tid>/task/<tid>/children (not a scan of all of /proc:
    the sampler runs on the same two cores as what it measures, every 50 ms)."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{tid}/task/{tid}/children", "rb") as handle:
                out.extend(int(k) for k in handle.read().split())
        except (OSError, ValueError):
            continue
    return out


def _pss(pid: int) -> int:
    """Proportional set size in bytes (shared pages divided among their users), from /proc/<pid>/smaps_rollup."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as rollup:
            for line in rollup:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return 0


def tree_rss(pid: int) -> tuple[int, int, int]:
    """(bytes resident in the process tree under and including `pid`, its PSS, processes in it), from /proc."""
    total = pss = count = 0
    stack = [pid]
    page = os.sysconf("SC_PAGE_SIZE")
    parent_cmdline: dict[int, bytes] = {}
    while stack:
        current = stack.pop()
        kids = _children(current)
        stack.extend(kids)
        try:
            with open(f"/proc/{current}/cmdline", "rb") as handle:
                cmdline = handle.read()
            for kid in kids:
                parent_cmdline[kid] = cmdline
            # A child caught between fork (or vfork) and exec still runs its parent's program and maps its
            # parent's memory (with vfork the very same pages): counting it would count the parent twice.
            if parent_cmdline.get(current) == cmdline and current != pid:
                continue
            with open(f"/proc/{current}/statm", "rb") as statm:
                total += int(statm.read().split()[1]) * page
                count += 1
        except (OSError, IndexError, ValueError):
            continue
        pss += _pss(current)
    return total, pss, count


def run_sampled(argv: Sequence[str], interval: float = 0.05) -> dict[str, Any]:
    """Run `argv`; its wall time, exit code, stderr tail and the PEAK RSS of its whole process tree (sampled every 50 ms).

    The sum of the tree's resident sets at each sample (shared pages count once per process: an upper bound);
    bot + kustomize + Helm workers together, which is what a machine's memory has to hold.
    """
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = peak_procs = 0
    stderr: list[bytes] = []
    import threading

    reader = threading.Thread(target=lambda: stderr.append(proc.stderr.read() if proc.stderr else b""), daemon=True)
    reader.start()
    peak_pss = 0
    while proc.poll() is None:
        rss, pss, procs = tree_rss(proc.pid)
        if rss > peak:
            peak, peak_procs = rss, procs
        peak_pss = max(peak_pss, pss)
        time.sleep(interval)
    wall = time.perf_counter() - start
    reader.join(5)
    return {"wall": wall, "rc": proc.returncode, "stderr": b"".join(stderr).decode(errors="replace")[-800:], "peak_rss": peak, "peak_pss": peak_pss, "peak_procs": peak_procs}


def _check_argv(bench: Bench, repo: Path, *extra: str | Path, output: Path | None = None) -> list[str]:
    return [
        *_python_for_cli(), "check", "--repo", str(repo), "--cluster", bench.cluster,
        "--jobs", str(bench.jobs), "--format", "json", "--output", str(output or os.devnull), *map(str, extra),
    ]


def _median_runs(runs: Sequence[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in runs))


def measure_charts_cold(bench: Bench) -> list[Row]:
    """(f) cold `fluxwarden check --no-cache` of the charts repo: wall time and the process tree's peak RSS; medians of --repeat."""
    runs = []
    for attempt in range(bench.repeat):
        result = bench.work / f"charts-cold-{attempt}.json"
        out = run_sampled(_check_argv(bench, bench.repo.root, "--no-cache", output=result))
        if out["rc"] not in (0, 1):
            raise RuntimeError(f"check exited {out['rc']}: {out['stderr'].strip()}")
        out["report"] = json.loads(result.read_text(encoding="utf-8"))
        runs.append(out)
    report = runs[0]["report"]
    releases = report.get("helmReleases", {})
    wall, peak = _median_runs(runs, "wall"), _median_runs(runs, "peak_rss")
    bench.results["charts_cold"] = wall
    spread = ", ".join(_s(r["wall"]) for r in runs)
    return [
        Row(
            "(f)", "cold check with charts, CLI --no-cache", _s(wall),
            f"median of {len(runs)} ({spread}); exit {runs[0]['rc']}; {releases.get('rendered', 0)} charts rendered, "
            f"{releases.get('notRendered', 0)} not; goal <= 30 s ({'met' if wall <= 30 else 'NOT met'})",
        ),
        Row(
            "(f)", "peak RSS of the whole process tree", _mib(int(peak) // 1024),
            f"median of {len(runs)} ({', '.join(_mib(r['peak_rss'] // 1024) for r in runs)}); sum of RSS over bot + kustomize + "
            f"Helm workers, sampled every 50 ms ({runs[0]['peak_procs']} processes at the peak); goal <= 400 MiB "
            f"({'met' if peak <= 400 * 2**20 else 'NOT met'})",
        ),
        Row(
            "(f)", "peak PSS of the whole process tree", _mib(int(_median_runs(runs, "peak_pss")) // 1024),
            "the same samples, shared pages (the Helm SDK's library, Python's) counted once: what the tree really holds",
        ),
    ]


def measure_charts_bump(bench: Bench) -> list[Row]:
    """(f) warm review of a one-chart bump: `check --base HEAD~1 --head HEAD` with a cache a previous run filled."""
    clone = bench.work / "charts-pr"
    shutil.copytree(bench.repo.root, clone, symlinks=True)
    cache = bench.work / "charts-cache"
    prime = run_sampled(_check_argv(bench, clone, "--base", "HEAD", "--cache-dir", cache))
    primed = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True, check=True).stdout.strip()
    runs = []
    for attempt in range(bench.repeat):
        # A new head each time (one more bump): never a commit whose findings the cache holds.
        subprocess.run(["git", "reset", "-q", "--hard", primed], cwd=clone, check=True)
        for _ in range(attempt):
            bump_chart(clone, SINGLE_RELEASE_CHART)
        version = bump_chart(clone, SINGLE_RELEASE_CHART, commit=True)
        result = bench.work / f"charts-bump-{attempt}.json"
        out = run_sampled(_check_argv(bench, clone, "--base", "HEAD~1", "--head", "HEAD", "--cache-dir", cache, output=result))
        if out["rc"] not in (0, 1):
            raise RuntimeError(f"check --base exited {out['rc']}: {out['stderr'].strip()}")
        out["review"], out["version"] = json.loads(result.read_text(encoding="utf-8")), version
        runs.append(out)
    wall = _median_runs(runs, "wall")
    review = runs[-1]["review"]
    charts = [r.get("summary", "") for r in review.get("releases", [])] if isinstance(review.get("releases"), list) else []
    return [
        Row("(f)", "check --base, empty cache, no change (charts)", _s(prime["wall"]), f"fills the cache; peak tree RSS {_mib(prime['peak_rss'] // 1024)}"),
        Row(
            "(f)", "warm one-chart bump review", _s(wall),
            f"median of {len(runs)} ({', '.join(_s(r['wall']) for r in runs)}); charts/{SINGLE_RELEASE_CHART} -> {runs[-1]['version']}; "
            f"exit {runs[-1]['rc']}; {len(review.get('changes', []))} object change(s)"
            + (f"; {charts[0]}" if charts else "")
            + f"; goal <= 1 s ({'met' if wall <= 1 else 'NOT met'}); peak tree RSS {_mib(int(_median_runs(runs, 'peak_rss')) // 1024)}",
        ),
    ]


def measure_chart_counts(bench: Bench) -> list[Row]:
    """(e) what the charts repository holds."""
    repo = bench.repo
    per_chart: dict[str, int] = {}
    for release in repo.releases:
        per_chart[release.chart] = per_chart.get(release.chart, 0) + 1
    return [
        Row("(e)", "tiers / HelmReleases / charts", f"{len(repo.tiers)} / {len(repo.releases)} / {len(repo.charts)}",
            f"{repo.objects:,} objects in the tier dirs; {sum(r.values_from for r in repo.releases)} with valuesFrom; "
            + ", ".join(f"{name} x{n}" for name, n in sorted(per_chart.items()))),
    ]


CHART_MEASUREMENTS: list[Callable[[Bench], list[Row]]] = [measure_charts_cold, measure_charts_bump, measure_chart_counts]


MEASUREMENTS: list[Callable[[Bench], list[Row]]] = [
    measure_check_in_process,
    measure_check_cli,
    measure_kustomize_sum,
    measure_one_tier_floor,
    measure_warm_base,
    measure_counts,
]


def format_table(rows: Sequence[Row]) -> str:
    header = Row("", "measurement", "value", "note")
    widths = [max(len(getattr(r, f)) for r in (header, *rows)) for f in ("figure", "label", "value")]
    lines = []
    for i, r in enumerate((header, *rows)):
        lines.append(f"{r.figure:<{widths[0]}}  {r.label:<{widths[1]}}  {r.value:>{widths[2]}}  {r.note}".rstrip())
        if i == 0:
            lines.append("-" * (sum(widths) + 4 + max(len(r.note) for r in (header, *rows)) + 2))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description="Benchmark fluxwarden check on a synthetic repo.")
    parser.add_argument("--tiers", type=int, default=200)
    parser.add_argument("--objects", type=int, default=20000)
    parser.add_argument("--jobs", type=int, default=None, help="parallel kustomize builds for check (default: the engine's, CPU count + 1)")
    parser.add_argument("--cluster", default="dev")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--touch", type=int, default=None, help="index of the tier the one-tier PR touches (default: the middle)")
    parser.add_argument("--repeat", type=int, default=1, help="timed runs per figure, fastest reported (default 1)")
    parser.add_argument("--keep", type=Path, help="generate here and keep it (must be empty or absent)")
    parser.add_argument("--charts", action="store_true", help="the HelmRelease scenario: cold check with charts, tree peak RSS, warm one-chart bump")
    parser.add_argument("--releases", type=int, default=150, help="HelmReleases in the --charts repository (default 150)")
    args = parser.parse_args(argv)

    binary = locate_kustomize()
    with tempfile.TemporaryDirectory(prefix="fluxwarden-bench-") as tmp:
        root = args.keep or Path(tmp) / "repo"
        start = time.perf_counter()
        repo = generate(root, tiers=args.tiers, objects=args.objects, seed=args.seed, releases=args.releases if args.charts else 0)
        generated_in = time.perf_counter() - start
        if args.cluster not in repo.clusters:
            parser.error(f"--cluster must be one of {', '.join(repo.clusters)}")
        bench = Bench(
            repo=repo,
            work=Path(tmp) / "work",
            binary=binary,
            cluster=args.cluster,
            jobs=args.jobs or default_jobs(),
            touch_index=args.touch if args.touch is not None else len(repo.tiers) // 2,
            repeat=max(1, args.repeat),
        )
        bench.work.mkdir()
        kustomize_seconds(bench, bench.raw_tree / "tiers" / repo.tiers[0])  # warm the binary into the page cache
        print(
            f"fluxwarden bench: {len(repo.tiers)} tiers, {repo.objects:,} objects, clusters {', '.join(repo.clusters)} "
            f"(checking {args.cluster}; the engine also renders the others for graph-drift), --jobs {bench.jobs}, "
            f"{os.cpu_count()} CPUs, {Path(binary.path).name} (kustomize {binary.version}); generated in {_s(generated_in)}; "
            + (f"{len(repo.releases)} HelmReleases over {len(repo.charts)} charts; medians of {bench.repeat}" if args.charts else f"best of {bench.repeat}")
            + f"; load average {_load()} at start",
            flush=True,
        )
        rows: list[Row] = []
        for measure in CHART_MEASUREMENTS if args.charts else MEASUREMENTS:
            rows.extend(measure(bench))
        print(format_table(sorted(rows, key=lambda r: r.figure)))  # stable: grouped (a)..(e), in measured order
        print(f"load average {_load()} at the end (other work on the machine slows every figure)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
