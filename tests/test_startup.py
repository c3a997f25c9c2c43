"""What a process pays at start-up: the modules importing the package and using a
store load, checked in fresh Python processes.

A store that appends, reads and lists must not load, beyond what peewee itself
loads (with psycopg installed, peewee imports it, and it imports :mod:`typing`),
:mod:`typing` (the package takes ``cast`` and ``Generic`` from
``hermes_models.hints``), :mod:`dataclasses`, :mod:`random` (the retry jitter),
nor the modules behind ``SessionDB``'s less common methods; those load on their
first call and then work as before. ``benchmarks/startup.py`` times the
difference; these tests keep it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import hermes_models
from hermes_models.shape import FileShape
from hermes_models.statements import Statement

#: Modules a store that appends, reads and lists does without.
NOT_AT_START = [
    "dataclasses",
    "hermes_models.ddl",
    "hermes_models.handoff",
    "hermes_models.maintenance",
    "hermes_models.postgres_sql",
    "hermes_models.repair",
    "hermes_models.telegram",
    "ipaddress",
    "pathlib",
    "random",
    "typing",
    "urllib.parse",
    "yoyo",
]

#: Run in a fresh process on the file named by argv[1]; prints, as JSON, which of
#: NOT_AT_START (argv[2]) were loaded after the import, after the common calls and
#: after the less common ones, with what those calls returned.
SCRIPT = """\
import json, sys
# An editable install's path hook loads these at start-up: forgotten, they load
# again only if something imports them.
for name in ("pathlib", "urllib.parse", "ipaddress"):
    sys.modules.pop(name, None)
import peewee  # what peewee loads is not the package's doing (with psycopg, typing)
watched = json.loads(sys.argv[2])
before = set(sys.modules)
def loaded():
    return sorted(m for m in watched if m in sys.modules and m not in before)
report = {"before": sorted(m for m in watched if m in before)}
from hermes_models import SessionDB
report["import"] = loaded()
with SessionDB(sys.argv[1]) as store:
    sid = store.ensure_session("s", "cli")
    store.append_message(sid, "user", "hello there")
    store.append_message(sid, "assistant", "hi")
    store.update_token_counts(sid, input_tokens=5, output_tokens=7)
    conversation = store.get_messages_as_conversation(sid)
    report["conversation"] = [
        [m["role"], m["content"], type(m["timestamp"]).__name__] for m in conversation
    ]
    report["listed"] = [row["id"] for row in store.list_sessions_rich()]
    report["tokens"] = [store.get_session(sid)[k] for k in ("input_tokens", "output_tokens")]
    report["count"] = store.session_count()
    report["common"] = loaded()
    report["handoff"] = [store.request_handoff(sid, "telegram"), store.claim_handoff(sid)]
    report["empty"] = store.count_empty_sessions()
    report["pruned"] = store.prune_sessions(older_than_days=1)
    report["telegram"] = store.is_telegram_session_linked_to_topic(session_id=sid)
    report["rare"] = loaded()
print(json.dumps(report))
"""


@pytest.mark.slow  # a new Python process
def test_a_store_that_appends_reads_and_lists_loads_only_what_it_uses(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    hermes_models.migrate(path)  # up to date: opening it needs neither yoyo nor the DDL
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path), json.dumps(NOT_AT_START)],
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(done.stdout)
    # peewee loads psycopg where it is installed, and psycopg typing, dataclasses, random,
    # pathlib with urllib.parse and ipaddress.
    assert set(report["before"]) <= {
        "dataclasses",
        "random",
        "typing",
        "pathlib",
        "urllib.parse",
        "ipaddress",
    }
    assert report["import"] == []
    assert report["common"] == []
    # The rare methods load their modules on first call, and work.
    rare = ["dataclasses", "hermes_models.handoff", "hermes_models.maintenance"]
    # maintenance and telegram hold SQL for both backends: they load the server's.
    rare += ["hermes_models.postgres_sql", "hermes_models.telegram"]
    assert report["rare"] == [m for m in rare if m not in report["before"]]
    assert report["conversation"] == [
        ["user", "hello there", "float"],
        ["assistant", "hi", "float"],
    ]
    assert report["listed"] == ["s"]
    assert report["tokens"] == [5, 7]
    assert report["count"] == 1
    assert report["handoff"] == [True, True]
    assert report["empty"] == 0
    assert report["pruned"] == 0  # started just now: nothing is a day old
    assert report["telegram"] is False


# -- the plain classes that stand in for a dataclass and a named tuple --------------------


def test_a_file_shape_is_read_only_and_equal_by_its_fields_migrations_aside(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    hermes_models.migrate(path)
    with hermes_models.SessionDB(path) as store:
        shape = store.database.shape
    assert shape is not None
    same = FileShape(
        shape.version,
        dict(shape.columns),
        shape.tables,
        fts_layout=shape.fts_layout,
        trigram_gaps=shape.trigram_gaps,
        fts_servable=shape.fts_servable,
        cjk=shape.cjk,
        fts_meta=dict(shape.fts_meta),
        time_index=shape.time_index,
        migrations=None,  # not compared
    )
    assert same == shape and hash(same) == hash(shape)
    assert same != FileShape(shape.version, dict(shape.columns), shape.tables, dialect="postgresql")
    assert (same == "a shape") is False
    with pytest.raises(AttributeError, match="read only: cannot set 'version'"):
        same.version = 3  # type: ignore[misc]
    with pytest.raises(AttributeError, match="read only: cannot delete 'tables'"):
        del same.tables
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


#: Run in a fresh process: what a bare ``import hermes_models`` loads, then what
#: reading its public names gives.
BARE_IMPORT = """\
import json, sys
before = set(sys.modules)
import hermes_models
watched = ("peewee", "hermes_models", "yoyo", "click", "rich")
loaded = sorted(m for m in set(sys.modules) - before if m.split(".")[0] in watched)
from hermes_models import SessionDB, Session, WriteConflictError, SCHEMA_VERSION
import hermes_models.store, hermes_models.models, hermes_models.errors, hermes_models.files
print(json.dumps({
    "loaded": loaded,
    "same": [
        SessionDB is hermes_models.store.SessionDB,
        Session is hermes_models.models.Session,
        WriteConflictError is hermes_models.errors.WriteConflictError,
        SCHEMA_VERSION == hermes_models.files.SCHEMA_VERSION,
    ],
    "missing": hasattr(hermes_models, "NoSuchName"),
    "listed": sorted(set(hermes_models.__all__) - set(dir(hermes_models))),
}))
"""


@pytest.mark.slow  # a new Python process
def test_a_bare_import_loads_only_the_package_and_names_load_on_first_use() -> None:
    done = subprocess.run(
        [sys.executable, "-c", BARE_IMPORT], capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout) == {
        "loaded": ["hermes_models"],
        "same": [True, True, True, True],
        "missing": False,
        "listed": [],
    }
    with pytest.raises(AttributeError, match="module 'hermes_models' has no attribute 'Nope'"):
        hermes_models.Nope  # noqa: B018
