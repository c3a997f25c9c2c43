"""A constraint failure reaches a SessionDB caller as the sqlite3 exception SQLite
raised - the same object, with its error code - never as a peewee error or a copy,
and an instance of the standard library's class whichever module runs underneath."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import peewee
import pytest

from hermes_models import SessionDB
from hermes_models.driver import sqlite3, standard

#: Whether the module gives extended result codes (``SQLITE_CONSTRAINT_FOREIGNKEY``):
#: Python 3.11's own does; pysqlite3 gives the primary code (``SQLITE_CONSTRAINT``).
EXTENDED_CODES = sqlite3 is standard and sys.version_info >= (3, 11)

CASES: dict[str, tuple[Callable[[SessionDB], Any], str]] = {
    "child of a missing parent": (
        lambda s: s.create_session("orphan", "cli", parent_session_id="missing"),
        "SQLITE_CONSTRAINT_FOREIGNKEY",
    ),
    "message of a missing session": (
        lambda s: s.append_message("missing", "user", "hello"),
        "SQLITE_CONSTRAINT_FOREIGNKEY",
    ),
    "message refused by a trigger": (
        lambda s: s.append_message("b", "user", "boom"),
        "SQLITE_CONSTRAINT_TRIGGER",
    ),
    "end refused by a trigger": (
        lambda s: s.end_session("b", "boom"),
        "SQLITE_CONSTRAINT_TRIGGER",
    ),
    "delete refused by a trigger": (
        lambda s: s.delete_session("a"),
        "SQLITE_CONSTRAINT_TRIGGER",
    ),
}


def prepare(store: SessionDB) -> None:
    store.create_session("a", "cli")
    store.create_session("b", "cli")
    for sql in (
        "CREATE TRIGGER IF NOT EXISTS refuse_delete BEFORE DELETE ON sessions"
        " WHEN old.id = 'a' BEGIN SELECT RAISE(ABORT, 'refused'); END",
        "CREATE TRIGGER IF NOT EXISTS refuse_end BEFORE UPDATE ON sessions"
        " WHEN new.end_reason = 'boom' BEGIN SELECT RAISE(ABORT, 'refused'); END",
        "CREATE TRIGGER IF NOT EXISTS refuse_message BEFORE INSERT ON messages"
        " WHEN new.content = 'boom' BEGIN SELECT RAISE(ABORT, 'refused'); END",
    ):
        store._conn.execute(sql)
    store._conn.commit()


def check(exc: BaseException, name: str) -> None:
    assert type(exc) is sqlite3.IntegrityError
    assert isinstance(exc, standard.IntegrityError)  # what Hermes' callers catch
    assert not isinstance(exc, peewee.PeeweeException)
    assert exc.__cause__ is None
    if sys.version_info >= (3, 11) or sqlite3 is not standard:
        shown = name if EXTENDED_CODES else "SQLITE_CONSTRAINT"
        assert exc.sqlite_errorname == shown  # type: ignore[attr-defined]
        assert exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_CONSTRAINT  # type: ignore[attr-defined]
    # Raised where SQLite ran the statement, not re-created further up (driver.py: the
    # bundled module's cursor, which passes such an error on as it is; db.py: the cursor
    # that remembers the statement).
    last = traceback.extract_tb(exc.__traceback__)[-1]
    assert Path(last.filename).name in ("peewee.py", "transcript.py", "driver.py", "db.py")
    assert "execute" in (last.line or "")


@pytest.mark.parametrize("case", sorted(CASES))
def test_constraint_failures_are_sqlite3_errors_themselves(
    db_path: Path, case: str, migrated_copy: Callable[[Path], Path]
) -> None:
    call, name = CASES[case]
    with SessionDB(migrated_copy(db_path)) as store:
        prepare(store)
        with pytest.raises(sqlite3.IntegrityError) as caught:
            call(store)
        check(caught.value, name)


def test_the_same_holds_on_a_second_open_of_the_file(
    db_path: Path, migrated_copy: Callable[[Path], Path]
) -> None:
    first = SessionDB(migrated_copy(db_path))
    second = SessionDB(db_path)
    try:
        prepare(first)
        for store in (first, second, first):
            for case in ("child of a missing parent", "message of a missing session"):
                call, name = CASES[case]
                with pytest.raises(sqlite3.IntegrityError) as caught:
                    call(store)
                check(caught.value, name)
    finally:
        second.close()
        first.close()


def test_the_error_object_is_the_one_sqlite3_raised(
    db_path: Path, monkeypatch: pytest.MonkeyPatch, migrated_copy: Callable[[Path], Path]
) -> None:
    raised: list[BaseException] = []
    real = peewee.SqliteDatabase.execute_sql

    def spy(self: Any, sql: str, params: Any = None, *args: Any) -> Any:
        try:
            return real(self, sql, params, *args)
        except peewee.IntegrityError as exc:
            raised.append(exc.orig)  # type: ignore[attr-defined]
            raise

    monkeypatch.setattr(peewee.SqliteDatabase, "execute_sql", spy)
    with SessionDB(migrated_copy(db_path)) as store:
        with pytest.raises(sqlite3.IntegrityError) as caught:
            store.create_session("orphan", "cli", parent_session_id="missing")
    assert len(raised) == 1
    assert caught.value is raised[0]
