"""Delivery over real PostgreSQL (its own schema per test), real Kafka (its own topic
prefix per test) and real HTTP (uvicorn on 127.0.0.1, a free port)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from imprint.settings import Settings
from services.delivery.app import create_app
from services.delivery.auth import mint_token
from services.delivery.notifier import Notifier
from services.delivery.view_store import ViewStore
from tests.integration.delivery.support import Feeder, KafkaPublish, LiveServer

pytestmark = pytest.mark.integration


@dataclass
class Delivery:
    settings: Settings
    store: ViewStore
    notifier: Notifier
    publish: KafkaPublish
    feeder: Feeder
    server: LiveServer
    app: Any

    @property
    def url(self) -> str:
        return self.server.base_url

    def token(self, account: str = "acct-1", ttl: float | None = None) -> str:
        return mint_token(self.settings, account, ttl)


def start_delivery(settings: Settings, **app_options: Any) -> Iterator[Delivery]:
    store = ViewStore(settings)
    notifier = Notifier()
    publish = KafkaPublish(settings)
    app = create_app(settings, store, publish, notifier=notifier, poll_interval=0.5, **app_options)
    try:
        with LiveServer(app) as server:
            yield Delivery(settings, store, notifier, publish, Feeder(store, notifier), server, app)
            publish.close()
    finally:
        store.close()


@pytest.fixture
def delivery(isolated: Settings) -> Iterator[Delivery]:
    settings = isolated.model_copy(update={"sse_keepalive_seconds": 0.5})
    yield from start_delivery(settings)
