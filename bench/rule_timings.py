"""The rules that carry a time, measured on the real stack (``python -m bench --only rule_timings``).

The tests prove that each behaviour happens, in its order and with its content, and wait for
it with a generous limit; how soon it happens is a figure of the machine, so it is measured
here, a few times, and reported against the bound as a target (median and max, PASS when the
max is within the bound):

* ``stop_s`` (X11): the user's cancel (``POST /v1/runs/{run}/cancel``) → the runtime SDK
  cancelled the agent's model call (a real pydantic-ai ``Agent``, ``tests/e2e/slow_runtime.py``,
  prints the moment); within 2 s;
* ``strike_s`` (D7): a source of a finished run revoked (the broker's acknowledgement) → the
  withdrawal's notice read by a client following the conversation's notices; within 2 s;
* ``queue_s`` (D9, X12): a second question of a conversation admitted while its first answer
  is live (the broker's acknowledgement) → its ``queued`` turn read by a client following the
  conversation stream (what every open tab shows under the live answer); within 2 s;
* ``lease_end_s`` (X10): the runtime SIGKILLed mid-run → its open SSE stream read ``done``
  (the lease lapsed, the Journal closed the run ``runtime_lost``); within the lease + 5 s;
* ``relay_failover_s`` (P14, X2): the active relay of the Publication log, then of the
  Journal log, SIGKILLed → the standby logged ``relay active``; within 5 s (issue 12.3).

One stack serves them all, on a schema and topic prefix of its own (removed afterwards), with
a short lease and the Publication relays as processes of their own; the relays are killed
last."""

from __future__ import annotations

import asyncio
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

LEASE = 3.0
"""The run lease of the measuring stack (X10): short, so a lapse is measured in seconds."""
HEARTBEAT = "1.0"
ROUNDS = {"quick": 2, "full": 5}
ACCOUNT = "acct-rules"
BOUNDS = {"stop_s": ("X11: cancel → the agent's model call cancelled", 2.0),
          "strike_s": ("D7: source revoked → the withdrawal notice read by an open client", 2.0),
          "queue_s": ("D9/X12: a second question admitted → shown queued on the conversation stream", 2.0),
          "lease_end_s": (f"X10: runtime killed → its open stream read `done` (lease {LEASE:g} s + 5 s)", LEASE + 5.0),
          "relay_failover_s": ("P14/X2: active relay killed → the standby active", 5.0)}
ACTIVE = re.compile(r"relay active\s")
CANCELLED = re.compile(r"MODEL CANCELLED (\d+\.\d+)")


def section(settings: Any, results: dict[str, Any], errors: dict[str, str], say: Callable[[str], None]) -> None:
    """Measure every rule timing into ``results["rule_timings"]``; a measurement that fails is
    reported under ``errors["rule_timings.<key>"]`` and the next one runs (a stack that does not
    start, under ``errors["rule_timings"]``)."""
    try:
        _measure(settings, results, errors, say)
    except Exception as error:  # noqa: BLE001 — report it; the other sections' figures stand
        errors["rule_timings"] = f"{type(error).__name__}: {error}"


def _measure(settings: Any, results: dict[str, Any], errors: dict[str, str], say: Callable[[str], None]) -> None:
    from services.common.backends import backend_for
    from services.common.launcher import Launcher

    rounds = ROUNDS.get(results.get("mode", "full"), ROUNDS["full"])
    s = settings.model_copy(update={
        "database_schema": f"{settings.database_schema}_rules", "topic_prefix": f"{settings.topic_prefix}rules.",
        "group_prefix": f"{settings.group_prefix}-rules", "state_dir": settings.state_dir / "rules",
        "http_port": _free_port(), "run_lease_seconds": LEASE, "publication_relay": "separate",
        "sse_keepalive_seconds": 0.5})
    measured = results["rule_timings"] = {"rounds": rounds, "lease_s": LEASE}
    backend_for(s).prepare()
    asyncio.run(_topics(s, create=True))
    stack = Launcher(s, grace=20.0)
    try:
        for part in ("publication", "journal", "journal-relay", "delivery"):
            stack.start(part)
        stack.start("relay", name="relay-a")
        stack.start("relay", name="relay-b")
        stack.wait_ready(("publication", "journal", "delivery"), timeout=120)
        probe = _Probe(s, stack, _token(s))
        for key, measure in (("stop_s", probe.stop), ("strike_s", probe.strike), ("queue_s", probe.queue),
                             ("lease_end_s", probe.lease_end),
                             ("relay_failover_s", probe.relay_failover)):  # the relays last: they are killed
            say(f"rule timing {key}: {BOUNDS[key][0]}, {rounds} rounds")
            try:
                samples = measure(rounds)
            except Exception as error:  # noqa: BLE001 — report it and go on
                errors[f"rule_timings.{key}"] = f"{type(error).__name__}: {error}"
                continue
            measured[key] = {"median": round(statistics.median(samples), 3), "max": round(max(samples), 3),
                             "samples": [round(v, 3) for v in samples], "bound": BOUNDS[key][1]}
            say(f"  median {measured[key]['median']} s, max {measured[key]['max']} s (bound {BOUNDS[key][1]:g} s)")
    finally:
        stack.stop_all()
        asyncio.run(_topics(s, create=False))
        _drop_schema(s)
        shutil.rmtree(s.state_dir, ignore_errors=True)


