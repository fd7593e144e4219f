#!/usr/bin/env bash
# A real, single-node Apache Kafka broker (KRaft, combined broker+controller) on
# 127.0.0.1 for Weir's tests and demos, run from Kafka's own jars fetched with Maven.
# Needs: Java 17+ (`java`, or $JAVA_HOME/bin/java) and Maven (`mvn`) with access to
# Maven Central. No Docker, no Kafka tarball.
#
# Usage: bash scripts/kafka/kafka.sh COMMAND [ARGS...]
#
#   up        Fetch the jars if missing, wipe and recreate the data dir, write
#             server.properties, format storage with a random cluster id, start the
#             broker in the background, wait (bounded) until it serves, and print
#             `KAFKA_BOOTSTRAP=127.0.0.1:<port>` (PLAINTEXT, full rights) and
#             `KAFKA_SASL_BOOTSTRAP=127.0.0.1:<sasl port>` (SASL/SCRAM, ACLs apply)
#             on stdout (progress goes to stderr, so
#             `eval "$(bash scripts/kafka/kafka.sh up)"` works). Refuses if a
#             broker from the same data dir is already running.
#   down      Stop exactly the process in the pidfile: SIGTERM, wait, SIGKILL after
#             WEIR_KAFKA_STOP_TIMEOUT seconds. Idempotent. Keeps the data dir and log
#             for a post-mortem; the next `up` wipes them.
#   status    Say whether the broker is running. Exit 0 if so, 3 if not.
#   pause     SIGSTOP exactly the process in the pidfile: the broker stops answering
#             with its sockets open, as in a long GC pause or a network partition
#             (the liveness tests; exit 3 if no broker runs).
#   resume    SIGCONT it: the broker answers again. Idempotent.
#   fetch     Only fetch the jars into the cache (for setup / CI warm-up).
#   env       Print `KAFKA_BOOTSTRAP=...` and `KAFKA_SASL_BOOTSTRAP=...` of the
#             running broker (exit 3 if none).
#   tenant ID PASSWORD PREFIX
#             Create or update the SCRAM user ID (SCRAM-SHA-256 and -512, password
#             PASSWORD) and make its ACLs exactly: PREFIXED on PREFIX, topics Read,
#             Write, Describe, Create, DescribeConfigs, Delete; groups Read,
#             Describe, Delete;
#             transactional ids Write, Describe; plus cluster IdempotentWrite. Any
#             other ACL of User:ID is removed. Idempotent; one JVM (a small admin
#             program, scripts/kafka/KafkaTenant.java, compiled once into the cache:
#             needs `javac`, a JDK); returns once the broker enforces the new state.
#             PASSWORD `-` reads it from the first line of stdin instead (a
#             command line is visible to `ps`).
#             Example: kafka.sh tenant a s3cret a.   then connect to
#             $KAFKA_SASL_BOOTSTRAP with SCRAM-SHA-256 (or -512), user a.
#   topics ARGS...        org.apache.kafka.tools.TopicCommand
#   groups ARGS...        org.apache.kafka.tools.consumer.group.ConsumerGroupCommand
#   transactions ARGS...  org.apache.kafka.tools.TransactionsCommand
#   produce ARGS...       org.apache.kafka.tools.ConsoleProducer
#   consume ARGS...       org.apache.kafka.tools.consumer.ConsoleConsumer
#   producer-perf ARGS... org.apache.kafka.tools.ProducerPerformance (kafka-producer-perf-test)
#   consumer-perf ARGS... org.apache.kafka.tools.ConsumerPerformance (kafka-consumer-perf-test)
#   run CLASS ARGS...     any main class on the Kafka classpath, ARGS as given
#             The other tool commands add `--bootstrap-server <running broker>` unless
#             ARGS already name one. Examples:
#               kafka.sh topics --create --topic t --partitions 3
#               kafka.sh topics --describe --topic t
#               kafka.sh groups --describe --group g --offsets
#               kafka.sh transactions list
#               kafka.sh consume --topic t --from-beginning --isolation-level read_committed
#             Without this script, the same through plain java:
#               java -cp "$HOME/.cache/weir/kafka/<version>/libs/*" \
#                 -Dlog4j2.configurationFile=scripts/kafka/log4j2-tools.properties \
#                 org.apache.kafka.tools.TopicCommand --bootstrap-server 127.0.0.1:19092 --list
#
# Environment (all optional):
#   WEIR_KAFKA_VERSION          Kafka version; default: the one pinned in pom.xml here.
#   WEIR_KAFKA_CACHE            cache root; default $HOME/.cache/weir/kafka. Jars go to
#                               $WEIR_KAFKA_CACHE/<version>/libs (never in the repo).
#   WEIR_KAFKA_LIBS             use this already-filled jar directory instead (never fetched
#                               into or modified).
#   WEIR_KAFKA_DIR              data/run dir; default $WEIR_KAFKA_CACHE/run. Holds
#                               server.properties, data/, kafka.log, kafka.pid, kafka.env.
#                               `up` WIPES it (only if it was made by this script).
#                               `down`/`status`/tools must see the same value as `up`.
#   WEIR_KAFKA_PORT             client (PLAINTEXT) port; default 19092.
#   WEIR_KAFKA_CONTROLLER_PORT  KRaft controller port; default WEIR_KAFKA_PORT + 1.
#   WEIR_KAFKA_SASL_PORT        SASL_PLAINTEXT (SCRAM) client port; default WEIR_KAFKA_PORT + 2.
#   WEIR_KAFKA_ADMIN_PASSWORD   password of the SCRAM super user `admin` (created at
#                               format time); default "admin-secret". A dev broker only.
#   WEIR_KAFKA_START_TIMEOUT    seconds `up` waits for the broker; default 60.
#   WEIR_KAFKA_STOP_TIMEOUT     seconds `down` waits after SIGTERM before SIGKILL; default 30.
#   WEIR_KAFKA_HEAP_OPTS        broker heap; default "-Xmx1g -Xms1g": a whole `make test`
#                               (hundreds of topics and transactional ids) fills 512 MiB's
#                               old generation, and the serial GC's full collections then
#                               stop the broker for seconds each on 2 busy cores.
#   WEIR_KAFKA_JVM_OPTS         other broker JVM flags; default keeps the JVM light
#                               (serial GC, C1 JIT only) since it runs beside cargo on 2 cores.
#   WEIR_KAFKA_BROKER_PROPS     extra server.properties lines appended verbatim
#                               (newline-separated), e.g. for a test needing a small
#                               transaction.max.timeout.ms.
#
# Broker settings that tests rely on (see write_server_properties):
#   auto.create.topics.enable=false: tests create their own topics.
#   log.retention.ms=-1: records carry historical event times; age must not delete them.
#   Replication factors / min ISR of the internal topics are 1 (single node).
#   group.initial.rebalance.delay.ms=0: consumer groups form at once.
#   transaction.max.timeout.ms is NOT set: Kafka's default, 900000 ms (15 min). Weir
#   validates its transaction.timeout.ms against it; tests should read it from the
#   broker (DescribeConfigs on broker 1) rather than assume it.
#   Two client listeners on one broker: PLAINTEXT (WEIR_KAFKA_PORT), whose principal
#   User:ANONYMOUS is a super user, so every client there has full rights as without
#   an authorizer; and SASL_PLAINTEXT (WEIR_KAFKA_SASL_PORT) with SCRAM-SHA-256/512,
#   where Kafka's StandardAuthorizer enforces ACLs with allow.everyone.if.no.acl.found
#   =false (a user with no ACL may do nothing). Super users: User:ANONYMOUS, User:admin.
set -euo pipefail

