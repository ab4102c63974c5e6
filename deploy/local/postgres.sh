#!/usr/bin/env bash
# Local PostgreSQL cluster for imprint, no Docker.
#
#   bash deploy/local/postgres.sh up|down|kill|reset|status
#
# Uses Debian's PostgreSQL (installed with apt-get when missing). The cluster
# lives in .imprint/postgres/data, runs as the 'postgres' system user (the
# server refuses to run as root), listens on 127.0.0.1:${PG_PORT:-5432} only,
# logs to .imprint/logs/postgres.log; its pid is in the data dir's
# postmaster.pid and copied to .imprint/run/postgres.pid.
# Creates role imprint/imprint (LOGIN CREATEDB) and databases imprint, imprint_test.
# IMPRINT_STATE_DIR moves .imprint (data, logs, pids) elsewhere, e.g. a private
# server for a test on another PG_PORT; 'kill' is an immediate (crash) stop.
#
# If the postgres user cannot reach the repository (a parent folder outside the
# repo is not traversable), the cluster is placed in
# /var/tmp/imprint-postgres-<hash of repo path> and .imprint/postgres/data is a
# symlink to it.
set -euo pipefail

NAME=postgres
# shellcheck source=deploy/local/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"   # ROOT, STATE, log, die, port_open, lock, dispatch
PGROOT="$STATE/postgres"
DATA_LINK="$PGROOT/data"
LOG_LINK="$STATE/logs/postgres.log"
PIDCOPY="$STATE/run/postgres.pid"
PORT="${PG_PORT:-5432}"
PGUSER_SYS=postgres
SOCKDIR=/tmp   # admin access as the postgres superuser goes through a unix socket (peer auth)
APP_ROLE=imprint
APP_PASSWORD=imprint
DATABASES=(imprint imprint_test)

as_pg() { (cd / && runuser -u "$PGUSER_SYS" -- "$@" 9>&-); }   # 9 = our lock: the server must not inherit it

