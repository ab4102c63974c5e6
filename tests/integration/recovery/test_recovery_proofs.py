"""R4 and R1 with commit proofs: each stored commit carries a keyed MAC over its block as
served (``imprint.publication.proof``). A reader that finds it intact serves the record
without examining it field by field; every other record is examined in full. A proof
only spares work: the views, their hashes and every verdict are what the full
examination gives, on a log with proofs and on the same log without them (as a release
before proofs wrote it). One test body per store backend."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import pytest

from imprint.contracts.publication import CommittedBlock
from imprint.recovery import RunLedger, answer_view, hashed_answer_view, view_hash
from imprint.recovery.integrity import served
from services.common.settings import Settings
from services.publication.application import open_log
from services.publication.sealing import PROOF
from services.recovery.log_reader import iter_ledgers
from tests.integration.recovery.recovery_support import (
    ACCOUNT,
    PRIVATE_OWN,
    PUBLIC,
    admitted,
    feeding,
    granted,
    log_rows,
    numeric,
    overwrite_state,
    part,
    registered,
    replay_lines,
    stored_state,
    text,
)
from imprint.contracts.topics import Topic

pytestmark = [pytest.mark.integration, pytest.mark.rule("R4"), pytest.mark.rule("R1")]


def write_runs(settings: Settings, *run_ids: str) -> None:
    """Runs with cited, numbered and plain blocks, one of them revised."""
    with feeding(settings) as (app, feed):
        feed(registered(), registered(PRIVATE_OWN, "private", ACCOUNT), topic=Topic.SOURCES)
        for run_id in run_ids:
            feed(admitted(run_id), granted(run_id), granted(run_id, PRIVATE_OWN, "private", ACCOUNT),
                 numeric(run_id, "12.5", 1))
            feed(part(run_id, "call-a", f"A cites [[cite:{PUBLIC}]] — “quoted” ✓"),
                 part(run_id, "call-b", "B weighs [[num:num-weight]]"),
                 text(run_id, f"C cites [[cite:{PRIVATE_OWN}]] and [[cite:src:public:unknown]]"))
            run = app.run(run_id)
            assert run is not None
            first = next(r.block_id for r in run.live_blocks() if r.candidate_id == "tool:call-a")
            feed(part(run_id, "call-a2", "A, revised", replaces=first))


def ledgers(settings: Settings, *run_ids: str) -> dict[str, RunLedger]:
    with closing(open_log(settings)) as app:
        return {ledger.run_id: ledger for ledger, _ in iter_ledgers(app, run_ids, audit=False) if ledger is not None}


def unproven(ledger: RunLedger) -> RunLedger:
    """The same ledger as a reader that ignores proofs folds it."""
    copy = dataclasses.replace(ledger, blocks={})
    for block_id, history in ledger.blocks.items():
        copy.blocks[block_id] = dataclasses.replace(
            history, revisions=[dataclasses.replace(r, proven=None) for r in history.revisions])
    return copy


def commits(settings: Settings, run_id: str) -> Iterator[tuple[int, dict[str, Any]]]:
    with log_rows(settings) as (cursor, events, q):
        cursor.execute(q(f"SELECT originator_version, state FROM {events} ORDER BY originator_version"))
        rows = [(int(row["originator_version"]), json.loads(bytes(row["state"]))) for row in cursor.fetchall()]
    for version, state in rows:
        if state.get("run_id") == run_id and "block" in state:
            yield version, state


def test_every_commit_proves_itself_and_is_served_as_the_full_examination_serves_it(isolated: Settings) -> None:
    write_runs(isolated, "run-1", "run-2")
    found = ledgers(isolated, "run-1", "run-2")
    revisions = [r for ledger in found.values() for h in ledger.blocks.values() for r in h.revisions]
    assert len(revisions) == 8 and all(r.proven is not None for r in revisions)
    for revision in revisions:
        fast, full = served(revision), served(dataclasses.replace(revision, proven=None))
        assert fast == full and fast[1] is not None
        assert CommittedBlock.model_validate(fast[1]).model_dump(mode="json") == fast[1]
    for ledger in found.values():
        view, sha = hashed_answer_view(ledger)
        assert view == answer_view(unproven(ledger)) and sha == view_hash(answer_view(unproven(ledger)))
        assert len(view["blocks"]) == 3 and not view["withheld"]


def test_a_log_without_proofs_replays_to_the_same_bytes(isolated: Settings) -> None:
    """A log as a release before proofs wrote it (no proof on any commit) replays, and
    verifies, to exactly the lines the same log with its proofs gives."""
    write_runs(isolated, "run-1", "run-2")
    with_proofs = replay_lines(isolated), replay_lines(isolated, verify=True)
    for run_id in ("run-1", "run-2"):
        for version, state in list(commits(isolated, run_id)):
            assert set(state[PROOF]) == {"__key__", "__mac__"}  # a MAC and its key's name: no body text
            del state[PROOF]
            overwrite_state(isolated, run_id, version, json.dumps(state).encode())
    assert all(r.proven is None for ledger in ledgers(isolated, "run-1", "run-2").values()
               for h in ledger.blocks.values() for r in h.revisions)
    assert (replay_lines(isolated), replay_lines(isolated, verify=True)) == with_proofs
    assert with_proofs[0][0] == with_proofs[1][0] == 0


def test_a_changed_or_moved_record_fails_its_proof_and_is_examined_in_full(isolated: Settings) -> None:
    write_runs(isolated, "run-1", "run-2")
    (first, state), (second, other), *_ = commits(isolated, "run-1")
    truncated = {**state, "block": {**state["block"], "truncated": True}}  # still a valid record: served as it reads
    overwrite_state(isolated, "run-1", first, json.dumps(truncated).encode())
    _, elsewhere = next(commits(isolated, "run-2"))
    overwrite_state(isolated, "run-1", second, json.dumps({**other, PROOF: elsewhere[PROOF]}).encode())
    third = list(commits(isolated, "run-1"))[2][0]
    damaged = stored_state(isolated, "run-1", third)
    damaged["block"]["body_sha256"] = "0" * 64
    overwrite_state(isolated, "run-1", third, json.dumps(damaged).encode())

    ledger = ledgers(isolated, "run-1")["run-1"]
    by_position = {r.receipt["log_position"]: r for h in ledger.blocks.values() for r in h.revisions}
    assert by_position[first].proven is None and by_position[second].proven is None
    assert by_position[third].proven is None
    assert served(by_position[first])[1]["truncated"] is True  # what the full examination serves
    assert served(by_position[second])[1] is not None  # a sound record whose proof was replaced
    assert served(by_position[third])[0] == "corrupt_body"
    proven_elsewhere = [r for p, r in by_position.items() if p not in (first, second, third)]
    assert proven_elsewhere and all(r.proven is not None for r in proven_elsewhere)
    view, sha = hashed_answer_view(ledger)
    assert sha == view_hash(answer_view(unproven(ledger))) and view == answer_view(unproven(ledger))


def test_a_proof_under_a_destroyed_key_proves_nothing(isolated: Settings) -> None:
    write_runs(isolated, "run-1")
    with closing(open_log(isolated)) as app:
        app.keyring.destroy("conv-run-1")
    ledger = ledgers(isolated, "run-1")["run-1"]
    assert all(r.proven is None and r.seal == "shredded" for h in ledger.blocks.values() for r in h.revisions)
    assert {w["reason"] for w in answer_view(ledger)["withheld"]} == {"shredded"}
