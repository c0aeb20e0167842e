"""ConfigMaps and Secrets that exist only on a cluster (Terraform or an operator made them): read live, or declared in a file.

A tier's `postBuild.substituteFrom` source that no build in git holds is looked up here: the live cluster's answer
(`fluxwarden check --live`, the bot where it reads the cluster) or the file `clusters.<name>.cluster_objects`
declares. Secret values are kept only to be substituted as a mask (bot/engine/render/finish.py): they never reach an object.
"""

from __future__ import annotations

import base64
import binascii
import posixpath
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from bot.engine.core.errors import ConfigError, InputError
from bot.engine.core.tree import CONFIG_FILE, RepoTree
from bot.engine.render.yamlio import load_all

ConfigKey = tuple[str, str, str]  # (ConfigMap | Secret, namespace, name)
MAX_LIVE_SOURCES = 64  # at most this many ConfigMaps/Secrets are read from a cluster per render
MAX_DECLARED_BYTES = 4 << 20  # a declared file (or the files of a declared directory) past this is not read
_KINDS = ("ConfigMap", "Secret")


@dataclass(frozen=True)
class ClusterObject:
    """One ConfigMap or Secret as the cluster has it: its data (Secret data decoded), absent, or unreadable."""

    kind: str
    namespace: str
    name: str
    data: Mapping[str, str] | None = field(default=None, repr=False)  # None: absent (or unreadable, see `error`)
    where: str = "the cluster"  # "the cluster" (read live) or the declaring file's path
    error: str | None = None  # the read failed (forbidden, unreachable): nothing is known

    @property
    def key(self) -> ConfigKey:
        return (self.kind, self.namespace, self.name)

    @property
    def found(self) -> bool:
        return self.data is not None


# Reads the named ConfigMaps/Secrets from the live cluster (bot/adapters/kube.py `ConfigReader`); never raises.
ConfigFetcher = Callable[[Sequence[ConfigKey]], Sequence[ClusterObject]]


def object_data(body: Mapping[str, Any], *, live: bool) -> dict[str, str]:
    """Key/values as kustomize-controller reads them: a ConfigMap's `data`, a Secret's `data` base64-decoded
    (fluxcd/pkg kustomize/kustomize_varsub.go loadVars reads `.Data` of both). A declared file, written by hand,
    may also use a Secret's `stringData`; the API server never returns it (it merges it into `data`)."""
    out: dict[str, str] = {}
    raw = body.get("data")
    for key, value in (raw.items() if isinstance(raw, Mapping) else ()):
        if body.get("kind") == "Secret":
            try:
                out[str(key)] = base64.b64decode(str(value), validate=True).decode("utf-8", errors="replace")
            except (binascii.Error, ValueError):
                out[str(key)] = ""
        else:
            out[str(key)] = "" if value is None else str(value)
    string_data = body.get("stringData")
    if not live and body.get("kind") == "Secret" and isinstance(string_data, Mapping):
        out.update({str(k): "" if v is None else str(v) for k, v in string_data.items()})
    return out


def declared_objects(snapshot: RepoTree, paths: Iterable[str]) -> dict[ConfigKey, ClusterObject]:
    """The ConfigMaps and Secrets of the declared files (a directory: its YAML files, not below); first wins.

    Raises ConfigError for a path that is not there, a file that is not YAML, an object without name and namespace.
    """
    out: dict[ConfigKey, ClusterObject] = {}
    budget = MAX_DECLARED_BYTES
    for path in paths:
        if snapshot.is_file(path):
            files = [path]
        elif snapshot.is_dir(path):
            files = sorted(posixpath.join(path, f) for f in snapshot.list_dir(path)[1] if f.endswith((".yaml", ".yml")))
        else:
            raise ConfigError(f"{CONFIG_FILE}: `cluster_objects` names {path!r}, which is not a file or directory of the repository")
        for file in files:
            data = snapshot.read_bytes(file) or b""
            budget -= len(data)
            if budget < 0:
                raise ConfigError(f"{CONFIG_FILE}: `cluster_objects` files are past {MAX_DECLARED_BYTES >> 20} MiB at {file}")
            try:
                documents = load_all(data.decode("utf-8"), file)
            except (InputError, UnicodeDecodeError) as exc:
                raise ConfigError(f"{CONFIG_FILE}: `cluster_objects` file {file} is not valid YAML ({exc})") from None
            for body in documents:
                if not isinstance(body, Mapping) or body.get("kind") not in _KINDS or str(body.get("apiVersion", "v1")) != "v1":
                    continue
                meta = body.get("metadata")
                name, namespace = (meta.get("name"), meta.get("namespace")) if isinstance(meta, Mapping) else (None, None)
                if not isinstance(name, str) or not isinstance(namespace, str):
                    raise ConfigError(f"{CONFIG_FILE}: `cluster_objects`: a {body.get('kind')} in {file} needs metadata.name and metadata.namespace")
                obj = ClusterObject(str(body["kind"]), namespace, name, object_data(body, live=False), where=file)
                out.setdefault(obj.key, obj)
    return out
