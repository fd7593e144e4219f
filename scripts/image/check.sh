#!/usr/bin/env bash
# Checks a Weir image tarball (scripts/image/build.sh's output) without a Docker daemon:
# unpacks it (`crane export`: the flattened filesystem) and runs the demo pipeline inside
# it, chroot'ed, as the manifests in deploy/kubernetes/ run the container.
#
# What it proves:
#   - the tarball is a well-formed image (`crane validate`) whose config is what the
#     manifests expect: entrypoint /usr/local/bin/weir, user 65532:65532 (their
#     runAsUser/runAsGroup), the env of scripts/image/lib.sh, this machine's platform;
#     and deploy/image/Dockerfile and deploy/kubernetes/ spell the same user, entrypoint,
#     env, tag, readOnlyRootFilesystem and mounts as lib.sh;
#   - every file is owned by root but the state and cache dirs (65532's), none is
#     setuid/setgid or world-writable, and /etc/passwd names uid 65532;
#   - the image carries everything `weir` needs to run: the run is chroot'ed into the
#     unpacked filesystem, so no library or file of this machine can stand in (an image
#     without one of ldd's libraries fails here with the loader's message);
#   - it runs as non-root (uid/gid 65532, no capabilities, PID 1 of its own PID
#     namespace) on a read-only root filesystem: in a private mount namespace the
#     unpacked root is bind-mounted read-only and only the worker StatefulSet's volumes
#     are mounted over it (the spec at /etc/weir read-only; /var/lib/weir,
#     /var/cache/weir, /tmp writable), and the unpacked tree is the same, file for file,
#     before and after the run;
#   - `weir run` of the demo spec (guest-examples/pipelines/demo.toml, 200,000 events
#     instead of 2,000,000, paths in the image: its own /opt/weir/modules guests, state
#     and output under /var/lib/weir) exits 0, reads all 200,000 events, dead-letters
#     none, and commits exactly the records that the same binary and guests commit for
#     the same spec outside the chroot (sorted lines, byte for byte; as many as weir
#     reports out), all written by uid 65532.
# What it does not: TLS to a broker or S3 with the image's CA bundle (present, unused
# here), DNS, `weir serve`, Kafka, a container runtime's seccomp profile, cgroups and
# capability set, the Dockerfile build itself (no Docker here), or Kubernetes.
#
# Usage: bash scripts/image/check.sh IMAGE_TAR
#   as root, where mount namespaces are allowed (unshare --mount; not in an unprivileged
#   container): chroot, bind mounts, /proc (weir finds itself through /proc/self/exe).
# Environment (optional):
#   WEIR_TOOLS                 where crane is (installed if missing), as for build.sh
#   WEIR_IMAGE_CHECK_TIMEOUT   seconds each `weir run` may take; default 300.
set -euo pipefail

die() { printf 'image/check.sh: FAILED: %s\n' "$*" >&2; exit 1; }
say() { printf 'image/check.sh: %s\n' "$*" >&2; }
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/image/lib.sh
source "$HERE/lib.sh"

