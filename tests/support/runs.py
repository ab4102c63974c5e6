"""The runtime's messages of one run's lifecycle, built the one way for every tier
(the journal's builders, the e2e and Node tests): a run is admitted, queued and
started (:func:`opened`), is granted its evidence and completes with an answer."""

from __future__ import annotations

from imprint.contracts.base import Message
from imprint.contracts.runtime import (
    EvidenceGranted,
    EvidenceItem,
    EvidenceSet,
    QuestionConditionSet,
    RunAdmitted,
    RunCompleted,
    RunQueued,
    RunStarted,
)


def admitted(run_id: str, *, account_id: str, question: str, conversation_id: str | None = None,
             message_id: str | None = None, qcs: QuestionConditionSet | None = None) -> RunAdmitted:
    return RunAdmitted(run_id=run_id, account_id=account_id, conversation_id=conversation_id or f"conv-{run_id}",
                       message_id=message_id or f"msg-{run_id}", question=question,
                       qcs=qcs or QuestionConditionSet(qcs_id=f"qcs-{run_id}"))


def opened(admission: RunAdmitted) -> list[Message]:
    """The run's opening on the runtime topic: admitted, queued, started."""
    return [admission, RunQueued(run_id=admission.run_id), RunStarted(run_id=admission.run_id)]


def granted(run_id: str, source_id: str, *, scope: str, owner_account_id: str, title: str = "") -> EvidenceGranted:
    return EvidenceGranted(run_id=run_id, source_id=source_id, scope=scope,  # type: ignore[arg-type]
                           owner_account_id=owner_account_id, title=title)


def completed(run_id: str, answer: str | None, *items: EvidenceItem, outcome: str = "answered",
              snapshot_id: str | None = None, knowledge_version: str | None = None) -> RunCompleted:
    return RunCompleted(run_id=run_id, outcome=outcome, answer_text=answer,  # type: ignore[arg-type]
                        evidence=EvidenceSet(items=list(items), snapshot_id=snapshot_id,
                                             knowledge_version=knowledge_version))