die() { printf 'kafka.sh: error: %s\n' "$*" >&2; exit 1; }
say() { printf 'kafka.sh: %s\n' "$*" >&2; }

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
POM="$SCRIPT_DIR/pom.xml"
[ -f "$POM" ] || die "missing $POM"
PINNED_VERSION=$(sed -n 's|.*<kafka\.version>\([^<]*\)</kafka\.version>.*|\1|p' "$POM" | head -n 1)
[ -n "$PINNED_VERSION" ] || die "could not read <kafka.version> from $POM"

VERSION=${WEIR_KAFKA_VERSION:-$PINNED_VERSION}
CACHE=${WEIR_KAFKA_CACHE:-${HOME:?HOME is not set; set WEIR_KAFKA_CACHE}/.cache/weir/kafka}
LIBS=${WEIR_KAFKA_LIBS:-$CACHE/$VERSION/libs}
DIR=${WEIR_KAFKA_DIR:-$CACHE/run}
HOST=127.0.0.1
PORT=${WEIR_KAFKA_PORT:-19092}
# Kafka 4.x formats with transaction.version=2 (KIP-890) by default. Weir's protocol
# needs nothing from version 2, and version 1 is the transaction protocol every
# librdkafka release implements, so the tests run against that.
TRANSACTION_VERSION=${WEIR_KAFKA_TRANSACTION_VERSION:-1}
CONTROLLER_PORT=${WEIR_KAFKA_CONTROLLER_PORT:-$((PORT + 1))}
SASL_PORT=${WEIR_KAFKA_SASL_PORT:-$((PORT + 2))}
ADMIN_PASSWORD=${WEIR_KAFKA_ADMIN_PASSWORD:-admin-secret}
START_TIMEOUT=${WEIR_KAFKA_START_TIMEOUT:-60}
STOP_TIMEOUT=${WEIR_KAFKA_STOP_TIMEOUT:-30}
HEAP_OPTS=${WEIR_KAFKA_HEAP_OPTS:--Xmx1g -Xms1g}
JVM_OPTS=${WEIR_KAFKA_JVM_OPTS:--XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true}
# Short-lived tool JVMs (format, CLI tools): small heap, fast start.
TOOL_JVM_OPTS="-Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true"
# Kafka's perf tools measure throughput: full JIT and G1, as kafka-run-class.sh runs them.
PERF_JVM_OPTS="-Xmx512m -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true"

