"""X12 — ``imprint inspect --conversation``'s table: each question with its policy, what the policy
did and how it ended, the facts in order, and a question left without an end named in red."""

from __future__ import annotations

import io
from typing import Any

import pytest

from imprint.contracts.runtime import QuestionConditionSet, RunAdmitted, RunQueued, RunStarted, RunStopped
from imprint.journal.conversation import Conversation
from imprint.journal.handling import Context, handle
from imprint.journal.keys import JournalKeys
from imprint.recovery.conversation import ConversationFold
from imprint.shredding import InMemoryKeyring
from imprint.workspace import MemoryWorkspace
from services.recovery.render import conversation_table


def admitted(run_id: str, policy: str | None = None) -> RunAdmitted:
    return RunAdmitted(run_id=run_id, account_id="acct", conversation_id="conv-t", message_id=f"msg-{run_id}",
                       question="Why?", qcs=QuestionConditionSet(qcs_id=f"qcs-{run_id}"), policy=policy)  # type: ignore[arg-type]


@pytest.mark.rule("X12")
def test_the_table_shows_each_question_and_names_one_without_an_end() -> None:
    ws, context, events = MemoryWorkspace(), Context(JournalKeys(InMemoryKeyring())), []
    for message in (admitted("r1"), RunQueued(run_id="r1"), RunStarted(run_id="r1"), admitted("r2", "reject"),
                    admitted("r3", "interrupt"), RunStopped(run_id="r1")):
        handle(ws, message, context)
        events.extend(e for e in ws.pending() if isinstance(e, Conversation.Event))
    silent: list[Any] = [e for e in events if not (isinstance(e, Conversation.QuestionEnded) and e.run_id == "r2")]
    out = io.StringIO()
    conversation_table(out, ConversationFold.of("conv-t", silent))
    shown = out.getvalue()
    assert "conversation conv-t" in shown and "running: r3" in shown
    for word in ("interrupt", "reject", "refused", "QuestionQueued", "RunInterrupted"):
        assert word in shown, word
    assert "neither running nor queued: r2" in shown
