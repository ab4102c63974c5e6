"""Small mutable tables beside the logs, on eventsourcing's datastores.

The key store (:mod:`services.common.keyring`), the journal's message index and
Delivery's views and stream tickets are tables, not logs. Each is written once, in
SQL with ``?`` placeholders and ``{name}`` table names, against a :class:`Tables`: one
datastore (its pool, transactions and error mapping are the library's) with what its
dialect does differently — placeholders, qualified names, a locking read, a multi-row
``VALUES`` list, a pipelined write transaction, a wake-up sent on commit, a lock held
for a transaction — and, where the tables follow Kafka partitions, the tracking
positions recorded in the same transaction (:class:`services.common.recorders.Positions`).

A backend (:mod:`services.common.backends`) builds the :class:`Tables` of a store; its
callers never ask which dialect they hold."""

from __future__ import annotations

import functools
import hashlib
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

from eventsourcing.persistence import IntegrityError, InternalError, ProgrammingError, Tracking

from services.common.recorders import Positions

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_NUMBERED = re.compile(r"\$(\d+)")
"""PostgreSQL's numbered placeholders (:meth:`PostgresTables.values`)."""
TOGETHER_PARAMETERS = 1_000
"""The most parameters a group of writes sent together (:meth:`Tables.together`) has to go
as one PostgreSQL statement; a larger group (a busy poll's) goes as written, each statement
pipelined on its own. One statement spares a few statements' fixed cost per poll, and
renumbering its placeholders costs per parameter: past about this many, a poll spends more
renumbering than it spares."""


def checked_identifier(name: str) -> str:
    """``name`` if it is a plain SQL identifier (table names are formatted into statements)."""
    if not _IDENT.match(name):
        raise ValueError(f"unsafe table name {name!r}")
    return name


