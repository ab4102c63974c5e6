"""Upcasters for names the stored logs still spell the old way.

The runtime partition was first called a *lane*, then a *shard* in every part: the aggregates
and events that carry it (the Journal's lease record, the Publication's source shards) read a
version-1 state through :func:`lane_is_shard`, one definition for each of them."""

from __future__ import annotations

from typing import Any


def lane_is_shard(state: dict[str, Any]) -> None:
    """A version-1 state's ``lane`` is its ``shard`` (an event's or a snapshot's)."""
    state["shard"] = state.pop("lane")
