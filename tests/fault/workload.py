"""A steady load for the fault tier: many runs proposing answer blocks on Kafka, source
revocations in the middle of the stream, and one or more real SSE clients per run that
reconnect with ``Last-Event-ID`` whenever their connection breaks (to the other
Delivery instance when there are several).

The producer is the runtime's stand-in: a message is *accepted* once the broker
acknowledged it (idempotent producer, acks=all). A send that fails is sent again,
unchanged, until it is acknowledged — so a proposal may reach Kafka twice, which
Publication must absorb (P15). What was accepted, and every frame each client read,
is kept for :func:`tests.fault.invariants.check_invariants`."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from imprint.contracts.base import Message
from imprint.contracts.registry import encode
from imprint.contracts.runtime import (
    AnswerPart,
    EvidenceGranted,
    QuestionConditionSet,
    RunAdmitted,
    RunCompleted,
    RunQueued,
    RunStarted,
)
from imprint.contracts.sources import SourceRevoked
from imprint.contracts.topics import Topic
from services.common.settings import Settings
from services.delivery.auth import mint_token
from tests.support.sse import SSE, parse_sse

KEPT_SOURCE = "src-kept"
REVOKED_SOURCES = ("src-revoked-1", "src-revoked-2")


# --------------------------------------------------------------------------- settings


def private_settings(bootstrap: str, database_url: str, tmp_path: Path, *, partitions: int = 3,
                     replication: int = 1, min_insync: int | None = None) -> Settings:
    """Like the ``isolated`` fixture, on the given servers: its own topic prefix (with
    ``partitions`` partitions and ``replication`` replicas), schema and HTTP port."""
    from services.common.backends import backend_for
    from tests.support.net import free_port

    tag = uuid.uuid4().hex[:10]
    settings = Settings(
        kafka_bootstrap=bootstrap, database_url=database_url, database_schema=f"t_{tag}",
        topic_prefix=f"t{tag}.", group_prefix=f"imprint-{tag}", state_dir=tmp_path / "state",
        http_host="127.0.0.1", http_port=free_port(), topic_partitions=partitions,
    )
    backend_for(settings).prepare()
    asyncio.run(create_topics(settings, partitions=partitions, replication=replication, min_insync=min_insync))
    return settings


async def create_topics(settings: Settings, *, partitions: int, replication: int, min_insync: int | None) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        configs = {} if min_insync is None else {"min.insync.replicas": str(min_insync)}
        await admin.create_topics([NewTopic(settings.topic(t), num_partitions=partitions,
                                            replication_factor=replication, topic_configs=configs) for t in Topic])
    finally:
        await admin.close()


# --------------------------------------------------------------------------- the load


@dataclass(frozen=True)
class Proposal:
    run_id: str
    candidate_id: str
    cites: str | None
    markdown: str


@dataclass
class RunPlan:
    run_id: str
    account_id: str
    index: int


class Workload:
    """``runs`` runs of ``parts`` single-block proposals each, sent round-robin with
    ``pace`` seconds between sends; the two revocable sources are revoked once 40 % and
    75 % of the proposals were accepted. ``clients_per_run`` SSE readers per run."""

    def __init__(self, settings: Settings, delivery_urls: Sequence[str], *, runs: int = 6, parts: int = 12,
                 pace: float = 0.08, clients_per_run: int = 1, tag: str | None = None) -> None:
        self.settings = settings
        self.delivery_urls = list(delivery_urls)
        self.parts = parts
        self.pace = pace
        tag = tag or uuid.uuid4().hex[:6]
        self.runs = [RunPlan(f"run-{tag}-{i}", ("acct-a", "acct-b")[i % 2], i) for i in range(runs)]
        self.tokens = {a: mint_token(settings, a) for a in {r.account_id for r in self.runs}}
        self.accepted: list[Proposal] = []
        self.revoked: list[str] = []
        self.send_retries = 0
        self.produced = 0
        self.finished_sending = threading.Event()
        self.error: BaseException | None = None
        self.clients = [SseClient(self, run, k) for run in self.runs for k in range(clients_per_run)]
        self._producer = threading.Thread(target=self._run_producer, name="workload-producer", daemon=True)
        self._total = runs * parts
        self._proposed = 0
        self._wind_down = threading.Event()

    # ------------------------------------------------------------------ control
    def start(self) -> Workload:
        self._producer.start()
        for client in self.clients:
            client.start()
        return self

    def wait_accepted(self, fraction: float, timeout: float = 120) -> None:
        """Block until ``fraction`` of the proposals were accepted on Kafka (mid-stream)."""
        deadline = time.monotonic() + timeout
        while len(self.accepted) < fraction * self._total:
            if self.error is not None:
                raise AssertionError(f"the load producer failed: {self.error!r}")
            if time.monotonic() > deadline:
                raise AssertionError(f"only {len(self.accepted)} of {self._total} proposals accepted")
            time.sleep(0.05)

    def finish(self, timeout: float = 180) -> None:
        """Wait until everything was sent and every client read its run's ``done``."""
        deadline = time.monotonic() + timeout
        self._producer.join(max(1.0, deadline - time.monotonic()))
        if self._producer.is_alive() or self.error is not None:
            raise AssertionError(f"the load producer did not finish ({len(self.accepted)} accepted): {self.error!r}")
        for client in self.clients:
            client.join(max(1.0, deadline - time.monotonic()))
        waiting = [c.describe() for c in self.clients if not c.done]
        for client in self.clients:
            client.stop.set()
        if waiting:
            raise AssertionError("clients never read done:\n" + "\n".join(waiting))

    def stop(self) -> None:
        for client in self.clients:
            client.stop.set()

    def wind_down(self) -> None:
        """Propose nothing more; complete every run (a time-bounded load, e.g. the soak)."""
        self._wind_down.set()

    @property
    def proposals_expected(self) -> int:
        """How many proposals the load makes (fewer than planned once wound down)."""
        return self._proposed if self._wind_down.is_set() else self._total

    # ------------------------------------------------------------------ script
    def script(self) -> Iterator[tuple[Topic, Message, Proposal | None]]:
        for run in self.runs:
            r = run.run_id
            yield Topic.RUNTIME, RunAdmitted(run_id=r, account_id=run.account_id, conversation_id=f"conv-{r}",
                                             message_id=f"msg-{r}", question="What changed this year?",
                                             qcs=QuestionConditionSet(qcs_id=f"qcs-{r}")), None
            yield Topic.RUNTIME, RunQueued(run_id=r), None
            yield Topic.RUNTIME, RunStarted(run_id=r), None
            for source in (KEPT_SOURCE, *REVOKED_SOURCES):
                yield Topic.RUNTIME, EvidenceGranted(run_id=r, source_id=source, scope="public",
                                                     owner_account_id="publisher", title=f"about {source}"), None
        revoke_at = {int(0.40 * self._total): REVOKED_SOURCES[0], int(0.75 * self._total): REVOKED_SOURCES[1]}
        n = 0
        for k in range(self.parts):
            if self._wind_down.is_set():
                break
            for run in self.runs:
                cites = (None, KEPT_SOURCE, *REVOKED_SOURCES)[k % 4]
                markdown = f"{run.run_id}: finding {k}" + (f" [[cite:{cites}]]." if cites else ".")
                call = f"{run.run_id}-k{k}"
                proposal = Proposal(run.run_id, f"tool:{call}", cites, markdown)
                yield Topic.RUNTIME, AnswerPart(run_id=run.run_id, turn_id="turn-1", tool_call_id=call,
                                                sealed=True, arguments={"markdown": markdown}), proposal
                n += 1
                self._proposed = n
                if n in revoke_at:
                    yield Topic.SOURCES, SourceRevoked(source_id=revoke_at[n], reason="withdrawn by publisher"), None
        for run in self.runs:
            yield Topic.RUNTIME, RunCompleted(run_id=run.run_id, outcome="answered",
                                              answer_text=f"Answer of {run.run_id}."), None

    # ---------------------------------------------------------------- producing
    def _run_producer(self) -> None:
        try:
            asyncio.run(self._produce())
        except BaseException as error:  # surfaced by wait_accepted/finish
            self.error = error
        finally:
            self.finished_sending.set()

    async def _produce(self) -> None:
        producer: AIOKafkaProducer | None = None
        try:
            for topic, message, proposal in self.script():
                while True:
                    try:
                        if producer is None:
                            producer = AIOKafkaProducer(bootstrap_servers=self.settings.kafka_bootstrap,
                                                        enable_idempotence=True, acks="all",
                                                        request_timeout_ms=10_000)
                            await asyncio.wait_for(producer.start(), 20)
                        key: str = message.key  # type: ignore[attr-defined]
                        await asyncio.wait_for(producer.send_and_wait(
                            self.settings.topic(topic), encode(message), key=key.encode(),
                            headers=[("type", message.type.encode())]), 20)
                        break
                    except Exception:
                        self.send_retries += 1
                        if producer is not None:
                            try:
                                await asyncio.wait_for(producer.stop(), 10)
                            except Exception:
                                pass
                        producer = None
                        await asyncio.sleep(0.5)
                self.produced += 1
                if proposal is not None:
                    self.accepted.append(proposal)
                if isinstance(message, SourceRevoked):
                    self.revoked.append(message.source_id)
                await asyncio.sleep(self.pace)
        finally:
            if producer is not None:
                await producer.stop()


