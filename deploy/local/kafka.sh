#!/usr/bin/env bash
# Local single-node Apache Kafka (KRaft, broker+controller in one JVM), no Docker.
#
#   bash deploy/local/kafka.sh up|down|kill|jars|reset|status
#
# The broker's jars are resolved once from Maven Central (deploy/local/kafka/pom.xml)
# into .imprint/kafka/libs; data lives in .imprint/kafka/data, the log in
# .imprint/logs/kafka.log, the pid in .imprint/run/kafka.pid (all git-ignored).
#
# IMPRINT_STATE_DIR (.imprint) moves data, logs and pids elsewhere; the jars stay in the
# checkout's .imprint/kafka/libs (KAFKA_LIBS overrides). 'kill' SIGKILLs the broker (a crash).
# Environment: KAFKA_PORT (9092), KAFKA_CONTROLLER_PORT (9093),
# IMPRINT_TOPIC_PARTITIONS (6; the same setting as services.common.settings.Settings.topic_partitions,
# KAFKA_TOPIC_PARTITIONS is read when it is unset), KAFKA_HEAP_OPTS (-Xms256m -Xmx512m),
# KAFKA_START_TIMEOUT seconds (90), JAVA (java from JAVA_HOME or PATH).
set -euo pipefail

NAME=kafka
# shellcheck source=deploy/local/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"   # ROOT, STATE, PARTITIONS, TOPICS, the broker helpers
one_process                                       # LOG, PIDFILE, pid_of
KDIR="$STATE/kafka"
kafka_conf_dir "$KDIR"
DATA="$KDIR/data"
CONF="$KDIR/server.properties"
POM="$ROOT/deploy/local/kafka/pom.xml"

PORT="${KAFKA_PORT:-9092}"
CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-9093}"
HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms256m -Xmx512m}"
START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
BOOTSTRAP="127.0.0.1:$PORT"

# ---------------------------------------------------------------- helpers
resolve_jars() {
  if compgen -G "$LIBS/kafka_2.13-*.jar" >/dev/null && compgen -G "$LIBS/kafka-tools-*.jar" >/dev/null; then
    return 0
  fi
  command -v mvn >/dev/null || die "mvn is missing: apt-get install -y maven"
  log "resolving Kafka jars from Maven Central into $LIBS (once)"
  local tmp="$LIBS.partial"
  rm -rf "$tmp"
  mkdir -p "$STATE/logs"
  if ! mvn -q -B -Dstyle.color=never -f "$POM" dependency:copy-dependencies -DincludeScope=runtime \
      -DoutputDirectory="$tmp" >"$STATE/logs/kafka-maven.log" 2>&1; then
    tail -n 30 "$STATE/logs/kafka-maven.log" >&2
    die "maven could not resolve $POM (see $STATE/logs/kafka-maven.log)"
  fi
  rm -rf "$LIBS"
  mv "$tmp" "$LIBS"
}

write_configs() {
  mkdir -p "$KDIR" "$DATA" "$STATE/logs" "$STATE/run"
  cat >"$CONF" <<EOF
# written by deploy/local/kafka.sh on every 'up'; edits are lost
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$DATA
num.partitions=$PARTITIONS
default.replication.factor=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
min.insync.replicas=1
group.initial.rebalance.delay.ms=0
log.retention.hours=168
log.segment.bytes=67108864
EOF
  write_client_configs
}

format_storage() {
  # Kafka 4 (KRaft only) refuses to start on an unformatted log dir. The dynamic
  # quorum (controller.quorum.bootstrap.servers) needs --standalone for a
  # single controller; the voter's CONTROLLER endpoint is recorded at format
  # time, so changing KAFKA_CONTROLLER_PORT later needs a 'reset'.
  local marker="$DATA/.imprint-formatted"
  if [[ -f "$DATA/meta.properties" ]]; then
    if [[ -f "$marker" ]] && ! grep -qx "controller_port=$CONTROLLER_PORT" "$marker"; then
      die "data in $DATA was formatted for another KAFKA_CONTROLLER_PORT ($(cat "$marker")); run 'reset' or use that port"
    fi
    return 0
  fi
  local cluster_id
  cluster_id="$(tool kafka.tools.StorageTool random-uuid | tail -n1 | tr -d '[:space:]')"
  [[ -n "$cluster_id" ]] || die "could not generate a cluster id"
  log "formatting $DATA (cluster id $cluster_id, --standalone)"
  tool kafka.tools.StorageTool format --config "$CONF" --cluster-id "$cluster_id" --standalone --ignore-formatted >&2 \
    || die "storage format failed"
  printf 'cluster_id=%s\ncontroller_port=%s\n' "$cluster_id" "$CONTROLLER_PORT" >"$marker"
}

start() {
  log "starting broker on $BOOTSTRAP (controller 127.0.0.1:$CONTROLLER_PORT), log $LOG"
  mark_start "$LOG" "kafka.sh up"
  start_broker "$PIDFILE" "$LOG" "$CONF"
}

wait_ready() { wait_broker "$PIDFILE" "$PORT" "$LOG" "broker"; }

ensure_all_topics() { ensure_topics "$BOOTSTRAP" "$PARTITIONS" 1; }

# ---------------------------------------------------------------- commands
cmd_up() {
  JAVA_BIN="$(java_bin)"
  local pid
  pid="$(pid_of)"
  if broker_alive "$pid" && port_open "$PORT"; then
    log "already up (pid $pid, $BOOTSTRAP)"
    return 0
  fi
  if broker_alive "$pid"; then
    log "pid $pid is alive but $BOOTSTRAP does not answer yet; waiting"
    wait_ready
    ensure_all_topics
    return 0
  fi
  rm -f "$PIDFILE"
  if port_open "$PORT"; then die "127.0.0.1:$PORT is taken by another process (not ours: no live pid in $PIDFILE)"; fi
  if port_open "$CONTROLLER_PORT"; then die "127.0.0.1:$CONTROLLER_PORT is taken by another process"; fi
  resolve_jars
  write_configs
  format_storage
  start
  wait_ready
  ensure_all_topics
  log "up (pid $(pid_of), bootstrap $BOOTSTRAP)"
}

# TERM (a controlled shutdown) or KILL (a crash); KILL after 30 s either way
cmd_down() { stop_process broker_alive TERM; }

cmd_kill() { stop_process broker_alive KILL; }  # no controlled shutdown: a crash, for the fault tier ('up' starts it again)

cmd_jars() { resolve_jars; }

cmd_reset() {
  cmd_down
  log "deleting $DATA"
  rm -rf "$DATA"
}

cmd_status() { process_status broker_alive "$PORT" "bootstrap $BOOTSTRAP"; }

dispatch "up|down|kill|jars|reset|status" "$@"
