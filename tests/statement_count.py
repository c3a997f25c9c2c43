"""Count the statements a store's handle sends to its database (tests only).

On PostgreSQL the count is taken inside psycopg 3, at the three places where a
statement leaves the client:

* ``BaseCursor._execute_send``: a statement run unprepared (``execute``,
  each row of an ``executemany``, a ``COPY``, a ``stream`` and a server
  cursor's ``DECLARE``);
* ``BaseCursor._send_query_prepared``: a statement run prepared (psycopg
  prepares one after it ran five times on a connection);
* ``BaseConnection._exec_command``: the driver's own commands - the ``BEGIN``
  psycopg sends before the first statement of a transaction (a round trip of
  its own), ``COMMIT``, ``ROLLBACK``, a server cursor's ``FETCH`` and ``CLOSE``.

So transaction control is counted as the round trips it is: a call that
writes pays ``BEGIN`` and ``COMMIT`` on top of its statements, and savepoints
(peewee's nested ``atomic()``: ``SAVEPOINT``/``RELEASE SAVEPOINT`` through
``execute``) are statements like any other. Two things the server receives are
recorded apart, in :attr:`Counted.upkeep`, and left out of :attr:`Counted.count`:
the ``Parse`` that prepares a statement (``_send_prepare``) and the
``DEALLOCATE`` of a prepared statement the driver's cache drops. Both depend
on what the connection ran before (its fifth run of a statement, its 101st
prepared statement), not on the call or the data.

On SQLite the count is ``set_trace_callback``: every statement SQLite starts,
``BEGIN``/``COMMIT``/``SAVEPOINT`` included; the lines SQLite traces for the
statements of a trigger are not statements of ours and are not counted
(Python's callback hands them over with the text of the statement that fired
them, so a statement traced twice in a row with the same text counts once).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


class Counted:
    """The statements seen while :func:`counting` was active."""

    def __init__(self) -> None:
        self.statements: list[str] = []
        self.upkeep: list[str] = []

    @property
    def count(self) -> int:
        return len(self.statements)

    def clear(self) -> None:
        self.statements.clear()
        self.upkeep.clear()


def _text(query: Any, conn: Any = None) -> str:
    if isinstance(query, bytes):
        return query.decode("utf-8", "replace")
    if isinstance(query, str):
        return query
    raw = getattr(query, "query", None)  # a PostgresQuery
    if isinstance(raw, bytes):
        return raw.decode("utf-8", "replace")
    if conn is not None and hasattr(query, "as_string"):  # a psycopg.sql Composable
        return str(query.as_string(conn))
    return repr(query)


@contextlib.contextmanager
def _psycopg(counted: Counted) -> Iterator[None]:
    from psycopg import _connection_base, _cursor_base

    cursor = _cursor_base.BaseCursor
    connection = _connection_base.BaseConnection
    originals = {
        (cursor, "_execute_send"): cursor._execute_send,
        (cursor, "_send_query_prepared"): cursor._send_query_prepared,
        (cursor, "_send_prepare"): cursor._send_prepare,
        (connection, "_exec_command"): connection._exec_command,
        (connection, "_deallocate"): connection._deallocate,
    }
    execute_send = cursor._execute_send
    send_prepared = cursor._send_query_prepared
    send_prepare = cursor._send_prepare
    exec_command = connection._exec_command
    deallocate = connection._deallocate

    def counted_execute_send(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        counted.statements.append(_text(query))
        return execute_send(self, query, *args, **kwargs)

    def counted_send_prepared(self: Any, name: Any, pgq: Any, *args: Any, **kwargs: Any) -> Any:
        counted.statements.append(_text(pgq))
        return send_prepared(self, name, pgq, *args, **kwargs)

    def counted_send_prepare(self: Any, name: Any, pgq: Any, *args: Any, **kwargs: Any) -> Any:
        counted.upkeep.append("PREPARE " + _text(pgq))
        return send_prepare(self, name, pgq, *args, **kwargs)

    def counted_exec_command(self: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
        text = _text(command, self)
        if not text.startswith("DEALLOCATE"):  # recorded by counted_deallocate
            counted.statements.append(text)
        return exec_command(self, command, *args, **kwargs)

    def counted_deallocate(self: Any, name: Any) -> Any:
        counted.upkeep.append(f"DEALLOCATE {name!r}")
        return deallocate(self, name)

    cursor._execute_send = counted_execute_send  # type: ignore[method-assign]
    cursor._send_query_prepared = counted_send_prepared  # type: ignore[method-assign]
    cursor._send_prepare = counted_send_prepare  # type: ignore[method-assign]
    connection._exec_command = counted_exec_command  # type: ignore[method-assign]
    connection._deallocate = counted_deallocate  # type: ignore[method-assign]
    try:
        yield
    finally:
        for (owner, name), original in originals.items():
            setattr(owner, name, original)


@contextlib.contextmanager
def _sqlite(counted: Counted, db: Any) -> Iterator[None]:
    conn = db.connection()

    def trace(sql: str) -> None:
        # Python's callback hands over the statement's text for the programs of its
        # triggers too (one per row a trigger fires for): a repeat of the statement
        # just traced is one of those, not a statement of ours.
        seen = counted.statements
        if not sql.startswith("--") and not (seen and seen[-1] == sql):
            seen.append(sql)

    conn.set_trace_callback(trace)
    try:
        yield
    finally:
        with contextlib.suppress(Exception):  # close() closed it
            conn.set_trace_callback(None)


@contextlib.contextmanager
def counting(db: Any) -> Iterator[Counted]:
    """Count what the handle ``db`` sends while the block runs (one thread: on
    SQLite the calling thread's connection is traced; on PostgreSQL every psycopg
    connection of the process is counted)."""
    counted = Counted()
    hook = _psycopg(counted) if db.dialect == "postgresql" else _sqlite(counted, db)
    with hook:
        yield counted
