"""A store's file name handled as text: what ``resolve_file`` makes of a target, how
``sqlite_uri`` escapes it for SQLite, and the ``Path`` objects the API gives back.

The outside reference for the resolved name is ``pathlib``: the name a target resolves
to is the one ``pathlib`` makes of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from conftest import EXPORT_FLAGS
from console_script import run_module
from hypothesis import given, settings
from hypothesis import strategies as st

import hermes_models
from hermes_models import SessionDB
from hermes_models.driver import sqlite3
from hermes_models.store.files import resolve_file, resolve_path, sqlite_uri, uri_path

#: Path pieces: separators, dots and the characters a URI treats specially among letters.
PIECES = st.lists(
    st.sampled_from(["a", "b", ".", "..", "", "x y", "#", "?", "%41", "é", "数据", "~", "-_"]),
    min_size=1,
    max_size=6,
)


def _pathlib_reading(text: str) -> str:
    """What the package made of a plain path before it stopped using pathlib."""
    return os.path.abspath(Path(text).expanduser())


@settings(max_examples=300, deadline=None)
@given(pieces=PIECES, absolute=st.booleans(), trailing=st.booleans())
def test_a_path_resolves_to_what_pathlib_made_of_it(
    pieces: list[str], absolute: bool, trailing: bool
) -> None:
    text = ("/" if absolute else "") + "/".join(pieces) + ("/" if trailing else "")
    if not text.strip() or Path(text).parts[:1] == ("~",) or "://" in text:
        return  # refused, a home folder (below), a URL: each has its own test
    assert resolve_file(text) == _pathlib_reading(text)
    assert resolve_path(text) == Path(_pathlib_reading(text))


def test_home_and_hermes_home_expand_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "me"))
    assert resolve_file("~/s.db") == str(tmp_path / "me" / "s.db")
    assert resolve_file("~") == str(tmp_path / "me")
    monkeypatch.setenv("HERMES_HOME", "~/hh/./x/../y")
    assert resolve_file() == str(tmp_path / "me" / "hh" / "y" / "state.db")
    assert resolve_path() == tmp_path / "me" / "hh" / "y" / "state.db"


def test_a_tilde_after_a_folder_is_a_name_not_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pathlib read "./~" as "~", the home folder; a shell, SQLite and we read a file "~".
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "me"))
    assert resolve_file("./~") == str(tmp_path / "~")
    assert resolve_file("./~/s.db") == str(tmp_path / "~" / "s.db")
    assert resolve_file("a/~") == str(tmp_path / "a" / "~")


def test_an_unknown_home_folder_is_an_error_that_names_it_and_makes_no_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        ValueError,
        match=r"target: '~nosuchuser93/x.db' starts with ~, but no "
        r"home folder is known for user 'nosuchuser93'",
    ):
        hermes_models.connect("~nosuchuser93/x.db")
    monkeypatch.setenv("HERMES_HOME", "~nosuchuser93")
    with pytest.raises(ValueError, match=r"HERMES_HOME: '~nosuchuser93' starts with ~"):
        SessionDB()
    assert os.listdir(tmp_path) == []


@settings(max_examples=300, deadline=None)
@given(text=st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=40))
def test_a_name_is_escaped_as_urllib_escapes_it(text: str) -> None:
    assert uri_path(text) == quote(text, safe="/")
    assert (
        sqlite_uri(text, mode="ro", immutable="1")
        == f"file:{quote(text, safe='/')}?mode=ro&immutable=1"
    )


@pytest.mark.parametrize(
    "name", ["plain.db", "a b#c?d%41.db", "数据 store.db", "semi;colon&amp=.db", "~tilde.db"]
)
def test_a_store_named_with_uri_characters_opens_that_file_read_only_too(
    tmp_path: Path, name: str
) -> None:
    path = tmp_path / name
    with SessionDB(path) as store:
        store.create_session("s1", "cli")
        store.append_message("s1", "user", "hello")
    assert sorted(os.listdir(tmp_path)) == [name]
    with SessionDB(path, read_only=True) as reader:
        assert [m["content"] for m in reader.get_messages("s1")] == ["hello"]
    conn = sqlite3.connect(sqlite_uri(str(path), mode="ro"), uri=True)
    try:
        assert conn.execute("SELECT COUNT(*) FROM messages").fetchone() == (1,)
    finally:
        conn.close()


def test_a_name_that_is_not_utf8_keeps_its_bytes(tmp_path: Path) -> None:
    raw = os.fsencode(str(tmp_path)) + b"/store-\xff.db"
    path = os.fsdecode(raw)  # a lone surrogate stands for the byte 0xff
    with SessionDB(path) as store:
        store.create_session("s1", "cli")
    assert b"store-\xff.db" in os.listdir(os.fsencode(str(tmp_path)))
    with SessionDB(path, read_only=True) as reader:
        assert reader.get_session("s1")["source"] == "cli"


def test_the_api_still_gives_paths_as_pathlib_paths(tmp_path: Path) -> None:
    with SessionDB(tmp_path / "a" / ".." / "s.db") as store:
        assert store.db_path == tmp_path / "s.db"
        assert type(store.db_path) is type(tmp_path)
        assert store.database.path == tmp_path / "s.db"
        assert store.database.file == str(tmp_path / "s.db")
        assert repr(store) == f"<SessionDB {tmp_path / 's.db'} open>"
        store.db_path = "elsewhere.db"  # as in Hermes: only what it gives back changes
        assert store.db_path == Path(os.path.abspath("elsewhere.db"))
        store.create_session("s1", "cli")
        assert repr(store) == f"<SessionDB {tmp_path / 's.db'} open>"
        assert store.backup(tmp_path / "copy.db")["path"] == str(tmp_path / "copy.db")
    assert not os.path.exists("elsewhere.db")
    with SessionDB(tmp_path / "copy.db", read_only=True) as copy:
        assert copy.get_session("s1") is not None
    with SessionDB(tmp_path / "s.db", read_only=True) as reader:
        assert reader.get_session("s1") is not None


@pytest.mark.slow  # a new Python process
def test_the_command_names_an_unknown_home_folder_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hermes_models", "--db", "~nosuchuser93/x.db", "sessions"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.strip().splitlines()[-1] == (
        "Error: --db: '~nosuchuser93/x.db' starts with ~, but no home folder is known for user "
        "'nosuchuser93' (see 'python -m hermes_models --help')"
    )
    assert os.listdir(tmp_path) == []


def test_the_default_store_without_a_home_folder_names_the_argument(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pwd

    def unknown(uid: int) -> Any:
        raise KeyError(uid)

    monkeypatch.delenv("HERMES_HOME", raising=False)
    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.setattr(pwd, "getpwuid", unknown)
    with pytest.raises(
        ValueError,
        match=r"^db_path: '~/.hermes' starts with ~, but no home folder is known for this process$",
    ):
        SessionDB()


# -- files written and read besides the store --------------------------------------------


def test_export_import_and_backup_read_a_tilde_after_a_folder_as_a_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pathlib read "./~/x" as "~/x" and wrote the bundle into the home folder.
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "me"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    (tmp_path / "~").mkdir()
    with SessionDB(tmp_path / "state.db") as store:
        store.create_session("s", "cli", started_at=1.0)
        store.append_message("s", "user", "hello", timestamp=2.0)
        assert store.export_bundle("./~/x.jsonl") == {"sessions": 1, "messages": 1}
        assert store.export_markdown("./~/x.md") == 1
        store.backup("./~/b.db")
    assert sorted(os.listdir(tmp_path / "~")) == ["b.db", "x.jsonl", "x.md"]
    assert os.listdir(home) == []
    with SessionDB(tmp_path / "copy.db") as copy:
        assert copy.import_bundle("./~/x.jsonl")["sessions_added"] == 1
        assert [m["content"] for m in copy.get_messages("s")] == ["hello"]
    with SessionDB(tmp_path / "~" / "b.db", read_only=True) as backup:
        assert [m["content"] for m in backup.get_messages("s")] == ["hello"]
    # "~" alone still names the home folder, as in a shell.
    with SessionDB(tmp_path / "state.db") as store:
        store.export_bundle("~/y.jsonl")
    assert os.listdir(home) == ["y.jsonl"]


def test_an_unknown_home_folder_in_a_destination_is_a_value_error_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with SessionDB(tmp_path / "state.db") as store:
        store.create_session("s", "cli")
        before = sorted(os.listdir(tmp_path))
        for write, argument in (
            (store.export_bundle, "target"),
            (store.export_markdown, "target"),
            (store.backup, "dest"),
        ):
            with pytest.raises(
                ValueError,
                match=rf"^{argument}: '~nosuchuser93/x' starts with ~, but no home folder is "
                r"known for user 'nosuchuser93'$",
            ):
                write("~nosuchuser93/x")
        with pytest.raises(ValueError, match=r"^path: '~nosuchuser93/x' starts with ~"):
            store.import_transcripts("~nosuchuser93/x")
        assert sorted(os.listdir(tmp_path)) == before


@pytest.mark.slow  # new Python processes
def test_the_commands_write_and_read_a_tilde_after_a_folder_where_it_names(
    tmp_path: Path,
) -> None:
    home = tmp_path / "me"
    home.mkdir()
    (tmp_path / "~").mkdir()
    env = {**os.environ, "HOME": str(home), "HERMES_HOME": str(tmp_path / "hh")}
    with SessionDB(tmp_path / "hh" / "state.db") as store:
        store.create_session("s", "cli")
        store.append_message("s", "user", "hello")

    def run(*args: str) -> tuple[int, str, str]:
        done = run_module(*args, cwd=tmp_path, env=env)
        return done.returncode, done.stdout, done.stderr

    assert run("export", *EXPORT_FLAGS, "-o", "./~/x.jsonl") == (
        0,
        "wrote 1 session and 1 message to ./~/x.jsonl\n",
        "",
    )
    assert os.listdir(tmp_path / "~") == ["x.jsonl"]
    # Messages name the folder "~" here, not what reads as the home folder ("~/x.jsonl").
    assert run("export", *EXPORT_FLAGS, "-o", "./~/x.jsonl") == (
        1,
        "",
        f"Error: {tmp_path}/~/x.jsonl already exists (--force replaces it)\n",
    )
    assert run("--db", str(tmp_path / "new.db"), "import", "./~/x.jsonl", "--json")[:2] == (
        0,
        '[{"path": "./~/x.jsonl", "sessions_added": 1, "sessions_skipped": 0, '
        '"messages_added": 1, "messages_skipped": 0, "messages_renumbered": 0, '
        '"titles_renamed": 0}]\n',
    )
    # An unknown user's ~ in a file argument is a usage error naming it, as in --db.
    for args, hint in (
        (("backup", "~nosuchuser93/b.db"), "DEST"),
        (("export", "-o", "~nosuchuser93/b.db"), "'--output'"),
    ):
        status, out, err = run(*args)
        assert (status, out) == (2, "")
        assert err.splitlines() == [
            f"Error: Invalid value for {hint}: '~nosuchuser93/b.db' starts with ~, but no home "
            f"folder is known for user 'nosuchuser93' (see 'python -m hermes_models {args[0]} "
            "--help')"
        ]
    assert os.listdir(home) == []
    assert sorted(os.listdir(tmp_path)) == ["hh", "me", "new.db", "~"]


@pytest.mark.slow  # new Python processes
def test_machine_output_of_a_name_that_is_not_utf8_keeps_its_bytes(tmp_path: Path) -> None:
    # It failed with "surrogates not allowed" after the copy of `backup --json` was made.
    name = os.fsdecode(os.fsencode(str(tmp_path)) + b"/a\xffb.db")
    SessionDB(name).close()

    def run(*args: str) -> tuple[int, bytes, bytes]:
        done = subprocess.run(
            [sys.executable, "-m", "hermes_models", "--db", name, *args],
            capture_output=True,
            cwd=tmp_path,
        )
        return done.returncode, done.stdout, done.stderr

    status, out, err = run("stats", "--json")
    assert (status, err) == (0, b"")
    assert b"a\\udcffb.db" in out  # an escape: the output is UTF-8 and valid JSON
    assert os.fsencode(json.loads(out)[0]["path"]) == os.fsencode(name)
    status, out, err = run("stats", "--nl")
    assert (status, err) == (0, b"")
    assert os.fsencode(json.loads(out)["path"]) == os.fsencode(name)
    for fmt, sep in (("--csv", b","), ("--tsv", b"\t")):
        status, out, err = run("stats", fmt)
        assert (status, err) == (0, b"")
        assert out.splitlines()[1].startswith(os.fsencode(name) + sep + b"16" + sep)
    status, out, err = run("backup", str(tmp_path / "copies") + "/", "--json")
    assert (status, err) == (0, b"")
    (made,) = json.loads(out)
    assert os.fsencode(made["source"]) == os.fsencode(name)
    assert os.path.isfile(made["path"])
    assert os.fsencode(made["path"]).startswith(os.fsencode(str(tmp_path)) + b"/copies/a\xffb-")


def test_a_percent_escape_in_a_sqlite_url_is_the_byte_it_names(tmp_path: Path) -> None:
    # %FF was read as U+FFFD ("\xef\xbf\xbd" on disk), another file than the one named.
    folder = os.fsencode(str(tmp_path))
    assert resolve_file(f"sqlite:///{tmp_path}/a%FFb.db") == (os.fsdecode(folder + b"/a\xffb.db"))
    assert resolve_file("sqlite:////x/%E6%95%B0%20y.db") == "/x/数 y.db"
    with SessionDB(f"sqlite:///{tmp_path}/a%FFb.db") as store:
        store.create_session("s", "cli")
    assert os.listdir(folder) == [b"a\xffb.db"]


def test_a_sessions_folder_expands_its_tilde_before_anything_is_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # sessions_dir="~/x" removed the transcripts of ./~/x and left those of $HOME/x.
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "me"
    monkeypatch.setenv("HOME", str(home))
    for folder in (home / "x", tmp_path / "~" / "x"):
        folder.mkdir(parents=True)
        for sid in ("a", "b"):
            (folder / f"{sid}.jsonl").write_text("{}\n")
    with SessionDB(tmp_path / "state.db") as store:
        for sid in ("a", "b"):
            store.create_session(sid, "cli")
        with pytest.raises(
            ValueError,
            match=r"^sessions_dir: '~nosuchuser93/x' starts with ~, but no home folder is "
            r"known for user 'nosuchuser93'$",
        ):
            store.delete_sessions(["a"], sessions_dir="~nosuchuser93/x")
        assert store.get_session("a") is not None
        assert store.delete_sessions(["a"], sessions_dir="~/x") == 1
        assert store.delete_sessions(["b"], sessions_dir="./~/x") == 1
    assert os.listdir(home / "x") == ["b.jsonl"]
    assert os.listdir(tmp_path / "~" / "x") == ["a.jsonl"]


@pytest.mark.slow  # new Python processes
def test_the_commands_expand_a_quoted_tilde_in_what_they_read_and_delete(
    tmp_path: Path,
) -> None:
    # `import '~/x'` checked ./~/x existed, then read $HOME/x; --sessions-dir=~/x (which a
    # shell leaves as it is after "=") removed files from ./~/x.
    home = tmp_path / "me"
    (home / "x").mkdir(parents=True)
    (tmp_path / "~" / "x").mkdir(parents=True)
    env = {**os.environ, "HOME": str(home), "HERMES_HOME": str(tmp_path / "hh")}
    with SessionDB(tmp_path / "hh" / "state.db") as store:
        store.create_session("s", "cli")
        store.append_message("s", "user", "hello")
        store.export_bundle(home / "x" / "b.jsonl")
    (tmp_path / "~" / "x" / "b.jsonl").write_text("not a bundle\n")
    (home / "x" / "s.jsonl").write_text("{}\n")
    (tmp_path / "~" / "x" / "s.jsonl").write_text("{}\n")

    def run(*args: str) -> tuple[int, str, str]:
        done = run_module(*args, cwd=tmp_path, env=env)
        return done.returncode, done.stdout, done.stderr

    status, out, err = run("--db", str(tmp_path / "new.db"), "import", "~/x/b.jsonl", "--json")
    assert (status, err) == (0, "")
    assert json.loads(out)[0]["sessions_added"] == 1
    status, out, err = run("import", "~nosuchuser93/x.jsonl")
    assert (status, out) == (2, "")
    assert err.splitlines()[-1] == (
        "Error: Invalid value for 'PATH': '~nosuchuser93/x.jsonl' starts with ~, but no home "
        "folder is known for user 'nosuchuser93' (see 'python -m hermes_models import --help')"
    )
    assert run("delete", "--yes", "s", "--sessions-dir=~/x")[0] == 0
    assert sorted(os.listdir(home / "x")) == ["b.jsonl"]
    assert sorted(os.listdir(tmp_path / "~" / "x")) == ["b.jsonl", "s.jsonl"]


def test_a_backup_to_a_sqlite_url_writes_the_file_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It made a folder named "sqlite:" and wrote "sqlite:/<path>" into it.
    monkeypatch.chdir(tmp_path)
    with SessionDB(tmp_path / "state.db") as store:
        store.create_session("s", "cli")
        made = store.backup("sqlite:///copies/b.db")
        assert made["path"] == str(tmp_path / "copies" / "b.db")
        with pytest.raises(ValueError, match=r"^dest: a backup is a file; copy a store to "):
            store.backup("postgresql://localhost/db")
        with pytest.raises(ValueError, match=r"^dest: unsupported URL scheme 'mysql'"):
            store.backup("mysql://localhost/db")
    assert sorted(os.listdir(tmp_path)) == ["copies", "state.db"]
    with SessionDB(tmp_path / "copies" / "b.db", read_only=True) as copy:
        assert [row["id"] for row in copy.list_sessions_rich()] == ["s"]
