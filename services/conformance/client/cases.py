"""The client cases: scripted runs (steps of inbound messages, each made into frames by
Delivery's own rules, :mod:`.script`), each played over the ways a stream reaches a client
(:data:`PATHS`: live on one connection, dropped and resumed after every step, with frames
repeated across the reconnect, with the ticket expired before the reconnect, read only
once the run is over, or with fields a later v1 server may add), plus the cases of their own
(a reset mid-stream, notices repeated or about another run, and — :data:`LATER_PATHS` — frames,
notices and AI SDK parts of kinds a later v1 server may add). Every case names the rule it
checks (docs/rules.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from services.conformance.client.script import Messages

Steps = list[list[Any]]


@dataclass(frozen=True)
class Script:
    """One run: what it checks (``rule``), and its steps — each a poll of Delivery's consumer,
    after which the client's view is checked."""

    name: str
    rule: str
    build: Callable[[Messages], Steps]
    """The steps of the run, from its message builder."""
    restore_after: int | None = None
    """D8: after this step the kit's store is restored from a backup taken ``restore_to`` steps in."""
    restore_to: int = 0


@dataclass(frozen=True)
class Path:
    """How the frames reach the client between steps."""

    name: str
    rule: str
    drop: bool = False
    """Drop every connection after each step (the client resumes with ``Last-Event-ID``, D1)."""
    replay: int = 0
    """On the next connection, send this many frames again that the client already holds."""
    expire: bool = False
    """Expire the client's tickets before it reconnects (D6: it mints a new one)."""
    late: bool = False
    """The client connects once every step is in (a new client gets the current merged view, D1)."""
    grown: bool = False
    """Every object carries a field the client does not know, as a later v1 server may send (R8)."""
    later: bool = False
    """Frames of a kind the client does not know before every step until ``done`` (before any
    block, between revisions), and after ``done`` a notice and a notices event of kinds it does
    not know (in the AI SDK form: ``data-`` parts of a type it does not know), as a later v1
    server may send (R8: skipped, their ids kept as positions)."""


PATHS = (
    Path("live", ""),
    Path("resumed", "D1", drop=True),
    Path("repeated", "D1", drop=True, replay=2),
    Path("ticket-expired", "D6", drop=True, expire=True),
    Path("late", "D1", late=True),
    Path("grown", "R8", grown=True),
)


@dataclass(frozen=True)
class Case:
    id: str
    rule: str
    script: Script
    path: Path
    family: str = ""
    notices_replay: int = 0
    """Notices sent again on the notices stream's next connection (D7: applied once)."""
    extra: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- the scripts

LONG = ("Water boils at 100 °C at sea level; at altitude it boils lower, because the air pressure is "
        "lower. A pressure cooker raises it again.")


def single_block(m: Messages) -> Steps:
    return [[m.running(), m.preview("b1", 1, "Boiling point: 100 °C.")],
            [m.published("b1", 1, "Boiling point: 100 °C.")],
            m.end("Boiling point: 100 °C.")]


def revision_in_place(m: Messages) -> Steps:
    return [[m.running(), m.published("b1", 1, "First block.", 1), m.published("b2", 1, "Second block.", 2)],
            [m.published("b1", 2, "First block, revised.", 1)],
            [m.published("b1", 3, "First block, revised again.", 1)],
            m.end()]


def many_revisions(m: Messages) -> Steps:
    return [[m.running()], *[[m.published("b1", r, f"Revision {r} of the block.")] for r in range(1, 6)], m.end()]


def preview_over_committed(m: Messages) -> Steps:
    return [[m.running(), m.published("b1", 1, "Committed revision one.")],
            [m.preview("b1", 2, "Revision two, not saved yet.")],
            [m.published("b1", 2, "Revision two, not saved yet.")],
            m.end()]


def stale_preview(m: Messages) -> Steps:
    return [[m.running(), m.published("b1", 2, "Committed revision two.")],
            [m.preview("b1", 1, "An older preview, late.", candidate="cand-late")],
            [m.preview("b1", 2, "Committed revision two.")],
            m.end()]


def withdrawn_before_done(m: Messages) -> Steps:
    return [[m.running(), m.published("b1", 1, "Kept block.", 1),
             m.published("b2", 1, "Built on a source that will be revoked.", 2)],
            [m.withdrawn("b2", 1)],
            m.end()]


def withdrawn_preview(m: Messages) -> Steps:
    return [[m.running(), m.preview("b1", 1, "A preview whose source goes away.")],
            [m.withdrawn("b1", 1, "source_tombstoned")],
            [m.published("b2", 1, "Another block.", 2)],
            m.end()]