class Tables(ABC):
    """One datastore of tables and its SQL dialect."""

    placeholder: ClassVar[str] = "?"
    lock_suffix: ClassVar[str] = ""
    """Appended to a ``SELECT`` whose rows the transaction must hold until it ends."""
    binary_type: ClassVar[str] = "BLOB"
    timestamp_type: ClassVar[str] = "TEXT"

    def __init__(self, datastore: Any, name: str, positions: Positions | None = None) -> None:
        self.datastore = datastore
        self.name = checked_identifier(name)
        self._positions = positions

    # ------------------------------------------------------------------ names and statements

    @abstractmethod
    def table(self, name: str) -> str:
        """The name of table ``name`` as a statement writes it (quoted, qualified)."""

    @abstractmethod
    def columns(self, c: Any, name: str) -> set[str]:
        """The columns table ``name`` has (none: it does not exist)."""

    def q(self, statement: str, names: Mapping[str, str] | None = None) -> str:
        """``statement`` in this dialect: ``{name}`` replaced by ``names`` (when given) and
        ``?`` by this dialect's placeholder."""
        if names is not None:
            statement = statement.format(**names)
        return statement.replace("?", self.placeholder) if self.placeholder != "?" else statement

    def values(self, rows: int, width: int) -> str:
        """The placeholders of a multi-row ``VALUES`` list (``?`` each)."""
        row = "(" + ", ".join("?" * width) + ")"
        return ", ".join([row] * rows)

    def execute_values(self, c: Any, statement: str, params: Sequence[Any]) -> None:
        """Run a statement built with :meth:`values` (already passed through :meth:`q`); on
        :class:`Writes` (:meth:`together`), hold it for the end of the group."""
        if isinstance(c, Writes):
            c.statements.append((statement, params))
        else:
            self._execute_values(c, statement, params)

    def _execute_values(self, c: Any, statement: str, params: Sequence[Any]) -> None:
        c.execute(statement, params)

    @contextmanager
    def together(self, c: Any) -> Iterator[Writes]:
        """Writes whose results nobody reads — statements run by :meth:`execute_values` and
        notifications (:meth:`notify`) given the :class:`Writes` this yields — sent at the end
        of the block in the order given, in ``c``'s transaction. Each statement must not
        depend on the rows another of the group writes: a dialect may run them as one
        statement, over one snapshot (:class:`services.common.backends.PostgresTables`)."""
        writes = Writes()
        yield writes
        self._send_together(c, writes)

    def _send_together(self, c: Any, writes: Writes) -> None:
        for statement, params in writes.statements:
            self._execute_values(c, statement, params)
        for payload in writes.payloads:
            self.notify(c, payload)

    # ------------------------------------------------------------------ transactions

    @contextmanager
    def transaction(self, *, commit: bool) -> Iterator[Any]:
        with self.datastore.transaction(commit=commit) as c:
            yield c

    @contextmanager
    def writing(self) -> Iterator[Any]:
        """A write transaction whose statements need not each wait for the server where the
        dialect allows it (see :class:`services.common.backends.PostgresTables`)."""
        with self.transaction(commit=True) as c:
            yield c

    @contextmanager
    def reading(self) -> Iterator[Any]:
        """A cursor for reads that need no common snapshot."""
        with self.datastore.transaction(commit=False) as c:
            yield c

    def create(self, statements: Iterable[str], attempts: int = 5) -> None:
        """``CREATE … IF NOT EXISTS`` statements, tolerating another process creating the same
        table at the same moment (PostgreSQL then reports a duplicate row type or relation)."""
        statements = list(statements)
        for attempt in range(attempts):
            try:
                with self.datastore.transaction(commit=True) as c:
                    for statement in statements:
                        c.execute(statement)
                return
            except (IntegrityError, ProgrammingError, InternalError):
                if attempt == attempts - 1:
                    raise
                time.sleep(0.1 * (attempt + 1))

    # ------------------------------------------------------------------ several writers

    @property
    def channel(self) -> str | None:
        """Where :meth:`notify` is heard (``None``: nowhere, one writer only)."""
        return None

    def notify(self, c: Any, payload: str) -> None:
        """Announce ``payload`` to every listener of :attr:`channel` when ``c``'s transaction
        commits (on :class:`Writes`: when the group is sent)."""

    def lock(self, c: Any, keys: Iterable[str]) -> None:
        """Hold these keys until ``c``'s transaction ends, taken in one order (a backend
        with one writer at a time holds them already)."""

    # ------------------------------------------------------------------ tracking positions

    @property
    def positions(self) -> Positions:
        if self._positions is None:
            raise RuntimeError(f"the tables of {self.name!r} were opened without tracking positions")
        return self._positions

    def max_position(self, name: str) -> int | None:
        return self.positions.max_tracking_id(name)  # type: ignore[attr-defined]

    def read_positions(self, c: Any, names: Sequence[str]) -> dict[str, int | None]:
        return self.positions.positions(c, names)

    def record_positions(self, c: Any, trackings: Sequence[Tracking]) -> None:
        self.positions.record_positions(c, trackings)

    def close(self) -> None:
        self.datastore.close()


class Writes:
    """Writes held to be sent together (:meth:`Tables.together`)."""

    def __init__(self) -> None:
        self.statements: list[tuple[str, Sequence[Any]]] = []
        self.payloads: list[str] = []


class SQLiteTables(Tables):
    """Tables in one SQLite file (or one shared in-memory database): one writer at a time."""

    def table(self, name: str) -> str:
        return checked_identifier(name)

    def columns(self, c: Any, name: str) -> set[str]:
        c.execute(f"PRAGMA table_info({checked_identifier(name)})")
        return {row["name"] for row in c.fetchall()}


