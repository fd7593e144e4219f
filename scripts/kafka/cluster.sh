#!/usr/bin/env bash
# A replicated Apache Kafka cluster on 127.0.0.1 for the failover tests: N KRaft nodes
# (default 3), each broker + controller, from the same jars as kafka.sh (whose helpers
# this script sources). Replication 3, min.insync.replicas 2 for every topic and for
# Kafka's own (offsets, transaction state): writes go on with one node down and stop
# with two, as on a production cluster. Kafka's default broker session (9 s) is kept:
# it is what a failover waits out.
#
# Usage: bash scripts/kafka/cluster.sh COMMAND [NODE]
#
#   up        Wipe and recreate the cluster's directory, format every node with one
#             cluster id and transaction.version WEIR_KAFKA_CLUSTER_TRANSACTION_VERSION
#             (default 2, Kafka 4's default), start them, wait (bounded) until every
#             node serves, and print `KAFKA_CLUSTER_BOOTSTRAP=<every node>` on stdout.
#   down      Stop every node (SIGTERM; SIGKILL after WEIR_KAFKA_STOP_TIMEOUT). Idempotent.
#   stop I    SIGTERM node I (1-based) and wait until it is gone: a controlled shutdown,
#             as in a rolling restart.
#   kill I    SIGKILL node I: a crash.
#   start I   Start node I again on its data; wait until it serves.
#   pause I   SIGSTOP node I (a long GC pause, a hung host); `resume I` continues it.
#   status    One line per node; exit 0 if every node runs, 3 if not.
#   env       Print KAFKA_CLUSTER_BOOTSTRAP (exit 3 if no node runs).
#   wait-isr  Wait (bounded) until no partition of the cluster is under-replicated:
#             a rolling restart's "the node caught up" before the next node goes.
#   topics ARGS...  org.apache.kafka.tools.TopicCommand against the cluster.
#
# Environment (all optional), besides kafka.sh's WEIR_KAFKA_VERSION / _CACHE / _LIBS /
# _START_TIMEOUT / _STOP_TIMEOUT / _JVM_OPTS:
#   WEIR_KAFKA_CLUSTER_DIR   the cluster's directory; default $WEIR_KAFKA_CACHE/cluster.
#                            `up` WIPES it (only if this script made it).
#   WEIR_KAFKA_CLUSTER_NODES number of nodes; default 3 (at least 3: min ISR is 2).
#   WEIR_KAFKA_CLUSTER_PORT  node 1's client port; node I's is PORT + 10 (I - 1), its
#                            controller port one more. Default 19192.
#   WEIR_KAFKA_CLUSTER_TRANSACTION_VERSION  1 or 2; default 2.
#   WEIR_KAFKA_CLUSTER_HEAP_OPTS  each node's heap; default "-Xmx384m -Xms384m".
set -euo pipefail

# shellcheck source=kafka.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/kafka.sh"
die() { printf 'cluster.sh: error: %s\n' "$*" >&2; exit 1; }
say() { printf 'cluster.sh: %s\n' "$*" >&2; }

CLUSTER_DIR=${WEIR_KAFKA_CLUSTER_DIR:-$CACHE/cluster}
NODES=${WEIR_KAFKA_CLUSTER_NODES:-3}
BASE_PORT=${WEIR_KAFKA_CLUSTER_PORT:-19192}
CLUSTER_TRANSACTION_VERSION=${WEIR_KAFKA_CLUSTER_TRANSACTION_VERSION:-2}
NODE_HEAP_OPTS=${WEIR_KAFKA_CLUSTER_HEAP_OPTS:--Xmx384m -Xms384m}
case "$NODES$BASE_PORT$CLUSTER_TRANSACTION_VERSION" in
  *[!0-9]*) die "WEIR_KAFKA_CLUSTER_NODES, _PORT and _TRANSACTION_VERSION must be integers" ;;
esac
[ "$NODES" -ge 3 ] || die "a cluster has at least 3 nodes (min.insync.replicas is 2): $NODES"
case "$CLUSTER_TRANSACTION_VERSION" in 1|2) ;; *) die "transaction.version is 1 or 2: $CLUSTER_TRANSACTION_VERSION" ;; esac

