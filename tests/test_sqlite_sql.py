"""Hand-written SQL lives in :mod:`hermes_models.store.sqlite_sql` (and, for PostgreSQL,
:mod:`hermes_models.store.postgres_sql`), named.

Every module is parsed with ``ast``: a string that starts with an SQL verb
(``SELECT``, ``INSERT``, ``UPDATE``, ``DELETE``, ``CREATE``, ``DROP``,
``PRAGMA``, ``BEGIN``, ``WITH``, upper case, a parenthesis before it allowed)
is a statement written outside the SQL module, wherever it stands: handed to
``execute()`` and its kin, bound to a name, returned. So is a fragment that holds a
subquery (``+rowid IN (SELECT ...)``). Docstrings are prose.
SQL built with peewee is not text and is not looked at.
"""

from __future__ import annotations

import ast
import re

import pytest

from hermes_models.store import sqlite_sql

import package_source

#: The one module of hand-written SQLite statements.
SQL_MODULE = "store.sqlite_sql"
#: Its sibling for PostgreSQL (one module of hand-written SQL per dialect).
#: ``driver`` sits below the store and names the one statement it runs itself.
SQL_MODULES = {SQL_MODULE, "store.postgres_sql", "driver"}

#: Modules whose hand-written SQL has not moved yet (none left): an entry goes when its
#: module is done.
PENDING: set[str] = set()

VERB = re.compile(r"[\s(]*(SELECT|INSERT|UPDATE|DELETE|CREATE|DROP|PRAGMA|BEGIN|WITH)\s")
#: A subquery anywhere in a string: a fragment of SQL spliced into a peewee query.
SUBQUERY = re.compile(r"\(\s*SELECT\s")


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of ``tree``: prose, not code."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def sql_in(source: str, label: str) -> list[str]:
    """``label:line`` of each string of ``source`` (docstrings aside) that starts with an
    SQL verb or holds a subquery: a literal, or an f-string whose text does."""
    return sql_in_tree(ast.parse(source), label)


def sql_in_tree(tree: ast.Module, label: str) -> list[str]:
    """:func:`sql_in` of source already parsed."""
    prose = _docstrings(tree)
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        elif isinstance(node, ast.JoinedStr):
            first = node.values[0] if node.values else None
            text = first.value if isinstance(first, ast.Constant) else ""
        else:
            continue
        if id(node) not in prose and (VERB.match(str(text)) or SUBQUERY.search(str(text))):
            lines.add(node.lineno)
    return [f"{label}:{line}" for line in sorted(lines)]


def raw_sql(module: str) -> list[str]:
    """The SQL texts written by hand in the package module ``module``."""
    return sql_in_tree(package_source.tree(module), module)


MODULES = package_source.MODULES


def test_the_check_finds_sql_texts_and_leaves_prose_alone() -> None:
    source = (
        'conn.execute("PRAGMA foreign_keys = ON")\n'
        "db.execute_sql(f'SELECT {x} FROM t')\n"
        'STATEMENT = "  WITH a AS (SELECT 1) SELECT * FROM a"\n'
        'raw("DELETE FROM t " + "WHERE 1")\n'
        'SQL("(SELECT value FROM json_each(?))")\n'
        '_TRIGGERS = ("UPDATE", f"""CREATE TEMP TRIGGER t""")\n'
        'refuse("VACUUM is refused")\n'
        'def f():\n    """SELECT is how a docstring may start."""\n    return f"DROP {x}"\n'
        'click.command(help="Delete old sessions.")\n'
        'check("insert, delete and update triggers present")\n'
    )
    assert sql_in(source, "m") == ["m:1", "m:2", "m:3", "m:4", "m:5", "m:6", "m:10"]


def test_the_check_finds_a_subquery_inside_a_fragment() -> None:
    source = (
        'SQL("+rowid IN (SELECT value FROM json_each(?))", [ids])\n'
        "LIMIT = '(CASE WHEN ? < 0 THEN -1 ELSE max(0, ? - (SELECT count(*) FROM t)) END)'\n"
        'SQL(f"x IN ({sql.JSON_LIST})")\n'
        'refuse("not a subquery (select one)")\n'
    )
    assert sql_in(source, "m") == ["m:1", "m:2"]


def test_no_module_but_the_sql_module_writes_sql_by_hand() -> None:
    found = [
        hit for m in MODULES if m not in SQL_MODULES and m not in PENDING for hit in raw_sql(m)
    ]
    assert found == []


def test_every_pending_module_is_a_module_of_the_package() -> None:
    assert sorted(PENDING - set(MODULES)) == []


@pytest.mark.parametrize("module", sorted(SQL_MODULES))
def test_the_sql_module_imports_nothing_of_the_package(module: str) -> None:
    tree = package_source.tree(module)
    imported = [
        node.module or "."
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and (node.level or "hermes_models" in (node.module or ""))
    ]
    assert imported == []


def test_statements_a_trace_shows_keep_their_text() -> None:
    assert sqlite_sql.BEGIN_IMMEDIATE == "BEGIN IMMEDIATE"
    assert sqlite_sql.COMMIT == "COMMIT"
    assert sqlite_sql.wal_checkpoint("TRUNCATE") == sqlite_sql.WAL_CHECKPOINT_TRUNCATE
    assert sqlite_sql.set_busy_timeout(250) == "PRAGMA busy_timeout = 250"
    assert sqlite_sql.multi_row_insert("t", ["a", 'b"'], 2) == (
        'INSERT INTO "t" ("a", "b""") VALUES (?, ?), (?, ?)'
    )
