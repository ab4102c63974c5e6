"""The walk of one ``answer.published`` through Delivery — its Kafka record decoded, the poll's
unit of work and commit, the frames it hands the live feed, the SSE bytes a stream writes — passes control
between code defined in ``libs/`` and code defined in ``services/`` six times (a call or its
return each): the contract's decode, ``prepare``, ``handle``. Everything else a handler needs
is held in memory by the poll's rows (``imprint.delivery.rows``), read once up front, and the
SSE bytes are the transport's (``services.delivery.sse``). Counted with a profiler on each
backend, for a hot run (the usual case) and a cold one (after a restart)."""

from __future__ import annotations

import pytest
from aiokafka.structs import ConsumerRecord

from imprint.contracts.registry import encode
from services.common.inbound import Inbound
from services.common.kafka import decode_records
from services.common.settings import Settings
from services.delivery.stream_formats import SSEFrames
from services.delivery.view_store import ViewStore
from tests.support.backends import Backend
from tests.support.delivery_builders import published, running
from tests.support.walks import crossed, crossings

pytestmark = pytest.mark.integration
RUN = "run-walk"


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
@pytest.mark.parametrize("cold", [False, True], ids=["hot", "cold"])
@pytest.mark.rule("D1")
def test_one_published_block_crosses_between_libs_and_services_six_times(backend: Backend, cold: bool) -> None:
    settings: Settings = backend.settings
    store = ViewStore(settings)
    try:
        store.process([Inbound("imprint.runs.v1", 0, 0, running(RUN)),
                       Inbound("imprint.publication.v1", 0, 0, published(RUN, "b1", 1, "One."))])
        if cold:  # a restarted instance: nothing of the run in memory
            store.close()
            store = ViewStore(settings)
        message = published(RUN, "b1", 2, "One, revised.")
        raw = encode(message)
        record = ConsumerRecord("imprint.publication.v1", 0, 1, 0, 0, RUN.encode(), raw, None, len(RUN), len(raw),
                                [("type", message.type.encode())])
        sent: list[bytes] = []

        def walk() -> None:
            inbound, refused = decode_records(settings, "delivery", [record])
            handed = store.commit(inbound).frames(RUN)  # what the live feed takes (another instance reads it)
            sent.extend(SSEFrames().frame(frame) for frame in handed or ())

        seen = crossings(walk)
        assert len(sent) == 1 and sent[0].startswith(b"id: 3\nevent: answer-publication\ndata: {")
        assert crossed(seen) == [
            ("call", "registry.py:decode_noting_unknown"), ("return", "registry.py:decode_noting_unknown"),
            ("call", "handling.py:prepare"), ("return", "handling.py:prepare"),
            ("call", "handling.py:handle"), ("return", "handling.py:handle"),
        ], seen
    finally:
        store.close()
