"""One tier through kustomize: check what it reads, write Flux's overlay, run the build, parse the output; and
where in the repository an object was written."""

from __future__ import annotations

import itertools
import os
import posixpath
import re
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

import yaml

from bot.adapters.kustomize import KustomizeBinary, binary_failure, run_build
from bot.adapters.memory import LIMIT_PREFIX
from bot.adapters.workspace import Snapshot, write_build_root
from bot.engine.core.errors import BuildStopped, InputError, KustomizeNotFound, LimitError, RenderError
from bot.engine.render.facts import ObjectStub
from bot.engine.render.finish import parse_output
from bot.engine.render.flux import OperatorSync
from bot.engine.render.generate import _REMOTE as REMOTE_REFERENCE, KustomizationIndex, RemotePlan
from bot.engine.core.model import Cause, Finding, Manifest, Severity, SourceLocation, TierId, TierSpec
from bot.engine.render.rendered import DocumentIndex, RawTier, build_key, render_failed, render_limit, unsafe_path
from bot.engine.core.tree import normalise_repo_path
from bot.engine.render.yamlio import FastSafeLoader, find_duplicate_key
from bot.pipeline.memo import BuildMemo, ContentHasher, LineMemo


_PROBLEM_FINDINGS = {"render-failed": render_failed, "render-limit": render_limit}  # by PathProblem.check; else unsafe-path


@dataclass(frozen=True)
class _Components:
    """A tier's components, each in the form one reader of it needs."""

    written: list[str]  # as written, for the kustomization file
    joined: list[str]  # joined to the path, as kustomize joins them
    real: list[str]  # where they are, for the pre-scan
    missing: set[str]  # skipped components: the build changes when one appears


