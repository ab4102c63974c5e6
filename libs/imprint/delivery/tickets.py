"""D6: stream tickets — how a client that cannot send ``Authorization`` (the
browser's own ``EventSource``) opens one run's stream.

A ticket is minted by an authenticated ``POST`` and is bound to that account and that
run: it opens that run's streams and nothing else (not another run, not a POST
route). It expires ``ttl`` seconds after its *last use*, so the browser's own
reconnects (same URL, ``Last-Event-ID``) keep working for as long as they keep
coming, and a ticket copied out of a URL dies a minute after the page stopped
using it. Only a hash of the ticket is held; the ticket itself is never logged.

Pure: the caller passes the clock and the random ticket text."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Grant:
    account_id: str
    run_id: str


def ticket_digest(ticket: str) -> str:
    """What a store keeps of a ticket: never the ticket itself."""
    return hashlib.sha256(ticket.encode("utf-8")).hexdigest()


@dataclass
class TicketBook:
    ttl: float = 60.0
    capacity: int = 100_000
    _grants: dict[str, tuple[Grant, float]] = field(default_factory=dict)
    """ticket hash -> (grant, expires at)."""

    def issue(self, ticket: str, grant: Grant, now: float) -> float:
        """Hold ``ticket`` for ``grant``; returns when it expires unless used."""
        self.sweep(now)
        if len(self._grants) >= self.capacity:
            oldest = min(self._grants, key=lambda k: self._grants[k][1])
            del self._grants[oldest]
        expires = now + self.ttl
        self._grants[ticket_digest(ticket)] = (grant, expires)
        return expires

    def use(self, ticket: str, run_id: str, now: float) -> Grant | None:
        """The grant if ``ticket`` is live and names ``run_id``; each use extends its life."""
        key = ticket_digest(ticket)
        held = self._grants.get(key)
        if held is None:
            return None
        grant, expires = held
        if now >= expires:
            del self._grants[key]
            return None
        if not hmac.compare_digest(grant.run_id, run_id):
            return None
        self._grants[key] = (grant, now + self.ttl)
        return grant

    def sweep(self, now: float) -> None:
        for key in [k for k, (_, expires) in self._grants.items() if now >= expires]:
            del self._grants[key]

    def __len__(self) -> int:
        return len(self._grants)
