#!/usr/bin/env bash
# Builds Weir's OCI container image without a Docker daemon (and without root): the
# root filesystem from local files (scripts/image/rootfs.sh: the binary, the libraries
# ldd lists, the loader, the non-root user, CA certificates, the manifests' mount
# points, the example guests) as one layer tar with fixed owners, modes and mtimes, then
# go-containerregistry's `crane` (pinned, from the Go module proxy, installed once
# outside the clone) turns it into an image: appended to an empty OCI base and given its
# config (entrypoint weir, user 65532:65532, workdir, env, labels, platform) through a
# throwaway in-memory registry on 127.0.0.1 (`crane mutate` edits images in a registry
# only). No network but the Go module proxy, once.
#
# The same image for Docker users: deploy/image/Dockerfile (same rootfs.sh, same config).
#
# Usage: bash scripts/image/build.sh [WEIR_BINARY [OUTPUT]]
#   WEIR_BINARY  default $CARGO_TARGET_DIR/release/weir (`make image` builds it)
#   OUTPUT       default build/image/weir-<version>.tar: an image tarball as `docker
#                save` writes one (manifest.json, config, layer), tagged weir:<version>;
#                `docker load -i`, `podman load -i`, `kind load image-archive`,
#                `crane push OUTPUT REGISTRY/weir:<version>` take it as it is.
# Environment (optional):
#   WEIR_IMAGE_GUESTS  the example guests' dir; default build/guests (`make rust-guests`)
#   WEIR_IMAGE_TAG     the tag; default weir:<workspace version>, as deploy/kubernetes uses
#   WEIR_TOOLS         where crane is installed; default $HOME/.cache/weir/tools
#   SOURCE_DATE_EPOCH  the files' mtime in the layer; default 0 (reproducible layers)
set -euo pipefail

die() { printf 'image/build.sh: error: %s\n' "$*" >&2; exit 1; }
say() { printf 'image/build.sh: %s\n' "$*" >&2; }
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/image/lib.sh
source "$HERE/lib.sh"

version=$(weir_version)
[[ -n $version ]] || die "no [workspace.package] version in Cargo.toml"
target_dir=${CARGO_TARGET_DIR:-$HOME/.cache/weir/target}
binary=${1:-$target_dir/release/weir}
output=${2:-$WEIR_REPO_ROOT/build/image/weir-$version.tar}
tag=${WEIR_IMAGE_TAG:-weir:$version}
guests=${WEIR_IMAGE_GUESTS:-$WEIR_REPO_ROOT/build/guests}
mtime=${SOURCE_DATE_EPOCH:-0}
[[ -x $binary ]] || die "$binary is missing (cargo build --release --locked -p weir)"
command -v python3 >/dev/null || die "python3 is missing"

ensure_crane

work=$(mktemp -d "${TMPDIR:-/tmp}/weir-image.XXXXXX")
registry_pid=
cleanup() {
  if [[ -n $registry_pid ]]; then
    kill "$registry_pid" 2>/dev/null || true
    wait "$registry_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# --- 1. the root filesystem, and one layer of it --------------------------------------
bash "$HERE/rootfs.sh" "$binary" "$work/rootfs" "$guests"
# Everything owned by 0:0 (whoever runs this) but the directories the user writes to,
# which are appended after with 65532:65532. Sorted names, fixed mtimes: the same inputs
# give the same layer digest. Member names are relative (`usr/...`): no entry for / itself.
writable=("${IMAGE_STATE_DIR#/}" "${IMAGE_CACHE_DIR#/}")
tar_common=(--format=gnu --sort=name --mtime="@$mtime" --numeric-owner)
mapfile -t top < <(cd "$work/rootfs" && ls -A)
excludes=()
for dir in "${writable[@]}"; do excludes+=(--exclude="$dir"); done
tar --create --file "$work/layer.tar" --directory "$work/rootfs" "${tar_common[@]}" \
  --owner=0 --group=0 "${excludes[@]}" "${top[@]}"
tar --append --file "$work/layer.tar" --directory "$work/rootfs" "${tar_common[@]}" \
  --owner="$IMAGE_UID" --group="$IMAGE_GID" --no-recursion "${writable[@]}"

# --- 2. the image: an empty OCI base + the layer + the config -------------------------
# The log (where it says its port) exists before the background job opens it.
: >"$work/registry.log"
"$CRANE" registry serve --address 127.0.0.1:0 2>>"$work/registry.log" &
registry_pid=$!
port=
for _ in $(seq 1 100); do
  port=$(sed -n 's/.*serving on port \([0-9][0-9]*\).*/\1/p' "$work/registry.log")
  [[ -n $port ]] && break
  kill -0 "$registry_pid" 2>/dev/null || die "crane registry serve exited: $(cat "$work/registry.log")"
  sleep 0.1
done
[[ -n $port ]] || die "crane registry serve did not start in 10 s: $(cat "$work/registry.log")"
staging=127.0.0.1:$port/weir:staging

# crane logs each push on stderr: kept, shown only when a step fails.
"$CRANE" append --oci-empty-base --new_layer "$work/layer.tar" --new_tag "$staging" \
  >/dev/null 2>"$work/crane.log" || die "crane append failed: $(cat "$work/crane.log")"
env_flags=()
for kv in "${IMAGE_ENV[@]}"; do env_flags+=(--env "$kv"); done
mkdir -p "$(dirname "$output")"
rm -f "$output"
"$CRANE" mutate "$staging" \
  --set-platform "$(weir_platform)" \
  --entrypoint "$IMAGE_BIN" \
  --cmd=--help \
  --user "$IMAGE_UID:$IMAGE_GID" \
  --workdir "$IMAGE_HOME" \
  "${env_flags[@]}" \
  --label org.opencontainers.image.title=weir \
  --label org.opencontainers.image.description="Weir: a stream processor whose user logic runs as WebAssembly components" \
  --label org.opencontainers.image.version="$version" \
  --label org.opencontainers.image.licenses=Apache-2.0 \
  --tag "$tag" \
  --output "$output" >/dev/null 2>"$work/crane.log" \
  || die "crane mutate failed: $(cat "$work/crane.log")"
"$CRANE" validate --tarball "$output" >/dev/null || die "crane validate rejects $output"

config=$(tar -xOf "$output" manifest.json \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["Config"])')
say "$tag -> $output ($(du -h "$output" | cut -f1), image id ${config:0:19})"
