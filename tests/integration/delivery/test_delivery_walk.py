"""The walk of one ``answer.published`` through Delivery — its Kafka record decoded, the poll's
unit of work and commit, the live feed's read, the SSE bytes a stream writes — passes control
between code defined in ``libs/`` and code defined in ``services/`` six times (a call or its
return each): the contract's decode, ``prepare``, ``handle``. Everything else a handler needs
is held in memory by the poll's rows (``imprint.delivery.rows``), read once up front, and the
SSE bytes are the transport's (``services.delivery.sse``). Counted with a profiler on each
backend, for a hot run (the usual case) and a cold one (after a restart)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from aiokafka.structs import ConsumerRecord

import imprint
import services
from imprint.contracts.registry import encode
from services.common.inbound import Inbound
from services.common.kafka import decode_records
from services.common.settings import Settings
from services.delivery.stream_formats import SSEFrames
from services.delivery.view_store import ViewStore
from tests.support.backends import Backend
from tests.support.delivery_builders import published, running

pytestmark = pytest.mark.integration
RUN = "run-walk"
LIBS = str(Path(imprint.__file__).resolve().parent) + "/"
SERVICES = str(Path(services.__file__).resolve().parent) + "/"


def _side(frame: FrameType) -> str | None:
    path = frame.f_code.co_filename
    return "libs" if path.startswith(LIBS) else "services" if path.startswith(SERVICES) else None


def crossings(walk: Any) -> list[tuple[str, str, str]]:
    """Run ``walk()`` (called from services' side) and list each transition of control between a
    function defined under ``libs/`` and one defined under ``services/``. Code of neither (the
    standard library, pydantic, a driver) stays on the side of whoever called it."""
    seen: list[tuple[str, str, str]] = []
    stack: list[tuple[str, str]] = [("services", "walk")]

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        name = f"{frame.f_code.co_filename.rsplit('/', 2)[-1]}:{frame.f_code.co_qualname}"
        if event == "call":
            side = _side(frame) or stack[-1][0]
            if side != stack[-1][0]:
                seen.append(("call", stack[-1][1], name))
            stack.append((side, name))
        elif event == "return" and len(stack) > 1:
            side, name = stack.pop()
            if side != stack[-1][0]:
                seen.append(("return", name, stack[-1][1]))

    sys.setprofile(profile)
    try:
        walk()
    finally:
        sys.setprofile(None)
    return seen


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
            store.process(inbound)
            read = store.read_feeds({RUN: 2}, 100)[RUN]
            sent.extend(SSEFrames().frame(frame) for frame in read.frames)

        seen = crossings(walk)
        assert len(sent) == 1 and sent[0].startswith(b"id: 3\nevent: answer-publication\ndata: {")
        assert [(kind, callee if kind == "call" else caller) for kind, caller, callee in seen] == [
            ("call", "registry.py:decode_noting_unknown"), ("return", "registry.py:decode_noting_unknown"),
            ("call", "handling.py:prepare"), ("return", "handling.py:prepare"),
            ("call", "handling.py:handle"), ("return", "handling.py:handle"),
        ], seen
    finally:
        store.close()