client_port() { printf '%s\n' $((BASE_PORT + 10 * ($1 - 1))); }
controller_port() { printf '%s\n' $((BASE_PORT + 10 * ($1 - 1) + 1)); }

# Points kafka.sh's per-broker globals (DIR, PIDFILE, LOGFILE) at node $1.
node() {
  case "$1" in ''|*[!0-9]*) die "a node is a number from 1 to $NODES: '$1'" ;; esac
  [ "$1" -ge 1 ] && [ "$1" -le "$NODES" ] || die "a node is a number from 1 to $NODES: $1"
  DIR="$CLUSTER_DIR/node$1"
  PIDFILE="$DIR/kafka.pid"
  LOGFILE="$DIR/kafka.log"
}

cluster_bootstrap() {
  local i out=
  for i in $(seq 1 "$NODES"); do out="$out${out:+,}$HOST:$(client_port "$i")"; done
  printf '%s\n' "$out"
}

write_node_properties() {
  local i=$1 voters= j
  for j in $(seq 1 "$NODES"); do voters="$voters${voters:+,}$j@$HOST:$(controller_port "$j")"; done
  cat >"$DIR/server.properties" <<EOF
# Written by scripts/kafka/cluster.sh: node $i of $NODES, broker + controller, loopback.
process.roles=broker,controller
node.id=$i
controller.quorum.voters=$voters
listeners=PLAINTEXT://$HOST:$(client_port "$i"),CONTROLLER://$HOST:$(controller_port "$i")
advertised.listeners=PLAINTEXT://$HOST:$(client_port "$i")
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=$DIR/data

auto.create.topics.enable=false
num.partitions=1
log.retention.ms=-1
default.replication.factor=3
min.insync.replicas=2
unclean.leader.election.enable=false
offsets.topic.replication.factor=3
offsets.topic.num.partitions=5
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
transaction.state.log.num.partitions=5
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
group.initial.rebalance.delay.ms=0
EOF
}

# Starts node $1 on its data and waits until it serves.
start_node() {
  node "$1"
  local pid
  if pid=$(running_pid); then say "node $1 already runs (pid $pid)"; return 0; fi
  port_open "$(client_port "$1")" && die "port $HOST:$(client_port "$1") of node $1 is in use"
  local from
  from=1
  [ ! -f "$LOGFILE" ] || from=$(($(wc -l <"$LOGFILE") + 1))
  # shellcheck disable=SC2086
  nohup "$JAVA" $NODE_HEAP_OPTS $JVM_OPTS \
    -Dlog4j2.configurationFile="$SCRIPT_DIR/log4j2-server.properties" \
    -Dlog4j2.shutdownHookEnabled=false -Dkafka.logs.dir="$DIR" \
    -cp "$LIBS/*" kafka.Kafka "$DIR/server.properties" \
    </dev/null >>"$LOGFILE" 2>&1 &
  pid=$!
  printf '%s\n' "$pid" >"$PIDFILE"
  local deadline=$((SECONDS + START_TIMEOUT))
  until port_open "$(client_port "$1")" && tail -n "+$from" "$LOGFILE" | grep -q 'Kafka Server started'; do
    pid_alive "$pid" || { log_tail 40; die "node $1 exited during startup (see $LOGFILE)"; }
    [ "$SECONDS" -lt "$deadline" ] || { log_tail 40; die "node $1 did not start within ${START_TIMEOUT}s"; }
    sleep 0.5
  done
  say "node $1 up (pid $pid, $HOST:$(client_port "$1"))"
}

