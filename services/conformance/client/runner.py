"""Plays the client cases to an adapter and checks its view.

**The adapter protocol** (JSON lines; one process plays every case, one case at a time):

* the kit writes ``{"op": "open", "case", "base", "run_id", "conversation_id", "token",
  "ticket"}``: the client starts reading that run from ``base`` (a bearer ``token`` for
  ``Authorization``, or a stream ``ticket``; either may be used, a new ticket is minted with
  the token at ``POST /v1/runs/{run_id}/stream-tickets``); the adapter answers ``{"ok": true}``;
* ``{"op": "view"}``: the adapter answers ``{"events": N, "view": {…}}`` — ``N`` the SSE events
  its client has handled so far (frames, parts and notices, repeats included), the view as
  :data:`~services.conformance.client.script.VIEW_FIELDS` has it: ``blocks`` (``[block_id,
  revision, status]`` of every block shown, in the order shown), ``bodies`` (block id →
  markdown shown, blocks in conflict left out), ``text`` (the closed answer), ``done``,
  ``state`` (the run's), ``conflict`` (a protocol conflict was told), and if the client checks
  ``stream-summary`` itself, ``verified`` (its D3 check once ``done`` arrived, ``null`` before
  and while undecided); any other field (the reference page's adapter adds the ``errors`` the
  page flagged) is not compared;
* ``{"op": "close"}``: the client stops; ``{"ok": true}``. End of input: the adapter exits.

After each step of a case the kit waits until the server has written every frame and notice
of the run and the adapter's client has handled every event written (the limit is generous),
then compares the view with what Delivery's projection requires (:func:`.script.required_view`)."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import Any

from services.conformance.client.cases import Case, all_cases
from services.conformance.client.script import (
    CHECKED_IF_REPORTED,
    VIEW_FIELDS,
    MemoryView,
    Messages,
    foreign_notice,
    required_view,
)
from services.conformance.client.server import KitServer, Session
from services.conformance.report import Case as Result
from services.conformance.report import Report

CATCH_UP_SECONDS = 15.0
"""How long a client may take to handle what was written (a loaded machine; a client that
never reconnects fails here, with what it missed)."""


class AdapterFailed(Exception):
    pass


class Adapter:
    """The adapter process: JSON lines in, JSON lines out."""

    def __init__(self, command: Sequence[str]) -> None:
        self.command = list(command)
        self.process = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, bufsize=1)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.errors: list[str] = []
        threading.Thread(target=self._read, args=(self.process.stdout, self.lines), daemon=True).start()
        threading.Thread(target=self._drain, daemon=True).start()

    @staticmethod
    def _read(stream: Any, into: queue.Queue[str | None]) -> None:
        for line in stream:
            into.put(line)
        into.put(None)

    def _drain(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.errors = [*self.errors[-40:], line.rstrip()]

    def ask(self, message: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps(message) + "\n")
            self.process.stdin.flush()
        except OSError as broken:
            raise AdapterFailed(f"the adapter is gone ({broken}); stderr: {self.stderr()}") from None
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                raise AdapterFailed(f"no answer to {message['op']} in {timeout:.0f}s; stderr: {self.stderr()}") from None
            if line is None:
                raise AdapterFailed(f"the adapter exited ({self.process.wait()}); stderr: {self.stderr()}")
            line = line.strip()
            if not line.startswith("{"):
                continue  # anything else an adapter prints is its own
            answer = json.loads(line)
            if "error" in answer:
                raise AdapterFailed(f"the adapter says: {answer['error']}")
            return answer

    def stderr(self) -> str:
        return " | ".join(self.errors[-5:])

    def close(self) -> None:
        if self.process.stdin is not None:
            try:
                self.process.stdin.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class Mismatch(Exception):
    pass


def check(session: Session, adapter: Adapter, step: str) -> dict[str, Any]:
    """Wait until the client handled everything written, then compare its view."""
    deadline = time.monotonic() + CATCH_UP_SECONDS
    with session.cond:
        while not session.caught_up():
            if not session.cond.wait(timeout=max(0.0, deadline - time.monotonic())):
                if not session.caught_up():
                    delivered = session.delivered
                    raise Mismatch(f"{step}: the client did not read the stream to its end (frames written "
                                   f"through {delivered['run']} of {session.view.last_frame_id}, notices through "
                                   f"{delivered['notices']} of {session.view.last_notice_id}; "
                                   f"{session.refused} refused requests)")
        required = required_view(session.view)
    while True:
        answer = adapter.ask({"op": "view"})
        with session.cond:
            served = session.served
        if int(answer.get("events", 0)) >= served:
            break
        if time.monotonic() > deadline:
            raise Mismatch(f"{step}: the client handled {answer.get('events')} of the {served} events written")
        with session.cond:  # the next event written or handled: ask again shortly
            session.cond.wait(timeout=0.02)
    while True:
        seen = answer.get("view") or {}
        names = [*VIEW_FIELDS, *(name for name in CHECKED_IF_REPORTED if name in seen)]
        off = [name for name in names if _normal(seen.get(name)) != _normal(required[name])]
        if not off:
            return required
        # A client may check the summary after `done` asynchronously (reading again frames of
        # kinds it does not know, R8): ``null`` there means not decided yet.
        undecided = all(name in CHECKED_IF_REPORTED and seen.get(name) is None for name in off)
        if not undecided or time.monotonic() > deadline:
            raise Mismatch(f"{step}: " + "; ".join(
                f"{name}: required {required[name]!r}, the client shows {seen.get(name)!r}" for name in off))
        with session.cond:  # ask again shortly
            session.cond.wait(timeout=0.02)
        answer = adapter.ask({"op": "view"})


def _normal(value: Any) -> Any:
    return json.loads(json.dumps(value)) if value is not None else None


def play(case: Case, number: int, server: KitServer, adapter: Adapter) -> Result:
    began = time.monotonic()
    run_id, conversation_id = f"run-{number}", f"conv-{number}"
    m = Messages(run_id, conversation_id)
    steps = case.script.build(m)
    session = server.play(MemoryView(run_id, conversation_id))
    path, script = case.path, case.script
    session.grown, session.later = path.grown, path.later
    checked = 0
    opened = False

    def apply(step: list[Any]) -> None:
        with session.cond:
            if path.later and not session.view.ended:
                session.view.later_frame()  # before the step's frames: before any block, between revisions
            session.view.apply(step)
            if path.later and session.view.ended:
                session.view.later_notice()  # nothing follows done in the run: the notices stream
            if case.extra.get("foreign_notice") and session.view.terminal:
                foreign_notice(session.view, "b2")  # interleaved with this run's own notices
            session.cond.notify_all()

    def open_client() -> None:
        nonlocal opened
        with session.cond:
            ticket = session.mint(run_id)
        adapter.ask({"op": "open", "case": case.id, "base": server.url, "run_id": run_id,
                     "conversation_id": conversation_id, "token": session.token, "ticket": ticket})
        opened = True

    try:
        if path.late:
            for step in steps:
                apply(step)
            open_client()
            check(session, adapter, f"after all {len(steps)} steps, read late")
            checked = 1
        else:
            open_client()
            for number_, step in enumerate(steps, 1):
                apply(step)
                check(session, adapter, f"step {number_}")
                checked += 1
                if script.restore_after == number_:
                    restored = MemoryView(run_id, conversation_id)
                    for earlier in steps[:script.restore_to]:
                        restored.apply(earlier)
                    session.restore(restored)
                    check(session, adapter, f"after the store was restored to step {script.restore_to}")
                    checked += 1
                elif path.drop:
                    session.drop(replay=path.replay, notices_replay=case.notices_replay, expire=path.expire)
        seen = (f"{checked} views matched; {session.connections} connections, {session.refused} refused, "
                f"{session.served} events, {session.view.last_frame_id} frames, {session.view.last_notice_id} notices")
        passed = True
    except (Mismatch, AdapterFailed) as failure:
        seen, passed = str(failure), False
    finally:
        server.end()
        if opened:
            try:
                adapter.ask({"op": "close"})
            except AdapterFailed as failure:
                if passed:
                    seen, passed = f"closing: {failure}", False
    return Result(case=case.id, rule=case.rule, passed=passed, seen=seen, family=case.family,
                  seconds=round(time.monotonic() - began, 3))


def run_cases(command: Sequence[str], *, only: str | None = None, cases: Sequence[Case] | None = None) -> Report:
    """Every case (or ``cases``; those whose id contains ``only``) played to one adapter process."""
    cases = [c for c in (all_cases() if cases is None else cases) if only is None or only in c.id]
    report = Report(kit="client", target=" ".join(command))
    server = KitServer()
    adapter = Adapter(command)
    try:
        for number, case in enumerate(cases, 1):
            report.add(play(case, number, server, adapter))
            if adapter.process.poll() is not None:
                for rest in cases[number:]:
                    report.add(Result(case=rest.id, rule=rest.rule, passed=False, family=rest.family,
                                      seen=f"not played: the adapter exited; stderr: {adapter.stderr()}"))
                break
    finally:
        adapter.close()
        server.close()
    return report

