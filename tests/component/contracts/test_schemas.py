"""The generated schemas are the models: a drift between them fails here."""

import json

import pytest

from imprint.contracts.topics import Topic

from services.tools.schemas import SCHEMA_DIR, render


def test_schemas_match_the_models() -> None:
    expected = render()
    stale = [name for name, content in expected.items() if not (SCHEMA_DIR / name).exists()
             or (SCHEMA_DIR / name).read_text() != content]
    assert not stale, f"schemas/ drifted from libs/imprint/contracts: {stale}; run `make schemas`"
    extra = {p.name for p in SCHEMA_DIR.glob("*.json")} - set(expected)
    assert not extra, f"schemas/ holds files no model generates: {extra}"


def test_asyncapi_names_every_topic() -> None:
    doc = json.loads((SCHEMA_DIR / "asyncapi.json").read_text())
    addresses = {channel["address"] for channel in doc["channels"].values()}
    assert addresses == {
        "imprint.runtime.v1", "imprint.sources.v1", "imprint.publication.v1", "imprint.runs.v1",
        "imprint.delivery.v1", "imprint.control.v1", "imprint.deadletter.v1",
    }


@pytest.mark.rule("P14")
def test_one_type_to_topic_map_is_derived_from_the_topic_unions() -> None:
    from imprint.contracts.registry import TOPIC_MESSAGES, TOPIC_OF_TYPE

    for message_type, topic in TOPIC_OF_TYPE.items():
        assert TOPIC_MESSAGES[topic] is not None
    assert TOPIC_OF_TYPE["answer.part"] is Topic.RUNTIME and TOPIC_OF_TYPE["answer.published"] is Topic.PUBLICATION
    assert TOPIC_OF_TYPE["conversation.delete_requested"] is Topic.CONTROL
    assert TOPIC_OF_TYPE["conversation.deleted"] is Topic.RUNS
    assert set(TOPIC_OF_TYPE.values()) == set(TOPIC_MESSAGES), "every topic carries at least one type"
