"""What a process loads: library use of an up-to-date store needs none of the heavy
dependencies the package loads only when asked (yoyo and sqlparse for migrations,
click and rich for the command line, psycopg for a server), checked in fresh Python
processes; and the public names are the objects of the modules that define them.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

import hermes_models
from hermes_models.store.shape import FileShape
from hermes_models.store.statements import Statement

#: Heavy dependencies loaded only by what needs them.
HEAVY = ["click", "psycopg", "rich", "sqlparse", "yoyo"]

#: Run in a fresh process on the up-to-date file named by argv[1]: which of HEAVY
#: (argv[2]) the import and the common calls loaded, and what those calls returned.
SCRIPT = """\
import json, sys
watched = json.loads(sys.argv[2])
def loaded():
    return sorted(m for m in watched if m in sys.modules)
report = {}
from hermes_models import SessionDB
with SessionDB(sys.argv[1]) as store:
    sid = store.ensure_session("s", "cli")
    store.append_message(sid, "user", "hello there")
    store.append_message(sid, "assistant", "hi")
    store.update_token_counts(sid, input_tokens=5, output_tokens=7)
    report["conversation"] = [
        [m["role"], m["content"]] for m in store.get_messages_as_conversation(sid)
    ]
    report["listed"] = [row["id"] for row in store.list_sessions_rich()]
    report["tokens"] = [store.get_session(sid)[k] for k in ("input_tokens", "output_tokens")]
    report["found"] = [hit["session_id"] for hit in store.search_messages("hello")]
    report["handoff"] = [store.request_handoff(sid, "telegram"), store.claim_handoff(sid)]
    report["pruned"] = store.prune_sessions(older_than_days=1)
report["loaded"] = loaded()
print(json.dumps(report))
"""


@pytest.mark.slow  # a new Python process
def test_library_use_of_an_up_to_date_store_loads_no_heavy_dependency(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    hermes_models.migrate(path)  # up to date: opening it needs neither yoyo nor sqlparse
    # peewee imports psycopg where it is installed: that is peewee's doing, not ours.
    peewee_loads = subprocess.run(
        [sys.executable, "-c", "import sys, peewee; print('psycopg' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(done.stdout)
    assert report == {
        "conversation": [["user", "hello there"], ["assistant", "hi"]],
        "listed": ["s"],
        "tokens": [5, 7],
        "found": ["s"],
        "handoff": [True, True],
        "pruned": 0,  # started just now: nothing is a day old
        "loaded": ["psycopg"] if peewee_loads == "True" else [],
    }


def test_a_file_shape_is_read_only_and_equal_by_its_fields_migrations_aside(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    hermes_models.migrate(path)
    with hermes_models.SessionDB(path) as store:
        shape = store.database.shape
    assert shape is not None
    same = dataclasses.replace(shape, migrations=None)
    assert same == shape and hash(same) == hash(shape)
    assert same != dataclasses.replace(shape, dialect="postgresql")
    assert (same == "a shape") is False
    with pytest.raises(dataclasses.FrozenInstanceError, match="'version'"):
        same.version = 3  # type: ignore[misc]
    assert repr(FileShape(16, {}, frozenset())) == (
        "FileShape(version=16, columns={}, tables=frozenset(), fts_layout=None, trigram_gaps='',"
        " fts_servable=True, cjk='', fts_meta={}, time_index=False, migrations=None,"
        " dialect='sqlite')"
    )
    # Each shape has its own empty flags, and what is worked out once stays.
    first, second = FileShape(16, {}, frozenset()), FileShape(16, {}, frozenset())
    assert first.fts_meta == {} and first.fts_meta is not second.fts_meta
    assert first.key is first.key and first.newer is False


def test_a_statement_unpacks_as_the_named_tuple_it_was() -> None:
    statement = Statement("SELECT ? + ?", [1, None], [(1, "b")])
    sql, params, slots = statement
    assert (sql, params, slots) == ("SELECT ? + ?", [1, None], [(1, "b")])
    assert statement.bind({"b": 2}) == [1, 2]
    assert Statement("SELECT :a", [], []).bind({"a": 1}) == {"a": 1}
    assert repr(statement) == "Statement('SELECT ? + ?', [1, None], [(1, 'b')])"


#: Run in a fresh process: the public names are the objects their modules define.
BARE_IMPORT = """\
import json
import hermes_models
from hermes_models import SessionDB, Session, WriteConflictError, SCHEMA_VERSION
import hermes_models.sessiondb, hermes_models.models, hermes_models.errors
import hermes_models.store
print(json.dumps({
    "same": [
        SessionDB is hermes_models.sessiondb.SessionDB,
        Session is hermes_models.models.Session,
        WriteConflictError is hermes_models.errors.WriteConflictError,
        SCHEMA_VERSION == hermes_models.store.SCHEMA_VERSION,
    ],
    "missing": hasattr(hermes_models, "NoSuchName"),
    "listed": sorted(set(hermes_models.__all__) - set(dir(hermes_models))),
}))
"""


@pytest.mark.slow  # a new Python process
def test_the_public_names_are_the_objects_their_modules_define() -> None:
    done = subprocess.run(
        [sys.executable, "-c", BARE_IMPORT], capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout) == {
        "same": [True, True, True, True],
        "missing": False,
        "listed": [],
    }
    with pytest.raises(AttributeError, match="module 'hermes_models' has no attribute 'Nope'"):
        hermes_models.Nope  # noqa: B018
