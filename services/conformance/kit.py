"""The server kit's engine: what every family of cases shares — the deployment's address and
token, the runs (made through the runtime SDK, or the one pointed at), recording a case, the
requests a client makes, and the order the families run in (:mod:`services.conformance.server`)."""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import jwt

from services.common.settings import get_settings
from services.conformance.report import Case, Report
from services.conformance.scenarios import Runs, Scenario
from services.conformance.sse import Read, read_stream

FAMILIES = ("sse", "frames", "resume", "reset", "end", "tickets", "isolation", "receipts", "ai-sdk", "notices",
            "cors", "path", "cancel")
SAFE_REASONS = frozenset({"empty_body", "malformed_block", "not_publishable", "invalid_target", "quota_exceeded"})
WITHDRAWAL_CAUSES = frozenset({"source_revoked", "source_tombstoned", "conversation_deleted", "source_rejected",
                               "withdrawn"})
REFUSED_ORIGIN = "https://conformance-refused.invalid"


class Kit:
    """One run of the server kit: the families (:mod:`.stream_cases`, :mod:`.access_cases`,
    :mod:`.path_cases`) are its methods ``family_<name>``, run in :data:`FAMILIES` order."""

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