def late_receipt(m: Messages) -> Steps:
    return [[m.running(), m.preview("b1", 1, "Revoked before its receipt.")],
            [m.withdrawn("b1", 1)],
            [m.published("b1", 1, "Revoked before its receipt.")],
            m.end()]


def withdrawn_then_revised(m: Messages) -> Steps:
    return [[m.running(), m.published("b1", 1, "Revision one.")],
            [m.withdrawn("b1", 1)],
            [m.published("b1", 2, "Revision two, on a new source.")],
            m.end()]


def withdrawn_after_done(m: Messages) -> Steps:
    return [[m.running(), m.published("b1", 1, "Kept block.", 1),
             m.published("b2", 1, "Withdrawn after the answer finished.", 2)],
            m.end(),
            [m.withdrawn("b2", 1)]]


def withdrawn_after_done_revised(m: Messages) -> Steps:
    return [[m.running(), m.published("b1", 1, "Revision one.", 1), m.published("b2", 1, "Other block.", 2)],
            [m.published("b1", 2, "Revision two.", 1)],
            m.end(),
            [m.withdrawn("b1", 2, "source_tombstoned")],
            [m.withdrawn("b2", 1)]]


def rejected_source(m: Messages) -> Steps:
    return [[m.running(), m.published("b1", 1, "Cites a source the account lost.", 1),
             m.published("b2", 1, "Fine block.", 2)],
            [m.rejected("cand-x", block_id="b1")],
            m.end()]


def rejected_new_block(m: Messages) -> Steps:
    return [[m.running(), m.preview("b1", 1, "Shown block.", 1)],
            [m.rejected("cand-new", reason="malformed_block", block_index=1)],
            [m.published("b1", 1, "Shown block.", 1)],
            m.end()]


def revision_rejected(m: Messages) -> Steps:
    return [[m.running(), m.published("b1", 1, "Revision one.")],
            [m.preview("b1", 2, "A revision over quota.", candidate="cand-over")],
            [m.revision_rejected("cand-over", "b1")],
            m.end()]


def conflict_preview_published(m: Messages) -> Steps:
    return [[m.running(), m.preview("b1", 1, "One body.", candidate="cand-a"), m.published("b2", 1, "Other.", 2)],
            [m.published("b1", 1, "Another body for the same revision.", candidate="cand-b")],
            m.end()]


def conflict_over_committed(m: Messages) -> Steps:
    return [[m.running(), m.published("b1", 1, "Committed revision one.")],
            [m.published("b1", 2, "Revision two, one body.", candidate="cand-a")],
            [m.published("b1", 2, "Revision two, another body.", candidate="cand-b")],
            m.end()]


def save_failed(m: Messages) -> Steps:
    return [[m.running(), m.published("b1", 1, "Saved block.", 1),
             m.preview("b2", 1, "A preview whose save fails.", 2, candidate="cand-f")],
            [m.save_failed("cand-f", ["b2"])],
            m.end()]


def save_unknown(m: Messages) -> Steps:
    return [[m.running(), m.preview("b1", 1, "A preview whose save is unconfirmed.", candidate="cand-u")],
            [m.save_unknown("cand-u", ["b1"])],
            [m.published("b1", 1, "A preview whose save is unconfirmed.", candidate="cand-u")],
            m.end()]


def unchanged(m: Messages) -> Steps:
    return [[m.running(), m.published("b1", 1, "Same text.")],
            [m.preview("b1", 2, "Same text.", candidate="cand-dup")],
            [m.unchanged("cand-dup", "b1", 1)],
            m.end()]


def stopped(m: Messages) -> Steps:
    return [[m.running(), m.published("b1", 1, "Saved before the stop.", 1),
             m.preview("b2", 1, "Never saved.", 2), m.preview("b1", 2, "Unsaved revision.", 1)],
            m.end(None, state="stopped")]


def ordinal_order(m: Messages) -> Steps:
    return [[m.running(), m.published("b3", 1, "Third by position.", 3)],
            [m.published("b1", 1, "First by position.", 1)],
            [m.published("b2", 1, "Second by position.", 2), m.published("b3", 2, "Third, revised.", 3)],
            m.end()]


def closed_text(m: Messages) -> Steps:
    return [[m.running(), m.progress("retrieving", "3 sources"), m.published("b1", 1, "A block.")],
            [m.progress("drafting")],
            m.end(LONG)]


def failed_run(m: Messages) -> Steps:
    return [[m.running(), m.published("b1", 1, "Saved before the failure.")],
            m.end(None, state="failed")]


