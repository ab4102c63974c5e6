"""The run inspector's timeline: one run, the five facts SPEC keeps apart (§1), side by side.

For each block and revision: *proposed* (the candidate, when the runtime offered
it), *previewed* (``answer.preview``; a previewed modification's quota fact),
*committed* (the receipt in the Publication log), *withdrawn*, *sent* (the frame
ids Delivery wrote and the delivery observation that covered them) and *received*
/ *rendered* (the client's receipts) — each with its time, and beside them what
the runtime journal observed and the run's lifecycle as the journal holds it (with
what it refused, whether it closed the run when its lease lapsed, X10, and when the
run's user asked it to stop, X11).

A fact never stands in for another: a block that is committed but not sent shows
exactly that. Where two sources disagree the timeline marks it:

``committed_not_journaled``
    the log committed the revision, the journal never observed it (the seed's crash
    window: R2 says the block is in the view all the same);
``journaled_not_committed``
    the journal observed an effect the log does not hold;
``journal_hash_differs``
    the journal observed this revision with another body hash;
``sent_not_committed``
    Delivery wrote a saved-publication frame for a revision the log does not hold;
``withheld``
    the committed revision does not prove itself (R4) — it is not served;
``received_not_sent`` / ``rendered_not_received``
    a client receipt names frames no delivery observation covered / a render with
    no receipt before it.

Beside the timeline, Delivery's "who saw it" report (D7, built by Delivery from the
receipts it kept): for each withdrawn block revision, the clients that rendered it and
whether each has received the withdrawal. It is carried as Delivery made it.

Each source is read through a table, one row per type: the run's Publication events
through the ledger's (:data:`imprint.recovery.ledger.LEDGER`), the journal's stored events
through :data:`imprint.recovery.journal_facts.JOURNAL_FACTS`, and the announced messages
through :data:`OBSERVED` here — which stage each announces and what is kept of it (ids,
positions and times, never text). Beside the journal's lifecycle stands the log's own
(:meth:`~imprint.recovery.run_ledger.RunLedger.lifecycle`: the end that reached Publication,
a lease lapse, a conversation's deletion).

Inputs are plain data (the adapters read the log, the journal's store, Delivery's
frames and Kafka); the Publication log alone decides what was committed. No I/O."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from imprint.contracts.delivery import (
    ClientReceived,
    ClientRendered,
    DeliveryCompleted,
    DeliveryInterrupted,
    DeliverySent,
)
from imprint.contracts.publication import AnswerPreview
from imprint.contracts.runtime import AnswerPart, AnswerText
from imprint.publication.candidate import Candidate, intake
from imprint.recovery.integrity import diagnose
from imprint.recovery.journal_facts import JournalRun
from imprint.recovery.run_ledger import RunLedger

STAGES = ("proposed", "previewed", "committed", "withdrawn", "sent", "received", "rendered")
ObservedStage = Literal["proposed", "previewed", "sent", "received", "rendered"]
"""The stages an announcement on Kafka shows (the log shows *committed* and *withdrawn*)."""


@dataclass(frozen=True, slots=True)
class SentFrame:
    """A frame Delivery wrote for the run (its store), without body."""

    frame_id: int
    event: str
    block_id: str | None
    revision: int | None
    status: str | None = None


@dataclass(frozen=True, slots=True)
class Observation:
    """One announced fact from Kafka: a proposal, a preview, a delivery or client receipt."""

    type: str
    at: str
    candidate_id: str | None = None
    block_id: str | None = None
    revision: int | None = None
    last_event_id: int | None = None
    block_ids: tuple[str, ...] = ()
    connection_id: str | None = None


def _proposal(message: Any, at: str) -> Observation | None:
    """An offered candidate, under the identity Publication gives it (a message that is no
    candidate proposed nothing)."""
    candidate = intake(message)
    if not isinstance(candidate, Candidate):
        return None
    return Observation(message.type, at, candidate_id=candidate.candidate_id)


def _preview(message: Any, at: str) -> Observation:
    return Observation(message.type, at, candidate_id=message.block.candidate_id, block_id=message.block.block_id,
                       revision=message.block.revision)


def _frames_covered(message: Any, at: str) -> Observation:
    """A delivery or client observation: the frames it covers (up to ``last_event_id``) and the
    blocks it names, if any."""
    return Observation(message.type, at, last_event_id=message.last_event_id,
                       block_ids=tuple(getattr(message, "block_ids", ()) or ()),
                       connection_id=getattr(message, "connection_id", None))


@dataclass(frozen=True, slots=True)
class Observed:
    """What one announced message type shows on the timeline, and how it is read."""

    stage: ObservedStage
    read: Callable[[Any, str], Observation | None]


OBSERVED: dict[type, Observed] = {
    AnswerText: Observed("proposed", _proposal),  # entry A
    AnswerPart: Observed("proposed", _proposal),  # entry B
    AnswerPreview: Observed("previewed", _preview),
    DeliverySent: Observed("sent", _frames_covered),
    DeliveryCompleted: Observed("sent", _frames_covered),
    DeliveryInterrupted: Observed("sent", _frames_covered),
    ClientReceived: Observed("received", _frames_covered),
    ClientRendered: Observed("rendered", _frames_covered),
}
"""Every announced message type the inspector reads (SPEC §1's facts a store does not keep)."""

STAGE_OF: dict[str, ObservedStage] = {cls.model_fields["type"].default: row.stage for cls, row in OBSERVED.items()}
"""Message type → its stage, for :class:`Observation` values (which carry the type's name)."""


def observations_of(messages: Iterable[Any]) -> list[Observation]:
    """Announced messages as timeline observations, each through its row of :data:`OBSERVED`:
    ids, positions and times only — never text. A message of a type without a row is no
    observation (the reader asks only for :data:`STAGE_OF`'s types)."""
    seen: list[Observation] = []
    for message in messages:
        row = OBSERVED.get(type(message))
        observation = None if row is None else row.read(message, message.occurred_at.isoformat())
        if observation is not None:
            seen.append(observation)
    return seen


def _first(times: Iterable[str | None]) -> str | None:
    present = sorted(t for t in times if t)
    return present[0] if present else None


def _covering(observations: Sequence[Observation], frame_ids: Sequence[int], block_id: str) -> str | None:
    """The earliest of ``observations`` that covers one of ``frame_ids`` (and names the block,
    when it names blocks at all)."""
    if not frame_ids:
        return None
    first = min(frame_ids)
    return _first(o.at for o in observations if (o.last_event_id or 0) >= first
                  and (not o.block_ids or block_id in o.block_ids))


def timeline(
    run_id: str,
    ledger: RunLedger | None,
    *,
    journal: JournalRun | None,
    journal_note: str = "",
    frames: Sequence[SentFrame] | None = None,
    observations: Sequence[Observation] | None = None,
    observations_note: str = "",
    seen_report: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``journal``/``frames``/``observations``/``seen_report`` ``None``: that source was not available (the
    note says why); the timeline then shows the stage as unknown rather than as absent."""
    staged: dict[str, list[Observation]] = {stage: [] for stage in STAGES}
    unplaced: list[str] = []
    for observation in observations or ():
        stage = STAGE_OF.get(observation.type)
        if stage is None:
            unplaced.append(observation.type)
        else:
            staged[stage].append(observation)
    effects: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for effect in journal.effects if journal is not None else ():
        effects.setdefault((effect["block_id"], effect["revision"]), []).append(effect)
    frames_of: dict[tuple[str, int], list[SentFrame]] = {}
    for frame in frames or ():
        if frame.block_id is not None and frame.revision is not None:
            frames_of.setdefault((frame.block_id, frame.revision), []).append(frame)
    proposed = {o.candidate_id: o.at for o in staged["proposed"] if o.candidate_id}
    previews = staged["previewed"]

    blocks: list[dict[str, Any]] = []
    disagreements: list[dict[str, Any]] = []
    committed_keys: set[tuple[str, int]] = set()

    def disagree(kind: str, block_id: str | None, revision: int | None, detail: str) -> dict[str, Any]:
        item = {"kind": kind, "block_id": block_id, "revision": revision, "detail": detail}
        disagreements.append(item)
        return item

    for history in ledger.in_delivery_order() if ledger is not None else ():
        rows: list[dict[str, Any]] = []
        for revision in history.revisions:
            number = revision.revision if revision.revision is not None else 0
            key = (history.block_id, number)
            committed_keys.add(key)
            marks: list[dict[str, Any]] = []
            quota = [q for q in (ledger.preview_quota if ledger else ())
                     if q["candidate_id"] == revision.candidate_id and q["block_id"] == history.block_id]
            preview_at = _first([*(o.at for o in previews if o.block_id == history.block_id and o.revision == number),
                                 *(q["at"] for q in quota)])
            sent = frames_of.get(key, [])
            sent_ids = [f.frame_id for f in sent]
            found = diagnose(revision)
            if found is not None:
                marks.append(disagree("withheld", history.block_id, number, f"{found[0]}: {found[1]}"))
            seen_by_journal = effects.get(key, [])
            if journal is not None and not seen_by_journal:
                marks.append(disagree("committed_not_journaled", history.block_id, number,
                                      "committed in the Publication log; the journal never recorded it"))
            for effect in seen_by_journal:
                sha = revision.block.get("body_sha256")
                if effect.get("body_sha256") and sha and effect["body_sha256"] != sha:
                    marks.append(disagree("journal_hash_differs", history.block_id, number,
                                          "the journal observed another body hash for this revision"))
            is_current = revision is history.current
            withdrawn = history.withdrawn if is_current else None
            received = _covering(staged["received"], sent_ids, history.block_id)
            rendered = _covering(staged["rendered"], sent_ids, history.block_id)
            sent_at = _covering(staged["sent"], sent_ids, history.block_id)
            if observations is not None and received and not sent_at:
                marks.append(disagree("received_not_sent", history.block_id, number,
                                      "a client receipt covers frames no delivery observation covered"))
            if observations is not None and rendered and not received:
                marks.append(disagree("rendered_not_received", history.block_id, number,
                                      "rendered with no client receipt before it"))
            rows.append({
                "revision": number,
                "current": is_current,
                "candidate_id": revision.candidate_id,
                "proposed": {"at": proposed.get(revision.candidate_id or ""), "candidate_id": revision.candidate_id},
                "previewed": {"at": preview_at, "quota_fact": bool(quota)} if preview_at else None,
                "committed": {"at": revision.receipt.get("committed_at"), "receipt_id": revision.receipt_id,
                              "log_position": revision.receipt.get("log_position"),
                              "integrity": found[0] if found else "ok"},
                "withdrawn": ({"at": withdrawn.get("at"), "cause": withdrawn.get("cause")} if withdrawn else None),
                "sent": {"frame_ids": sent_ids, "at": sent_at} if sent_ids else None,
                "received": {"at": received} if received else None,
                "rendered": {"at": rendered} if rendered else None,
                "journaled": ([{"kind": e["kind"], "at": e["at"]} for e in seen_by_journal]
                              if journal is not None else None),
                "marks": [m["kind"] for m in marks],
            })
        blocks.append({"block_id": history.block_id, "delivery_ordinal": history.ordinal,
                       "status": "withdrawn" if not history.live else (
                           "withheld" if diagnose(history.current) else "live"),
                       "revisions": rows})

    for (block_id, number), seen_effects in sorted(effects.items()):
        if (block_id, number) not in committed_keys:
            disagree("journaled_not_committed", block_id, number,
                     f"the journal observed {seen_effects[0]['kind']}; the log holds no such revision")
    for (block_id, number), written in sorted(frames_of.items()):
        if (block_id, number) not in committed_keys and any(f.status == "saved" for f in written):
            disagree("sent_not_committed", block_id, number, "Delivery sent it as saved; the log holds no such commit")

    settled_elsewhere = _not_committed(ledger, proposed)
    return {
        "run_id": run_id,
        "in_log": ledger is not None,
        "account_id": ledger.account_id if ledger else None,
        "log_version": ledger.version if ledger else None,
        "lifecycle": {
            "available": journal is not None,
            "note": journal_note,
            "found": journal.found if journal is not None else None,
            "state": journal.state if journal is not None else None,
            "outcome": journal.outcome if journal is not None else None,
            "erased": journal.erased if journal is not None else None,
            "transitions": list(journal.transitions) if journal is not None else [],
            "tool_receipts": list(journal.receipts) if journal is not None else [],
            "lapsed": journal.lapsed if journal is not None else None,
            "stop_requested": journal.stop_requested if journal is not None else None,
            "refusals": list(journal.refusals) if journal is not None else [],
            "unread": list(journal.unread) if journal is not None else [],
        },
        "log_lifecycle": ledger.lifecycle() if ledger is not None else None,
        "sources": {"journal": journal is not None, "frames": frames is not None,
                    "observations": observations is not None, "observations_note": observations_note,
                    "observations_unplaced": unplaced, "seen": seen_report is not None},
        "seen": dict(seen_report) if seen_report is not None else None,
        "blocks": blocks,
        "not_committed": settled_elsewhere,
        "disagreements": disagreements,
    }


def _not_committed(ledger: RunLedger | None, proposed: Mapping[str, str]) -> list[dict[str, Any]]:
    """Candidates that produced no commit: rejected, revision-rejected, refused, or never settled."""
    if ledger is None:
        return []
    items: list[dict[str, Any]] = []
    for candidate_id, settlements in ledger.settlements.items():
        for s in settlements:
            if s["kind"] in ("rejected", "revision_rejected"):
                items.append({"candidate_id": candidate_id, "block_index": s["block_index"], "outcome": s["kind"],
                              "reason": s["reason"], "block_id": s["block_id"],
                              "proposed_at": proposed.get(candidate_id)})
    for refusal in ledger.refusals:
        items.append({"candidate_id": refusal["candidate_id"], "block_index": None, "outcome": "refused",
                      "reason": refusal["reason"], "block_id": None, "at": refusal["at"]})
    for candidate_id, at in proposed.items():
        if candidate_id not in ledger.settlements and not any(r["candidate_id"] == candidate_id
                                                              for r in ledger.refusals):
            items.append({"candidate_id": candidate_id, "block_index": None, "outcome": "not_settled",
                          "reason": None, "block_id": None, "proposed_at": at})
    return items
