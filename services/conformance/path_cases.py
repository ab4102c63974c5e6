"""The server kit's path cases (D10): whatever stands between Delivery and the client hands the
stream on as written. Each failure names the proxy setting to change."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from services.conformance.kit import Kit, wait_for_event
from services.conformance.scenarios import Runs
from services.conformance.sse import Read, read_stream

BUFFERING = ("the path between buffers the stream: nginx `proxy_buffering off;` for the stream locations (or let "
             "Delivery's `X-Accel-Buffering: no` through: no `proxy_ignore_headers X-Accel-Buffering`); other "
             "proxies and CDNs: turn response buffering off for text/event-stream")
COMPRESSION = ("the path compresses the stream, which holds frames until a compressed block fills: nginx `gzip off;` "
               "for the stream locations (or leave text/event-stream out of `gzip_types`)")
READ_TIMEOUT = ("the path closed an idle stream: nginx `proxy_read_timeout` (and a load balancer's idle timeout) must "
                "be longer than Delivery's keep-alive interval (IMPRINT_SSE_KEEPALIVE_SECONDS)")


class PathCases(Kit):
    # -- the path between -------------------------------------------------------------------------
    async def family_path(self, runs: Runs) -> None:
        ids = self.ids()
        for position in sorted({1, len(ids) // 2, len(ids) - 2}):
            if not 0 < position < ids[-1]:
                continue
            read = await self.read(self.events_url(runs.finished), {"Last-Event-ID": str(position)})
            self.case(f"path/last-event-id-intact/{position}", "D10", read.ids[:1] == [position + 1],
                      f"sent Last-Event-ID {position}, the stream began at {read.ids[:1]}"
                      + ("" if read.ids[:1] == [position + 1] else ": the path drops or alters Last-Event-ID — pass "
                         "the request header through unchanged (nginx does unless `proxy_set_header Last-Event-ID` "
                         "overrides it)"))
        for name, url in (("events", self.events_url(runs.finished)),
                          ("ai-sdk", f"{self.url}/v1/ai-sdk/runs/{runs.finished}/stream")):
            read = await self.read(url, {"Accept-Encoding": "gzip, deflate, br"})
            encoding = read.headers.get("content-encoding", "")
            self.case(f"path/no-compression/{name}", "D10", read.status == 200 and encoding in ("", "identity"),
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
        self.case(case, "D10", good, f"keep-alives at {arrived} s (interval {self.keepalive:g} s), "
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
        self.case("path/headers-arrive", "D10", headers_ok, "the stream's headers arrived" if headers_ok else
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
            self.case(f"path/unbuffered/{step}", "D10", good,
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

