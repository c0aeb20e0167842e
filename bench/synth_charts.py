"""Helm charts and HelmReleases for the synthetic repository (`bench.synth.generate(..., releases=N)`).

Charts are directories of the repository itself (`charts/NAME`, a GitRepository flux-system source: no
network), written as a chart author would: `_helpers.tpl`, a Deployment, Service, ServiceAccount, ConfigMap
and RBAC per release; a few operator charts ship about five CRDs of a few hundred lines in `crds/`; some
app charts carry subcharts as directories under their own `charts/` (a Redis StatefulSet, a library chart
of shared labels), which Helm loads as it loads packaged ones. Everything is a pure function of its inputs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import yaml

HELM_API = "helm.toolkit.fluxcd.io/v2"
_OPERATOR_KINDS = ("Cluster", "Backup", "Pooler", "ScheduledTask", "Policy")


@dataclass(frozen=True)
class ChartShape:
    """One synthetic chart: its name, whether it ships CRDs, and its subcharts."""

    name: str
    operator: bool = False  # crds/ with five CRDs, a ClusterRole; one release only (a CRD has one owner)
    redis: bool = False  # a `redis` subchart (a directory under charts/), enabled by `redis.enabled`
    common: bool = False  # a `common` library subchart whose labels the chart includes


# Ten app charts (three with a Redis subchart, four with the library) and three operators. The last app chart
# is used by a single release: the bench's one-chart bump.
CHARTS: tuple[ChartShape, ...] = (
    ChartShape("webapp", common=True),
    ChartShape("api-server", redis=True, common=True),
    ChartShape("queue-worker", redis=True),
    ChartShape("edge-proxy"),
    ChartShape("cron-runner", common=True),
    ChartShape("metrics-agent"),
    ChartShape("blob-store", redis=True),
    ChartShape("dashboard", common=True),
    ChartShape("notify-hub"),
    ChartShape("status-page"),
    ChartShape("pg-operator", operator=True),
    ChartShape("mq-operator", operator=True),
    ChartShape("cert-operator", operator=True),
)
SINGLE_RELEASE_CHART = "status-page"


def crd_group(chart: str) -> str:
    return f"{chart.replace('-', '')}.bench.example.com"


def operator_kinds(chart: str) -> list[tuple[str, str, str]]:
    """(group, kind, plural) of the CRDs an operator chart installs."""
    return [(crd_group(chart), kind, kind.lower() + "s") for kind in _OPERATOR_KINDS]


def _dump(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False, width=120)


# -- templates ----------------------------------------------------------------------------------------

_HELPERS = """\
{{/* Expand the name of the chart. */}}
{{- define "CHART.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* A fully qualified app name: the release name, as most charts do when it contains the chart's. */}}
{{- define "CHART.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "CHART.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "CHART.selectorLabels" -}}
app.kubernetes.io/name: {{ include "CHART.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "CHART.labels" -}}
LABELS
{{ include "CHART.selectorLabels" . }}
{{- with .Values.extraLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}
"""

_OWN_LABELS = """\
helm.sh/chart: {{ include "CHART.chart" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}"""

_COMMON_LABELS = '{{ include "common.labels" . }}'

_DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "CHART.fullname" . }}
  labels:
    {{- include "CHART.labels" . | nindent 4 }}
spec:
  replicas: {{ .Values.replicaCount }}
  revisionHistoryLimit: 3
  selector:
    matchLabels:
      {{- include "CHART.selectorLabels" . | nindent 6 }}
  template:
    metadata:
      annotations:
        checksum/config: {{ include (print $.Template.BasePath "/configmap.yaml") . | sha256sum }}
        {{- with .Values.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      labels:
        {{- include "CHART.selectorLabels" . | nindent 8 }}
    spec:
      serviceAccountName: {{ include "CHART.fullname" . }}
      securityContext:
        {{- toYaml .Values.podSecurityContext | nindent 8 }}
      containers:
        - name: {{ .Chart.Name }}
          image: "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
          imagePullPolicy: {{ .Values.image.pullPolicy }}
          {{- with .Values.args }}
          args:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          ports:
            - name: http
              containerPort: {{ .Values.service.targetPort }}
              protocol: TCP
          envFrom:
            - configMapRef:
                name: {{ include "CHART.fullname" . }}
          env:
            - name: POD_NAMESPACE
              valueFrom:
                fieldRef:
                  fieldPath: metadata.namespace
            {{- range $key, $value := .Values.env }}
            - name: {{ $key }}
              value: {{ $value | quote }}
            {{- end }}
            {{- if and (hasKey .Values "redis") .Values.redis.enabled }}
            - name: REDIS_URL
              value: "redis://{{ .Release.Name }}-redis:6379"
            {{- end }}
          livenessProbe:
            httpGet:
              path: {{ .Values.probes.path }}
              port: http
            initialDelaySeconds: 10
            periodSeconds: 20
          readinessProbe:
            httpGet:
              path: {{ .Values.probes.path }}
              port: http
            periodSeconds: 10
          resources:
            {{- toYaml .Values.resources | nindent 12 }}
          securityContext:
            {{- toYaml .Values.securityContext | nindent 12 }}
          volumeMounts:
            - name: tmp
              mountPath: /tmp
      volumes:
        - name: tmp
          emptyDir: {}
      {{- with .Values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
"""

_SERVICE = """\
apiVersion: v1
kind: Service
metadata:
  name: {{ include "CHART.fullname" . }}
  labels:
    {{- include "CHART.labels" . | nindent 4 }}
spec:
  type: {{ .Values.service.type }}
  ports:
    - port: {{ .Values.service.port }}
      targetPort: http
      protocol: TCP
      name: http
  selector:
    {{- include "CHART.selectorLabels" . | nindent 4 }}
"""

_SERVICE_ACCOUNT = """\
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ include "CHART.fullname" . }}
  labels:
    {{- include "CHART.labels" . | nindent 4 }}
automountServiceAccountToken: {{ .Values.serviceAccount.automount }}
"""

_CONFIGMAP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "CHART.fullname" . }}
  labels:
    {{- include "CHART.labels" . | nindent 4 }}
data:
  {{- range $key, $value := .Values.config }}
  {{ $key }}: {{ $value | quote }}
  {{- end }}
"""

_ROLE = """\
{{- if .Values.rbac.create }}
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ include "CHART.fullname" . }}
  labels:
    {{- include "CHART.labels" . | nindent 4 }}
rules:
  - apiGroups: [""]
    resources: ["configmaps", "secrets"]
    verbs: ["get", "list", "watch"]
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["get", "create", "update"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ include "CHART.fullname" . }}
  labels:
    {{- include "CHART.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ include "CHART.fullname" . }}
subjects:
  - kind: ServiceAccount
    name: {{ include "CHART.fullname" . }}
    namespace: {{ .Release.Namespace }}
{{- end }}
"""

_CLUSTER_ROLE = """\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ include "CHART.fullname" . }}
  labels:
    {{- include "CHART.labels" . | nindent 4 }}
rules:
  - apiGroups: ["GROUP"]
    resources: ["*"]
    verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
  - apiGroups: [""]
    resources: ["pods", "services", "endpoints", "persistentvolumeclaims", "events", "configmaps", "secrets"]
    verbs: ["*"]
  - apiGroups: ["apps"]
    resources: ["deployments", "statefulsets"]
    verbs: ["*"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ include "CHART.fullname" . }}
  labels:
    {{- include "CHART.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ include "CHART.fullname" . }}
subjects:
  - kind: ServiceAccount
    name: {{ include "CHART.fullname" . }}
    namespace: {{ .Release.Namespace }}
"""

_REDIS_STATEFULSET = """\
{{- if .Values.enabled }}
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {{ .Release.Name }}-redis
  labels:
    app.kubernetes.io/name: redis
    app.kubernetes.io/instance: {{ .Release.Name }}
    helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
spec:
  serviceName: {{ .Release.Name }}-redis
  replicas: 1
  selector:
    matchLabels:
      app.kubernetes.io/name: redis
      app.kubernetes.io/instance: {{ .Release.Name }}
  template:
    metadata:
      labels:
        app.kubernetes.io/name: redis
        app.kubernetes.io/instance: {{ .Release.Name }}
    spec:
      containers:
        - name: redis
          image: "{{ .Values.image.repository }}:{{ .Values.image.tag }}"
          args: ["--maxmemory", "{{ .Values.maxmemory }}", "--appendonly", "yes"]
          ports:
            - name: redis
              containerPort: 6379
          resources:
            {{- toYaml .Values.resources | nindent 12 }}
          volumeMounts:
            - name: data
              mountPath: /data
  volumeClaimTemplates:
    - metadata:
        name: data
      spec:
        accessModes: ["ReadWriteOnce"]
        resources:
          requests:
            storage: {{ .Values.storage }}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ .Release.Name }}-redis
  labels:
    app.kubernetes.io/name: redis
    app.kubernetes.io/instance: {{ .Release.Name }}