class TierBuilder:
    """Runs kustomize for one tier at a time (thread-safe), on a snapshot's files, keeping the builds it makes."""

    def __init__(
        self, snapshot: Snapshot, binary: KustomizeBinary, work: Path, memo: BuildMemo, *, timeout: float, max_objects: int | None = None
    ) -> None:
        self.snapshot = snapshot
        self.max_objects = max_objects  # objects one build may produce (RenderLimits.tier_objects)
        self.binary = binary
        self.timeout = timeout
        self.memo = memo
        self.work = work
        self.index = KustomizationIndex(snapshot)
        self.hasher = ContentHasher(snapshot)
        self.output_bytes = 0  # kustomize output read so far (see RenderLimits.output_bytes)
        self.builds_run = 0
        self._counter = itertools.count(1)
        self._lock = threading.Lock()

    def build(self, spec: TierSpec) -> RawTier:
        """kustomize build of one tier's path, its kustomization rewritten with the spec; never raises for bad input."""
        tier = spec.id
        # The controller builds at the path without symlinks (securejoin), and kustomize loads every
        # kustomization there: relative paths count from where a directory really is.
        root = self.snapshot.real_path(spec.path)
        if root is None:
            return RawTier(spec, failed=True, findings=(unsafe_path(tier, f"path {spec.path!r} resolves through a symlink to outside the repository", spec.origin),))
        if not self.snapshot.is_dir(root):
            return RawTier(spec, failed=True, findings=(render_failed(tier, f"path {spec.path or '.'!r} not found in the repository", spec.origin),))
        components = self._components(spec, root)
        if isinstance(components, Finding):
            return RawTier(spec, failed=True, findings=(components,))
        known = self.memo.tree_build(build_key(spec))
        if known is not None:
            return known.for_spec(spec)
        dirs, files, problems = self.index.reach(root, components.real, aliases=False)
        plan = self.index.remote_plan(dirs, root, list(zip(components.joined, components.real)))
        problems += plan.problems
        inputs = frozenset(dirs | files | components.missing)
        generated = {d for d in dirs if self.index.is_generated(d)}
        reached = with_ancestors(inputs)
        refused = [r for r in self.snapshot.refused if r.path in reached or _under_any(r.path, generated)]
        cache_key = None
        if self.memo.cache is not None and not (problems or refused):
            cache_key = self.hasher.key([self.binary.version, build_key(spec)], inputs)
            cached = self.memo.cached(spec, inputs, cache_key)
            if cached is not None:
                return replace(cached, remote=plan.entries)  # only a build that passed every check below is cached: this content was checked already
        problems += self.index.alias_problems(files)
        if problems or refused:
            findings = [
                _PROBLEM_FINDINGS.get(p.check, unsafe_path)(tier, f"{p.file}: {p.reference + ' ' if p.reference else ''}{p.reason}", SourceLocation(p.file))
                for p in problems
            ] + [unsafe_path(tier, f"{r.path} {r.reason}", SourceLocation(r.path)) for r in refused]
            return RawTier(spec, inputs=inputs, failed=True, findings=tuple(findings))
        raw = self._run(spec, root, components, dirs, files, inputs, cache_key, plan)
        if not raw.failed:
            self.memo.store(raw)
        return raw

    def _components(self, spec: TierSpec, root: str) -> _Components | Finding:
        """Where a tier's components are, or the finding that fails its build."""
        tier = spec.id
        out = _Components([], [], [], set())
        for comp in spec.components:
            if posixpath.isabs(comp.strip()) or REMOTE_REFERENCE.search(comp):
                # fluxcd/pkg kustomize_generator.go: "component path must be local and relative".
                return unsafe_path(tier, f"component {comp!r} is not a path inside the repository", spec.origin)
            normal = normalise_repo_path(posixpath.join(root, comp))
            if normal is None:
                return unsafe_path(tier, f"component {comp!r} climbs out of the repository", spec.origin)
            real = self.snapshot.real_path(normal)
            if real is None:
                return unsafe_path(tier, f"component {comp!r} resolves through a symlink to outside the repository", spec.origin)
            if not self.snapshot.exists(real):
                if spec.ignore_missing_components:
                    out.missing.add(real)
                    continue  # GenerateManifest skips it
                return render_failed(tier, f"component {comp!r} not found ({normal or '.'}); without spec.ignoreMissingComponents the build fails", spec.origin)
            out.written.append(comp)
            out.joined.append(normal)
            out.real.append(real)
        return out

    def _run(
        self,
        spec: TierSpec,
        root: str,
        components: _Components,
        dirs: set[str],
        files: set[str],
        inputs: frozenset[str],
        cache_key: str | None,
        plan: RemotePlan,
    ) -> RawTier:
        """Write the tier's files and Flux's overlay, run kustomize, parse what it printed."""
        tier = spec.id

        def failed(message: str, location: SourceLocation | None = spec.origin, cause: Cause | None = None) -> RawTier:
            return RawTier(spec, inputs=inputs, failed=True, findings=(render_failed(tier, message, location, cause=cause),))

        try:
            self.snapshot.materialize(dirs, files)
        except OSError as exc:  # e.g. a path too long for this filesystem
            return failed(f"the tier's files cannot be written for kustomize ({exc.strerror})")
        workdir = self.work / f"{next(self._counter):05d}"
        try:
            reached = [*self.index.info(root).references, *components.joined]
            build_dir, layout = write_build_root(self.snapshot, spec, root, components.written, reached, workdir, plan, self.index)
        except InputError as exc:
            kustomization_path = self.index.info(root).file
            location = SourceLocation(kustomization_path) if kustomization_path else spec.origin
            if isinstance(exc, LimitError):
                return RawTier(spec, inputs=inputs, failed=True, findings=(render_limit(tier, f"{kustomization_path or spec.path}: {exc}", location),))
            return failed(str(exc), location)
        except OSError as exc:
            return failed(f"the tier's files cannot be written for kustomize ({exc.strerror})")
        try:
            text = run_build(self.binary, build_dir, sandbox_home=self.work / "home", timeout=self.timeout)
        except RenderError as exc:
            if not isinstance(exc, BuildStopped) and (broken := binary_failure(self.binary, self.work / "home")):
                raise KustomizeNotFound(broken) from None  # the binary, not this tier: the run stops, saying so once
            message, location = self.sanitise(str(exc), workdir), spec.origin
            if message.startswith(LIMIT_PREFIX):  # it cannot be rendered within the memory of all renders: no verdict
                stopped = replace(render_limit(tier, message, location), cause=Cause.STOPPED)
                return RawTier(spec, inputs=inputs, failed=True, findings=(stopped,))
            repeated = find_duplicate_key(message, files, self.snapshot.read_text)  # kustomize names no file for it
            if repeated is not None:
                message, location = f"{message} (in {repeated[0]}, line {repeated[1]})", SourceLocation(*repeated)
            return failed(message, location, Cause.STOPPED if isinstance(exc, BuildStopped) else None)
        with self._lock:
            self.output_bytes += len(text)
        try:
            documents = parse_output(text, root, self.max_objects)
        except LimitError as exc:
            location = SourceLocation(exc.file) if exc.file else spec.origin
            return RawTier(spec, inputs=inputs, failed=True, findings=(render_limit(tier, self.sanitise(str(exc), workdir), location),))
        except InputError as exc:
            return failed(self.sanitise(str(exc), workdir))
        with self._lock:  # worker threads count concurrently
            self.builds_run += 1
        if layout.empty is not None:  # not cached: whether it builds depends on the cluster's Flux (see RawTier.empty)
            return RawTier(spec, documents=tuple(documents), inputs=inputs, index=DocumentIndex.of(documents), empty=layout.empty, remote=plan.entries)
        return RawTier(spec, documents=tuple(documents), inputs=inputs, content_key=cache_key, index=DocumentIndex.of(documents), remote=plan.entries)

    def patched_sync(self, sync: OperatorSync, tier: TierId, origin: SourceLocation | None, findings: list[Finding]) -> Mapping[str, Any]:
        """The operator's sync Kustomization with the FluxInstance's patches that target it, applied by kustomize."""
        if not sync.patches:
            return sync.kustomization
        workdir = self.work / f"sync-{next(self._counter):05d}"
        workdir.mkdir(parents=True)
        (workdir / "sync.yaml").write_text(yaml.safe_dump(dict(sync.kustomization)), encoding="utf-8")
        kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": ["sync.yaml"], "patches": list(sync.patches)}
        (workdir / "kustomization.yaml").write_text(yaml.safe_dump(kustomization), encoding="utf-8")
        try:
            text = run_build(self.binary, workdir, sandbox_home=self.work / "home", timeout=self.timeout)
            body = yaml.load(text, Loader=FastSafeLoader)
        except (RenderError, InputError, yaml.YAMLError) as exc:
            findings.append(
                Finding(
                    "not-rendered",
                    Severity.INFO,
                    f"the FluxInstance's kustomize.patches could not be applied to its sync Kustomization ({self.sanitise(str(exc), workdir)}); "
                    "the entry tier is rendered without them",
                    kustomization=tier,
                    location=origin,
                )
            )
            return sync.kustomization
        return body if isinstance(body, dict) else sync.kustomization

    def sanitise(self, message: str, workdir: Path | None = None) -> str:
        """Make kustomize's message postable: repo-relative paths, nothing of the host's filesystem."""
        text = message
        # kustomize names files by the path it built (the mirror) or by their symlink-free one (the snapshot).
        roots = [workdir / "repo"] if workdir is not None else []
        for root in [*roots, self.snapshot.root]:
            for form in dict.fromkeys((str(root), os.path.realpath(root))):
                text = text.replace(form + "/", "").replace(form, ".")
        if workdir is not None:
            text = text.replace(str(workdir), "<overlay>")
        text = text.replace(str(self.work), "<work>")
        # (not after `]`: kustomize writes ids as `ConfigMap.v1.[noGrp]/name.[noNs]`)
        text = re.sub(r"(?<![\w.<\]])/(?:[\w.@+-]+/)*[\w.@+-]+", "<path outside the repository>", text)
        lines = [line for line in text.splitlines() if line.strip()]
        text = " ".join(lines[:6])
        return text if len(text) <= 800 else text[:797] + "..."