def targets(results: dict[str, Any]) -> list[tuple[str, str, Any, float, str, str]]:
    """The target rows (``report.targets``' ``add`` arguments): the max of the rounds against the
    rule's bound, the median beside it in the name."""
    measured = results.get("rule_timings") or {}
    rows = []
    for key, (name, bound) in BOUNDS.items():
        row = measured.get(key)
        label = f"Rule timing: {name}, max of {measured.get('rounds', '?')}" + (
            f" (median {row['median']} s)" if row else "")
        rows.append((key, label, row["max"] if row else None, bound, "lower", "s"))
    return rows


class _Probe:
    """Drives the measuring stack from outside: Kafka, HTTP, the runtime as a process."""

    def __init__(self, settings: Any, stack: Any, token: str) -> None:
        self.s, self.stack, self.token = settings, stack, token
        self.base = f"http://{settings.http_host}:{settings.http_port}"
        self.headers = {"Authorization": f"Bearer {token}"}

    def _line(self, name: str, pattern: str | re.Pattern[str], timeout: float = 90) -> re.Match[str]:
        compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = compiled.search(self.stack.log(name))
            if found:
                return found
            time.sleep(0.02)
        raise RuntimeError(f"{name} never logged {compiled.pattern!r}: {self.stack.tail(name, 1500)}")

    def _run_known(self, run_id: str) -> None:
        deadline = time.monotonic() + 60
        while httpx.get(f"{self.base}/v1/runs/{run_id}", headers=self.headers).status_code != 200:
            if time.monotonic() > deadline:
                raise RuntimeError(f"Delivery never learned run {run_id}")
            time.sleep(0.1)

    def _agent(self, run_id: str) -> str:
        """A real agent's runtime on ``run_id``, its model call in flight."""
        self.stack.start_command(run_id, "tests.e2e.slow_runtime", [run_id, ACCOUNT, HEARTBEAT])
        self._line(run_id, "MODEL PRODUCING")
        self._run_known(run_id)
        return run_id

    def stop(self, rounds: int) -> list[float]:
        return [self._stop(i) for i in range(rounds)]

    def _stop(self, i: int) -> float:
        run_id = self._agent(f"run-stop-{i}")
        asked = time.time()
        answer = httpx.post(f"{self.base}/v1/runs/{run_id}/cancel", headers=self.headers, json={})
        if answer.status_code != 202:
            raise RuntimeError(f"cancel answered {answer.status_code}: {answer.text}")
        cancelled = float(self._line(run_id, CANCELLED, timeout=60).group(1))
        self.stack.wait_exit(run_id, timeout=60)
        return cancelled - asked

    def lease_end(self, rounds: int) -> list[float]:
        return [self._lease_end(i) for i in range(rounds)]

    def _lease_end(self, i: int) -> float:
        run_id = self._agent(f"run-lease-{i}")
        stream = _Stream(f"{self.base}/v1/runs/{run_id}/events", self.headers, until="[DONE]")
        stream.connected.wait(30)
        self.stack.kill(run_id)
        killed = time.monotonic()
        ended = stream.ended(LEASE + 120)
        return ended - killed

    def strike(self, rounds: int) -> list[float]:
        return [self._strike(i) for i in range(rounds)]

    def _strike(self, i: int) -> float:
        from imprint.contracts.runtime import AnswerPart
        from imprint.contracts.sources import SourceRevoked
        from imprint.contracts.topics import Topic
        from tests.support.kafka import produce
        from tests.support.runs import admitted, completed, granted, opened

        run_id, source = f"run-strike-{i}", f"src-private-rules-{i}"
        asyncio.run(produce(self.s, Topic.RUNTIME,
                            *opened(admitted(run_id, account_id=ACCOUNT, question="When do swallows return?")),
                            granted(run_id, source, scope="private", owner_account_id=ACCOUNT, title="Diary"),
                            AnswerPart(run_id=run_id, turn_id="turn-1", tool_call_id="call-1", sealed=True,
                                       arguments={"markdown": f"The diary saw them on the ninth [[cite:{source}]]."}),
                            completed(run_id, "Swallows come back in April.")))
        deadline = time.monotonic() + 60
        while True:
            answer = httpx.get(f"{self.base}/v1/runs/{run_id}/answer", headers=self.headers)
            if answer.status_code == 200 and answer.json()["terminal"] and answer.json()["blocks"]:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"run {run_id} never finished with its block")
            time.sleep(0.1)
        notices = _Stream(f"{self.base}/v1/conversations/conv-{run_id}/notices", self.headers, until="data:")
        if not notices.following.wait(30):
            raise RuntimeError("the notices stream never followed its conversation")
        revoked = asyncio.run(_acknowledged(self.s, Topic.SOURCES, SourceRevoked(
            source_id=source, account_id=ACCOUNT, reason="the owner withdrew it")))
        return notices.ended(60) - revoked

    def queue(self, rounds: int) -> list[float]:
        return [self._queue(i) for i in range(rounds)]

    def _queue(self, i: int) -> float:
        from imprint.contracts.topics import Topic
        from tests.support.kafka import produce
        from tests.support.runs import admitted, opened

        conversation, first, second = f"conv-queue-{i}", f"run-queue-{i}-a", f"run-queue-{i}-b"
        asyncio.run(produce(self.s, Topic.RUNTIME, *opened(admitted(
            first, account_id=ACCOUNT, question="How deep is the Baltic?", conversation_id=conversation))))
        self._run_known(first)
        turns = _Stream(f"{self.base}/v1/conversations/{conversation}/events", self.headers, until="data:",
                        containing='"kind":"queued"')
        if not turns.following.wait(30):
            raise RuntimeError("the conversation stream never followed its conversation")
        asked = asyncio.run(_acknowledged(self.s, Topic.RUNTIME, admitted(
            second, account_id=ACCOUNT, question="And the North Sea?", conversation_id=conversation)))
        return turns.ended(60) - asked

    def relay_failover(self, rounds: int) -> list[float]:
        """Each round kills the active relay of each log; the killed one comes back as the standby."""
        samples: list[float] = []
        pairs = {"publication": ["relay-a", "relay-b"], "journal": ["journal", "journal-relay"]}
        for log, names in pairs.items():
            for i in range(rounds):
                active = next((n for n in names if ACTIVE.search(self.stack.log(n))), None)
                if active is None:
                    self._line(names[0], ACTIVE, timeout=60)
                    active = names[0]
                standby = next(n for n in names if n != active)
                self._line(standby, "relay standing by", timeout=60)
                part = self.stack.children[active].part
                self.stack.kill(active)
                killed = time.monotonic()
                self._line(standby, ACTIVE, timeout=60)
                samples.append(time.monotonic() - killed)  # an upper bound: includes the polling of its log
                again = f"{log}-relay-{i}" if part != "journal" else f"journal-{i}"
                self.stack.start(part, name=again)
                names[:] = [standby, again]
        return samples