cmd_cluster_up() {
  local i
  for i in $(seq 1 "$NODES"); do
    node "$i"
    if running_pid >/dev/null; then die "node $i already runs from $DIR; run 'cluster.sh down' first"; fi
  done
  check_java
  fetch_libs
  DIR=$CLUSTER_DIR MARKER="$CLUSTER_DIR/.weir-kafka" fresh_dir
  rm -rf "$CLUSTER_DIR/data"
  local cluster_id
  cluster_id=$(new_cluster_id)
  say "formatting $NODES nodes in $CLUSTER_DIR (cluster id $cluster_id, transaction.version=$CLUSTER_TRANSACTION_VERSION) ..."
  for i in $(seq 1 "$NODES"); do
    node "$i"
    mkdir -p "$DIR/data"
    write_node_properties "$i"
    # shellcheck disable=SC2086
    "$JAVA" $TOOL_JVM_OPTS -Dlog4j2.configurationFile="$SCRIPT_DIR/log4j2-tools.properties" \
      -cp "$LIBS/*" kafka.tools.StorageTool format --cluster-id "$cluster_id" \
      --config "$DIR/server.properties" \
      --feature "transaction.version=$CLUSTER_TRANSACTION_VERSION" >"$DIR/format.log" 2>&1 \
      || { sed 's/^/  | /' "$DIR/format.log" >&2; die "formatting node $i failed"; }
  done
  # Every node at once: a controller quorum forms only once a majority runs.
  for i in $(seq 1 "$NODES"); do start_node "$i" & done
  local failed=0
  for i in $(seq 1 "$NODES"); do wait -n || failed=1; done
  [ "$failed" -eq 0 ] || { cmd_cluster_down; die "the cluster did not start"; }
  printf 'KAFKA_CLUSTER_BOOTSTRAP=%s\n' "$(cluster_bootstrap)"
}

cmd_cluster_down() {
  local i pid
  for i in $(seq 1 "$NODES"); do
    node "$i"
    if pid=$(running_pid); then kill -CONT "$pid" 2>/dev/null || true; stop_pid "$pid"; fi
    rm -f "$PIDFILE"
  done
  say "cluster stopped"
}

# Signals node $2 with $1 (and, for TERM, waits until it is gone).
signal_node() {
  node "$2"
  local pid
  pid=$(running_pid) || die "node $2 is not running"
  case "$1" in
    TERM) kill -CONT "$pid" 2>/dev/null || true; stop_pid "$pid" ;;
    KILL) kill -KILL "$pid"; while pid_alive "$pid"; do sleep 0.1; done ;;
    *) kill "-$1" "$pid" ;;
  esac
}

cmd_cluster_status() {
  local i pid all=0
  for i in $(seq 1 "$NODES"); do
    node "$i"
    if pid=$(running_pid); then
      printf 'node %s: running, pid %s, %s:%s\n' "$i" "$pid" "$HOST" "$(client_port "$i")"
    else
      printf 'node %s: not running\n' "$i"
      all=3
    fi
  done
  return "$all"
}

# Waits until TopicCommand lists no under-replicated partition (bounded).
cmd_wait_isr() {
  local deadline=$((SECONDS + START_TIMEOUT)) under
  while :; do
    under=$(topics_tool --describe --under-replicated-partitions 2>/dev/null || echo unknown)
    [ -n "$under" ] || return 0
    [ "$SECONDS" -lt "$deadline" ] || die "partitions still under-replicated after ${START_TIMEOUT}s: $under"
    sleep 1
  done
}

topics_tool() {
  # shellcheck disable=SC2086
  "$JAVA" $TOOL_JVM_OPTS -Dlog4j2.configurationFile="$SCRIPT_DIR/log4j2-tools.properties" \
    -cp "$LIBS/*" org.apache.kafka.tools.TopicCommand --bootstrap-server "$(cluster_bootstrap)" "$@"
}

cmd=${1:-}
[ $# -eq 0 ] || shift
case "$cmd" in
  up) cmd_cluster_up ;;
  down) cmd_cluster_down ;;
  stop) signal_node TERM "${1:-}" ;;
  kill) signal_node KILL "${1:-}" ;;
  pause) signal_node STOP "${1:-}" ;;
  resume) signal_node CONT "${1:-}" ;;
  start) check_java; start_node "${1:-}" ;;
  status) cmd_cluster_status ;;
  env) node 1; running_pid >/dev/null || { say "node 1 is not running"; exit 3; }
       printf 'KAFKA_CLUSTER_BOOTSTRAP=%s\n' "$(cluster_bootstrap)" ;;
  wait-isr) cmd_wait_isr ;;
  topics) topics_tool "$@" ;;
  -h|--help|help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2 ;;
  *) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2; die "unknown command: $cmd" ;;
esac
