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

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
STATE="${IMPRINT_STATE_DIR:-$ROOT/.imprint}"
CDIR="$STATE/kafka-cluster"
LIBS="${KAFKA_LIBS:-$ROOT/.imprint/kafka/libs}"
BROKERS="${KAFKA_BROKERS:-3}"
PORT="${KAFKA_PORT:-9092}"
CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-$((PORT + 100))}"
PARTITIONS="${IMPRINT_TOPIC_PARTITIONS:-${KAFKA_TOPIC_PARTITIONS:-6}}"
REPLICATION="${KAFKA_REPLICATION:-$((BROKERS < 3 ? BROKERS : 3))}"
MIN_INSYNC="${KAFKA_MIN_INSYNC:-$((REPLICATION > 1 ? REPLICATION - 1 : 1))}"
HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms128m -Xmx384m}"
START_TIMEOUT="${KAFKA_START_TIMEOUT:-120}"
CLIENT_CONF="$CDIR/client.properties"
LOG4J_BROKER="$CDIR/log4j2-broker.xml"
LOG4J_TOOLS="$CDIR/log4j2-tools.xml"
TOPICS=(
  imprint.runtime.v1
  imprint.sources.v1
  imprint.publication.v1
  imprint.runs.v1
  imprint.delivery.v1
  imprint.control.v1
  imprint.deadletter.v1
)