PIDFILE="$DIR/kafka.pid"
LOGFILE="$DIR/kafka.log"
ENVFILE="$DIR/kafka.env"
MARKER="$DIR/.weir-kafka"

if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then JAVA="$JAVA_HOME/bin/java"; else JAVA=java; fi

case "$PORT$CONTROLLER_PORT$SASL_PORT$START_TIMEOUT$STOP_TIMEOUT" in
  *[!0-9]*) die "WEIR_KAFKA_PORT, WEIR_KAFKA_CONTROLLER_PORT, WEIR_KAFKA_SASL_PORT and the timeouts must be integers" ;;
esac
[ "$PORT" != "$CONTROLLER_PORT" ] || die "client and controller ports are both $PORT"
[ "$SASL_PORT" != "$PORT" ] && [ "$SASL_PORT" != "$CONTROLLER_PORT" ] || die "the SASL port $SASL_PORT collides with the client or controller port"

check_java() {
  command -v "$JAVA" >/dev/null 2>&1 || die "java not found: install Java 17+ (apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
  local v
  v=$("$JAVA" -version 2>&1 | sed -n 's/.*version "\([0-9][0-9]*\).*/\1/p' | head -n 1)
  [ -n "$v" ] || die "could not tell the Java version of $JAVA"
  [ "$v" -ge 17 ] || die "Kafka $VERSION needs Java 17+, $JAVA is Java $v (set JAVA_HOME)"
}

# Fetch the jars into $LIBS once; a half-done fetch never looks complete.
fetch_libs() {
  [ ! -f "$LIBS/.complete" ] || return 0
  if [ -n "${WEIR_KAFKA_LIBS:-}" ]; then
    # A directory the user chose: use it as it is, never fetch into (or wipe) it.
    ls "$LIBS"/kafka_2.13-*.jar >/dev/null 2>&1 || die "WEIR_KAFKA_LIBS=$LIBS holds no kafka_2.13-*.jar; fill it or unset WEIR_KAFKA_LIBS"
    return 0
  fi
  command -v mvn >/dev/null 2>&1 || die "mvn not found: install Maven (apt-get install maven) to fetch the Kafka jars"
  local tmp="$LIBS.tmp.$$" start=$SECONDS
  say "fetching Kafka $VERSION jars with Maven into $LIBS ..."
  rm -rf "$tmp"
  mkdir -p "$tmp"
  # Maven's output goes to a file (Debian's mvn -q still prints stray colour codes)
  # and is shown only on failure.
  if ! mvn -q -B -f "$POM" -Dkafka.version="$VERSION" \
      dependency:copy-dependencies -DoutputDirectory="$tmp" >"$tmp.log" 2>&1; then
    sed 's/\x1b\[[0-9;]*m//g; s/^/  | /' "$tmp.log" >&2
    rm -rf "$tmp" "$tmp.log"
    die "Maven could not fetch Kafka $VERSION (its output is above)"
  fi
  rm -f "$tmp.log"
  [ -f "$tmp/kafka_2.13-$VERSION.jar" ] || { rm -rf "$tmp"; die "Maven finished but kafka_2.13-$VERSION.jar is missing from $tmp"; }
  touch "$tmp/.complete"
  rm -rf "$LIBS"
  mv "$tmp" "$LIBS"
  say "fetched $(find "$LIBS" -name '*.jar' | wc -l | tr -d ' ') jars in $((SECONDS - start)) s"
}

