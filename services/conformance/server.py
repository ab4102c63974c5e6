"""``imprint conformance server``: the client protocol (docs/protocol.md) checked against a
deployment from outside, as a client on the network sees it — Delivery itself, or whatever
stands in front of it (a reverse proxy, a load balancer, a CDN).

Families of cases, each case naming its rule:

* ``sse``, ``frames`` — the stream's headers, every frame kind against its schema
  (``schemas/imprint.sse.v1.schema.json``), ids, the terminal pair, D3's summary, the merged view;
* ``resume``, ``reset``, ``end`` — every resume position by header and by query, 204 after
  ``done``, ``reset`` for every kind of unusable id, refused ids;
* ``tickets``, ``isolation``, ``receipts``, ``cancel`` — D6's scope, expiry and reuse, 404 after
  the same wait, D4's receipts, D2/X11's cancel;
* ``ai-sdk``, ``notices``, ``cors`` — the AI SDK stream read by the rules, D7's notices, CORS
  for an allowed and a refused origin;
* ``path`` — D9: a frame produced reaches the client before the next one is produced,
  ``Last-Event-ID`` arrives intact, keep-alives arrive within the interval, nothing compresses
  the stream. A failure names the proxy setting to change.

With ``--kafka`` the kit makes its own runs through the runtime SDK
(:mod:`services.conformance.scenarios`); else it reads the finished run ``--run``."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import jwt

from imprint.contracts.stream import SSE_FRAME, UI_PART
from imprint.delivery.summary import validate_stream
from services.common.settings import get_settings
from services.conformance.report import Case, Report
from services.conformance.scenarios import ANSWER_TEXT, Runs, Scenario
from services.conformance.sse import Read, ended_with_done, read_stream, ui_parts

FAMILIES = ("sse", "frames", "resume", "reset", "end", "tickets", "isolation", "receipts", "ai-sdk", "notices",
            "cors", "path", "cancel")
SAFE_REASONS = frozenset({"empty_body", "malformed_block", "not_publishable", "invalid_target", "quota_exceeded"})
WITHDRAWAL_CAUSES = frozenset({"source_revoked", "source_tombstoned", "conversation_deleted", "source_rejected",
                               "withdrawn"})
REFUSED_ORIGIN = "https://conformance-refused.invalid"

BUFFERING = ("the path between buffers the stream: nginx `proxy_buffering off;` for the stream locations (or let "
             "Delivery's `X-Accel-Buffering: no` through: no `proxy_ignore_headers X-Accel-Buffering`); other "
             "proxies and CDNs: turn response buffering off for text/event-stream")
COMPRESSION = ("the path compresses the stream, which holds frames until a compressed block fills: nginx `gzip off;` "
               "for the stream locations (or leave text/event-stream out of `gzip_types`)")
READ_TIMEOUT = ("the path closed an idle stream: nginx `proxy_read_timeout` (and a load balancer's idle timeout) must "
                "be longer than Delivery's keep-alive interval (IMPRINT_SSE_KEEPALIVE_SECONDS)")


def run(args: argparse.Namespace) -> Report:
    """The command's entry point (:mod:`services.conformance.cli`)."""
    logging.getLogger("httpx").setLevel(logging.WARNING)  # the report says what was requested
    return asyncio.run(ServerKit(args).run())