[[ $# -eq 1 ]] || die "usage: check.sh IMAGE_TAR"
image=$(realpath "$1")
[[ -f $image ]] || die "$image is missing (bash scripts/image/build.sh first)"
[[ $(id -u) == 0 ]] || die "must run as root (chroot, mounts): sudo bash $0 $*"
for tool in python3 chroot tar timeout; do
  command -v "$tool" >/dev/null || die "$tool is missing"
done
timeout_s=${WEIR_IMAGE_CHECK_TIMEOUT:-300}
version=$(weir_version)
started=$SECONDS

ensure_crane

tmp=$(mktemp -d "${TMPDIR:-/tmp}/weir-image-check.XXXXXX")
# Mounts live in a private namespace that ends with the run; nothing to unmount here.
trap 'rm -rf "$tmp"' EXIT
root=$tmp/root
mkdir -m 0755 "$root"

# --- 0. the Dockerfile and the manifests say what lib.sh says -------------------------
dockerfile=$WEIR_REPO_ROOT/deploy/image/Dockerfile
expect_in() { # FILE TEXT...: each TEXT is a whole line of FILE (leading blanks aside)
  local file=$1 text
  shift
  for text in "$@"; do
    grep -qxF -- "$text" < <(sed 's/^[[:space:]]*//' "$file") \
      || die "${file#"$WEIR_REPO_ROOT"/} has no line '$text' (scripts/image/lib.sh and it disagree)"
  done
}
expect_in "$dockerfile" "USER $IMAGE_UID:$IMAGE_GID" "WORKDIR $IMAGE_HOME" \
  "ENTRYPOINT [\"$IMAGE_BIN\"]" 'CMD ["--help"]' \
  "org.opencontainers.image.version=\"$version\" \\"
for kv in "${IMAGE_ENV[@]}"; do
  grep -qE "^ *(ENV )?${kv//./\\.}( \\\\)?\$" "$dockerfile" \
    || die "deploy/image/Dockerfile does not set $kv (scripts/image/lib.sh does)"
done
for manifest in server/deployment.yaml worker/statefulset.yaml; do
  expect_in "$WEIR_REPO_ROOT/deploy/kubernetes/$manifest" "image: weir:$version" \
    "runAsUser: $IMAGE_UID" "runAsGroup: $IMAGE_GID" "readOnlyRootFilesystem: true" \
    "mountPath: $IMAGE_STATE_DIR" "mountPath: /tmp"
done

# --- 1. the image and its config --------------------------------------------------------
"$CRANE" validate --tarball "$image" >/dev/null 2>"$tmp/validate.log" \
  || die "crane validate rejects $image: $(cat "$tmp/validate.log")"
tar -xOf "$image" manifest.json >"$tmp/manifest.json" || die "$image has no manifest.json"
config_name=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[0]["Config"])' \
  "$tmp/manifest.json")
tar -xOf "$image" "$config_name" >"$tmp/config.json"
python3 - "$tmp/manifest.json" "$tmp/config.json" "weir:$version" "$IMAGE_BIN" \
  "$IMAGE_UID:$IMAGE_GID" "$(weir_platform)" "${IMAGE_ENV[@]}" <<'EOF' || die "the image config is wrong (above)"
import json, sys
manifest, config, tag, entrypoint, user, platform, *env = sys.argv[1:]
tags = json.load(open(manifest))[0].get("RepoTags") or []
cfg = json.load(open(config))
c = cfg.get("config", {})
problems = []
def want(what, got, expected):
    if got != expected:
        problems.append(f"{what}: {got!r}, expected {expected!r}")
want("tag", tag in tags, True)
want("entrypoint", c.get("Entrypoint"), [entrypoint])
want("user", c.get("User"), user)
want("platform", f'{cfg.get("os")}/{cfg.get("architecture")}', platform)
for kv in env:
    want(f"env {kv.split('=')[0]}", kv in (c.get("Env") or []), True)
for p in problems:
    print(f"image/check.sh: config {p}", file=sys.stderr)
sys.exit(1 if problems else 0)
EOF
say "config ok: entrypoint $IMAGE_BIN, user $IMAGE_UID:$IMAGE_GID, $(weir_platform), tag weir:$version"

# --- 2. its filesystem: owners and modes, then unpacked ---------------------------------
"$CRANE" export - "$tmp/fs.tar" <"$image" || die "crane export failed"
python3 - "$tmp/fs.tar" "$IMAGE_UID" "$IMAGE_GID" "${IMAGE_STATE_DIR#/}" "${IMAGE_CACHE_DIR#/}" <<'EOF' || die "the image's files are owned or moded wrongly (above)"
import sys, tarfile
path, uid, gid, *writable = sys.argv[1:]
problems, names = [], set()
for m in tarfile.open(path):
    name = m.name[2:] if m.name.startswith("./") else m.name
    name = name.strip("/")
    names.add(name)
    owner = (int(uid), int(gid)) if name in writable else (0, 0)
    if (m.uid, m.gid) != owner:
        problems.append(f"{name} is owned by {m.uid}:{m.gid}, expected {owner[0]}:{owner[1]}")
    if m.mode & 0o6000:
        problems.append(f"{name} is setuid/setgid ({m.mode:o})")
    if m.isfile() and m.mode & 0o002:
        problems.append(f"{name} is world-writable ({m.mode:o})")
for required in writable + ["tmp", "etc/passwd", "etc/group", "usr/local/bin/weir"]:
    if required not in names:
        problems.append(f"{required} is missing")
for p in problems:
    print(f"image/check.sh: {p}", file=sys.stderr)
sys.exit(1 if problems else 0)
EOF
tar -xpf "$tmp/fs.tar" -C "$root" --numeric-owner --same-owner
rm -f "$tmp/fs.tar"
grep -qx "$IMAGE_USER:x:$IMAGE_UID:$IMAGE_GID:.*" "$root/etc/passwd" \
  || die "/etc/passwd has no $IMAGE_USER with uid $IMAGE_UID: $(cat "$root/etc/passwd")"
say "filesystem ok: $(find "$root" -type f | wc -l) files, $(du -sh "$root" | cut -f1), owners 0:0 but ${IMAGE_STATE_DIR} and ${IMAGE_CACHE_DIR} ($IMAGE_UID:$IMAGE_GID)"

# --- 3. the demo spec, as the image sees it and as this machine does --------------------
# demo.toml with 200,000 events (0.8 s at its rate) and its paths moved: guests from the
# image's /opt/weir/modules, state, output and dead letters under the state volume.
demo=$WEIR_REPO_ROOT/guest-examples/pipelines/demo.toml
events=200000
spec_for() { # STATE_ROOT MODULES_DIR
  sed -e "s|^count = 2000000\$|count = $events|" \
    -e "s|^state_dir = \"../../build/demo-state\"\$|state_dir = \"$1/state\"|" \
    -e "s|\"../../build/guests/|\"$2/|" \
    -e "s|^path = \"../../build/demo-output\"\$|path = \"$1/output\"|" \
    -e "s|^path = \"../../build/demo-dead-letter\"\$|path = \"$1/dead-letter\"|" "$demo"
}
spec_for "$IMAGE_STATE_DIR" "$IMAGE_MODULES_DIR" >"$tmp/pipeline.toml"
if grep -q '\.\./' "$tmp/pipeline.toml" || ! grep -qx "count = $events" "$tmp/pipeline.toml"; then
  die "$demo changed shape: update spec_for in $0 (the spec it made: $(cat "$tmp/pipeline.toml"))"
fi

# The reference: the image's own weir and guests, run here (this machine's libraries,
# as root, writable everything). What a correct image must commit too.
mkdir -p "$tmp/ref"
spec_for "$tmp/ref" "$root$IMAGE_MODULES_DIR" >"$tmp/ref/pipeline.toml"
if ! timeout "$timeout_s" env -i HOME="$tmp/ref" WEIR_CACHE_DIR="$tmp/ref/cache" \
  "$root$IMAGE_BIN" run "$tmp/ref/pipeline.toml" --from-scratch >"$tmp/ref.log" 2>&1; then
  die "the reference run (the image's weir outside the chroot) failed: $(tail -n 20 "$tmp/ref.log")"
fi

# --- 4. the run inside the image -----------------------------------------------------
# The volumes of deploy/kubernetes/*: the spec read-only at /etc/weir; the state (what
# fsGroup gives the pod) and the cache writable by 65532; a fresh /tmp. /proc and a
# minimal /dev are what a container runtime mounts; their mount points are made now,
# before the "before" listing, as a runtime makes them.
mkdir -p "$tmp/config" "$tmp/state" "$tmp/cache"
cp "$tmp/pipeline.toml" "$tmp/config/pipeline.toml"
chmod 0755 "$tmp/config" && chmod 0644 "$tmp/config/pipeline.toml"
chown "$IMAGE_UID:$IMAGE_GID" "$tmp/state" "$tmp/cache"
mkdir -p "$root/proc" "$root/dev"
listing() { (cd "$root" && find . -xdev -printf '%p %y %m %U:%G %s %T@ %l\n' | LC_ALL=C sort); }
listing >"$tmp/before.txt"

# The image config's env only, as a runtime gives it, plus what the worker StatefulSet
# sets: the compiled-guest cache on its volume, a log level.
run_in_image=(env -i "${IMAGE_ENV[@]}" WEIR_CACHE_DIR="$IMAGE_CACHE_DIR" RUST_LOG=info
  "$(command -v chroot)" --userspec="$IMAGE_UID:$IMAGE_GID" --groups="$IMAGE_GID" "$root"
  "$IMAGE_BIN" run "$IMAGE_CONFIG_DIR/pipeline.toml" --from-scratch)

unshare --mount --propagation private true 2>/dev/null \
  || die "no mount namespace here (unshare --mount fails): run as root on a machine or VM, not in an unprivileged container"
# A private mount namespace (and PID namespace: weir is PID 1, as in a container): the
# mounts vanish with it, whatever happens to this script.
# shellcheck disable=SC2016 # expanded by the inner bash
timeout "$timeout_s" unshare --mount --propagation private --pid --fork --kill-child \
  bash -euo pipefail -c '
    root=$1 tmp=$2 config=$3 state=$4 cache=$5; shift 5
    mount --bind "$root" "$root"
    mount -o remount,bind,ro "$root"
    mount -t proc -o nosuid,nodev,noexec proc "$root/proc"
    mount -t tmpfs -o nosuid,noexec,mode=0755,size=64k dev "$root/dev"
    for node in null:3 zero:5 full:7 random:8 urandom:9; do
      mknod -m 0666 "$root/dev/${node%:*}" c 1 "${node#*:}"
    done
    mount --bind "$tmp/config" "$root$config"
    mount -o remount,bind,ro "$root$config"
    mount --bind "$tmp/state" "$root$state"
    mount --bind "$tmp/cache" "$root$cache"
    mount -t tmpfs -o nosuid,nodev,mode=1777,size=256m tmp "$root/tmp"
    exec "$@"' check "$root" "$tmp" "$IMAGE_CONFIG_DIR" "$IMAGE_STATE_DIR" "$IMAGE_CACHE_DIR" \
  "${run_in_image[@]}" >"$tmp/run.log" 2>&1 || rc=$?
if [[ ${rc:-0} != 0 ]]; then
  [[ $rc == 124 ]] && rc="124: timed out after ${timeout_s} s"
  die "weir run inside the image exited with status ${rc}; its output:
$(tail -n 30 "$tmp/run.log")"
fi

# --- 5. what it committed, and what it did not touch ----------------------------------
# weir's closing line counts the records: all the spec's events in, none dead-lettered.
summary=$(grep -E '^weir: pipeline demo finished: ' "$tmp/run.log" || true)
[[ $summary =~ ': '$events' records in, '([0-9]+)' out, 0 dead letters' ]] \
  || die "weir's summary is not '$events records in, N out, 0 dead letters': ${summary:-$(tail -n 5 "$tmp/run.log")}"
out=${BASH_REMATCH[1]}
committed() { # OUTPUT_DIR: every committed line, sorted
  [[ -d $1 ]] || die "no output directory $1"
  find "$1" -type f -print0 | sort -z | xargs -0 cat | LC_ALL=C sort
}
committed "$tmp/ref/output" >"$tmp/expected.txt"
committed "$tmp/state/output" >"$tmp/actual.txt"
[[ -s $tmp/expected.txt ]] || die "the reference run committed nothing: $(tail -n 20 "$tmp/ref.log")"
if ! cmp -s "$tmp/expected.txt" "$tmp/actual.txt"; then
  die "the run inside the image committed $(wc -l <"$tmp/actual.txt") lines, not the $(wc -l <"$tmp/expected.txt") the reference did; first differences:
$(diff "$tmp/expected.txt" "$tmp/actual.txt" | head -n 10)"
fi
[[ $(wc -l <"$tmp/actual.txt") == "$out" ]] \
  || die "weir reported $out records out but committed $(wc -l <"$tmp/actual.txt") lines"
for dir in "$tmp/ref" "$tmp/state"; do
  if [[ -d $dir/dead-letter ]] && [[ -n $(find "$dir/dead-letter" -type f -size +0) ]]; then
    die "records were dead-lettered under $dir/dead-letter"
  fi
done
others=$(find "$tmp/state" "$tmp/cache" -mindepth 1 ! -uid "$IMAGE_UID" -printf '%P (%U)\n' | head -n 5)
[[ -z $others ]] || die "files the run wrote are not owned by $IMAGE_UID: $others"
listing >"$tmp/after.txt"
if ! cmp -s "$tmp/before.txt" "$tmp/after.txt"; then
  die "the run changed the image's root filesystem:
$(diff "$tmp/before.txt" "$tmp/after.txt" | head -n 10)"
fi

say "PASSED in $((SECONDS - started)) s: weir run of the demo spec ($events events) inside $(basename "$image") as $IMAGE_UID:$IMAGE_GID on a read-only root committed $out records, the same as outside the image"