log() { printf 'kafka-cluster: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

java_bin() {
  local j="${JAVA:-}"
  if [[ -z "$j" && -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then j="$JAVA_HOME/bin/java"; fi
  if [[ -z "$j" ]]; then j="$(command -v java || true)"; fi
  [[ -n "$j" ]] || die "no java found (Kafka 4 needs Java 17+)"
  printf '%s' "$j"
}

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

pid_of() { local f; f="$(node_pidfile "$1")"; if [[ -s "$f" ]]; then tr -dc '0-9' <"$f"; fi; }

pid_alive() {
  local pid="$1"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null \
    && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'kafka\.Kafka'
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

tool() {
  local cls="$1"; shift
  timeout -k 5 "${TOOL_TIMEOUT:-60}" "$JAVA_BIN" -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$LOG4J_TOOLS" -cp "$LIBS/*" "$cls" "$@"
}

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
  cat >"$CLIENT_CONF" <<'EOF'
request.timeout.ms=5000
default.api.timeout.ms=10000
EOF
  cat >"$LOG4J_BROKER" <<'EOF'
<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders><Console name="out" target="SYSTEM_OUT"><PatternLayout pattern="[%d] %p %m (%c)%n"/></Console></Appenders>
  <Loggers>
    <Root level="INFO"><AppenderRef ref="out"/></Root>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="kafka.log.LogCleaner" level="WARN"/>
    <Logger name="org.apache.kafka.storage.internals.log" level="WARN"/>
    <Logger name="org.apache.kafka.clients" level="WARN"/>
  </Loggers>
</Configuration>
EOF
  cat >"$LOG4J_TOOLS" <<'EOF'
<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders><Console name="err" target="SYSTEM_ERR"><PatternLayout pattern="[%d] %p %m (%c)%n"/></Console></Appenders>
  <Loggers><Root level="ERROR"><AppenderRef ref="err"/></Root></Loggers>
</Configuration>
EOF
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
  local i="$1" logf pidf
  logf="$(node_log "$i")"; pidf="$(node_pidfile "$i")"
  if pid_alive "$(pid_of "$i")"; then return 0; fi
  port_open "$(node_port "$i")" && die "127.0.0.1:$(node_port "$i") is taken by another process"
  port_open "$(node_controller_port "$i")" && die "127.0.0.1:$(node_controller_port "$i") is taken by another process"
  : >>"$logf"
  printf '\n===== kafka-cluster.sh start %s %s =====\n' "$i" "$(date -Is)" >>"$logf"
  log "starting node $i on 127.0.0.1:$(node_port "$i") (controller $(node_controller_port "$i")), log $logf"
  # shellcheck disable=SC2086,SC2016  # HEAP_OPTS splits on purpose; $$ is the child's
  setsid bash -c 'echo $$ >"$0"; exec "$@"' "$pidf" \
    "$JAVA_BIN" $HEAP_OPTS -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExitOnOutOfMemoryError \
    -Djava.awt.headless=true -Dlog4j2.configurationFile="$LOG4J_BROKER" -Dkafka.logs.dir="$STATE/logs" \
    -cp "$LIBS/*" kafka.Kafka "$(node_conf "$i")" >>"$logf" 2>&1 </dev/null 9>&- &
  for _ in $(seq 1 50); do [[ -s "$pidf" ]] && break; sleep 0.1; done
}

wait_node() {
  local i="$1" deadline=$((SECONDS + START_TIMEOUT))
  while ((SECONDS < deadline)); do
    pid_alive "$(pid_of "$i")" || { tail -n 30 "$(node_log "$i")" >&2; die "node $i exited during startup"; }
    if port_open "$(node_port "$i")" && TOOL_TIMEOUT=30 tool org.apache.kafka.tools.TopicCommand \
        --bootstrap-server "127.0.0.1:$(node_port "$i")" --command-config "$CLIENT_CONF" --list >/dev/null 2>&1; then
      return 0
    fi
    sleep 1
  done
  tail -n 30 "$(node_log "$i")" >&2 || true
  die "node $i did not answer within ${START_TIMEOUT}s"
}

ensure_topics() {
  local existing missing=() t pids=() failed=0 p
  existing="$(tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$(bootstrap)" \
    --command-config "$CLIENT_CONF" --list)" || die "could not list topics"
  for t in "${TOPICS[@]}"; do grep -qx "$t" <<<"$existing" || missing+=("$t"); done
  ((${#missing[@]} == 0)) && { log "topics present"; return 0; }
  log "creating topics ($PARTITIONS partitions, replication $REPLICATION, min.insync.replicas $MIN_INSYNC): ${missing[*]}"
  for t in "${missing[@]}"; do
    tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$(bootstrap)" --command-config "$CLIENT_CONF" \
      --create --if-not-exists --topic "$t" --partitions "$PARTITIONS" --replication-factor "$REPLICATION" \
      --config "min.insync.replicas=$MIN_INSYNC" >/dev/null &
    pids+=("$!")
  done
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
  ((failed == 0)) || die "topic creation failed"
}

stop_all() {  # TERM every node at once (a node stopping alone would wait for a quorum that is leaving)
  local i pid
  for i in $(seq 1 "$BROKERS"); do
    pid="$(pid_of "$i")"
    pid_alive "$pid" && kill -TERM "$pid" 2>/dev/null || true
  done
  for i in $(seq 1 "$BROKERS"); do stop_node "$i" TERM; done
}

stop_node() {  # stop_node i TERM|KILL
  local i="$1" sig="$2" pid
  pid="$(pid_of "$i")"
  if ! pid_alive "$pid"; then rm -f "$(node_pidfile "$i")"; return 0; fi
  log "node $i: $sig pid $pid"
  kill "-$sig" "$pid" 2>/dev/null || true
  for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  kill -0 "$pid" 2>/dev/null && die "pid $pid survived KILL"
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
  ensure_topics
  log "up ($BROKERS brokers)"
  echo "IMPRINT_KAFKA_BOOTSTRAP=$(bootstrap)"
}

lock() { mkdir -p "$STATE/run"; exec 9>"$STATE/run/kafka-cluster.lock"; flock -w 180 9 || die "another kafka-cluster.sh holds the lock"; }

case "${1:-}" in
  up) lock; cmd_up ;;
  down) lock; stop_all; log "stopped" ;;
  reset) lock; stop_all; rm -rf "$CDIR"; log "reset" ;;
  kill) node_arg "${2:-}"; lock; stop_node "$2" KILL ;;
  start) node_arg "${2:-}"; lock; JAVA_BIN="$(java_bin)"; start_node "$2"; wait_node "$2"; log "node $2 up" ;;
  status)
    rc=0
    for i in $(seq 1 "$BROKERS"); do
      if pid_alive "$(pid_of "$i")" && port_open "$(node_port "$i")"; then
        echo "kafka node $i: up (pid $(pid_of "$i"), 127.0.0.1:$(node_port "$i"))"
      else echo "kafka node $i: down"; rc=1; fi
    done
    exit "$rc" ;;
  *) echo "usage: $0 up|down|reset|status|kill N|start N" >&2; exit 2 ;;
esac
