#!/usr/bin/env bash
# Local infrastructure for imprint without Docker: Kafka (KRaft) + PostgreSQL.
#
#   bash deploy/local/infra.sh up|down|reset|status
#
# After 'up':
#   IMPRINT_KAFKA_BOOTSTRAP=127.0.0.1:${KAFKA_PORT:-9092}
#   IMPRINT_DATABASE_URL=postgresql://imprint:imprint@127.0.0.1:${PG_PORT:-5432}/imprint
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

case "${1:-}" in
  up)
    bash "$HERE/postgres.sh" up
    bash "$HERE/kafka.sh" up
    echo "IMPRINT_KAFKA_BOOTSTRAP=127.0.0.1:${KAFKA_PORT:-9092}"
    echo "IMPRINT_DATABASE_URL=postgresql://imprint:imprint@127.0.0.1:${PG_PORT:-5432}/imprint"
    ;;
  down|reset|status)
    rc=0
    for script in kafka.sh postgres.sh; do bash "$HERE/$script" "$1" || rc=1; done
    exit "$rc"
    ;;
  *) echo "usage: $0 up|down|reset|status" >&2; exit 2 ;;
esac