# --------------------------------------------------------------------------- SSE clients


@dataclass
class SseClient:
    """One viewer of one run: reads ``/v1/runs/{run}/events`` until ``done``; on any
    break it reconnects with the highest id it holds as ``Last-Event-ID``, to the next
    Delivery instance in the list."""

    workload: Workload
    run: RunPlan
    number: int
    frames: list[tuple[int | None, str, Any]] = field(default_factory=list)
    connections: int = 0
    breaks: int = 0
    done: bool = False
    stop: threading.Event = field(default_factory=threading.Event)
    urls_used: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._read_all, name=f"sse-{self.run.run_id}-{self.number}",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    @property
    def ids(self) -> list[int]:
        return [i for i, _, _ in self.frames if i is not None]

    @property
    def last_id(self) -> int:
        return max(self.ids, default=0)

    def describe(self) -> str:
        return (f"{self.run.run_id}#{self.number}: {len(self.frames)} frames, last id {self.last_id}, "
                f"{self.connections} connections, {self.breaks} breaks, last events "
                f"{[e for _, e, _ in self.frames[-5:]]}")

    def _read_all(self) -> None:
        urls = self.workload.delivery_urls
        attempt = self.run.index + self.number
        token = self.workload.tokens[self.run.account_id]
        while not self.stop.is_set() and not self.done:
            base = urls[attempt % len(urls)]
            attempt += 1
            try:
                self._read_once(base, token)
            except (httpx.HTTPError, OSError, ValueError):
                self.breaks += 1
            if not self.done:
                self.stop.wait(0.3)

    def _read_once(self, base: str, token: str) -> None:
        headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
        if self.last_id:
            headers["Last-Event-ID"] = str(self.last_id)
        with httpx.stream("GET", f"{base}/v1/runs/{self.run.run_id}/events", headers=headers,
                          timeout=httpx.Timeout(20.0, connect=3.0)) as response:
            if response.status_code != 200:  # 404 until Delivery learned the run, 503 while it cannot read
                return
            self.connections += 1
            self.urls_used.append(base)

            def on_frame(frame: SSE) -> bool:
                data: Any = frame.data if frame.event == "done" else json.loads(frame.data)
                self.frames.append((frame.id, frame.event, data))
                self.done = frame.event == "done"
                return self.done or self.stop.is_set()

            parse_sse(response.iter_lines(), on_frame)
            if self.done or self.stop.is_set():
                return
        self.breaks += 1  # the server ended the stream before done

    def shown_blocks(self) -> dict[str, dict[str, Any]]:
        """What this client ends up showing, folded as the browser client folds it
        (services/delivery/static/app.js, D2): ``blocks[block_id] = block`` for every
        block-carrying frame in order; a skeleton frame (stored body stripped) marked
        ``withdrawn`` or ``purged`` removes the block, a ``superseded`` one changes nothing."""
        shown: dict[str, dict[str, Any] | None] = {}
        for _, event, data in self.frames:
            if not isinstance(data, dict) or "block_id" not in data:
                continue
            if data.get("withdrawn") or data.get("purged"):
                shown[data["block_id"]] = None
            elif "block" in data and not data.get("superseded"):
                shown[data["block_id"]] = data["block"]
        return {b: v for b, v in shown.items() if v is not None}
