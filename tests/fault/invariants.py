"""The invariant check every fault-tier scenario ends with (SPEC §7, P14, P15, P21, R1, D1).

:func:`check_invariants` reads, after the load has drained, what each part left behind —
the Publication log (PostgreSQL), ``imprint.publication.v1`` and the dead-letter topic
(Kafka), each Delivery instance's answer view (HTTP) and every SSE client's frames — and
checks, collecting every violation before it fails:

1. **one typed outcome per accepted proposal** (P15): every proposal the broker
   acknowledged was settled exactly once in the log (committed, unchanged, rejected,
   revision rejected: one settlement, never two), announced on the topic by exactly one
   outcome message after dedupe by ``event_id``, and no re-send carries another body;
   nothing was refused or dead-lettered;
2. **every committed block is accounted for** (P14, P21, R4): live in the answer view
   replayed from the log, withheld there with a reason, or withdrawn with a cause; a
   block standing on a revoked source is withdrawn (``source_revoked``), in every run;
   a block on no revoked source is live;
3. **replay equals the live views** (R1): the views rebuilt from the log by the recovery
   library (``imprint replay``'s code) equal the Publication aggregates, every Delivery
   instance's ``/answer`` view and what each SSE client ends up showing — same blocks,
   revisions, bodies (``body_sha256``), ordinals and receipts, all saved;
4. **no client saw a gap or a duplicate** (D1): each client's frame ids, across all its
   reconnections and instances, are exactly ``1..n``, the last frame is ``done``, and no
   ``error`` (protocol conflict) frame was sent.

It returns the counts it saw (for the test's output); it does not sleep or time anything."""

from __future__ import annotations

import asyncio
import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any, TypeVar

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from imprint.contracts.topics import Topic
from imprint.recovery import answer_views
from services.common.settings import Settings
from services.publication.application import open_log
from services.recovery.log_reader import current_bound, read_fold
from tests.fault.workload import Workload

INVARIANT_RULES = ("P15", "P14", "P21", "R1", "D1")
"""The SPEC rules :func:`check_invariants` proves, in the order its checks name them."""
_Test = TypeVar("_Test")


def proves_the_invariants(test: _Test) -> _Test:
    """Marks a scenario that ends in :func:`check_invariants` with each rule it proves
    (``@pytest.mark.rule(id)``, one mark per rule, as written out by hand)."""
    for rule in reversed(INVARIANT_RULES):
        test = pytest.mark.rule(rule)(test)
    return test

DIRECT_TYPES = ("answer.preview", "answer.save_unknown", "answer.save_failed")
OUTCOME_TYPES = ("answer.published", "answer.unchanged", "answer.rejected", "answer.revision_rejected")


async def partitions_of(settings: Settings, name: str) -> list[int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        (description,) = await admin.describe_topics([name])
        return sorted(p["partition"] for p in description["partitions"])
    finally:
        await admin.close()


async def read_everything(settings: Settings, topic: Topic, timeout: float = 60) -> list[dict[str, Any]]:
    """Every record of ``topic`` (all partitions) up to the end offsets at the time of the call."""
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap, enable_auto_commit=False,
                                group_id=None, auto_offset_reset="earliest")
    await consumer.start()
    try:
        name = settings.topic(topic)
        partitions = [TopicPartition(name, p) for p in await partitions_of(settings, name)]
        assert partitions, f"{name} has no partitions"
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        end = await consumer.end_offsets(partitions)
        values: list[dict[str, Any]] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while [tp for tp in partitions if await consumer.position(tp) < end[tp]]:
            if loop.time() > deadline:
                raise AssertionError(f"could not read {name} to its end")
            for records in (await consumer.getmany(timeout_ms=200)).values():
                values.extend(json.loads(r.value) for r in records)
        return values
    finally:
        await consumer.stop()


def _key(block: dict[str, Any]) -> tuple[Any, ...]:
    receipt = block.get("receipt") or {}
    return (block["block_id"], block["revision"], block["body_sha256"], block["delivery_ordinal"],
            receipt.get("receipt_id"), receipt.get("log_position"))


