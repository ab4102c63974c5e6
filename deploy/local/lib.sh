# Shared by kafka.sh, kafka-cluster.sh, otelcol.sh and postgres.sh: sourced, never run.
#
# The sourcing script sets NAME (its log prefix and the name of its lock) first. Every
# process is found again through its pid file only (never by a name pattern): a pid
# counts as ours only while its command line is still the program we started.
#
# Provides ROOT (the checkout) and STATE (IMPRINT_STATE_DIR, default .imprint).

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
STATE="${IMPRINT_STATE_DIR:-$ROOT/.imprint}"

log() { printf '%s: %s\n' "$NAME" "$*" >&2; }
die() { log "$*"; exit 1; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# the digits of a pid file, nothing when it is missing or empty
read_pid() { if [[ -s "$1" ]]; then tr -dc '0-9' <"$1"; fi; }

# one $NAME.sh at a time per checkout (several engineers may run 'up' at once)
lock() {
  mkdir -p "$STATE/run"
  exec 9>"$STATE/run/$NAME.lock"
  flock -w 180 9 || die "another $NAME.sh holds $STATE/run/$NAME.lock"
}

# dispatch 'up|down|status' "$@": runs cmd_<command> with the remaining arguments, under
# the lock for every command but 'status'; anything else prints the usage.
dispatch() {
  local commands="$1" command="${2:-}"
  if [[ -z "$command" || "|$commands|" != *"|$command|"* ]]; then
    echo "usage: $0 $commands" >&2
    exit 2
  fi
  [[ "$command" == status ]] || lock
  "cmd_$command" "${@:3}"
}

# stop_pid PID TERM|KILL: signal PID and wait for it to go (30 s), then KILL it (10 s).
stop_pid() {
  local pid="$1" sig="$2"
  kill "-$sig" "$pid" 2>/dev/null || true
  for _ in $(seq 1 300); do   # a controlled shutdown normally takes a few seconds
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  log "pid $pid still alive after 30s: KILL"
  kill -KILL "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  die "pid $pid survived KILL"
}

# ---------------------------------------------------------------- one process (kafka.sh, otelcol.sh)
# A script that runs one process calls one_process; ALIVE, where asked for, names its check that a
# pid is still really that process (never just any live pid: pids are recycled).

# one_process: the process's log is $STATE/logs/$NAME.log, its pid in $STATE/run/$NAME.pid
one_process() {
  LOG="$STATE/logs/$NAME.log"
  PIDFILE="$STATE/run/$NAME.pid"
  pid_of() { read_pid "$PIDFILE"; }
}

# mark_start LOGFILE WHAT: rotate LOGFILE past 50 MiB, then mark where this start begins in it
mark_start() {
  local logfile="$1" what="$2"
  if [[ -f "$logfile" ]] && (($(stat -c %s "$logfile") > 50 * 1024 * 1024)); then mv -f "$logfile" "$logfile.1"; fi
  printf '\n===== %s %s =====\n' "$what" "$(date -Is)" >>"$logfile"
}

# start_detached PIDFILE LOGFILE COMMAND...: COMMAND, detached, whose pid lands in PIDFILE
start_detached() {
  local pidfile="$1" logfile="$2"
  shift 2
  # A child shell records its own pid, then execs COMMAND in place (same pid); setsid
  # detaches it from this terminal/job so it outlives the caller.
  # shellcheck disable=SC2016  # $$ is the child's
  setsid bash -c 'echo $$ >"$0"; exec "$@"' "$pidfile" "$@" >>"$logfile" 2>&1 </dev/null 9>&- &
  # a loaded machine may take seconds to schedule the child shell: wait for its pid as long
  # as for the process itself, never conclude "exited" from a pid not yet written
  for _ in $(seq 1 $((START_TIMEOUT * 10))); do [[ -s "$pidfile" ]] && break; sleep 0.1; done
}

# wait_started PIDFILE LOGFILE WHAT ALIVE PAUSE READY...: until the command READY... succeeds
# (START_TIMEOUT, trying every PAUSE seconds); dies when the process exits first
wait_started() {
  local pidfile="$1" logfile="$2" what="$3" alive="$4" pause="$5" deadline=$((SECONDS + START_TIMEOUT)) pid
  shift 5
  while ((SECONDS < deadline)); do
    pid="$(read_pid "$pidfile")"
    if ! "$alive" "$pid"; then
      # alive but not (yet) recognised: caught inside its exec, when /proc shows no command line
      if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then sleep 0.1; continue; fi
      tail -n 40 "$logfile" >&2 || true
      die "$what (pid ${pid:-?}) exited during startup (see $logfile)"
    fi
    "$@" && return 0
    sleep "$pause"
  done
  tail -n 40 "$logfile" >&2 || true
  die "$what did not answer ($*) within ${START_TIMEOUT}s (see $logfile)"
}

# stop_process ALIVE TERM|KILL: stop the script's one process, if it runs
stop_process() {
  local alive="$1" sig="$2" pid
  pid="$(pid_of)"
  if ! "$alive" "$pid"; then
    rm -f "$PIDFILE"
    log "not running"
    return 0
  fi
  log "stopping pid $pid ($sig)"
  stop_pid "$pid" "$sig"
  rm -f "$PIDFILE"
  log "stopped"
}

# process_status ALIVE PORT DETAIL: prints whether the script's one process is up (answering
# on PORT), starting or down; succeeds only when up
process_status() {
  local alive="$1" port="$2" detail="$3" pid
  pid="$(pid_of)"
  if "$alive" "$pid" && port_open "$port"; then
    echo "$NAME: up (pid $pid, $detail)"
    return 0
  elif "$alive" "$pid"; then
    echo "$NAME: starting (pid $pid, 127.0.0.1:$port not answering)"
    return 1
  fi
  echo "$NAME: down"
  return 1
}

# ---------------------------------------------------------------- Kafka (kafka.sh, kafka-cluster.sh)
# The caller sets PORT, CONTROLLER_PORT, HEAP_OPTS, START_TIMEOUT, calls kafka_conf_dir, and sets JAVA_BIN="$(java_bin)"
# before it starts or asks a broker anything.

LIBS="${KAFKA_LIBS:-$ROOT/.imprint/kafka/libs}"   # the jars: kafka.sh resolves them, the cluster runs them too
# the same setting as services.common.settings.Settings.topic_partitions
PARTITIONS="${IMPRINT_TOPIC_PARTITIONS:-${KAFKA_TOPIC_PARTITIONS:-6}}"

# kafka_conf_dir DIR: where the client and logging configuration of a script's brokers lives
kafka_conf_dir() {
  CLIENT_CONF="$1/client.properties"
  LOG4J_BROKER="$1/log4j2-broker.xml"
  LOG4J_TOOLS="$1/log4j2-tools.xml"
}

TOPICS=(
  imprint.runtime.v1
  imprint.sources.v1
  imprint.publication.v1
  imprint.runs.v1
  imprint.delivery.v1
  imprint.control.v1
  imprint.deadletter.v1
)

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

# alive AND really a broker (guards against a recycled pid)
broker_alive() {
  local pid="$1"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null \
    && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'kafka\.Kafka'
}

tool() { # tool <main class> args...   (short-lived, time-bounded JVM for admin commands)
  local cls="$1"; shift
  timeout -k 5 "${TOOL_TIMEOUT:-60}" "$JAVA_BIN" -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$LOG4J_TOOLS" -cp "$LIBS/*" "$cls" "$@"
}

topics_cmd() { # topics_cmd BOOTSTRAP args...   (kafka-topics)
  local bootstrap="$1"; shift
  tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$bootstrap" --command-config "$CLIENT_CONF" "$@"
}

# log4j_config FILE TARGET ROOT_LEVEL [LOGGER...]: one console appender; each LOGGER at WARN
log4j_config() {
  local file="$1" target="$2" level="$3" logger
  shift 3
  {
    printf '<?xml version="1.0" encoding="UTF-8"?>\n<Configuration status="WARN">\n'
    printf '  <Appenders><Console name="console" target="%s">' "$target"
    printf '<PatternLayout pattern="[%%d] %%p %%m (%%c)%%n"/></Console></Appenders>\n'
    printf '  <Loggers>\n    <Root level="%s"><AppenderRef ref="console"/></Root>\n' "$level"
    for logger in "$@"; do printf '    <Logger name="%s" level="WARN"/>\n' "$logger"; done
    printf '  </Loggers>\n</Configuration>\n'
  } >"$file"
}

# the client and logging configuration every broker and admin command of a script shares
write_client_configs() {
  printf 'request.timeout.ms=5000\ndefault.api.timeout.ms=10000\n' >"$CLIENT_CONF"
  log4j_config "$LOG4J_BROKER" SYSTEM_OUT INFO kafka.request.logger kafka.log.LogCleaner \
    org.apache.kafka.storage.internals.log org.apache.kafka.clients
  log4j_config "$LOG4J_TOOLS" SYSTEM_ERR ERROR
}

# start_broker PIDFILE LOGFILE CONF: a detached broker JVM whose pid lands in PIDFILE
start_broker() {
  local pidfile="$1" logfile="$2" conf="$3"
  # shellcheck disable=SC2086  # HEAP_OPTS splits on purpose
  start_detached "$pidfile" "$logfile" "$JAVA_BIN" $HEAP_OPTS -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$LOG4J_BROKER" -Dkafka.logs.dir="$STATE/logs" \
    -cp "$LIBS/*" kafka.Kafka "$conf"
}

# broker_answers PORT: the broker on 127.0.0.1:PORT answers metadata
broker_answers() { port_open "$1" && TOOL_TIMEOUT=30 topics_cmd "127.0.0.1:$1" --list >/dev/null 2>&1; }

# wait_broker PIDFILE PORT LOGFILE WHAT: until the broker answers metadata (START_TIMEOUT)
wait_broker() { wait_started "$1" "$3" "$4" broker_alive 1 broker_answers "$2"; }

# ensure_topics BOOTSTRAP PARTITIONS REPLICATION [--config k=v ...]: create the missing TOPICS
ensure_topics() {
  local bootstrap="$1" partitions="$2" replication="$3" existing missing=() t pids=() failed=0 p
  shift 3
  existing="$(topics_cmd "$bootstrap" --list)" || die "could not list topics on $bootstrap"
  for t in "${TOPICS[@]}"; do grep -qx "$t" <<<"$existing" || missing+=("$t"); done
  if ((${#missing[@]} == 0)); then
    log "topics present: ${TOPICS[*]}"
    return 0
  fi
  log "creating topics ($partitions partitions, replication $replication $*): ${missing[*]}"
  for t in "${missing[@]}"; do
    topics_cmd "$bootstrap" --create --if-not-exists --topic "$t" --partitions "$partitions" \
      --replication-factor "$replication" "$@" >/dev/null &
    pids+=("$!")
  done
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
  ((failed == 0)) || die "topic creation failed"
}
