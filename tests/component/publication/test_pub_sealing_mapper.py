"""The Publication log's mapper (``sealing.SealingMapper``, X8): every ``markdown`` string
of a bound aggregate's event is stored sealed, wherever it sits in the state (a dict in a
list in a dict), and reads back as it was; a destroyed key reads as ``REMOVED``, a damaged
or moved seal as ``UNREADABLE``, and nothing else of the event changes."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import DatetimeAsISO, JSONTranscoder, StoredEvent, UUIDAsHex

from imprint.shredding import FieldSealer
from imprint.shredding import InMemoryKeyring
from services.publication.sealing import KEY, REMOVED, SEALED, UNREADABLE, SealingMapper


class Draft(Aggregate):
    class Written(Aggregate.Event):
        block: dict[str, Any]
        notes: list[Any]
        markdown: str


def mapper(keyring: InMemoryKeyring) -> SealingMapper:
    transcoder = JSONTranscoder()
    transcoder.register(UUIDAsHex())
    transcoder.register(DatetimeAsISO())
    return SealingMapper(transcoder, FieldSealer(keyring, purpose="publication"))


def written(originator_id: uuid.UUID) -> Draft.Written:
    return Draft.Written(
        originator_id=originator_id, originator_version=2, timestamp=Draft.Event.create_timestamp(),
        block={"block_id": "b1", "content": {"type": "text", "markdown": "first body"},
               "parts": [{"markdown": "in a list"}, {"title": "plain"}], "revision": 3},
        notes=[[{"markdown": "deep"}], "kept", 7],
        markdown="top level",
    )


def sealed_written() -> tuple[InMemoryKeyring, SealingMapper, Draft.Written, StoredEvent]:
    """A keyring, its mapper, an event of an aggregate bound to ``conv-1`` and the event as stored."""
    keys = InMemoryKeyring()
    m = mapper(keys)
    event = written(uuid.uuid4())
    m.bind(event.originator_id, "conv-1")
    return keys, m, event, m.to_stored_event(event)


def state_of(event: Any) -> dict[str, Any]:
    return {k: v for k, v in vars(event).items() if k != "timestamp"}


@pytest.mark.rule("X8")
def test_every_markdown_is_stored_sealed_and_reads_back_as_it_was() -> None:
    keys, m, event, stored = sealed_written()
    for text in (b"first body", b"in a list", b"deep", b"top level"):
        assert text not in stored.state
    assert stored.state.count(SEALED.encode()) == 4
    assert state_of(m.to_domain_event(stored)) == state_of(event)
    assert vars(event)["block"]["content"]["markdown"] == "first body", "sealing never changes the event itself"


@pytest.mark.rule("X8")
def test_a_destroyed_key_reads_as_removed_and_everything_else_stays_readable() -> None:
    keys, m, event, stored = sealed_written()
    keys.destroy("conv-1")
    read = vars(mapper(keys).to_domain_event(stored))
    assert read["block"]["content"]["markdown"] == REMOVED
    assert read["block"]["parts"] == [{"markdown": REMOVED}, {"title": "plain"}]
    assert read["notes"] == [[{"markdown": REMOVED}], "kept", 7] and read["markdown"] == REMOVED
    assert read["block"]["block_id"] == "b1" and read["block"]["revision"] == 3


@pytest.mark.rule("X8")
def test_a_damaged_seal_or_one_moved_to_another_field_or_record_reads_as_unreadable() -> None:
    keys, m, event, stored = sealed_written()
    state = json.loads(stored.state)
    seal = state["block"]["content"]["markdown"]
    assert set(seal) == {SEALED, KEY}
    damaged = {**seal, SEALED: seal[SEALED][:-6] + "AAAAAA"}
    state["block"]["content"]["markdown"] = damaged
    state["block"]["parts"][1]["title"] = seal  # a seal moved under another field name
    tampered = StoredEvent(stored.originator_id, stored.originator_version, stored.topic, json.dumps(state).encode())
    read = vars(m.to_domain_event(tampered))
    assert read["block"]["content"]["markdown"] == UNREADABLE
    assert read["block"]["parts"][1]["title"] == UNREADABLE
    assert read["block"]["parts"][0]["markdown"] == "in a list"
    elsewhere = StoredEvent(uuid.uuid4(), stored.originator_version, stored.topic, stored.state)
    assert vars(m.to_domain_event(elsewhere))["markdown"] == UNREADABLE, "a seal is bound to its record"


@pytest.mark.rule("X8")
def test_remembered_seal_places_never_change_what_a_read_opens() -> None:
    """The mapper remembers where a topic's seals sat and tries those places first; a
    record of the same topic whose seals sit elsewhere, fewer or more of them, damaged
    or moved, still reads exactly as a fresh mapper reads it."""
    keys, m, event, stored = sealed_written()
    assert state_of(m.to_domain_event(stored)) == state_of(event)
    assert len(m.seal_paths[stored.topic]) == 4, "the four places were found by the walk and remembered"

    other = Draft.Written(
        originator_id=event.originator_id, originator_version=3, timestamp=Draft.Event.create_timestamp(),
        block={"content": {"markdown": "moved"}, "parts": [], "extra": [{"markdown": "new place"}]},
        notes=[], markdown="top again",
    )
    other_stored = m.to_stored_event(other)
    state = json.loads(stored.state)
    seal = state["block"]["content"]["markdown"]
    state["block"]["parts"][1]["title"] = seal  # one more seal, under another field
    state["notes"][0][0]["markdown"] = {**seal, SEALED: seal[SEALED][:-6] + "AAAAAA"}
    tampered = StoredEvent(stored.originator_id, stored.originator_version, stored.topic, json.dumps(state).encode())
    plain = StoredEvent(stored.originator_id, 4, stored.topic, json.dumps({
        **{k: v for k, v in json.loads(stored.state).items() if k not in ("block", "notes", "markdown")},
        "block": {"content": {"markdown": "never sealed"}}, "notes": [], "markdown": "plain"}).encode())
    for record in (other_stored, tampered, plain, stored, tampered):
        assert vars(m.to_domain_event(record)) == vars(mapper(keys).to_domain_event(record))
    assert vars(m.to_domain_event(other_stored))["block"]["extra"] == [{"markdown": "new place"}]
    read = vars(m.to_domain_event(tampered))
    assert read["block"]["parts"][1]["title"] == UNREADABLE and read["notes"][0][0]["markdown"] == UNREADABLE
    assert read["block"]["content"]["markdown"] == "first body"
