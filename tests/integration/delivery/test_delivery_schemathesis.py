"""Hostile input at the HTTP edge: schemathesis against Delivery's OpenAPI document (D6, D1).

A real Delivery (uvicorn on 127.0.0.1, Kafka, its store on each backend) serves a seeded account's
run and conversation. The document is FastAPI's own, the one Delivery serves at
``/openapi.json``, taken from the running app object. For every operation schemathesis generates requests that fit the schema
and requests that do not (bounded: ``--fuzz-requests`` per backend, 5,000 by default, spread
over the operations; no shrinking), sent by :data:`SENDERS` threads, and each is sent:

* as generated, with the owner's token;
* with the path's run or conversation id replaced by the seeded one, with the owner's
  token (so the generated query, headers and bodies reach the code behind the 404);
* with the seeded id and another account's token, and with an id that never existed
  and the owner's token: the two answers must be the same (D6: another account's
  run is indistinguishable from a missing one).

No response may be a server error (5xx), and none may carry a Python traceback. A second
account's finished run is seeded too: no response to one account may carry words only the
other's run holds (D6). Every failure is collected with its curl command, so one run
reports them all; the counts are printed with the fuzz tier's (``fuzz`` property)."""

from __future__ import annotations

import re
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.generation import GenerationMode

from services.common.settings import Settings
from tests.integration.delivery.support import Delivery, start_delivery
from tests.support.delivery_builders import closed, published, running, settled

pytestmark = [pytest.mark.integration, pytest.mark.fuzz, pytest.mark.timeout(600)]

RUN, CONVERSATION = "run-fuzz", "conv-run-fuzz"
OWNER, STRANGER = "acct-1", "acct-2"
SEEDED = {"run_id": RUN, "conversation_id": CONVERSATION}
THEIRS = "run-fuzz-theirs"
SECRET = {OWNER: "owner-secret-5f1c", STRANGER: "stranger-secret-9a7e"}
"""Words only each account's run holds: a response to the other account must never carry them."""
SENDERS = 16
"""Requests in flight at once: most of a request's time is the server waiting (a stream's
open wait, a followed stream's read), not the CPU."""


FOLLOWED = ("/v1/conversations/{conversation_id}/notices", "/v1/ai-sdk/conversations/{conversation_id}/notices",
            "/v1/conversations/{conversation_id}/events", "/v1/ai-sdk/conversations/{conversation_id}/events")
"""Streams that never end by themselves (D7, D9: a conversation's notices and its stream are
followed until the client leaves): read for a moment, which is all a status and a first event need.
Each such request costs that moment, and they all share one response (the conversation's feed
stream) over a conversation id, a position and a ticket: a few examples each (:data:`FOLLOWED_EXAMPLES`)."""
FOLLOWED_EXAMPLES = 6


def seed(delivery: Delivery) -> None:
    """A finished run of each account (a stream ends after ``done``, so the SSE operation returns)."""
    delivery.feeder.send(running(RUN), published(RUN, "b1", 1, f"First block {SECRET[OWNER]}.", 1),
                         published(RUN, "b2", 1, "Second block.", 2), settled(RUN), closed(RUN, SECRET[OWNER]))
    delivery.feeder.send(running(THEIRS, STRANGER), published(THEIRS, "t1", 1, f"Their block {SECRET[STRANGER]}.", 1),
                         settled(THEIRS), closed(THEIRS, SECRET[STRANGER], account=STRANGER))


@pytest.fixture
def delivery(isolated: Settings) -> Iterator[Delivery]:
    """The package's Delivery (``conftest.py``), its POST rate limit out of the way: a request
    the limiter answers (429) never reaches the code behind it."""
    settings = isolated.model_copy(update={"sse_keepalive_seconds": 0.5, "stream_open_wait_seconds": 0.1})
    yield from start_delivery(settings, rate_limit=(1_000_000, 60.0))


def operations(schema: Any) -> list[Any]:
    return [result.ok() for result in schema.get_all_operations()]


