"""The proof that ``erase`` leaves no byte of the erased text in the store.

Random canaries - an ASCII token, a CJK string, one inside a tool call's arguments,
one in tool output, one in a title, one in a delegated run's message - are written
among other messages while another writer appends beside; after the erase the raw
bytes of every file of the store (the database, ``-wal``, ``-shm``, ``-journal``) are
searched for each canary (UTF-8, UTF-16-LE and -BE, the tail an FTS5 leaf keeps of a
prefix-compressed term, and the CJK pairs the gram index stores), ``fts5vocab`` of
every FTS5 index in the file is read for the canaries' terms, and every row that was
not erased is compared with what it was before.

The same proof run after a plain ``delete_session`` finds the canaries: the test of
that is here too, so the proof is shown to be able to fail.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from hermes_models import Session, SessionDB, using
from hermes_models.driver import sqlite3
from hermes_models.store import grams

# the proof reads every file's bytes
pytestmark = pytest.mark.plaintext_file

#: Words of the other messages: no digits, so no trigram of a canary's digits is theirs.
WORDS = (
    "alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega river stone "
    "cloud paper table window garden market engine socket server client request "
    "response token budget retry timeout buffer parser module import export"
).split()
#: The CJK characters of the other messages: none of them is a canary's (those are
#: drawn from CJK extension A, U+3400-U+4DBF, which the gram index covers).
FILLER_CJK = [chr(code) for code in range(0x4E00, 0x4E00 + 400)]


def canary_ascii(rng: random.Random) -> str:
    return (
        "cny"
        + "".join(rng.choice("0123456789") for _ in range(8))
        + "".join(rng.choice("qxjz0123456789") for _ in range(10))
    )


def canary_cjk(rng: random.Random) -> str:
    return "".join(chr(rng.randrange(0x3400, 0x4DC0)) for _ in range(8))


@dataclass
class Canaries:
    """The canaries of a store, and which sessions hold them."""

    ascii: list[str] = field(default_factory=list)
    cjk: list[str] = field(default_factory=list)
    erase: list[str] = field(default_factory=list)
    delegated: list[str] = field(default_factory=list)
    #: A canary pair left in a session that is not erased: it must still be found.
    kept_ascii: str = ""
    kept_cjk: str = ""


def _filler(rng: random.Random) -> str:
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(5, 30)))
    if rng.random() < 0.3:
        words += " " + "".join(rng.choice(FILLER_CJK) for _ in range(rng.randrange(2, 12)))
    return words


def fill(path: Path, messages: int, rng: random.Random) -> None:
    """``messages`` other messages in sessions of 50, written as Hermes writes them
    (plain SQL: the file's triggers keep the word and trigram indexes), then the gram
    index brought up to date."""
    now = time.time() - 86400
    with contextlib.closing(sqlite3.connect(path)) as conn:
        for start in range(0, messages, 50):
            sid = f"other_{start // 50:05d}"
            conn.execute(
                "INSERT INTO sessions (id, source, started_at, ended_at, end_reason, title)"
                " VALUES (?, 'cli', ?, ?, 'done', ?)",
                (sid, now + start, now + start + 10, f"other title {start // 50}"),
            )
            rows = []
            for index in range(start, min(start + 50, messages)):
                role = ("user", "assistant", "tool")[index % 3]
                calls = None
                if role == "assistant" and index % 2:
                    calls = json.dumps(
                        [{"id": "call", "function": {"name": "grep", "arguments": _filler(rng)}}]
                    )
                rows.append((sid, role, _filler(rng), calls, now + index))
            conn.executemany(
                "INSERT INTO messages (session_id, role, content, tool_calls, timestamp)"
                " VALUES (?, ?, ?, ?, ?)",
                rows,
            )
            conn.execute("UPDATE sessions SET message_count = ? WHERE id = ?", (len(rows), sid))
        conn.commit()
    with SessionDB(path) as store:
        store.update_search_index()


def plant(store: SessionDB, rng: random.Random) -> Canaries:
    """Two sessions to erase (one with a delegated run) holding every kind of canary,
    and one kept session holding canaries of its own."""
    found = Canaries()

    def new() -> tuple[str, str]:
        text, cjk = canary_ascii(rng), canary_cjk(rng)
        found.ascii.append(text)
        found.cjk.append(cjk)
        return text, cjk

    for number in range(2):
        sid = f"secret_{number}"
        store.create_session(sid, "cli")
        text, cjk = new()
        store.set_session_title(sid, f"title {text} {cjk}")
        text, cjk = new()
        store.append_message(sid, "user", f"my key is {text} and {cjk} ok")
        text, cjk = new()
        calls = [
            {
                "id": "c1",
                "function": {
                    "name": "shell",
                    "arguments": json.dumps(
                        {"command": f"echo {text}", "note": cjk}, ensure_ascii=False
                    ),
                },
            }
        ]
        store.append_message(sid, "assistant", "running", tool_calls=calls)
        text, cjk = new()
        store.append_message(
            sid, "tool", f"output: {text}\n{cjk}", tool_call_id="c1", tool_name="shell"
        )
        store.end_session(sid, "done")
        found.erase.append(sid)
    # A delegated run of the first one: erased with it, by lineage.
    with using(store.database):
        child = Session.get_by_id("secret_0").delegate(session_id="secret_0_run")
    text, cjk = new()
    store.append_message(child.id, "assistant", f"subagent found {text} {cjk}")
    store.end_session(child.id, "done")
    found.delegated.append(child.id)
    store.create_session("kept", "cli")
    found.kept_ascii, found.kept_cjk = canary_ascii(rng), canary_cjk(rng)
    store.append_message("kept", "user", f"keep {found.kept_ascii} {found.kept_cjk}")
    return found


# -- looking for the canaries ----------------------------------------------------------------


def store_files(path: Path) -> list[Path]:
    return [
        p for p in (path, *(Path(f"{path}{s}") for s in ("-wal", "-shm", "-journal"))) if p.exists()
    ]


def needles(canaries: Canaries) -> dict[str, bytes]:
    """What the raw bytes must not hold, by a name that says what it is."""
    found: dict[str, bytes] = {}
    for text in [*canaries.ascii, *canaries.cjk]:
        for codec in ("utf-8", "utf-16-le", "utf-16-be"):
            found[f"{text!r} as {codec}"] = text.encode(codec)
    for text in canaries.ascii:
        # An FTS5 leaf keeps a term after the prefix it shares with the one before.
        found[f"{text[4:]!r} (a term's tail)"] = text[4:].encode()
    for text in canaries.cjk:
        for pair in grams.grams(text).split():
            if len(pair) == 2:
                found[f"gram {pair!r}"] = pair.encode()
    return found


def fts5_tables(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """Every FTS5 table of the file, with its SQL."""
    rows = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND sql LIKE '%USING fts5%'"
    ).fetchall()
    return sorted((row[0], row[1]) for row in rows)


def trigrams(text: str) -> set[str]:
    low = text.lower()
    return {low[i : i + 3] for i in range(len(low) - 2)}


def vocab_leftovers(path: Path, canaries: Canaries) -> list[str]:
    """Terms of every FTS5 index in the file that only an erased canary explains: a term
    holding a canary, or one of a canary's trigrams or CJK grams that no remaining
    message holds."""
    found: list[str] = []
    with contextlib.closing(sqlite3.connect(path)) as conn:
        texts = [
            " ".join(str(v) for v in row if v is not None)
            for row in conn.execute("SELECT content, tool_name, tool_calls FROM messages")
        ]
        remaining = trigrams(" ".join(texts)) | set(grams.grams(*texts).split())
        pieces: set[str] = set()
        for text in [*canaries.ascii, *canaries.cjk]:
            pieces |= trigrams(text) | set(grams.grams(text).split())
        only_erased = pieces - remaining
        for table, _ in fts5_tables(conn):
            vocab = f"temp.vocab_{table}"
            conn.execute(f"CREATE VIRTUAL TABLE {vocab} USING fts5vocab(main, {table}, row)")
            terms = [row[0] for row in conn.execute(f"SELECT term FROM {vocab}")]
            conn.execute(f"DROP TABLE {vocab}")
            for term in terms:
                whole = any(text.lower() in term for text in [*canaries.ascii, *canaries.cjk])
                if whole or term in only_erased:
                    found.append(f"{table}: {term!r}")
    return found


def byte_leftovers(path: Path, canaries: Canaries) -> list[str]:
    found = []
    for file in store_files(path):
        data = file.read_bytes()
        found += [
            f"{name} in {file.name}" for name, raw in needles(canaries).items() if raw in data
        ]
    return found


def leftovers(path: Path, canaries: Canaries) -> list[str]:
    return [*byte_leftovers(path, canaries), *vocab_leftovers(path, canaries)]


def snapshot(path: Path) -> dict[str, dict[Any, tuple[Any, ...]]]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return {
            table: {row[0]: tuple(row) for row in conn.execute(f"SELECT * FROM {table}")}
            for table in ("sessions", "messages")
        }


# -- another writer beside -------------------------------------------------------------------


@contextlib.contextmanager
def writer_beside(path: Path, session_id: str) -> Iterator[list[int]]:
    """A thread appending to ``session_id`` through its own handle until the block ends;
    yields the ids it wrote (the handle stays open while the block runs)."""
    written: list[int] = []
    stop = threading.Event()
    started = threading.Event()
    errors: list[BaseException] = []
    store = SessionDB(path)

    def run() -> None:
        try:
            for number in itertools.count():
                spelled = "".join(chr(97 + int(digit)) for digit in str(number))
                written.append(store.append_message(session_id, "user", f"beside {spelled}"))
                started.set()
                if stop.is_set():
                    return
                time.sleep(0.001)
        except BaseException as exc:
            errors.append(exc)
            started.set()

    thread = threading.Thread(target=run)
    thread.start()
    started.wait(30)
    try:
        yield written
    finally:
        stop.set()
        thread.join(60)
        store.close()
    if errors:
        raise errors[0]


# -- the proof -------------------------------------------------------------------------------


def prove(
    path: Path,
    messages: int,
    remove: Callable[[SessionDB, list[str]], Any],
    seed: int,
) -> tuple[list[str], Canaries]:
    """Build a store of ``messages`` other messages with canaries, run ``remove`` on the
    canaries' sessions beside another writer, and return what the proof finds (and
    the canaries); every row not removed is checked equal to before."""
    rng = random.Random(seed)
    fill(path, messages, rng)
    store = SessionDB(path)
    canaries = plant(store, rng)
    store.create_session("beside", "cli")
    before = snapshot(path)
    with writer_beside(path, "beside") as written:
        time.sleep(0.05)
        remove(store, canaries.erase)
        time.sleep(0.05)
        found = leftovers(path, canaries)
    after = snapshot(path)
    store.close()
    gone = set(canaries.erase) | set(canaries.delegated)
    kept_sessions = {k: v for k, v in before["sessions"].items() if k not in gone | {"beside"}}
    assert {k: after["sessions"][k] for k in kept_sessions} == kept_sessions
    assert not gone & set(after["sessions"])
    erased_ids = {k for k, v in before["messages"].items() if v[1] in gone}
    kept_messages = {k: v for k, v in before["messages"].items() if k not in erased_ids}
    assert {k: after["messages"].get(k) for k in kept_messages} == kept_messages
    assert not erased_ids & set(after["messages"])
    assert set(written) <= set(after["messages"])
    # What stays is still found, by each index.
    with SessionDB(path) as reader:
        for query in (canaries.kept_ascii, canaries.kept_cjk[:4], canaries.kept_cjk[:2]):
            hits = reader.search_messages(query)
            assert [hit["session_id"] for hit in hits] == ["kept"], query
    return found, canaries


def erase(store: SessionDB, ids: list[str]) -> Any:
    report = store.erase_sessions(ids)
    assert report["sessions"] == ["secret_0", "secret_1", "secret_0_run"]
    assert report["messages"] == 7
    assert report["wal_blocked"] is False
    assert report["wal_truncated"] is True
    assert report["indexes_merged"] == ["messages_fts", "messages_fts_trigram", "messages_cjk"]
    return report


def test_erase_leaves_no_canary(migrated_copy: Callable[[Path], Path], tmp_path: Path) -> None:
    found, _ = prove(migrated_copy(tmp_path / "state.db"), 1_500, erase, seed=1)
    assert found == [], "\n".join(found)


def test_the_proof_finds_what_delete_session_leaves(
    migrated_copy: Callable[[Path], Path], tmp_path: Path
) -> None:
    """The same proof after a plain deletion: the canaries are there to be found."""

    def delete(store: SessionDB, ids: list[str]) -> None:
        for sid in ids:
            assert store.delete_session(sid)

    found, canaries = prove(migrated_copy(tmp_path / "state.db"), 1_500, delete, seed=2)
    # The FTS5 segments still hold the terms until a merge, and the WAL the frames the
    # messages were written in, or the file once a checkpoint copied them (which of the
    # two depends on when the writer beside it restarted the WAL).
    assert {
        f"{canaries.ascii[1]!r} as utf-8 in state.db",
        f"{canaries.ascii[1]!r} as utf-8 in state.db-wal",
    } & set(found)
    assert any(item.startswith(f"{canaries.ascii[1][4:]!r} (a term's tail)") for item in found)
    assert any(item.startswith("gram ") for item in found)


@pytest.mark.slow
def test_erase_leaves_no_canary_among_ten_thousand_messages(
    migrated_copy: Callable[[Path], Path], tmp_path: Path
) -> None:
    found, _ = prove(migrated_copy(tmp_path / "state.db"), 10_500, erase, seed=3)
    assert found == [], "\n".join(found)


# -- what another program deleted first --------------------------------------------------------


@pytest.mark.parametrize("changed_first", [False, True], ids=["delete", "update-then-delete"])
def test_grams_of_messages_deleted_by_another_program_leave(
    tmp_path: Path, migrated_copy: Callable[[Path], Path], changed_first: bool
) -> None:
    """Hermes deletes a session with plain SQL (after changing a message, or not):
    the gram index held its pairs; an erase (of anything) or an optimize takes them
    out of the index and out of what it holds, and a vacuum out of the file."""
    for run in ("erase", "optimize"):
        path = migrated_copy(tmp_path / run / "state.db")
        rng = random.Random(7)
        canaries = Canaries(cjk=[canary_cjk(rng)], ascii=[canary_ascii(rng)])
        with SessionDB(path) as store:
            store.create_session("gone", "cli")
            first = store.append_message("gone", "user", f"{canaries.cjk[0]} {canaries.ascii[0]}")
            store.create_session("other", "cli")
            store.append_message("other", "user", "其他 text")
        with contextlib.closing(sqlite3.connect(path)) as conn:
            if changed_first:
                conn.execute(
                    "UPDATE messages SET content = ? WHERE id = ?",
                    (f"{canaries.cjk[0][::-1]} edited", first),
                )
                canaries.cjk.append(canaries.cjk[0][::-1])
            conn.execute("DELETE FROM messages WHERE session_id = 'gone'")
            conn.execute("DELETE FROM sessions WHERE id = 'gone'")
            conn.commit()
        with SessionDB(path) as store:
            if run == "erase":
                report = store.erase_sessions(["no such session"])
                assert report["sessions"] == []
            else:
                store.optimize_fts()
            assert vocab_leftovers(path, canaries) == []
            with contextlib.closing(sqlite3.connect(path)) as conn:
                held = conn.execute("SELECT id, grams FROM messages_cjk_grams").fetchall()
            assert held == [(first + 1, "他 其 其他")]
            # Another program's delete overwrote nothing: its bytes leave with a vacuum.
            store.vacuum()
        assert byte_leftovers(path, canaries) == []