class _Stream(threading.Thread):
    """One SSE stream read on its own thread until a line starting with ``until`` arrives (its
    monotonic time is :meth:`ended`); ``connected`` once the response began, ``following`` at its
    first keep-alive comment (the stream follows its feed live)."""

    def __init__(self, url: str, headers: dict[str, str], until: str, containing: str = "") -> None:
        super().__init__(daemon=True)
        self.url, self.headers, self.until = url, {**headers, "Accept": "text/event-stream"}, until
        self.containing = containing
        """Only a line that also contains this ends the read (a conversation stream's turn of one kind)."""
        self.connected, self.following, self.done = threading.Event(), threading.Event(), threading.Event()
        self.at: float | None = None
        self.start()

    def run(self) -> None:
        with httpx.stream("GET", self.url, headers=self.headers, timeout=httpx.Timeout(180, connect=5)) as response:
            self.connected.set()
            for line in response.iter_lines():
                if line.startswith(":"):
                    self.following.set()
                elif (line.startswith(self.until) or line == f"data: {self.until}") and self.containing in line:
                    self.at = time.monotonic()
                    self.done.set()
                    return

    def ended(self, timeout: float) -> float:
        if not self.done.wait(timeout) or self.at is None:
            raise RuntimeError(f"{self.url} never read {self.until!r}")
        return self.at


async def _acknowledged(settings: Any, topic: Any, message: Any) -> float:
    """Send ``message`` to ``topic``; the moment the broker acknowledged it (it exists from then)."""
    from aiokafka import AIOKafkaProducer

    from imprint.contracts.registry import encode

    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, enable_idempotence=True)
    await producer.start()
    try:
        await producer.send_and_wait(settings.topic(topic), encode(message), key=message.key.encode(),
                                     headers=[("type", message.type.encode())])
        return time.monotonic()
    finally:
        await producer.stop()


async def _topics(settings: Any, *, create: bool) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from imprint.contracts.topics import Topic

    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        if create:
            await admin.create_topics([NewTopic(settings.topic(t), num_partitions=settings.topic_partitions,
                                                replication_factor=1) for t in Topic])
        else:
            await admin.delete_topics([settings.topic(t) for t in Topic])
    except Exception:  # noqa: BLE001 — deleting is cleanup only
        if create:
            raise
    finally:
        await admin.close()


def _drop_schema(settings: Any) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(settings.database_url, autocommit=True) as connection:
        connection.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(settings.database_schema)))


def _token(settings: Any) -> str:
    """Through the CLI (``imprint token``), like an operator would."""
    from services.common.launcher import child_environment

    out = subprocess.run([sys.executable, "-m", "services.cli", "token", "--account", ACCOUNT],
                         env=child_environment(settings), capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
