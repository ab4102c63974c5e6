"""The runs the server kit reads, made through the runtime SDK on the deployment's Kafka.

* the **finished** run: a stage, three granted sources, four blocks through entry B, a
  revision of the first (P12), a revision of a block that does not exist (refused,
  ``answer-rejected``), a source revoked before the end (``answer-withdrawn``), the completion
  with its text and evidence (``content``, ``evidence-summary``, the terminal pair), then a
  source revoked after ``done`` (a notice on the conversation, D7);
* the **live** run: admitted and started, left open for the path checks (the kit produces a
  frame and waits for it before producing the next), then stopped through Delivery's cancel;
* **another account's** run: admitted only, for isolation (D6).

Without Kafka the kit reads one finished run it is pointed at (``--run``) and skips nothing
that can be read from it; the cases that need a frame produced while a client watches need
the live run."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from imprint.contracts.publication import AnswerPublished
from imprint.contracts.registry import encode
from imprint.contracts.runtime import EvidenceItem, EvidenceSet
from imprint.contracts.sources import SourceRevoked
from imprint.contracts.topics import Topic
from imprint.runtime import RunWriter
from imprint.runtime.kafka import KafkaDecisions, KafkaTransport
from imprint.runtime.writer import Record

ANSWER_TEXT = ("The conformance run answered in full: every frame kind, a revision, a refusal, "
               "a withdrawal before its end and one after it.")
EXPECTED_KINDS = ("progress", "run-status", "answer-preview", "answer-publication", "answer-withdrawn",
                  "answer-rejected", "content", "evidence-summary", "stream-summary", "done")
"""The frame kinds the finished run's stream holds (``error`` needs two bodies for one
revision, which the runtime SDK never sends: checked when a deployment's run has one)."""


@dataclass
class Runs:
    """What the kit reads, and (with Kafka) how it makes the live run move."""

    account: str
    finished: str
    conversation: str | None = None
    live: str | None = None
    other: str | None = None
    expected_kinds: tuple[str, ...] = ()
    notice_expected: bool = False
    writer: RunWriter | None = None
    transport: KafkaTransport | None = None
    stages: int = 0
    notes: list[str] = field(default_factory=list)

    async def stage(self, label: str) -> None:
        """One ``progress`` frame on the live run."""
        assert self.writer is not None
        self.stages += 1
        await self.writer.stage(label, f"conformance step {self.stages}")

    async def stop_live(self, cancel_request_id: str | None) -> None:
        assert self.writer is not None
        await self.writer.stop(cancel_request_id=uuid.UUID(cancel_request_id) if cancel_request_id else None)


class Scenario:
    """Makes the runs on ``bootstrap`` (topics under ``topic_prefix``) as account ``account``."""

    def __init__(self, bootstrap: str, topic_prefix: str, account: str) -> None:
        self.bootstrap, self.prefix, self.account = bootstrap, topic_prefix, account
        self.tag = uuid.uuid4().hex[:8]
        self.transport = KafkaTransport(bootstrap, topic_prefix=topic_prefix, client_id="imprint-conformance")
        self.decisions = KafkaDecisions(bootstrap, topic_prefix=topic_prefix, client_id="imprint-conformance")

    async def __aenter__(self) -> Scenario:
        await self.transport.start()
        await self.decisions.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.decisions.stop()
        await self.transport.stop()

    async def revoke(self, source_id: str) -> None:
        revocation = SourceRevoked(source_id=source_id, account_id=self.account, reason="conformance")
        await self.transport.send(Record(topic=Topic.SOURCES, key=source_id.encode(), value=encode(revocation),
                                         headers=(("type", revocation.type.encode()),)))

    async def begin(self, timeout: float) -> tuple[Runs, RunWriter]:
        """The finished run up to its completion (the caller waits for its withdrawal frame,
        then calls :meth:`finish`), the live run opened, the other account's run admitted."""
        tag = self.tag
        finished, live, other = f"conf-{tag}-finished", f"conf-{tag}-live", f"conf-{tag}-other"
        conversation = f"conf-{tag}-conversation"
        public, before, after = f"conf-{tag}-public", f"conf-{tag}-revoked-before", f"conf-{tag}-revoked-after"
        run = RunWriter(self.transport, finished)
        await run.admit(account_id=self.account, conversation_id=conversation, message_id=f"{finished}-msg",
                        question="Does this deployment keep imprint's client protocol?")
        await run.queue()
        await run.start()
        await run.stage("retrieval", "reading the granted sources")
        await run.grant(public, scope="public", owner_account_id="registry", title="A public source")
        await run.grant(before, scope="private", owner_account_id=self.account, title="Revoked before the end")
        await run.grant(after, scope="private", owner_account_id=self.account, title="Revoked after the end")
        await run.stage("writing", "proposing blocks")
        first = self.decisions.expect(finished, "tool:call-1")
        try:
            part = await run.send_answer_part({"markdown": f"The first block [[cite:{public}]]."},
                                              tool_call_id="call-1", turn_id="turn-1")
            settled = await first.expecting(part.blocks).wait(timeout)
        finally:
            self.decisions.forget(finished, "tool:call-1")
        published = [d.block.block_id for d in settled if isinstance(d, AnswerPublished)]
        if not published:
            raise RuntimeError("the first block was not published: is every part of the stack running?")
        await run.send_answer_part({"markdown": f"A block whose source is revoked before the end [[cite:{before}]]."},
                                   tool_call_id="call-2", turn_id="turn-2")
        await run.send_answer_part({"markdown": f"A block whose source is revoked after the end [[cite:{after}]]."},
                                   tool_call_id="call-3", turn_id="turn-3")
        await run.send_answer_part({"replaces": published[0], "markdown": f"The first block, revised [[cite:{public}]]."},
                                   tool_call_id="call-4", turn_id="turn-4")
        await run.send_answer_part({"replaces": f"conf-{tag}-no-such-block", "markdown": "A revision of nothing."},
                                   tool_call_id="call-5", turn_id="turn-5")
        await self.revoke(before)

        live_run = RunWriter(self.transport, live)
        await live_run.admit(account_id=self.account, conversation_id=f"conf-{tag}-live-conversation",
                             message_id=f"{live}-msg", question="Does the path between hold frames back?")
        await live_run.queue()
        await live_run.start()
        stranger = RunWriter(self.transport, other)
        await stranger.admit(account_id=f"conf-{tag}-another-account", conversation_id=f"conf-{tag}-other-conversation",
                             message_id=f"{other}-msg", question="Whose run is this?")
        runs = Runs(account=self.account, finished=finished, conversation=conversation, live=live, other=other,
                    expected_kinds=EXPECTED_KINDS, notice_expected=True, writer=live_run, transport=self.transport)
        runs.notes.append(f"runs made on Kafka {self.bootstrap} (topic prefix {self.prefix!r}): {finished}, {live}, "
                          f"{other}")
        self._after = after
        return runs, run

    async def finish(self, run: RunWriter) -> None:
        public = f"conf-{self.tag}-public"
        await run.complete("answered", answer_text=ANSWER_TEXT, evidence=EvidenceSet(
            items=[EvidenceItem(source_id=public, title="A public source", excerpt="…what the run stood on…")],
            snapshot_id=f"conf-{self.tag}-snapshot", knowledge_version="conformance-1"))

    async def revoke_after_end(self) -> None:
        await self.revoke(self._after)

