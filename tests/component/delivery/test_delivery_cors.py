"""``IMPRINT_CORS_ORIGINS``: no CORS header at all by default; for a listed origin,
credentials, ``Authorization``, ``Last-Event-ID`` and the stream-ticket flow; for any
other origin no grant of any kind. In-process (httpx ASGITransport); what a browser
makes of it is tests/browser/test_ai_sdk_cross_origin.py."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from services.common.inbound import Inbound
from services.common.settings import Settings
from services.delivery.app import create_app
from services.delivery.auth import mint_token
from services.delivery.notifier import Notifier
from services.delivery.view_store import ViewStore
from tests.support.delivery_builders import closed, published, running, settled

RUN = "run-cors"
FRONT = "https://front.example"
STRANGER = "https://stranger.example"


def test_the_setting_takes_origins_as_a_browser_sends_them_and_refuses_anything_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("IMPRINT_CORS_ORIGINS", raising=False)
    assert Settings().cors_origins == (), "empty by default"
    monkeypatch.setenv("IMPRINT_CORS_ORIGINS", "https://Front.example:443/, http://127.0.0.1:8081,https://front.example")
    settings = Settings()
    assert settings.cors_origins == ("https://front.example", "http://127.0.0.1:8081")
    monkeypatch.setenv("IMPRINT_CORS_ORIGINS", settings.to_env()["IMPRINT_CORS_ORIGINS"])
    assert Settings().cors_origins == settings.cors_origins, "what a child process is given reads back"
    for bad in ("*", "https://*.example", "null", "ftp://front.example", "https://front.example/app",
                "https://user@front.example", "front.example"):
        with pytest.raises(ValidationError):
            Settings(cors_origins=bad)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ViewStore]:
    s = ViewStore(Settings(state_dir=tmp_path / "state", database_url=None))
    s.process([Inbound("imprint.runs.v1", 0, 0, running(RUN)),
               Inbound("imprint.publication.v1", 0, 0, published(RUN, "b1", 1, "one")),
               Inbound("imprint.publication.v1", 0, 1, settled(RUN)),
               Inbound("imprint.runs.v1", 0, 1, closed(RUN, "closed"))])
    yield s
    s.close()


async def app_client(store: ViewStore, tmp_path: Path, origins: str) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(state_dir=tmp_path / "state", database_url=None, cors_origins=origins)

    async def publish(message: Any) -> None:
        pass

    app = create_app(settings, store, publish, notifier=Notifier())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://delivery") as c:
        c.bearer = {"Authorization": f"Bearer {mint_token(settings, 'acct-1')}"}  # type: ignore[attr-defined]
        yield c


@pytest.fixture
async def listed(store: ViewStore, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async for c in app_client(store, tmp_path, FRONT):
        yield c


@pytest.fixture
async def unlisted(store: ViewStore, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async for c in app_client(store, tmp_path, ""):
        yield c


def cors_headers(response: httpx.Response) -> dict[str, str]:
    return {k.lower(): v for k, v in response.headers.items() if k.lower().startswith("access-control-")}


def preflight(method: str, headers: str, origin: str = FRONT) -> dict[str, str]:
    return {"Origin": origin, "Access-Control-Request-Method": method, "Access-Control-Request-Headers": headers}


async def test_a_listed_origin_may_open_the_ticket_flow_and_resume_a_stream(listed: httpx.AsyncClient) -> None:
    ticket_path, events = f"/v1/runs/{RUN}/stream-tickets", f"/v1/runs/{RUN}/events"
    allowed = await listed.options(ticket_path, headers=preflight("POST", "authorization"))
    assert allowed.status_code == 200
    granted = cors_headers(allowed)
    assert granted["access-control-allow-origin"] == FRONT and granted["access-control-allow-credentials"] == "true"
    assert "POST" in granted["access-control-allow-methods"]
    assert {"authorization", "last-event-id", "content-type"} <= {
        h.strip().lower() for h in granted["access-control-allow-headers"].split(",")}
    resume = await listed.options(events, headers=preflight("GET", "authorization,last-event-id"))
    assert resume.status_code == 200 and cors_headers(resume)["access-control-allow-origin"] == FRONT

    minted = await listed.post(ticket_path, headers={**listed.bearer, "Origin": FRONT})  # type: ignore[attr-defined]
    assert minted.status_code == 201 and cors_headers(minted)["access-control-allow-origin"] == FRONT
    stream = await listed.get(f"{events}?ticket={minted.json()['ticket']}", headers={"Origin": FRONT})
    assert stream.status_code == 200 and stream.text.rstrip().endswith("data: [DONE]")
    assert cors_headers(stream)["access-control-allow-origin"] == FRONT
    assert "vary" in {k.lower() for k in stream.headers}, "caches keep one origin's grant from another"


async def test_an_unlisted_origin_gets_no_grant_of_any_kind(listed: httpx.AsyncClient) -> None:
    refused = await listed.options(f"/v1/runs/{RUN}/stream-tickets",
                                   headers=preflight("POST", "authorization", origin=STRANGER))
    assert refused.status_code == 403 and cors_headers(refused) == {}
    # a request a browser would send anyway (a simple one) reaches the route, with no grant
    response = await listed.get(f"/v1/runs/{RUN}/answer", headers={**listed.bearer, "Origin": STRANGER})  # type: ignore[attr-defined]
    assert response.status_code == 200 and cors_headers(response) == {}
    assert cors_headers(await listed.get("/healthz", headers={"Origin": "null"})) == {}


async def test_without_the_setting_there_is_no_cors_at_all(unlisted: httpx.AsyncClient) -> None:
    for origin in (FRONT, STRANGER):
        answer = await unlisted.get(f"/v1/runs/{RUN}/answer", headers={**unlisted.bearer, "Origin": origin})  # type: ignore[attr-defined]
        assert answer.status_code == 200 and cors_headers(answer) == {}
        asked = await unlisted.options(f"/v1/runs/{RUN}/stream-tickets", headers=preflight("POST", "authorization",
                                                                                           origin=origin))
        assert asked.status_code == 405 and cors_headers(asked) == {}, "no preflight is answered"
