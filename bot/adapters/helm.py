"""Helm chart rendering through helm-python-sdk (Helm v4's Go SDK), always inside a worker process.

The only importer of `helm_python`, and only inside the functions that run in a worker: the bot's own
process never loads the Go runtime (it would then be unsafe to fork, and its RSS would grow by the SDK).
"""

from __future__ import annotations

import gzip
import io
import json
import posixpath
import tarfile
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from bot.adapters.workers import WorkerError, WorkerMemoryExceeded, WorkerPool, WorkerTimeout
from bot.engine.render.chartrender import (
    ChartRenderFailure,
    ChartRenderRequest,
    ChartRenderResult,
    drop_test_hooks,
    effective_values_files,
    failure,
    is_manifest,
    merge_maps,
    mentions_unseeded,
    stabilise_text,
)
from bot.engine.core.errors import InfraError

if TYPE_CHECKING:
    from helm_python import Chart

MiB = 2**20
DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_RSS = 1024 * MiB
DEFAULT_MAX_OUTPUT = 64 * MiB
_MAX_SCANNED = 64 * MiB  # template source read from an archive when looking for unseeded functions
_MAX_NESTING = 8  # charts/ inside charts/ inside ...
_VALUES = "values.yaml"


class HelmSDKError(InfraError):
    """The Helm SDK failed in a way that says nothing about the chart (a bad request, a library fault)."""


