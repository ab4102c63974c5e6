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

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
STATE="${IMPRINT_STATE_DIR:-$ROOT/.imprint}"
KDIR="$STATE/kafka"
LIBS="${KAFKA_LIBS:-$ROOT/.imprint/kafka/libs}"
DATA="$KDIR/data"
CONF="$KDIR/server.properties"
CLIENT_CONF="$KDIR/client.properties"
LOG4J_BROKER="$KDIR/log4j2-broker.xml"
LOG4J_TOOLS="$KDIR/log4j2-tools.xml"
LOG="$STATE/logs/kafka.log"
PIDFILE="$STATE/run/kafka.pid"
POM="$ROOT/deploy/local/kafka/pom.xml"

PORT="${KAFKA_PORT:-9092}"
CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-9093}"
PARTITIONS="${IMPRINT_TOPIC_PARTITIONS:-${KAFKA_TOPIC_PARTITIONS:-6}}"
HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms256m -Xmx512m}"
START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
BOOTSTRAP="127.0.0.1:$PORT"
TOPICS=(
  imprint.runtime.v1
  imprint.sources.v1
  imprint.publication.v1
  imprint.runs.v1
  imprint.delivery.v1
  imprint.control.v1
  imprint.deadletter.v1
)

log() { printf 'kafka: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

java_bin() {
  local j="${JAVA:-}"
  if [[ -z "$j" && -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then j="$JAVA_HOME/bin/java"; fi
  if [[ -z "$j" ]]; then j="$(command -v java || true)"; fi
  if [[ -z "$j" ]]; then
    for cand in /usr/lib/jvm/java-17-openjdk-*/bin/java /usr/lib/jvm/*/bin/java; do
      [[ -x "$cand" ]] && { j="$cand"; break; }
    done
  fi
  [[ -n "$j" ]] || die "no java found (Kafka 4 needs Java 17+): apt-get install -y openjdk-17-jre-headless"
  local major
  major="$("$j" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1)"
  [[ "${major:-0}" -ge 17 ]] || die "$j is Java ${major:-?}; Kafka 4 needs Java 17+"
  printf '%s' "$j"
}

# ---------------------------------------------------------------- helpers
pid_of() { if [[ -s "$PIDFILE" ]]; then tr -dc '0-9' <"$PIDFILE"; fi; }

# alive AND really our broker (guards against a recycled pid)
pid_alive() {
  local pid="$1"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null \
    && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'kafka\.Kafka'
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

tool() { # tool <main class> args...   (short-lived, time-bounded JVM for admin commands)
  local cls="$1"; shift
  timeout -k 5 "${TOOL_TIMEOUT:-60}" "$JAVA_BIN" -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$LOG4J_TOOLS" -cp "$LIBS/*" "$cls" "$@"
}

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
  cat >"$CLIENT_CONF" <<'EOF'
request.timeout.ms=5000
default.api.timeout.ms=10000
EOF
  cat >"$LOG4J_BROKER" <<'EOF'
<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <Console name="out" target="SYSTEM_OUT">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </Console>
  </Appenders>
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
  <Appenders>
    <Console name="err" target="SYSTEM_ERR">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <Root level="ERROR"><AppenderRef ref="err"/></Root>
  </Loggers>
</Configuration>
EOF
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

start_broker() {
  if [[ -f "$LOG" ]] && (($(stat -c %s "$LOG") > 50 * 1024 * 1024)); then mv -f "$LOG" "$LOG.1"; fi
  : >>"$LOG"
  log "starting broker on $BOOTSTRAP (controller 127.0.0.1:$CONTROLLER_PORT), log $LOG"
  printf '\n===== kafka.sh up %s =====\n' "$(date -Is)" >>"$LOG"
  # A child shell records its own pid, then execs the JVM in place (same pid);
  # setsid detaches it from this terminal/job so it outlives the caller.
  # shellcheck disable=SC2086,SC2016  # HEAP_OPTS splits on purpose; $$ is the child's
  setsid bash -c 'echo $$ >"$0"; exec "$@"' "$PIDFILE" \
    "$JAVA_BIN" $HEAP_OPTS -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$LOG4J_BROKER" -Dkafka.logs.dir="$STATE/logs" \
    -cp "$LIBS/*" kafka.Kafka "$CONF" >>"$LOG" 2>&1 </dev/null 9>&- &
  for _ in $(seq 1 50); do [[ -s "$PIDFILE" ]] && break; sleep 0.1; done
}

wait_ready() {
  local deadline=$((SECONDS + START_TIMEOUT)) pid
  while ((SECONDS < deadline)); do
    pid="$(pid_of)"
    if ! pid_alive "$pid"; then
      tail -n 40 "$LOG" >&2 || true
      die "broker process ${pid:-?} exited during startup (see $LOG)"
    fi
    if port_open "$PORT" && TOOL_TIMEOUT=30 tool org.apache.kafka.tools.TopicCommand \
        --bootstrap-server "$BOOTSTRAP" --command-config "$CLIENT_CONF" --list >/dev/null 2>&1; then
      return 0
    fi
    sleep 1
  done
  tail -n 40 "$LOG" >&2 || true
  die "broker did not answer metadata on $BOOTSTRAP within ${START_TIMEOUT}s (see $LOG)"
}

ensure_topics() {
  local existing missing=() t
  existing="$(tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOTSTRAP" \
    --command-config "$CLIENT_CONF" --list)" || die "could not list topics on $BOOTSTRAP"
  for t in "${TOPICS[@]}"; do
    grep -qx "$t" <<<"$existing" || missing+=("$t")
  done
  if ((${#missing[@]} == 0)); then
    log "topics present: ${TOPICS[*]}"
    return 0
  fi
  log "creating topics (${PARTITIONS} partitions): ${missing[*]}"
  local pids=() failed=0 p
  for t in "${missing[@]}"; do
    tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOTSTRAP" --command-config "$CLIENT_CONF" \
      --create --if-not-exists --topic "$t" --partitions "$PARTITIONS" --replication-factor 1 >/dev/null &
    pids+=("$!")
  done
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
  ((failed == 0)) || die "topic creation failed"
}

# ---------------------------------------------------------------- commands
cmd_up() {
  JAVA_BIN="$(java_bin)"
  local pid
  pid="$(pid_of)"
  if pid_alive "$pid" && port_open "$PORT"; then
    log "already up (pid $pid, $BOOTSTRAP)"
    return 0
  fi
  if pid_alive "$pid"; then
    log "pid $pid is alive but $BOOTSTRAP does not answer yet; waiting"
    wait_ready
    ensure_topics
    return 0
  fi
  rm -f "$PIDFILE"
  if port_open "$PORT"; then die "127.0.0.1:$PORT is taken by another process (not ours: no live pid in $PIDFILE)"; fi
  if port_open "$CONTROLLER_PORT"; then die "127.0.0.1:$CONTROLLER_PORT is taken by another process"; fi
  resolve_jars
  write_configs
  format_storage
  start_broker
  wait_ready
  ensure_topics
  log "up (pid $(pid_of), bootstrap $BOOTSTRAP)"
}

cmd_down() {
  local pid
  pid="$(pid_of)"
  if ! pid_alive "$pid"; then
    rm -f "$PIDFILE"
    log "not running"
    return 0
  fi
  log "stopping pid $pid (TERM)"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 300); do   # controlled shutdown normally takes a few seconds
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "pid $pid still alive after 30s: KILL"
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  kill -0 "$pid" 2>/dev/null && die "pid $pid survived KILL"
  rm -f "$PIDFILE"
  log "stopped"
}

cmd_kill() {  # SIGKILL, no controlled shutdown: a crash, for the fault tier ('up' starts it again)
  local pid
  pid="$(pid_of)"
  if ! pid_alive "$pid"; then log "not running"; return 0; fi
  log "killing pid $pid (KILL)"
  kill -KILL "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && die "pid $pid survived KILL"
  rm -f "$PIDFILE"
}

cmd_reset() {
  cmd_down
  log "deleting $DATA"
  rm -rf "$DATA"
}

cmd_status() {
  local pid
  pid="$(pid_of)"
  if pid_alive "$pid" && port_open "$PORT"; then
    echo "kafka: up (pid $pid, bootstrap $BOOTSTRAP)"
    return 0
  elif pid_alive "$pid"; then
    echo "kafka: starting (pid $pid, $BOOTSTRAP not answering)"
    return 1
  fi
  echo "kafka: down"
  return 1
}

# one kafka.sh at a time per checkout (several engineers may run 'up' at once)
lock() { mkdir -p "$STATE/run"; exec 9>"$STATE/run/kafka.lock"; flock -w 180 9 || die "another kafka.sh holds $STATE/run/kafka.lock"; }

case "${1:-}" in
  up) lock; cmd_up ;;
  down) lock; cmd_down ;;
  kill) lock; cmd_kill ;;
  jars) lock; resolve_jars ;;
  reset) lock; cmd_reset ;;
  status) cmd_status ;;
  *) echo "usage: $0 up|down|kill|jars|reset|status" >&2; exit 2 ;;
esac
