"""Encryption at rest (SQLCipher, the ``encryption`` extra): a store created encrypted,
converted in place both ways and re-keyed, its backups encrypted, its key from the
environment or a private file, and clear errors for a missing or wrong key."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import sqlite3 as stdlib_sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from console_script import environment, make_read_only, run, run_unprivileged

import hermes_models
from hermes_models import EncryptedStoreError, SessionDB, UnsafeFileError, driver
from hermes_models.store import cipher
from hermes_models.transfer import backup

pytestmark = pytest.mark.encryption

CANARY = "canary-7f3a9c"
CJK = "事件循环的秘密"


@pytest.fixture(autouse=True)
def _needs_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    if not driver.ENCRYPTION:
        pytest.fail("needs the encryption extra (pip install -e '.[encryption]')")
    # The test-suite option (HERMES_TEST_ENCRYPTED) sets a key for every store; these
    # tests choose their own.
    monkeypatch.delenv(cipher.KEY_VARIABLE, raising=False)
    monkeypatch.delenv(cipher.KEY_FILE_VARIABLE, raising=False)


def fill(path: Path, key: str | None = None, sessions: int = 3) -> None:
    with SessionDB(path, key=key) as store:
        for i in range(sessions):
            store.create_session(f"s{i}", "cli")
            store.append_message(f"s{i}", role="user", content=f"{CANARY} {i} {CJK}")
            store.append_message(f"s{i}", role="assistant", content=f"answer {i}")


def file_bytes(path: Path) -> bytes:
    found = b""
    for name in (path, Path(f"{path}-wal")):
        if name.exists():
            found += name.read_bytes()
    return found


def stdlib_reads(path: Path) -> str:
    """What Hermes' own module (the standard library's sqlite3) says reading ``path``."""
    with contextlib.closing(stdlib_sqlite3.connect(path)) as conn:
        try:
            return str(conn.execute("SELECT count(*) FROM sessions").fetchone()[0])
        except stdlib_sqlite3.DatabaseError as exc:
            return str(exc)


def searches(path: Path, key: str | None) -> tuple[int, int]:
    with SessionDB(path, key=key, read_only=True) as store:
        return len(store.search_messages(CANARY, limit=100)), len(
            store.search_messages("事件", limit=100)
        )


def test_a_store_opened_with_a_key_is_created_encrypted_and_works_the_same(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    fill(path, key="correct horse")
    assert path.read_bytes()[:16] != b"SQLite format 3\x00"
    assert CANARY.encode() not in file_bytes(path)
    assert CJK.encode() not in file_bytes(path)
    assert stdlib_reads(path) == "file is not a database"
    assert searches(path, "correct horse") == (3, 3)
    with SessionDB(path, key="correct horse") as store:
        assert [s["id"] for s in store.list_sessions_rich()] == ["s2", "s1", "s0"]
        assert [m["content"] for m in store.get_messages("s1")] == [
            f"{CANARY} 1 {CJK}",
            "answer 1",
        ]


def test_no_key_or_a_wrong_key_is_an_error_naming_the_file_and_changes_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    fill(path, key="right")
    before = path.read_bytes()
    cipher.set_key(str(path), None)  # a key given is this process's until forgotten
    with pytest.raises(EncryptedStoreError) as missing:
        SessionDB(path)
    assert str(missing.value) == (
        f"{path} is encrypted, or not an SQLite database; set HERMES_MODELS_KEY or"
        " HERMES_MODELS_KEY_FILE (or --key-prompt on the command line, key= in Python)"
    )
    with pytest.raises(EncryptedStoreError) as wrong:
        SessionDB(path, key="wrong")
    assert (
        str(wrong.value)
        == f"{path} is encrypted and the key given does not open it, or is not an SQLite database"
    )
    assert isinstance(wrong.value, hermes_models.NotADatabaseError)
    assert path.read_bytes() == before


def test_the_key_comes_from_the_environment_or_a_private_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.db"
    monkeypatch.setenv(cipher.KEY_VARIABLE, "from-env")
    fill(path)
    monkeypatch.delenv(cipher.KEY_VARIABLE)
    key_file = tmp_path / "key"
    key_file.write_text("from-env\n")
    key_file.chmod(0o644)
    monkeypatch.setenv(cipher.KEY_FILE_VARIABLE, str(key_file))
    with pytest.raises(UnsafeFileError, match=r"can be read by others \(mode 0644\); chmod 600"):
        cipher.environment_key()
    key_file.chmod(0o600)
    assert cipher.environment_key() == ("from-env", f"HERMES_MODELS_KEY_FILE ({key_file})")
    assert searches(path, None) == (3, 3)
    key_file.write_text("\n")
    with pytest.raises(ValueError, match="holds no key"):
        cipher.environment_key()


@pytest.mark.parametrize("bad", ["", "a\nb", "nul\x00"])
def test_a_key_is_text_without_line_breaks(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError):
        SessionDB(tmp_path / "state.db", key=bad)
    assert not (tmp_path / "state.db").exists()


def test_a_plain_file_opened_with_a_key_stays_plain_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "state.db"
    fill(path)
    with caplog.at_level("WARNING", logger="hermes_models"):
        assert searches(path, "a-key") == (3, 3)
    assert f"{path} is not encrypted: opened without the key from the key given" in caplog.text
    assert stdlib_reads(path) == "3"


def test_encrypt_rekey_decrypt_in_place_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    fill(path, sessions=20)
    plain_rows = searches(path, None)
    result = hermes_models.encrypt_store(path, "one")
    assert result["path"] == str(path)
    assert result["tables"]["messages"] == 40 and result["tables"]["sessions"] == 20
    assert os.listdir(tmp_path) == ["state.db"]  # no plain copy beside it, no -wal
    assert CANARY.encode() not in file_bytes(path)
    assert stdlib_reads(path) == "file is not a database"
    assert searches(path, "one") == plain_rows
    with pytest.raises(EncryptedStoreError):
        hermes_models.rekey_store(path, "not-it", "two")
    hermes_models.rekey_store(path, "one", "two")
    with pytest.raises(EncryptedStoreError):
        SessionDB(path, key="one")
    assert searches(path, "two") == plain_rows
    hermes_models.decrypt_store(path, "two")
    assert os.listdir(tmp_path) == ["state.db"]
    assert stdlib_reads(path) == "20"
    assert searches(path, None) == plain_rows


def test_encrypt_keeps_the_wal_journal_and_the_schema(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    fill(path)
    with contextlib.closing(stdlib_sqlite3.connect(path)) as conn:
        schema = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    hermes_models.encrypt_store(path, "k")
    hermes_models.decrypt_store(path, "k")
    with contextlib.closing(stdlib_sqlite3.connect(path)) as conn:
        after = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
        assert after == schema
        assert conn.execute("PRAGMA user_version").fetchone()[0] == version
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


HOLDING_READER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN")
conn.execute("SELECT count(*) FROM sessions").fetchone()
print("reading", flush=True)
sys.stdin.read()
conn.close()
"""


