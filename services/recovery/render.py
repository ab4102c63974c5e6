"""Human output of the recovery commands (rich tables on stdout, progress on stderr).

Machines get JSON (``--json``) from :mod:`services.recovery.cli`; this module only
turns the same documents into tables. Bodies are never printed unless asked for
(``--bodies``), and never in a table cell."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TextIO, TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

T = TypeVar("T")


def console(out: TextIO) -> Console:
    """A console on ``out``: colours on a terminal, plain text in a pipe or a file."""
    return Console(file=out, soft_wrap=False, width=None if out.isatty() else 160, highlight=False)


@contextmanager
def progress(err: TextIO, label: str, total: int | None) -> Iterator[Any]:
    """A progress bar on ``err`` when it is a terminal; otherwise nothing is drawn."""
    bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=Console(file=err), transient=True, disable=not err.isatty())
    with bar:
        task = bar.add_task(label, total=total)
        yield lambda: bar.advance(task)


def short(value: Any, width: int = 12) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def clock(at: str | None) -> str:
    """``HH:MM:SS.mmm`` of an RFC 3339 time (UTC as recorded), or ``—``."""
    if not at:
        return "—"
    _, _, time = at.partition("T")
    return time[:12] if time else at


def _ok(flag: bool) -> Text:
    return Text("ok", style="green") if flag else Text("FAIL", style="bold red")


# ------------------------------------------------------------------------------------- replay

REPLAY_TITLE = "Answer views rebuilt from the Publication log (R1)"
REPLAY_COLUMNS = (("run", "left"), ("blocks", "right"), ("withheld", "right"), ("view sha256", "left"))


def _plain(cell: str) -> bool:
    """A cell that rich prints as it is, one column per character (no markup, no wide or control characters)."""
    return cell.isascii() and cell.isprintable() and "[" not in cell and "\\" not in cell


def _plain_replay_table(out: TextIO, rows: list[Mapping[str, Any]]) -> bool:
    """The replay table without verification or bodies, written line by line exactly as
    rich lays it out (heavy head, natural column widths), without building it in rich:
    rendering tens of thousands of rows through rich took seconds and a copy of every
    line in memory. ``False`` (nothing written) when rich's layout could differ: no rows,
    a cell rich would interpret or measure differently, a table narrower than its title
    (rich wraps the title) or wider than the console."""
    if not rows:
        return False
    cells = [(row["run_id"], str(row["blocks"]), str(row["withheld"]), short(row["sha256"], 16)) for row in rows]
    widths = [len(name) for name, _ in REPLAY_COLUMNS]
    for line in cells:
        for i, cell in enumerate(line):
            if not (isinstance(cell, str) and (i == 3 or _plain(cell))):
                return False
            widths[i] = max(widths[i], len(cell))
    total = sum(widths) + 3 * len(widths) + 1
    if total < len(REPLAY_TITLE) or total > (160 if not out.isatty() else console(out).width):
        return False

    def framed(values: tuple[str, ...], bar: str) -> str:
        shown = [v.rjust(w) if justify == "right" else v.ljust(w)
                 for v, w, (_, justify) in zip(values, widths, REPLAY_COLUMNS, strict=True)]
        return f"{bar} " + f" {bar} ".join(shown) + f" {bar}"

    def rule(left: str, fill: str, join: str, right: str) -> str:
        return left + join.join(fill * (w + 2) for w in widths) + right

    write = out.write
    write(REPLAY_TITLE.ljust(total) + "\n")
    write(rule("┏", "━", "┳", "┓") + "\n")
    write(framed(tuple(name for name, _ in REPLAY_COLUMNS), "┃") + "\n")
    write(rule("┡", "━", "╇", "┩") + "\n")
    for line in cells:
        write(framed(line, "│") + "\n")
    write(rule("└", "─", "┴", "┘") + "\n")
    return True


def replay_table(out: TextIO, rows: Iterable[Mapping[str, Any]], verify: Mapping[str, Any] | None,
                 bodies: Mapping[str, list[Mapping[str, Any]]] | None) -> None:
    if verify is None and not bodies and not out.isatty():
        rows = list(rows)
        if _plain_replay_table(out, rows):
            return
    c = console(out)
    table = Table(title=REPLAY_TITLE, title_justify="left")
    for name in ("run", "blocks", "withheld", "view sha256"):
        table.add_column(name, justify="right" if name in ("blocks", "withheld") else "left")
    if verify is not None:
        for name in ("replays", "aggregate", "integrity", "verified blocks"):
            table.add_column(name)
    for row in rows:
        cells: list[Any] = [row["run_id"], str(row["blocks"]), str(row["withheld"]), short(row["sha256"], 16)]
        if verify is not None:
            integrity = row["integrity"]
            cells += [_ok(row["replays_agree"]), _ok(row["aggregate_agrees"]), _ok(integrity["ok"]),
                      f"{integrity['blocks_verified']}/{integrity['blocks']}"]
        table.add_row(*cells)
    c.print(table)
    if bodies:
        for run_id, blocks in bodies.items():
            c.rule(f"bodies of {run_id}")
            for block in blocks:
                c.print(Text(f"[{block['delivery_ordinal']}] {block['block_id']} r{block['revision']}", style="bold"))
                c.print(Text(block["content"]["markdown"]))
    if verify is None:
        return
    failures = verify["failures"]
    if failures:
        bad = Table(title="Integrity failures", title_justify="left", title_style="bold red")
        for name in ("run", "block", "rev", "log pos", "reason", "detail"):
            bad.add_column(name)
        for f in failures:
            bad.add_row(f["run_id"], str(f["block_id"] or "—"), str(f["revision"] or "—"),
                        str(f["log_position"] or "—"), Text(f["reason"], style="red"), f["detail"])
        c.print(bad)
    for problem in verify["aggregate_disagreements"]:
        c.print(Text(f"run {problem['run_id']}: aggregate disagrees: {problem['why']}", style="red"))
    for run_id in verify["mismatched_runs"]:
        c.print(Text(f"run {run_id}: two replays of the same log gave different views", style="red"))
    verdict = (f"{verify['runs']} runs, {verify['blocks_verified']} of {verify['blocks']} blocks verify, "
               f"{verify['revisions']} revisions checked, {verify['seals_opened']} seals opened, "
               f"{verify['shredded']} shredded")
    if verify["verified"]:
        c.print(Text(f"VERIFIED: {verdict}", style="bold green"))
    else:
        failed = sorted({f["run_id"] for f in failures} | set(verify["mismatched_runs"])
                        | {d["run_id"] for d in verify["aggregate_disagreements"]})
        c.print(Text(f"VERIFICATION FAILED in {len(failed)} run(s) ({', '.join(failed)}): {verdict}",
                     style="bold red"))


# ------------------------------------------------------------------------------------ recover

def recover_table(out: TextIO, document: Mapping[str, Any]) -> None:
    c = console(out)
    journal = document["journal"]
    c.print(Text(f"journal: {journal['availability']}" + (f" — {journal['reason']}" if journal["reason"] else "")))
    announced = document["announcements"]
    if not announced["available"]:
        c.print(Text(f"save-unknowns on Kafka: not read — {announced['reason']}", style="yellow"))
    summary = Table(title="Recovery report (R7)", title_justify="left")
    for name in ("run", "ended", "committed", "unjournaled", "receipts missing", "save unresolved", "previews lost",
                 "defects", "reconciled"):
        summary.add_column(name, justify="left" if name in ("run", "ended") else "right")
    details: list[tuple[str, str, str, str]] = []
    for report in document["runs"]:
        run_id = report["run_id"]
        unjournaled = report["committed_unjournaled"]
        blocks = unjournaled["blocks"]
        for b in blocks or ():
            details.append((run_id, "committed, not journaled", f"{b['block_id']} r{b['revision']}",
                            f"receipt {short(b['receipt_id'], 13)} {b['status']}"
                            + (" · reconciled" if b["reconciled"] else "")))
        for e in report["missing_tool_receipts"]["effects"]:
            details.append((run_id, f"effect settled, receipt {e['receipt']}", e["candidate_id"],
                            ", ".join(f"{x['block_id']} r{x['revision']}" for x in e["effects"])
                            + (" · reconciled" if all(x["reconciled"] for x in e["effects"]) else "")))
        for u in report["save_unknowns"]["unresolved"]:
            details.append((run_id, f"{u['fact']}, unresolved", u["candidate_id"],
                            u["read_back"] + (" · reconciled" if u["reconciled"] else "")))
        for p in report["previews_never_committed"]["previews"]:
            details.append((run_id, "previewed, never committed", p["candidate_id"],
                            f"{p['block_id']} settlement: {p['settlement'] or 'none'}"
                            + (" · reconciled" if p["reconciled"] else "")))
        for d in report["defects"]:
            details.append((run_id, f"defect: {d['reason']}", str(d["block_id"] or "—"), d["detail"]))
        summary.add_row(
            run_id, log_lifecycle(report.get("log_lifecycle")), str(len(report["committed_blocks"])),
            "?" if blocks is None else str(len(blocks)),
            str(len(report["missing_tool_receipts"]["effects"])),
            str(len(report["save_unknowns"]["unresolved"])),
            str(len(report["previews_never_committed"]["previews"])),
            str(len(report["defects"])), str(len(report["reconciled"])))
    c.print(summary)
    if details:
        table = Table(title="Findings", title_justify="left")
        for name in ("run", "finding", "block / candidate", "detail"):
            table.add_column(name)
        for row in details:
            table.add_row(*row)
        c.print(table)
    else:
        c.print(Text("nothing to reconcile", style="green"))
    if document["apply"]:
        appended = [a for a in document["applied"] or () if a["appended"]]
        failed = [a for a in document["applied"] or () if a["error"]]
        recorded = sum(len(r["reconciled"]) for r in document["runs"])
        c.print(Text(f"--apply: {len(appended)} reconciliation fact(s) appended now; {recorded} recorded in all"
                     + (f"; {len(failed)} not appended ({failed[0]['error']})" if failed else "")
                     + " (no model work re-run, no block changed)", style="bold"))


def log_lifecycle(life: Mapping[str, Any] | None) -> str:
    """What the run's own log holds of its lifecycle, in a few words (``—``: not ended)."""
    if not life:
        return "—"
    words = [life["ended"] or "not ended"]
    if life.get("lapsed"):
        words.append(f"lease lapsed ({life['lapsed']})")
    if life.get("conversation_deleted"):
        words.append("conversation deleted")
    return ", ".join(words)


