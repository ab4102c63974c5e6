#!/usr/bin/env bash
# A local 3-broker Apache Kafka cluster (KRaft; every node is broker+controller, a static
# three-voter quorum), no Docker. The single-node broker is deploy/local/kafka.sh; this is
# the cluster tier (issue 12.5): topics with replication factor 3 and min.insync.replicas=2.
#
#   bash deploy/local/kafka-cluster.sh up|down|reset|status
#   bash deploy/local/kafka-cluster.sh kill N     # SIGKILL node N (1..KAFKA_BROKERS): a crash
#   bash deploy/local/kafka-cluster.sh start N    # start node N again and wait until it answers
#
# Node i (1-based) listens on 127.0.0.1:$((KAFKA_PORT + i - 1)) (clients) and
# 127.0.0.1:$((KAFKA_CONTROLLER_PORT + i - 1)) (quorum). Data in
# $IMPRINT_STATE_DIR/kafka-cluster/node-i, logs in $IMPRINT_STATE_DIR/logs/kafka-node-i.log,
# pids in $IMPRINT_STATE_DIR/run/kafka-node-i.pid. The jars are kafka.sh's
# (.imprint/kafka/libs, resolved from Maven Central by 'kafka.sh up' once).
#
# Environment: IMPRINT_STATE_DIR (.imprint), KAFKA_BROKERS (3), KAFKA_PORT (9092),
# KAFKA_CONTROLLER_PORT (KAFKA_PORT+100), IMPRINT_TOPIC_PARTITIONS or KAFKA_TOPIC_PARTITIONS (6),
# KAFKA_REPLICATION (min(3, KAFKA_BROKERS)), KAFKA_MIN_INSYNC (KAFKA_REPLICATION-1, at least 1),
# KAFKA_HEAP_OPTS (-Xms128m -Xmx384m), KAFKA_LIBS, KAFKA_START_TIMEOUT seconds (120), JAVA.
#
# After 'up': IMPRINT_KAFKA_BOOTSTRAP=127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3 (printed).
set -euo pipefail

NAME=kafka-cluster
# shellcheck source=deploy/local/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"   # ROOT, STATE, PARTITIONS, TOPICS, the broker helpers
CDIR="$STATE/kafka-cluster"
kafka_conf_dir "$CDIR"
BROKERS="${KAFKA_BROKERS:-3}"
PORT="${KAFKA_PORT:-9092}"
CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-$((PORT + 100))}"
REPLICATION="${KAFKA_REPLICATION:-$((BROKERS < 3 ? BROKERS : 3))}"
MIN_INSYNC="${KAFKA_MIN_INSYNC:-$((REPLICATION > 1 ? REPLICATION - 1 : 1))}"
HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms128m -Xmx384m}"
START_TIMEOUT="${KAFKA_START_TIMEOUT:-120}"

node_port() { echo $((PORT + $1 - 1)); }
node_controller_port() { echo $((CONTROLLER_PORT + $1 - 1)); }
node_pidfile() { echo "$STATE/run/kafka-node-$1.pid"; }
node_log() { echo "$STATE/logs/kafka-node-$1.log"; }
node_data() { echo "$CDIR/node-$1/data"; }
node_conf() { echo "$CDIR/node-$1/server.properties"; }

bootstrap() {
  local i out=()
  for i in $(seq 1 "$BROKERS"); do out+=("127.0.0.1:$(node_port "$i")"); done
  (IFS=,; echo "${out[*]}")
}

voters() {
  local i out=()
  for i in $(seq 1 "$BROKERS"); do out+=("$i@127.0.0.1:$(node_controller_port "$i")"); done
  (IFS=,; echo "${out[*]}")
}

pid_of() { read_pid "$(node_pidfile "$1")"; }

write_configs() {
  mkdir -p "$CDIR" "$STATE/logs" "$STATE/run"
  local i
  for i in $(seq 1 "$BROKERS"); do
    mkdir -p "$(node_data "$i")"
    cat >"$(node_conf "$i")" <<EOF
# written by deploy/local/kafka-cluster.sh on every 'up'; edits are lost
process.roles=broker,controller
node.id=$i
controller.quorum.voters=$(voters)
listeners=PLAINTEXT://127.0.0.1:$(node_port "$i"),CONTROLLER://127.0.0.1:$(node_controller_port "$i")
advertised.listeners=PLAINTEXT://127.0.0.1:$(node_port "$i")
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$(node_data "$i")
num.partitions=$PARTITIONS
default.replication.factor=$REPLICATION
min.insync.replicas=$MIN_INSYNC
unclean.leader.election.enable=false
auto.create.topics.enable=false
offsets.topic.replication.factor=$REPLICATION
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=$REPLICATION
transaction.state.log.min.isr=$MIN_INSYNC
share.coordinator.state.topic.replication.factor=$REPLICATION
share.coordinator.state.topic.min.isr=$MIN_INSYNC
group.initial.rebalance.delay.ms=0
replica.lag.time.max.ms=10000
log.retention.hours=168
log.segment.bytes=67108864
EOF
  done
  write_client_configs
}

