#!/usr/bin/env bash
# `make demo-serve`: the hosting walk-through of the README, end to end on this machine.
# Starts a Kafka broker (with its SASL listener) and `weir serve`, creates the tenant's
# Kafka principal and an API token, creates the tenant's topics through the API,
# pushes two modules with the `weir` CLI, runs a
# word count as the tenant, and shows its status and output. Stops everything at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
WEIR=${WEIR:-$CARGO_TARGET_DIR/debug/weir}
KAFKA="bash scripts/kafka/kafka.sh"
DIR=build/serve
rm -rf "$DIR" && mkdir -p "$DIR"

eval "$($KAFKA up)"
export KAFKA_BOOTSTRAP KAFKA_SASL_BOOTSTRAP
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true
  $KAFKA down >/dev/null || true
}
trap cleanup EXIT

# The operator: the tenant's principal and ACLs on the broker, then the server.
export WEIR_DEMO_KAFKA_PASSWORD="demo-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
export WEIR_ADMIN_TOKEN="admin-$(od -An -N16 -tx8 /dev/urandom | tr -d ' \n')"
echo "$WEIR_DEMO_KAFKA_PASSWORD" | $KAFKA tenant demo - demo.
sed "s|^# bootstrap comes.*|bootstrap = \"$KAFKA_SASL_BOOTSTRAP\"|; s|../../build/serve/data|data|" \
  guest-examples/hosting/server.toml > "$DIR/server.toml"
"$WEIR" serve --config "$DIR/server.toml" 2> "$DIR/server.log" &
server_pid=$!
export WEIR_SERVER=http://127.0.0.1:8088
for _ in $(seq 100); do curl -sf "$WEIR_SERVER/readyz" >/dev/null && break; sleep 0.1; done
WEIR_TOKEN=$(curl -sf -X POST -H "Authorization: Bearer $WEIR_ADMIN_TOKEN" \
  "$WEIR_SERVER/v1/admin/tenants/demo/tokens" | sed 's/.*"token":"\([^"]*\)".*/\1/')
export WEIR_TOKEN

# The tenant: its topics (through the API, with its own principal), input, modules,
# pipeline.
for topic in demo.lines demo.word-counts; do
  curl -sf -X POST -H "Authorization: Bearer $WEIR_TOKEN" -H 'content-type: application/json' \
    "$WEIR_SERVER/v1/topics" -d "{\"name\": \"$topic\", \"partitions\": 3}" >/dev/null
done
curl -sf -H "Authorization: Bearer $WEIR_TOKEN" "$WEIR_SERVER/v1/topics"; echo
for i in $(seq 1 5000); do echo 'the quick brown fox jumps over the lazy weir'; done \
  | $KAFKA produce --topic demo.lines
"$WEIR" module push build/guests/split_words.wasm
"$WEIR" module push build/guests/word_count.wasm
"$WEIR" module ls
ids=$("$WEIR" module ls --json | tr -d ' \n' | sed 's/},{/}\n{/g')
split=$(echo "$ids" | grep '"name":"split_words"' | sed 's/.*"id":"\([0-9a-f]*\)".*/\1/')
count=$(echo "$ids" | grep '"name":"word_count"' | sed 's/.*"id":"\([0-9a-f]*\)".*/\1/')
sed "s/SPLIT_WORDS_ID/$split/; s/WORD_COUNT_ID/$count/" guest-examples/hosting/word-count.toml > "$DIR/word-count.toml"
"$WEIR" pipeline create "$DIR/word-count.toml"
for _ in $(seq 600); do
  state=$("$WEIR" pipeline status word-count --json | sed -n 's/.*"state": "\([a-z]*\)".*/\1/p')
  [ "$state" = finished ] || [ "$state" = failed ] && break
  sleep 0.2
done
"$WEIR" pipeline ls
"$WEIR" pipeline status word-count
echo '--- committed output (read_committed):'
$KAFKA consume --topic demo.word-counts --from-beginning --isolation-level read_committed \
  --timeout-ms 5000 2>/dev/null | head -n 10 || true
curl -s "$WEIR_SERVER/metrics" | grep -E '^weir_server_(pipelines|module_uploads)' || true
