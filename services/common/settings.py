"""Configuration by environment (``IMPRINT_*``), read once through pydantic-settings."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

DEVELOPMENT_AUTH_SECRET = "imprint-development-secret-change-me"


def _default_state_dir() -> Path:
    return Path.cwd() / ".imprint"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="IMPRINT_", extra="ignore")

    kafka_bootstrap: str = "127.0.0.1:9092"
    database_url: str | None = None
    """``postgresql://…`` selects PostgreSQL; unset selects embedded SQLite under ``state_dir``."""
    database_schema: str | None = None
    """PostgreSQL schema for every store of this deployment (tests use one per test)."""
    state_dir: Path = Field(default_factory=_default_state_dir)
    http_host: str = "127.0.0.1"
    http_port: int = 8080
    auth_secret: SecretStr = SecretStr(DEVELOPMENT_AUTH_SECRET)
    token_ttl_seconds: int = 12 * 3600
    log_json: bool = False
    log_level: str = "INFO"
    topic_prefix: str = ""
    """Prepended to every topic name; lets tests run side by side on one broker."""
    group_prefix: str = "imprint"

    block_modification_quota: int = 2
    run_modification_quota: int = 8
    display_char_limit: int = 60_000

    sse_keepalive_seconds: float = 15.0
    sse_client_queue: int = 1000
    sse_poll_seconds: float = 1.0
    """Delivery's fallback check for live runs whose wake-up was lost (one query for all of them)."""
    max_request_bytes: int = 64 * 1024
    stream_open_wait_seconds: float = 10.0
    """D6: how long a stream opened before Delivery knows its run waits for it; a run that
    never appears or belongs to another account answers 404 after the same wait."""
    stream_ticket_ttl_seconds: float = 60.0
    """A stream ticket (``POST /v1/runs/{run_id}/stream-tickets``) expires this long after its last use."""
    retention_seconds: float = 30 * 24 * 3600
    """X8: a conversation idle for longer than this is deleted by the retention sweeper."""
    retention_sweep_seconds: float = 3600

    @property
    def uses_postgres(self) -> bool:
        return bool(self.database_url) and self.database_url.startswith(("postgresql://", "postgres://"))

    @property
    def uses_development_secret(self) -> bool:
        return self.auth_secret.get_secret_value() == DEVELOPMENT_AUTH_SECRET

    def topic(self, name: str) -> str:
        return f"{self.topic_prefix}{name}"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
