#!/usr/bin/env bash
# Validates deploy/kubernetes/ offline against Kubernetes' own OpenAPI schemas, strictly
# (an unknown or misspelled field is an error), with `kubernetes-validate` from PyPI
# (pinned; it ships the schemas, so no cluster and no network beyond PyPI once).
# Every YAML file under deploy/kubernetes/ but the kustomization must be listed in the
# kustomization, and is checked against the oldest Kubernetes the manifests support
# (1.28: the `apps.kubernetes.io/pod-index` label) and the newest the tool knows.
#
# Usage: bash scripts/kubernetes/validate.sh [install]
#   install   only install the venv (for setup / CI warm-up)
#
# Environment: WEIR_K8S_CACHE, the cache root; default $HOME/.cache/weir (the venv is
# $WEIR_K8S_CACHE/k8s-venv).
set -euo pipefail

KUBERNETES_VALIDATE_VERSION=1.37.0
VERSIONS=(1.28.0 1.37.0)

die() { printf 'kubernetes/validate.sh: error: %s\n' "$*" >&2; exit 1; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CACHE=${WEIR_K8S_CACHE:-${HOME:?HOME is not set; set WEIR_K8S_CACHE}/.cache/weir}
VENV=$CACHE/k8s-venv
TOOL=$VENV/bin/kubernetes-validate

install() {
  if [[ -x $TOOL ]] && [[ $("$TOOL" --version 2>/dev/null) == "$KUBERNETES_VALIDATE_VERSION" ]]; then
    return
  fi
  command -v python3 >/dev/null || die "python3 is missing"
  rm -rf "$VENV"
  python3 -m venv "$VENV" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check \
    "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" >&2 \
    || die "cannot install kubernetes-validate $KUBERNETES_VALIDATE_VERSION from PyPI"
}

install
[[ ${1:-} == install ]] && exit 0

cd "$ROOT/deploy/kubernetes"
listed=$(sed -n 's/^  - \(.*\.yaml\)$/\1/p' kustomization.yaml | sort)
present=$(find . -name '*.yaml' ! -name kustomization.yaml | sed 's|^\./||' | sort)
[[ -n $listed ]] || die "kustomization.yaml lists no resources"
if [[ $listed != "$present" ]]; then
  die "kustomization.yaml's resources differ from the YAML files present:
$(diff <(printf '%s\n' "$listed") <(printf '%s\n' "$present") || true)"
fi
for version in "${VERSIONS[@]}"; do
  # shellcheck disable=SC2086 # one file name per word
  "$TOOL" --strict --quiet -k "$version" $listed \
    || die "deploy/kubernetes does not validate against Kubernetes $version"
done
printf 'kubernetes/validate.sh: %d manifests valid (strict) against Kubernetes %s\n' \
  "$(wc -w <<<"$listed")" "${VERSIONS[*]}" >&2