class ServerKit:
    def __init__(self, args: argparse.Namespace) -> None:
        self.url = args.url.rstrip("/")
        self.token = args.token
        self.kafka: str | None = args.kafka
        self.run_id: str | None = args.run
        self.origin: str | None = args.origin
        self.keepalive: float = args.keepalive or 15.0
        self.frame_wait: float = getattr(args, "frame_wait", None) or 5.0
        self.ticket_wait: float = getattr(args, "ticket_wait", None) or 30.0
        self.topic_prefix: str = args.topic_prefix if getattr(args, "topic_prefix", None) is not None \
            else get_settings().topic_prefix
        only = getattr(args, "only", None)
        self.families = tuple(f.strip() for f in only.split(",")) if only else FAMILIES
        unknown = set(self.families) - set(FAMILIES)
        if unknown:
            raise SystemExit(f"imprint conformance server: no such family {sorted(unknown)}; families: {', '.join(FAMILIES)}")
        self.report = Report(kit="server", target=self.url)
        self.account = account_of(self.token)
        self.http: httpx.AsyncClient
        self.full: Read | None = None
        self.view: dict[str, Any] = {}
        self._expiry: asyncio.Task[None] | None = None

    # -- recording ---------------------------------------------------------------------
    def case(self, case: str, rule: str, passed: bool, seen: str) -> bool:
        self.report.add(Case(case=case, rule=rule, passed=bool(passed), seen=seen, family=case.split("/")[0]))
        return bool(passed)

    def applies(self, runs: Runs, present: bool, case: str, missing: str) -> bool:
        """Whether ``case`` is checked: always on the kit's own runs (which hold everything it
        checks: absent is a failure); on a run it is pointed at, only when that run has it."""
        if runs.writer is not None or present:
            return True
        self.report.notes.append(f"{case} not run: the run has {missing}")
        return False

    async def checked(self, case: str, rule: str, check: Callable[[], Awaitable[tuple[bool, str]]]) -> bool:
        started = time.monotonic()
        try:
            passed, seen = await check()
        except Exception as error:  # noqa: BLE001 — a case that raised failed, with why
            passed, seen = False, f"{type(error).__name__}: {error}"
        self.report.add(Case(case=case, rule=rule, passed=passed, seen=seen, family=case.split("/")[0],
                             seconds=round(time.monotonic() - started, 3)))
        return passed

    # -- requests ----------------------------------------------------------------------
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def events_url(self, run_id: str, **query: Any) -> str:
        return with_query(f"{self.url}/v1/runs/{run_id}/events", query)

    async def read(self, url: str, headers: dict[str, str] | None = None, *, auth: bool = True,
                   timeout: float = 30.0, until: Callable[[Read], bool] | None = None) -> Read:
        return await read_stream(self.http, url, headers={**(self.auth() if auth else {}), **(headers or {})},
                                 timeout=timeout, until=until)

    async def get(self, path: str, *, auth: bool = True, **kwargs: Any) -> httpx.Response:
        return await self.http.get(self.url + path, headers={**(self.auth() if auth else {}),
                                                             **kwargs.pop("headers", {})}, **kwargs)

    async def post(self, path: str, body: Any = None, *, auth: bool = True, **kwargs: Any) -> httpx.Response:
        return await self.http.post(self.url + path, json=body, headers={**(self.auth() if auth else {}),
                                                                         **kwargs.pop("headers", {})}, **kwargs)

    # -- the run ---------------------------------------------------------------------------
    async def run(self) -> Report:
        timeout = httpx.Timeout(60.0, connect=10.0)
        async with httpx.AsyncClient(timeout=timeout, follow_redirects=False) as self.http:
            if self.kafka:
                async with Scenario(self.kafka, self.topic_prefix, self.account) as scenario:
                    runs = await self.make_runs(scenario)
                    self.report.notes.extend(runs.notes)
                    await self.families_of(runs)
            else:
                if not self.run_id:
                    raise SystemExit("imprint conformance server: give --kafka (the kit makes its runs) or --run RUN")
                runs = await self.given_run(self.run_id)
                await self.families_of(runs)
        return self.report

    async def make_runs(self, scenario: Scenario) -> Runs:
        started = time.monotonic()
        runs, finished = await scenario.begin(timeout=60)
        # Waited for on the JSON routes, not the streams: a path that buffers streams (what the
        # path cases are there to catch) must not stall the making of the runs.
        settled = await self.poll(f"/v1/runs/{runs.finished}/answer", lambda view: len(view.get("blocks", [])) == 2
                                  and any(b["revision"] == 2 for b in view["blocks"]))
        if not settled:
            runs.notes.append("the withdrawal before the end was not in the answer view within 60 s")
        await scenario.finish(finished)
        if not await self.poll(f"/v1/runs/{runs.finished}", lambda state: state.get("terminal") is True):
            raise RuntimeError(f"the finished run {runs.finished} did not end within 60 s")
        await scenario.revoke_after_end()
        if "notices" in self.families:
            notices = await self.read(f"{self.url}/v1/conversations/{runs.conversation}/notices", timeout=60,
                                      until=lambda r: "notice" in r.kinds())
            if "notice" not in notices.kinds():
                runs.notes.append("the notice after the end did not arrive within 60 s")
        runs.notes.append(f"the runs were made in {time.monotonic() - started:.1f} s")
        return runs

    async def poll(self, path: str, holds: Callable[[dict[str, Any]], bool], timeout: float = 60) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            response = await self.get(path)
            if response.status_code == 200 and holds(response.json()):
                return True
            await asyncio.sleep(0.2)
        return False

    async def given_run(self, run_id: str) -> Runs:
        response = await self.get(f"/v1/runs/{run_id}")
        if response.status_code != 200:
            raise SystemExit(f"imprint conformance server: GET /v1/runs/{run_id} answered {response.status_code}: "
                             "give a finished run of the token's account")
        state = response.json()
        if not state.get("terminal"):
            raise SystemExit(f"imprint conformance server: run {run_id} has not ended; give a finished run")
        return Runs(account=self.account, finished=run_id, conversation=state.get("conversation_id"))

    async def families_of(self, runs: Runs) -> None:
        self.full = await self.read(self.events_url(runs.finished))
        answer = await self.get(f"/v1/runs/{runs.finished}/answer")
        self.view = answer.json() if answer.status_code == 200 else {}
        took: list[str] = []
        for family in FAMILIES:
            if family in self.families:
                started = time.monotonic()
                await getattr(self, "family_" + family.replace("-", "_"))(runs)
                took.append(f"{family} {time.monotonic() - started:.1f}")
        if self._expiry is not None:
            await self._expiry
        self.report.notes.append(f"seconds per family: {', '.join(took)}")

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

    # -- tickets ---------------------------------------------------------------------------------
    async def family_tickets(self, runs: Runs) -> None:
        run_id, last = runs.finished, self.ids()[-1]
        minted = await self.post(f"/v1/runs/{run_id}/stream-tickets")
        body = minted.json() if minted.status_code == 201 else {}
        ticket = body.get("ticket", "")
        self.case("tickets/mint", "D6", minted.status_code == 201 and bool(ticket) and body.get("expires_in", 0) > 0
                  and body.get("run_id") == run_id and ticket in body.get("events_url", ""),
                  f"HTTP {minted.status_code}, fields {sorted(body)}")
        first = await self.read(self.events_url(run_id, ticket=ticket), auth=False)
        self.case("tickets/opens-events", "D6", first.ids == self.ids(), f"?ticket=: {first.describe()}")
        again = await self.read(self.events_url(run_id, ticket=ticket), auth=False)
        self.case("tickets/reuse-within-life", "D6", again.ids == self.ids(), f"the same ticket again: {again.describe()}")
        ui = await self.read(with_query(f"{self.url}/v1/ai-sdk/runs/{run_id}/stream", {"ticket": ticket}), auth=False)
        self.case("tickets/opens-ai-sdk-stream", "D6", ui.status == 200 and ui.headers.get(
            "x-vercel-ai-ui-message-stream") == "v1", f"AI SDK stream with the ticket: {ui.describe()}")
        ended = await self.get(f"/v1/runs/{run_id}/events", auth=False, params={"ticket": ticket, "last_event_id": last})
        self.case("tickets/resume-after-done-204", "D6", ended.status_code == 204, f"HTTP {ended.status_code}")
        refusals: list[tuple[str, Awaitable[httpx.Response]]] = [
            ("json-route", self.get(f"/v1/runs/{run_id}", auth=False, params={"ticket": ticket})),
            ("answer-route", self.get(f"/v1/runs/{run_id}/answer", auth=False, params={"ticket": ticket})),
            ("receipts", self.post(f"/v1/runs/{run_id}/receipts", {"type": "client.received"}, auth=False,
                                   params={"ticket": ticket})),
            ("forged", self.get(f"/v1/runs/{run_id}/events", auth=False,
                                params={"ticket": uuid.uuid4().hex + uuid.uuid4().hex})),
            ("no-credentials", self.get(f"/v1/runs/{run_id}/events", auth=False)),
            ("bad-bearer", self.http.get(self.events_url(run_id), headers={"Authorization": "Bearer not-a-token"})),
        ]
        if runs.conversation:
            refusals.append(("run-ticket-on-notices", self.get(f"/v1/conversations/{runs.conversation}/notices",
                                                               auth=False, params={"ticket": ticket})))
        if runs.live:
            refusals.append(("run-ticket-on-another-run", self.get(f"/v1/runs/{runs.live}/events", auth=False,
                                                                   params={"ticket": ticket})))
        for name, request in refusals:
            response = await request
            self.case(f"tickets/refused/{name}", "D6", response.status_code == 401, f"HTTP {response.status_code}")
        if runs.conversation:
            conv = await self.post(f"/v1/conversations/{runs.conversation}/stream-tickets")
            conv_ticket = conv.json().get("ticket", "") if conv.status_code == 201 else ""
            self.case("tickets/conversation-mint", "D7", conv.status_code == 201 and bool(conv_ticket),
                      f"HTTP {conv.status_code}")
            for name, path in (("notices", f"/v1/conversations/{runs.conversation}/notices"),
                               ("ai-sdk-notices", f"/v1/ai-sdk/conversations/{runs.conversation}/notices")):
                read = await self.read(with_query(self.url + path, {"ticket": conv_ticket}), auth=False,
                                       timeout=10, until=lambda r: r.status != 0)
                self.case(f"tickets/conversation-opens-{name}", "D7", read.status == 200, read.describe())
            wrong = await self.get(f"/v1/runs/{run_id}/events", auth=False, params={"ticket": conv_ticket})
            self.case("tickets/refused/conversation-ticket-on-run", "D6", wrong.status_code == 401,
                      f"HTTP {wrong.status_code}")
        if runs.other:
            other = await self.post(f"/v1/runs/{runs.other}/stream-tickets")
            self.case("tickets/refused/another-accounts-run", "D6", other.status_code == 404,
                      f"HTTP {other.status_code}")
        # waits out a ticket's life beside the other families
        self._expiry = asyncio.create_task(self.ticket_expiry(run_id))

    async def ticket_expiry(self, run_id: str) -> None:
        minted = await self.post(f"/v1/runs/{run_id}/stream-tickets")
        if minted.status_code != 201:
            self.case("tickets/expiry", "D6", False, f"minting answered HTTP {minted.status_code}")
            return
        ticket, ttl = minted.json()["ticket"], float(minted.json()["expires_in"])
        if ttl > self.ticket_wait:
            self.report.notes.append(f"tickets/expiry not run: expires_in {ttl:g} s is longer than --ticket-wait "
                                     f"{self.ticket_wait:g} s (a forged ticket's refusal is checked)")
            return
        await asyncio.sleep(ttl + 1.0)
        late = await self.get(f"/v1/runs/{run_id}/events", auth=False, params={"ticket": ticket})
        self.case("tickets/expiry", "D6", late.status_code == 401,
                  f"unused for {ttl + 1:g} s (expires_in {ttl:g}): HTTP {late.status_code}")

    # -- isolation -------------------------------------------------------------------------------
    async def family_isolation(self, runs: Runs) -> None:
        unknown = f"conformance-no-such-run-{uuid.uuid4().hex[:10]}"
        unknown_conversation = f"conformance-no-such-conversation-{uuid.uuid4().hex[:10]}"

        async def timed(path: str, method: str = "GET") -> tuple[int, float, str]:
            started = time.monotonic()
            response = await (self.get(path) if method == "GET" else self.post(path, {"type": "client.received"}))
            return response.status_code, time.monotonic() - started, response.text[:200]

        targets: list[tuple[str, str, str]] = [
            ("unknown-run/events", f"/v1/runs/{unknown}/events", "GET"),
            ("unknown-run/ai-sdk", f"/v1/ai-sdk/runs/{unknown}/stream", "GET"),
            ("unknown-run/json", f"/v1/runs/{unknown}", "GET"),
            ("unknown-conversation/notices", f"/v1/conversations/{unknown_conversation}/notices", "GET"),
        ]
        if runs.other:
            other, conv = runs.other, f"{runs.other.rsplit('-', 1)[0]}-other-conversation"
            targets += [
                ("another-account/events", f"/v1/runs/{other}/events", "GET"),
                ("another-account/ai-sdk", f"/v1/ai-sdk/runs/{other}/stream", "GET"),
                ("another-account/json", f"/v1/runs/{other}", "GET"),
                ("another-account/answer", f"/v1/runs/{other}/answer", "GET"),
                ("another-account/receipts", f"/v1/runs/{other}/receipts", "POST"),
                ("another-account/notices", f"/v1/conversations/{conv}/notices", "GET"),
                ("another-account/ai-sdk-notices", f"/v1/ai-sdk/conversations/{conv}/notices", "GET"),
            ]
        results = await asyncio.gather(*(timed(path, method) for _, path, method in targets))
        for (name, _, _), (status, seconds, _) in zip(targets, results, strict=True):
            self.case(f"isolation/{name}", "D6", status == 404, f"HTTP {status} after {seconds:.2f} s")
        waits = {name: seconds for (name, _, _), (_, seconds, _) in zip(targets, results, strict=True)}
        if runs.other:
            a, b = waits["unknown-run/events"], waits["another-account/events"]
            self.case("isolation/same-wait", "D6", abs(a - b) <= max(1.0, 0.5 * max(a, b)),
                      f"404 for a run that does not exist after {a:.2f} s, for another account's after {b:.2f} s")
            bodies = {body for (name, _, _), (_, _, body) in zip(targets, results, strict=True)
                      if name in ("unknown-run/events", "another-account/events")}
            self.case("isolation/same-answer", "D6", len(bodies) == 1, f"bodies {sorted(bodies)}")

    # -- receipts ---------------------------------------------------------------------------------
    async def family_receipts(self, runs: Runs) -> None:
        path, last = f"/v1/runs/{runs.finished}/receipts", self.ids()[-1]
        blocks = [b["block_id"] for b in self.view.get("blocks", [])]
        revisions = {b["block_id"]: b["revision"] for b in self.view.get("blocks", [])}
        client_id = f"conformance-{uuid.uuid4().hex[:8]}"
        event_id = str(uuid.uuid4())
        accepted: list[tuple[str, dict[str, Any]]] = [
            ("received", {"type": "client.received", "last_event_id": last, "client_id": client_id,
                          "event_id": event_id}),
            ("rendered", {"type": "client.rendered", "last_event_id": last, "block_ids": blocks,
                          "revisions": revisions, "client_id": client_id}),
            ("conflict", {"type": "client.conflict", "last_event_id": last, "detail": "conformance: a reported conflict"}),
        ]
        for name, body in accepted:
            response = await self.post(path, body)
            answer = response.json() if response.status_code == 202 else {}
            self.case(f"receipts/accepted/{name}", "D4", response.status_code == 202 and answer.get("accepted") == body["type"],
                      f"HTTP {response.status_code} {answer}")
        retried = await self.post(path, accepted[0][1])
        self.case("receipts/retry-same-event-id", "D4", retried.status_code == 202
                  and retried.json().get("event_id") == event_id, f"HTTP {retried.status_code} {retried.text[:120]}")
        refused: list[tuple[str, dict[str, Any]]] = [
            ("beyond-last-frame", {"type": "client.received", "last_event_id": last + 1}),
            ("unknown-type", {"type": "client.glanced", "last_event_id": 1}),
            ("negative-id", {"type": "client.received", "last_event_id": -1}),
            ("unknown-field", {"type": "client.received", "last_event_id": 1, "mood": "happy"}),
            ("revision-zero", {"type": "client.rendered", "block_ids": blocks[:1], "revisions": {b: 0 for b in blocks[:1]}}),
            ("notices-rendered", {"type": "client.rendered", "notice_ids": [1]}),
        ]
        for name, body in refused:
            response = await self.post(path, body)
            self.case(f"receipts/refused/{name}", "D4", response.status_code == 422,
                      f"HTTP {response.status_code} {response.text[:120]}")

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

    # -- CORS ---------------------------------------------------------------------------------------
    async def family_cors(self, runs: Runs) -> None:
        if not self.origin:
            self.report.notes.append("cors not run: give --origin, an origin the deployment allows")
            return
        routes = [("events", f"/v1/runs/{runs.finished}/events", "GET"),
                  ("stream-tickets", f"/v1/runs/{runs.finished}/stream-tickets", "POST"),
                  ("receipts", f"/v1/runs/{runs.finished}/receipts", "POST"),
                  ("ai-sdk", f"/v1/ai-sdk/runs/{runs.finished}/stream", "GET")]
        if runs.conversation:
            routes.append(("notices", f"/v1/conversations/{runs.conversation}/notices", "GET"))
        for name, path, method in routes:
            for origin, allowed in ((self.origin, True), (REFUSED_ORIGIN, False)):
                response = await self.http.options(self.url + path, headers={
                    "Origin": origin, "Access-Control-Request-Method": method,
                    "Access-Control-Request-Headers": "authorization, last-event-id"})
                grant = response.headers.get("access-control-allow-origin")
                allow_headers = response.headers.get("access-control-allow-headers", "").lower()
                if allowed:
                    good = response.status_code == 200 and grant == origin and "last-event-id" in allow_headers \
                        and "authorization" in allow_headers
                else:
                    good = response.status_code >= 400 and grant is None
                self.case(f"cors/preflight/{name}/{'allowed' if allowed else 'refused'}", "D6", good,
                          f"HTTP {response.status_code}, allow-origin {grant!r}, allow-headers {allow_headers!r}")
        for name, path in (("events", f"/v1/runs/{runs.finished}/events"),
                           ("ai-sdk", f"/v1/ai-sdk/runs/{runs.finished}/stream")):
            for origin, allowed in ((self.origin, True), (REFUSED_ORIGIN, False)):
                read = await self.read(self.url + path, {"Origin": origin})
                grant = read.headers.get("access-control-allow-origin")
                good = (grant == origin and read.headers.get("access-control-allow-credentials") == "true") \
                    if allowed else grant is None
                self.case(f"cors/get/{name}/{'allowed' if allowed else 'refused'}", "D6", good and read.status == 200,
                          f"HTTP {read.status}, allow-origin {grant!r}")

    # -- the path between -------------------------------------------------------------------------
    async def family_path(self, runs: Runs) -> None:
        ids = self.ids()
        for position in sorted({1, len(ids) // 2, len(ids) - 2}):
            if not 0 < position < ids[-1]:
                continue
            read = await self.read(self.events_url(runs.finished), {"Last-Event-ID": str(position)})
            self.case(f"path/last-event-id-intact/{position}", "D9", read.ids[:1] == [position + 1],
                      f"sent Last-Event-ID {position}, the stream began at {read.ids[:1]}"
                      + ("" if read.ids[:1] == [position + 1] else ": the path drops or alters Last-Event-ID — pass "
                         "the request header through unchanged (nginx does unless `proxy_set_header Last-Event-ID` "
                         "overrides it)"))
        for name, url in (("events", self.events_url(runs.finished)),
                          ("ai-sdk", f"{self.url}/v1/ai-sdk/runs/{runs.finished}/stream")):
            read = await self.read(url, {"Accept-Encoding": "gzip, deflate, br"})
            encoding = read.headers.get("content-encoding", "")
            self.case(f"path/no-compression/{name}", "D9", read.status == 200 and encoding in ("", "identity"),
                      f"Content-Encoding {encoding or 'none'}" + (f": {COMPRESSION}" if encoding not in ("", "identity") else ""))
        if runs.conversation:
            await self.keepalives(f"path/keepalive/notices", f"{self.url}/v1/conversations/{runs.conversation}/notices")
        if runs.live:
            await self.live_path(runs)

    async def keepalives(self, case: str, url: str, **headers: str) -> None:
        """Two keep-alive comments, none later than two intervals (and a second) after the one before
        (or the stream's opening), and the stream still open."""
        wait = self.keepalive * 2.5 + 2
        read = await self.read(url, headers, timeout=wait, until=lambda r: len(r.comments) >= 2)
        arrived = [round(at - read.opened_at, 2) for at, _ in read.comments]
        closed = read.ended or read.error is not None
        limit = self.keepalive * 2 + 1  # the interval, and room for a loaded server's scheduling
        gaps = [b - a for a, b in zip([0.0, *arrived], arrived, strict=False)]
        late = [round(g, 2) for g in gaps if g > limit]
        good = read.status == 200 and len(arrived) >= 2 and not closed and not late
        why = "" if good else ": " + "; ".join(
            ([READ_TIMEOUT] if closed else []) + ([BUFFERING] if not arrived or late else []))
        self.case(case, "D9", good, f"keep-alives at {arrived} s (interval {self.keepalive:g} s), "
                                    f"{'closed' + (f' ({read.error})' if read.error else '') if closed else 'open'}{why}")

    async def live_path(self, runs: Runs) -> None:
        """The live run: each frame produced must reach the client before the next is produced."""
        assert runs.live is not None
        seen: asyncio.Queue[Any] = asyncio.Queue()
        url = self.events_url(runs.live)
        opened = asyncio.Event()
        reader_read: dict[str, Read] = {}

        async def reader() -> None:
            def on_event(event: Any) -> None:
                seen.put_nowait(event)
            read = await read_stream(self.http, url, headers={**self.auth(), "Accept-Encoding": "gzip"},
                                     timeout=120, on_event=on_event,
                                     until=lambda r: bool(r.status and opened.set()))  # read to the response's end
            reader_read["read"] = read
            opened.set()

        task = asyncio.create_task(reader())
        try:
            await asyncio.wait_for(opened.wait(), self.frame_wait)
            headers_ok = True
        except TimeoutError:
            headers_ok = False
        self.case("path/headers-arrive", "D9", headers_ok, "the stream's headers arrived" if headers_ok else
                  f"no response headers within {self.frame_wait:g} s: {BUFFERING}")
        last_id = 0
        for step in range(1, 6):
            label = f"conformance-path-{step}"
            await runs.stage(label)
            produced = time.monotonic()
            arrived = await wait_for_event(seen, lambda e: e.event == "progress" and label in e.data, self.frame_wait)
            good = arrived is not None
            if arrived is not None:
                last_id = arrived.id or last_id
            self.case(f"path/unbuffered/{step}", "D9", good,
                      f"progress frame {step} arrived {arrived.at - produced:.2f} s after it was produced"
                      if arrived is not None else f"frame {step} did not arrive within {self.frame_wait:g} s of being "
                                                  f"produced: {BUFFERING}")
        await self.keepalives("path/keepalive/run", url)
        if last_id:
            await runs.stage("conformance-path-resume")
            resumed = await self.read(url, {"Last-Event-ID": str(last_id)}, timeout=self.frame_wait * 2,
                                      until=lambda r: any("path-resume" in e.data for e in r.events))
            self.case("path/live-resume", "D1", resumed.ids[:1] == [last_id + 1] and any(
                "path-resume" in e.data for e in resumed.events), f"resumed after {last_id}: {resumed.describe()}")
        if "cancel" not in self.families:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            return
        self._live_reader = (task, reader_read)

    # -- cancel (last: it ends the live run) --------------------------------------------------------
    async def family_cancel(self, runs: Runs) -> None:
        finished = await self.post(f"/v1/runs/{runs.finished}/cancel")
        self.case("cancel/finished-run-409", "D2", finished.status_code == 409, f"HTTP {finished.status_code}")
        if not runs.live or runs.writer is None:
            return
        cancel = await self.post(f"/v1/runs/{runs.live}/cancel")
        body = cancel.json() if cancel.status_code == 202 else {}
        self.case("cancel/live-run-accepted", "X11", cancel.status_code == 202 and body.get("cancel_requested") is True
                  and "blocks" in body.get("kept", {}), f"HTTP {cancel.status_code}, fields {sorted(body)}")
        await runs.stop_live(body.get("event_id"))
        task, reader_read = getattr(self, "_live_reader", (None, {}))
        if task is not None:
            try:
                await asyncio.wait_for(task, 60)
            except TimeoutError:
                task.cancel()
            read = reader_read.get("read")
            self.case("cancel/stream-ends-with-done", "D2", read is not None and ended_with_done(read) and read.ended,
                      read.describe() if read else "the live stream's reader did not finish")
        else:
            read = await self.read(self.events_url(runs.live), timeout=60, until=ended_with_done)
            self.case("cancel/stream-ends-with-done", "D2", ended_with_done(read), read.describe())
        status = [e.json for e in read.events if e.event == "run-status" and isinstance(e.json, dict)] if read else []
        self.case("cancel/ends-stopped", "X11", bool(status) and status[-1].get("state") == "stopped",
                  f"last run-status {status[-1] if status else None}")

    # -- helpers -----------------------------------------------------------------------------------
    def ids(self) -> list[int]:
        assert self.full is not None
        if not self.full.ids:
            raise RuntimeError(f"the finished run's stream held no frames: {self.full.describe()}")
        return self.full.ids


def account_of(token: str) -> str:
    """The account a bearer token names (its ``sub``; the kit holds the token, it does not verify it)."""
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError as error:
        raise SystemExit(f"imprint conformance server: --token is not a bearer token ({error})") from None
    account = claims.get("sub")
    if not isinstance(account, str) or not account:
        raise SystemExit("imprint conformance server: the token names no account (sub)")
    return account


def with_query(url: str, query: dict[str, Any]) -> str:
    if not query:
        return url
    return url + "?" + str(httpx.QueryParams({k: str(v) for k, v in query.items()}))


def first_error(adapter: Any, value: Any) -> str | None:
    from pydantic import ValidationError

    try:
        adapter.validate_python(value)
    except ValidationError as error:
        problem = error.errors(include_url=False)[0]
        return f"{'.'.join(map(str, problem['loc']))}: {problem['msg']}"
    return None


def merged(read: Read) -> dict[str, Any]:
    """What a client holds after these frames: ``blocks[block_id] = block`` for every block frame with a body."""
    blocks: dict[str, Any] = {}
    for event in read.events:
        data = event.json
        if isinstance(data, dict) and "block" in data and data.get("block_id"):
            blocks[data["block_id"]] = data["block"]
    return blocks


async def wait_for_event(queue: asyncio.Queue[Any], match: Callable[[Any], bool], timeout: float) -> Any | None:
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        try:
            event = await asyncio.wait_for(queue.get(), left)
        except TimeoutError:
            return None
        if match(event):
            return event
    return None


async def gather_limited(calls: list[Awaitable[None]], limit: int = 8) -> None:
    gate = asyncio.Semaphore(limit)

    async def one(call: Awaitable[None]) -> None:
        async with gate:
            await call

    await asyncio.gather(*(one(call) for call in calls))
