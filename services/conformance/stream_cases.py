"""The server kit's stream cases: the SSE stream's headers and frames (each kind against its
schema, ids, the terminal pair, D3's summary, the merged view), every resume position, resets,
204 after ``done``, the AI SDK stream read by the rules, and a conversation's notices (D7)."""

from __future__ import annotations

import json
from typing import Any

from imprint.contracts.stream import SSE_FRAME, UI_PART
from imprint.delivery.summary import validate_stream
from services.conformance.kit import SAFE_REASONS, WITHDRAWAL_CAUSES, Kit, first_error, gather_limited, merged
from services.conformance.scenarios import ANSWER_TEXT, Runs
from services.conformance.sse import ended_with_done, ui_parts


class StreamCases(Kit):
    # -- sse, frames -------------------------------------------------------------------------
    async def family_sse(self, runs: Runs) -> None:
        full = self.full
        assert full is not None
        self.case("sse/status", "D1", full.status == 200 and full.headers.get("content-type", "").startswith(
            "text/event-stream"), f"HTTP {full.status}, content-type {full.headers.get('content-type')!r}")
        cache = full.headers.get("cache-control", "")
        self.case("sse/no-cache", "D1", "no-cache" in cache or "no-store" in cache, f"cache-control {cache!r}")
        self.case("sse/retry", "D1", full.retry is not None and full.retry > 0, f"retry: {full.retry}")
        self.case("sse/ends-after-done", "D2", full.ended and ended_with_done(full), full.describe())
        data_ok = [e for e in full.events if e.event != "done" and not isinstance(e.json, dict)]
        self.case("sse/data-json-object", "D2", not data_ok,
                  f"{len(full.events)} events; not a JSON object: {[e.id for e in data_ok][:5]}")

    async def family_frames(self, runs: Runs) -> None:
        full = self.full
        assert full is not None
        kinds = list(dict.fromkeys([*runs.expected_kinds, *full.kinds()]))
        for kind in kinds:
            frames = [e for e in full.events if e.event == kind]
            problems = [f"id {e.id}: {first_error(SSE_FRAME, e.wire())}" for e in frames
                        if first_error(SSE_FRAME, e.wire())]
            if not frames:
                self.case(f"frames/{kind}/schema", "D2", False, f"no {kind} frame in run {runs.finished}")
                continue
            self.case(f"frames/{kind}/schema", "D2", not problems,
                      "; ".join(problems[:3]) or f"{len(frames)} frame(s) valid against imprint.sse.v1 {kind}")
        ids = full.ids
        self.case("frames/ids-start-at-1", "D1", bool(ids) and ids[0] == 1, f"first id {ids[:1]}")
        self.case("frames/ids-increase", "D1", ids == sorted(set(ids)) and len(ids) == len(full.events),
                  f"ids {ids}")
        done = [e for e in full.events if e.event == "done"]
        self.case("frames/done-last-once", "D3", len(done) == 1 and full.events[-1].event == "done"
                  and done[0].data == "[DONE]", f"{len(done)} done, last event {full.events[-1].event if full.events else None}")
        check = validate_stream([(e.id, e.event, e.json) for e in full.events if e.id is not None])
        self.case("frames/summary-digest", "D3", check.ok, f"D3 check: {check.problems or 'ok'}")
        chunks = [e.json for e in full.events if e.event == "content" and isinstance(e.json, dict) and "text" in e.json]
        text = "".join(c["text"] for c in chunks)
        in_order = [c.get("seq") for c in chunks] == list(range(len(chunks)))
        expected = ANSWER_TEXT if runs.writer is not None else text
        if self.applies(runs, bool(chunks), "frames/content-chunks", "no content frames"):
            self.case("frames/content-chunks", "D2", bool(chunks) and in_order and text == expected
                      and all(len(c["text"]) <= 28 for c in chunks),
                      f"{len(chunks)} chunks, seq in order: {in_order}, text {text[:60]!r}…")
        order = full.kinds()
        status_closed = [i for i, e in enumerate(full.events)
                         if e.event == "run-status" and isinstance(e.json, dict) and e.json.get("closed")]
        first_content = order.index("content") if "content" in order else -1
        if self.applies(runs, first_content >= 0, "frames/content-after-closed", "no content frames"):
            self.case("frames/content-after-closed", "D2", bool(status_closed) and 0 <= status_closed[0] < first_content,
                      f"run-status closed at {status_closed[:1]}, first content at {first_content}")
        evidence = order.index("evidence-summary") if "evidence-summary" in order else -1
        if self.applies(runs, evidence >= 0, "frames/evidence-before-terminal", "no evidence-summary"):
            self.case("frames/evidence-before-terminal", "D2",
                      first_content < evidence < order.index("stream-summary") if "stream-summary" in order else False,
                      f"content {first_content}, evidence-summary {evidence}")
        rejected = [e.json for e in full.events if e.event == "answer-rejected" and isinstance(e.json, dict)
                    and "reason" in e.json]
        if self.applies(runs, bool(rejected), "frames/rejection-reason-safe", "no answer-rejected frame"):
            self.case("frames/rejection-reason-safe", "D6", bool(rejected) and all(
                r["reason"] in SAFE_REASONS for r in rejected), f"reasons {[r.get('reason') for r in rejected]}")
        withdrawn = [e for e in full.events if e.event == "answer-withdrawn" and isinstance(e.json, dict)]
        leaks = [e.id for e in withdrawn if "revoked-before" in e.data or "revoked-after" in e.data]
        if self.applies(runs, bool(withdrawn), "frames/withdrawal-names-no-source", "no answer-withdrawn frame"):
            self.case("frames/withdrawal-names-no-source", "D6", bool(withdrawn) and not leaks and all(
                e.json.get("cause") in WITHDRAWAL_CAUSES for e in withdrawn if "cause" in e.json),
                f"causes {[e.json.get('cause') for e in withdrawn]}, naming a source: {leaks}")
        held = merged(full)
        shown = {b["block_id"]: (b["revision"], b["status"]) for b in self.view.get("blocks", [])}
        folded = {k: (v["revision"], v["status"]) for k, v in held.items() if v is not None}
        if self.applies(runs, bool(shown), "frames/merged-view", "no block shown"):
            self.case("frames/merged-view", "D1", bool(shown) and folded == shown,
                      f"frames fold to {folded}; GET …/answer shows {shown}")
        revised = [v for v in held.values() if v is not None and v["revision"] > 1]
        if self.applies(runs, False, "frames/revision-in-place", "no block whose first position the kit knows"):
            # the kit's first block, revised after two more were added, keeps the first position
            self.case("frames/revision-in-place", "P18", len(revised) == 1 and revised[0]["delivery_ordinal"] == min(
                b["delivery_ordinal"] for b in held.values() if b),
                f"revised {[(v['block_id'][:12], v['revision'], v['delivery_ordinal']) for v in revised]}")
        again = await self.read(self.events_url(runs.finished))
        self.case("frames/replay-identical", "D1", [(e.id, e.event, e.data) for e in again.events]
                  == [(e.id, e.event, e.data) for e in full.events], f"second read: {again.describe()}")

    # -- resume, reset, end ----------------------------------------------------------------------
    async def family_resume(self, runs: Runs) -> None:
        ids = self.ids()
        positions = [0, *ids[:-1]]

        async def one(position: int, how: str) -> None:
            if how == "header":
                read = await self.read(self.events_url(runs.finished), {"Last-Event-ID": str(position)})
            else:
                read = await self.read(self.events_url(runs.finished, last_event_id=position))
            expected = [i for i in ids if i > position]
            self.case(f"resume/{how}/{position}", "D1", read.status == 200 and read.ids == expected and read.ended
                      and ended_with_done(read),
                      f"after {position}: {read.describe()}" + ("" if read.ids == expected else f"; expected {expected[:3]}…"))

        await gather_limited([one(p, how) for how in ("header", "query") for p in positions])
        for label, raw in (("letters", "abc"), ("negative", "-1"), ("fraction", "1.5"), ("hex", "0x10")):
            response = await self.get(f"/v1/runs/{runs.finished}/events", headers={"Last-Event-ID": raw})
            self.case(f"resume/refused/{label}", "D1", response.status_code == 400,
                      f"Last-Event-ID {raw!r}: HTTP {response.status_code}")

    async def family_reset(self, runs: Runs) -> None:
        ids = self.ids()
        last = ids[-1]

        async def one(position: int, how: str) -> None:
            if how == "header":
                read = await self.read(self.events_url(runs.finished), {"Last-Event-ID": str(position)})
            else:
                read = await self.read(self.events_url(runs.finished, last_event_id=position))
            first = read.events[0] if read.events else None
            valid = first is not None and not first_error(SSE_FRAME, first.wire())
            good = (first is not None and first.event == "reset" and first.id == 0 and valid
                    and first.json.get("last_event_id") == position and first.json.get("last_id") == last
                    and read.ids[1:] == ids)
            self.case(f"reset/{how}/{position}", "D8", good,
                      f"first {first.wire() if first else None}; then {read.describe()}")

        await gather_limited([one(p, how) for how in ("header", "query")
                              for p in (last + 1, last + 2, last + 100, 2**31, 10**15)])

    async def family_end(self, runs: Runs) -> None:
        last = self.ids()[-1]
        header = await self.get(f"/v1/runs/{runs.finished}/events", headers={"Last-Event-ID": str(last)})
        self.case("end/204/header", "D1", header.status_code == 204 and not header.content,
                  f"Last-Event-ID {last} (done): HTTP {header.status_code}, {len(header.content)} bytes")
        query = await self.get(f"/v1/runs/{runs.finished}/events", params={"last_event_id": last})
        self.case("end/204/query", "D1", query.status_code == 204, f"?last_event_id={last}: HTTP {query.status_code}")
        reset_then_new = await self.read(self.events_url(runs.finished), {"Last-Event-ID": "0"})
        self.case("end/zero-is-a-new-client", "D8", reset_then_new.ids == self.ids(),
                  f"Last-Event-ID 0: {reset_then_new.describe()}")


    # -- the AI SDK stream -------------------------------------------------------------------------
    async def family_ai_sdk(self, runs: Runs) -> None:
        url = f"{self.url}/v1/ai-sdk/runs/{runs.finished}/stream"
        read = await self.read(url)
        parts = ui_parts(read)
        self.case("ai-sdk/header", "D2", read.headers.get("x-vercel-ai-ui-message-stream") == "v1",
                  f"x-vercel-ai-ui-message-stream: {read.headers.get('x-vercel-ai-ui-message-stream')!r}")
        bad = [(i, first_error(UI_PART, p)) for i, p in enumerate(parts) if p != "[DONE]" and first_error(UI_PART, p)]
        self.case("ai-sdk/parts-schema", "D2", bool(parts) and not bad,
                  f"{len(parts)} parts; invalid: {bad[:3]}" if bad else f"{len(parts)} parts valid")
        start = parts[0] if parts and isinstance(parts[0], dict) else {}
        self.case("ai-sdk/start-first", "D2", start.get("type") == "start" and bool(start.get("messageId")),
                  f"first part {json.dumps(start)[:120]}")
        self.case("ai-sdk/finish-then-done", "D3", len(parts) >= 2 and parts[-1] == "[DONE]"
                  and isinstance(parts[-2], dict) and parts[-2].get("type") == "finish" and read.ended,
                  f"last parts {[p if isinstance(p, str) else p.get('type') for p in parts[-2:]]}")
        again = ui_parts(await self.read(url))
        self.case("ai-sdk/stable-message", "D1", again == parts, f"a second read gives {len(again)} parts, the first {len(parts)}")
        blocks: dict[str, dict[str, Any]] = {}
        for part in parts:
            if isinstance(part, dict) and part.get("type") == "data-block":
                blocks[part["id"]] = part["data"]
        committed = {k: v.get("revision") for k, v in blocks.items() if v.get("state") == "committed"}
        shown = {b["block_id"]: b["revision"] for b in self.view.get("blocks", [])}
        if self.applies(runs, bool(shown), "ai-sdk/blocks-replaced-in-place", "no block shown"):
            self.case("ai-sdk/blocks-replaced-in-place", "P18", bool(shown) and committed == shown,
                      f"data-block parts end as {committed}; GET …/answer shows {shown}")
        gone = {k for k, v in blocks.items() if v.get("state") == "withdrawn"}
        if runs.writer is not None:
            self.case("ai-sdk/withdrawn-kept-as-state", "P21", bool(gone), f"{len(gone)} data-block part(s) end withdrawn")
        text = "".join(p.get("delta", "") for p in parts if isinstance(p, dict) and p.get("type") == "text-delta")
        content = "".join(e.json.get("text", "") for e in (self.full.events if self.full else [])
                          if e.event == "content" and isinstance(e.json, dict))
        if self.applies(runs, bool(content), "ai-sdk/text-is-content", "no content frames"):
            self.case("ai-sdk/text-is-content", "D2", bool(text) and text == content, f"text {text[:60]!r}…")
        summary = next((e.json for e in (self.full.events if self.full else []) if e.event == "stream-summary"), None)
        finish = parts[-2] if len(parts) >= 2 and isinstance(parts[-2], dict) else {}
        carried = (finish.get("messageMetadata") or {}).get("stream_summary")
        self.case("ai-sdk/finish-carries-summary", "D3", summary is not None and carried == summary,
                  f"finish: {carried}; SSE stream-summary: {summary}")
        transient = [p for p in parts if isinstance(p, dict) and p.get("type") in ("data-progress", "data-reset")]
        self.case("ai-sdk/progress-transient", "D2", all(p.get("transient") is True for p in transient),
                  f"{len(transient)} progress part(s), all transient")
        beyond = self.ids()[-1] + 5
        reset = ui_parts(await self.read(url, {"Last-Event-ID": str(beyond)}))
        self.case("ai-sdk/reset-part", "D8", len(reset) > 1 and isinstance(reset[1], dict) and reset[1].get("type")
                  == "data-reset" and reset[1].get("transient") is True and reset[:1] == parts[:1],
                  f"second part {json.dumps(reset[1])[:120] if len(reset) > 1 else None}")
        valid = ui_parts(await self.read(url, {"Last-Event-ID": str(self.ids()[-1])}))
        self.case("ai-sdk/valid-id-replays", "D8", valid == parts, f"{len(valid)} parts for a valid id")
        if runs.conversation:
            response = await self.get(f"/v1/ai-sdk/conversations/{runs.conversation}/stream")
            self.case("ai-sdk/conversation-after-end-204", "D2", response.status_code == 204,
                      f"HTTP {response.status_code}")

    # -- notices ------------------------------------------------------------------------------------
    async def family_notices(self, runs: Runs) -> None:
        if not runs.conversation:
            self.case("notices/conversation", "D7", False, "the run names no conversation")
            return
        url = f"{self.url}/v1/conversations/{runs.conversation}/notices"
        wait = self.keepalive * 1.5 + 2
        read = await self.read(url, timeout=wait, until=lambda r: bool(r.comments))
        notices = [e for e in read.events if e.event == "notice"]
        self.case("notices/stream", "D7", read.status == 200 and read.headers.get("content-type", "").startswith(
            "text/event-stream") and not read.ended, read.describe())
        if not runs.notice_expected and not notices:
            return
        problems = [first_error(SSE_FRAME, e.wire()) for e in notices if first_error(SSE_FRAME, e.wire())]
        self.case("notices/schema", "D7", bool(notices) and not problems,
                  f"{len(notices)} notice(s); {problems[:2] or 'valid against imprint.sse.v1 notice'}")
        leaks = [e.id for e in notices if "revoked-after" in e.data or "Revoked after" in e.data]
        self.case("notices/client-safe", "D6", bool(notices) and not leaks and all(
            e.json.get("cause") in WITHDRAWAL_CAUSES for e in notices), f"causes {[e.json.get('cause') for e in notices]}")
        after = {e.json.get("block_id") for e in notices}
        stripped = [e for e in (self.full.events if self.full else []) if isinstance(e.json, dict)
                    and e.json.get("block_id") in after and e.event in ("answer-preview", "answer-publication")]
        self.case("notices/run-frames-stripped", "D7", bool(stripped) and all(
            e.json.get("withdrawn") or e.json.get("superseded") for e in stripped),
            f"the withdrawn block's {len(stripped)} frame(s) in the run: bodies "
            f"{'gone' if all(e.json.get('withdrawn') or e.json.get('superseded') for e in stripped) else 'still there'}")
        ids = [e.id for e in notices if e.id is not None]
        for position in [0, *ids[:-1]]:
            resumed = await self.read(url, {"Last-Event-ID": str(position)}, timeout=10,
                                      until=lambda r: "notice" in r.kinds() and r.ids[-1] == ids[-1])
            self.case(f"notices/resume/{position}", "D7", resumed.ids == [i for i in ids if i > position],
                      resumed.describe())
        beyond = (ids[-1] if ids else 0) + 7
        reset = await self.read(url, {"Last-Event-ID": str(beyond)}, timeout=10,
                                until=lambda r: len(r.events) >= 1 + len(ids))
        self.case("notices/reset", "D8", bool(reset.events) and reset.events[0].event == "reset"
                  and reset.events[0].id == 0 and reset.ids[1:] == ids, reset.describe())
        ui = await self.read(f"{self.url}/v1/ai-sdk/conversations/{runs.conversation}/notices", timeout=10,
                             until=lambda r: len(r.events) >= len(ids))
        parts = ui_parts(ui)
        self.case("notices/ai-sdk-part", "D7", bool(parts) and all(
            isinstance(p, dict) and p.get("type") == "data-block" and p["data"].get("state") == "withdrawn"
            for p in parts), f"{[p.get('type') if isinstance(p, dict) else p for p in parts]}")
        run_of = notices[0].json.get("run_id") if notices else runs.finished
        receipt = await self.post(f"/v1/runs/{run_of}/receipts", {"type": "client.received", "notice_ids": ids})
        self.case("notices/receipt", "D7", receipt.status_code == 202, f"HTTP {receipt.status_code}")