# ------------------------------------------------------------------------------------ inspect

MARK_LABELS = {
    "committed_not_journaled": "committed, not journaled",
    "journaled_not_committed": "journaled, not committed",
    "journal_hash_differs": "journal saw another body",
    "sent_not_committed": "sent, not committed",
    "withheld": "withheld (integrity)",
    "received_not_sent": "received, not sent",
    "rendered_not_received": "rendered, not received",
}


def inspect_table(out: TextIO, document: Mapping[str, Any]) -> None:
    c = console(out)
    life = document["lifecycle"]
    c.print(Text(f"run {document['run_id']}  account {document['account_id'] or '—'}  "
                 f"log version {document['log_version'] if document['log_version'] is not None else '—'}",
                 style="bold"))
    if life["available"]:
        states = " → ".join(f"{t['state']} {clock(t['at'])}" for t in life["transitions"]) or "no transitions"
        c.print(Text(f"journal lifecycle: {states}" + (f"  outcome {life['outcome']}" if life["outcome"] else "")
                     + (f"  closed: lease lapsed ({life['lapsed']})" if life.get("lapsed") else "")
                     + (f"  stop requested {clock(life['stop_requested'])}" if life.get("stop_requested") else "")
                     + ("" if life["found"] else "  (the journal has no record of this run)")))
        if life.get("unread"):
            c.print(Text(f"journal events this code has no row for: {', '.join(life['unread'])}", style="yellow"))
        for refusal in life.get("refusals", []):
            c.print(Text(f"journal refused {refusal['message_type']} {clock(refusal['at'])}: {refusal['code']}"
                         + (f" ({refusal['detail']})" if refusal["detail"] else ""), style="yellow"))
    else:
        c.print(Text(f"journal: not consulted — {life['note']}", style="yellow"))
    if document.get("log_lifecycle") is not None:
        c.print(Text(f"log lifecycle: {log_lifecycle(document['log_lifecycle'])}"))
    sources = document["sources"]
    if sources.get("observations_unplaced"):
        c.print(Text(f"announcements without a stage: {', '.join(sources['observations_unplaced'])}",
                     style="yellow"))
    if not sources["observations"]:
        c.print(Text(f"Kafka observations: not read — {sources['observations_note']}", style="yellow"))
    table = Table(title="Timeline per block revision", title_justify="left")
    for name in ("#", "block", "rev", "proposed", "previewed", "committed", "withdrawn", "sent (frames)",
                 "received", "rendered", "journal", "disagreement"):
        table.add_column(name)
    for block in document["blocks"]:
        for row in block["revisions"]:
            committed = row["committed"]
            sent = row["sent"]
            journal = row["journaled"]
            table.add_row(
                str(block["delivery_ordinal"]), short(block["block_id"], 14), str(row["revision"]),
                clock(row["proposed"]["at"]),
                clock(row["previewed"]["at"]) if row["previewed"] else "—",
                f"{clock(committed['at'])} @{committed['log_position']}"
                + ("" if committed["integrity"] == "ok" else f" {committed['integrity']}"),
                f"{clock(row['withdrawn']['at'])} {row['withdrawn']['cause']}" if row["withdrawn"] else "—",
                (f"{clock(sent['at']) if sent['at'] else 'not yet'} #{','.join(map(str, sent['frame_ids']))}"
                 if sent else "—"),
                clock(row["received"]["at"]) if row["received"] else "—",
                clock(row["rendered"]["at"]) if row["rendered"] else "—",
                "?" if journal is None else (clock(journal[0]["at"]) if journal else "—"),
                Text(", ".join(MARK_LABELS.get(m, m) for m in row["marks"]), style="bold red") if row["marks"]
                else Text("agree", style="green"),
            )
    c.print(table)
    if document["not_committed"]:
        other = Table(title="Candidates without a commit", title_justify="left")
        for name in ("candidate", "outcome", "reason", "block"):
            other.add_column(name)
        for item in document["not_committed"]:
            other.add_row(item["candidate_id"] or "—", item["outcome"], str(item["reason"] or "—"),
                          str(item["block_id"] or "—"))
        c.print(other)
    stray = [d for d in document["disagreements"] if d["kind"] in ("journaled_not_committed", "sent_not_committed")]
    for d in stray:
        c.print(Text(f"{MARK_LABELS[d['kind']]}: {d['block_id']} r{d['revision']} — {d['detail']}", style="red"))
    seen_table(c, document.get("seen"), document["sources"])
    count = len(document["disagreements"])
    c.print(Text(f"{count} disagreement(s)" if count else "log, journal and delivery agree",
                 style="bold red" if count else "bold green"))


