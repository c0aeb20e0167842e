#!/usr/bin/env bash
# Stand up (or un-stick) a cluster tier by tier after `flux bootstrap`.
#
#   standup.sh [-c dev|prod] suspend   suspend every tier (reverse order)
#   standup.sh [-c dev|prod] resume    resume tiers in TIER_ORDER, waiting for each to be Ready
#   standup.sh [-c dev|prod] crds      fallback for clusters stuck before the CDI/KubeVirt
#                                      CRs reconciled: apply them by hand, wait for the
#                                      runtime CRDs (idempotent)
#   standup.sh [-c dev|prod] status    flux get kustomizations
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FLUX_NS="flux-system"
CLUSTER="${CLUSTER:-dev}"
TIER_TIMEOUT="${TIER_TIMEOUT:-20m}"

# Flux Kustomizations (clusters/base/*.yaml), in dependency order.
TIER_ORDER=(
  platform          # operators + charts; ships the CDI and KubeVirt CRDs
  platform-config   # CDI + KubeVirt CRs, StorageClasses, ClusterIssuer
  apps              # plain workloads
  apps-vms          # KubeVirt VMs + CDI DataVolumes (./apps/vms)
)

# CRDs that only exist after an operator reconciled its CR.
RUNTIME_CRDS=(
  storageprofiles.cdi.kubevirt.io
  datavolumes.cdi.kubevirt.io
  virtualmachines.kubevirt.io
)

log() { printf '\033[1;34m==>\033[0m %s\n' "$*" >&2; }
die() { printf '\033[1;31mERROR:\033[0m %s\n' "$*" >&2; exit 1; }

need() {
  local bin
  for bin in "$@"; do
    command -v "$bin" >/dev/null 2>&1 || die "missing required tool: $bin"
  done
}

check_context() {
  local ctx
  ctx="$(kubectl config current-context)"
  [[ "$ctx" == *"$CLUSTER"* ]] || die "kube context '$ctx' does not look like cluster '$CLUSTER'"
  log "cluster=$CLUSTER context=$ctx"
}

cmd_suspend() {
  local i
  for (( i=${#TIER_ORDER[@]}-1; i>=0; i-- )); do
    log "suspending ${TIER_ORDER[i]}"
    flux suspend kustomization "${TIER_ORDER[i]}" -n "$FLUX_NS"
  done
}

cmd_resume() {
  local tier
  flux reconcile source git flux-system -n "$FLUX_NS"
  for tier in "${TIER_ORDER[@]}"; do
    log "resuming $tier (timeout $TIER_TIMEOUT)"
    flux resume kustomization "$tier" -n "$FLUX_NS" --wait=false
    kubectl -n "$FLUX_NS" wait "kustomization/$tier" \
      --for=condition=Ready --timeout="$TIER_TIMEOUT" \
      || { flux events --for "Kustomization/$tier" -n "$FLUX_NS" | tail -n 20; die "tier $tier not Ready"; }
  done
  log "all tiers Ready"
}

cmd_crds() {
  local crd
  kubectl wait crd/cdis.cdi.kubevirt.io crd/kubevirts.kubevirt.io \
    --for=condition=Established --timeout=2m
  # Same manifests Flux applies; no ${...} tokens in them, so no substitution needed.
  kubectl apply --server-side --field-manager=kustomize-controller \
    -f "$REPO_ROOT/platform-config/cdi.yaml" \
    -f "$REPO_ROOT/platform-config/kubevirt.yaml"
  for crd in "${RUNTIME_CRDS[@]}"; do
    log "waiting for crd/$crd"
    until kubectl get "crd/$crd" >/dev/null 2>&1; do sleep 5; done
    kubectl wait "crd/$crd" --for=condition=Established --timeout=2m
  done
}

cmd_status() {
  flux get kustomizations -n "$FLUX_NS"
}

main() {
  while getopts ":c:" opt; do
    case "$opt" in
      c) CLUSTER="$OPTARG" ;;
      *) die "usage: $0 [-c cluster] {suspend|resume|crds|status}" ;;
    esac
  done
  shift $((OPTIND - 1))
  [[ -d "$REPO_ROOT/clusters/$CLUSTER" ]] || die "unknown cluster: $CLUSTER"

  need kubectl flux
  check_context
  case "${1:-}" in
    suspend) cmd_suspend ;;
    resume)  cmd_resume ;;
    crds)    cmd_crds ;;
    status)  cmd_status ;;
    *) die "usage: $0 [-c cluster] {suspend|resume|crds|status}" ;;
  esac
}

main "$@"
