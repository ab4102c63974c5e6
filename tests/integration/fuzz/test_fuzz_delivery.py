"""The Kafka fuzz tier on Delivery's topics (publication, runs): see ``barrage.py``.

Valid messages interleaved: a run's transition to running, a committed block of a running
run; each run must read (``GET /v1/runs/{run_id}``, its owner's token) as the reference run
the same message made before the barrage reads."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from imprint.contracts.topics import Topic
from services.common.settings import Settings
from services.delivery.auth import mint_token
from tests.integration.fuzz import seeds
from tests.integration.fuzz.barrage import ACCOUNT, BASE_RUN, Part, Plan, fuzz
from tests.support import delivery_builders as view

pytestmark = [pytest.mark.integration, pytest.mark.fuzz, pytest.mark.timeout(600)]


@contextmanager
def http(settings: Settings) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"http://{settings.http_host}:{settings.http_port}", timeout=30,
                      headers={"Authorization": f"Bearer {mint_token(settings, ACCOUNT)}"}) as client:
        yield client


def shown(client: httpx.Client, m: Any) -> tuple[int, dict[str, Any]]:
    """The run as its owner reads it, its ids left out (they differ from the reference's)."""
    response = client.get(f"/v1/runs/{m.run_id}")
    body = response.json() if response.status_code == 200 else {}
    return response.status_code, {k: v for k, v in body.items() if k not in {"run_id", "conversation_id"}}


DELIVERY = Part(
    "delivery",
    [
        Plan(Topic.RUNS, seeds.runs(), lambda n: [view.running(f"run-fz-v{i}", ACCOUNT) for i in range(n)],
             view.running("run-fz-vref", ACCOUNT), shown),
        Plan(Topic.PUBLICATION, seeds.publication(),
             lambda n: [view.published(f"run-fz-p{i}", "blk-v", 1, "Valid.") for i in range(n)],
             view.published("run-fz-pref", "blk-v", 1, "Valid."), shown,
             setup=lambda n: [view.running(f"run-fz-p{i}", ACCOUNT) for i in ["ref", *range(n)]]),
    ],
    base=[view.running(BASE_RUN, ACCOUNT), view.published(BASE_RUN, "blk-base", 1, "Base."), view.settled(BASE_RUN),
          view.closed(BASE_RUN, account=ACCOUNT)],
    reader=http,
    snapshot=lambda client: client.get(f"/v1/runs/{BASE_RUN}").json(),
)


@pytest.mark.rule("P3")
@pytest.mark.rule("R8")
def test_every_hostile_record_on_deliverys_topics_ends_in_a_typed_outcome(
    isolated: Settings, fuzz_values: int, fuzz_seed: int, record_property: Any,
) -> None:
    record_property("fuzz", fuzz(DELIVERY, isolated, fuzz_values, fuzz_seed))
