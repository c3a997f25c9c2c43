"""HERMES_V16 3.13, compression locks, called as a Hermes caller calls them.

``try_acquire_compression_lock`` / ``release_compression_lock`` /
``get_compression_lock_holder`` with B's results; then what this package adds
on purpose (SPEC 6): a lock whose holder was made by ``local_holder()`` and
whose process was killed on this host is taken over at once, so compressing
again after a ``kill -9`` works without waiting out the lease.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hermes_models import CompressionInProgressError, Session, SessionDB
from hermes_models.store.holders import holder_is_gone, local_holder, namespace

pytestmark = pytest.mark.backends("sqlite", "postgresql")


def expires_at(store: SessionDB, session_id: str) -> float:
    return float(
        store._conn.execute(
            "SELECT expires_at FROM compression_locks WHERE session_id = ?", (session_id,)
        ).fetchone()[0]
    )


def age(store: SessionDB, session_id: str, seconds: float) -> None:
    """Move a lease into the past, as if ``seconds`` had gone by."""
    store._conn.execute(
        "UPDATE compression_locks SET acquired_at = acquired_at - ?, expires_at = expires_at - ?"
        " WHERE session_id = ?",
        (seconds, seconds, session_id),
    )
    store._conn.commit()


# -- B's behaviour -----------------------------------------------------------------------------


def test_acquire_release_and_holder_as_in_hermes(store: SessionDB) -> None:
    holder = "4242:140001:ab12cd"
    assert store.get_compression_lock_holder("s1") is None
    assert store.try_acquire_compression_lock("s1", holder) is True
    assert store.get_compression_lock_holder("s1") == holder
    first = expires_at(store, "s1")
    assert first - time.time() == pytest.approx(300.0, abs=5)
    # The same holder again: True, and the lease is not extended.
    assert store.try_acquire_compression_lock("s1", holder, ttl_seconds=900) is True
    assert expires_at(store, "s1") == first
    # Another holder: False while the lease runs.
    assert store.try_acquire_compression_lock("s1", "other:1:ff") is False
    assert store.get_compression_lock_holder("s1") == holder
    # Releasing with the wrong holder does nothing; the right one frees it.
    assert store.release_compression_lock("s1", "other:1:ff") is None
    assert store.get_compression_lock_holder("s1") == holder
    assert store.release_compression_lock("s1", holder) is None
    assert store.get_compression_lock_holder("s1") is None
    assert store.try_acquire_compression_lock("s1", "other:1:ff") is True
    # Locks are per session.
    assert store.try_acquire_compression_lock("s2", holder) is True


def test_an_expired_lease_is_free_and_reads_as_unheld(store: SessionDB) -> None:
    assert store.try_acquire_compression_lock("s1", "a:1:1", ttl_seconds=60) is True
    age(store, "s1", 61)
    assert store.get_compression_lock_holder("s1") is None
    assert store.try_acquire_compression_lock("s1", "b:2:2", ttl_seconds=60) is True
    assert store.get_compression_lock_holder("s1") == "b:2:2"


def test_empty_ids_and_missing_locks(store: SessionDB) -> None:
    assert store.try_acquire_compression_lock("", "a:1:1") is False
    assert store.get_compression_lock_holder("") is None
    assert store.release_compression_lock("", "a:1:1") is None
    assert store.release_compression_lock("never-locked", "a:1:1") is None
    assert store._conn.execute("SELECT COUNT(*) FROM compression_locks").fetchone()[0] == 0


def test_a_database_error_fails_closed(store: SessionDB, caplog: pytest.LogCaptureFixture) -> None:
    if store.database.dialect == "postgresql":
        store._conn.execute(
            "CREATE FUNCTION refuse_lock() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN RAISE EXCEPTION 'no locks today'; END $$"
        )
        store._conn.execute(
            "CREATE TRIGGER refuse_lock BEFORE INSERT ON compression_locks"
            " FOR EACH ROW EXECUTE FUNCTION refuse_lock()"
        )
    else:
        store._conn.execute(
            "CREATE TRIGGER refuse_lock BEFORE INSERT ON compression_locks"
            " BEGIN SELECT RAISE(ABORT, 'no locks today'); END"
        )
    store._conn.commit()
    caplog.set_level(logging.WARNING, logger="hermes_models")
    assert store.try_acquire_compression_lock("s1", "a:1:1") is False
    assert "no locks today" in caplog.text
    assert store.get_compression_lock_holder("s1") is None


def test_a_read_only_handle_never_takes_a_lock(store: SessionDB) -> None:
    store.try_acquire_compression_lock("s1", "a:1:1")
    with SessionDB(store.db_path, read_only=True) as reader:
        assert reader.try_acquire_compression_lock("s2", "a:1:1") is False
        assert reader.get_compression_lock_holder("s1") == "a:1:1"


# -- beyond Hermes: the lock of a killed local process -----------------------------------------

HOLD = """
import sys, time
from hermes_models import CompressionLock, SessionDB
from hermes_models.store.holders import local_holder