format_storage() {
  # A static quorum (controller.quorum.voters): every node is formatted with the same
  # cluster id and without --standalone. Changing ports or KAFKA_BROKERS needs a 'reset'.
  local marker="$CDIR/.imprint-formatted" wanted cluster_id i
  wanted="brokers=$BROKERS voters=$(voters)"
  if [[ -f "$marker" ]]; then
    grep -qxF "$wanted" "$marker" || die "$CDIR was formatted for another layout ($(cat "$marker")); run 'reset'"
    return 0
  fi
  cluster_id="$(tool kafka.tools.StorageTool random-uuid | tail -n1 | tr -d '[:space:]')"
  [[ -n "$cluster_id" ]] || die "could not generate a cluster id"
  for i in $(seq 1 "$BROKERS"); do
    log "formatting node $i (cluster id $cluster_id)"
    tool kafka.tools.StorageTool format --config "$(node_conf "$i")" --cluster-id "$cluster_id" \
      --ignore-formatted >&2 || die "storage format of node $i failed"
  done
  printf '%s\n' "$wanted" >"$marker"
}

start_node() {
  local i="$1" logf
  logf="$(node_log "$i")"
  if broker_alive "$(pid_of "$i")"; then return 0; fi
  port_open "$(node_port "$i")" && die "127.0.0.1:$(node_port "$i") is taken by another process"
  port_open "$(node_controller_port "$i")" && die "127.0.0.1:$(node_controller_port "$i") is taken by another process"
  mark_start "$logf" "kafka-cluster.sh start $i"
  log "starting node $i on 127.0.0.1:$(node_port "$i") (controller $(node_controller_port "$i")), log $logf"
  start_broker "$(node_pidfile "$i")" "$logf" "$(node_conf "$i")"
}

wait_node() { wait_broker "$(node_pidfile "$1")" "$(node_port "$1")" "$(node_log "$1")" "node $1"; }

stop_all() {  # TERM every node at once (a node stopping alone would wait for a quorum that is leaving)
  local i pid
  for i in $(seq 1 "$BROKERS"); do
    pid="$(pid_of "$i")"
    broker_alive "$pid" && kill -TERM "$pid" 2>/dev/null || true
  done
  for i in $(seq 1 "$BROKERS"); do stop_node "$i" TERM; done
}

stop_node() {  # stop_node i TERM|KILL
  local i="$1" sig="$2" pid
  pid="$(pid_of "$i")"
  if broker_alive "$pid"; then
    log "node $i: $sig pid $pid"
    stop_pid "$pid" "$sig"
  fi
  rm -f "$(node_pidfile "$i")"
}

node_arg() {
  [[ "${1:-}" =~ ^[0-9]+$ ]] && (($1 >= 1 && $1 <= BROKERS)) || die "name a node 1..$BROKERS"
}

cmd_up() {
  JAVA_BIN="$(java_bin)"
  compgen -G "$LIBS/kafka_2.13-*.jar" >/dev/null || die "no Kafka jars in $LIBS: run 'bash deploy/local/kafka.sh up' once"
  ((BROKERS >= 1)) || die "KAFKA_BROKERS must be at least 1"
  write_configs
  format_storage
  local i
  for i in $(seq 1 "$BROKERS"); do start_node "$i"; done
  for i in $(seq 1 "$BROKERS"); do wait_node "$i"; done
  ensure_topics "$(bootstrap)" "$PARTITIONS" "$REPLICATION" --config "min.insync.replicas=$MIN_INSYNC"
  log "up ($BROKERS brokers)"
  echo "IMPRINT_KAFKA_BOOTSTRAP=$(bootstrap)"
}

cmd_down() { stop_all; log "stopped"; }

cmd_reset() { stop_all; rm -rf "$CDIR"; log "reset"; }

cmd_kill() { node_arg "${1:-}"; stop_node "$1" KILL; }

cmd_start() { node_arg "${1:-}"; JAVA_BIN="$(java_bin)"; start_node "$1"; wait_node "$1"; log "node $1 up"; }

cmd_status() {
  local i rc=0
  for i in $(seq 1 "$BROKERS"); do
    if broker_alive "$(pid_of "$i")" && port_open "$(node_port "$i")"; then
      echo "kafka node $i: up (pid $(pid_of "$i"), 127.0.0.1:$(node_port "$i"))"
    else echo "kafka node $i: down"; rc=1; fi
  done
  return "$rc"
}

dispatch "up|down|reset|status|kill|start" "$@"
