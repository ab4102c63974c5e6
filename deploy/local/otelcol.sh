#!/usr/bin/env bash
# Local OpenTelemetry Collector: an OTLP/HTTP receiver whose file exporter writes every span it
# receives as OTLP JSON, one export request a line. Built here from its Go modules (no Docker,
# no prebuilt binary), so a test can read back exactly what a real collector received.
#
#   bash deploy/local/otelcol.sh build|up|down|status
#
# Sources: deploy/local/otelcol/ (the Collector builder's output for builder-config.yaml,
# collector release v0.161.0; go.mod and go.sum pin every module). 'build' compiles them once
# into .imprint/otelcol/bin/otelcol-<digest of the sources and Go version> and prints that path;
# like the Kafka jars, the binary stays in the checkout's .imprint when IMPRINT_STATE_DIR moves
# (OTELCOL_BIN_DIR overrides). Go's module and build caches are Go's defaults (GOMODCACHE,
# GOCACHE), shared by every checkout on the machine: only the first build of a machine compiles.
#
# 'up' writes $STATE/otelcol/config.yaml and receives OTLP/HTTP on 127.0.0.1:$OTELCOL_HTTP_PORT;
# spans land in $STATE/otelcol/spans.jsonl (OTELCOL_SPANS overrides), the log in
# $STATE/logs/otelcol.log, the pid in $STATE/run/otelcol.pid (all git-ignored). Point a part
# at it with OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$OTELCOL_HTTP_PORT.
# Environment: OTELCOL_HTTP_PORT (4318), OTELCOL_START_TIMEOUT seconds (30), GO (go from PATH,
# else /usr/local/go/bin/go).
set -euo pipefail

NAME=otelcol
# shellcheck source=deploy/local/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"   # ROOT, STATE, log/die, lock, dispatch, one process's helpers
one_process                                       # LOG, PIDFILE, pid_of
SRC="$ROOT/deploy/local/otelcol"
BIN_DIR="${OTELCOL_BIN_DIR:-$ROOT/.imprint/otelcol/bin}"
ODIR="$STATE/otelcol"
CONF="$ODIR/config.yaml"
SPANS="${OTELCOL_SPANS:-$ODIR/spans.jsonl}"
PORT="${OTELCOL_HTTP_PORT:-4318}"
START_TIMEOUT="${OTELCOL_START_TIMEOUT:-30}"

# ---------------------------------------------------------------- helpers
# alive AND really this state folder's collector (guards against a recycled pid)
collector_alive() {
  local pid="$1"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null \
    && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "--config file:$CONF"
}

go_bin() {
  local g="${GO:-$(command -v go || true)}"
  if [[ -z "$g" && -x /usr/local/go/bin/go ]]; then g=/usr/local/go/bin/go; fi
  [[ -n "$g" ]] || die "no go found: the collector is built from its Go modules (Go 1.26 or newer)"
  printf '%s' "$g"
}

SOURCES=(builder-config.yaml go.mod go.sum components.go main.go main_others.go main_windows.go)

# the binary for these sources and this Go: a change to either builds a new one
binary_path() {
  local digest
  digest="$( { "$1" version; (cd "$SRC" && cat "${SOURCES[@]}"); } | sha256sum | cut -c1-16)"
  printf '%s/otelcol-%s' "$BIN_DIR" "$digest"
}

# build: print the binary's path, compiling it first when it is missing. Several checkouts'
# state folders share BIN_DIR, so the build holds its own lock there, not the state's.
build() {
  local go bin work
  go="$(go_bin)"
  bin="$(binary_path "$go")"
  if [[ -x "$bin" ]]; then
    printf '%s\n' "$bin"
    return 0
  fi
  mkdir -p "$BIN_DIR"
  exec 8>"$BIN_DIR/.build.lock"
  flock -w 900 8 || die "another build holds $BIN_DIR/.build.lock"
  if [[ ! -x "$bin" ]]; then
    # a copy, so -mod=mod never rewrites the checkout's go.mod or go.sum
    work="$BIN_DIR/src.partial"
    rm -rf "$work"
    mkdir -p "$work" "$STATE/logs"
    (cd "$SRC" && cp "${SOURCES[@]}" "$work/")
    log "building $(basename "$bin") from $SRC (the first build on a machine downloads and compiles the modules)"
    if ! (cd "$work" && GOFLAGS="-mod=mod -buildvcs=false" GOTOOLCHAIN=local CGO_ENABLED=0 \
        "$go" build -trimpath -ldflags="-s -w" -o "$bin.partial" .) >"$STATE/logs/otelcol-build.log" 2>&1; then
      tail -n 30 "$STATE/logs/otelcol-build.log" >&2
      die "go build failed (see $STATE/logs/otelcol-build.log)"
    fi
    mv -f "$bin.partial" "$bin"
    rm -rf "$work"
    find "$BIN_DIR" -maxdepth 1 -name 'otelcol-*' ! -path "$bin" -delete   # earlier sources' binaries
  fi
  exec 8>&-
  printf '%s\n' "$bin"
}

write_config() {
  mkdir -p "$ODIR" "$(dirname "$SPANS")" "$STATE/logs" "$STATE/run"
  cat >"$CONF" <<EOF
# written by deploy/local/otelcol.sh on every 'up'; edits are lost
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:$PORT
exporters:
  file:
    path: $SPANS
    format: json
    flush_interval: 100ms
    rotation:
      max_megabytes: 64
      max_backups: 2
service:
  telemetry:
    metrics:
      level: none   # no internal metrics endpoint: it would take a fixed port (8888)
    logs:
      level: info
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
EOF
}

wait_ready() { wait_started "$PIDFILE" "$LOG" collector collector_alive 0.1 port_open "$PORT"; }

# ---------------------------------------------------------------- commands
cmd_build() { build; }

cmd_up() {
  local pid bin
  pid="$(pid_of)"
  if collector_alive "$pid" && port_open "$PORT"; then
    log "already up (pid $pid, http://127.0.0.1:$PORT)"
    return 0
  fi
  if collector_alive "$pid"; then
    wait_ready
    return 0
  fi
  rm -f "$PIDFILE"
  if port_open "$PORT"; then die "127.0.0.1:$PORT is taken by another process (not ours: no live pid in $PIDFILE)"; fi
  bin="$(build)"
  write_config
  mark_start "$LOG" "otelcol.sh up"
  log "starting on http://127.0.0.1:$PORT, spans to $SPANS, log $LOG"
  start_detached "$PIDFILE" "$LOG" "$bin" --config "file:$CONF"
  wait_ready
  log "up (pid $(pid_of), http://127.0.0.1:$PORT)"
}

cmd_down() { stop_process collector_alive TERM; }   # the file exporter flushes on a controlled shutdown

cmd_status() { process_status collector_alive "$PORT" "http://127.0.0.1:$PORT, spans $SPANS"; }

dispatch "build|up|down|status" "$@"