def closed_before_settled(m: Messages) -> Steps:
    """The two topics are not ordered against each other: the closed record may come first;
    ``done`` waits for Publication's settlement and never overtakes a committed block (D2)."""
    settled, closed = m.end("Closed first, settled last.")
    return [[m.running(), m.published("b1", 1, "First block.", 1)],
            [closed],
            [m.published("b2", 1, "Committed after the closed record.", 2)],
            [settled]]


def withdrawn_with_the_end(m: Messages) -> Steps:
    """A withdrawal polled with the run's end: Delivery applies the closed record last, so it
    is a frame of the run, not a notice."""
    return [[m.running(), m.published("b1", 1, "Kept block.", 1), m.published("b2", 1, "Withdrawn at the end.", 2)],
            [*m.end(), m.withdrawn("b2", 1)]]


def reset_script(m: Messages) -> Steps:
    return [[m.running(), m.published("b1", 1, "Block one.", 1)],
            [m.published("b2", 1, "Block two, lost with the restore.", 2)],
            [m.published("b1", 2, "Block one, revised; lost with the restore.", 1)],
            [m.published("b3", 1, "Block three, after the restore.", 3)],
            m.end()]


SCRIPTS = (
    Script("single-block", "P16", single_block),
    Script("revision-in-place", "P18", revision_in_place),
    Script("many-revisions", "P18", many_revisions),
    Script("preview-over-committed", "P16", preview_over_committed),
    Script("stale-preview", "P16", stale_preview),
    Script("withdrawn-before-done", "P21", withdrawn_before_done),
    Script("withdrawn-preview", "P21", withdrawn_preview),
    Script("late-receipt-after-withdrawal", "P16", late_receipt),
    Script("withdrawn-then-revised", "P21", withdrawn_then_revised),
    Script("withdrawn-after-done", "D7", withdrawn_after_done),
    Script("withdrawn-after-done-revised", "D7", withdrawn_after_done_revised),
    Script("rejected-source", "P16", rejected_source),
    Script("rejected-new-block", "D6", rejected_new_block),
    Script("revision-rejected", "P13", revision_rejected),
    Script("conflict-preview-published", "P17", conflict_preview_published),
    Script("conflict-over-committed", "P17", conflict_over_committed),
    Script("save-failed", "P15", save_failed),
    Script("save-unknown", "P15", save_unknown),
    Script("unchanged", "P11", unchanged),
    Script("stopped", "X11", stopped),
    Script("ordinal-order", "P18", ordinal_order),
    Script("closed-text", "D2", closed_text),
    Script("failed-run", "D5", failed_run),
    Script("closed-before-settled", "D2", closed_before_settled),
    Script("withdrawn-with-the-end", "P21", withdrawn_with_the_end),
)

LATER_PATHS = (
    Path("later-kinds", "R8", later=True),
    Path("later-kinds-resumed", "R8", drop=True, later=True),
)
"""R8 over the scripts of :data:`LATER_SCRIPTS`: a client that flags an unknown kind, drops its
id (a gap, a summary that does not match) or resumes before it fails here."""
LATER_SCRIPTS = ("single-block", "revision-in-place", "many-revisions", "withdrawn-after-done",
                 "withdrawn-after-done-revised", "closed-text", "stopped", "closed-before-settled")

RESETS = (
    Script("reset-mid-stream", "D8", reset_script, restore_after=3, restore_to=1),
    Script("reset-to-nothing-held", "D8", reset_script, restore_after=2, restore_to=0),
    Script("reset-then-revised", "D8", revision_in_place, restore_after=3, restore_to=1),
    Script("reset-before-withdrawal", "D8", withdrawn_before_done, restore_after=2, restore_to=1),
)


def all_cases() -> list[Case]:
    cases = [Case(f"{s.name}/{p.name}", p.rule or s.rule, s, p, family=s.name) for s in SCRIPTS for p in PATHS]
    cases += [Case(f"later/{s.name}/{p.name}", p.rule, s, p, family="later")
              for s in SCRIPTS if s.name in LATER_SCRIPTS for p in LATER_PATHS]
    cases += [Case(f"reset/{s.name}", "D8", s, PATHS[0], family="reset") for s in RESETS]
    cases += [Case(f"reset/{s.name}/repeated", "D8", s, PATHS[2], family="reset") for s in RESETS[:2]]
    notices = [s for s in SCRIPTS if s.rule == "D7"]
    cases += [Case(f"notices/{s.name}/repeated", "D7", s, PATHS[1], family="notices", notices_replay=1)
              for s in notices]
    cases += [Case(f"notices/{s.name}/interleaved-with-another-run", "D7", s, PATHS[0], family="notices",
                   extra={"foreign_notice": True}) for s in notices]
    return cases