# True if something accepts TCP connections on $HOST:$1.
port_open() {
  (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

pid_cmdline() {
  if [ -r "/proc/$1/cmdline" ]; then tr '\0' ' ' <"/proc/$1/cmdline"; else ps -p "$1" -o args= 2>/dev/null || true; fi
}

# True if pid $1 exists and is not a zombie.
pid_alive() {
  kill -0 "$1" 2>/dev/null || return 1
  if [ -r "/proc/$1/stat" ]; then
    local state
    state=$(sed 's/^.*) \(.\).*$/\1/' "/proc/$1/stat" 2>/dev/null || true)
    [ "$state" != Z ] || return 1
  fi
  return 0
}

# Prints the pid from the pidfile if it is a live Kafka broker started from $DIR.
running_pid() {
  [ -f "$PIDFILE" ] || return 1
  local pid
  pid=$(tr -dc '0-9' <"$PIDFILE")
  [ -n "$pid" ] || return 1
  pid_alive "$pid" || return 1
  case "$(pid_cmdline "$pid")" in
    *kafka.Kafka*"$DIR/server.properties"*) printf '%s\n' "$pid" ;;
    *) return 1 ;;
  esac
}

bootstrap() {
  if [ -f "$ENVFILE" ]; then sed -n 's/^KAFKA_BOOTSTRAP=//p' "$ENVFILE"; else printf '%s:%s\n' "$HOST" "$PORT"; fi
}

sasl_bootstrap() {
  if [ -f "$ENVFILE" ]; then sed -n 's/^KAFKA_SASL_BOOTSTRAP=//p' "$ENVFILE"; else printf '%s:%s\n' "$HOST" "$SASL_PORT"; fi
}

log_tail() {
  if [ ! -s "$LOGFILE" ]; then
    say "$LOGFILE is empty"
  else
    say "last lines of $LOGFILE:"
    tail -n "${1:-40}" "$LOGFILE" | sed 's/^/  | /' >&2
  fi
}

new_cluster_id() {
  # Kafka cluster ids are a UUID's 16 bytes in unpadded URL-safe base64 (22 chars).
  # Like Kafka's Uuid.randomUuid, avoid ids starting with '-'.
  local id
  while :; do
    id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
    case "$id" in -*) ;; *) printf '%s\n' "$id"; return ;; esac
  done
}

write_server_properties() {
  cat >"$DIR/server.properties" <<EOF
# Written by scripts/kafka/kafka.sh: single-node KRaft, broker + controller, loopback only.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$HOST:$CONTROLLER_PORT
listeners=PLAINTEXT://$HOST:$PORT,SASL_PLAINTEXT://$HOST:$SASL_PORT,CONTROLLER://$HOST:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://$HOST:$PORT,SASL_PLAINTEXT://$HOST:$SASL_PORT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=$DIR/data

# Tenants connect to the SASL_PLAINTEXT listener with SCRAM; their credentials live in
# the cluster metadata (admin's from format time, tenants' from 'kafka.sh tenant').
sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
# ACLs, enforced on every listener. PLAINTEXT and CONTROLLER clients are User:ANONYMOUS,
# a super user: the tests and tools there keep full rights. A SCRAM user may do only
# what its ACLs allow (kafka.sh tenant).
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:ANONYMOUS;User:admin

# Tests create their own topics.
auto.create.topics.enable=false
num.partitions=1
# Never delete by age: tests and demos use fixed event times (2023) as record timestamps,
# and the default 7-day retention would delete them about 30 s after start, when the
# first retention pass runs (the active segment included).
log.retention.ms=-1
default.replication.factor=1
min.insync.replicas=1

# One node: internal topics with one replica. Fewer partitions than the defaults
# (50) so the first group join / InitProducerId does not wait on creating 50 logs.
offsets.topic.replication.factor=1
offsets.topic.num.partitions=5
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=5
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1

# Consumer groups form immediately.
group.initial.rebalance.delay.ms=0

# One node: nothing to fail over to, so a missed heartbeat only does harm. On 2 busy
# cores (20 hosted pipelines beside the broker) the broker's heartbeat to its own
# controller was seen late past the 9 s default; the controller then fenced the only
# broker, and every CreateTopics failed with INVALID_REPLICATION_FACTOR ("all brokers
# are currently fenced") for 15 s. The cluster (cluster.sh) keeps Kafka's default.
broker.session.timeout.ms=60000

# transaction.max.timeout.ms is deliberately left at Kafka's default (900000 ms);
# Weir validates transaction.timeout.ms against it, and tests read it from the broker.
EOF
  if [ -n "${WEIR_KAFKA_BROKER_PROPS:-}" ]; then
    printf '\n# From WEIR_KAFKA_BROKER_PROPS:\n%s\n' "$WEIR_KAFKA_BROKER_PROPS" >>"$DIR/server.properties"
  fi
}

