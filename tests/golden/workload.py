"""The mixed workload every golden log is written from (SPEC R8): several runs of two
accounts, revisions, an unchanged duplicate, rejected blocks, a refused non-answer, a
withdrawal by revocation (through a ``[[ref:…]]`` dependency too) and by tombstone, a
deleted conversation with its key destroyed, a refused save and a save-unknown (both
resolved by reading back, and reconciled by ``imprint recover --apply``), a quota
overrun, a run long enough to be snapshotted, and completed and failed runs. Since
2026-12-03-v2: a run on a second shard (runtime partition 1) relying on a source that is then
revoked, so the source's reliance is split over two shards, and the source registry's
aggregates snapshotted as they stand at the end (a snapshot's state is versioned too).

:data:`RUNS` names each run and the account that may read it: what the golden folder's
``/answer`` documents are asked for."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from imprint.contracts.control import ConversationDeleteRequested
from imprint.contracts.runtime import (
    AnswerPart,
    AnswerText,
    EvidenceGranted,
    EvidenceItem,
    EvidenceSet,
    ModelReasoning,
    NumericIssued,
    QuestionConditionSet,
    RunAdmitted,
    RunCompleted,
    RunFailed,
    RunQueued,
    RunStage,
    RunStarted,
    ToolReceipt,
)
from imprint.contracts.sources import SourceRegistered, SourceRevoked, SourceTombstoned
from imprint.publication.block_ids import issue_block_id
from imprint.publication.sources import SourceDependents, SourceRecord
from services.common.settings import Settings
from services.recovery import cli
from tests.golden.writer import Clock, Writer, pinned

START = datetime(2026, 12, 3, 9, 0, 0, tzinfo=UTC)
A, B = "acct-golden-a", "acct-golden-b"
PUBLIC = "src:public:annual-report-2024"
PRESS = "src:public:press-release-q3"
ARCHIVE = "src:public:archive-2019"
MEMO = f"src:private:{A}:memo"
LEDGER = f"src:private:{B}:ledger"

COMPLETED, REVOKED, DELETED, FAILED, SAVES, LONG, SHARDED = (
    "run-golden-completed", "run-golden-revoked", "run-golden-deleted", "run-golden-failed", "run-golden-saves",
    "run-golden-long", "run-golden-sharded")
RUNS = {COMPLETED: A, REVOKED: A, DELETED: A, FAILED: B, SAVES: B, LONG: A, SHARDED: B}
"""Every run of the workload, with the account it belongs to."""


def opened(run: str, account: str, conversation: str, question: str) -> list[Any]:
    return [RunAdmitted(run_id=run, account_id=account, conversation_id=conversation, message_id=f"msg-{run}",
                        question=question, qcs=QuestionConditionSet(qcs_id=f"qcs-{run}")),
            RunQueued(run_id=run), RunStarted(run_id=run)]


def grant(run: str, source: str, scope: str = "public", owner: str = "publisher") -> EvidenceGranted:
    return EvidenceGranted(run_id=run, source_id=source, scope=scope, owner_account_id=owner,  # type: ignore[arg-type]
                           title=f"title of {source}")


def part(run: str, call: str, markdown: str | None = None, **arguments: Any) -> AnswerPart:
    args = {**({"markdown": markdown} if markdown is not None else {}), **arguments}
    return AnswerPart(run_id=run, turn_id="turn-1", tool_call_id=call, sealed=True, arguments=args)


def block(run: str, call: str, index: int = 0) -> str:
    return issue_block_id(run, f"tool:{call}", index)


def completed(run: str, answer: str, *sources: str, outcome: str = "answered") -> RunCompleted:
    items = [EvidenceItem(source_id=s, title=f"title of {s}", excerpt=f"excerpt of {s}") for s in sources]
    return RunCompleted(run_id=run, outcome=outcome, answer_text=answer,  # type: ignore[arg-type]
                        evidence=EvidenceSet(items=items, snapshot_id=f"snap-{run}", knowledge_version="kv-2026-12"))


def write(settings: Settings) -> None:
    """The whole workload into the stores ``settings`` names (fresh ones)."""
    with pinned(Clock(START)) as clock:
        w = Writer(settings, clock)
        try:
            _runs(w)
        finally:
            w.close()
        unknown = [m for m in w.emitted if m.type == "answer.save_unknown"]
        assert [(m.run_id, m.candidate_id) for m in unknown] == [(SAVES, "tool:s-2")], unknown
        clock.tick()
        out, err = io.StringIO(), io.StringIO()
        code = cli.recover(settings, apply=True, save_unknowns={SAVES: {"tool:s-2"}}, read_kafka=False,
                           out=out, err=err)
        assert code == 0, err.getvalue()


def _runs(w: Writer) -> None:
    w.poll(SourceRegistered(source_id=PUBLIC, scope="public", owner_account_id="publisher", title="Annual report"),
           SourceRegistered(source_id=PRESS, scope="public", owner_account_id="publisher", title="Press release"),
           SourceRegistered(source_id=ARCHIVE, scope="public", owner_account_id="publisher", title="Archive"),
           SourceRegistered(source_id=MEMO, scope="private", owner_account_id=A, title="Memo"),
           SourceRegistered(source_id=LEDGER, scope="private", owner_account_id=B, title="Ledger"))

    # A completed run: blocks through both entries, a revision, an unchanged duplicate,
    # a candidate whose second block is rejected, an invalid revision target, a refused non-answer.
    r = COMPLETED
    w.poll(*opened(r, A, "conv-golden-1", "How did revenue develop in 2024?"),
           RunStage(run_id=r, stage="retrieval", detail="3 sources"),
           grant(r, PUBLIC), grant(r, MEMO, "private", A),
           NumericIssued(run_id=r, handle_id="num-growth", value=Decimal("12.5"), unit="%", version=1,
                         source_id=PUBLIC))
    w.poll(part(r, "c-1", f"Revenue grew [[num:num-growth]] according to [[cite:{PUBLIC}]]."),
           AnswerText(run_id=r, turn_id="turn-1", segment=0, text="Background: the report covers fiscal 2024."),
           part(r, "c-2", blocks=[{"markdown": f"The memo agrees [[cite:{MEMO}]]."},
                                  {"markdown": f"Their ledger says otherwise [[cite:{LEDGER}]]."}]))
    w.poll(part(r, "c-3", f"Revenue grew [[num:num-growth]] year on year, per [[cite:{PUBLIC}]].",
                replaces=block(r, "c-1")),
           part(r, "c-4", "Background: the report covers fiscal 2024."),
           part(r, "c-5", "Retarget.", replaces="blk_00000000000000000000000000000000"),
           part(r, "c-6", "  \u0007  "),
           ModelReasoning(run_id=r, text="hidden reasoning is never an answer"),
           AnswerPart(run_id=r, turn_id="turn-1", tool_call_id="c-7", sealed=False, arguments={"markdown": "half"}))
    w.poll(*(ToolReceipt(run_id=r, tool_call_id=c, status="ok") for c in ("c-1", "c-2", "c-3", "c-5", "c-6")))
    w.poll(completed(r, "Revenue grew 12.5 % in 2024.", PUBLIC, MEMO))

    # A completed run whose sources are revoked and tombstoned afterwards (P21, X7).
    r = REVOKED
    w.poll(*opened(r, A, "conv-golden-2", "What did the press release claim?"),
           grant(r, PRESS), grant(r, ARCHIVE), grant(r, PUBLIC))
    w.poll(part(r, "v-1", f"The press release claims record sales [[cite:{PRESS}]]."),
           part(r, "v-2", f"Building on [[ref:{block(r, 'v-1')}]], margins rose [[cite:{PUBLIC}]]."),
           part(r, "v-3", f"In 2019 the archive said the same [[cite:{ARCHIVE}]]."),
           part(r, "v-4", f"Independently, the report confirms growth [[cite:{PUBLIC}]]."))
    w.poll(completed(r, "Record sales, per the press release.", PRESS, ARCHIVE))

    # A run of the other account on another shard relying on the same source: the
    # revocation must find it through that shard's reliance record (P21).
    r = SHARDED
    w.poll(*opened(r, B, "conv-golden-7", "Did the press release mention margins?"), grant(r, PRESS), grant(r, PUBLIC),
           partition=1)
    w.poll(part(r, "h-1", f"It mentions record sales [[cite:{PRESS}]]."),
           part(r, "h-2", f"Margins are in the report [[cite:{PUBLIC}]]."), partition=1)
    w.poll(completed(r, "Record sales; margins per the report.", PRESS, PUBLIC), partition=1)
    w.poll(SourceRevoked(source_id=PRESS, reason="retracted by the publisher"))
    w.poll(SourceTombstoned(source_id=ARCHIVE))

    # A run whose conversation is deleted: its blocks withdrawn, its key destroyed (X8).
    r = DELETED
    w.poll(*opened(r, A, "conv-golden-3", "A private question about the tower."))
    w.poll(part(r, "d-1", "A private draft: the tower is 42 m tall."))
    w.poll(completed(r, "The tower is 42 m tall."))
    w.poll(ConversationDeleteRequested(conversation_id="conv-golden-3", account_id=A, reason="user"))
    w.poll(part(r, "d-2", "A late proposal for a deleted conversation."))

    # A run of the other account that fails after a committed block (P20).
    r = FAILED
    w.poll(*opened(r, B, "conv-golden-4", "What does our ledger show?"), grant(r, LEDGER, "private", B))
    w.poll(part(r, "f-1", f"The ledger shows a surplus [[cite:{LEDGER}]]."))
    w.poll(RunFailed(run_id=r, reason="provider_unavailable"))

    # Saves: one refused by the database, one whose outcome was lost (P15), then a
    # block modified past its quota (P13).
    r = SAVES
    w.poll(*opened(r, B, "conv-golden-5", "Summarise the ledger."))
    with w.fail_next_commit("refused"):
        w.poll(part(r, "s-1", "First saved on the second try."))
    with w.fail_next_commit("unknown"):
        w.poll(part(r, "s-2", "Saved, though the database never said so."))
    for n, call in enumerate(("s-3", "s-4", "s-5"), start=2):
        w.poll(part(r, call, f"First saved on the second try, revision {n}.", replaces=block(r, "s-1")))
    w.poll(completed(r, "The ledger, summarised."))

    # A run long enough for its aggregate to be snapshotted, whose number moves on (P9).
    r = LONG
    w.poll(*opened(r, A, "conv-golden-6", "What is the rate now?"))
    w.poll(part(r, "l-1", "The rate was [[num:num-rate]] and [[num:num-missing]] is unknown."))
    w.poll(*(NumericIssued(run_id=r, handle_id="num-rate", value=Decimal(f"{n / 10:.1f}"), unit="%", version=n)
             for n in range(1, 101)))
    w.poll(part(r, "l-2", "The rate is now [[num:num-rate]]."))
    w.poll(completed(r, "The rate is 10.0 %.", outcome="insufficient_evidence"))

    # The source registry as it stands, snapshotted (Publication takes these after 200
    # events of a source; their state is what a later release must read).
    for source in (PRESS, PUBLIC):
        w.app.take_snapshot(SourceRecord.id_for(source))
        for shard in ("0", "1"):
            w.app.take_snapshot(SourceDependents.id_for(source, shard))
