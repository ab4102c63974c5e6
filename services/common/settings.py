"""Configuration by environment (``IMPRINT_*``), read once through pydantic-settings."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_core import to_json
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from imprint.contracts.conversation import DEFAULT_POLICY, ConversationPolicy

DEVELOPMENT_AUTH_SECRET = "imprint-development-secret-change-me"


def _default_state_dir() -> Path:
    return Path.cwd() / ".imprint"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="IMPRINT_", extra="ignore")

    kafka_bootstrap: str = "127.0.0.1:9092"
    database_url: str | None = None
    """The store backend (:mod:`services.common.backends`): unset selects the embedded SQLite
    under ``state_dir``, ``postgresql://…`` PostgreSQL, ``memory://`` this process's memory."""
    database_schema: str | None = Field(default=None, pattern=r"^[a-z_][a-z0-9_]{0,62}$")
    """PostgreSQL schema for every store of this deployment (tests use one per test): an
    identifier PostgreSQL keeps as written — lower-case letters, digits and ``_``, at most
    63. PostgreSQL folds an unquoted ``MySchema`` to ``myschema``, and eventsourcing then
    found none of the types it made there: every part started, and the first write failed
    ("Composite type 'stored_event_uuid' not found")."""
    state_dir: Path = Field(default_factory=_default_state_dir)
    http_host: str = "127.0.0.1"
    http_port: int = 8080
    auth_secret: SecretStr = SecretStr(DEVELOPMENT_AUTH_SECRET)
    token_ttl_seconds: int = 12 * 3600
    log_json: bool = False
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    topic_prefix: str = Field(default="", pattern=r"^[A-Za-z0-9._-]{0,200}$")
    """Prepended to every topic name; lets tests run side by side on one broker. Only what
    Kafka allows in a topic name (letters, digits, ``.``, ``_``, ``-``)."""
    group_prefix: str = "imprint"
    topic_partitions: int = Field(default=6, ge=1)
    """Partitions of every topic the deployment creates (deploy/local, compose, the test stack);
    keys stay ``run_id`` (sources: ``source_id``), so one run's events stay in one partition."""

    offset_commit_seconds: float = Field(default=0.25, ge=0)
    """How often a tracked consumer commits its Kafka offsets (0: after every poll). The
    store's tracking records say what was applied; a committed offset only shortens what a
    restart or a rebalance redelivers, and the store skips that redelivery."""

    inline_poll_records: int = Field(default=16, ge=0)
    """The largest poll (records; Delivery's live-feed read: runs) whose store work runs on
    the part's event loop instead of a worker thread (0: always a thread). A small poll's
    transaction is a few milliseconds of waiting on the database; handed to a thread, it
    cost a submit, a wake-up of the thread and a turn of the GIL each way between the loop
    and the thread, and under a paced load, where almost every poll is one proposal, those
    crossings cost the part more than the work they took off the loop. A large poll (a burst)
    still goes to a thread, so the loop keeps fetching and sending beside it. Publication's
    small poll pauses on the loop between its previews and its commit until they are
    written to the broker (P14: they go out before the commit)."""

    publication_relay: Literal["inline", "separate"] = "inline"
    """Who relays the Publication log to ``imprint.publication.v1``. ``inline``: each
    ``imprint serve publication`` runs a relay (elected: one of them is active), handed its
    own commits in memory; ``imprint serve publication-relay`` processes may stand by
    beside it. ``separate``: only those processes relay, reading every commit back."""

    hot_state_bytes: int = Field(default=671_088_640, ge=0)  # 640 MiB
    """The bytes a part may keep of its hot state (per process): Publication's and the
    Journal's hot aggregates (:mod:`services.common.hot_cache`), Delivery's hot runs
    (:mod:`services.delivery.hot_runs`), least recently used out first past it. Weighed,
    not measured: stored bytes times a calibrated overhead (Publication, Journal), row
    bytes (Delivery). A run pushed out is read back from the store at its next message.
    The default is meant to hold 20,000 Publication runs of a few proposals in flight."""

    block_modification_quota: int = 2
    run_modification_quota: int = 8
    display_char_limit: int = 60_000

    sse_keepalive_seconds: float = 15.0
    sse_client_queue: int = 1000
    """Frames that may wait for one SSE client (past that it reads them from the store when it
    catches up), and the most one write to it carries."""
    sse_poll_seconds: float = 1.0
    """Delivery's fallback check for live runs whose wake-up was lost (one query for all of them)."""
    max_request_bytes: int = 64 * 1024
    stream_open_wait_seconds: float = 10.0
    """D6: how long a stream opened before Delivery knows its run waits for it; a run that
    never appears or belongs to another account answers 404 after the same wait."""
    stream_ticket_ttl_seconds: float = 60.0
    """A stream ticket (``POST /v1/runs/{run_id}/stream-tickets``) expires this long after its last use."""
    cors_origins: Annotated[tuple[str, ...], NoDecode] = ()
    """Origins (``scheme://host[:port]``) of front ends served from elsewhere whose pages may
    call Delivery from a browser, with credentials, ``Authorization``, ``Last-Event-ID`` and
    the stream-ticket flow. Comma-separated (or a JSON list). Empty: no CORS headers at all,
    only pages Delivery serves itself. ``*`` is refused: the list is explicit."""
    retention_seconds: float = 30 * 24 * 3600
    """X8: a conversation idle for longer than this is deleted by the retention sweeper."""
    retention_sweep_seconds: float = 3600
    run_lease_seconds: float = Field(default=120.0, gt=0)
    """X10: a run none of whose runtime messages reached the Journal for this long is closed
    ``failed`` (``runtime_lost``). The runtime SDK heartbeats well within it (every 30 s by default)."""
    conversation_policy: ConversationPolicy = DEFAULT_POLICY
    """X12: what a question does while another of its conversation is running or queued, when its
    runtime's ``run.admitted`` names no policy (``concurrent``, ``reject``, ``enqueue``,
    ``interrupt``, ``merge``, ``steer``)."""
    run_lease_sweep_seconds: float = Field(default=5.0, gt=0)
    """How often at most the Journal looks for lapsed leases (at most a quarter of the lease);
    it looks when the earliest lease it keeps lapses. A lost run is closed at most this long
    after its lease lapsed."""

    @field_validator("log_level", mode="before")
    @classmethod
    def _level(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _origins(cls, value: Any) -> tuple[str, ...]:
        if isinstance(value, str):
            text = value.strip()
            value = json.loads(text) if text.startswith("[") else text.split(",")
        if not isinstance(value, (list, tuple)):
            raise ValueError("a comma-separated list of origins")
        return tuple(dict.fromkeys(origin(str(v)) for v in value if str(v).strip()))

    @property
    def uses_development_secret(self) -> bool:
        return self.auth_secret.get_secret_value() == DEVELOPMENT_AUTH_SECRET

    def topic(self, name: str) -> str:
        return f"{self.topic_prefix}{name}"

    def to_env(self) -> dict[str, str]:
        """These settings as the ``IMPRINT_*`` variables that read back into equal settings
        (what a child process is given; unset optional fields are left out)."""
        prefix = str(self.model_config.get("env_prefix", ""))
        env: dict[str, str] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            if isinstance(value, bool):
                text = "true" if value else "false"
            elif isinstance(value, (str, int, float, Path)):
                text = str(value)
            else:
                text = to_json(value).decode()
            env[f"{prefix}{name}".upper()] = text
        return env


DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(text: str) -> str:
    """An origin as a browser sends it in ``Origin`` (lower-case scheme and host, the port
    only when not the scheme's default, nothing after): ``https://App.example:443/`` is
    ``https://app.example``. Anything that is not one origin is refused."""
    raw = text.strip()
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError as error:
        raise ValueError(f"not an origin: {raw!r}") from error
    scheme, host = parts.scheme.lower(), (parts.hostname or "")
    if scheme not in DEFAULT_PORTS or not host or parts.username is not None or parts.password is not None \
            or parts.path not in ("", "/") or parts.query or parts.fragment or "*" in raw:
        raise ValueError(f"not an origin (scheme://host[:port], no wildcard, no path): {raw!r}")
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}" + (f":{port}" if port is not None and port != DEFAULT_PORTS[scheme] else "")


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
