"""Helm charts for tests: chart directories written under tmp_path, packaged by Helm itself into .tgz archives."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml


def write_chart(
    root: Path,
    name: str,
    version: str = "0.1.0",
    *,
    templates: Mapping[str, str] | None = None,
    crds: Mapping[str, str] | None = None,
    values: Mapping[str, Any] | None = None,
    files: Mapping[str, str] | None = None,
    dependencies: Iterable[Path] = (),
    library: bool = False,
    app_version: str | None = None,
    conditions: Mapping[str, str] | None = None,
    tags: Mapping[str, list[str]] | None = None,
    declared: Iterable[Mapping[str, Any]] = (),
) -> Path:
    """Write `root/name/` as a chart; `dependencies` are chart directories, packaged into its charts/.

    `conditions` and `tags` (by dependency name) go into its Chart.yaml entries; `declared` adds
    Chart.yaml dependency entries as written, with nothing vendored for them.

    `templates` and `crds` map file names (under templates/ and crds/) to text; `files` maps other
    chart-relative paths (extra values files) to text.
    """
    chart = root / name
    chart.mkdir(parents=True)
    metadata: dict[str, Any] = {"apiVersion": "v2", "name": name, "version": version, "type": "library" if library else "application"}
    if app_version is not None:
        metadata["appVersion"] = app_version
    subcharts = [Path(dep) for dep in dependencies]
    if subcharts:
        metadata["dependencies"] = [{"name": _meta(dep)["name"], "version": _meta(dep)["version"]} for dep in subcharts]
        for entry in metadata["dependencies"]:
            if entry["name"] in (conditions or {}):
                entry["condition"] = (conditions or {})[entry["name"]]
            if entry["name"] in (tags or {}):
                entry["tags"] = (tags or {})[entry["name"]]
    if declared:
        metadata.setdefault("dependencies", []).extend(dict(entry) for entry in declared)
    (chart / "Chart.yaml").write_text(yaml.safe_dump(metadata, sort_keys=False))
    (chart / "values.yaml").write_text(yaml.safe_dump(dict(values or {}), sort_keys=False))
    for folder, entries in (("templates", templates), ("crds", crds)):
        for file_name, text in (entries or {}).items():
            _write(chart / folder / file_name, text)
    for relative, text in (files or {}).items():
        _write(chart / relative, text)
    for dep in subcharts:
        package_chart(dep, chart / "charts")
    return chart


def package_chart(chart_dir: Path, dest: Path) -> Path:
    """`helm package` the chart directory into `dest`; the archive's path."""
    import helm_python  # only here: the test process loads the Go runtime only when a test packages a chart

    dest.mkdir(parents=True, exist_ok=True)
    return Path(helm_python.package(chart_dir, destination=dest))


def chart_archive(chart_dir: Path, dest: Path) -> bytes:
    """The packaged chart's bytes (what a HelmRepository or OCI registry serves)."""
    return package_chart(chart_dir, dest).read_bytes()


def _meta(chart_dir: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((chart_dir / "Chart.yaml").read_text())
    return loaded


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
