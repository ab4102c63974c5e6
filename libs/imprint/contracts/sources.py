"""``imprint.sources.v1``: the source registry (→ publication, journal). Key = ``source_id``."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Union

from pydantic import Field, TypeAdapter

from imprint.contracts.base import Identifier, Message
from imprint.contracts.runtime import Scope


class SourceMessage(Message):
    source_id: Identifier
    key_field: ClassVar[str | None] = "source_id"


class SourceRegistered(SourceMessage):
    type: Literal["source.registered"] = "source.registered"
    scope: Scope
    owner_account_id: Identifier
    title: str = ""


class SourceRevoked(SourceMessage):
    """The source may no longer be cited; with ``account_id`` only for that account."""

    type: Literal["source.revoked"] = "source.revoked"
    account_id: Identifier | None = None
    reason: str = ""


class SourceTombstoned(SourceMessage):
    """The source is gone for everyone; its excerpts are redacted (X7)."""

    type: Literal["source.tombstoned"] = "source.tombstoned"


SourcesMessage = Annotated[Union[SourceRegistered, SourceRevoked, SourceTombstoned], Field(discriminator="type")]
sources_messages: TypeAdapter[SourcesMessage] = TypeAdapter(SourcesMessage)
