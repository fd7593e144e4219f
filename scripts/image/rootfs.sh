#!/usr/bin/env bash
# Assembles the root filesystem of Weir's container image in a directory, from local
# files only (no base image): the `weir` binary (a stripped copy), exactly the shared
# libraries `ldd` resolves for it plus the dynamic loader, /etc/passwd and /etc/group
# with the non-root user (uid/gid 65532, home /var/lib/weir), /etc/nsswitch.conf, the
# CA bundle (TLS to brokers and S3), /tmp, the mount points deploy/kubernetes/ uses
# (/etc/weir, /var/lib/weir, /var/cache/weir) and the example guests under
# /opt/weir/modules. Nothing else: no shell, no package manager.
#
# Both image builds use it: scripts/image/build.sh (daemonless, crane) and
# deploy/image/Dockerfile (its `rootfs` stage), so both images hold the same files.
#
# Usage: bash scripts/image/rootfs.sh WEIR_BINARY ROOTFS_DIR [GUESTS_DIR]
#   WEIR_BINARY  the `weir` executable (release: $CARGO_TARGET_DIR/release/weir)
#   ROOTFS_DIR   created; must not exist or be empty
#   GUESTS_DIR   where the example guests' .wasm files are; default build/guests
#
# Ownership: when run as root, the writable directories are chown'ed to 65532:65532
# (what the Dockerfile's COPY --from keeps); build.sh sets owners in the layer's tar
# itself, so it needs no root. Modes are set explicitly (umask 022).
set -euo pipefail

die() { printf 'image/rootfs.sh: error: %s\n' "$*" >&2; exit 1; }
say() { printf 'image/rootfs.sh: %s\n' "$*" >&2; }
# shellcheck source=scripts/image/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $# -ge 2 && $# -le 3 ]] || die "usage: rootfs.sh WEIR_BINARY ROOTFS_DIR [GUESTS_DIR]"
binary=$1
root=$2
guests=${3:-$WEIR_REPO_ROOT/build/guests}
[[ -f $binary && -x $binary ]] || die "$binary is not an executable file (build it first)"
if [[ -e $root ]]; then
  [[ -d $root && -z $(ls -A "$root") ]] || die "$root exists and is not an empty directory"
fi
for tool in ldd strip; do
  command -v "$tool" >/dev/null || die "$tool is missing (Debian: libc-bin, binutils)"
done
umask 022
mkdir -p "$root"
chmod 0755 "$root"

# --- the binary: debug info stripped (symbols kept: panics still name functions) ------
install -D -m 0755 "$binary" "$root$IMAGE_BIN"
strip --strip-debug "$root$IMAGE_BIN"

# --- its shared libraries, at the paths the loader resolved them to here -------------
# ldd prints `name => /path (addr)` per library and `/path (addr)` for the loader;
# linux-vdso has no file. Anything `not found` is an error, not a smaller image.
ldd_out=$(ldd "$binary") || die "ldd $binary failed (is it a dynamic executable?)"
if grep -q 'not found' <<<"$ldd_out"; then
  die "$binary needs libraries this machine lacks:
$(grep 'not found' <<<"$ldd_out")"
fi
libs=()
while read -r line; do
  case $line in
    *'=> /'*) path=${line#*=> } ;;
    /*) path=$line ;;
    *) continue ;;
  esac
  libs+=("${path%% (*}")
done <<<"$ldd_out"
[[ ${#libs[@]} -gt 0 ]] || die "ldd listed no libraries for $binary"
for lib in "${libs[@]}"; do
  # The real file under the name the loader asked for (a copy, not the symlink).
  install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
done
say "${#libs[@]} shared objects from ldd: $(printf '%s ' "${libs[@]##*/}")"

# --- /etc: the user, name resolution, CA certificates ---------------------------------
# nsswitch: glibc >= 2.34 has `files` and `dns` built in, so no libnss_*.so is needed;
# /etc/hosts and /etc/resolv.conf come from the container runtime.
install -d -m 0755 "$root/etc"
printf 'root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:Weir:%s:/sbin/nologin\n' \
  "$IMAGE_USER" "$IMAGE_UID" "$IMAGE_GID" "$IMAGE_HOME" >"$root/etc/passwd"
printf 'root:x:0:\n%s:x:%d:\n' "$IMAGE_USER" "$IMAGE_GID" >"$root/etc/group"
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$root/etc/nsswitch.conf"
chmod 0644 "$root/etc/passwd" "$root/etc/group" "$root/etc/nsswitch.conf"
[[ -f $IMAGE_CA_BUNDLE ]] || die "$IMAGE_CA_BUNDLE is missing (Debian: apt-get install ca-certificates)"
install -D -m 0644 "$IMAGE_CA_BUNDLE" "$root$IMAGE_CA_BUNDLE"
# OpenSSL's default paths on Debian (OPENSSLDIR /usr/lib/ssl), for a run without
# SSL_CERT_FILE: cert.pem and certs/ point at the bundle, as Debian's libssl3 links them.
install -d -m 0755 "$root/usr/lib/ssl"
ln -s "$IMAGE_CA_BUNDLE" "$root/usr/lib/ssl/cert.pem"
ln -s "$(dirname "$IMAGE_CA_BUNDLE")" "$root/usr/lib/ssl/certs"

# --- directories: scratch, mount points, the writable ones the user owns -------------
install -d -m 1777 "$root/tmp"
install -d -m 0755 "$root$IMAGE_CONFIG_DIR" "$root$IMAGE_STATE_DIR" "$root$IMAGE_CACHE_DIR"
if [[ $(id -u) == 0 ]]; then
  chown "$IMAGE_UID:$IMAGE_GID" "$root$IMAGE_STATE_DIR" "$root$IMAGE_CACHE_DIR"
fi

# --- the example guests (worker/configmap.yaml runs /opt/weir/modules/uppercase.wasm) -
install -d -m 0755 "$root$IMAGE_MODULES_DIR"
for module in "${IMAGE_MODULES[@]}"; do
  [[ -f $guests/$module.wasm ]] || die "$guests/$module.wasm is missing (make rust-guests)"
  install -m 0644 "$guests/$module.wasm" "$root$IMAGE_MODULES_DIR/$module.wasm"
done

say "root filesystem in $root: $(du -sh "$root" | cut -f1)"
