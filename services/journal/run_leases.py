"""The Journal's run leases (X10), as the part of :class:`~services.journal.application.RuntimeJournal`
that keeps them: the consumer renews the lease of every run its poll's runtime records name
(:meth:`RunLeases.renew`); a committed unit that opened or closed a run holds or releases it in
the instance's book; a partition this instance takes is read from its shard's record
(:meth:`RunLeases.take_shards`), one it loses is dropped; and the lease sweeper
(``services.journal.leases``) closes the runs that are due (:meth:`RunLeases.lapse_due`). The
rule — when a lease lapses and what closing a run records — is :mod:`imprint.journal.leases`."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from uuid import UUID

from imprint.journal import leases
from imprint.journal.effects import Effects
from imprint.journal.leases import Lapse, LeaseBook, LeaseChange, LeaseShard
from services.common.event_log import StoredWorkspace
from services.common.observability import get_logger

DEFAULT_LEASE_SECONDS = 120.0
LAPSES_PER_UNIT = 100
"""Lapsed runs a lease sweep closes in one unit of work (:meth:`RunLeases.lapse_due`)."""

log = get_logger(__name__)


class RunLeases:
    """The lease bookkeeping of a Journal instance; what it uses of the journal is declared here."""

    leases: LeaseBook
    """X10: the deadlines of the open runs of the runtime partitions this instance consumes."""
    _leases_lock: threading.Lock
    """Renewals come from the event loop, the rest from threads."""
    processing_lock: threading.RLock
    clock: Callable[[], float]

    def _untracked(self, work: Callable[[StoredWorkspace], Effects | None]) -> bool:
        raise NotImplementedError

    def _get(self, cls: type[Any], aggregate_id: UUID) -> Any:
        raise NotImplementedError

    def renew(self, run_ids: Iterable[str]) -> None:
        """Runtime records of these runs arrived: their leases run from now (those this instance keeps)."""
        now = self.clock()
        with self._leases_lock:
            for run_id in run_ids:
                self.leases.renew(run_id, now)

    def _lease_changed(self, change: LeaseChange) -> None:
        with self._leases_lock:
            if change.kind == "held":
                self.leases.hold(change.run_id, change.shard, self.clock())
            else:
                self.leases.release(change.run_id)

    def take_shards(self, shards: Iterable[int]) -> int:
        """This instance now consumes these runtime partitions: the open runs their shards record
        get a full lease from now. Returns how many runs it keeps the lease of."""
        with self.processing_lock:
            for shard in shards:
                recorded = self._get(LeaseShard, LeaseShard.id_for(shard))
                if recorded is not None:
                    now = self.clock()
                    with self._leases_lock:
                        self.leases.take(shard, recorded.runs, now)
            with self._leases_lock:
                return len(self.leases)

    def drop_shards(self, shards: Iterable[int]) -> None:
        """These runtime partitions went to another instance, and their leases with them."""
        with self.processing_lock, self._leases_lock:
            self.leases.drop(shards)

    def next_lapse(self) -> float | None:
        """When (on :attr:`clock`) the earliest lease this instance keeps lapses; ``None``: none."""
        with self._leases_lock:
            return self.leases.next_deadline()

    def lapse_due(self) -> list[Lapse]:
        """Close every run whose lease lapsed (``failed``, ``runtime_lost``) between the
        consumer's polls; a run no longer open is only released. Returns what was recorded.

        Runs whose runtimes went away together (a runtime host lost, sessions left at once)
        lapse together: they are closed :data:`LAPSES_PER_UNIT` to a unit of work (one
        transaction, their shard's record saved once) rather than one transaction each, and the
        consumer waits for one unit at a time. A unit that fails is taken again one run at
        a time: a run whose lapse cannot be recorded (a record of it no longer reads, its
        unit kept losing races) is logged and left due for the next sweep, and never keeps
        the others open."""
        with self._leases_lock:
            due = self.leases.due(self.clock())
        done: list[Lapse] = []
        for start in range(0, len(due), LAPSES_PER_UNIT):
            runs = due[start:start + LAPSES_PER_UNIT]
            try:
                done.extend(self._lapse(runs))
            except Exception:  # noqa: BLE001 — find the run that fails
                log.warning("a unit of lease lapses failed; lapsing its runs one at a time", runs=len(runs))
                for run in runs:
                    try:
                        done.extend(self._lapse([run]))
                    except Exception:  # noqa: BLE001 — the next sweep tries it again
                        log.exception("lease lapse failed; the next sweep retries", run_id=run[0])
        return done

    def _lapse(self, runs: Sequence[tuple[str, int]]) -> list[Lapse]:
        """One unit of work closing those of ``runs`` still due when it runs (a redone unit
        decides again); a due run with nothing to record is only released from the book."""
        lapsed: list[Lapse] = []
        untouched: list[LeaseChange] = []

        def work(ws: StoredWorkspace) -> Effects | None:
            lapsed.clear()
            untouched.clear()
            with self._leases_lock:  # renewed meanwhile, or its shard went to another instance
                still = [(run_id, shard) for run_id, shard in runs if self.leases.is_due(run_id, self.clock())]
            changes: list[LeaseChange] = []
            for run_id, shard in still:
                outcome = leases.lapse(ws, run_id, shard, self.leases.lease_seconds)
                if outcome is None:
                    untouched.append(LeaseChange("released", run_id, shard))  # nothing of it was open
                else:
                    lapsed.append(outcome)
                    changes.append(LeaseChange("released", run_id, shard))
            return Effects(leases=tuple(changes)) if changes else None

        with self.processing_lock:
            self._untracked(work)
            for change in untouched:
                self._lease_changed(change)
        return list(lapsed)