class PostgresTables(Tables):
    """Tables in the deployment's PostgreSQL schema, shared by every instance of a part."""

    placeholder = "%s"
    lock_suffix = " FOR UPDATE"
    binary_type = "bytea"
    timestamp_type = "timestamptz"

    def table(self, name: str) -> str:
        return f'"{checked_identifier(self.datastore.schema)}"."{checked_identifier(name)}"'

    def columns(self, c: Any, name: str) -> set[str]:
        c.execute("SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s",
                  (self.datastore.schema, name))
        return {row["column_name"] for row in c.fetchall()}

    def values(self, rows: int, width: int) -> str:
        # PostgreSQL's own numbered placeholders, executed by a RawCursor: psycopg then
        # does not parse the statement to find them (it caches that parse only for short
        # statements, and a multi-row statement is long).
        return ", ".join("(" + ", ".join(f"${r * width + i + 1}" for i in range(width)) + ")" for r in range(rows))

    def _execute_values(self, c: Any, statement: str, params: Sequence[Any]) -> None:
        import psycopg

        with psycopg.RawCursor(c.connection) as raw:
            raw.execute(statement, params)

    def _send_together(self, c: Any, writes: Writes) -> None:
        """One statement for the whole group: each write a data-modifying ``WITH`` query of it
        (PostgreSQL runs every one of them, referenced or not), the notifications its
        ``SELECT``. A pipelined transaction pays psycopg's send and PostgreSQL's parse, plan
        and protocol messages per statement, whatever the statement holds. A group past
        :data:`TOGETHER_PARAMETERS` parameters goes as written (:meth:`Tables._send_together`)."""
        if sum(len(values) for _, values in writes.statements) > TOGETHER_PARAMETERS:
            super()._send_together(c, writes)
            return
        queries: list[str] = []
        params: list[Any] = []
        for statement, values in writes.statements:
            offset = len(params)
            queries.append(_NUMBERED.sub(lambda m, offset=offset: f"${int(m.group(1)) + offset}", statement))
            params.extend(values)
        notices = []
        for payload in writes.payloads:
            notices.append(f"pg_notify(${len(params) + 1}, ${len(params) + 2})")
            params.extend((self.channel, payload))
        if queries or notices:
            self._execute_values(c, _with(queries, f"SELECT {', '.join(notices) or '1'}"), params)

    @contextmanager
    def writing(self) -> Iterator[Any]:
        """A write transaction in psycopg's pipeline mode: each statement is sent without
        waiting for the one before, and the server is waited for only where a result is
        read and at ``COMMIT``. An error is raised where the server's answer is next read,
        and the transaction is rolled back as in any other."""
        with self.datastore.get_connection() as conn, conn.pipeline(), conn.transaction():
            yield conn.cursor()

    @contextmanager
    def reading(self) -> Iterator[Any]:
        """The datastore's autocommit cursor (how eventsourcing's recorders read): no
        ``BEGIN``/``ROLLBACK`` around a read, and psycopg keeps the statements it prepared
        on the connection (a ``ROLLBACK`` deallocates them all)."""
        with self.datastore.cursor() as c:
            yield c

    @functools.cached_property
    def channel(self) -> str:
        """Named once: every poll's locks and notification name it."""
        digest = hashlib.sha256(f"{self.datastore.schema}.{self.name}".encode()).hexdigest()[:20]
        return f"imprint_{self.name}_{digest}"[:63]

    def notify(self, c: Any, payload: str) -> None:
        if isinstance(c, Writes):
            c.payloads.append(payload)
        else:
            c.execute("SELECT pg_notify(%s, %s)", (self.channel, payload))

    def lock(self, c: Any, keys: Iterable[str]) -> None:
        for key in sorted(keys):
            number = int.from_bytes(hashlib.sha256(f"{self.channel}|{key}".encode()).digest()[:8], "big", signed=True)
            c.execute("SELECT pg_advisory_xact_lock(%s)", (number,))


def _with(queries: list[str], tail: str) -> str:
    """``tail`` with each of ``queries`` run as a ``WITH`` query before it."""
    return ("WITH " + ", ".join(f"w{i} AS ({query})" for i, query in enumerate(queries)) + " " if queries else "") + tail