spec:
  clusterIP: None
  ports:
    - name: redis
      port: 6379
  selector:
    app.kubernetes.io/name: redis
    app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
"""

_COMMON_TPL = """\
{{/* Labels every chart of the bench shares (a library chart, as bitnami's common). */}}
{{- define "common.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: {{ .Release.Namespace }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
{{- end }}
"""

_NOTES = "{{ include \"CHART.fullname\" . }} is installed in {{ .Release.Namespace }}.\n"


def _operator_crd(group: str, kind: str, plural: str, rng: random.Random) -> dict[str, Any]:
    """A CRD of a few hundred lines: a spec of nested, described properties, as controller-gen writes them."""

    def leaf(i: int) -> dict[str, Any]:
        kind_of = ("string", "integer", "boolean", "string")[i % 4]
        out: dict[str, Any] = {"description": f"Field {i} of the {kind} spec: controls one aspect of the managed resource.", "type": kind_of}
        if kind_of == "integer":
            out |= {"minimum": 0, "format": "int32"}
        if kind_of == "string" and i % 8 == 0:
            out["enum"] = ["Always", "IfNotPresent", "Never"]
        return out

    sections = {
        f"section{s}": {
            "description": f"Settings group {s}.",
            "type": "object",
            "properties": {f"field{s}x{i}": leaf(s * 10 + i) for i in range(rng.randint(6, 9))},
        }
        for s in range(6)
    }
    schema = {
        "description": f"{kind} is the Schema for the {plural} API.",
        "type": "object",
        "properties": {
            "apiVersion": {"description": "APIVersion defines the versioned schema of this representation of an object.", "type": "string"},
            "kind": {"description": "Kind is a string value representing the REST resource this object represents.", "type": "string"},
            "metadata": {"type": "object"},
            "spec": {
                "description": f"{kind}Spec defines the desired state of {kind}.",
                "type": "object",
                "required": ["size"],
                "properties": {"size": {"type": "integer", "minimum": 0}, **sections},
            },
            "status": {
                "type": "object",
                "properties": {
                    "conditions": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["type", "status"],
                            "properties": {
                                "type": {"type": "string"},
                                "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                                "reason": {"type": "string"},
                                "message": {"type": "string"},
                                "lastTransitionTime": {"type": "string", "format": "date-time"},
                            },
                        },
                    },
                    "observedGeneration": {"type": "integer", "format": "int64"},
                },
            },
        },
    }
    return crd_manifest(group, kind, plural, schema, annotations={"controller-gen.kubebuilder.io/version": "v0.16.0"})


def crd_manifest(group: str, kind: str, plural: str, schema: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A namespaced v1 CRD with a `Size` printer column and `schema` (bench/synth.py's tier CRDs use it too)."""
    metadata: dict[str, Any] = {"name": f"{plural}.{group}"}
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": {
            "group": group,
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def _default_values(shape: ChartShape, rng: random.Random) -> dict[str, Any]:
    values: dict[str, Any] = {
        "replicaCount": 1,
        "image": {"repository": f"registry.example.com/{shape.name}", "tag": "", "pullPolicy": "IfNotPresent"},
        "nameOverride": "",
        "fullnameOverride": "",
        "extraLabels": {},
        "podAnnotations": {},
        "podSecurityContext": {"runAsNonRoot": True, "runAsUser": 65532, "fsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}},
        "service": {"type": "ClusterIP", "port": 80, "targetPort": 8080},
        "serviceAccount": {"automount": False},
        "rbac": {"create": True},
        "probes": {"path": "/healthz"},
        "args": [],
        "env": {},
        "config": {"LOG_LEVEL": "info", "LOG_FORMAT": "json", "LISTEN": ":8080"},
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": f"{rng.choice((128, 256, 512))}Mi"}},
        "nodeSelector": {},
    }
    if shape.redis:
        values["redis"] = {
            "enabled": True,
            "image": {"repository": "docker.io/library/redis", "tag": "7.2.4"},
            "maxmemory": "64mb",
            "storage": "1Gi",
            "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}},
        }
    return values


def chart_files(shape: ChartShape, rng: random.Random) -> dict[str, str]:
    """The files of charts/<shape.name>/, relative to the repository root."""
    name = shape.name
    base = f"charts/{name}"
    major = rng.randint(0, 3)
    chart: dict[str, Any] = {
        "apiVersion": "v2",
        "name": name,
        "description": f"The {name} service (a synthetic chart of the Fluxwarden bench).",
        "type": "application",
        "version": f"{major}.{rng.randint(0, 20)}.{rng.randint(0, 9)}",
        "appVersion": f"v{major + 1}.{rng.randint(0, 40)}.{rng.randint(0, 9)}",
    }
    deps = []
    if shape.redis:
        deps.append({"name": "redis", "version": "18.1.0", "condition": "redis.enabled"})
    if shape.common:
        deps.append({"name": "common", "version": "2.4.0"})
    if deps:
        chart["dependencies"] = deps
    labels = _COMMON_LABELS if shape.common else _OWN_LABELS

    def sub(text: str) -> str:
        return text.replace("CHART", name)

    files = {
        f"{base}/Chart.yaml": _dump(chart),
        f"{base}/values.yaml": _dump(_default_values(shape, rng)),
        f"{base}/.helmignore": ".git/\n*.swp\n*.bak\n",
        f"{base}/templates/_helpers.tpl": sub(_HELPERS.replace("LABELS", labels)),
        f"{base}/templates/deployment.yaml": sub(_DEPLOYMENT),
        f"{base}/templates/service.yaml": sub(_SERVICE),
        f"{base}/templates/serviceaccount.yaml": sub(_SERVICE_ACCOUNT),
        f"{base}/templates/configmap.yaml": sub(_CONFIGMAP),
        f"{base}/templates/NOTES.txt": sub(_NOTES),
    }
    if shape.operator:
        files[f"{base}/templates/clusterrole.yaml"] = sub(_CLUSTER_ROLE).replace("GROUP", crd_group(name))
        for group, kind, plural in operator_kinds(name):
            files[f"{base}/crds/{plural}.yaml"] = _dump(_operator_crd(group, kind, plural, rng))
    else:
        files[f"{base}/templates/rbac.yaml"] = sub(_ROLE)
    if shape.redis:
        sub_base = f"{base}/charts/redis"
        files[f"{sub_base}/Chart.yaml"] = _dump({"apiVersion": "v2", "name": "redis", "version": "18.1.0", "appVersion": "7.2.4", "type": "application"})
        files[f"{sub_base}/values.yaml"] = _dump(
            {"enabled": True, "image": {"repository": "docker.io/library/redis", "tag": "7.2.4"}, "maxmemory": "32mb", "storage": "1Gi", "resources": {}}
        )
        files[f"{sub_base}/templates/statefulset.yaml"] = _REDIS_STATEFULSET
    if shape.common:
        sub_base = f"{base}/charts/common"
        files[f"{sub_base}/Chart.yaml"] = _dump({"apiVersion": "v2", "name": "common", "version": "2.4.0", "type": "library"})
        files[f"{sub_base}/values.yaml"] = "{}\n"
        files[f"{sub_base}/templates/_labels.tpl"] = _COMMON_TPL
    return files


# -- releases -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReleasePlan:
    """One HelmRelease: its tier (and namespace), name, chart, and whether it reads a values ConfigMap."""

    tier: str
    name: str
    chart: str
    substituted: bool
    values_from: bool


def assign_releases(releases: int, tier_names: list[str], crd_tiers: list[str], substituted: set[str], rng: random.Random) -> list[ReleasePlan]:
    """Which tier runs which release: operators in CRD tiers first (their dependents' CRs need them), apps spread evenly."""
    operators = [s for s in CHARTS if s.operator][:releases]
    apps = [s for s in CHARTS if not s.operator]
    plans: list[ReleasePlan] = []
    free = [t for t in tier_names if t not in crd_tiers]
    operator_tiers = (crd_tiers + free)[: len(operators)]
    for shape, tier in zip(operators, operator_tiers):
        plans.append(ReleasePlan(tier, shape.name, shape.name, tier in substituted, False))
    count = max(0, releases - len(plans))
    single = [s for s in apps if s.name == SINGLE_RELEASE_CHART]
    shared = [s for s in apps if s.name != SINGLE_RELEASE_CHART] or apps
    for j in range(count):
        shape = single[0] if single and j == count - 1 else shared[j % len(shared)]
        tier = tier_names[(j * len(tier_names)) // max(1, count)]
        plans.append(ReleasePlan(tier, f"{shape.name}-{j:03d}", shape.name, tier in substituted, rng.random() < 0.08))
    return plans


def release_docs(plan: ReleasePlan, rng: random.Random) -> list[dict[str, Any]]:
    """The HelmRelease (and its values ConfigMap, for a valuesFrom one) as the tier applies them."""
    values: dict[str, Any] = {
        "replicaCount": rng.randint(1, 3),
        "config": {"LOG_LEVEL": rng.choice(("info", "debug", "warn")), "FEATURE_FLAGS": ",".join(rng.sample(("a", "b", "c", "d", "e"), 2))},
        "resources": {"requests": {"cpu": f"{rng.choice((5, 10, 25))}m", "memory": f"{rng.choice((32, 64))}Mi"}},
    }
    if plan.chart != SINGLE_RELEASE_CHART and rng.random() < 0.5:  # else the image follows the chart's appVersion
        values["image"] = {"tag": f"v1.{rng.randint(0, 30)}.{rng.randint(0, 9)}"}
    if plan.substituted:
        values["env"] = {"CLUSTER": "${CLUSTER_NAME}", "PUBLIC_URL": f"https://{plan.name}.${{DOMAIN:=example.com}}"}
    spec: dict[str, Any] = {
        "interval": "30m",
        "chart": {
            "spec": {
                "chart": f"./charts/{plan.chart}",
                "reconcileStrategy": "Revision",
                "sourceRef": {"kind": "GitRepository", "name": "flux-system", "namespace": "flux-system"},
            }
        },
        "install": {"remediation": {"retries": 3}},
        "upgrade": {"cleanupOnFail": True, "remediation": {"retries": 3}},
    }
    docs: list[dict[str, Any]] = []
    if plan.values_from:
        spec["valuesFrom"] = [{"kind": "ConfigMap", "name": f"{plan.name}-values"}]
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"{plan.name}-values", "namespace": plan.tier},
                "data": {"values.yaml": _dump({"replicaCount": 2, "config": {"FROM_CONFIGMAP": "yes"}})},
            }
        )
    spec["values"] = values
    docs.insert(0, {"apiVersion": HELM_API, "kind": "HelmRelease", "metadata": {"name": plan.name, "namespace": plan.tier}, "spec": spec})
    return docs


def operator_cr(chart: str, namespace: str, k: int) -> dict[str, Any]:
    """A custom resource of an operator chart's first kind, for a tier that depends on the operator's tier."""
    group, kind, _ = operator_kinds(chart)[0]
    return {"apiVersion": f"{group}/v1", "kind": kind, "metadata": {"name": f"{namespace}-{kind.lower()}-{k}", "namespace": namespace}, "spec": {"size": 1}}
