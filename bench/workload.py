"""The messages every measurement sends: the same ~1.1 KB two-block proposal everywhere.

Only the v1 wire contracts (``imprint.contracts``) are used, so the harness keeps
working whatever Publication, the relay or Delivery do inside."""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass
from typing import Any

from imprint.contracts.registry import encode
from imprint.contracts.runtime import (
    AnswerPart,
    EvidenceGranted,
    NumericIssued,
    QuestionConditionSet,
    RunAdmitted,
    RunCompleted,
)

ACCOUNT = "acct-bench"
PUBLIC = "src:public:annual-report-2024"
PRIVATE = "src:private:acct-bench:memo"
MARKER = re.compile(rb"\(mk:([A-Za-z0-9_.\-]+)\)")
"""Every block body starts with ``(mk:<call>)``: how an SSE client (which never sees
candidate ids) tells which proposal a frame belongs to."""


@dataclass(frozen=True)
class Sources:
    """The sources one run cites: a public report and the account's private memo."""

    public: str = PUBLIC
    private: str = PRIVATE


def typical_part(run_id: str, call: str, sources: Sources = Sources()) -> AnswerPart:
    """Two blocks, as a research answer usually sends them: a cited paragraph with a
    Host-issued number, and a short cited follow-up (≈1.1 KB on the wire)."""
    first = f"(mk:{call}) " + (
        "Revenue grew in every region in 2024, led by the services segment, while hardware "
        f"margins narrowed under pricing pressure [[cite:{sources.public}]]. The services share of total "
        "revenue reached [[num:h-share]], up from the previous year; management attributes the "
        "change to subscription renewals and the new enterprise tier. "
    ) * 2
    second = (f"(mk:{call}) The memo adds that the guidance for next year assumes flat hardware volumes "
              f"[[cite:{sources.private}]].")
    return AnswerPart(run_id=run_id, turn_id="turn-1", tool_call_id=call, sealed=True,
                      arguments={"blocks": [{"markdown": first}, {"markdown": second, "role": "detail"}]})


def candidate_of(call: str) -> str:
    """The candidate id Publication gives an ``answer.part`` (``tool:<tool_call_id>``)."""
    return f"tool:{call}"


def admitted(run_id: str, account: str = ACCOUNT) -> RunAdmitted:
    return RunAdmitted(run_id=run_id, account_id=account, conversation_id=f"conv-{run_id}",
                       message_id=f"msg-{run_id}", question="How did revenue develop?",
                       qcs=QuestionConditionSet(qcs_id=f"qcs-{run_id}"))


def grants(run_id: str, sources: Sources = Sources(), account: str = ACCOUNT) -> list[Any]:
    return [
        EvidenceGranted(run_id=run_id, source_id=sources.public, scope="public", owner_account_id="publisher",
                        title="AR"),
        EvidenceGranted(run_id=run_id, source_id=sources.private, scope="private", owner_account_id=account,
                        title="Memo"),
        NumericIssued(run_id=run_id, handle_id="h-share", value="41.5", unit="%", version=1,  # type: ignore[arg-type]
                      source_id=sources.public),
    ]


def opening(run_id: str, sources: Sources = Sources()) -> list[Any]:
    """What a run sends before its first proposal: admission, evidence grants, a number."""
    return [admitted(run_id), *grants(run_id, sources)]


def closing(run_id: str) -> RunCompleted:
    """What a run sends once its answer is done."""
    return RunCompleted(run_id=run_id, outcome="answered")


def wire(message: Any) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    """(key, value, headers) exactly as the runtime produces a message."""
    return message.run_id.encode(), encode(message), [("type", message.type.encode())]


def proposal_bytes() -> bytes:
    return encode(typical_part("run-floor-000000", "call-000000"))


async def paced_parts(producer: Any, topic: str, calls: list[str], runs: list[str], rate: float,
                      sources: Sources = Sources()) -> tuple[dict[str, float], list[Any], float]:
    """Send one typical ``answer.part`` per call, round robin over ``runs``, each at its own
    due time (``rate`` per second from 0.1 s from now), not awaiting each send so the
    producer batches as it would for a runtime. Returns each call's due time
    (``time.perf_counter``), the sends' futures, and how late the latest send was."""
    scheduled: dict[str, float] = {}
    futures: list[Any] = []
    late = 0.0
    start = time.perf_counter() + 0.1
    for i, call in enumerate(calls):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0.001:
            await asyncio.sleep(delay)
        else:
            late = max(late, -delay)
        scheduled[call] = due
        key, value, headers = wire(typical_part(runs[i % len(runs)], call, sources))
        futures.append(await producer.send(topic, value, key=key, headers=headers))
    return scheduled, futures, late
