"""Builders for the journal tests (imported by name; fixtures live in ``conftest.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from imprint.contracts.control import ConversationDeleteRequested
from imprint.contracts.publication import (
    AnswerPublished,
    AnswerUnchanged,
    CommittedBlock,
    Content,
    Receipt,
)
from imprint.contracts.registry import topic_of
from imprint.contracts.runtime import (
    Condition,
    EvidenceGranted,
    EvidenceItem,
    QuestionConditionSet,
    RunAdmitted,
    RunCompleted,
)
from imprint.contracts.sources import SourceTombstoned

from services.common.inbound import Inbound
from tests.support import runs
from tests.support.feeder import Feeder as OneFeeder

ACCOUNT = "acct-1"
OTHER = "acct-2"
QUESTION = "What was the  Q3 revenue of Nordwind GmbH?"
ANSWER = "Nordwind GmbH reported EUR 41.2m revenue in Q3."
EXCERPT = "Q3 revenue rose to EUR 41.2 million (annual report, p. 12)."

def topic_for(message: Any) -> str:
    return str(topic_of(message))


class Feeder(OneFeeder[list[Inbound]]):
    """The tests' one feeder (``tests.support.feeder``) for a journal: ``feed(*messages)``
    hands them over as one poll (partition 0) and returns the records."""

    def __init__(self, journal: Any) -> None:
        self.journal = journal
        super().__init__(self._process, topic_of=topic_for)

    def _process(self, batch: list[Inbound]) -> list[Inbound]:
        self.journal.process(batch)
        return batch

    def __call__(self, *messages: Any) -> list[Inbound]:
        return self.send(*messages)

    @property
    def sent(self) -> list[Inbound]:
        return self.history


def qcs(qcs_id: str, *, inherits_from: str | None = None, conditions: list[Condition] | None = None) -> QuestionConditionSet:
    if conditions is None:
        conditions = [Condition(name="period", value="2024 Q3 secret-cond")]
    return QuestionConditionSet(qcs_id=qcs_id, inherits_from=inherits_from, conditions=conditions)


def admitted(
    run_id: str,
    *,
    conversation_id: str = "conv-1",
    message_id: str | None = None,
    account_id: str = ACCOUNT,
    question: str = QUESTION,
    qcs_set: QuestionConditionSet | None = None,
) -> RunAdmitted:
    return runs.admitted(run_id, account_id=account_id, question=question, conversation_id=conversation_id,
                         message_id=message_id, qcs=qcs_set or qcs(f"qcs-{run_id}"))


def evidence_items(*sources: str, excerpt: str = EXCERPT) -> list[EvidenceItem]:
    return [EvidenceItem(source_id=s, title=f"Title of {s}", excerpt=f"{excerpt} [{s}]") for s in sources]


def completed(run_id: str, outcome: str = "answered", answer: str | None = ANSWER, sources: tuple[str, ...] = ("src-a", "src-b")) -> RunCompleted:
    return runs.completed(run_id, answer, *evidence_items(*sources), outcome=outcome, snapshot_id="snap-7",
                          knowledge_version="kv-2024.09")


def to_running(run_id: str, **kw: Any) -> list[Any]:
    return runs.opened(admitted(run_id, **kw))


def granted(run_id: str, source_id: str) -> EvidenceGranted:
    return runs.granted(run_id, source_id, scope="public", owner_account_id=ACCOUNT, title=f"Title of {source_id}")


def tombstoned(source_id: str) -> SourceTombstoned:
    return SourceTombstoned(source_id=source_id)


def delete_requested(conversation_id: str = "conv-1", account_id: str = ACCOUNT, reason: str = "user") -> ConversationDeleteRequested:
    return ConversationDeleteRequested(conversation_id=conversation_id, account_id=account_id, reason=reason)  # type: ignore[arg-type]


def published(run_id: str, candidate_id: str, block_id: str, revision: int = 1) -> AnswerPublished:
    from datetime import UTC, datetime

    return AnswerPublished(
        run_id=run_id,
        block=CommittedBlock(
            block_id=block_id,
            revision=revision,
            delivery_ordinal=1,
            candidate_id=candidate_id,
            content=Content(type="text", markdown="committed block body"),
            source_hint="sources_unverified",
            body_sha256="ab" * 32,
            receipt=Receipt(receipt_id=f"rcpt-{block_id}-{revision}", log_position=17, committed_at=datetime.now(UTC)),
        ),
    )


def unchanged(run_id: str, candidate_id: str, block_id: str) -> AnswerUnchanged:
    from datetime import UTC, datetime

    return AnswerUnchanged(
        run_id=run_id,
        candidate_id=candidate_id,
        block_id=block_id,
        revision=1,
        receipt=Receipt(receipt_id=f"rcpt-{block_id}-1", log_position=17, committed_at=datetime.now(UTC)),
    )


def stored_payloads(journal: Any) -> bytes:
    """Every stored event's state bytes, concatenated (what a dump of the event table holds)."""
    out = []
    position = 0
    while True:
        page = journal.recorder.select_notifications(start=position, limit=1000, inclusive_of_start=False)
        if not page:
            return b"".join(out)
        out.extend(n.state for n in page)
        position = page[-1].id


@dataclass
class Clock:
    """The monotonic seconds a test moves: a journal's lease clock (``RuntimeJournal.clock``)."""

    now: float = 5000.0

    def __call__(self) -> float:
        return self.now


def leased(journal: Any, clock: Clock) -> Any:
    """``journal``, reading time from ``clock``."""
    journal.clock = clock
    return journal
