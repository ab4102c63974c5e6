"""The run a client case plays, made by Delivery's own rules: inbound messages (the wire
models of ``imprint.contracts``) folded by Delivery's handler table
(:mod:`imprint.delivery.handling`) into frames held in memory the way the view store holds
them (a superseded frame becomes a skeleton, a block withdrawn after ``done`` is stripped
and its conversation told by a notice), and the view a conforming client must show, read
from the same projection (:func:`imprint.delivery.merge.display`). Nothing here is
hand-typed wire format: the frames are :class:`~imprint.delivery.frame.Frame` values, whose
SSE bytes the kit's server sends as they are."""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from imprint.contracts import publication
from imprint.contracts.publication import BlockView, CommittedBlock, Content, Receipt
from imprint.contracts.runs import RunClosed, RunProgress, RunTransitioned
from imprint.delivery import handling, merge
from imprint.delivery.frame import DONE, Frame, FrameDraft, skeleton
from imprint.delivery.frames import RunProjection
from imprint.delivery.notices import NOTICE_EVENT, Notice
from imprint.delivery.summary import payload_sha256

ACCOUNT = "acct-conformance"
AT = "2026-01-01T00:00:00Z"
"""The time a notice carries: fixed, so every run of a case serves the same bytes."""
LATER_KIND = "added-in-a-later-v1"
"""R8 (docs/protocol.md's versioning): a frame kind, notice kind and AI SDK part name
(``data-added-in-a-later-v1``) a later v1 server may add and a v1 client skips."""


# --------------------------------------------------------------------------- inbound messages


@dataclass
class Messages:
    """Builds one run's inbound messages (the wire models Delivery consumes)."""

    run_id: str
    conversation_id: str
    _receipts: itertools.count = field(default_factory=lambda: itertools.count(1))

    def _block(self, block_id: str, revision: int, markdown: str, ordinal: int, candidate: str | None,
               sha: str | None) -> dict[str, Any]:
        return dict(block_id=block_id, revision=revision, delivery_ordinal=ordinal,
                    candidate_id=candidate or f"cand-{block_id}-{revision}",
                    content=Content(type="text", markdown=markdown), source_hint="sources_unverified",
                    body_sha256=sha or hashlib.sha256(markdown.encode()).hexdigest())

    def preview(self, block_id: str, revision: int, markdown: str, ordinal: int = 1, *,
                candidate: str | None = None, sha: str | None = None) -> publication.AnswerPreview:
        return publication.AnswerPreview(run_id=self.run_id, block=BlockView(
            **self._block(block_id, revision, markdown, ordinal, candidate, sha)))

    def published(self, block_id: str, revision: int, markdown: str, ordinal: int = 1, *,
                  candidate: str | None = None, sha: str | None = None) -> publication.AnswerPublished:
        position = next(self._receipts)
        return publication.AnswerPublished(run_id=self.run_id, block=CommittedBlock(
            **self._block(block_id, revision, markdown, ordinal, candidate, sha),
            receipt=Receipt(receipt_id=f"rcpt-{self.run_id}-{position}", log_position=position,
                            committed_at=datetime(2026, 1, 1, tzinfo=UTC))))

    def withdrawn(self, block_id: str, revision: int = 1, cause: str = "source_revoked") -> publication.AnswerWithdrawn:
        return publication.AnswerWithdrawn(run_id=self.run_id, block_id=block_id, revision=revision,
                                           cause=cause)  # type: ignore[arg-type]

    def unchanged(self, candidate: str, block_id: str, revision: int) -> publication.AnswerUnchanged:
        position = next(self._receipts)
        return publication.AnswerUnchanged(run_id=self.run_id, candidate_id=candidate, block_id=block_id,
                                           revision=revision, receipt=Receipt(
                                               receipt_id=f"rcpt-{self.run_id}-{position}", log_position=position,
                                               committed_at=datetime(2026, 1, 1, tzinfo=UTC)))

    def rejected(self, candidate: str, *, block_id: str | None = None, reason: str = "unauthorized_source",
                 block_index: int = 0) -> publication.AnswerRejected:
        return publication.AnswerRejected(run_id=self.run_id, candidate_id=candidate, block_index=block_index,
                                          block_id=block_id, reason=reason)  # type: ignore[arg-type]

    def revision_rejected(self, candidate: str, target: str,
                          reason: str = "quota_exceeded") -> publication.AnswerRevisionRejected:
        return publication.AnswerRevisionRejected(run_id=self.run_id, candidate_id=candidate,
                                                  target_block_id=target, reason=reason)  # type: ignore[arg-type]

    def save_failed(self, candidate: str, block_ids: list[str]) -> publication.AnswerSaveFailed:
        return publication.AnswerSaveFailed(run_id=self.run_id, candidate_id=candidate, block_ids=block_ids,
                                            error="save failed")

    def save_unknown(self, candidate: str, block_ids: list[str]) -> publication.AnswerSaveUnknown:
        return publication.AnswerSaveUnknown(run_id=self.run_id, candidate_id=candidate, block_ids=block_ids)

    def running(self, sequence: int = 2) -> RunTransitioned:
        return RunTransitioned(run_id=self.run_id, account_id=ACCOUNT, conversation_id=self.conversation_id,
                               state="running", previous="queued", sequence=sequence)

    def progress(self, stage: str, detail: str = "") -> RunProgress:
        return RunProgress(run_id=self.run_id, account_id=ACCOUNT, stage=stage, detail=detail)

    def end(self, text: str | None = "The answer.", state: str = "completed") -> list[Any]:
        """The two facts that end a run's stream: Publication settled, the closed record."""
        return [publication.AnswerSettled(run_id=self.run_id, state=state),  # type: ignore[arg-type]
                RunClosed(run_id=self.run_id, account_id=ACCOUNT, conversation_id=self.conversation_id,
                          message_id=f"msg-{self.run_id}", state=state,  # type: ignore[arg-type]
                          outcome="answered" if state == "completed" else None, answer_text=text)]