store = SessionDB(sys.argv[1])
me = local_holder()
assert store.try_acquire_compression_lock("chat", me, ttl_seconds=3600)
print(me, flush=True)
time.sleep(600)
"""


def hold_lock(path: Path) -> tuple[subprocess.Popen[str], str]:
    """A child process that takes the lock of 'chat' and then hangs, mid-compression."""
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(HOLD), str(path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    holder = child.stdout.readline().strip()
    assert holder.startswith(f"hermes_models:pid={child.pid}:"), holder
    return child, holder


def stop(child: subprocess.Popen[str]) -> None:
    child.kill()
    child.wait(30)
    if child.stdout is not None:
        child.stdout.close()


needs_proc = pytest.mark.skipif(
    namespace() is None, reason="telling a dead process needs Linux /proc"
)


@pytest.mark.slow
@needs_proc
def test_compress_again_right_after_a_kill_9(
    store: SessionDB, caplog: pytest.LogCaptureFixture
) -> None:
    store.create_session("chat", "cli")
    store.append_message("chat", "user", "long conversation")
    child, holder = hold_lock(store.db_path)
    try:
        assert store.get_compression_lock_holder("chat") == holder
        with pytest.raises(CompressionInProgressError, match=f"being compressed by {holder}"):
            Session.get_by_id("chat").compress([{"role": "user", "content": "summary"}])
        assert holder_is_gone(holder) is False
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
        assert holder_is_gone(holder) is True
        caplog.set_level(logging.WARNING, logger="hermes_models")
        chat = Session.get_by_id("chat")
        cont = chat.compress([{"role": "user", "content": "summary"}], session_id="chat-2")
    finally:
        stop(child)
    assert (chat.end_reason, cont.parent_session_id, cont.message_count) == (
        "compression",
        "chat",
        1,
    )
    assert store.get_compression_lock_holder("chat") is None
    assert f"from {holder}, whose process is gone" in caplog.text


@pytest.mark.slow
@needs_proc
def test_a_killed_holder_not_yet_reaped_is_gone_too(store: SessionDB) -> None:
    child, holder = hold_lock(store.db_path)
    try:
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while not holder_is_gone(holder):  # a zombie until we reap it
            assert time.monotonic() < deadline, "the killed child never looked gone"
            time.sleep(0.05)
        assert store.try_acquire_compression_lock("chat", "next:1:1") is True
    finally:
        stop(child)
    assert store.get_compression_lock_holder("chat") == "next:1:1"


@pytest.mark.slow
@needs_proc
def test_only_provably_dead_local_holders_are_taken_over(store: SessionDB) -> None:
    child, holder = hold_lock(store.db_path)
    os.kill(child.pid, signal.SIGKILL)
    stop(child)
    look_alikes = {
        # Hermes' own format: no host or namespace to go by.
        "hermes": f"{child.pid}:140001:ab12cd",
        # Another boot, or another PID namespace (a container): the PID means nothing here.
        "other boot": holder.replace("ns=", "ns=0"),
        "other namespace": holder.rsplit(".", 1)[0] + ".1:" + holder.rsplit(":", 1)[1],
        "no start time": holder.replace("start=", "begun="),
    }
    for name, other in look_alikes.items():
        sid = f"s-{name}"
        store._conn.execute(
            "INSERT INTO compression_locks VALUES (?, ?, ?, ?)",
            (sid, other, time.time(), time.time() + 3600),
        )
        store._conn.commit()
        assert holder_is_gone(other) is False, name
        assert store.try_acquire_compression_lock(sid, "me:1:1") is False, name
        assert store.get_compression_lock_holder(sid) == other, name
    # The real holder, dead: taken over.
    store._conn.execute(
        "INSERT INTO compression_locks VALUES ('real', ?, ?, ?)",
        (holder, time.time(), time.time() + 3600),
    )
    store._conn.commit()
    assert store.try_acquire_compression_lock("real", "me:1:1") is True


@needs_proc
def test_a_live_local_holder_keeps_its_lock(store: SessionDB) -> None:
    mine = local_holder()
    assert holder_is_gone(mine) is False
    assert store.try_acquire_compression_lock("s1", mine) is True
    assert store.try_acquire_compression_lock("s1", "other:1:1") is False
    assert store.get_compression_lock_holder("s1") == mine