find_bindir() {
  local d best=""
  for d in /usr/lib/postgresql/*/bin; do
    [[ -x "$d/pg_ctl" && -x "$d/initdb" ]] && best="$d"   # glob order: the last is the newest
  done
  if [[ -z "$best" ]] && command -v pg_ctl >/dev/null && command -v initdb >/dev/null; then
    best="$(dirname "$(readlink -f "$(command -v pg_ctl)")")"
  fi
  printf '%s' "$best"
}

ensure_installed() {
  BIN="$(find_bindir)"
  if [[ -z "$BIN" ]]; then
    log "PostgreSQL server binaries missing: installing Debian's postgresql"
    # keep the package from creating and starting its own 'main' cluster on our port
    if [[ ! -e /etc/postgresql-common/createcluster.conf ]]; then
      mkdir -p /etc/postgresql-common
      echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.conf
    fi
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y -o Dpkg::Options::=--force-confold postgresql
    BIN="$(find_bindir)"
    [[ -n "$BIN" ]] || die "postgresql installed but no pg_ctl/initdb found"
  fi
  if ! id -u "$PGUSER_SYS" >/dev/null 2>&1; then
    log "creating system user $PGUSER_SYS"
    useradd --system --user-group --home-dir /var/lib/postgresql --shell /bin/bash "$PGUSER_SYS"
  fi
}

# Where the cluster really lives (follows the fallback symlink when present).
data_dir() {
  if [[ -L "$DATA_LINK" ]]; then readlink -f "$DATA_LINK"; else printf '%s' "$DATA_LINK"; fi
}

# Make $PGROOT reachable by the postgres user: chmod o+x only on folders from
# the repo root down; never above it. Returns non-zero if still unreachable.
make_reachable() {
  mkdir -p "$PGROOT" "$STATE/logs" "$STATE/run"
  local d
  for d in "$ROOT" "$STATE" "$PGROOT" "$STATE/logs"; do
    as_pg test -x "$d" 2>/dev/null || chmod o+x "$d" 2>/dev/null || true
  done
  as_pg test -x "$PGROOT" 2>/dev/null && as_pg test -x "$STATE/logs" 2>/dev/null
}

prepare_dirs() {
  local data
  if [[ -e "$DATA_LINK" || -L "$DATA_LINK" ]]; then
    data="$(data_dir)"
  elif make_reachable; then
    data="$DATA_LINK"
  else
    local h
    local key="$ROOT"
    [[ "$STATE" == "$ROOT/.imprint" ]] || key="$ROOT|$STATE"   # a private state dir gets its own place
    h="$(printf '%s' "$key" | sha1sum | cut -c1-12)"
    data="/var/tmp/imprint-postgres-$h/data"
    log "$ROOT is not traversable by user $PGUSER_SYS; cluster goes to $data (symlinked)"
    mkdir -p "$(dirname "$data")"
    ln -sfn "$data" "$DATA_LINK"
  fi
  mkdir -p "$data" "$STATE/logs" "$STATE/run"
  chown "$PGUSER_SYS:" "$data"
  chmod 700 "$data"
  as_pg test -w "$data" || die "user $PGUSER_SYS cannot write $data"
  DATA="$data"
  # the server log: in .imprint/logs when reachable, else beside the data dir (symlinked)
  if as_pg test -x "$STATE/logs" 2>/dev/null && [[ "$DATA" == "$DATA_LINK" ]]; then
    LOGFILE="$LOG_LINK"
    [[ -L "$LOGFILE" ]] && rm -f "$LOGFILE"
  else
    LOGFILE="$(dirname "$DATA")/postgres.log"
    ln -sfn "$LOGFILE" "$LOG_LINK"
  fi
  touch "$LOGFILE"
  chown "$PGUSER_SYS:" "$LOGFILE"
}

init_cluster() {
  [[ -f "$DATA/PG_VERSION" ]] && return 0
  log "initdb $DATA"
  as_pg "$BIN/initdb" -D "$DATA" -U postgres -E UTF8 --locale=C \
    --auth-local=peer --auth-host=scram-sha-256 >>"$LOGFILE" 2>&1 \
    || { tail -n 20 "$LOGFILE" >&2; die "initdb failed"; }
  echo "include_if_exists = 'imprint.conf'" >>"$DATA/postgresql.conf"
}

write_conf() {
  # rewritten on every 'up' so PG_PORT changes apply
  cat >"$DATA/imprint.conf" <<EOF
# written by deploy/local/postgres.sh on every 'up'; edits are lost
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$SOCKDIR'
max_connections = 200
shared_buffers = 1GB
# Durability stays on (fsync, synchronous_commit, full_page_writes). Checkpoints are spaced
# by time, not forced by WAL volume: with the default 1GB a sustained load checkpointed
# every 2-4 minutes back to back ("checkpoints are occurring too frequently"), and every
# checkpoint restarts full-page images in the WAL of each commit.
max_wal_size = 8GB
min_wal_size = 1GB
checkpoint_timeout = 15min
wal_compression = lz4
password_encryption = 'scram-sha-256'
log_timezone = 'UTC'
timezone = 'UTC'
EOF
  chown "$PGUSER_SYS:" "$DATA/imprint.conf"
}

pidfile_pid() { if [[ -f "$DATA/postmaster.pid" ]]; then head -n1 "$DATA/postmaster.pid" | tr -dc '0-9'; fi; }

running() { as_pg "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; }

ready() { "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT" -t 2; }

sql() { as_pg "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$SOCKDIR" -p "$PORT" -U postgres -d postgres "$@"; }

ensure_role_and_dbs() {
  sql -c "DO \$\$ BEGIN
            IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$APP_ROLE') THEN
              CREATE ROLE $APP_ROLE LOGIN CREATEDB PASSWORD '$APP_PASSWORD';
            ELSE
              ALTER ROLE $APP_ROLE LOGIN CREATEDB PASSWORD '$APP_PASSWORD';
            END IF;
          END \$\$;"
  local db
  for db in "${DATABASES[@]}"; do
    if [[ "$(sql -tAc "SELECT 1 FROM pg_database WHERE datname = '$db'")" != 1 ]]; then
      log "creating database $db"
      sql -c "CREATE DATABASE $db OWNER $APP_ROLE"
    fi
  done
}

wait_ready() {
  local deadline=$((SECONDS + 60))
  until ready; do
    ((SECONDS < deadline)) || die "pg_isready did not answer on 127.0.0.1:$PORT within 60s (see $LOG_LINK)"
    sleep 0.5
  done
}

cmd_up() {
  ensure_installed
  prepare_dirs
  if running && ready; then
    pidfile_pid >"$PIDCOPY"
    ensure_role_and_dbs
    log "already up (pid $(pidfile_pid), 127.0.0.1:$PORT)"
    return 0
  fi
  init_cluster
  write_conf
  if ! running; then
    port_open "$PORT" && die "127.0.0.1:$PORT is taken by another server (not the cluster in $DATA)"
    log "starting on 127.0.0.1:$PORT (data $DATA, log $LOG_LINK)"
    as_pg "$BIN/pg_ctl" -D "$DATA" -l "$LOGFILE" -w -t 60 start >/dev/null \
      || { tail -n 20 "$LOGFILE" >&2; die "pg_ctl start failed"; }
  fi
  wait_ready
  pidfile_pid >"$PIDCOPY"
  ensure_role_and_dbs
  log "up (pid $(pidfile_pid), postgresql://$APP_ROLE:$APP_PASSWORD@127.0.0.1:$PORT/imprint)"
}

cmd_down() {
  BIN="$(find_bindir)"
  DATA="$(data_dir)"
  if [[ -z "$BIN" || ! -f "$DATA/PG_VERSION" ]]; then
    rm -f "$PIDCOPY"; log "not running (no cluster)"; return 0
  fi
  if ! running; then
    rm -f "$PIDCOPY"; log "not running"; return 0
  fi
  local pid
  pid="$(pidfile_pid)"
  log "stopping pid $pid (pg_ctl stop -m fast)"
  if ! as_pg "$BIN/pg_ctl" -D "$DATA" -m fast -w -t 60 stop >/dev/null; then
    log "fast stop timed out: immediate"
    as_pg "$BIN/pg_ctl" -D "$DATA" -m immediate -w -t 30 stop >/dev/null || die "could not stop pid $pid"
  fi
  rm -f "$PIDCOPY"
  log "stopped"
}

cmd_kill() {  # pg_ctl -m immediate: every server process quits without a checkpoint, a crash
  BIN="$(find_bindir)"
  DATA="$(data_dir)"
  if [[ -z "$BIN" || ! -f "$DATA/PG_VERSION" ]] || ! running; then log "not running"; return 0; fi
  log "stopping pid $(pidfile_pid) (pg_ctl stop -m immediate)"
  as_pg "$BIN/pg_ctl" -D "$DATA" -m immediate -w -t 30 stop >/dev/null || die "immediate stop failed"
  rm -f "$PIDCOPY"
}

cmd_reset() {
  cmd_down
  local data
  data="$(data_dir)"
  log "deleting $data"
  rm -rf "$data"
  if [[ -L "$DATA_LINK" ]]; then rm -f "$DATA_LINK"; fi
}

cmd_status() {
  BIN="$(find_bindir)"
  DATA="$(data_dir)"
  if [[ -n "$BIN" && -f "$DATA/PG_VERSION" ]] && running && ready; then
    echo "postgres: up (pid $(pidfile_pid), 127.0.0.1:$PORT)"
    return 0
  fi
  echo "postgres: down"
  return 1
}

dispatch "up|down|kill|reset|status" "$@"