# --------------------------------------------------------------------------- the view store, in memory


@dataclass
class HeldRun:
    projection: RunProjection


class MemoryView:
    """Delivery's :class:`~imprint.delivery.projection.ViewWorkspace` over one run, in memory:
    the frames as a client reads them (superseded and stripped ones as skeletons) and the
    conversation's notices."""

    def __init__(self, run_id: str, conversation_id: str) -> None:
        self.run_id, self.conversation_id = run_id, conversation_id
        self.held = HeldRun(RunProjection.new(run_id))
        self.frames: list[Frame] = []
        self.keys: dict[int, str] = {}
        self.live: dict[str, int] = {}
        self.notices: list[Frame] = []

    # the workspace protocol
    def want(self, named: dict[str, set[str] | None]) -> None:
        return None

    def run(self, run_id: str, blocks: tuple[str, ...] | None = ()) -> HeldRun:
        """Every block is held already: the whole run lives in memory."""
        assert run_id == self.run_id, run_id
        return self.held

    def append(self, run: HeldRun, drafts: Any, conflicts: Any, trace: str | None = None) -> list[int]:
        ids = []
        for draft in drafts:
            ids.append(self._append(draft))
        return ids

    def _append(self, draft: FrameDraft) -> int:
        frame_id = len(self.frames) + 1
        if draft.key is not None:
            older = self.live.get(draft.key)
            if older is not None:
                self._skeleton(older, "superseded")
            self.live[draft.key] = frame_id
            self.keys[frame_id] = draft.key
        self.frames.append(Frame(self.run_id, frame_id, draft.event, draft.data, draft.body_sha256))
        return frame_id

    def _skeleton(self, frame_id: int, reason: str) -> None:
        old = self.frames[frame_id - 1]
        self.frames[frame_id - 1] = Frame(self.run_id, old.id, old.event,
                                          skeleton(old.event, old.data, old.body_sha256, reason=reason),
                                          old.body_sha256)

    def frame_hashes(self, run: HeldRun) -> list[tuple[int, str, str]]:
        return [(f.id, f.event, f.body_sha256) for f in self.frames]

    def mark_terminal(self, run: HeldRun) -> None:
        return None

    def strip(self, run: HeldRun, key: str, reason: str) -> None:
        for frame_id, held in self.keys.items():
            if held == key:
                self._skeleton(frame_id, reason)

    def turn(self, run: HeldRun, turn: Any) -> None:
        """A conversation's turns (D9) are not played to clients: the cases are run streams and
        their notices."""
        return None

    def notice(self, run: HeldRun, notice: Notice) -> None:
        notice_id = len(self.notices) + 1
        self.notices.append(Frame(f"notices:{self.conversation_id}", notice_id, NOTICE_EVENT,
                                  notice.payload(notice_id, AT), ""))

    def later_frame(self) -> None:
        """R8: a frame of a kind this client does not know, as a later v1 server may send one
        (never after ``done``): a semantic frame like any other — its id is a position of the
        run, and ``stream-summary`` counts it and its ``body_sha256`` (D3)."""
        assert not self.ended, "a later v1 server adds no frame after done"
        payload = {"note": "a v1 client skips a frame kind it does not know, keeping its id",
                   "position": self.last_frame_id + 1}
        sha = payload_sha256(payload)
        self._append(FrameDraft(LATER_KIND, {**payload, "body_sha256": sha}, sha))

    def later_notice(self) -> None:
        """R8: on the conversation's notices stream, a notice of a kind this client does not know
        and an event of a kind it does not know, each with the next id (the stream's ids are its
        positions, whatever their kind)."""
        notice_id = len(self.notices) + 1
        self.notices.append(Frame(f"notices:{self.conversation_id}", notice_id, NOTICE_EVENT,
                                  {"notice_id": notice_id, "kind": LATER_KIND, "run_id": self.run_id,
                                   "block_id": "b1", "revision": 1, "at": AT}, ""))
        self.notices.append(Frame(f"notices:{self.conversation_id}", notice_id + 1, LATER_KIND,
                                  {"notice_id": notice_id + 1, "run_id": self.run_id, "at": AT}, ""))

    def purge(self, conversation_id: str, account_id: str | None) -> None:
        for frame_id, key in self.keys.items():
            if key.startswith("block:"):
                self._skeleton(frame_id, "purged")

    # the kit's side
    def apply(self, messages: list[Any]) -> None:
        """One poll of Delivery's consumer: ordered, then handled one by one."""
        for message in handling.prepare(self, messages):
            handling.handle(self, message)

    @property
    def last_frame_id(self) -> int:
        return len(self.frames)

    @property
    def last_notice_id(self) -> int:
        return len(self.notices)

    @property
    def ended(self) -> bool:
        """``done`` was written (nothing follows it in the run's stream)."""
        return any(frame.event == DONE for frame in self.frames)

    @property
    def terminal(self) -> bool:
        return self.held.projection.terminal