def check_invariants(settings: Settings, workload: Workload, delivery_urls: Sequence[str]) -> dict[str, Any]:
    problems: list[str] = []
    runs = [r.run_id for r in workload.runs]
    revoked = set(workload.revoked)
    accepted = {p.candidate_id: p for p in workload.accepted}
    if len(accepted) != workload.proposals_expected:
        problems.append(f"only {len(accepted)} of {workload.proposals_expected} proposals were accepted")

    # --------------------------------------------------------------- the log (PostgreSQL)
    app = open_log(settings)
    try:
        fold = read_fold(app, None, current_bound(app))
        views = answer_views(fold)
        aggregates = {r: app.run(r) for r in runs}
    finally:
        app.close()

    kinds: Counter[str] = Counter()
    for cid, proposal in accepted.items():
        ledger = fold.runs.get(proposal.run_id)
        settlements = [] if ledger is None else ledger.settlements.get(cid, [])
        if len(settlements) != 1:
            problems.append(f"{cid}: {len(settlements)} settlements in the log, not exactly one: {settlements}")
            continue
        kinds[settlements[0]["kind"]] += 1
    for r in runs:
        ledger = fold.runs.get(r)
        if ledger is None:
            problems.append(f"{r}: not in the Publication log")
            continue
        if ledger.refusals:
            problems.append(f"{r}: refusals recorded for well-formed input: {ledger.refusals}")
        if ledger.defects:
            problems.append(f"{r}: unreadable records: {ledger.defects}")

    # -------------------------------------------------------- 2. every committed block
    withdrawn_blocks = 0
    for r in runs:
        ledger, view, aggregate = fold.runs.get(r), views.get(r), aggregates.get(r)
        if ledger is None or view is None or aggregate is None:
            continue
        served = {b["block_id"]: b for b in view["blocks"]}
        withheld = {w["block_id"]: w for w in view["withheld"]}
        for block_id, history in ledger.blocks.items():
            record = aggregate.block(block_id)
            sources = set(record.effective_sources or ()) if record is not None else set()
            if history.withdrawn is not None:
                withdrawn_blocks += 1
                cause = history.withdrawn.get("cause")
                if not cause:
                    problems.append(f"{r}/{block_id}: withdrawn without a cause")
                if cause == "source_revoked" and history.withdrawn.get("source_id") not in revoked:
                    problems.append(f"{r}/{block_id}: withdrawn for a source never revoked: {history.withdrawn}")
                if block_id in served:
                    problems.append(f"{r}/{block_id}: withdrawn but still in the replayed view")
            elif block_id in withheld:
                if not withheld[block_id].get("reason"):
                    problems.append(f"{r}/{block_id}: withheld without a reason")
            elif block_id not in served:
                problems.append(f"{r}/{block_id}: committed, live, but neither served nor withheld")
            if sources & revoked and history.withdrawn is None:
                problems.append(f"{r}/{block_id}: stands on revoked {sorted(sources & revoked)} but was not withdrawn")
            if not sources & revoked and history.withdrawn is not None:
                problems.append(f"{r}/{block_id}: withdrawn ({history.withdrawn.get('cause')}) "
                                f"though it stands on no revoked source")

        # ------------------------------------------------------- 3. replay = live views
        replayed = sorted(_key(b) for b in view["blocks"])
        live = sorted((b.block_id, b.revision, b.body_sha256, b.ordinal,
                       (b.receipt or {}).get("receipt_id"), (b.receipt or {}).get("log_position"))
                      for b in aggregate.live_blocks())
        if replayed != live:
            problems.append(f"{r}: the replayed view differs from the Publication aggregate:\n"
                            f"  replay {replayed}\n  aggregate {live}")
        for url in delivery_urls:
            token = workload.tokens[next(p.account_id for p in workload.runs if p.run_id == r)]
            response = httpx.get(f"{url}/v1/runs/{r}/answer", headers={"Authorization": f"Bearer {token}"},
                                 timeout=10)
            if response.status_code != 200:
                problems.append(f"{r}: {url} answered {response.status_code} for the answer view")
                continue
            body = response.json()
            shown = sorted(_key(b) for b in body["blocks"])
            if shown != replayed:
                problems.append(f"{r}: {url}'s answer view differs from the replayed view:\n"
                                f"  delivery {shown}\n  replay {replayed}")
            unsaved = [b["block_id"] for b in body["blocks"] if b.get("status") != "saved"]
            if unsaved or body.get("conflicts"):
                problems.append(f"{r}: {url} shows unsaved blocks {unsaved} or conflicts {body.get('conflicts')}")
        # D3: nothing is appended after done, so a client may still show a block withdrawn
        # after the run ended in the log (at its committed revision) until it reloads.
        ended = max((e["log_position"] or 0 for e in ledger.trail if e["type"] == "Ended"), default=None)
        after_done = {_key({**h.current.block, "receipt": h.current.receipt}) for h in ledger.blocks.values()
                      if h.withdrawn is not None and ended is not None
                      and (h.withdrawn.get("log_position") or 0) > ended}
        for client in (c for c in workload.clients if c.run.run_id == r):
            seen = {_key(b) for b in client.shown_blocks().values()}
            missing, extra = set(replayed) - seen, seen - set(replayed) - after_done
            if missing or extra:
                problems.append(f"{r}: client #{client.number} ends up showing another answer than the replay "
                                f"({len(after_done)} withdrawn after done):\n  missing {sorted(missing)}\n"
                                f"  extra {sorted(extra)}")

    # ------------------------------------------------- 4. no gap, no duplicate, done last
    frames = reconnects = 0
    for client in workload.clients:
        ids = client.ids
        frames += len(ids)
        reconnects += max(0, client.connections - 1)
        if ids != list(range(1, len(ids) + 1)):
            dupes = sorted(i for i, n in Counter(ids).items() if n > 1)
            gaps = sorted(set(range(1, max(ids, default=0) + 1)) - set(ids))
            problems.append(f"{client.run.run_id}#{client.number}: frame ids not exactly 1..n "
                            f"(duplicates {dupes[:10]}, gaps {gaps[:10]}, over {client.connections} connections)")
        if not client.frames or client.frames[-1][1] != "done":
            problems.append(f"{client.describe()}: the last frame is not done")
        errors = [d for _, e, d in client.frames if e == "error"]
        if errors:
            problems.append(f"{client.run.run_id}#{client.number}: error frames {errors[:3]}")

    # ---------------------------------------------------- 1. the wire (Kafka), deduped
    values = asyncio.run(read_everything(settings, Topic.PUBLICATION))
    bodies: defaultdict[str, set[str]] = defaultdict(set)
    for v in values:
        # Relayed messages are re-sent byte for byte; what Publication emits itself (previews,
        # save outcomes) is re-emitted on a retried poll with the same event_id and a new
        # occurred_at.
        same = v if v["type"] not in DIRECT_TYPES else {k: x for k, x in v.items() if k != "occurred_at"}
        bodies[v["event_id"]].add(json.dumps(same, sort_keys=True))
    changed = [e for e, b in bodies.items() if len(b) > 1]
    if changed:
        problems.append(f"{len(changed)} event_ids re-sent with another body: {changed[:5]}")
    first = {v["event_id"]: v for v in reversed(values)}
    outcomes: Counter[str] = Counter()
    for v in first.values():
        if v["type"] in OUTCOME_TYPES:
            cid = v["block"]["candidate_id"] if v["type"] == "answer.published" else v["candidate_id"]
            outcomes[cid] += 1
    for cid in accepted:
        if outcomes[cid] != 1:
            problems.append(f"{cid}: {outcomes[cid]} outcome messages on the topic (after dedupe), not one")
    withdrawn_on_wire = Counter(v["block_id"] for v in first.values() if v["type"] == "answer.withdrawn")
    if sum(withdrawn_on_wire.values()) != withdrawn_blocks or any(n != 1 for n in withdrawn_on_wire.values()):
        problems.append(f"withdrawals on the topic {dict(withdrawn_on_wire)} != {withdrawn_blocks} in the log")
    letters = asyncio.run(read_everything(settings, Topic.DEADLETTER))
    if letters:
        problems.append(f"{len(letters)} dead letters: {[(x['consumer'], x['reason']) for x in letters[:5]]}")

    report = {
        "proposals": len(accepted), "settled": dict(kinds), "withdrawn": withdrawn_blocks,
        "revoked_sources": sorted(revoked), "send_retries": workload.send_retries,
        "published_records": len(values), "duplicate_records": len(values) - len(first),
        "clients": len(workload.clients), "frames": frames, "reconnects": reconnects,
    }
    if problems:
        dump = settings.state_dir / "invariants.json"
        dump.parent.mkdir(parents=True, exist_ok=True)
        dump.write_text(json.dumps({
            "problems": problems, "report": report, "views": views,
            "clients": {f"{c.run.run_id}#{c.number}": c.frames for c in workload.clients},
            "changed": {e: sorted(bodies[e]) for e in changed}, "wire": values, "dead_letters": letters,
        }, default=str, indent=1))
        problems.append(f"(everything seen is in {dump})")
    assert not problems, f"{len(problems)} invariant violations ({report}):\n" + "\n".join(problems[:60])
    return report