# Recreate $DIR from scratch, refusing to wipe a directory this script did not make.
fresh_dir() {
  if [ -e "$DIR" ]; then
    [ -d "$DIR" ] || die "$DIR exists and is not a directory"
    if [ ! -f "$MARKER" ] && [ -n "$(ls -A "$DIR")" ]; then
      die "refusing to wipe $DIR: it is not empty and was not made by kafka.sh (no .weir-kafka); choose another WEIR_KAFKA_DIR"
    fi
    rm -rf "$DIR"
  fi
  mkdir -p "$DIR/data"
  printf 'made by scripts/kafka/kafka.sh; wiped by its next "up"\n' >"$MARKER"
}

# SIGTERM the pid, wait, SIGKILL after STOP_TIMEOUT. Returns once it is gone.
stop_pid() {
  local pid=$1 waited=0
  kill -TERM "$pid" 2>/dev/null || true
  while pid_alive "$pid"; do
    if [ "$waited" -ge $((STOP_TIMEOUT * 5)) ]; then
      say "broker (pid $pid) still running after ${STOP_TIMEOUT}s: sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      waited=0
      while pid_alive "$pid"; do
        [ "$waited" -lt 50 ] || die "pid $pid survived SIGKILL for 10 s"
        sleep 0.2
        waited=$((waited + 1))
      done
      return 0
    fi
    sleep 0.2
    waited=$((waited + 1))
  done
}

cmd_up() {
  local pid
  if pid=$(running_pid); then
    die "a broker is already running from $DIR (pid $pid, $(bootstrap)); run 'kafka.sh down' first"
  fi
  check_java
  fetch_libs
  local p
  for p in "$PORT" "$CONTROLLER_PORT" "$SASL_PORT"; do
    if port_open "$p"; then
      die "port $HOST:$p is already in use; stop what holds it or set WEIR_KAFKA_PORT / WEIR_KAFKA_CONTROLLER_PORT / WEIR_KAFKA_SASL_PORT"
    fi
  done

  local start=$SECONDS
  fresh_dir
  write_server_properties
  local cluster_id
  cluster_id=$(new_cluster_id)
  say "formatting storage in $DIR/data (cluster id $cluster_id) ..."
  # shellcheck disable=SC2086
  if ! "$JAVA" $TOOL_JVM_OPTS -Dlog4j2.configurationFile="$SCRIPT_DIR/log4j2-tools.properties" \
      -cp "$LIBS/*" kafka.tools.StorageTool format \
      --cluster-id "$cluster_id" --config "$DIR/server.properties" \
      --feature "transaction.version=$TRANSACTION_VERSION" \
      --add-scram "SCRAM-SHA-256=[name=admin,password=$ADMIN_PASSWORD]" \
      --add-scram "SCRAM-SHA-512=[name=admin,password=$ADMIN_PASSWORD]" \
      >"$DIR/format.log" 2>&1; then
    sed 's/^/  | /' "$DIR/format.log" >&2
    die "formatting the storage failed"
  fi

  say "starting Kafka $VERSION on $HOST:$PORT (SASL $SASL_PORT, controller $CONTROLLER_PORT), log: $LOGFILE"
  # shellcheck disable=SC2086
  # GC and safepoint pauses go to gc.log beside kafka.log: a broker that stops
  # answering for seconds says there whether its JVM was stopped.
  nohup "$JAVA" $HEAP_OPTS $JVM_OPTS \
    "-Xlog:gc,safepoint:file=$DIR/gc.log:time,uptime:filecount=2,filesize=20m" \
    -Dlog4j2.configurationFile="$SCRIPT_DIR/log4j2-server.properties" \
    -Dlog4j2.shutdownHookEnabled=false \
    -Dkafka.logs.dir="$DIR" \
    -cp "$LIBS/*" kafka.Kafka "$DIR/server.properties" \
    </dev/null >>"$LOGFILE" 2>&1 &
  pid=$!
  printf '%s\n' "$pid" >"$PIDFILE"

  local deadline=$((SECONDS + START_TIMEOUT))
  while :; do
    if ! pid_alive "$pid"; then
      log_tail 60
      rm -f "$PIDFILE"
      die "the broker exited during startup (see $LOGFILE)"
    fi
    if port_open "$PORT" && port_open "$SASL_PORT" && grep -q 'Kafka Server started' "$LOGFILE" 2>/dev/null; then
      break
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      log_tail 60
      say "the broker did not come up within ${START_TIMEOUT}s: stopping it"
      stop_pid "$pid"
      rm -f "$PIDFILE"
      die "the broker did not start within ${START_TIMEOUT}s (WEIR_KAFKA_START_TIMEOUT); see $LOGFILE"
    fi
    sleep 0.5
  done

  printf 'KAFKA_BOOTSTRAP=%s:%s\nKAFKA_SASL_BOOTSTRAP=%s:%s\n' "$HOST" "$PORT" "$HOST" "$SASL_PORT" >"$ENVFILE"
  say "broker up in $((SECONDS - start)) s (pid $pid)"
  cat "$ENVFILE"
}