def seen_table(c: Console, seen: Mapping[str, Any] | None, sources: Mapping[str, Any]) -> None:
    """D7: for each withdrawn block revision, the clients that rendered it and whether each
    received the withdrawal (Delivery's report; ids and times only)."""
    if seen is None:
        if sources.get("frames"):
            return
        c.print(Text("who saw withdrawn blocks: not known — Delivery's store was not read", style="yellow"))
        return
    if not seen["withdrawals"]:
        return
    table = Table(title="Withdrawn blocks: who saw them", title_justify="left")
    for name in ("block", "rev", "cause", "withdrawn", "told", "client", "rendered", "received the withdrawal"):
        table.add_column(name)
    for w in seen["withdrawals"]:
        told = w["told"]
        how = f"notice {told['notice_id']}" if told["via"] == "notice" else f"frame {told['frame_id']}"
        head = (short(w["block_id"], 14), str(w["revision"] if w["revision"] is not None else "?"), w["cause"],
                clock(w["withdrawn_at"]), how)
        if not w["seen_by"]:
            table.add_row(*head, "—", "no client reported it rendered", "—")
        for s in w["seen_by"]:
            received = s["received_withdrawal"]
            table.add_row(*head, short(s["client_id"] or "(unnamed)", 22),
                          f"r{s['revision'] if s['revision'] is not None else '?'} {clock(s['rendered_at'])}",
                          Text("unknown", style="yellow") if received is None
                          else Text(f"yes {clock(s['received_at'])}", style="green") if received
                          else Text("not yet", style="bold red"))
    c.print(table)
    outstanding, unknown = seen["outstanding"], seen.get("unknown", 0)
    if outstanding:
        c.print(Text(f"{outstanding} sighting(s) of a withdrawn block not yet told", style="bold red"))
    elif unknown:
        c.print(Text(f"{unknown} sighting(s) by a client that never named itself: whether it was told is unknown",
                     style="yellow"))
    else:
        c.print(Text("every client that rendered a withdrawn block received its withdrawal", style="green"))