def required_view(view: MemoryView) -> dict[str, Any]:
    """What a conforming client shows once it holds every frame and notice of ``view``: the
    blocks Delivery's projection displays (P16–P18, P21), by position; their bodies (none for
    a block in conflict, P17); the closed answer's text once the run completed (D2, D5);
    whether the stream ended (D3); the run's state; whether a protocol conflict was told (P17);
    once ``done`` arrived, that the stream checked out against its ``stream-summary`` (D3 — with
    every frame of a kind the client does not know counted, R8)."""
    p = view.held.projection
    shown = [e for b in p.answer.blocks.values() if (e := merge.display(b)) is not None]
    shown.sort(key=lambda e: (e["delivery_ordinal"] or 0, e["block_id"]))
    return {
        "blocks": [[e["block_id"], e["revision"], e["status"]] for e in shown],
        "bodies": {e["block_id"]: (e["content"] or {}).get("markdown") for e in shown if e["status"] != "conflict"},
        "text": (p.answer_text or "") if p.terminal and p.state == "completed" else "",
        "done": p.terminal,
        "state": p.state,
        "conflict": bool(p.answer.conflicts),
        "verified": True if view.ended else None,
    }


VIEW_FIELDS = ("blocks", "bodies", "text", "done", "state", "conflict")
"""What an adapter reports of its client's view, every field compared (the JSON-lines protocol)."""
CHECKED_IF_REPORTED = ("verified",)
"""Compared when the adapter reports them: ``verified`` — the client's own D3 check of what it
holds against ``stream-summary`` once ``done`` arrived (``null`` before; a reader that checks no
summary, like npm ``ai``'s, leaves it out)."""


def foreign_notice(view: MemoryView, block_id: str) -> None:
    """A notice of the same conversation about another run's block of the same id: a client
    of this run changes nothing for it (D7)."""
    view.notice(view.held, Notice(run_id=f"{view.run_id}-other", conversation_id=view.conversation_id,
                                  block_id=block_id, revision=1, cause="source_revoked"))
