"""A consumer that names the message types it applies leaves the others of its topics
undecoded (the Journal applies a published answer, not a proposal or a preview), and
still refuses, with a typed dead letter, everything it would have refused before: no
header, an unknown type, a type of another topic (P3). What it applies is decoded as
ever (R1: nothing it acts on is skipped)."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka import ConsumerRecord

from imprint.contracts.registry import TOPIC_OF_TYPE, encode
from imprint.contracts.topics import Topic
from imprint.journal.handling import APPLIED_TYPES
from services.common.kafka import decode_records
from services.common.settings import Settings
from services.journal.consumer import JOURNAL_TOPICS
from tests.support.delivery_builders import preview, published

SETTINGS = Settings(topic_prefix="t.")
RUN = "run-applies"


def record(topic: Topic, offset: int, value: bytes, kind: str | None) -> ConsumerRecord[Any, Any]:
    headers = [] if kind is None else [("type", kind.encode())]
    return ConsumerRecord(SETTINGS.topic(topic), 0, offset, 0, 0, RUN.encode(), value, None, len(value), 0, headers)


@pytest.mark.rule("P3")
@pytest.mark.rule("R1")
def test_types_the_consumer_does_not_apply_are_left_undecoded_and_refusals_still_recorded() -> None:
    shown, saved = preview(RUN, "b1", 1, "A preview."), published(RUN, "b1", 1, "The answer.")
    records = [
        record(Topic.PUBLICATION, 0, encode(shown), "answer.preview"),  # not applied: left out
        record(Topic.PUBLICATION, 1, encode(saved), "answer.published"),  # applied: decoded
        record(Topic.PUBLICATION, 2, b"not json", "answer.preview"),  # says preview: left out, Delivery refuses it
        record(Topic.PUBLICATION, 3, b"not json", None),  # no header: decoded, refused
        record(Topic.PUBLICATION, 4, b'{"type": "no.such.type"}', "no.such.type"),  # unknown: refused
        record(Topic.PUBLICATION, 5, b"not json", "run.admitted"),  # another topic's type: refused
    ]
    inbound, refused = decode_records(SETTINGS, "journal", records, APPLIED_TYPES)
    assert [(i.offset, i.message.type) for i in inbound] == [(1, "answer.published")]
    assert [(r.offset, r.reason) for r in refused] == [(3, "unparseable"), (4, "unknown_type"), (5, "unparseable")]

    everything, _ = decode_records(SETTINGS, "delivery", records[:2])
    assert [i.message.type for i in everything] == ["answer.preview", "answer.published"], "no list: all decoded"


def test_every_type_the_journal_applies_is_a_type_of_a_topic_it_reads() -> None:
    assert APPLIED_TYPES and all(TOPIC_OF_TYPE.get(kind) in JOURNAL_TOPICS for kind in APPLIED_TYPES), (
        sorted(kind for kind in APPLIED_TYPES if TOPIC_OF_TYPE.get(kind) not in JOURNAL_TOPICS))