class Locator:
    """The `file:line` of the document that produced an object, found on demand."""

    def __init__(self, lines: LineMemo) -> None:
        self.lines = lines

    def locate(self, manifest: Manifest | ObjectStub) -> SourceLocation | None:
        """Where the object was written: its origin file, at the line of its document when found there."""
        origin = manifest.origin
        if origin is None or origin.line is not None:
            return origin
        heads, exact = self.lines.heads(origin.file)
        ref = manifest.ref
        # The document with the same name in the same namespace: two documents of a file may share a name
        # (a Secret per namespace); then one the build put in its namespace, then the first of that name.
        line = exact.get((ref.kind, ref.name, ref.namespace)) or exact.get((ref.kind, ref.name, "")) or exact.get((ref.kind, ref.name))
        if line is not None:  # the name as written: nothing longer can match
            return SourceLocation(origin.file, line)
        # The longest written name inside the rendered one: `web` must not claim `x-web-config` (namePrefix).
        matches = [h for h in heads if h.kind == ref.kind and h.name and h.name in ref.name]
        if matches:
            best = max(matches, key=lambda h: (len(h.name), h.namespace == ref.namespace))
            return SourceLocation(origin.file, best.line)
        return origin


def with_ancestors(paths: frozenset[str]) -> set[str]:
    """The paths and every directory above them (the root as "")."""
    out = {""}
    for path in paths:
        while path:
            out.add(path)
            path = posixpath.dirname(path)
    return out



def _under_any(path: str, dirs: set[str]) -> bool:
    return any(d == "" or path == d or path.startswith(d + "/") for d in dirs)
