#!/usr/bin/env bash
# A local S3-compatible server (moto's server mode, from PyPI, pinned) on 127.0.0.1 for
# Weir's object-store checkpoint tests and demos. No Docker, no AWS account.
# Needs: python3 with the venv module (Debian: python3-venv) and access to PyPI once.
#
# Usage: bash scripts/s3/s3.sh COMMAND
#
#   up      Install moto[server] into a venv outside the clone if it is missing, start
#           the server in the background unless ours already runs (idempotent: then
#           it just prints the env again), wait (bounded) until it answers, create the
#           test bucket, and print on stdout the lines to export:
#             AWS_ENDPOINT_URL=http://127.0.0.1:<port>
#             AWS_ALLOW_HTTP=true
#             AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=...   (dummies: moto checks none)
#             AWS_REGION=us-east-1
#             WEIR_S3_BUCKET=<bucket>                           (exists; tests use prefixes in it)
#           Progress goes to stderr, so `eval "$(bash scripts/s3/s3.sh up)"` works.
#   down    Stop exactly the process in the pidfile (if it is our moto server): SIGTERM,
#           wait, SIGKILL after WEIR_S3_STOP_TIMEOUT seconds. Idempotent. moto keeps
#           everything in memory: the objects go with it.
#   status  Say whether the server runs. Exit 0 if so, 3 if not.
#   env     Print the env lines of the running server (exit 3 if none).
#   install Only install the venv (for setup / CI warm-up).
#
# Environment (all optional):
#   WEIR_S3_PORT           port; default 19300.
#   WEIR_S3_BUCKET         bucket `up` creates; default weir-test.
#   WEIR_S3_CACHE          cache root; default $HOME/.cache/weir. The venv is
#                          $WEIR_S3_CACHE/s3-venv, pip's cache $WEIR_S3_CACHE/pip-cache,
#                          the run dir (moto-<port>.pid, moto-<port>.log) $WEIR_S3_CACHE/s3-run.
#   WEIR_S3_START_TIMEOUT  seconds `up` waits for the server; default 60.
#   WEIR_S3_STOP_TIMEOUT   seconds `down` waits after SIGTERM; default 10.
set -euo pipefail

MOTO_VERSION=5.1.22

die() { printf 's3.sh: error: %s\n' "$*" >&2; exit 1; }
say() { printf 's3.sh: %s\n' "$*" >&2; }

HOST=127.0.0.1
PORT=${WEIR_S3_PORT:-19300}
BUCKET=${WEIR_S3_BUCKET:-weir-test}
CACHE=${WEIR_S3_CACHE:-${HOME:?HOME is not set; set WEIR_S3_CACHE}/.cache/weir}
VENV=$CACHE/s3-venv
RUN=$CACHE/s3-run
# Per port: two servers on two ports never share a pidfile.
PIDFILE=$RUN/moto-$PORT.pid
LOGFILE=$RUN/moto-$PORT.log
START_TIMEOUT=${WEIR_S3_START_TIMEOUT:-60}
STOP_TIMEOUT=${WEIR_S3_STOP_TIMEOUT:-10}
ENDPOINT=http://$HOST:$PORT

case "$PORT$START_TIMEOUT$STOP_TIMEOUT" in
  *[!0-9]*) die "WEIR_S3_PORT and the timeouts must be integers" ;;
esac

print_env() {
  printf 'AWS_ENDPOINT_URL=%s\n' "$ENDPOINT"
  printf 'AWS_ALLOW_HTTP=true\n'
  printf 'AWS_ACCESS_KEY_ID=weir-test\n'
  printf 'AWS_SECRET_ACCESS_KEY=weir-test-secret\n'
  printf 'AWS_REGION=us-east-1\n'
  printf 'WEIR_S3_BUCKET=%s\n' "$BUCKET"
}

install() {
  if "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('moto') != '$MOTO_VERSION')" 2>/dev/null \
    && [ -x "$VENV/bin/moto_server" ]; then
    return 0
  fi
  say "installing moto[server]==$MOTO_VERSION into $VENV"
  python3 -m venv "$VENV" || die "python3 -m venv failed: install python3-venv"
  PIP_CACHE_DIR=$CACHE/pip-cache "$VENV/bin/pip" install -q --disable-pip-version-check \
    "moto[server]==$MOTO_VERSION" >&2 || die "pip install moto[server]==$MOTO_VERSION failed"
}

# The pid of our running server, if any.
running_pid() {
  [ -f "$PIDFILE" ] || return 1
  local pid
  pid=$(cat "$PIDFILE")
  case "$pid" in ''|*[!0-9]*) return 1 ;; esac
  [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q "moto_server.* -p $PORT" || return 1
  printf '%s\n' "$pid"
}

# One HTTP request with the venv's python: METHOD URL; exit 0 on a 2xx answer.
http() {
  "$VENV/bin/python" - "$1" "$2" <<'EOF'
import sys, urllib.request
req = urllib.request.Request(sys.argv[2], method=sys.argv[1])
try:
    with urllib.request.urlopen(req, timeout=5) as r:
        sys.exit(0 if 200 <= r.status < 300 else 1)
except Exception:
    sys.exit(1)
EOF
}

up() {
  install
  mkdir -p "$RUN"
  if ! running_pid >/dev/null; then
    ! http GET "$ENDPOINT/" || die "something else already answers on $ENDPOINT: stop it or set WEIR_S3_PORT"
    say "starting moto $MOTO_VERSION on $ENDPOINT (log: $LOGFILE)"
    # setsid: the server outlives this script and is not in make's process group.
    setsid "$VENV/bin/moto_server" -H "$HOST" -p "$PORT" >"$LOGFILE" 2>&1 </dev/null &
    echo $! >"$PIDFILE"
  fi
  local deadline=$((SECONDS + START_TIMEOUT))
  until http GET "$ENDPOINT/"; do
    running_pid >/dev/null || die "moto exited; see $LOGFILE: $(tail -n 5 "$LOGFILE" 2>/dev/null)"
    [ "$SECONDS" -lt "$deadline" ] || die "moto did not answer on $ENDPOINT within ${START_TIMEOUT}s; see $LOGFILE"
    sleep 0.3
  done
  # Creating an existing bucket is fine (moto answers 200 in us-east-1).
  http PUT "$ENDPOINT/$BUCKET" || http HEAD "$ENDPOINT/$BUCKET" || die "cannot create bucket $BUCKET on $ENDPOINT"
  say "moto is up on $ENDPOINT, bucket $BUCKET"
  print_env
}

down() {
  local pid
  if ! pid=$(running_pid); then
    rm -f "$PIDFILE"
    say "not running"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + STOP_TIMEOUT))
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      kill -KILL "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.2
  done
  rm -f "$PIDFILE"
  say "stopped"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) if pid=$(running_pid); then say "running (pid $pid) on $ENDPOINT"; else say "not running"; exit 3; fi ;;
  env) running_pid >/dev/null || { say "not running"; exit 3; }; print_env ;;
  install) install ;;
  *) die "usage: s3.sh up|down|status|env|install" ;;
esac
