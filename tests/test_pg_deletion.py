"""Deletions on a server beside other writers (docs/postgresql.md, "Writes on a server").

A deletion of sessions reads the sessions table whole and runs at ``REPEATABLE READ``
(``PostgresDatabase.write_deletion``): the server's serializable checks refused it on
every try while a gateway appended beside it. These tests put another client's
write inside the deletion's transaction, right before its first write statement
(after every read that decides what goes), and check that a write which only
touches other rows costs no retry, while one that adds a reference to a doomed
session makes the deletion run again and see it: nothing dangles, nothing is lost.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import plain_connection, target_of

from hermes_models import SessionDB
from hermes_models.store import writes

pytestmark = pytest.mark.backends("postgresql")

#: The first write statement of a deletion (``maintenance._delete_rows``): its reads
#: are done by then.
FIRST_WRITE = 'UPDATE "sessions" SET "parent_session_id"'


def old_and_live(store: SessionDB) -> None:
    store.create_session("old", "cli")
    store.append_message("old", "user", "old words")
    store.end_session("old", "user_exit")
    store.create_session("live", "cli")
    store.append_message("live", "user", "hello")


def before_first_write(
    store: SessionDB, monkeypatch: pytest.MonkeyPatch, beside: Callable[[int], None]
) -> list[int]:
    """Run ``beside(attempt)`` in another thread (another client) each time a deletion
    of ``store`` reaches its first write statement, and wait for it; the attempts, in
    order."""
    db: Any = store.database
    real = db.execute_sql
    attempts: list[int] = []

    def execute_sql(sql: str, params: Any = None, *args: Any, **options: Any) -> Any:
        if sql.startswith(FIRST_WRITE):
            attempts.append(len(attempts) + 1)
            # Another client: a thread of its own (this one is inside the deletion).
            failed: list[BaseException] = []

            def run() -> None:
                try:
                    beside(attempts[-1])
                except BaseException as exc:  # re-raised below, in the deletion
                    failed.append(exc)

            thread = threading.Thread(target=run)
            thread.start()
            thread.join(30)
            if failed:
                raise failed[0]
        return real(sql, params, *args, **options)

    monkeypatch.setattr(db, "execute_sql", execute_sql)
    return attempts


def on_first_try(store: SessionDB, act: Callable[[SessionDB], None]) -> Callable[[int], None]:
    """A ``beside`` for :func:`before_first_write`: ``act`` on another handle on the
    store, on the deletion's first try only."""
    url = target_of(store.database)

    def beside(attempt: int) -> None:
        if attempt == 1:
            with SessionDB(url) as other:
                act(other)

    return beside


def messages_of(store: SessionDB, session_id: str) -> int:
    """Messages of ``session_id`` as another client counts them (plain SQL)."""
    with plain_connection(store.database, Path("unused: a server")) as conn:
        row = conn.execute("SELECT count(*) FROM messages WHERE session_id = ?", [session_id])
        return int(row.fetchone()[0])


def test_a_deletion_is_not_refused_for_reads_that_a_write_beside_it_makes(
    store: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The other client, serializable as the package's appends are, reads the messages
    # the deletion removes and updates a session the deletion read: a read/write
    # cycle with the deletion, committed first. A serializable deletion was refused
    # on every try (each try meets a new such client) until its patience ran out.
    old_and_live(store)
    monkeypatch.setattr(writes, "WRITE_PATIENCE_S", 3.0)
    url = target_of(store.database)

    def beside(attempt: int) -> None:
        with SessionDB(url) as other:
            db: Any = other.database

            def cycle() -> None:
                db.execute_sql("SELECT count(*) FROM messages WHERE session_id = 'old'")
                db.execute_sql("UPDATE sessions SET title = 'busy' WHERE id = 'live'")

            db.write(cycle)

    attempts = before_first_write(store, monkeypatch, beside)
    report = store.erase_sessions(["old"])
    assert report["sessions"] == ["old"]
    assert report["messages"] == 1
    assert attempts == [1]
    assert store.get_session("old") is None
    assert store.get_session("live")["title"] == "busy"  # type: ignore[index]
    assert [m["content"] for m in store.get_messages("live")] == ["hello"]


def test_a_message_added_to_a_doomed_session_meanwhile_goes_with_it(
    store: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    old_and_live(store)

    def late_answer(other: SessionDB) -> None:
        other.append_message("old", "assistant", "a late answer")

    attempts = before_first_write(store, monkeypatch, on_first_try(store, late_answer))
    report = store.erase_sessions(["old"])
    assert attempts == [1, 2]  # refused once (the new message's key), then run again
    assert report["sessions"] == ["old"]
    assert report["messages"] == 2
    assert store.get_session("old") is None
    assert messages_of(store, "old") == 0


@pytest.mark.parametrize(
    ("tags", "kept"),
    [(None, True), ({"_delegate_from": "old"}, False)],
    ids=["a branch stays as a root", "a subagent run goes with it"],
)
def test_a_child_started_under_a_doomed_session_meanwhile_follows_the_rules(
    store: SessionDB, monkeypatch: pytest.MonkeyPatch, tags: Any, kept: bool
) -> None:
    old_and_live(store)

    def child(other: SessionDB) -> None:
        other.create_session("child", "cli", parent_session_id="old", model_config=tags)
        other.append_message("child", "user", "a child's words")

    attempts = before_first_write(store, monkeypatch, on_first_try(store, child))
    report = store.erase_sessions(["old"])
    assert attempts == [1, 2]
    assert store.get_session("old") is None
    child = store.get_session("child")
    if kept:
        assert report["sessions"] == ["old"]
        assert report["orphaned"] == ["child"]
        assert child is not None and child["parent_session_id"] is None
        assert [m["content"] for m in store.get_messages("child")] == ["a child's words"]
    else:
        assert report["sessions"] == ["old", "child"]
        assert report["orphaned"] == []
        assert child is None
        assert messages_of(store, "child") == 0


def test_deleting_beside_a_tight_append_loop_needs_few_tries(
    store: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What failed in CI: retention beside a writer appending without pause.
    for n in range(12):
        store.create_session(f"old{n}", "cli")
        store.append_message(f"old{n}", "user", f"old words {n}")
        store.end_session(f"old{n}", "user_exit")
    store.create_session("live", "cli")
    url = target_of(store.database)
    written: list[int] = []
    stop, writing = threading.Event(), threading.Event()

    def writer() -> None:
        with SessionDB(url) as other:
            while not stop.is_set():
                written.append(other.append_message("live", "user", f"turn {len(written)}"))
                writing.set()

    attempts = before_first_write(store, monkeypatch, lambda attempt: None)
    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert writing.wait(30)  # the deletions run while it appends
        for n in range(12):
            store.delete_session(f"old{n}")
    finally:
        stop.set()
        thread.join(60)
    assert [m["id"] for m in store.get_messages("live")] == written
    assert [store.get_session(f"old{n}") for n in range(12)] == [None] * 12
    # Rows of the deleted sessions and of the live one never meet: a try is refused
    # only when both fold the search statistics at once (one transaction in 512
    # folds; migration 0011). A serializable deletion was refused here up to 564
    # times in a row.
    assert len(attempts) <= 15