class _Stop(Exception):
    """A render step ended in a failure to report (internal to the worker)."""

    def __init__(self, failure: ChartRenderFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


class HelmRenderer:
    """Renders charts in the pool's workers; a chart's problem is a ChartRenderFailure, never an exception."""

    def __init__(self, pool: WorkerPool, *, timeout: float = DEFAULT_TIMEOUT, max_rss: int = DEFAULT_MAX_RSS, max_output: int = DEFAULT_MAX_OUTPUT) -> None:
        self.pool = pool
        self.timeout = timeout
        self.max_rss = max_rss
        self.max_output = max_output
        self._warm_lock = threading.Lock()
        self._warmed = False
        self._warm_done = threading.Event()

    def prewarm(self) -> None:
        """Start one worker and load the SDK into it in the background (once): the first render then skips that wait."""
        with self._warm_lock:
            if self._warmed:
                return
            self._warmed = True
        threading.Thread(target=self._warm, name="helm-prewarm", daemon=True).start()

    def _warm(self) -> None:
        try:
            self.pool.call(warm_up, timeout=self.timeout, max_rss=self.max_rss)
        except (WorkerError, HelmSDKError, OSError):
            pass  # a real render meets the same problem and reports it
        finally:
            self._warm_done.set()

    def render(self, request: ChartRenderRequest) -> ChartRenderResult | ChartRenderFailure:
        """Render one chart; raises only for infrastructure (WorkerCrashed, WorkerPoolClosed, HelmSDKError)."""
        if self._warmed:
            # The worker being warmed is nearly ready: starting another would cost the whole start-up again.
            self._warm_done.wait(self.timeout)
        try:
            result: ChartRenderResult | ChartRenderFailure = self.pool.call(
                render_chart, request, self.max_output, timeout=self.timeout, max_rss=self.max_rss
            )
        except WorkerTimeout:
            return failure("timeout", f"the chart did not render within {self.timeout:g} s (a template that loops?)")
        except WorkerMemoryExceeded:
            return failure("memory", f"rendering the chart took over {self.max_rss // MiB} MiB of memory")
        return result


# -- in the worker ---------------------------------------------------------------------------------------


def warm_up() -> bool:
    """Load the SDK (and with it the Go runtime) into this worker; True when it loaded."""
    import helm_python  # noqa: F401 - the import is the work

    return True


def render_chart(request: ChartRenderRequest, max_output: int) -> ChartRenderResult | ChartRenderFailure:
    """Load, compose the default values, render (twice when a template is unseeded) and finish one chart."""
    import helm_python as helm

    with tempfile.TemporaryDirectory(prefix="fluxwarden-chart-") as scratch:
        hide = [p for p in (request.chart_dir, scratch, str(Path(scratch).resolve())) if p]
        try:
            archive = request.archive if request.archive is not None else _archive_of(request.chart_dir or "", scratch)
            chart = _load(archive)
            try:
                if request.source_values is not None:
                    merged: dict[str, Any] | None = _merged_source_values(request.source_values)
                else:
                    files = effective_values_files(request.values_files)
                    merged = _merged_values(chart, files, request.ignore_missing_values_files) if files else None
                if merged is not None:
                    archive = _with_default_values(archive, merged)
                    chart.close()
                    chart = _load(archive)
                return _render(chart, archive, request, max_output)
            finally:
                chart.close()
        except _Stop as stop:
            return failure(stop.failure.kind, stop.failure.message, hide)
        except helm.HelmError as exc:
            raise HelmSDKError(failure("chart", f"{type(exc).__name__}: {exc}", hide).message) from None


def _archive_of(chart_dir: str, scratch: str) -> bytes:
    """A chart directory packaged by Helm's own loader and writer (.helmignore applies), as archive bytes."""
    import helm_python as helm

    try:
        with helm.Chart.load(chart_dir) as chart:
            return Path(chart.save(scratch)).read_bytes()
    except (helm.HelmChartLoadError, helm.HelmChartInvalidError, helm.HelmInvalidArgError, helm.HelmIOError) as exc:
        raise _Stop(ChartRenderFailure("chart", f"the chart cannot be loaded: {exc}")) from None


def _load(archive: bytes) -> Chart:
    import helm_python as helm

    try:
        return helm.Chart.load_archive(archive)
    except (helm.HelmChartLoadError, helm.HelmChartInvalidError, helm.HelmInvalidArgError) as exc:
        raise _Stop(ChartRenderFailure("chart", f"the chart cannot be loaded: {exc}")) from None


def _parsed_values(name: str, data: str) -> dict[str, Any]:
    import helm_python as helm

    try:
        values = helm.values_from_yaml(data) if data.strip() else {}
    except helm.HelmError as exc:
        raise _Stop(ChartRenderFailure("values", f"unmarshaling values from '{name}' failed: {exc}")) from None
    return values if isinstance(values, dict) else {}


def _merged_source_values(files: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """A GitRepository chart's valuesFiles (read from the source root by the caller) deep-merged in order.

    source-controller internal/helm/chart builder_local.go mergeFileValues: `values.yaml` is not special there.
    """
    merged: dict[str, Any] = {}
    for name, data in files:
        merged = merge_maps(merged, _parsed_values(name, data))
    return merged


def _merged_values(chart: Chart, files: tuple[str, ...], ignore_missing: bool = False) -> dict[str, Any]:
    """The files' values deep-merged in order, later over earlier; `values.yaml` stands for the chart's defaults.

    As source-controller composes a HelmChart's spec.valuesFiles (internal/helm/chart builder_remote.go
    mergeChartValues): the result *replaces* the chart's values.yaml, which counts only where it is listed.
    """
    by_name = {entry["name"]: entry["data"] for entry in chart.files}
    merged: dict[str, Any] = {}
    for name in files:
        clean = posixpath.normpath(name)
        if clean == _VALUES:
            merged = merge_maps(merged, chart.values)
            continue
        data = by_name.get(clean)
        if data is None:
            if ignore_missing:  # spec.ignoreMissingValuesFiles (source-controller v1.3)
                continue
            raise _Stop(ChartRenderFailure("values", f"no values file found at path '{name}'"))
        merged = merge_maps(merged, _parsed_values(name, data))
    return merged


def _with_default_values(archive: bytes, values: dict[str, Any]) -> bytes:
    """The archive with its top-level values.yaml replaced (source-controller OverwriteChartDefaultValues)."""
    out = io.BytesIO()
    found = False
    # JSON is YAML, and reads back exactly as Helm's sigs.k8s.io/yaml decodes the merged map.
    text = json.dumps(values, sort_keys=True).encode() if values else b""
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:*") as source, tarfile.open(fileobj=out, mode="w") as target:
        for member in source:
            data = source.extractfile(member) if member.isfile() else None
            parts = member.name.strip("/").split("/")
            if member.isfile() and len(parts) == 2 and parts[1] == _VALUES and not found:
                found = True
                member.size = len(text)
                target.addfile(member, io.BytesIO(text))
            else:
                target.addfile(member, data)
    if not found:
        raise _Stop(ChartRenderFailure("values", f"failed to locate values file: {_VALUES}"))
    return gzip.compress(out.getvalue(), mtime=0)


def _template_sources(archive: bytes, depth: int = 0, budget: list[int] | None = None) -> Iterator[str]:
    """Every template source in the archive, its subcharts' too (packaged under charts/ or unpacked)."""
    budget = [_MAX_SCANNED] if budget is None else budget
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:*") as tar:
            for member in tar:
                if not member.isfile() or member.size > budget[0]:
                    continue
                name = member.name
                nested = name.endswith(".tgz") and "/charts/" in name and depth < _MAX_NESTING
                if "/templates/" not in name and not nested:
                    continue
                handle = tar.extractfile(member)
                if handle is None:
                    continue
                data = handle.read()
                budget[0] -= len(data)
                if nested:
                    yield from _template_sources(data, depth + 1, budget)
                else:
                    yield data.decode("utf-8", "replace")
    except (tarfile.TarError, OSError, EOFError):
        return  # Helm loaded it, so this is a part Helm ignores


def _render_once(chart: Chart, request: ChartRenderRequest, max_output: int) -> dict[str, str]:
    import helm_python as helm
    from helm_python import _native

    try:
        # Not Chart.render: it cannot pass kube_version and api_versions, which `.Capabilities` follows.
        out = _native.call_string("helm_render", chart._raw(), request.values_json(), request.options_json())
    except helm.HelmRenderError as exc:
        raise _Stop(ChartRenderFailure("template", str(exc))) from None
    except helm.HelmValuesError as exc:
        raise _Stop(ChartRenderFailure("values", str(exc))) from None
    except (helm.HelmChartLoadError, helm.HelmChartInvalidError) as exc:
        raise _Stop(ChartRenderFailure("chart", str(exc))) from None
    if len(out) > max_output:
        raise _Stop(ChartRenderFailure("output", f"the chart rendered {len(out) // MiB} MiB, over the {max_output // MiB} MiB limit"))
    rendered: dict[str, str] = json.loads(out)
    return rendered


def _render(chart: Chart, archive: bytes, request: ChartRenderRequest, max_output: int) -> ChartRenderResult:
    first = _render_once(chart, request, max_output)
    masked = 0
    if mentions_unseeded(_template_sources(archive)):
        second = _render_once(chart, request, max_output)
        for path in sorted(first.keys() | second.keys()):
            first[path], count = stabilise_text(first.get(path, ""), second.get(path, ""))
            masked += count
    manifests = []
    for path, text in sorted(first.items()):
        text = drop_test_hooks(text)
        if is_manifest(path, text):
            manifests.append((path, text))
    metadata = chart.metadata
    return ChartRenderResult(
        chart_name=str(metadata.get("name", "")),
        chart_version=str(metadata.get("version", "")),
        app_version=str(metadata.get("appVersion", "") or ""),
        manifests=tuple(manifests),
        # Read after the render on purpose: rendering processes the dependencies in place, dropping the
        # subcharts a condition or tag disables, and only the rest's crds/ are installed (helm/helm
        # pkg/action/install.go: CRDObjects after ProcessDependenciesWithMerge; helm-controller
        # internal/action/crds.go applyCRDs likewise).
        crds=tuple(sorted((crd["filename"], crd["data"]) for crd in chart.crds)),
        dependencies=tuple(sorted(str(dep.get("name", "")) for dep in chart.dependencies)),
        masked=masked,
    )