cmd_down() {
  if [ ! -f "$PIDFILE" ]; then
    say "no broker running (no pidfile in $DIR)"
    return 0
  fi
  local pid
  pid=$(tr -dc '0-9' <"$PIDFILE")
  if [ -z "$pid" ] || ! pid_alive "$pid"; then
    say "no broker running (stale pidfile removed)"
    rm -f "$PIDFILE"
    return 0
  fi
  if ! running_pid >/dev/null; then
    say "pid $pid from $PIDFILE is not this Kafka broker (pid reused?): leaving it alone, removing the pidfile"
    rm -f "$PIDFILE"
    return 0
  fi
  say "stopping the broker (pid $pid) ..."
  # A paused broker (`pause`) acts on SIGTERM only once it runs again.
  kill -CONT "$pid" 2>/dev/null || true
  stop_pid "$pid"
  rm -f "$PIDFILE"
  say "stopped"
}

cmd_status() {
  local pid
  if pid=$(running_pid); then
    printf 'running: pid %s, KAFKA_BOOTSTRAP=%s, KAFKA_SASL_BOOTSTRAP=%s, Kafka %s, dir %s\n' \
      "$pid" "$(bootstrap)" "$(sasl_bootstrap)" "$VERSION" "$DIR"
    return 0
  fi
  printf 'not running (dir %s)\n' "$DIR"
  return 3
}

# `pause` / `resume`: stop or continue the broker process (SIGSTOP / SIGCONT).
cmd_signal() {
  local pid
  pid=$(running_pid) || { say "no broker running from $DIR"; return 3; }
  kill "-$1" "$pid"
}

cmd_env() {
  running_pid >/dev/null || { say "no broker running from $DIR"; return 3; }
  printf 'KAFKA_BOOTSTRAP=%s\nKAFKA_SASL_BOOTSTRAP=%s\n' "$(bootstrap)" "$(sasl_bootstrap)"
}

# The compiled KafkaTenant admin program: built with javac into the cache once per
# source version (its hash names the directory), so each `tenant` call is one JVM.
tenant_classes() {
  local src="$SCRIPT_DIR/KafkaTenant.java" javac hash out
  if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/javac" ]; then javac="$JAVA_HOME/bin/javac"; else javac=javac; fi
  hash=$(sha256sum "$src" | cut -c1-16)
  out="$CACHE/$VERSION/tenant-tool/$hash"
  if [ ! -f "$out/KafkaTenant.class" ]; then
    command -v "$javac" >/dev/null 2>&1 || die "'tenant' compiles $src and needs javac: install a JDK (apt-get install openjdk-17-jdk-headless) or set JAVA_HOME to one"
    local tmp="$out.tmp.$$"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    "$javac" -nowarn -d "$tmp" -cp "$LIBS/*" "$src" >&2 || { rm -rf "$tmp"; die "javac failed on $src"; }
    rm -rf "$out"
    mv "$tmp" "$out"
  fi
  printf '%s\n' "$out"
}

