"""Valid messages of each consumed topic, for the fuzz tier to damage (never the ones whose
effect it checks: those have ids of their own)."""

from __future__ import annotations

from imprint.contracts.base import Message
from imprint.contracts.control import ConversationDeleteRequested, RunCancelRequested, RunLeaseLapsed
from imprint.contracts.runtime import (
    AnswerText, ModelFrame, NumericIssued, RunCompleted, RunFailed, RunHeartbeat, RunStage, RunStarted, RunStopped,
    ToolReceipt,
)
from imprint.contracts.sources import SourceRevoked, SourceTombstoned
from tests.integration.fuzz.barrage import ACCOUNT
from tests.integration.publication.pubsupport import admitted, granted, part, registered
from tests.support import delivery_builders as view

RUN = "run-fz-seed"


def runtime() -> list[Message]:
    return [admitted(RUN, ACCOUNT), RunStarted(run_id=RUN), RunStage(run_id=RUN, stage="search", detail="d"),
            RunHeartbeat(run_id=RUN, in_flight="model"), granted(RUN, "src-fz-seed"),
            NumericIssued(run_id=RUN, handle_id="h1", value="12.5", unit="kg", version=1),
            AnswerText(run_id=RUN, turn_id="t1", segment=0, text="Some [[cite:src-fz-seed]] text."),
            part(RUN, "c-seed", "A proposed block [[num:h1]]."),
            ToolReceipt(run_id=RUN, tool_call_id="c-seed", status="ok"),
            RunCompleted(run_id=RUN, outcome="answered", answer_text="done"), RunStopped(run_id=RUN),
            RunFailed(run_id=RUN, reason="x"), ModelFrame(run_id=RUN, payload={"a": [1, 2]})]


def sources() -> list[Message]:
    return [registered("src-fz-seed"), SourceRevoked(source_id="src-fz-seed", account_id=ACCOUNT, reason="r"),
            SourceTombstoned(source_id="src-fz-seed")]


def control() -> list[Message]:
    return [RunCancelRequested(run_id=RUN, account_id=ACCOUNT),
            RunLeaseLapsed(run_id=RUN, account_id=ACCOUNT, conversation_id="conv-fz-seed"),
            ConversationDeleteRequested(conversation_id="conv-fz-seed", account_id=ACCOUNT)]


def publication() -> list[Message]:
    return [view.preview(RUN, "blk-fz", 1, "Preview."), view.published(RUN, "blk-fz", 1, "Published."),
            view.unchanged(RUN, "tool:c", "blk-fz", 1), view.withdrawn(RUN, "blk-fz"),
            view.rejected(RUN, "tool:c"), view.revision_rejected(RUN, "tool:c", "blk-fz"),
            view.save_failed(RUN, "tool:c", ["blk-fz"]), view.save_unknown(RUN, "tool:c", ["blk-fz"]),
            view.settled(RUN)]


def runs() -> list[Message]:
    return [view.running(RUN, ACCOUNT), view.progress(RUN, "search", account=ACCOUNT),
            view.closed(RUN, account=ACCOUNT), view.deleted(RUN, "conv-fz-seed", account=ACCOUNT)]