@pytest.mark.slow  # a second process
def test_a_store_held_open_is_not_converted(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    fill(path)
    before = path.read_bytes()
    with SessionDB(path) as store:
        store.list_sessions_rich()
        with pytest.raises(stdlib_sqlite3.OperationalError, match="is open in this process"):
            hermes_models.encrypt_store(path, "k")
    # Another process in the middle of a read (an idle connection is not seen: the
    # docs say to stop the programs using the store first).
    reader = subprocess.Popen(
        [sys.executable, "-c", HOLDING_READER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout is not None and reader.stdout.readline() == "reading\n"
        with pytest.raises(stdlib_sqlite3.OperationalError, match="is open in another process"):
            hermes_models.encrypt_store(path, "k")
    finally:
        reader.communicate("")
    assert stdlib_reads(path) == "3"
    assert len(path.read_bytes()) == len(before)


def test_a_backup_of_an_encrypted_store_is_encrypted_under_its_key(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    fill(path, key="k")
    with SessionDB(path, key="k"):
        made = backup(path, tmp_path / "copy.db")
    copy = Path(made["path"])
    assert CANARY.encode() not in copy.read_bytes()
    assert stdlib_reads(copy) == "file is not a database"
    assert searches(copy, "k") == (3, 3)


def test_doctor_checks_an_encrypted_store_whole(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    fill(path, key="k")
    with SessionDB(path, key="k") as store:
        report: dict[str, Any] = hermes_models.health.doctor(store.database)
    assert [check["name"] for check in report["checks"] if not check["ok"]] == []


def test_a_read_only_encrypted_file_is_read_and_refused_for_writing_by_name(
    tmp_path: Path,
) -> None:
    # Reading the first page under the key is where SQLite refuses a read-only file
    # (before the check that names it gave way to "attempt to write a readonly database").
    folder = tmp_path / "store"
    folder.mkdir()
    path = folder / "state.db"
    fill(path, key="k")
    for sidecar in folder.glob("state.db-*"):
        sidecar.unlink()
    before = path.read_bytes()
    env = {**environment(folder), cipher.KEY_VARIABLE: "k"}
    make_read_only(path, folder)
    try:
        written = run_unprivileged("vacuum", "--db", str(path), cwd=folder, env=env)
        shown = run_unprivileged("stats", "--json", "--db", str(path), cwd=folder, env=env)
        found = run_unprivileged("search", CANARY, "--json", "--db", str(path), cwd=folder, env=env)
    finally:
        folder.chmod(0o755)
        path.chmod(0o600)
    assert (written.returncode, written.stdout, written.stderr) == (
        1,
        "",
        f"Error: {path} cannot be written here (the file or its folder is read-only)\n",
    )
    assert shown.returncode == 0, shown.stderr
    [stats] = json.loads(shown.stdout)
    assert (stats["sessions"], stats["journal_mode"]) == (3, "unknown")  # the header is encrypted
    assert found.returncode == 0, found.stderr
    assert len(json.loads(found.stdout)) == 3
    assert path.read_bytes() == before
    assert sorted(p.name for p in folder.iterdir()) == ["state.db"]


# -- the command line ---------------------------------------------------------------------------


def test_the_commands_encrypt_read_back_up_refuse_export_and_decrypt(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    fill(path)
    env = environment(tmp_path)
    done = run("--db", str(path), "encrypt", cwd=tmp_path, env=env)
    assert done.returncode == 1
    assert done.stderr == (
        "Error: no new key: set HERMES_MODELS_NEW_KEY or HERMES_MODELS_NEW_KEY_FILE"
        " (or run on a terminal to type it)\n"
    )
    env_new = {**env, "HERMES_MODELS_NEW_KEY": "k1"}
    done = run("--db", str(path), "encrypt", "--json", cwd=tmp_path, env=env_new)
    assert done.returncode == 0, done.stderr
    (record,) = json.loads(done.stdout)
    assert (record["path"], record["rows"] > 6) == (str(path), True)
    assert stdlib_reads(path) == "file is not a database"

    done = run("--db", str(path), "sessions", cwd=tmp_path, env=env)
    assert (done.returncode, done.stderr) == (
        1,
        f"Error: {path} is encrypted, or not an SQLite database; set HERMES_MODELS_KEY or"
        " HERMES_MODELS_KEY_FILE (or --key-prompt on the command line, key= in Python)\n",
    )
    keyed = {**env, "HERMES_MODELS_KEY": "k1"}
    done = run("--db", str(path), "search", "事件", "--json", cwd=tmp_path, env=keyed)
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)) == 3
    done = run("--db", str(path), "doctor", cwd=tmp_path, env=keyed)
    assert done.returncode == 0, done.stdout
    done = run("--db", str(path), "backup", str(tmp_path / "b.db"), cwd=tmp_path, env=keyed)
    assert done.returncode == 0, done.stderr
    assert stdlib_reads(tmp_path / "b.db") == "file is not a database"
    out = tmp_path / "x.jsonl"
    done = run("--db", str(path), "export", "-o", str(out), cwd=tmp_path, env=keyed)
    assert (done.returncode, out.exists()) == (1, False)
    assert done.stderr == (
        f"Error: {path} is encrypted and an export is plain text; add --plaintext to"
        " write it anyway (backup keeps a copy encrypted)\n"
    )
    done = run("--db", str(path), "export", "-o", str(out), "--plaintext", cwd=tmp_path, env=keyed)
    assert done.returncode == 0, done.stderr
    assert CANARY in out.read_text()

    rekeyed = {**keyed, "HERMES_MODELS_NEW_KEY": "k2"}
    done = run("--db", str(path), "rekey", cwd=tmp_path, env=rekeyed)
    assert done.returncode == 0, done.stderr
    done = run("--db", str(path), "decrypt", cwd=tmp_path, env=keyed)
    assert (done.returncode, done.stderr) == (
        1,
        f"Error: {path} is encrypted and the key given does not open it,"
        " or is not an SQLite database\n",
    )
    done = run("--db", str(path), "decrypt", cwd=tmp_path, env={**env, "HERMES_MODELS_KEY": "k2"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"decrypted {path} (")
    assert stdlib_reads(path) == "3"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("state")) == ["state.db"]


def test_encrypt_rekey_and_decrypt_print_the_same_record_in_the_four_formats(
    tmp_path: Path,
) -> None:
    template = tmp_path / "template.db"
    fill(template)
    env = environment(tmp_path)
    steps = (
        ("encrypt", {"HERMES_MODELS_NEW_KEY": "k1"}),
        ("rekey", {"HERMES_MODELS_KEY": "k1", "HERMES_MODELS_NEW_KEY": "k2"}),
        ("decrypt", {"HERMES_MODELS_KEY": "k2"}),
    )
    found: dict[str, list[list[dict[str, Any]]]] = {}
    for flag in ("--json", "--nl", "--csv", "--tsv"):
        path = tmp_path / flag.strip("-") / "state.db"
        path.parent.mkdir()
        path.write_bytes(template.read_bytes())
        path.chmod(0o600)
        found[flag] = []
        for command, keys in steps:
            done = run("--db", str(path), command, flag, cwd=path.parent, env={**env, **keys})
            assert (done.returncode, done.stderr) == (0, ""), command
            text = done.stdout
            if flag == "--json":
                rows = json.loads(text)
            elif flag == "--nl":
                rows = [json.loads(line) for line in text.splitlines()]
            else:
                dialect = "excel-tab" if flag == "--tsv" else "excel"
                rows = list(csv.DictReader(io.StringIO(text), dialect=dialect))
            # The records name their own copy of the store.
            found[flag].append([{**row, "path": Path(row["path"]).parent.name} for row in rows])
    as_json = found["--json"]
    assert [[row["path"] for row in rows] for rows in as_json] == [["json"]] * 3
    assert [[sorted(row) for row in rows] for rows in as_json] == [
        [["bytes", "pages", "path", "rows"]]
    ] * 3
    assert all(rows[0]["rows"] > 6 for rows in as_json)
    for flag in ("--nl", "--csv", "--tsv"):
        expected = [[{**row, "path": flag.strip("-")} for row in rows] for rows in as_json]
        if flag in ("--csv", "--tsv"):
            expected = [
                [{key: str(value) for key, value in row.items()} for row in rows]
                for rows in expected
            ]
        assert found[flag] == expected, flag
