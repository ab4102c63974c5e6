"""The server kit's access cases: stream tickets (scope, expiry, reuse), isolation (404 after the
same wait, D6), receipts (D4), CORS for an allowed and a refused origin, and cancel (D2, X11)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable
from typing import Any

import httpx

from services.conformance.kit import REFUSED_ORIGIN, Kit, with_query
from services.conformance.scenarios import Runs
from services.conformance.sse import ended_with_done


class AccessCases(Kit):
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