# kafka.sh tenant ID PASSWORD PREFIX: see the usage at the top.
cmd_tenant() {
  [ $# -eq 3 ] || die "usage: kafka.sh tenant ID PASSWORD PREFIX"
  local id=$1 password=$2 prefix=$3
  if [ "$password" = - ]; then IFS= read -r password || true; fi
  # SCRAM user names travel in the SASL exchange, where ',' and '=' are special;
  # keep them to printable characters without those or blanks.
  case "$id" in ''|*[!A-Za-z0-9._@-]*) die "tenant id must be non-empty, of letters, digits and ._@- only: $id" ;; esac
  case "$prefix" in ''|*[!A-Za-z0-9._-]*) die "prefix must be non-empty, of letters, digits and ._- only (topic name characters): $prefix" ;; esac
  [ -n "$password" ] || die "the password must not be empty"
  running_pid >/dev/null || die "no broker running from $DIR; run 'kafka.sh up' first"
  check_java
  fetch_libs
  local classes
  classes=$(tenant_classes)
  # The password goes to the JVM through its environment, not its command line.
  # shellcheck disable=SC2086
  WEIR_TENANT_PASSWORD=$password "$JAVA" $TOOL_JVM_OPTS \
    -Dlog4j2.configurationFile="$SCRIPT_DIR/log4j2-tools.properties" \
    -cp "$LIBS/*:$classes" KafkaTenant "$(bootstrap)" "$id" "$prefix" \
    || die "could not set up tenant $id (see above)"
  say "tenant $id: SCRAM-SHA-256/512 user, ACLs prefixed on '$prefix' ($(sasl_bootstrap))"
}

# Run a Kafka main class; with add_bootstrap=yes, add --bootstrap-server of the
# running broker unless the args carry one.
run_tool() {
  local add_bootstrap=$1 class=$2
  shift 2
  check_java
  fetch_libs
  local a has_bootstrap=yes
  [ "$add_bootstrap" = no ] || has_bootstrap=no
  for a in "$@"; do
    case "$a" in --bootstrap-server|--bootstrap-server=*|--bootstrap-controller|--bootstrap-controller=*) has_bootstrap=yes ;; esac
  done
  if [ "$has_bootstrap" = no ] && [ "${1:-}" != --help ] && running_pid >/dev/null; then
    set -- --bootstrap-server "$(bootstrap)" "$@"
  fi
  # shellcheck disable=SC2086
  exec "$JAVA" ${RUN_TOOL_JVM_OPTS:-$TOOL_JVM_OPTS} -Dlog4j2.configurationFile="$SCRIPT_DIR/log4j2-tools.properties" \
    -cp "$LIBS/*" "$class" "$@"
}

usage() {
  sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2
}

# Sourced (by cluster.sh, for the helpers above): define, run nothing.
if [ "${BASH_SOURCE[0]}" != "$0" ]; then return 0; fi

cmd=${1:-}
[ $# -eq 0 ] || shift
case "$cmd" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  pause) cmd_signal STOP ;;
  resume) cmd_signal CONT ;;
  fetch) check_java; fetch_libs; say "jars in $LIBS" ;;
  env) cmd_env ;;
  tenant) cmd_tenant "$@" ;;
  topics) run_tool yes org.apache.kafka.tools.TopicCommand "$@" ;;
  groups) run_tool yes org.apache.kafka.tools.consumer.group.ConsumerGroupCommand "$@" ;;
  transactions)
    # TransactionsCommand takes --bootstrap-server before its subcommand.
    run_tool yes org.apache.kafka.tools.TransactionsCommand "$@" ;;
  produce) run_tool yes org.apache.kafka.tools.ConsoleProducer "$@" ;;
  consume) run_tool yes org.apache.kafka.tools.consumer.ConsoleConsumer "$@" ;;
  producer-perf) RUN_TOOL_JVM_OPTS=$PERF_JVM_OPTS run_tool yes org.apache.kafka.tools.ProducerPerformance "$@" ;;
  consumer-perf) RUN_TOOL_JVM_OPTS=$PERF_JVM_OPTS run_tool yes org.apache.kafka.tools.ConsumerPerformance "$@" ;;
  run)
    [ $# -ge 1 ] || die "usage: kafka.sh run MAIN_CLASS [ARGS...]"
    run_tool no "$@" ;;
  -h|--help|help) usage ;;
  '') usage; exit 2 ;;
  *) usage; die "unknown command: $cmd" ;;
esac
