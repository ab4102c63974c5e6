#!/usr/bin/env bash
# Local infrastructure for imprint without Docker: Kafka (KRaft) + PostgreSQL.
#
#   bash deploy/local/infra.sh up|down|reset|status
#
# KAFKA_BROKERS=3 runs a 3-broker KRaft cluster (deploy/local/kafka-cluster.sh) instead of
# the single broker: replication factor 3, min.insync.replicas=2, brokers on
# KAFKA_PORT..KAFKA_PORT+2 (IMPRINT_KAFKA_BOOTSTRAP lists all three).
#
# After 'up':
#   IMPRINT_KAFKA_BOOTSTRAP=127.0.0.1:${KAFKA_PORT:-9092}
#   IMPRINT_DATABASE_URL=postgresql://imprint:imprint@127.0.0.1:${PG_PORT:-5432}/imprint
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KAFKA_SCRIPT="$HERE/kafka.sh"
if ((${KAFKA_BROKERS:-1} > 1)); then
  bash "$KAFKA_SCRIPT" jars   # the cluster runs kafka.sh's jars (resolved once)
  KAFKA_SCRIPT="$HERE/kafka-cluster.sh"
fi

case "${1:-}" in
  up)
    bash "$HERE/postgres.sh" up
    bash "$KAFKA_SCRIPT" up
    [[ "$KAFKA_SCRIPT" == "$HERE/kafka.sh" ]] && echo "IMPRINT_KAFKA_BOOTSTRAP=127.0.0.1:${KAFKA_PORT:-9092}"
    echo "IMPRINT_DATABASE_URL=postgresql://imprint:imprint@127.0.0.1:${PG_PORT:-5432}/imprint"
    ;;
  down|reset|status)
    rc=0
    for script in "$KAFKA_SCRIPT" "$HERE/postgres.sh"; do bash "$script" "$1" || rc=1; done
    exit "$rc"
    ;;
  *) echo "usage: $0 up|down|reset|status" >&2; exit 2 ;;
esac
