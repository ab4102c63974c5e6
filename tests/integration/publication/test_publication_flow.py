"""Publication end to end over real Kafka and PostgreSQL: the ``publication`` consumer
and the relay run as real processes (one pair per module); every test produces to
``imprint.runtime.v1``/``imprint.sources.v1`` and reads what came out on
``imprint.publication.v1`` and what was committed in the Publication log.

Negative facts ("nothing was published for X") are read after a *marker* candidate
sent behind X on the same partition has come out, so they are read at a point where
X has certainly been processed and relayed."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from imprint.contracts.publication import Receipt
from imprint.contracts.runtime import AnswerPart, AnswerText, ModelFrame, ModelReasoning, RouterResult
from imprint.contracts.topics import Topic
from imprint.publication.capacity import TRUNCATION_MARKER
from imprint.publication.tokens import token
from imprint.recovery.integrity import body_sha256
from services.common.settings import Settings
from tests.integration.publication.pubsupport import (
    admitted,
    count,
    dedupe,
    event_names,
    granted,
    has_published,
    numeric,
    of_type,
    part,
    published,
    read_run,
    revoked,
    run_events,
    send,
    wait_run,
)
from tests.support.kafka import read_topic
from tests.support.stack import Stack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def block_of(values: list[dict], candidate_id: str) -> dict:
    (found,) = [v["block"] for v in dedupe(published(values)) if v["block"]["candidate_id"] == candidate_id]
    return found


def receipt(value: object) -> Receipt:
    return value if isinstance(value, Receipt) else Receipt.model_validate(value)


def candidates_in(values: list[dict]) -> set[str]:
    out = set()
    for v in values:
        if "candidate_id" in v:
            out.add(v["candidate_id"])
        if "block" in v:
            out.add(v["block"]["candidate_id"])
    return out


# ----------------------------------------------------------------------------- P11


@pytest.mark.rule("P11")
def test_an_exact_duplicate_reuses_the_receipt_and_is_rechecked_after_revocation(
    stack: Stack, module_settings: Settings
) -> None:
    s, run, src = module_settings, "run-dup", "src-dup-annual"
    body = f"Revenue grew  8% in 2024 {token('cite', src)}.\n"  # two spaces: whitespace counts
    send(s, admitted(run), granted(run, src), part(run, "d-call-1", body))
    first = block_of(wait_run(s, run, has_published("Revenue")), "tool:d-call-1")

    send(s, part(run, "d-call-2", body),                              # same body, new tool call
         part(run, "d-call-3", body.replace("  ", " ")),               # similar is not a duplicate
         part(run, "d-call-4", body, replaces=first["block_id"]),      # identical "modification"
         part(run, "d-call-5", "marker one"))
    values = wait_run(s, run, has_published("marker one"))

    unchanged = of_type(values, "answer.unchanged")
    assert {u["candidate_id"] for u in unchanged} == {"tool:d-call-2", "tool:d-call-4"}
    for u in unchanged:
        assert (u["block_id"], u["revision"]) == (first["block_id"], 1)
        assert u["receipt"] == first["receipt"], "the original receipt is reused"
    assert [b["block"]["candidate_id"] for b in dedupe(published(values))] == [
        "tool:d-call-1", "tool:d-call-3", "tool:d-call-5"], "no new revision, no second answer.published"
    assert {v["block"]["candidate_id"] for v in of_type(values, "answer.preview")}.isdisjoint(
        {"tool:d-call-2", "tool:d-call-4"}), "a duplicate is not even previewed"
    logged = read_run(s, run)
    record = logged.block(first["block_id"])
    assert record is not None and record.revision == 1
    assert record.receipt is not None and receipt(record.receipt) == receipt(first["receipt"])
    assert logged.run_modifications == 0 and logged.consumed == {} and logged.block_modifications == {}
    for call in ("d-call-2", "d-call-4"):
        outcome = logged.settled(f"tool:{call}")
        assert outcome is not None and [b.kind for b in outcome.blocks] == ["unchanged"]
        assert outcome.blocks[0].receipt == receipt(first["receipt"])

    # The cited source is revoked: the identical body is checked again, not waved through.
    send(s, revoked(src))
    wait_run(s, run, count("answer.withdrawn", 2))
    send(s, part(run, "d-call-6", body), part(run, "d-call-7", "marker two"))
    values = wait_run(s, run, has_published("marker two"))
    assert {w["block_id"] for w in of_type(values, "answer.withdrawn")} == {
        first["block_id"], block_of(values, "tool:d-call-3")["block_id"]}
    assert "tool:d-call-6" not in {u["candidate_id"] for u in of_type(values, "answer.unchanged")}
    rejected = [r for r in of_type(values, "answer.rejected") if r["candidate_id"] == "tool:d-call-6"]
    assert [r["reason"] for r in rejected] == ["unauthorized_source"]
    assert "tool:d-call-6" not in {b["block"]["candidate_id"] for b in published(values)}
    outcome = read_run(s, run).settled("tool:d-call-6")
    assert outcome is not None and [b.kind for b in outcome.blocks] == ["rejected"]


# ----------------------------------------------------------------------------- P12


@pytest.mark.rule("P12")
def test_an_invalid_replaces_is_rejected_as_such_and_never_becomes_a_new_block(
    stack: Stack, module_settings: Settings
) -> None:
    s, run, other, src = module_settings, "run-target", "run-target-other", "src-target-memo"
    send(s, admitted(run), admitted(other), granted(run, src),
         part(other, "t-other-1", "Another run's block."),
         part(run, "t-call-1", "The target body."),
         part(run, "t-call-2", f"Cites {token('cite', src)}."))
    values = wait_run(s, run, lambda vs: len(dedupe(published(vs))) >= 2)
    target, cited = block_of(values, "tool:t-call-1"), block_of(values, "tool:t-call-2")
    foreign = block_of(wait_run(s, other, has_published("Another")), "tool:t-other-1")
    send(s, revoked(src))
    wait_run(s, run, count("answer.withdrawn", 1))

    invalid = {
        "tool:t-bad-unknown": "blk_00000000000000000000000000000000",
        "tool:t-bad-foreign": foreign["block_id"],
        "tool:t-bad-withdrawn": cited["block_id"],
        "tool:t-bad-typo": target["block_id"][:-1],
    }
    send(s, *(part(run, cid.removeprefix("tool:"), "Rewritten body.", replaces=replaces)
              for cid, replaces in invalid.items()),
         part(run, "t-bad-number", "Rewritten body.", replaces=42),
         part(run, "t-marker", "marker target"))
    values = wait_run(s, run, has_published("marker target"))

    rejected = {r["candidate_id"]: r for r in of_type(values, "answer.revision_rejected")}
    assert set(rejected) == {*invalid, "tool:t-bad-number"}
    assert {r["reason"] for r in rejected.values()} == {"invalid_target"}
    assert {cid: rejected[cid]["target_block_id"] for cid in invalid} == invalid
    assert rejected["tool:t-bad-number"]["target_block_id"] == "42"
    attempts = set(rejected)
    assert not attempts & {v["block"]["candidate_id"] for v in values if "block" in v}, \
        "never previewed or published as a new block"
    logged = read_run(s, run)
    assert {b.candidate_id for b in map(logged.block, logged.blocks)} == {"tool:t-call-1", "tool:t-call-2", "tool:t-marker"}
    kept = logged.block(target["block_id"])
    assert kept is not None and kept.revision == 1 and kept.body_sha256 == body_sha256("The target body.")
    assert logged.run_modifications == 0
    foreign_kept = read_run(s, other).block(foreign["block_id"])
    assert foreign_kept is not None and foreign_kept.revision == 1
    assert foreign_kept.body_sha256 == body_sha256("Another run's block.")
    assert "answer.revision_rejected" not in {v["type"] for v in wait_run(s, other, has_published("Another"))}


# ----------------------------------------------------------------------------- P13


@pytest.mark.rule("P13")
def test_modification_quota_per_block_and_per_run(stack: Stack, module_settings: Settings) -> None:
    s, run = module_settings, "run-quota"
    send(s, admitted(run), *(part(run, f"q-new-{i}", f"Block {i} v1") for i in range(1, 6)))
    values = wait_run(s, run, lambda vs: len(dedupe(published(vs))) >= 5)
    ids = {i: block_of(values, f"tool:q-new-{i}")["block_id"] for i in range(1, 6)}

    edits = [
        part(run, "q-1-v2", "Block 1 v2", replaces=ids[1]),
        part(run, "q-1-v3", "Block 1 v3", replaces=ids[1]),
        part(run, "q-1-v4", "Block 1 v4", replaces=ids[1]),   # third modification of block 1
        *(part(run, f"q-{i}-v{v}", f"Block {i} v{v}", replaces=ids[i]) for i in (2, 3, 4) for v in (2, 3)),
        part(run, "q-5-v2", "Block 5 v2", replaces=ids[5]),   # ninth modification of the run
        part(run, "q-new-6", "Block 6 v1 (new blocks are not limited)"),
    ]
    send(s, *edits)
    values = wait_run(s, run, has_published("Block 6"))

    rejected = {r["candidate_id"]: r for r in of_type(values, "answer.revision_rejected")}
    assert set(rejected) == {"tool:q-1-v4", "tool:q-5-v2"}
    assert {r["reason"] for r in rejected.values()} == {"quota_exceeded"}
    assert rejected["tool:q-1-v4"]["target_block_id"] == ids[1]
    assert rejected["tool:q-5-v2"]["target_block_id"] == ids[5]
    revisions = sorted((b["block"]["block_id"], b["block"]["revision"]) for b in dedupe(published(values)))
    assert [r for b, r in revisions if b == ids[1]] == [1, 2, 3]
    assert [r for b, r in revisions if b == ids[5]] == [1]
    assert "answer.save_failed" not in {v["type"] for v in values}
    logged = read_run(s, run)
    assert logged.block(ids[1]).body_sha256 == body_sha256("Block 1 v3"), "earlier content stays"  # type: ignore[union-attr]
    assert logged.block(ids[5]).body_sha256 == body_sha256("Block 5 v1")  # type: ignore[union-attr]
    assert logged.run_modifications == 8
    assert logged.block_modifications == {ids[1]: 2, ids[2]: 2, ids[3]: 2, ids[4]: 2}
    assert len(logged.live_blocks()) == 6, "the run goes on: a new block after the quota is spent"


# ----------------------------------------------------------------------------- P21


@pytest.mark.rule("P21")
def test_revocation_withdraws_blocks_that_cite_only_through_references_transitively(
    stack: Stack, module_settings: Settings
) -> None:
    s, run, src = module_settings, "run-ref", "src-ref-study"
    send(s, admitted(run), granted(run, src), part(run, "r-a", f"The study found X {token('cite', src)}."))
    a = block_of(wait_run(s, run, has_published("The study")), "tool:r-a")
    send(s, part(run, "r-b", f"Building on {token('ref', a['block_id'])}, Y follows."))
    b = block_of(wait_run(s, run, has_published("Building on")), "tool:r-b")
    send(s, part(run, "r-c", f"And from {token('ref', b['block_id'])}, Z."),
         part(run, "r-e", "Explicitly depends on the first block.", depends_on=[a["block_id"]]),
         part(run, "r-d", "An independent remark."))
    values = wait_run(s, run, has_published("An independent"))
    c, e, d = (block_of(values, f"tool:r-{x}") for x in "ced")
    assert b["citations"] == [] and c["citations"] == [], "B and C cite nothing directly"
    assert b["depends_on"] == [a["block_id"]] and c["depends_on"] == [b["block_id"]]

    send(s, revoked(src))
    values = wait_run(s, run, count("answer.withdrawn", 4))
    withdrawn = dedupe(of_type(values, "answer.withdrawn"))
    assert sorted(w["block_id"] for w in withdrawn) == sorted(x["block_id"] for x in (a, b, c, e))
    assert {(w["cause"], w["source_id"]) for w in withdrawn} == {("source_revoked", src)}
    logged = read_run(s, run)
    assert [r.block_id for r in logged.live_blocks()] == [d["block_id"]]
    for x in (a, b, c, e):  # audit keeps the committed history
        record = logged.block(x["block_id"])
        assert record is not None and record.withdrawn is not None
        assert record.receipt is not None and receipt(record.receipt) == receipt(x["receipt"])
    assert event_names(run_events(s, run)).count("BlockWithdrawn") == 4


# ----------------------------------------------------------------------------- P5


@pytest.mark.rule("P5")
def test_the_60000_character_cut_never_splits_a_token_or_a_rendered_value(
    stack: Stack, module_settings: Settings
) -> None:
    s, run, src = module_settings, "run-capacity", "src-cap"
    limit = s.display_char_limit
    budget = limit - len(TRUNCATION_MARKER)
    cite = token("cite", src)
    straddling = "a" * (budget - 5) + cite + " and a tail " * 50           # the cut lands inside the token
    exact = "b" * (budget - len(cite)) + cite + " more text " * 50          # the token ends right at the cut
    number = "c" * (budget - 3) + token("num", "h-share") + " trailing " * 50  # the rendered value straddles
    send(s, admitted(run), granted(run, src), numeric(run, "h-share", "12.5", src),
         part(run, "cap-1", blocks=[{"markdown": straddling}, {"markdown": exact}, {"markdown": number}]))
    values = wait_run(s, run, lambda vs: len(dedupe(published(vs))) >= 3)
    by_index = {b["block"]["block_id"]: b["block"] for b in dedupe(published(values))}
    logged = read_run(s, run)
    outcome = logged.settled("tool:cap-1")
    assert outcome is not None and [o.kind for o in outcome.blocks] == ["committed"] * 3
    blocks = [by_index[o.block_id] for o in outcome.blocks]  # type: ignore[index]

    for block in blocks:
        markdown = block["content"]["markdown"]
        assert block["truncated"] is True and "truncated" in block["hints"]
        assert markdown.endswith(TRUNCATION_MARKER) and len(markdown) <= limit
    dropped, kept, value = (b["content"]["markdown"] for b in blocks)
    assert dropped == "a" * (budget - 5) + TRUNCATION_MARKER, "the token is dropped whole"
    assert "[[" not in dropped and blocks[0]["citations"] == []
    assert kept == "b" * (budget - len(cite)) + cite + TRUNCATION_MARKER, "the token is kept intact"
    assert blocks[1]["citations"] == [{"source_id": src, "status": "valid"}]
    assert value == "c" * (budget - 3) + TRUNCATION_MARKER and blocks[2]["numbers"] == []
    assert "12.5" not in value


# ----------------------------------------------------------------------------- P2


@pytest.mark.rule("P2")
def test_non_answer_frames_never_reach_the_publication_topic_and_are_refused_in_the_log(
    stack: Stack, module_settings: Settings
) -> None:
    s, run = module_settings, "run-frames"
    secret = "The final answer is 42 (looks like an answer)"
    send(s, admitted(run),
         ModelFrame(run_id=run, payload={"choices": [{"delta": {"content": secret}}]}),
         ModelReasoning(run_id=run, text=secret),
         RouterResult(run_id=run, route="answer", payload={"markdown": secret}),
         AnswerPart(run_id=run, turn_id="t", tool_call_id="f-open", sealed=False, arguments={"markdown": secret}),
         AnswerPart(run_id=run, turn_id="t", tool_call_id=None, sealed=True, arguments={"markdown": secret}),
         AnswerPart(run_id=run, turn_id="t", tool_call_id="f-broken", sealed=True,
                    arguments='{"markdown": "' + secret + '"'),
         part(run, "f-marker", "marker frames"))
    values = wait_run(s, run, has_published("marker frames"))

    assert {v["type"] for v in values} <= {"answer.preview", "answer.published"}
    assert candidates_in(values) == {"tool:f-marker"}, "only the marker produced anything"
    assert secret not in json.dumps(values)
    events = run_events(s, run)
    refusals = [e for e in events if type(e).__name__ == "CandidateRefused"]
    assert [(e.message_type, e.reason) for e in refusals] == [
        ("model.frame", "not_an_answer"),
        ("model.reasoning", "not_an_answer"),
        ("router.result", "not_an_answer"),
        ("answer.part", "unsealed_arguments"),
        ("answer.part", "missing_tool_identity"),
        ("answer.part", "unparseable_arguments"),
    ]
    assert all(secret not in e.detail for e in refusals), "the refusal records why, not the body"
    logged = read_run(s, run)
    assert logged.refusals == 6 and set(logged.candidates) == {"tool:f-marker"}


# ----------------------------------------------------------------------------- X1


@pytest.mark.rule("X1")
def test_a_candidate_for_a_run_never_admitted_is_refused_never_committed_or_published(
    stack: Stack, module_settings: Settings
) -> None:
    s, stray, admitted_run = module_settings, "run-never-admitted", "run-admitted-after-stray"
    send(s, part(stray, "x1-text", "An answer for a run nobody admitted."),
         AnswerText(run_id=stray, turn_id="t", segment=0, text="Plain text for the same run."))
    send(s, admitted(admitted_run), part(admitted_run, "x1-marker", "marker x1"))
    wait_run(s, admitted_run, has_published("marker x1"))
    values = asyncio.run(read_topic(s, Topic.PUBLICATION, until=lambda vs: any(
        v["run_id"] == admitted_run and v["type"] == "answer.published" for v in vs)))
    assert [v for v in values if v["run_id"] == stray] == [], "nothing previewed or published for the stray run"
    deadline = time.monotonic() + 20  # the stray run may sit on another partition than the marker
    while True:
        events = run_events(s, stray)
        refusals = [(e.message_type, e.reason) for e in events if type(e).__name__ == "CandidateRefused"]
        if len(refusals) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert refusals == [("answer.part", "run_not_admitted"), ("answer.text", "run_not_admitted")]
    assert not [e for e in events if type(e).__name__ == "BlockRevisionCommitted"]
