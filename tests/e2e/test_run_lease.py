"""X10 with every part a real process over real Kafka: a research runtime — a real pydantic-ai
``Agent`` whose ``FunctionModel`` keeps producing slowly (``tests/e2e/slow_runtime.py``) — is
SIGKILLed mid-run. Until then its heartbeats keep the run open well past the lease; after it,
the Journal closes the run ``failed``/``runtime_lost``, and every open stream — an SSE client
and the AI SDK UI message stream — ends with ``done`` after the kill, keeping the committed
block and saying why. The inspector shows why. A message from the runtime that comes back
afterwards is refused and recorded, and nothing follows ``done``. How soon the streams end
(within the lease and 5 s) is measured by ``make bench`` (``bench/rule_timings.py``,
``lease_end_s``), against that bound."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from imprint.runtime import RunWriter
from imprint.runtime.kafka import KafkaTransport
from services.common.settings import Settings
from services.delivery.auth import mint_token
from tests.support.sse import SSE, read_stream
from tests.support.stack import Stack, inspected, inspected_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

ACCOUNT = "acct-lease"
LEASE = 3.0
HEARTBEAT = 1.0
BLOCK_ID = re.compile(r"blk_[0-9a-f]{32}")


class Reader(threading.Thread):
    """One open stream, read on its own thread until the server ends it; ``done_at`` is the
    monotonic time its terminal arrived."""

    def __init__(self, read: Callable[[Reader], Any]) -> None:
        super().__init__(daemon=True)
        self._read = read
        self.result: Any = None
        self.error: BaseException | None = None
        self.done_at: float | None = None

    def run(self) -> None:
        try:
            self.result = self._read(self)
        except BaseException as error:  # surfaced by the test
            self.error = error

    def outcome(self, timeout: float) -> Any:
        self.join(timeout)
        assert not self.is_alive(), "the stream did not end"
        if self.error is not None:
            raise self.error
        return self.result


def sse_reader(base_url: str, run_id: str, token: str) -> Reader:
    def read(reader: Reader) -> tuple[list[SSE], bool]:
        def until(frames: list[SSE]) -> bool:
            if frames and frames[-1].event == "done":
                reader.done_at = time.monotonic()
                return True
            return False

        return read_stream(base_url, run_id, token, until=until, timeout=120)

    return Reader(read)


def ui_stream_reader(base_url: str, run_id: str, token: str) -> Reader:
    """The AI SDK UI message stream route, read as the SDK's transport reads it: ``data:`` parts
    until ``data: [DONE]`` and the end of the response."""

    def read(reader: Reader) -> list[Any]:
        parts: list[Any] = []
        with httpx.stream("GET", f"{base_url}/v1/ai-sdk/runs/{run_id}/stream",
                          headers={"Authorization": f"Bearer {token}"}, timeout=httpx.Timeout(120, connect=5)) as r:
            assert r.status_code == 200, r.read()
            assert r.headers.get("x-vercel-ai-ui-message-stream") == "v1"
            for line in r.iter_lines():
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    reader.done_at = time.monotonic()
                    parts.append("[DONE]")
                    continue
                parts.append(json.loads(line.removeprefix("data: ")))
        return parts

    return Reader(read)


async def late_messages(settings: Settings, run_id: str) -> None:
    """The runtime comes back: a heartbeat and a block, as the SDK sends them."""
    async with KafkaTransport(settings.kafka_bootstrap, topic_prefix=settings.topic_prefix) as kafka:
        run = RunWriter(kafka, run_id)
        await run.heartbeat("model")
        await run.send_answer_part({"markdown": "Written after the run was closed."}, tool_call_id="call-late",
                                   turn_id="turn-late")


@pytest.mark.rule("X10")
@pytest.mark.rule("D2")
@pytest.mark.rule("D5")
@pytest.mark.rule("P20")
def test_a_killed_runtime_loses_its_run_and_every_open_stream_ends(isolated: Settings) -> None:
    settings = isolated.model_copy(update={"run_lease_seconds": LEASE})
    run_id, token = "run-lease-1", mint_token(settings, ACCOUNT)
    with Stack(settings) as stack:
        stack.start_command("runtime", "tests.e2e.slow_runtime", [run_id, ACCOUNT, str(HEARTBEAT)])
        stack.wait_for_line("runtime", "RUN STARTED")
        stack.wait_for_run(run_id, token)
        readers = [sse_reader(stack.base_url, run_id, token), ui_stream_reader(stack.base_url, run_id, token)]
        for reader in readers:
            reader.start()

        settled = stack.wait_for_line("runtime", "BLOCK SETTLED")
        block = BLOCK_ID.search(settled)
        assert block, settled
        stack.wait_for_line("runtime", "MODEL PRODUCING")
        time.sleep(2 * LEASE)  # the model is still producing: only heartbeats go out
        status = httpx.get(f"{stack.base_url}/v1/runs/{run_id}", headers={"Authorization": f"Bearer {token}"}).json()
        assert status["state"] == "running" and not status["terminal"], \
            f"heartbeats keep the run open past its lease: {status}"
        assert not any(reader.done_at for reader in readers)

        assert stack.kill("runtime") == -9
        killed = time.monotonic()
        (frames, ended_by_server), parts = (reader.outcome(LEASE + 120) for reader in readers)
        for reader in readers:
            assert reader.done_at is not None and reader.done_at > killed, "the stream ended after the kill, with done"

        # The SSE client: the committed block stays, the status says why, done once and last.
        assert [f.event for f in frames][-2:] == ["stream-summary", "done"] and frames[-1].data == "[DONE]"
        statuses = [f.json for f in frames if f.event == "run-status"]
        assert (statuses[-1]["state"], statuses[-1]["reason"]) == ("failed", "runtime_lost")
        saved = {b["block_id"]: b for b in (f.json["block"] for f in frames
                                             if f.event == "answer-publication" and f.json.get("block"))}
        assert sorted((b["candidate_id"], b["saved"]) for b in saved.values()) == [
            ("text:turn-1:0", True), ("tool:call-1", True)], "the committed blocks stay (entries A and B)"
        assert saved[block.group()]["candidate_id"] == "tool:call-1"
        assert not any(f.event in ("content", "evidence-summary") for f in frames), "no answer is invented"

        # The AI SDK stream: the same end, as the SDK reads it.
        assert parts[-1] == "[DONE]" and parts[-2]["type"] == "finish"
        assert parts[-2]["messageMetadata"]["run"]["state"] == "failed"
        assert parts[-2]["messageMetadata"]["run"]["reason"] == "runtime_lost"
        blocks = {p["id"]: p["data"] for p in parts[:-1] if p["type"] == "data-block"}
        assert {block_id: b["state"] for block_id, b in blocks.items()} == {b: "committed" for b in saved}
        assert not any(p["type"] in ("text-delta", "source-document") for p in parts[:-1])

        # The inspector says why.
        document = inspected(settings, run_id)
        lifecycle = document["lifecycle"]
        assert lifecycle["state"] == "failed" and lifecycle["lapsed"] == "runtime_lost"
        assert (lifecycle["transitions"][-1]["state"], lifecycle["transitions"][-1]["reason"]) == ("failed",
                                                                                                  "runtime_lost")
        assert sorted(b["block_id"] for b in document["blocks"]) == sorted(saved), "committed before the loss"

        # The runtime comes back: refused and recorded, by the Journal and by Publication.
        asyncio.run(late_messages(settings, run_id))

        def recorded(doc: dict[str, Any]) -> bool:
            return (any(r["message_type"] == "run.heartbeat" for r in doc["lifecycle"]["refusals"])
                    and any(n["reason"] == "run_lost" for n in doc["not_committed"]))

        document = inspected_until(settings, run_id, recorded)
        assert [(r["message_type"], r["code"]) for r in document["lifecycle"]["refusals"]] == [
            ("run.heartbeat", "fact_out_of_state")], document["lifecycle"]
        assert [(n["candidate_id"], n["outcome"], n["reason"]) for n in document["not_committed"]
                if n["reason"] == "run_lost"] == [("tool:call-late", "refused", "run_lost")]
        assert document["lifecycle"]["state"] == "failed"

        # Nothing follows done: a client reading the run now gets the very same stream.
        again, _ = read_stream(stack.base_url, run_id, token, timeout=30)
        assert [(f.id, f.event) for f in again] == [(f.id, f.event) for f in frames]