def tracked_pairs(items: Iterable[T], total: int | None, err: TextIO, label: str) -> Iterator[T]:
    """Iterate ``items`` (``total`` of them, ``None``: not known yet) with a progress bar on ``err``."""
    with progress(err, label, total) as advance:
        for item in items:
            yield item
            advance()


def conversation_table(out: TextIO, document: Mapping[str, Any]) -> None:
    """X12: a conversation's questions, their policies and how each ended, then its facts in order."""
    c = console(out)
    c.print(Text(f"conversation {document['conversation_id']}  account {document['account_id'] or '—'}"
                 + (f"  deleted {clock(document['deleted'])}" if document["deleted"] else ""), style="bold"))
    running, queued = ", ".join(document["running"]) or "—", ", ".join(document["queued"]) or "—"
    c.print(Text(f"running: {running}   queued: {queued}"))
    table = Table(title="Questions", title_justify="left")
    for name in ("run", "message", "policy", "decision", "started", "interrupted by", "end", "reason"):
        table.add_column(name)
    for q in document["questions"]:
        decision = q["decision"] or "—"
        if q["into"]:
            decision += f" → {q['into']}"
        table.add_row(q["run_id"], q["message_id"], q["policy"] or "—", decision,
                      clock(q["started_at"]) if q["started_at"] else "—", q["interrupted_by"] or "—",
                      q["end"] or "—", q["reason"] or "—")
    c.print(table)
    facts = Table(title="Facts", title_justify="left")
    for name in ("#", "at", "fact", "run", "detail"):
        facts.add_column(name)
    for f in document["facts"]:
        facts.add_row(str(f["sequence"]), clock(f["at"]), f["fact"], f["run_id"], f["detail"] or "")
    c.print(facts)
    for refusal in document["refusals"]:
        c.print(Text(f"journal refused {refusal['message_type']} {clock(refusal['at'])}: {refusal['code']}"
                     + (f" ({refusal['detail']})" if refusal["detail"] else ""), style="yellow"))
    if document["unaccounted"]:
        unaccounted = ", ".join(document["unaccounted"])
        c.print(Text(f"questions without an end, neither running nor queued: {unaccounted}", style="red"))
    if document["unread"]:
        c.print(Text(f"conversation events this code has no row for: {', '.join(document['unread'])}", style="yellow"))
