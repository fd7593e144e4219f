# shellcheck shell=bash disable=SC2034 # sourced: the variables are used by its callers
# Shared by scripts/image/{rootfs,build,check}.sh (sourced, not run): what the image is
# (its user, paths, name and tag) and the pinned `crane` the daemonless build and the
# check use. deploy/image/Dockerfile and deploy/kubernetes/ spell the same values: keep
# them in step.

# The image's only user: uid/gid 65532, as deploy/kubernetes/*/ run it
# (securityContext runAsUser/runAsGroup/fsGroup). Its home is the state volume, so a
# tool that writes under $HOME (the compiled-module cache, when WEIR_CACHE_DIR is unset)
# writes to a mounted volume, never to the read-only root filesystem.
IMAGE_UID=65532
IMAGE_GID=65532
IMAGE_USER=weir
IMAGE_HOME=/var/lib/weir
IMAGE_BIN=/usr/local/bin/weir
# Directories the manifests mount (writable: state, cache, tmp; read-only: the spec or
# server config) and where the example guests live (worker/configmap.yaml's
# /opt/weir/modules/uppercase.wasm).
IMAGE_STATE_DIR=/var/lib/weir
IMAGE_CACHE_DIR=/var/cache/weir
IMAGE_CONFIG_DIR=/etc/weir
IMAGE_MODULES_DIR=/opt/weir/modules
# The Rust example guests the image carries (build/guests/<name>.wasm, `make rust-guests`).
IMAGE_MODULES=(uppercase filter_json split_words word_count windowed_sum)
IMAGE_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
# The image config's environment: an explicit PATH (the image has no base to inherit
# one from), HOME on the state volume, and the CA bundle for TLS to brokers
# (librdkafka/OpenSSL) and S3 (rustls-native-certs) both honour SSL_CERT_FILE.
IMAGE_ENV=(
  "PATH=/usr/local/bin:/usr/bin:/bin"
  "HOME=$IMAGE_HOME"
  "SSL_CERT_FILE=$IMAGE_CA_BUNDLE"
)

# go-containerregistry's crane, built from the Go module proxy into a tools dir outside
# the clone, once.
CRANE_VERSION=v0.22.1
WEIR_TOOLS=${WEIR_TOOLS:-${HOME:?HOME is not set; set WEIR_TOOLS}/.cache/weir/tools}
CRANE=$WEIR_TOOLS/bin/crane

WEIR_REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# The workspace version (Cargo.toml [workspace.package]): the image tag weir:<version>.
weir_version() {
  sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"$/\1/p' \
    "$WEIR_REPO_ROOT/Cargo.toml" | head -n 1
}

# linux/amd64, linux/arm64: the platform of this machine (the binary's).
weir_platform() {
  case $(uname -m) in
    x86_64) echo linux/amd64 ;;
    aarch64) echo linux/arm64 ;;
    *) die "unsupported machine $(uname -m)" ;;
  esac
}

# Installs the pinned crane unless it is there already (idempotent; the Go module proxy
# is the only network it needs, and only the first time).
ensure_crane() {
  if [[ -x $CRANE ]] && [[ $("$CRANE" version 2>/dev/null) == "$CRANE_VERSION" ]]; then
    return
  fi
  # go-containerregistry $CRANE_VERSION needs Go >= 1.25; a Go >= 1.21 fetches that
  # toolchain from the module proxy by itself (GOTOOLCHAIN=auto). Debian 12's is 1.19.
  command -v go >/dev/null || die "go is missing: crane $CRANE_VERSION is built with 'go install' (Go >= 1.21, go.dev/dl)"
  say "installing crane $CRANE_VERSION into $WEIR_TOOLS/bin (go install, once)"
  mkdir -p "$WEIR_TOOLS/bin"
  GOBIN=$WEIR_TOOLS/bin GOFLAGS=-buildvcs=false \
    go install "github.com/google/go-containerregistry/cmd/crane@$CRANE_VERSION" >&2 \
    || die "cannot install crane $CRANE_VERSION from the Go module proxy"
  [[ $("$CRANE" version 2>/dev/null) == "$CRANE_VERSION" ]] \
    || die "$CRANE is not crane $CRANE_VERSION after go install"
}
