"""The quick path of ``hermes-models sessions`` (``hermes_models.quick``): it prints
exactly what the full command prints in a pipe, on files it may read, and leaves
everything else to the full command.

The outside reference is the full command (click, rich's console, peewee's
``SessionDB.list_sessions_rich``) run on the same file with the same options.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import examples
from console_script import SCRIPT, environment, in_shell, run, run_module
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_models import Session, SessionDB, quick, quick_build, quick_sql, sqlite_sql
from hermes_models.cli import cli
from hermes_models.driver import sqlite3

T0 = 1_767_600_000.0  # 2026-01-05 08:00 UTC

#: Session ids: short ones, and Hermes-like long ones sharing prefixes (shortened).
IDS = st.one_of(
    st.sampled_from(["a", "b1", "demo", "x-y"]),
    st.builds(
        lambda stem, tail: f"20260105_0900{stem}_{tail}",
        st.sampled_from(["12", "13", "1"]),
        st.text("abcdefAB12", min_size=1, max_size=8),
    ),
)
TEXTS = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",)) | st.sampled_from("数据库 \n\x1b"),
    max_size=90,
)
SESSION = st.fixed_dictionaries(
    {
        "id": IDS,
        "source": st.sampled_from(["cli", "telegram", "a-very-long-source-name"]),
        "title": st.none() | TEXTS.filter(lambda t: t.strip() != ""),
        "first": st.none() | TEXTS | st.lists(st.fixed_dictionaries({"text": TEXTS}), max_size=2),
        "messages": st.integers(0, 3),
        "archived": st.booleans(),
        "end": st.sampled_from([None, "compression", "completed"]),
        "parent": st.integers(0, 5),  # an earlier session's index, when it is one
        "minutes": st.sampled_from([0, 0, 1, 30]),
    }
)
OPTIONS = st.fixed_dictionaries(
    {
        "limit": st.sampled_from([None, "0", "1", "3"]),
        "offset": st.sampled_from([None, "0", "1"]),
        "source": st.sampled_from([None, "cli", "telegram"]),
        "archived": st.booleans(),
        "recent": st.booleans(),
        "columns": st.sampled_from(["80", "40", "120", "20"]),
    }
)


def build(path: Path, specs: list[dict]) -> None:
    """A store of ``specs``: sessions (some continuing earlier ones), their messages."""
    with SessionDB(path) as store:
        made: list[str] = []
        for n, spec in enumerate(specs):
            sid = spec["id"]
            if sid in made:
                continue
            parent = made[spec["parent"]] if spec["parent"] < len(made) else None
            start = T0 + 60 * (n + spec["minutes"])  # a child may start before its parent
            store.create_session(sid, spec["source"], parent_session_id=parent, started_at=start)
            if spec["first"] is not None:
                store.append_message(sid, "user", spec["first"], timestamp=start + 1)
            for m in range(spec["messages"]):
                store.append_message(sid, "assistant", f"reply {m}", timestamp=start + 2 + m)
            if spec["title"] is not None:
                try:
                    store.set_session_title(sid, spec["title"])
                except ValueError:
                    pass  # a clash or an unusable title: the store refuses it, as it should
            if spec["end"] is not None:
                store.end_session(sid, spec["end"])
            if spec["archived"]:
                store.set_session_archived(sid, True)
            made.append(sid)
    # Each ended session ended 30 s after it started, so a child of one that ended
    # with compression (started a minute or more later) continues it: chains are
    # listed by their tip.
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE sessions SET ended_at = started_at + 30 WHERE ended_at IS NOT NULL")
    conn.close()


def argv_of(db: Path, options: dict) -> list[str]:
    argv = ["sessions", "--db", str(db), "--utc"]
    for name in ("limit", "offset", "source"):
        if options[name] is not None:
            argv += [f"--{name}", options[name]]
    argv += ["--archived"] * options["archived"] + ["--recent"] * options["recent"]
    return argv


def full(argv: list[str], columns: str) -> str:
    """What the full command prints (click's runner: standard output is not a terminal)."""
    result = CliRunner().invoke(cli, argv, env={"COLUMNS": columns, "HERMES_MODELS_DB": None})
    assert result.exit_code == 0, result.output
    return result.output


def quickly(argv: list[str], columns: str, out: Path) -> tuple[int | None, str]:
    """What the quick path prints, to a real file (not a terminal)."""
    saved = sys.stdout
    with open(out, "w", encoding="utf-8") as stream:
        sys.stdout = stream
        try:
            status = quick.sessions_quickly(argv, {"COLUMNS": columns, "HOME": "/nonexistent"})
        finally:
            sys.stdout = saved
    return status, out.read_text(encoding="utf-8")


def test_the_statements_are_those_the_library_renders_now() -> None:
    written = Path(quick_sql.__file__).read_text(encoding="utf-8")
    assert written == quick_build.quick_sql_source(), (
        "hermes_models/quick_sql.py is out of date: run python -m hermes_models.quick_build"
    )


@settings(
    max_examples=examples(240),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(specs=st.lists(SESSION, min_size=0, max_size=7), options=OPTIONS)
def test_the_quick_path_prints_what_the_full_command_prints(
    tmp_path: Path, specs: list[dict], options: dict
) -> None:
    folder = Path(tempfile.mkdtemp(dir=tmp_path))  # a folder per example, private (0700)
    db = folder / "state.db"
    build(db, specs)
    argv = argv_of(db, options)
    status, text = quickly(argv, options["columns"], folder / "out.txt")
    expected = full(argv, options["columns"])
    if expected == "no sessions\n":  # said by the full command, in the output's encoding
        assert (status, text) == (None, "")
    else:
        assert (status, text) == (0, expected)


def test_a_prefix_names_one_session_as_resolve_session_id_says(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    ids = ["20260105_090012_ab", "20260105_090012_AC", "20260105_090013_x", "Zeta", "zeta2", "ü1"]
    with SessionDB(db) as store:
        for sid in ids:
            store.create_session(sid, "cli")
        prefixes = sorted({sid[:n] for sid in ids for n in range(0, len(sid) + 1)})
        prefixes += ["20260105_090012_A", "ZETA", "Ü", "%", "_"]
        expected = {p: store.resolve_session_id(p) is not None for p in prefixes}
    conn = sqlite3.connect(db)
    try:
        assert {p: quick.names_one(conn, p) for p in prefixes} == expected
    finally:
        conn.close()
    assert expected["20260105_090012_A"] is False and expected["ZETA"] is False
    assert expected["20260105_090013"] is True and expected["zeta"] is False  # Zeta, zeta2
    assert expected["Zeta"] is True and expected["zeta2"] is True


@pytest.mark.parametrize(
    ("argv", "environ", "taken"),
    [
        (["sessions"], {}, True),
        (["--db", "F", "sessions", "--utc"], {}, True),
        (["--utc", "sessions", "--db=F", "--limit=0", "--offset", "2"], {}, True),
        (["sessions", "--source", "cli", "--archived", "--recent"], {}, True),
        (["sessions", "--json"], {}, False),
        (["sessions", "--after", "x"], {}, False),
        (["sessions", "--limit", "-1"], {}, False),
        (["sessions", "--limit", "1e3"], {}, False),
        (["sessions", "--limit", "٣"], {}, False),
        (["sessions", "--source", " "], {}, False),
        (["sessions", "--db", "postgresql://h/db"], {}, False),
        (["sessions", "--db", "sqlite:///x.db"], {}, False),
        (["sessions", "--db", ":memory:"], {}, False),
        (["sessions", "--db"], {}, False),
        (["sessions", "--archived", "--archived"], {}, False),
        (["--read-only", "sessions"], {}, False),
        (["--db", "F", "sessions", "--db", "G"], {}, False),
        (["sessions", "-h"], {}, False),
        (["search", "sessions"], {}, False),
        (["sessions"], {"HERMES_MODELS_DB": "F"}, False),
        (["sessions"], {"HERMES_HOME": "~other/x"}, False),
        (["sessions"], {"HERMES_HOME": "/srv/a:b"}, False),
        (["sessions"], {"_HERMES_MODELS_COMPLETE": "bash_complete"}, False),
        (["sessions"], {"FORCE_COLOR": "1"}, False),
        (["sessions"], {"TTY_COMPATIBLE": "1"}, False),
        (["sessions"], {"PYTHONINSPECT": "1"}, False),
    ],
)
def test_the_quick_path_takes_plain_listings_only(
    argv: list[str], environ: dict[str, str], taken: bool
) -> None:
    assert (quick.parse(argv, environ) is not None) is taken


def test_the_default_file_is_hermes_home_state_db() -> None:
    request = quick.parse(["sessions"], {"HERMES_HOME": "/srv/h//x/.."})
    assert request == {
        "utc": False,
        "archived": False,
        "recent": False,
        "source": None,
        "limit": 20,
        "offset": 0,
        "path": "/srv/h/state.db",
    }
    assert quick.parse(["sessions"], {"HOME": "/home/u"})["path"] == os.path.join(
        os.path.expanduser("~/.hermes"), "state.db"
    )


@pytest.mark.slow  # new Python processes
def test_files_the_quick_path_leaves_to_the_full_command(tmp_path: Path) -> None:
    """A file that needs the full command's care gets it: the same listing or the
    same error as ``python -m hermes_models`` (always the full command)."""
    db = tmp_path / "state.db"
    build(db, [dict(id="s1", source="cli", title="one", first="hi", messages=1, archived=False,
                    end=None, parent=9, minutes=0)])  # fmt: skip

    def both(*args: str) -> tuple[subprocess.CompletedProcess[str], ...]:
        script = run("sessions", "--utc", *args, cwd=tmp_path)
        module = run_module("sessions", "--utc", *args, cwd=tmp_path)
        return script, module

    plain, module = both("--db", str(db))
    assert (plain.returncode, plain.stdout, plain.stderr) == (0, module.stdout, "")
    assert plain.stdout.splitlines()[1].startswith("s1  ")
    # Not private: the full command tightens the mode (and says nothing).
    os.chmod(db, 0o644)
    script, module = both("--db", str(db))
    assert (script.returncode, script.stdout) == (0, plain.stdout)
    assert os.stat(db).st_mode & 0o777 == 0o600
    # A migration pending: the full command applies it, then lists.
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("DELETE FROM _yoyo_migration WHERE migration_id LIKE '0008%'")
        conn.execute("DROP INDEX IF EXISTS idx_messages_time")
    conn.close()
    script = run("sessions", "--utc", "--db", str(db), cwd=tmp_path)
    assert (script.returncode, script.stdout) == (0, plain.stdout)
    conn = sqlite3.connect(db)
    try:
        applied = conn.execute(
            "SELECT count(*) FROM _yoyo_migration WHERE migration_id LIKE '0008%'"
        ).fetchone()
    finally:
        conn.close()
    assert applied == (1,)
    # Not a database, and missing: the full command's errors, exit status 1.
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 100)
    os.chmod(junk, 0o600)
    for target in (junk, tmp_path / "missing.db"):
        script, module = both("--db", str(target))
        assert script.returncode == module.returncode == 1
        assert script.stderr == module.stderr and script.stderr.startswith("Error: ")
        assert script.stdout == ""


@pytest.mark.slow  # new Python processes
def test_the_installed_script_lists_in_a_pipe_as_the_full_command(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    specs = [
        dict(id=f"20260105_0900{n:02d}_abcdef", source="cli", title=f"topic {n}",
             first=f"question {n} 数据库", messages=1, archived=False, end=None, parent=99,
             minutes=n)
        for n in range(25)
    ]  # fmt: skip
    build(db, specs)
    for args in (["--limit", "5"], ["--limit", "0", "--recent"], ["--source", "telegram"]):
        script = run("sessions", "--utc", "--db", str(db), *args, cwd=tmp_path)
        expected = full(["sessions", "--utc", "--db", str(db), *args], "80")
        assert (script.returncode, script.stdout, script.stderr) == (0, expected, "")
    lines = run("sessions", "--utc", "--db", str(db), cwd=tmp_path).stdout.splitlines()
    assert len(lines) == 1 + 2 * 20 and max(len(line) for line in lines) <= 80  # title, preview
    # Ids shortened to unique prefixes at 80 columns, as the full command shortens them.
    assert lines[1].split()[0] == "20260105_090024"
    # A terminal forced (rich's FORCE_COLOR): the full command's rich table, in colour.
    forced = environment(tmp_path, FORCE_COLOR="1")
    script = run("sessions", "--utc", "--db", str(db), cwd=tmp_path, env=forced)
    module = run_module("sessions", "--utc", "--db", str(db), cwd=tmp_path, env=forced)
    assert (script.returncode, script.stdout) == (0, module.stdout)
    assert "\x1b[1m" in script.stdout  # the bold header
    # A closed reader: exit 0, no traceback.
    shell = in_shell(f"'{SCRIPT}' sessions --db '{db}' --limit 0 | head -1", tmp_path)
    assert (shell.returncode, shell.stderr) == (0, "")
    assert shell.stdout.startswith("ID ")


def test_a_chain_is_listed_by_its_tip_as_the_full_command_lists_it(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    base = dict(source="cli", first="hello", messages=1, archived=False, minutes=0)
    build(
        db,
        [
            dict(base, id="root", title="the root", end="compression", parent=9),
            dict(base, id="root-2", title="the root #2", end="compression", parent=0),
            dict(base, id="root-3", title=None, first="tip question", end=None, parent=1),
            dict(base, id="other", title="other", end=None, parent=9),
        ],
    )
    for recent in (False, True):
        options = dict(limit=None, offset=None, source=None, archived=False, recent=recent)
        argv = argv_of(db, options)
        status, text = quickly(argv, "80", tmp_path / "out.txt")
        assert (status, text) == (0, full(argv, "80"))
        assert [line.split()[0] for line in text.splitlines()[1::2]] == ["other", "root-3"]
        assert "tip question" in text and "the root" not in text


def _folded(text: str) -> bytes:
    return text.encode("utf-8").translate(
        bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", b"abcdefghijklmnopqrstuvwxyz")
    )


ID_CHARS = st.sampled_from(["a", "A", "b", "1", "_", "\x00", "é", "É", "\ud7ff", "\ue000", "数"])


@settings(max_examples=examples(240), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ids=st.lists(st.text(ID_CHARS, min_size=1, max_size=5), min_size=1, max_size=8, unique=True),
    prefixes=st.lists(st.text(ID_CHARS, min_size=1, max_size=4), min_size=1, max_size=6),
)
def test_prefix_lookups_agree_with_a_scan_in_python(
    tmp_path_factory: pytest.TempPathFactory, ids: list[str], prefixes: list[str]
) -> None:
    """The reference is a scan in Python: an id held, else exactly one id whose UTF-8
    bytes start with the prefix's, ASCII letters folded (what SQLite's lower() folds)."""
    db = tmp_path_factory.mktemp("prefixes") / "state.db"
    with SessionDB(db) as store:
        for sid in ids:
            store.create_session(sid, "cli")
        prefixes += [sid[:n] for sid in ids for n in (1, 2)]
        resolved = {p: store.resolve_session_id(p) for p in prefixes}
    conn = sqlite3.connect(db)
    try:
        answers = {"names_one": {p: quick.names_one(conn, p) for p in prefixes}}
        for shortest in (1, 2, 3):  # a range read once per head, then decided in Python
            names = quick.Names(conn, shortest)
            answers[f"Names {shortest}"] = {p: names(p) for p in prefixes}
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(quick, "_NAMES_READ", 1)  # too many at once: one at a time
            names = quick.Names(conn, 1)
            answers["Names, capped"] = {p: names(p) for p in prefixes}
    finally:
        conn.close()
    for prefix in prefixes:
        starting = [i for i in ids if _folded(i).startswith(_folded(prefix))]
        expected = prefix if prefix in ids else (starting[0] if len(starting) == 1 else None)
        assert resolved[prefix] == expected, prefix
        for way, said in answers.items():
            assert said[prefix] is (expected is not None), (way, prefix)


def test_a_prefix_lookup_reads_a_range_of_the_primary_key(tmp_path: Path) -> None:
    """Up to its first ASCII letter a prefix matches exactly, so the lookup is a range
    of the primary key's index (Hermes' ``LIKE`` reads every id); a prefix that starts
    with a letter is still read by a scan."""
    from hermes_models import using
    from hermes_models.dialect import starts_with_ascii_nocase

    with SessionDB(tmp_path / "state.db") as store, using(store.database):
        conn = store.database.connection()
        plans = {}
        for prefix in ("20260105_0900", "20260105_0900ab", "ab20260105"):
            query = Session.select(Session.id).where(starts_with_ascii_nocase(Session.id, prefix))
            sql, params = query.sql()
            plans[prefix] = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
        low, high = sqlite_sql.prefix_bounds("20260105_0900ab")
        quick_plan = conn.execute(
            f"EXPLAIN QUERY PLAN {sqlite_sql.IDS_WITH_PREFIX}", (low, high, 1, b"2", 2)
        ).fetchall()
    index = "sqlite_autoindex_sessions_1"
    assert plans == {
        "20260105_0900": [f"SEARCH t1 USING COVERING INDEX {index} (id>? AND id<?)"],
        "20260105_0900ab": [f"SEARCH t1 USING COVERING INDEX {index} (id>? AND id<?)"],
        "ab20260105": [f"SCAN t1 USING COVERING INDEX {index}"],
    }
    assert [row[3] for row in quick_plan] == [
        f"SEARCH sessions USING COVERING INDEX {index} (id>? AND id<?)"
    ]
    assert (low, high) == ("20260105_0900", "20260105_0901")
    assert sqlite_sql.prefix_bounds("ab") is None
    assert sqlite_sql.prefix_bounds("1\U0010ffff") == ("1\U0010ffff", "2")
    assert sqlite_sql.prefix_bounds("\ud7ff") == ("\ud7ff", "\ue000")


@pytest.mark.slow  # new Python processes
def test_a_full_disk_is_one_error_line_as_in_the_full_command(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    build(db, [dict(id="s1", source="cli", title="one", first="hi", messages=1, archived=False,
                    end=None, parent=9, minutes=0)])  # fmt: skip
    full = "Error: No space left on device\n"
    for buffered in (True, False):  # as users run it, and with PYTHONUNBUFFERED=1
        env = environment(tmp_path)
        env.pop("PYTHONUNBUFFERED", None)
        if not buffered:
            env["PYTHONUNBUFFERED"] = "1"
        for args in (["sessions"], ["sessions", "--json"], ["stats"]):
            for command in (f"'{SCRIPT}'", f"'{sys.executable}' -m hermes_models"):
                line = f"{command} {' '.join(args)} --db '{db}' > /dev/full"
                done = subprocess.run(
                    ["sh", "-c", line], env=env, capture_output=True, text=True, check=False
                )
                assert (done.returncode, done.stderr) == (1, full), (line, buffered)


def _one_session(db: Path) -> None:
    build(db, [dict(id="s1", source="cli", title="one", first="hi", messages=1, archived=False,
                    end=None, parent=9, minutes=0)])  # fmt: skip


def test_files_the_quick_path_does_not_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "state.db"
    _one_session(db)
    opened = quick._open(str(db))
    assert opened is not None
    opened.close()
    # A -journal: a writer that may have crashed, whose rollback is the full command's.
    journal = tmp_path / "state.db-journal"
    journal.write_bytes(b"")
    assert quick._open(str(db)) is None
    journal.unlink()
    # A search trigger gone: the full command makes it again; the quick path leaves it.
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("DROP TRIGGER messages_fts_insert")
    conn.close()
    assert quick._open(str(db)) is None
    # An empty listing: "no sessions" is printed by click, in the output's encoding.
    empty = tmp_path / "empty.db"
    SessionDB(empty).close()
    status, text = quickly(["sessions", "--db", str(empty)], "80", tmp_path / "out.txt")
    assert (status, text) == (None, "")
    # No home folder known: "~" stays, and the full command says what is wrong.
    monkeypatch.setattr(quick.os.path, "expanduser", lambda text: text)
    assert quick.parse(["sessions", "--db", "~/x.db"], {}) is None
    assert quick.parse(["sessions"], {}) is None


@pytest.mark.slow  # new Python processes
def test_the_quick_path_writes_nothing_to_a_file_another_process_has_open(
    tmp_path: Path,
) -> None:
    """A running Hermes holds the store open with rows in its WAL: the quick path reads
    them (read-only), and neither the file nor its -wal changes."""
    db = tmp_path / "state.db"
    _one_session(db)
    other = sqlite3.connect(db, isolation_level=None)
    try:
        other.execute(
            "INSERT INTO sessions (id, source, started_at) VALUES ('s2', 'telegram', ?)",
            (T0 + 600,),
        )
        before = [Path(f"{db}{end}").read_bytes() for end in ("", "-wal")]
        script = run("sessions", "--utc", "--db", str(db), cwd=tmp_path)
        after = [Path(f"{db}{end}").read_bytes() for end in ("", "-wal")]
        # The same files left by a writer that died (nobody holds them): a read-write
        # connection would copy the WAL into the file when it closed.
        crashed = tmp_path / "crashed"
        crashed.mkdir(mode=0o700)
        for end in ("", "-wal"):
            (crashed / f"state.db{end}").write_bytes(before[0] if not end else before[1])
            os.chmod(crashed / f"state.db{end}", 0o600)
    finally:
        other.close()
    assert (script.returncode, script.stderr) == (0, "")
    assert [line.split()[0] for line in script.stdout.splitlines()[1:]][:2] == ["s2", "s1"]
    assert after == before
    left = run("sessions", "--utc", "--db", str(crashed / "state.db"), cwd=tmp_path)
    assert (left.returncode, left.stdout) == (0, script.stdout)
    assert [(crashed / f"state.db{end}").read_bytes() for end in ("", "-wal")] == before
    # A trigger dropped: the full command answers, and makes it again.
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("DROP TRIGGER messages_fts_insert")
    conn.close()
    script = run("sessions", "--utc", "--db", str(db), cwd=tmp_path)
    assert script.returncode == 0
    conn = sqlite3.connect(db)
    try:
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()
    assert "messages_fts_insert" in names


@pytest.mark.slow  # new Python processes
def test_a_folder_deleted_under_the_command_is_one_error_line(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    for command in (f"'{SCRIPT}'", f"'{sys.executable}' -m hermes_models"):
        for how in (
            "HERMES_HOME=rel {command} sessions",
            "{command} sessions --db rel.db",
            "{command} --db rel.db sessions",
        ):
            line = how.format(command=command)
            done = in_shell(f"cd '{gone}' && rmdir '{gone}' && {line} | cat", tmp_path)
            assert done.stderr == "Error: No such file or directory\n", line
            gone.mkdir()
