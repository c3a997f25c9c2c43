"""Statements rendered once: the package's one way of running SQL it built with peewee.

Why it exists: building a peewee query and rendering it to SQL costs more
than SQLite takes to run it on the calls an agent makes all the time (figures in
``benchmarks/README.md``). So a statement is
built once, with :func:`slot` placeholders where the values of each run go,
rendered (:func:`render`) to a :class:`Statement`, kept, and run with the
values of each call. Statements are kept in :data:`STATEMENTS`, one bounded
cache, keyed by what their SQL depends on; the pages of message and session
searches, whose shapes come from user input, keep their own bounded caches
beside it in :mod:`hermes_models.search.plan`, so that many distinct queries do not push out the
statements of the hot paths.

:class:`Prepared` is a statement the package runs on hot paths: its SQL is
rendered per structure of file (:attr:`hermes_models.store.shape.FileShape.key`: a
default ``SELECT`` names only the columns a file has). When every parameter
is one of its named values, its SQL names them (``:key``; fixed integers
such as ``LIMIT 1`` written in), so a call hands SQLite the values it was
given without building a list, through the handle's ``run``, which
skips peewee's per-call work when peewee has nothing to do. Statements whose
values are many (a search's) keep ``?`` placeholders and bind a list
(:meth:`Statement.bind`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import TYPE_CHECKING, cast

from peewee import Value

from .backend import Backend
from .binding import current, using
from .caches import BoundedCache

if TYPE_CHECKING:
    from typing import Any, TypeVar

    _Kept = TypeVar("_Kept")

#: What a placeholder's value starts with until the statement runs.
SLOT = "\x00hermes-slot:"


def slot(name: str) -> Value:
    """A placeholder filled with the value called ``name`` each time the statement runs."""
    return Value(SLOT + name)


def mark(name: str) -> str:
    """The raw value of :func:`slot` ``name``, for a builder that takes plain values."""
    return SLOT + name


class Statement:
    """SQL rendered once, its parameter list, and where the values of each run go.

    When the SQL names its parameters (``:name``), ``params`` and ``slots``
    are empty and the values go to SQLite as they are.
    """

    __slots__ = ("params", "slots", "sql")

    def __init__(self, sql: str, params: list[Any], slots: list[tuple[int, str]]) -> None:
        self.sql = sql
        self.params = params
        self.slots = slots

    def __iter__(self) -> Iterator[Any]:
        """``sql, params, slots = statement`` (it was a named tuple)."""
        return iter((self.sql, self.params, self.slots))

    def __repr__(self) -> str:
        return f"Statement({self.sql!r}, {self.params!r}, {self.slots!r})"

    def bind(self, values: Mapping[str, Any]) -> Any:
        """The parameters of one run: ``values`` itself when the SQL names them."""
        if not self.params:
            return values
        params = list(self.params)
        for index, name in self.slots:
            params[index] = values[name]
        return params


def render(query: Any, *, named: bool = False, require: tuple[str, ...] = ()) -> Statement:
    """A peewee ``query`` whose run-time values are :func:`slot` placeholders, rendered.

    ``named``: the SQL names its parameters when it can (every parameter a
    slot or a fixed integer). ``require``: slots that must reach the SQL as
    bound parameters.

    Raises:
        RuntimeError: a required slot is not a bound parameter.
    """
    sql, params = query.sql()
    marker = current().param  # "?" on SQLite, "%s" on PostgreSQL
    slots = [
        (i, p[len(SLOT) :])
        for i, p in enumerate(params)
        if isinstance(p, str) and p.startswith(SLOT)
    ]
    missing = set(require) - {name for _, name in slots}
    if missing:
        raise RuntimeError(f"placeholders not bound as parameters: {sorted(missing)}")
    if named:
        by_index = dict(slots)
        text = _name_parameters(sql, [by_index.get(i) for i in range(len(params))], params, marker)
        if text is not None:
            return Statement(text, [], [])
    return Statement(sql, list(params), slots)


def _name_parameters(
    sql: str, names: list[str | None], fixed: list[Any], marker: str = "?"
) -> str | None:
    """``sql`` with its placeholders (``marker``: SQLite's ``?``, psycopg's ``%s``), in
    order, replaced by the named form (``:name``, ``%(name)s``), or by the fixed value
    where the name is None (integers only, such as ``LIMIT 1``); None when that cannot
    be done (another fixed value, or not one placeholder per parameter)."""
    parts: list[str] = []
    quote = ""
    start = 0
    found = 0
    # SQLite also quotes names in `...` and [...]; PostgreSQL's [ ] index arrays.
    quotes = "'\"`[" if marker == "?" else "'\""
    for index, char in enumerate(sql):
        if quote:
            if char == quote:
                quote = ""
        elif char in quotes:
            quote = "]" if char == "[" else char
        elif char == marker[0] and sql.startswith(marker, index):
            if found == len(names):
                return None
            parts.append(sql[start:index])
            name, value = names[found], fixed[found]
            if name is not None:
                parts.append(f":{name}" if marker == "?" else f"%({name})s")
            elif value.__class__ is int:  # not bool: True would read as a column name
                parts.append(str(value))
            else:
                return None
            found += 1
            start = index + len(marker)
    if quote or found != len(names):
        return None
    parts.append(sql[start:])
    return "".join(parts)


#: Every rendered statement (and :class:`Prepared` statement), by what its SQL depends
#: on: the one statement cache. Keys start with what kind of statement they hold.
STATEMENTS: BoundedCache[Hashable, Any] = BoundedCache("statements", 256)


def cached(key: Hashable, make: Callable[[], _Kept]) -> _Kept:
    """The statement kept for ``key``, made by ``make`` when missing."""
    return cast("_Kept", STATEMENTS.get(key, make))


def kept(key: Hashable) -> Statement | None:
    """The statement kept for ``key``, or None (then :func:`keep` the one made)."""
    found = STATEMENTS.find(key)
    return found if isinstance(found, Statement) else None


def keep(key: Hashable, statement: Statement) -> Statement:
    """Keep ``statement`` for ``key`` in the one statement cache; returns it."""
    return cast(Statement, STATEMENTS.keep(key, statement))


class Prepared:
    """A peewee query rendered to SQL once per file structure, then run again with new values.

    ``build`` receives one placeholder per name (a plain value) and returns
    the query; every placeholder must reach the SQL as a bound parameter.
    Each call to :meth:`execute` swaps the real values in. ``named=False``
    keeps ``?`` placeholders (for values bound as a list in the order of the SQL).
    """

    def __init__(self, build: Callable[..., Any], *names: str, named: bool = True) -> None:
        self._build = build
        self._names = names
        self._named = named
        # The shape rendered for last, its statement, and the statement's parts as a
        # plain tuple: an identity check is cheaper than hashing the key (every column
        # name of two tables) on each call, and a plain tuple unpacks faster.
        self._last: tuple[Any, Statement, str, list[Any], list[tuple[int, str]]] | None = None

    def render(self, db: Backend) -> Statement:
        """The SQL, its parameter list, and where each named value goes in it."""
        shape = db.shape
        last = self._last
        if last is not None and last[0] is shape and shape is not None:
            return last[1]
        key = (self, None if shape is None else shape.key)
        statement: Statement = cached(key, lambda: self._render(db))
        self._last = (shape, statement, statement.sql, statement.params, statement.slots)
        return statement

    def _render(self, db: Backend) -> Statement:
        with using(db):
            query = self._build(**{name: mark(name) for name in self._names})
            return render(query, named=self._named, require=self._names)

    def execute(self, db: Backend, **values: Any) -> Any:
        """Run the query on ``db`` with ``values`` for the named placeholders."""
        return self._run(db, values)

    def _run(self, db: Backend, values: dict[str, Any]) -> Any:
        last = self._last
        shape = db.shape
        if last is not None and last[0] is shape and shape is not None:
            _, _, sql, template, positions = last
        else:
            statement = self.render(db)
            sql, template, positions = statement.sql, statement.params, statement.slots
        if not template:  # the SQL names its parameters (or has none)
            return db.run(sql, values)
        params = list(template)
        for index, name in positions:
            params[index] = values[name]
        return db.run(sql, params)

    def first(self, db: Backend, **values: Any) -> tuple[Any, ...] | None:
        """The first row (None when there is none)."""
        return cast("tuple[Any, ...] | None", self._run(db, values).fetchone())

    def scalar(self, db: Backend, **values: Any) -> Any:
        """The first column of the first row (None when there is no row)."""
        row = self._run(db, values).fetchone()
        return None if row is None else row[0]

    def dicts(self, db: Backend, **values: Any) -> list[dict[str, Any]]:
        """Every row as a dict keyed by column name."""
        cursor = self._run(db, values)
        names = [column[0] for column in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]


def many_rows(statement: Statement, n: int) -> str:
    """The SQL of a one-row ``INSERT ... VALUES (?, ...)`` for ``n`` rows at once."""
    head, values = statement.sql.rsplit(" VALUES ", 1)
    values, returning, tail = values.partition(" RETURNING ")  # PostgreSQL's ids
    return f"{head} VALUES {', '.join([values] * n)}{returning}{tail}"


def fetch_dicts(query: Any) -> list[dict[str, Any]]:
    """Rows of a peewee ``query`` as dicts keyed by column name."""
    cursor = current().execute(query)
    names = [column[0] for column in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]
