"""R8 on the wire: a consumer applies a message of a newer minor version as this version
reads it, and records the fields it did not know — never dead-letters it for them
(:func:`imprint.contracts.registry.decode_noting_unknown` finds them).

Recorded twice, by name only (a field's value is never read here):

* the counter ``imprint_wire_unknown_fields_total{consumer, topic, type, field}``, one per
  message and field, in :data:`METRICS` (Delivery serves it on ``/metrics`` beside its own);
* a structured log line — consumer, topic, type and the field names — the first time this
  process meets that combination: a newer producer sends the field in every message, and
  the counter says how often.

Field names come from the producer, so what they may add to the counter's labels and to the
remembered combinations is bounded (:data:`MAX_LABELLED`)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter

from services.common.observability import get_logger

log = get_logger(__name__)

METRICS = CollectorRegistry()
"""The process's intake metrics (every consumer of the process records here)."""

UNKNOWN_FIELDS = Counter(
    "imprint_wire_unknown_fields", "fields of a newer contract version ignored on intake (R8)",
    ["consumer", "topic", "type", "field"], registry=METRICS,
)

MAX_LABELLED = 256
"""Distinct (consumer, topic, type, field) label sets, and logged combinations, one process
keeps; past it a field is counted as ``field="(other)"`` and its combination logged again."""
OTHER = "(other)"

_lock = threading.Lock()
_labelled: set[tuple[str, str, str, str]] = set()
_logged: set[tuple[str, str, str, tuple[str, ...]]] = set()


def record_unknown_fields(consumer: str, topic: str, message_type: str, fields: Sequence[str]) -> None:
    """``message_type`` from ``topic`` carried ``fields`` this version does not know; it is applied."""
    combination = (consumer, topic, message_type, tuple(fields))
    with _lock:
        labels = []
        for field in fields:
            key = (consumer, topic, message_type, field)
            if key not in _labelled and len(_labelled) >= MAX_LABELLED:
                key = (consumer, topic, message_type, OTHER)
            _labelled.add(key)
            labels.append(key)
        first = combination not in _logged
        if first:
            if len(_logged) >= MAX_LABELLED:
                _logged.clear()
            _logged.add(combination)
    for key in labels:
        UNKNOWN_FIELDS.labels(*key).inc()
    if first:
        log.warning("unknown fields ignored: the producer is newer than this consumer", consumer=consumer,
                    topic=topic, message_type=message_type, fields=list(fields))