def examples_per_operation(schema: Any, requests_wanted: int) -> int:
    """Examples per operation and mode for about ``requests_wanted`` requests: an operation
    with a run or conversation id sends four requests per example (see the module's doc); a
    followed stream sends its :data:`FOLLOWED_EXAMPLES`."""
    def modes(op: Any) -> int:  # a path's free string has no negative case; a query, header or body has
        return 2 if len(op.query) or len(op.headers) or len(op.body) else 1

    def sends(op: Any) -> int:
        return modes(op) * (4 if any(f"{{{n}}}" in op.path for n in SEEDED) else 1)

    followed = sum(sends(op) * FOLLOWED_EXAMPLES for op in operations(schema) if op.path in FOLLOWED)
    per_example = sum(sends(op) for op in operations(schema) if op.path not in FOLLOWED)
    return max((requests_wanted - followed) // per_example + 1, 5)


@pytest.mark.rule("D6")
@pytest.mark.rule("D1")
def test_delivery_survives_schemathesis_without_a_server_error(delivery: Delivery, fuzz_requests: int,
                                                              record_property: Any) -> None:
    seed(delivery)
    schema = schemathesis.openapi.from_dict(delivery.app.openapi())
    tokens = {OWNER: delivery.token(OWNER), STRANGER: delivery.token(STRANGER)}
    examples = examples_per_operation(schema, fuzz_requests)
    sessions = threading.local()
    lock = threading.Lock()
    failures: list[str] = []
    sent: Counter[str] = Counter()
    statuses: Counter[int] = Counter()
    no_negative: list[str] = []

    def send(case: Any, account: str, label: str) -> requests.Response:
        if not hasattr(sessions, "session"):
            sessions.session = requests.Session()
        headers = {"Authorization": f"Bearer {tokens[account]}"}
        if case.operation.path in FOLLOWED:  # its status and first bytes (a frame or a keep-alive), then the client leaves
            with sessions.session.request(**case.as_transport_kwargs(delivery.url, headers), stream=True,
                                          timeout=(10, 30)) as response:
                text = next(response.iter_content(4096), b"").decode("utf-8", "replace")
        else:
            response = case.call(base_url=delivery.url, session=sessions.session, headers=headers, timeout=(10, 30))
            text = response.text
        other = SECRET[STRANGER if account == OWNER else OWNER]
        with lock:
            sent[label] += 1
            statuses[response.status_code] += 1
            if response.status_code >= 500 or re.search(r"Traceback \(most recent call last\)", text):
                failures.append(f"{response.status_code} {label}: {case.as_curl_command()}")
            if other in text:
                failures.append(f"D6 leak: {account} was shown another account's run ({label}): {case.as_curl_command()}")
        return response

    def exercise(operation: Any, mode: Any, names: list[str], case: Any) -> None:
        label = f"{operation.method.upper()} {operation.path} [{mode.value}]"
        send(case, OWNER, label)
        if not names:
            return
        case.path_parameters = {**(case.path_parameters or {}), **{n: SEEDED[n] for n in names}}
        send(case, OWNER, label + " seeded")
        foreign = send(case, STRANGER, label + " foreign")
        case.path_parameters = {**case.path_parameters, **{n: "never-existed" for n in names}}
        missing = send(case, OWNER, label + " missing")
        if foreign.status_code != missing.status_code and 429 not in (foreign.status_code, missing.status_code):
            with lock:
                failures.append(f"D6 {label}: another account's id answers {foreign.status_code}, "
                                f"a missing id {missing.status_code}: {case.as_curl_command()}")

    # Cases are generated here (hypothesis, one thread) and sent by SENDERS threads.
    with ThreadPoolExecutor(SENDERS) as senders:
        pending = []
        for operation in operations(schema):
            names = [name for name in SEEDED if name in (operation.path_parameters or {})
                     or f"{{{name}}}" in operation.path]
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

                def generator(operation: Any, mode: Any, names: list[str]) -> Callable[[], None]:
                    @settings(max_examples=min(examples, FOLLOWED_EXAMPLES) if operation.path in FOLLOWED else examples,
                              deadline=None, database=None, derandomize=True,
                              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
                    @given(case=operation.as_strategy(generation_mode=mode))
                    def generate(case: Any) -> None:
                        pending.append(senders.submit(exercise, operation, mode, names, case))

                    return generate

                try:
                    generator(operation, mode, names)()
                except Unsatisfiable:  # an operation without inputs has no negative cases
                    assert mode is GenerationMode.NEGATIVE, operation.path
                    no_negative.append(f"{operation.method.upper()} {operation.path}")
        for future in pending:
            future.result()
    session = requests.Session()
    owner = tokens[OWNER]

    # What the document cannot describe: the bearer token and the SSE resume header.
    hostile_ids = ["9" * 400, "-0", "\u0663", "7 ", "0x10", "1_000", "+5", "NaN", "9223372036854775808"]
    for value in hostile_ids:
        response = session.get(f"{delivery.url}/v1/runs/{RUN}/events", timeout=20,
                               headers={"Authorization": f"Bearer {owner}", "Last-Event-ID": value.encode()})
        sent["GET /v1/runs/{run_id}/events Last-Event-ID"] += 1
        statuses[response.status_code] += 1
        if response.status_code >= 500:
            failures.append(f"{response.status_code} Last-Event-ID {value!r}")
    forged = [owner[:-2] + ("AA" if not owner.endswith("AA") else "BB"), "a.b.c", "x" * 6000,
              "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhY2N0LTEiLCJleHAiOjk5OTk5OTk5OTl9.", owner + " " + owner]
    for token in forged:
        for path in (f"/v1/runs/{RUN}", f"/v1/operator/runs/{RUN}/timeline"):
            response = session.get(f"{delivery.url}{path}", headers={"Authorization": f"Bearer {token}"}, timeout=20)
            sent["forged bearer"] += 1
            statuses[response.status_code] += 1
            if response.status_code not in (401, 431):
                failures.append(f"{response.status_code} forged bearer {token[:20]!r} on {path}")

    backend = "postgres" if delivery.settings.database_url else "sqlite"
    summary = (f"schemathesis on Delivery ({backend}): {sum(sent.values())} requests over {len(operations(schema))} "
               f"operations ({examples} examples per operation and mode); statuses {dict(sorted(statuses.items()))}")
    record_property("fuzz", summary)
    print(f"{summary}; no negative inputs for {no_negative}")
    for label, count in sorted(sent.items()):
        print(f"  {count:4d}  {label}")
    assert sum(sent.values()) >= fuzz_requests * 0.8, f"only {sum(sent.values())} requests of {fuzz_requests}"
    assert not failures, "\n".join(failures[:20])
