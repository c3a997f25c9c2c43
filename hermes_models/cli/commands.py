"""``hermes-models``: the session store from a terminal.

Each command parses its options, makes one or a few library calls and prints
the result: for people with rich (:mod:`.views`), for scripts as records
(``--json``, ``--nl``, ``--csv``, ``--tsv``; :mod:`.terminal`). click runs in
standalone mode: a library error becomes a :class:`click.ClickException`
(``Error: ...`` on one line, exit status 1), a usage error exits with 2, and
the exit status is what the process returns.
"""

from __future__ import annotations

import logging
import math
import os
import re
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
from click.core import ParameterSource
from click.shell_completion import CompletionItem
from rich.text import Text

from ..checks import INT64_MAX, expand_user
from ..conversations import (
    INTERNAL_SOURCES,
    describe,
    history,
    ids_starting_with,
    plan_delete,
    plan_prune,
    plan_retention,
    retention,
    sessions_to_erase,
)
from ..errors import HermesModelsError, ReadOnlyDatabaseError, UnsafeFileError
from ..health import doctor as check
from ..health import repair
from ..health import stats as store_stats
from ..models import Session, kind_expr, kind_of, parse_when
from ..sessiondb import SessionDB
from ..store import (
    cipher,
    connect,
    decrypt_store,
    encrypt_store,
    is_open_encrypted,
    is_postgres_url,
    make_store_private,
    migrate_server,
    newer_schema_error,
    parse_url,
    rekey_store,
    resolve_path,
    using,
)
from ..store import migrate as apply_migrations
from ..transfer import backup as back_up
from ..transfer import check_bundle, copy_store, is_bundle, read_transcript, transcript_paths
from ..version import __version__
from . import grid, terminal, views
from .demo import build_demo
from .terminal import Clock

F = TypeVar("F", bound=Callable[..., Any])

#: Exit status of a failed command (a usage error exits with 2, as in click).
EXIT_FAILURE = 1
#: Exit status after Ctrl-C: 128 + SIGINT, what shells report for a process it stopped.
EXIT_INTERRUPTED = 130
#: ``prune`` and ``delete`` suggest ``vacuum`` when they remove this share of the messages.
VACUUM_HINT_SHARE = 0.05

logger = logging.getLogger("hermes_models")

_DB_HELP = (
    "Database file, sqlite:/// URL or postgresql:// URL"
    " (default: $HERMES_HOME/state.db, HERMES_HOME=~/.hermes)."
)


# -- errors -------------------------------------------------------------------------------


#: The library's words for its keyword arguments, and the command line's for the same.
_CLI_WORDS = (
    ("open it with read_only=True to read it", "read it with --read-only"),
    ("Open the store with read_only=True to read it", "Read it with --read-only"),
    (
        "open it once without read_only=True to create the schema",
        "create the schema with: hermes-models migrate --db FILE",
    ),
    (
        "(pass overwrite=True, or --force on the command line, to replace it)",
        "(--force replaces it)",
    ),
    ("pass merge=True to add", "pass --merge to add"),
)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, OSError) and exc.strerror:
        # "[Errno 2] ..." says nothing to a person: the words, and the file they are about.
        named = exc.filename is not None and str(exc.filename) not in exc.strerror
        text = f"{exc.strerror}: {exc.filename}" if named else exc.strerror
    for library, command_line in _CLI_WORDS:
        text = text.replace(library, command_line)
    text = _escaped(text)
    if isinstance(exc, (HermesModelsError, ValueError, OSError, click.ClickException)):
        return text
    return f"{type(exc).__name__}: {text}"


#: Control characters (C0, DEL, C1), shown escaped in an error line.
_CONTROL = {c: repr(chr(c))[1:-1] for c in [*range(0x00, 0x20), *range(0x7F, 0xA0)]}


def _escaped(text: str) -> str:
    """``text`` with its control characters written as escapes (``\\n``)."""
    return text if text.isprintable() else text.translate(_CONTROL)


#: click's usage error for a group run without a command: it shows the help, as it should.
_SHOWS_HELP: type[click.UsageError] | None = getattr(click.exceptions, "NoArgsIsHelpError", None)


class UsageFailure(click.ClickException):
    """A usage error on one line, naming where the help is; exit status 2."""

    exit_code = 2


class Interrupted(click.ClickException):
    """Ctrl-C: one line (``interrupted``, and what became of the work), exit status 130.
    ``end_line``: a question is waiting on its line for the answer."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self, message: str = "interrupted", *, end_line: bool = False) -> None:
        super().__init__(message)
        self.end_line = end_line

    def show(self, file: Any = None) -> None:
        if self.end_line or sys.stderr.isatty():
            click.echo(err=True)  # end the line of the question, or the one ^C was shown on
        click.echo(self.message, err=True)


#: Set by Ctrl-C while :func:`main` runs a command. The exception alone cannot tell:
#: SQLite turns a KeyboardInterrupt raised in one of the package's SQL functions
#: into an OperationalError ("user-defined function raised exception").
_interrupted = threading.Event()


def _on_interrupt(signum: int, frame: Any) -> None:
    _interrupted.set()
    raise KeyboardInterrupt


@contextmanager
def _noting_interrupts() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt as ever and is noted in :data:`_interrupted`;
    only where Python's own handler is in place (an ignored SIGINT stays ignored)."""
    _interrupted.clear()
    ours = (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )
    if ours:
        signal.signal(signal.SIGINT, _on_interrupt)
    try:
        yield
    finally:
        if ours:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def _was_interrupted(exc: BaseException | None = None) -> bool:
    """Whether Ctrl-C was pressed during the command (``exc``: the error it ended with)."""
    while exc is not None:
        if isinstance(exc, KeyboardInterrupt):
            return True
        exc = exc.__cause__ or exc.__context__
    return _interrupted.is_set()


def _one_line_usage(exc: click.UsageError) -> click.ClickException:
    if _SHOWS_HELP is not None and isinstance(exc, _SHOWS_HELP):
        return exc
    where = exc.ctx.command_path if exc.ctx is not None else "hermes-models"
    message = " ".join(exc.format_message().split())
    return UsageFailure(f"{message} (see '{where} --help')")


class HermesGroup(click.Group):
    """A group whose commands never show a traceback: every error becomes one line."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:
            raise _one_line_usage(exc) from None
        except KeyboardInterrupt:
            raise Interrupted() from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            done = super().invoke(ctx)
        except Interrupted:
            raise
        except click.UsageError as exc:
            raise _one_line_usage(exc) from None
        except click.exceptions.ClickException as exc:
            if _was_interrupted(exc):
                raise Interrupted() from None
            if exc.message.isprintable():
                raise
            # A path may hold a newline: the error stays one line.
            kind = UsageFailure if exc.exit_code == UsageFailure.exit_code else click.ClickException
            raise kind(_escaped(exc.message)) from None
        except (click.exceptions.Exit, click.exceptions.Abort) as exc:
            if _was_interrupted(exc):
                raise Interrupted() from None
            raise
        except KeyboardInterrupt:
            raise Interrupted() from None
        except BrokenPipeError:
            terminal.stop_quietly()
        except Exception as exc:  # the CLI never shows a traceback
            if _was_interrupted(exc):
                raise Interrupted() from None
            raise click.ClickException(_one_line(exc)) from exc
        if _interrupted.is_set():  # a Ctrl-C that an SQL function's error hid
            raise Interrupted()
        return done


class _StderrHandler(logging.Handler):
    """The package's warnings as ``Warning: ...`` lines on standard error."""

    def emit(self, record: logging.LogRecord) -> None:
        click.echo(f"Warning: {' '.join(record.getMessage().split())}", err=True)


def examples(*commands: str) -> str:
    """The end of a command's ``--help``: a few command lines, kept as written."""
    return "\b\nExamples:\n" + "\n".join(f"  {command}" for command in commands)


# -- options shared by commands ---------------------------------------------------------------


def _check_db(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Refuse at once, with the library's words, a ``--db`` that connect() would refuse."""
    if value is None or ctx.resilient_parsing:
        return value
    source = ctx.get_parameter_source(param.name or "")
    name = "HERMES_MODELS_DB" if source is ParameterSource.ENVIRONMENT else "--db"
    try:
        if is_postgres_url(value):
            _label(value)
        else:
            resolve_path(value, argument=name)
    except (TypeError, ValueError) as exc:
        raise click.UsageError(
            f"{name}: {exc}" if is_postgres_url(value) else str(exc), ctx
        ) from None
    except OSError as exc:  # a relative path in a working folder since deleted
        raise click.ClickException(_one_line(exc)) from None
    return value


def _check_source(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """Refuse an empty ``--source`` (an unset variable in a script, most often): the
    library reads ``""`` as no filter in listings and as a source no session has in
    searches, so the command would answer one or the other by accident."""
    values = value if isinstance(value, tuple) else (value,)
    if not ctx.resilient_parsing and any(v is not None and not v.strip() for v in values):
        raise click.BadParameter("must not be empty (leave the option out for every source)")
    return value


def _label(url: str) -> str:
    """How messages name the PostgreSQL store at ``url`` (ValueError: a bad URL)."""

    return parse_url(url).label()


def _server(db_path: str | None) -> str | None:
    """The store's ``postgresql://`` URL, or None for a file."""
    return db_path if db_path is not None and is_postgres_url(db_path) else None


def _file_only(db_path: str | None, what: str) -> None:
    """Refuse a command that works on a store's file when the store is on a server."""
    url = _server(db_path)
    if url is not None:
        raise click.ClickException(f"{_label(url)} is a PostgreSQL store: {what}")


def _inherit_db(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A command's ``--db``, else the one given before the command name (or the env var)."""
    if value is None and ctx.parent is not None:
        inherited: str | None = ctx.find_root().params.get("db_path")
        _ask_key_if_encrypted(inherited)
        return inherited
    checked = _check_db(ctx, param, value)
    _ask_key_if_encrypted(checked)
    return checked


def _on_terminal() -> bool:
    return sys.stdin is not None and sys.stdin.isatty() and sys.stderr.isatty()


def _prompt_key(what: str, *, confirm: bool = False) -> str:
    """A key typed on the terminal (not echoed), checked; asked twice with ``confirm``."""
    typed = click.prompt(what, hide_input=True, confirmation_prompt=confirm, err=True)
    try:
        return cipher.check_key(typed)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


def _set_key_variable(key: str) -> None:
    # The process's own environment: not shown by ps (only to this user, in /proc).
    os.environ[cipher.KEY_VARIABLE] = key


def _ask_key_if_encrypted(db_path: str | None) -> None:
    """On a terminal, ask for the key of an encrypted file when none is given. Read
    before this process opens the file (its header, directly: no lock of ours to lose)."""
    if _server(db_path) is not None or not _on_terminal():
        return
    if os.environ.get(cipher.KEY_VARIABLE) or os.environ.get(cipher.KEY_FILE_VARIABLE):
        return
    try:
        path = resolve_path(db_path)
    except (TypeError, ValueError):
        return
    if cipher.looks_encrypted(str(path)):
        _set_key_variable(_prompt_key(f"Key for {path}"))


def db_option(command: F) -> F:
    """``--db FILE`` after the command name (``hermes-models --db FILE COMMAND`` works too)."""
    return click.option(
        "--db", "db_path", metavar="FILE", default=None, callback=_inherit_db, help=_DB_HELP
    )(command)


def utc_option(command: F) -> F:
    """``--utc``: times in UTC instead of local time."""
    return click.option(
        "--utc", is_flag=True, help="Show times in UTC (default: local time, zone named)."
    )(command)


_FORMAT_FLAGS = (
    ("--json", "json", "Print one JSON array of objects."),
    ("--nl", "nl", "Print one JSON object per line."),
    ("--csv", "csv", "Print CSV with a header row."),
    ("--tsv", "tsv", "Print tab-separated values with a header row."),
)


def format_options(command: F) -> F:
    """``--json``, ``--nl``, ``--csv``, ``--tsv``: records for scripts instead of a display."""
    for flag, value, text in reversed(_FORMAT_FLAGS):
        command = click.option(flag, "fmt", flag_value=value, help=text)(command)
    return command


class _Count(click.IntRange):
    """A count or offset: what SQLite's LIMIT and OFFSET take (not negative, and a
    64-bit integer)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if number > INT64_MAX:
            self.fail(
                f"{number} is more than {INT64_MAX:,} (2**63-1, SQLite's largest)", param, ctx
            )
        return number


COUNT = _Count(min=0)


class _Limit(_Count):
    """How many rows at most: a count, or ``all`` for every row (None, as the library's
    ``limit=None``). 0 is no row, as the library's ``limit=0`` and SQL's ``LIMIT 0``."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value.strip().lower() == "all":
            return None
        if isinstance(value, str) and not value.strip().lstrip("+-").isdigit():
            self.fail(f"{value!r} is neither a number of rows nor 'all'", param, ctx)
        return super().convert(value, param, ctx)


LIMIT = _Limit(min=0)


class _Days(click.FloatRange):
    """A number of days: not negative, and finite (``nan`` and ``inf`` name no time)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        days = super().convert(value, param, ctx)
        if not math.isfinite(days):
            self.fail(f"{value!r} is not a finite number of days", param, ctx)
        return days


DAYS = _Days(min=0)


def window_options(what: str) -> Callable[[F], F]:
    """``--since WHEN`` and ``--until WHEN`` (:data:`~hermes_models.models.clock.WHEN_FORMS`)."""

    def decorate(command: F) -> F:
        for name, edge in (("--until", "before"), ("--since", "at or after")):
            command = click.option(
                name,
                metavar="WHEN",
                default=None,
                help=f"Only {what} {edge} WHEN: a date (2026-12-01; --until: to its end),"
                " a time (2026-12-01T09:30), today, yesterday, or 7d/12h/30m/2w ago.",
            )(command)
        return command

    return decorate


def _window(
    ctx: click.Context, since: str | None, until: str | None, utc: bool = False
) -> tuple[float | None, float | None]:
    """``--since``/``--until`` as epoch seconds (local time unless --utc)."""
    now = time.time()
    bounds: list[float | None] = []
    for option, text, end in (("--since", since, False), ("--until", until, True)):
        if text is None:
            bounds.append(None)
            continue
        try:
            bounds.append(parse_when(text, utc=_clock(ctx, utc).utc, end=end, now=now))
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx, param_hint=f"'{option}'") from None
    low, high = bounds
    if low is not None and high is not None and low > high:
        raise click.UsageError(f"--since {since} is after --until {until}", ctx)
    return low, high


def limit_option(default: int, what: str = "rows") -> Callable[[F], F]:
    """``--limit N``: at most N rows, ``all`` for every row, 0 for none."""
    return click.option(
        "--limit",
        default=default,
        show_default=True,
        type=LIMIT,
        metavar="N",
        help=f"At most N {what}, or all (0: none).",
    )


#: ``--offset N``: skip the first N rows.
offset_option = click.option(
    "--offset",
    default=0,
    show_default=True,
    type=COUNT,
    metavar="N",
    help="Skip the first N rows.",
)


def _root(ctx: click.Context) -> dict[str, Any]:
    return ctx.find_root().params


def _clock(ctx: click.Context, utc: bool = False) -> Clock:
    return Clock(utc or bool(_root(ctx).get("utc")))


def _read_only(ctx: click.Context) -> bool:
    return bool(_root(ctx).get("read_only"))


def _journal(ctx: click.Context) -> dict[str, Any]:
    """``--journal-mode``, ``--synchronous`` and ``--redact``, as SessionDB and connect()
    take them (None: the library reads HERMES_MODELS_JOURNAL_MODE,
    HERMES_MODELS_SYNCHRONOUS and HERMES_MODELS_REDACT)."""
    root = _root(ctx)
    return {
        "journal_mode": root.get("journal_mode"),
        "synchronous": root.get("synchronous"),
        "redact": root.get("redact"),
    }


def _refuse_read_only(ctx: click.Context) -> None:
    if _read_only(ctx):
        raise click.UsageError(f"--read-only: '{ctx.command_path}' changes the database", ctx)


def _db_given(ctx: click.Context) -> bool:
    """True when ``--db`` was typed on the command line (not taken from the environment)."""
    if ctx.get_parameter_source("db_path") is ParameterSource.COMMANDLINE:
        return True
    return ctx.find_root().get_parameter_source("db_path") is ParameterSource.COMMANDLINE


@contextmanager
def open_store(ctx: click.Context, db_path: str | None, *, writes: bool) -> Iterator[SessionDB]:
    """A SessionDB on an existing file, closed afterwards.

    A command that only reads opens the file read-only: it changes nothing, not
    a table, trigger, index, row, journal mode or file mode (a Hermes file is read
    as it is; adopting it is for the first command that writes, or ``migrate``).
    A command that writes refuses ``--read-only`` and a file it cannot write.
    """
    if writes:
        _refuse_read_only(ctx)
    url = _server(db_path)
    if url is not None:
        store = SessionDB(url, read_only=_read_only(ctx), **_journal(ctx))
        try:
            yield store
        finally:
            store.close()
        return
    path = resolve_path(db_path)
    if not path.exists():
        raise click.ClickException(
            f"{path} does not exist (create it with: hermes-models migrate --db {path})"
        )
    if _read_only(ctx) or not writes:
        store = SessionDB(db_path, read_only=True, **_journal(ctx))
    else:
        try:
            store = SessionDB(db_path, **_journal(ctx))
        except ReadOnlyDatabaseError as exc:
            if writes:
                if isinstance(exc, UnsafeFileError):  # another user's file: say so
                    raise click.ClickException(_one_line(exc)) from None
                # The reason (a read-only file, folder or -shm), without the advice to
                # read it read-only: this command writes.
                reason = str(exc).split("; open it with read_only=True", 1)[0]
                raise click.ClickException(_escaped(reason)) from None
            store = SessionDB(db_path, read_only=True, **_journal(ctx))
    shape = store.database.shape
    if writes and shape is not None and shape.newer:
        store.close()
        raise click.ClickException(str(newer_schema_error(path, shape, ctx.command_path)))
    try:
        yield store
    finally:
        store.close()


# -- sessions by id -----------------------------------------------------------------------------


def _resolve(store: SessionDB, key: str) -> str:
    """A session id from an id, a unique id prefix, or a title read as
    ``SessionDB.resolve_session_by_title`` reads it: the newest ``"title #N"`` where
    there is one, else the session with exactly that title."""
    resolved = store.resolve_session_id(key) or store.resolve_session_by_title(key)
    if resolved is not None:
        return resolved
    with using(store.database):
        candidates = ids_starting_with(key, limit=6, any_case=True) if key else []
    if len(candidates) > 1:
        shown = ", ".join(candidates[:5]) + (", ..." if len(candidates) > 5 else "")
        raise click.ClickException(
            f"{key!r} is ambiguous: several session ids start with it ({shown}); type more of it"
        )
    raise click.ClickException(f"no session matches {key!r}")


def _short_ids(store: SessionDB, ids: list[str], width: int) -> dict[str, str]:
    return views.short_ids(ids, lambda prefix: store.resolve_session_id(prefix) is not None, width)


def complete_session_ids(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """Session ids starting with what was typed, for shell completion."""
    quiet = logging.NullHandler()
    logger.addHandler(quiet)
    try:
        db_path = ctx.params.get("db_path") or _root(ctx).get("db_path")
        url = _server(db_path)
        if url is not None:
            with SessionDB(url, read_only=True) as store, using(store.database):
                return [CompletionItem(i) for i in ids_starting_with(incomplete, limit=100)]
        path = resolve_path(db_path)
        if not path.is_file():
            return []
        with SessionDB(path, read_only=True) as store, using(store.database):
            return [CompletionItem(i) for i in ids_starting_with(incomplete, limit=100)]
    except Exception:  # completion must never break the shell
        return []
    finally:
        logger.removeHandler(quiet)


def session_argument(command: F) -> F:
    return click.argument("session_id", shell_complete=complete_session_ids)(command)


# -- the group ----------------------------------------------------------------------------------


@click.group(
    cls=HermesGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=examples(
        "hermes-models demo",
        "hermes-models --db ~/.hermes/state.db sessions --limit 5",
        'hermes-models search "事件循环" --json',
    ),
)
@click.option(
    "--db",
    "db_path",
    metavar="FILE",
    default=None,
    envvar="HERMES_MODELS_DB",
    callback=_check_db,
    help=_DB_HELP + " Env: HERMES_MODELS_DB.",
)
@click.option(
    "--read-only",
    is_flag=True,
    help="Open the database read-only: commands that read work, commands that write refuse.",
)
@click.option("--utc", is_flag=True, help="Show times in UTC (default: local time, zone named).")
@click.option(
    "--journal-mode",
    type=click.Choice(["wal", "delete"], case_sensitive=False),
    default=None,
    help="wal: switch the file to WAL where this SQLite is safe; delete: put a file not in "
    "WAL in DELETE mode (default: a new file WAL where safe, others as they are). "
    "Env: HERMES_MODELS_JOURNAL_MODE.",
)
@click.option(
    "--synchronous",
    type=click.Choice(["off", "normal", "full", "extra", "0", "1", "2", "3"], case_sensitive=False),
    default=None,
    help="The synchronous level of every connection, as SQLite names it (default: the "
    "SQLite build's). "
    "Env: HERMES_MODELS_SYNCHRONOUS.",
)
@click.option(
    "--redact/--no-redact",
    default=None,
    help="Replace secrets (API keys, tokens, private keys, KEY=value settings) with "
    "[REDACTED:<pattern>] in every message, tool call and title a command writes: "
    "imports, copies (default: off). Env: HERMES_MODELS_REDACT; extra patterns: "
    "HERMES_MODELS_REDACT_PATTERNS.",
)
@click.option(
    "--key-prompt",
    is_flag=True,
    help="Ask for the key of an encrypted database on the terminal (asked anyway on a "
    "terminal when the file is encrypted and no key is set). "
    "Env: HERMES_MODELS_KEY, HERMES_MODELS_KEY_FILE.",
)
@click.version_option(__version__, prog_name="hermes-models")
@click.pass_context
def cli(
    ctx: click.Context,
    db_path: str | None,
    read_only: bool,
    utc: bool,
    journal_mode: str | None,
    synchronous: str | None,
    redact: bool | None,
    key_prompt: bool,
) -> None:
    """The Hermes session store: sessions, messages, lineage and search in one SQLite file."""
    if key_prompt and ctx.invoked_subcommand not in ("encrypt", "rekey"):
        _set_key_variable(_prompt_key("Key"))
    if not any(isinstance(handler, _StderrHandler) for handler in logger.handlers):
        handler = _StderrHandler(logging.WARNING)
        logger.addHandler(handler)
        ctx.call_on_close(lambda: logger.removeHandler(handler))


# -- migrate and demo ---------------------------------------------------------------------------


@cli.command(
    short_help="Apply pending migrations (creates the file).",
    epilog=examples(
        "hermes-models migrate", "hermes-models migrate --db sqlite:////srv/hermes/state.db"
    ),
)
@db_option
@click.pass_context
def migrate(ctx: click.Context, db_path: str | None) -> None:
    """Apply pending migrations (adopting an existing Hermes database); creates the file."""
    _refuse_read_only(ctx)
    url = _server(db_path)
    if url is not None:
        for migration_id in migrate_server(url):
            terminal.say(f"applied {migration_id}")
        terminal.say(f"{_label(url)}: schema up to date")
        return
    path = resolve_path(db_path)
    journal = {key: value for key, value in _journal(ctx).items() if key != "redact"}
    for migration_id in apply_migrations(path, **journal):
        terminal.say(f"applied {migration_id}")
    terminal.say(f"{path}: schema up to date")


@cli.command(
    short_help="Build a demo store and show what the package does.",
    epilog=examples("hermes-models demo", "hermes-models demo --db demo.db"),
)
@db_option
@click.option("--keep", is_flag=True, help="Keep the temporary demo database and print where.")
@click.pass_context
def demo(ctx: click.Context, db_path: str | None, keep: bool) -> None:
    """Build a demo store in a temporary folder and show what the package does with it.

    HERMES_MODELS_DB is not used: the demo writes to a file of its own unless
    --db is typed (a new file, or a PostgreSQL store that holds no session).
    """

    explicit = db_path if _db_given(ctx) else None
    url = _server(explicit)
    if explicit is not None:
        _refuse_read_only(ctx)
        if url is None:
            target = resolve_path(explicit)
            if target.exists() and target.stat().st_size > 0:
                raise click.ClickException(
                    f"{target} already exists; the demo writes a new database (pick a new path)"
                )

    out = terminal.console()
    clock = _clock(ctx)
    with tempfile.TemporaryDirectory(prefix="hermes-models-demo-") as tmp:
        explicit_file = explicit is not None and url is None
        path = resolve_path(explicit) if explicit_file else Path(tmp) / "state.db"
        if keep and explicit is None:
            path = Path(tempfile.mkdtemp(prefix="hermes-models-demo-")) / "state.db"
        with SessionDB(path if url is None else url, **_journal(ctx)) as store:
            if url is not None and store.session_count() > 0:
                raise click.ClickException(
                    f"{_label(url)} already holds sessions; the demo writes a new"
                    " store (pick an empty database or schema)"
                )
            ids = build_demo(store)
            out.rule("Sessions (as a picker lists them)")
            rows = store.list_sessions_rich(limit=None)
            shown = _short_ids(store, [row["id"] for row in rows], out.width)
            terminal.emit(out, views.sessions_table(rows, clock, shown))
            for session_id in (ids.english, ids.chinese):
                out.rule(f"Transcript of {session_id}")
                terminal.emit(out, views.transcript(store.get_messages(session_id), clock))
            _demo_search(out, store, clock)
            out.rule("Lineage")
            for session_id in (ids.english, ids.compressed_root):
                root, resume = _lineage(store, session_id)
                terminal.emit(out, views.lineage_tree(root, resume, session_id))
            target_id = store.resolve_resume_session_id(ids.compressed_root)
            out.rule("Resume")
            terminal.say(f"/resume {ids.compressed_root} opens {target_id}")
        if keep or explicit is not None:
            terminal.say("")
            terminal.say(f"demo database: {path if url is None else _label(url)}")


def _demo_search(out: Any, store: SessionDB, clock: Clock) -> None:
    colour = out.color_system is not None
    for query in ("asyncio thread", "事件循环", "异步"):
        out.rule(f"Search messages: {query}")
        terminal.emit(out, views.message_hits(store.search_messages(query, limit=5), clock, colour))
    query = "checkpoint OR jitter"
    out.rule(f"Search sessions: {query}")
    out.print("(hits in subagent runs and continuations count for their root)", style="dim")
    terminal.emit(out, views.session_hits(store.search_sessions(query, limit=5), clock, colour))


# -- reading: sessions, show, lineage, resume, search ------------------------------------------


@cli.command(
    short_help="List sessions as a picker shows them.",
    epilog=examples(
        "hermes-models sessions --source telegram --recent",
        "hermes-models sessions --limit all --csv > sessions.csv",
        "hermes-models sessions --limit 50 --after 20260105_0900_ab12",
    ),
)
@db_option
@limit_option(20)
@offset_option
@click.option(
    "--after",
    metavar="ID",
    default=None,
    help="Start after this session (the last id of the previous page): paging by key,"
    " as fast on page 500 as on page 1. Not with --recent.",
)
@click.option(
    "--source",
    default=None,
    help="Only sessions from this source (cli, telegram, ...).",
    callback=_check_source,
)
@click.option("--archived", is_flag=True, help="Show archived sessions only.")
@click.option("--recent", is_flag=True, help="Order by last activity instead of start time.")
@window_options("sessions started")
@click.option(
    "--wide",
    is_flag=True,
    help="Show whole titles and previews, wrapped (default: one line a session, cut to fit).",
)
@utc_option
@format_options
@click.pass_context
def sessions(
    ctx: click.Context,
    db_path: str | None,
    limit: int | None,
    offset: int,
    after: str | None,
    source: str | None,
    archived: bool,
    recent: bool,
    since: str | None,
    until: str | None,
    wide: bool,
    utc: bool,
    fmt: str | None,
) -> None:
    """List sessions as a picker shows them (no subagent runs, chains shown by their tip,
    no sessions of Hermes' internal sources - tool, kanban, oneshot - unless --source)."""
    if after is not None and recent:
        raise click.UsageError("--after pages the start order; with --recent use --offset")
    started = _window(ctx, since, until, utc)
    with open_store(ctx, db_path, writes=False) as store:
        if after:
            # The listing shortens long ids to a unique prefix: take that one too.
            after = store.resolve_session_id(after) or after
        rows = store.list_sessions_rich(
            source=source,
            # As Hermes' pickers and `hermes sessions list`: its internal sessions
            # (tool calls, kanban, one-shot runs) only when asked for by --source.
            exclude_sources=None if source else list(INTERNAL_SOURCES),
            limit=limit,
            offset=offset,
            archived_only=archived,
            order_by_last_active=recent,
            after=after,
            since=started[0],
            until=started[1],
        )
        if fmt:
            terminal.write_records(rows, fmt)
            return
        if not rows:
            terminal.say("no sessions")
            return
        out = terminal.console()
        if not out.is_terminal or not wide:
            # A line a session (grid.sessions_text), on a terminal as in a pipe; a pipe
            # gets --wide laid out without rich too.
            width = out.width if out.is_terminal else grid.pipe_width()
            shown = _short_ids(store, [row["id"] for row in rows], width)
            listing = grid.sessions_text(rows, _clock(ctx, utc), shown, width, wide=wide)
            terminal.write_text(listing)
            return
        shown = _short_ids(store, [row["id"] for row in rows], out.width)
    terminal.emit(out, views.sessions_table(rows, _clock(ctx, utc), shown))


@cli.command(
    short_help="Show a session and its transcript.",
    epilog=examples(
        "hermes-models show 20260105_0900 --tail 10",
        'hermes-models show "writer retry policy #2" --with-ancestors',
        "hermes-models show demo-chinese --json",
    ),
)
@db_option
@session_argument
@click.option("--all", "include_inactive", is_flag=True, help="Include rewound messages.")
@click.option(
    "--limit", type=LIMIT, metavar="N", help="Only the first N messages, or all (the default)."
)
@click.option(
    "--tail", type=LIMIT, metavar="N", help="Only the last N messages, or all (the default)."
)
@click.option(
    "--with-ancestors",
    is_flag=True,
    help="First the messages of the sessions it continues (its parent chain), oldest first.",
)
@click.option(
    "--no-pager",
    "pager",
    flag_value=False,
    default=True,
    help="Print straight to the terminal (default there: through $PAGER, else less -FRX,"
    " when taller than the screen; never in a pipe).",
)
@utc_option
@format_options
@click.pass_context
def show(
    ctx: click.Context,
    db_path: str | None,
    session_id: str,
    include_inactive: bool,
    limit: int | None,
    tail: int | None,
    with_ancestors: bool,
    pager: bool,
    utc: bool,
    fmt: str | None,
) -> None:
    """Show one session (by id, unique id prefix or title) and its transcript."""
    with open_store(ctx, db_path, writes=False) as store:
        resolved = _resolve(store, session_id)
        session = store.get_session(resolved)
        assert session is not None
        chain = [resolved]
        if with_ancestors:
            with using(store.database):
                older = [s.id for s in Session.get_by_id(resolved).ancestors()]
            chain = [*reversed(older), resolved]
        with using(store.database):
            messages = [
                message
                for sid in chain
                for message in history.display_messages(sid, include_inactive=include_inactive)
            ]
    if limit is not None:
        messages = messages[:limit]
    if tail is not None:
        messages = messages[len(messages) - tail :] if tail < len(messages) else messages
    if fmt:
        terminal.write_records(messages, fmt)
        return
    out, clock = terminal.console(), _clock(ctx, utc)
    with terminal.paged(out, enabled=pager):
        terminal.emit(out, views.session_header(session, clock))
        out.print()
        for sid in chain:
            part = [message for message in messages if message["session_id"] == sid]
            if len(chain) > 1:
                out.rule(sid if sid == resolved else f"{sid} (continued below)")
            terminal.emit(out, views.transcript(part, clock))


def _lineage(store: SessionDB, session_id: str) -> tuple[views.Node, str]:
    """The lineage tree ``session_id`` belongs to, from its root, and the root's resume target."""
    with using(store.database):
        root = Session.get_by_id(session_id).root()
        resume = store.resolve_resume_session_id(root.id)
        below: dict[str, list[Session]] = {}
        kinds = {root.id: kind_of(root)}
        for child in root.descendants().select_extend(kind_expr(Session).alias("kind_")):
            below.setdefault(child.parent_session_id or "", []).append(child)
            kinds[child.id] = str(getattr(child, "kind_"))  # noqa: B009 (selected above)

        def node(session: Session, depth: int) -> views.Node:
            row = store.get_session(session.id) or {"id": session.id}
            return views.Node(row, kinds[session.id], depth)

        # Built with a stack, not by recursion: a chain may be thousands of links long.
        top = node(root, 0)
        seen, stack = {root.id}, [(root, top)]
        while stack:
            session, made = stack.pop()
            for child in below.get(session.id, []):
                if child.id not in seen:
                    seen.add(child.id)
                    grown = node(child, made.depth + 1)
                    made.children.append(grown)
                    stack.append((child, grown))
        return top, resume


@cli.command(
    short_help="Draw the lineage tree around a session.",
    epilog=examples(
        "hermes-models lineage demo-subagent", 'hermes-models lineage "writer retry policy" --json'
    ),
)
@db_option
@session_argument
@format_options
@click.pass_context
def lineage(ctx: click.Context, db_path: str | None, session_id: str, fmt: str | None) -> None:
    """Draw the lineage tree around a session: kinds, resume target, titles, counts."""
    with open_store(ctx, db_path, writes=False) as store:
        resolved = _resolve(store, session_id)
        root, resume = _lineage(store, resolved)
    if fmt:
        terminal.write_records(views.lineage_rows(root, resume, resolved), fmt)
        return
    terminal.emit(terminal.console(), views.lineage_tree(root, resume, resolved))


@cli.command(
    short_help="Print the id a /resume of a session opens.",
    epilog=examples(
        "hermes-models resume demo-retries",
        'hermes-models show "$(hermes-models resume demo-retries)" --tail 4',
    ),
)
@db_option
@session_argument
@click.pass_context
def resume(ctx: click.Context, db_path: str | None, session_id: str) -> None:
    """Print the id a /resume of SESSION_ID opens (the compression tip with messages)."""
    with open_store(ctx, db_path, writes=False) as store:
        resolved = _resolve(store, session_id)
        click.echo(store.resolve_resume_session_id(resolved))


_SORTS = {"rank": None, "newest": "newest", "oldest": "oldest"}
_SESSION_SORTS = {"rank": None, "newest": "recent"}


@cli.command(
    short_help="Full-text search of messages.",
    epilog=examples(
        'hermes-models search "asyncio thread"',
        "hermes-models search 事件循环 --sort newest --limit 5",
        'hermes-models search "checkpoint OR jitter" --sessions --json',
    ),
)
@db_option
@click.argument("query")
@click.option(
    "--source",
    "sources",
    multiple=True,
    help="Only this source (repeatable).",
    callback=_check_source,
)
@click.option("--role", "roles", multiple=True, help="Only messages of this role (repeatable).")
@click.option("--sessions", "by_session", is_flag=True, help="One row per session (lineage root).")
@click.option(
    "--sort",
    type=click.Choice(sorted(_SORTS)),
    default="rank",
    show_default=True,
    help="Best matches first, or by time (--sessions: rank or newest).",
)
@window_options("messages sent (--sessions: sessions started)")
@limit_option(20)
@offset_option
@click.option(
    "--rank-window",
    "rank_window",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Rank only the newest N matches (faster for very common words; default: all).",
)
@utc_option
@format_options
@click.pass_context
def search(
    ctx: click.Context,
    db_path: str | None,
    query: str,
    sources: tuple[str, ...],
    roles: tuple[str, ...],
    by_session: bool,
    sort: str,
    since: str | None,
    until: str | None,
    limit: int | None,
    offset: int,
    rank_window: int | None,
    utc: bool,
    fmt: str | None,
) -> None:
    """Full-text search of messages (words, "phrases", prefix*, OR/NOT; Chinese,
    Japanese and Korean substrings), matches highlighted.
    """
    if by_session and roles:
        raise click.UsageError("--role cannot be combined with --sessions", ctx)
    if by_session and sort not in _SESSION_SORTS:
        raise click.UsageError(f"--sort {sort} cannot be combined with --sessions", ctx)
    window = _window(ctx, since, until, utc)
    with open_store(ctx, db_path, writes=False) as store:
        if by_session and not query.strip():
            # The library lists every session for a blank query (Hermes' listing form);
            # a search for nothing finds nothing, as it does for messages.
            rows = []
        elif by_session:
            rows = store.search_sessions(
                query,
                limit=limit,
                rank_mode=_SESSION_SORTS[sort],
                source=list(sources) or None,
                offset=offset,
                since=window[0],
                until=window[1],
                rank_window=rank_window,
            )
        else:
            rows = store.search_messages(
                query,
                source_filter=list(sources) or None,
                role_filter=list(roles) or None,
                limit=limit,
                offset=offset,
                sort=_SORTS[sort],
                since=window[0],
                until=window[1],
                rank_window=rank_window,
            )
    if fmt:
        terminal.write_records(rows, fmt)
        return
    out = terminal.console()
    colour = out.color_system is not None
    if not rows:
        terminal.say("no matches")
    elif by_session:
        terminal.emit(out, views.session_hits(rows, _clock(ctx, utc), colour))
    else:
        terminal.emit(out, views.message_hits(rows, _clock(ctx, utc), colour))


# -- export and import --------------------------------------------------------------------------


@contextmanager
def _output(path: str | None) -> Iterator[Any]:
    """``path``, or standard output as UTF-8 text when None."""
    if path is not None:
        yield path
        return
    with terminal.utf8_stdout() as stream:
        yield stream


@cli.command(
    short_help="Export sessions as a JSONL bundle or Markdown.",
    epilog=examples(
        "hermes-models export -o backup.jsonl",
        "hermes-models export --session demo-chinese --format md -o chinese.md",
        "hermes-models export --source telegram | gzip > telegram.jsonl.gz",
    ),
)
@db_option
@click.option("--session", "session_id", help="Only this session's lineage (id, prefix or title).")
@click.option(
    "--source", default=None, help="Only sessions from this source.", callback=_check_source
)
@click.option(
    "--format",
    "data_format",
    type=click.Choice(["jsonl", "md"]),
    default="jsonl",
    show_default=True,
    help="jsonl: the lossless bundle `import` reads; md: Markdown to read.",
)
@click.option(
    "--output",
    "-o",
    # Text, not Path: Path("./~/x") is "~/x", which would then name the home folder.
    type=click.Path(dir_okay=False, allow_dash=True, path_type=str),
    default=None,
    help="File to write (default or '-': standard output). FIFOs and devices are written as is.",
)
@click.option("--force", is_flag=True, help="Replace the output file if it exists.")
@click.option(
    "--redact",
    "redact_output",
    is_flag=True,
    help="Write messages, tool calls and titles with their secrets replaced by "
    "[REDACTED:<pattern>], for sharing (the store is unchanged).",
)
@click.option(
    "--plaintext",
    is_flag=True,
    help="Export an encrypted database all the same: the export is plain text.",
)
@window_options("sessions started")
@format_options
@click.pass_context
def export(
    ctx: click.Context,
    db_path: str | None,
    session_id: str | None,
    source: str | None,
    data_format: str,
    output: str | None,
    force: bool,
    redact_output: bool,
    plaintext: bool,
    since: str | None,
    until: str | None,
    fmt: str | None,
) -> None:
    """Export sessions with their messages, lineage and soft-deleted messages included.

    The summary (--json, --nl, --csv, --tsv) is printed when --output names a file.
    """
    if output == "-":
        output = None
    if output is not None:
        _expand_user(ctx, output, "'--output'")  # checked before the store is opened
    if fmt and output is None:
        raise click.UsageError(f"--{fmt} describes the file written with --output", ctx)
    window = _window(ctx, since, until)
    if session_id is not None and window != (None, None):
        raise click.UsageError("--since/--until choose sessions; not with --session", ctx)
    with open_store(ctx, db_path, writes=False) as store:
        file = getattr(store.database, "file", None)
        if file is not None and is_open_encrypted(file) and not plaintext:
            raise click.ClickException(
                f"{file} is encrypted and an export is plain text; add --plaintext to"
                " write it anyway (backup keeps a copy encrypted)"
            )
        if session_id is not None:
            session_id = _resolve(store, session_id)
        # The bundle counts messages as it writes them, Markdown whole sessions.
        unit = "messages" if data_format == "jsonl" else "sessions"
        with _output(output) as target, terminal.progress("exporting", unit) as progress:
            chosen: dict[str, Any] = {"session_id": session_id, "source": source}
            chosen.update(since=window[0], until=window[1], progress=progress, overwrite=force)
            chosen["redact"] = redact_output
            if data_format == "jsonl":
                counts = store.export_bundle(target, **chosen)
            else:
                counts = {"sessions": store.export_markdown(target, **chosen)}
    if output is None:
        return
    if fmt:
        terminal.write_records([{"path": output, "format": data_format, **counts}], fmt)
        return
    what = views.plural(counts["sessions"], "session")
    if "messages" in counts:
        what += " and " + views.plural(counts["messages"], "message")
    terminal.say(f"wrote {what} to {output}")


def _expand_user(ctx: click.Context, value: str, hint: str) -> str:
    """``value`` with a leading ``~`` expanded; the ``~`` of an unknown user is a usage
    error that names the option or argument (``hint``), as for ``--db``."""
    try:
        return expand_user(value, hint)
    except ValueError as exc:
        raise click.BadParameter(str(exc).split(": ", 1)[1], ctx, param_hint=hint) from None


def _check_import_input(path: str, new_store: bool) -> None:
    """Refuse a folder without transcripts; before a new database file is created, also
    a file that cannot be imported (into an existing file, the import itself refuses it
    without writing anything)."""
    # The readers of bundles and transcripts are loaded when used: the CLI starts faster.

    if os.path.isdir(path):
        if not transcript_paths(path):
            raise click.ClickException(f"{path}: no <session_id>.jsonl transcripts in this folder")
    elif new_store and is_bundle(path):
        check_bundle(path)
    elif new_store:
        read_transcript(path)


def _missing_folders(path: Path) -> list[Path]:
    """The folders above ``path`` that do not exist, the deepest first."""
    missing = []
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


def _remove_new_store(path: Path, folders: list[Path]) -> None:
    """Remove the database file an import created, its -wal, -shm and -journal, and
    ``folders``, the folders made for it, while they are empty."""
    for name in (f"{path}-wal", f"{path}-shm", f"{path}-journal", str(path)):
        try:
            os.unlink(name)
        except FileNotFoundError:
            pass
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            break


@cli.command(
    "import",
    short_help="Import a bundle, a transcript, or a folder of them.",
    epilog=examples(
        "hermes-models import backup.jsonl --db ~/other/state.db",
        "hermes-models import ~/.hermes/sessions/",
    ),
)
@db_option
# Text, not Path: Path("./~/x") is "~/x", which would then name the home folder. Its
# existence is checked once ~ is expanded, as the import reads it (import_).
@click.argument("path", type=click.Path(path_type=str))
@click.option(
    "--source",
    default="cli",
    show_default=True,
    help="Source of transcripts whose meta line names no platform.",
)
@format_options
@click.pass_context
def import_(
    ctx: click.Context, db_path: str | None, path: str, source: str, fmt: str | None
) -> None:
    """Import a JSONL bundle, a legacy <session_id>.jsonl transcript, or a folder of them.

    Sessions already in the database are left as they are, so importing twice
    is the same as importing once. Input that cannot be imported creates no
    database file.
    """

    given = path
    path = _expand_user(ctx, given, "'PATH'")  # a quoted ~/x: the home folder, as elsewhere
    if not os.path.exists(path):
        raise click.BadParameter(f"Path {given!r} does not exist.", ctx, param_hint="'PATH'")
    _refuse_read_only(ctx)
    target = None if _server(db_path) is not None else resolve_path(db_path)
    new_store = target is not None and not target.exists()
    _check_import_input(path, new_store=new_store)
    bundle = os.path.isfile(path) and is_bundle(path)
    report: dict[str, Any]
    failed: list[dict[str, str]] = []
    # A file this command creates is removed again when the import fails or is interrupted.
    created = target if new_store else None
    folders = _missing_folders(created) if created is not None else []
    try:
        with (
            SessionDB(db_path, **_journal(ctx)) as store,
            # A bundle counts the rows it adds (sessions and messages), a folder its files.
            terminal.progress("importing", "rows" if bundle else "files") as progress,
        ):
            if bundle:
                report = dict(store.import_bundle(path, progress=progress))
            else:
                report = store.import_transcripts(path, source=source, progress=progress)
                failed = report["failed"]
    except BaseException as exc:
        if created is not None:
            _remove_new_store(created, folders)
            if _was_interrupted(exc):
                raise Interrupted(
                    f"interrupted; nothing was imported and {created} was removed"
                ) from None
        raise
    if created is not None and failed and not report["sessions_added"]:
        _remove_new_store(created, folders)  # every transcript failed: nothing to keep
    if fmt:
        terminal.write_records([{"path": str(path), **report}], fmt)
    elif bundle:
        terminal.say(
            f"imported {views.plural(report['sessions_added'], 'session')} and "
            f"{views.plural(report['messages_added'], 'message')} "
            f"({views.plural(report['sessions_skipped'], 'session')} already present, "
            f"{views.plural(report['messages_renumbered'], 'message')} given new ids)"
        )
    else:
        terminal.say(
            f"imported {views.plural(report['sessions_added'], 'session')} and "
            f"{views.plural(report['messages_added'], 'message')} from "
            f"{views.plural(report['files'], 'transcript file')} "
            f"({report['sessions_skipped']} already present, "
            f"{views.plural(report['lines_skipped'], 'line')} skipped)"
        )
        for failure in failed:
            terminal.say(f"failed: {failure['error']}", err=True)
    if failed:
        raise click.exceptions.Exit(EXIT_FAILURE)


# -- health -------------------------------------------------------------------------------------


@cli.command(
    short_help="Counts and sizes of the store.",
    epilog=examples("hermes-models stats", "hermes-models stats --json"),
)
@db_option
@format_options
@click.pass_context
def stats(ctx: click.Context, db_path: str | None, fmt: str | None) -> None:
    """Sessions, messages, file and WAL size, and search index rows against messages."""

    with open_store(ctx, db_path, writes=False) as store:
        report = store_stats(store.database)
    if fmt:
        terminal.write_records([report], fmt)
        return
    terminal.emit(terminal.console(), views.stats_table(report))


@cli.command(
    short_help="Check the file without changing it.",
    epilog=examples(
        "hermes-models doctor", "hermes-models doctor --fix", "hermes-models doctor --json"
    ),
)
@db_option
@click.option(
    "--fix",
    is_flag=True,
    help="Recount sessions whose counters disagree with their messages, and lower a "
    "message id sequence near its limit (on a server, also add pg_trgm's index when "
    "it is missing and now allowed); then check.",
)
@format_options
@click.pass_context
def doctor(ctx: click.Context, db_path: str | None, fix: bool, fmt: str | None) -> None:
    """Check the file (integrity, search indexes, foreign keys, counters) without
    changing it; exits with status 1 when a check fails. A server store: the schema
    version, parent links, which search indexes it has, counters and the id sequence.
    """

    if _server(db_path) is not None:
        _doctor_server(ctx, db_path, fix, fmt)
        return
    path = resolve_path(db_path)
    if not path.is_file():
        raise click.ClickException(f"no database at {path}")
    notes: list[str] = []
    if fix:
        _refuse_read_only(ctx)
        db = connect(path, migrate=False, **_journal(ctx))
        try:
            fixed = repair(db)
        finally:
            db.close()
        notes.extend(_fixed_notes(fixed))
        for changed, old, new in make_store_private(path):
            notes.append(f"made {changed} private ({old:04o} -> {new:04o})")
    db = connect(path, migrate=False, read_only=True)
    try:
        report = check(db)
    finally:
        db.close()
    _doctor_report(str(path), report, notes, fmt)


def _doctor_server(ctx: click.Context, db_path: str | None, fix: bool, fmt: str | None) -> None:
    """``doctor`` of a store on a server: its own checks (see ``health.doctor``)."""
    notes: list[str] = []
    with open_store(ctx, db_path, writes=fix) as store:
        if fix:
            notes.extend(_fixed_notes(repair(store.database)))
        report = check(store.database)
    _doctor_report(str(report["path"]), report, notes, fmt)


def _fixed_notes(fixed: dict[str, Any]) -> list[str]:
    """What ``repair`` did, one line each."""
    notes: list[str] = []
    if fixed["recounted"]:
        notes.append(f"recounted {views.plural(len(fixed['recounted']), 'session')}")
    if fixed["sequence"]:
        old, new = fixed["sequence"]
        notes.append(f"lowered the message id sequence from {old} to {new}")
    if fixed["regrammed"]:
        ids = ", ".join(str(i) for i in fixed["regrammed"][:10])
        more = ", ..." if len(fixed["regrammed"]) > 10 else ""
        notes.append(
            f"indexed {views.plural(len(fixed['regrammed']), 'message')} again in the "
            f"gram index (id {ids}{more})"
        )
    if fixed["trigram_index"] == "present":
        notes.append("created pg_trgm's trigram index: substring searches use it")
    return notes


def _doctor_report(where: str, report: dict[str, Any], notes: list[str], fmt: str | None) -> None:
    """Print the notes of ``--fix``, the checks and the verdict; exit 1 when one failed."""
    failed = [item for item in report["checks"] if not item["ok"]]
    for note in notes:
        terminal.say(f"fixed: {note}", err=bool(fmt))
    if fmt:
        terminal.write_records(report["checks"], fmt)
    else:
        out = terminal.console()
        terminal.emit(out, views.doctor_lines(report["checks"]))
        total = len(report["checks"])
        if failed:
            terminal.say(f"{where}: {len(failed)} of {total} checks failed")
        else:
            terminal.say(f"{where}: healthy ({views.plural(total, 'check')} passed)")
    if failed:
        raise click.exceptions.Exit(EXIT_FAILURE)


# -- maintenance --------------------------------------------------------------------------------


@cli.command(
    short_help="Archive a session with its compression chain.",
    epilog=examples(
        'hermes-models archive "writer retry policy"', "hermes-models archive --undo demo-retries"
    ),
)
@db_option
@session_argument
@click.option("--undo", is_flag=True, help="Unarchive instead.")
@click.pass_context
def archive(ctx: click.Context, db_path: str | None, session_id: str, undo: bool) -> None:
    """Archive a session and its whole compression chain (hidden from listings)."""
    with open_store(ctx, db_path, writes=True) as store:
        resolved = _resolve(store, session_id)
        store.set_session_archived(resolved, not undo)
    terminal.say(f"{'unarchived' if undo else 'archived'} {resolved}")


def _plan_report(
    ctx: click.Context,
    store: SessionDB,
    plan: Any,
    utc: bool,
    fmt: str | None,
    *,
    ask: bool,
    dry_run: bool,
    verb: str = "delete",
) -> list[dict[str, Any]]:
    """The sessions a deletion plan touches, as records; shown on stderr before the
    question when ``ask``, on stdout for a dry run (without ``--json`` & co.)."""
    with using(store.database):
        rows = views.plan_rows(
            describe([*plan.deleted, *plan.orphaned]),
            set(plan.targets),
            set(plan.orphaned),
            f"{verb}d",
        )
    if not plan.deleted or not (ask or (dry_run and fmt is None)):
        return rows
    out = terminal.console(stderr=ask)
    kept = f"; {views.children(len(plan.orphaned), 'stay')}" if plan.orphaned else ""
    heading = (
        f"{verb if ask else 'would ' + verb} {views.plural(len(plan.deleted), 'session')} "
        f"({views.plural(plan.messages, 'message')}){kept}:"
    )
    terminal.emit(out, Text(heading))
    shown = _short_ids(store, [row["id"] for row in rows], out.width)
    terminal.emit(out, views.plan_table(rows, _clock(ctx, utc), shown))
    return rows


def _confirm(yes: bool, plan: Any, verb: str = "delete") -> None:
    """Ask before deleting; anything but yes (no, end of input, Ctrl-C) deletes nothing."""
    if yes:
        return
    question = (
        f"{verb.capitalize()} {views.plural(len(plan.deleted), 'session')} and "
        f"{views.plural(plan.messages, 'message')}?"
    )
    try:
        agreed = click.confirm(question, err=True)
    except click.exceptions.Abort as exc:
        if _was_interrupted(exc):
            raise Interrupted(f"interrupted; nothing was {verb}d", end_line=True) from None
        agreed = False
    if not agreed:
        if not sys.stdin.isatty():
            click.echo(err=True)  # the answer was not echoed: end the question's line
        raise click.ClickException(f"not confirmed; nothing was {verb}d")


def _vacuum_hint(plan: Any, db_path: str | None) -> None:
    if _server(db_path) is not None:  # the server's autovacuum reuses the space
        return
    if plan.store_messages and plan.messages / plan.store_messages >= VACUUM_HINT_SHARE:
        share = 100 * plan.messages / plan.store_messages
        terminal.say(
            f"hint: {share:.0f}% of the messages went; `hermes-models vacuum` gives the space "
            "back to the file system",
            err=True,
        )


def _deletion_done(
    plan: Any, rows: list[dict[str, Any]], fmt: str | None, verb: str, db_path: str | None
) -> None:
    if fmt:
        terminal.write_records(rows, fmt)
    else:
        kept = f"; {views.children(len(plan.orphaned), 'kept')}" if plan.orphaned else ""
        terminal.say(
            f"{verb} {views.plural(len(plan.deleted), 'session')} "
            f"({views.plural(plan.messages, 'message')}){kept}"
        )
    _vacuum_hint(plan, db_path)


sessions_dir_option = click.option(
    "--sessions-dir",
    # Text, not Path: Path("./~/x") is "~/x", which would then name the home folder.
    type=click.Path(file_okay=False, path_type=str),
    default=None,
    metavar="DIR",
    help="Also remove the deleted sessions' transcript files from DIR "
    "(<id>.json, <id>.jsonl, request_dump_<id>_*.json).",
)


@cli.command(
    short_help="Delete sessions, their messages and subagent runs.",
    epilog=examples(
        "hermes-models delete demo-asyncio --dry-run",
        "hermes-models delete --yes 20260105_0900 demo-chinese",
    ),
)
@db_option
@click.argument(
    "session_ids",
    nargs=-1,
    required=True,
    metavar="SESSION_ID...",
    shell_complete=complete_session_ids,
)
@sessions_dir_option
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--dry-run", is_flag=True, help="Show what would be deleted; change nothing.")
@utc_option
@format_options
@click.pass_context
def delete(
    ctx: click.Context,
    db_path: str | None,
    session_ids: tuple[str, ...],
    sessions_dir: str | None,
    yes: bool,
    dry_run: bool,
    utc: bool,
    fmt: str | None,
) -> None:
    """Delete sessions with their messages and the subagent runs tagged under them;
    every other child (branches, continuations, untagged children) is kept as a root."""
    with open_store(ctx, db_path, writes=not dry_run) as store:
        resolved = [_resolve(store, session_id) for session_id in session_ids]
        with using(store.database):
            plan = plan_delete(resolved)
        rows = _plan_report(ctx, store, plan, utc, fmt, ask=not (dry_run or yes), dry_run=dry_run)
        if dry_run:
            if fmt:
                terminal.write_records(rows, fmt)
            return
        _confirm(yes, plan)
        store.delete_sessions(resolved, sessions_dir=sessions_dir)
    _deletion_done(plan, rows, fmt, "deleted", db_path)


@cli.command(
    short_help="Delete old ended sessions.",
    epilog=examples(
        "hermes-models prune --older-than 30 --dry-run",
        "hermes-models prune --older-than 90 --source telegram --yes",
    ),
)
@db_option
@click.option(
    "--older-than",
    "days",
    type=DAYS,
    default=90,
    show_default=True,
    metavar="DAYS",
    help="Delete ended sessions started more than DAYS ago.",
)
@click.option(
    "--source", default=None, help="Only sessions from this source.", callback=_check_source
)
@sessions_dir_option
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--dry-run", is_flag=True, help="Show what would be deleted; change nothing.")
@utc_option
@format_options
@click.pass_context
def prune(
    ctx: click.Context,
    db_path: str | None,
    days: float,
    source: str | None,
    sessions_dir: str | None,
    yes: bool,
    dry_run: bool,
    utc: bool,
    fmt: str | None,
) -> None:
    """Delete old ended sessions; their children, whatever they are, are kept as roots."""
    with open_store(ctx, db_path, writes=not dry_run) as store:
        planned_at = time.time()
        with using(store.database):
            plan = plan_prune(days, source)
        rows = _plan_report(ctx, store, plan, utc, fmt, ask=not (dry_run or yes), dry_run=dry_run)
        if dry_run:
            if fmt:
                terminal.write_records(rows, fmt)
            elif not plan.deleted:
                terminal.say("nothing to prune")
            return
        if not plan.deleted:
            terminal.say("nothing to prune")
            return
        _confirm(yes, plan)
        # The cutoff stays where it was when the plan was shown, however long the answer took.
        store.prune_sessions(
            older_than_days=days + (time.time() - planned_at) / 86400,
            source=source,
            sessions_dir=sessions_dir,
        )
    _deletion_done(plan, rows, fmt, "pruned", db_path)


@cli.command(
    short_help="Delete sessions and leave no trace of their text in the store.",
    epilog=examples(
        "hermes-models erase demo-asyncio --dry-run",
        "hermes-models erase --source telegram --older-than 90d --dry-run",
        "hermes-models erase --title 'secret*' --yes --json",
    ),
)
@db_option
@click.argument(
    "session_ids",
    nargs=-1,
    metavar="[SESSION_ID...]",
    shell_complete=complete_session_ids,
)
@click.option(
    "--source", default=None, help="Select sessions from this source.", callback=_check_source
)
@click.option(
    "--older-than",
    "older_than",
    metavar="WHEN",
    help="Select sessions started before WHEN (30d, 2026-01-31; as --since reads it).",
)
@click.option(
    "--title",
    metavar="PATTERN",
    help="Select sessions whose title holds PATTERN (a glob with * ? [ ]; no case).",
)
@sessions_dir_option
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--dry-run", is_flag=True, help="Show what would be erased; change nothing.")
@utc_option
@format_options
@click.pass_context
def erase(
    ctx: click.Context,
    db_path: str | None,
    session_ids: tuple[str, ...],
    source: str | None,
    older_than: str | None,
    title: str | None,
    sessions_dir: str | None,
    yes: bool,
    dry_run: bool,
    utc: bool,
    fmt: str | None,
) -> None:
    """Delete sessions as `delete` does (their messages and the subagent runs tagged
    under them go; every other child stays as a root) and leave none of their text in
    the store: the search indexes are merged so that no segment keeps an erased term,
    freed pages are overwritten, and the WAL is emptied unless a reader blocks it
    (said when one does). Give session ids, or select sessions by --source,
    --older-than and --title (ended sessions only)."""
    filtered = source is not None or older_than is not None or title is not None
    if session_ids and filtered:
        raise click.UsageError("give session ids or --source/--older-than/--title, not both")
    if not session_ids and not filtered:
        raise click.UsageError("give session ids, or select with --source/--older-than/--title")
    cutoff = None
    if older_than is not None:
        try:
            cutoff = parse_when(older_than, utc=_clock(ctx, utc).utc, now=time.time())
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx, param_hint="'--older-than'") from None
    if not (yes or dry_run or sys.stdin.isatty()):
        raise click.ClickException("erase asks before it erases: not a terminal, pass --yes")
    with open_store(ctx, db_path, writes=not dry_run) as store:
        with using(store.database):
            if filtered:
                chosen = sessions_to_erase(source=source, older_than=cutoff, title=title)
            else:
                chosen = [_resolve(store, session_id) for session_id in session_ids]
            plan = plan_delete(chosen)
        if not plan.deleted:
            if fmt:
                terminal.write_records([], fmt)
            else:
                terminal.say("nothing to erase")
            return
        rows = _plan_report(
            ctx, store, plan, utc, fmt, ask=not (dry_run or yes), dry_run=dry_run, verb="erase"
        )
        if dry_run:
            if fmt:
                terminal.write_records(rows, fmt)
            return
        _confirm(yes, plan, "erase")
        report = store.erase_sessions(plan.targets, sessions_dir=sessions_dir)
        where = str(store.database.path)
    if fmt:
        terminal.write_records([{"path": where, **report}], fmt)
        return
    kept = f"; {views.children(len(report['orphaned']), 'kept')}" if report["orphaned"] else ""
    terminal.say(
        f"erased {views.plural(len(report['sessions']), 'session')} "
        f"({views.plural(report['messages'], 'message')}){kept}: {' '.join(report['sessions'])}"
    )
    if report["indexes_merged"]:
        terminal.say(f"search indexes merged: {', '.join(report['indexes_merged'])}")
    if report["vacuumed"]:
        terminal.say(f"tables vacuumed: {', '.join(report['vacuumed'])}")
    if report["wal_truncated"]:
        terminal.say("WAL checkpointed and emptied")
    for note in report["notes"]:
        terminal.say(f"note: {note}", err=True)


_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}


def _byte_size(ctx: click.Context, param: click.Parameter, value: Any) -> int | None:
    """A size in bytes: ``500MB``, ``2G``, ``1.5GiB``, ``4096`` (kB, MB, GB: powers of
    1000; KiB, MiB, GiB: of 1024)."""
    if value is None or ctx.resilient_parsing:
        return None
    text = str(value).strip().lower().replace(" ", "")
    match = re.fullmatch(r"([0-9.e+-]*)([a-z]*)", text)
    number, unit = (match.group(1), match.group(2)) if match else (text, "?")
    try:
        amount = float(number)
    except ValueError:
        amount = math.nan
    if unit not in _SIZE_UNITS or not math.isfinite(amount) or amount < 0:
        raise click.BadParameter(
            f"{value!r} is no size: use bytes or a unit, as in 500MB, 2GB, 1.5GiB"
        )
    total = int(amount * _SIZE_UNITS[unit])
    if total > INT64_MAX:
        raise click.BadParameter(f"{value!r} is too large")
    return total


@cli.command(
    short_help="Erase old sessions by a retention policy (safe from cron).",
    epilog=examples(
        "hermes-models retain --older-than 90d --dry-run",
        "hermes-models retain --older-than 30d --source cron --yes",
        "hermes-models retain --max-size 2GB --yes",
    ),
)
@db_option
@click.option(
    "--older-than",
    "older_than",
    default=None,
    metavar="WHEN",
    help="Erase ended sessions started before WHEN: 90d, 12w, 2026-01-01, yesterday.",
)
@click.option(
    "--max-size",
    "max_size",
    callback=_byte_size,
    default=None,
    metavar="SIZE",
    help="Erase the oldest ended sessions while the file's used size is over SIZE "
    "(500MB, 2GB, 1.5GiB; SQLite files only).",
)
@click.option(
    "--source",
    "sources",
    multiple=True,
    callback=_check_source,
    help="Only sessions from this source (repeat for more).",
)
@click.option("--archived", is_flag=True, help="Only archived sessions.")
@click.option(
    "--batch",
    "batch_size",
    type=click.IntRange(1, 100_000),
    default=200,
    show_default=True,
    metavar="N",
    help="Sessions per erase: each batch is one short write beside a gateway.",
)
@sessions_dir_option
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation (cron).")
@click.option("--dry-run", is_flag=True, help="Show what would be erased; change nothing.")
@utc_option
@format_options
@click.pass_context
def retain(
    ctx: click.Context,
    db_path: str | None,
    older_than: str | None,
    max_size: int | None,
    sources: tuple[str, ...],
    archived: bool,
    batch_size: int,
    sessions_dir: str | None,
    yes: bool,
    dry_run: bool,
    utc: bool,
    fmt: str | None,
) -> None:
    """Erase what a retention policy lets go: ended sessions started before --older-than,
    or the oldest while the file is over --max-size, of --source / --archived only;
    never a live or pinned session. Subagent runs go with their session; other
    children stay as roots. Each batch is a short write, so it can run beside a
    gateway; the erased text is scrubbed from the file and its search indexes."""
    cutoff: float | None = None
    if older_than is not None:
        try:
            cutoff = parse_when(older_than, utc=_clock(ctx, utc).utc, now=time.time())
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx, param_hint="'--older-than'") from None
    if cutoff is None and max_size is None and not sources and not archived:
        raise click.UsageError(
            "retain needs a policy: --older-than, --max-size, --source or --archived", ctx
        )
    if max_size is not None and _server(db_path) is not None:
        raise click.UsageError("--max-size applies to a SQLite file; on a server use --older-than")
    policy = retention.RetentionPolicy(
        started_before=cutoff, max_bytes=max_size, sources=sources, archived_only=archived
    )
    with open_store(ctx, db_path, writes=not dry_run) as store:
        with using(store.database):
            planned = plan_retention(policy)
            plan = plan_delete(planned.targets)
        rows = _plan_report(
            ctx, store, plan, utc, fmt, ask=not (dry_run or yes), dry_run=dry_run, verb="erase"
        )
        fits = ""
        if max_size is not None and planned.used_bytes is not None:
            fits = (
                f" (the file uses {views.size(planned.used_bytes)}, within {views.size(max_size)})"
            )
        if not plan.deleted:
            if fmt and dry_run:
                terminal.write_records(rows, fmt)
            elif not fmt:
                terminal.say(f"nothing to erase{fits}")
            return
        if dry_run:
            if fmt:
                terminal.write_records(rows, fmt)
            elif planned.by_size and planned.estimated_bytes is not None:
                terminal.say(
                    f"the file uses {views.size(planned.used_bytes or 0)}; about "
                    f"{views.size(planned.estimated_bytes)} after (estimated from the text "
                    "each session holds; the run measures)"
                )
            return
        _confirm(yes, plan, "erase")
        with using(store.database):
            report = retention.retain(policy, batch_size=batch_size, sessions_dir=sessions_dir)
    if fmt:
        terminal.write_records([report.as_dict()], fmt)
        return
    line = (
        f"erased {views.plural(len(report.erased), 'session')} "
        f"({views.plural(report.messages, 'message')}) in "
        f"{views.plural(report.batches, 'batch', 'batches')}"
    )
    before, after = report.used_bytes_before, report.used_bytes_after
    if max_size is not None and before is not None and after is not None:
        line += f"; the file uses {views.size(after)} (was {views.size(before)})"
    terminal.say(line)
    if max_size is not None and after is not None and after > max_size:
        terminal.say(
            f"warning: still over {views.size(max_size)}: the policy leaves no other ended, "
            "unpinned session to erase",
            err=True,
        )
    if report.wal_blocked:
        terminal.say(
            "warning: a reader kept the WAL from being truncated; the erased text stays in "
            "it until the next checkpoint (the next write after that reader ends)",
            err=True,
        )


def _file_size(path: Path) -> int:
    return sum(
        candidate.stat().st_size for candidate in (path, Path(f"{path}-wal")) if candidate.exists()
    )


@cli.command(
    short_help="Merge search index segments and compact the file.",
    epilog=examples("hermes-models vacuum", "hermes-models vacuum --json"),
)
@db_option
@format_options
@click.pass_context
def vacuum(ctx: click.Context, db_path: str | None, fmt: str | None) -> None:
    """Merge the search index segments and compact the file."""
    _file_only(db_path, "the server vacuums its own tables (VACUUM, autovacuum)")
    path = resolve_path(db_path)
    with open_store(ctx, db_path, writes=True) as store:
        before = _file_size(path)
        with terminal.working(f"merging search index segments and compacting {views.size(before)}"):
            indexes = store.vacuum()
        after = _file_size(path)
    if fmt:
        record = {
            "path": str(path),
            "indexes_optimized": indexes,
            "bytes_before": before,
            "bytes_after": after,
        }
        terminal.write_records([record], fmt)
        return
    optimized = views.plural(indexes, "search index", "search indexes")
    terminal.say(f"optimized {optimized}; {path}: {views.size(before)} -> {views.size(after)}")


@cli.command(
    short_help="Redact secrets the stored messages and titles hold.",
    epilog=examples(
        "hermes-models redact --dry-run",
        "hermes-models redact",
        "hermes-models redact --db ~/.hermes/state.db --json",
    ),
)
@db_option
@click.option(
    "--dry-run",
    is_flag=True,
    help="Count what would be redacted, by pattern; change nothing.",
)
@format_options
@click.pass_context
def redact(ctx: click.Context, db_path: str | None, dry_run: bool, fmt: str | None) -> None:
    """Replace the secrets stored messages (content, tool calls, tool output,
    reasoning) and session titles hold with [REDACTED:<pattern>], a batch per short
    transaction (a gateway writing meanwhile waits at most one batch), then merge the
    search indexes and truncate the WAL, so the old text leaves the file. Patterns:
    the maintained set, plus those of the file HERMES_MODELS_REDACT_PATTERNS names.
    """
    with open_store(ctx, db_path, writes=not dry_run) as store:
        with terminal.working("reading" if dry_run else "redacting"):
            report = store.redact_secrets(dry_run=dry_run)
        where = str(store.database.path)
    if fmt:
        terminal.write_records([{"path": where, **report}], fmt)
        return
    verb = "would redact" if dry_run else "redacted"
    found = sum(report["by_pattern"].values())
    terminal.say(
        f"{verb} {views.plural(found, 'secret')} in "
        f"{views.plural(report['messages_changed'], 'message')} and "
        f"{views.plural(report['titles_changed'], 'title')} "
        f"(of {report['messages_scanned']} messages, {report['sessions_scanned']} sessions)"
    )
    for name, count in sorted(report["by_pattern"].items()):
        terminal.say(f"  {name}: {count}")
    if report["wal_truncated"] is False and not dry_run and found:
        terminal.say(
            "a reader still holds the WAL: its older frames may keep the old text until "
            "it is checkpointed; run 'hermes-models redact' again once it has gone"
        )


@cli.command(
    short_help="Index messages for one- and two-character CJK search.",
    epilog=examples(
        "hermes-models optimize",
        "hermes-models optimize --rebuild",
        "hermes-models optimize --json",
    ),
)
@db_option
@click.option(
    "--rebuild",
    is_flag=True,
    help="Empty the index and build it again from every message.",
)
@format_options
@click.pass_context
def optimize(ctx: click.Context, db_path: str | None, rebuild: bool, fmt: str | None) -> None:
    """Bring the index that finds one- and two-character Chinese, Japanese and Korean
    terms up to date: index the messages other processes (Hermes) wrote, changed or
    deleted, a chunk per short transaction, so writers never wait long, then merge
    the index into one segment (finishing a merge a killed run left). Searches are
    exact before, during and after; only their speed changes.
    """
    with (
        open_store(ctx, db_path, writes=True) as store,
        terminal.progress("indexing", "messages") as bar,
    ):
        result = store.update_search_index(rebuild=True if rebuild else None, progress=bar)
        where = str(store.database.path)
    if fmt:
        terminal.write_records([{"path": where, **result}], fmt)
        return
    if _server(db_path) is not None:
        terminal.say(
            "rebuilt the gram index"
            if result["rebuilt"]
            else "the server keeps the gram index in step: nothing to do"
        )
        return
    if not result["present"]:
        terminal.say("this file has no gram index (SQLite without FTS5): nothing to do")
        return
    done = views.plural(result["indexed"], "message", "messages")
    how = "rebuilt the index: indexed" if result["rebuilt"] else "indexed"
    left = result["changed"]
    tail = (
        "every message is indexed"
        if not left
        else f"{views.plural(left, 'message', 'messages')} written meanwhile not indexed yet"
    )
    terminal.say(f"{how} {done}; {tail}")


@cli.command(
    short_help="Copy the database while it is in use (checked, 0600).",
    epilog=examples(
        "hermes-models backup ~/backups/",
        "hermes-models backup ~/backups --keep 7",
        "hermes-models backup /tmp/state-copy.db",
    ),
)
@db_option
@click.argument("dest")
@click.option(
    "--keep",
    type=click.IntRange(min=1),
    metavar="N",
    help="DEST is a folder: keep only the newest N copies of this database there.",
)
@format_options
@click.pass_context
def backup(
    ctx: click.Context, db_path: str | None, dest: str, keep: int | None, fmt: str | None
) -> None:
    """Copy the database to DEST while it is in use: a consistent snapshot, mode 0600,
    checked with integrity_check before it is kept.

    DEST is a new file, or a folder (existing, ending in /, or with --keep) where
    the copy is named <name>-<UTC time>.db.
    """

    _file_only(db_path, "back it up with the server's tools (pg_dump, base backups)")
    path = resolve_path(db_path)
    if not path.exists():
        raise click.ClickException(f"{path} does not exist (nothing to back up)")
    if not dest:
        raise click.BadParameter("must not be empty (a new file, or a folder)", param_hint="DEST")
    _expand_user(ctx, dest, "DEST")
    with terminal.progress("backing up", "pages") as progress:
        result = back_up(path, dest, keep=keep, progress=progress)
    if fmt:
        terminal.write_records([result], fmt)
        return
    terminal.say(
        f"backed up {result['source']} to {result['path']} "
        f"({views.size(result['bytes'])}, integrity_check ok)"
    )
    for old in result["removed"]:
        terminal.say(f"removed old copy {old}")
    for leftover in result["leftovers"]:
        terminal.say(f"removed {leftover} (left by a killed backup)")


def _new_key(ctx: click.Context) -> str:
    """The key a file is to be encrypted under: ``HERMES_MODELS_NEW_KEY``,
    ``HERMES_MODELS_NEW_KEY_FILE``, else typed twice on a terminal."""
    try:
        found = cipher.environment_key(new=True)
    except (OSError, ValueError, UnsafeFileError) as exc:
        raise click.ClickException(_one_line(exc)) from None
    if found is not None:
        return found[0]
    if not _on_terminal():
        raise click.ClickException(
            f"no new key: set {cipher.NEW_KEY_VARIABLE} or {cipher.NEW_KEY_FILE_VARIABLE}"
            " (or run on a terminal to type it)"
        )
    return _prompt_key("New key", confirm=True)


def _current_key(ctx: click.Context, path: Path) -> str:
    """The key the encrypted file ``path`` opens with: the environment's, else typed."""
    try:
        found = cipher.environment_key()
    except (OSError, ValueError, UnsafeFileError) as exc:
        raise click.ClickException(_one_line(exc)) from None
    if found is not None:
        return found[0]
    if not _on_terminal():
        raise click.ClickException(str(cipher.encrypted_error(str(path), key_source=None)))
    return _prompt_key(f"Key for {path}")


def _converted(result: dict[str, Any], fmt: str | None, done: str) -> None:
    record = {"path": result["path"], "pages": result["pages"], "bytes": result["bytes"]}
    record["rows"] = sum(result["tables"].values())
    if fmt:
        terminal.write_records([record], fmt)
        return
    terminal.say(
        f"{done} {record['path']} ({views.size(record['bytes'])}, "
        f"{views.plural(record['rows'], 'row')} checked)"
    )


def _convertible(ctx: click.Context, db_path: str | None, what: str) -> Path:
    _refuse_read_only(ctx)
    _file_only(db_path, f"{what} is for SQLite files; a server encrypts its own storage")
    path = resolve_path(db_path)
    if not path.exists():
        raise click.ClickException(f"{path} does not exist")
    return path


@cli.command(
    short_help="Encrypt the database in place (SQLCipher).",
    epilog=examples(
        "HERMES_MODELS_NEW_KEY_FILE=~/.hermes/key hermes-models encrypt",
        "hermes-models encrypt --db ~/.hermes/state.db",
    ),
)
@db_option
@format_options
@click.pass_context
def encrypt(ctx: click.Context, db_path: str | None, fmt: str | None) -> None:
    """Encrypt a plain database in place under a new key: a checked encrypted copy
    replaces the file (no plain copy is left beside it). Stop the programs using it
    first. The key: HERMES_MODELS_NEW_KEY, HERMES_MODELS_NEW_KEY_FILE, or typed
    twice on a terminal; later opens read HERMES_MODELS_KEY or HERMES_MODELS_KEY_FILE.
    """
    path = _convertible(ctx, db_path, "encryption")
    if cipher.looks_encrypted(str(path)):
        raise click.ClickException(f"{path} is encrypted already (rekey changes its key)")
    result = encrypt_store(path, _new_key(ctx))
    _converted(result, fmt, "encrypted")


@cli.command(
    short_help="Write an encrypted database back as a plain SQLite file.",
    epilog=examples(
        "HERMES_MODELS_KEY_FILE=~/.hermes/key hermes-models decrypt",
        "hermes-models decrypt --db ~/.hermes/state.db --json",
    ),
)
@db_option
@format_options
@click.pass_context
def decrypt(ctx: click.Context, db_path: str | None, fmt: str | None) -> None:
    """Decrypt an encrypted database in place: a checked plain copy replaces the file.
    Stop the programs using it first. The key: HERMES_MODELS_KEY,
    HERMES_MODELS_KEY_FILE, or typed on a terminal."""
    path = _convertible(ctx, db_path, "decryption")
    if not cipher.looks_encrypted(str(path)):
        raise click.ClickException(f"{path} is not encrypted")
    result = decrypt_store(path, _current_key(ctx, path))
    _converted(result, fmt, "decrypted")


@cli.command(
    short_help="Encrypt the database under a new key.",
    epilog=examples(
        "HERMES_MODELS_NEW_KEY_FILE=new.key hermes-models rekey",
        "hermes-models rekey --db ~/.hermes/state.db",
    ),
)
@db_option
@format_options
@click.pass_context
def rekey(ctx: click.Context, db_path: str | None, fmt: str | None) -> None:
    """Encrypt an encrypted database under a new key, in place (a checked copy replaces
    the file). The old key: HERMES_MODELS_KEY, HERMES_MODELS_KEY_FILE or typed; the
    new: HERMES_MODELS_NEW_KEY, HERMES_MODELS_NEW_KEY_FILE or typed twice."""
    path = _convertible(ctx, db_path, "rekey")
    if not cipher.looks_encrypted(str(path)):
        raise click.ClickException(f"{path} is not encrypted (encrypt gives it a key)")
    old = _current_key(ctx, path)
    result = rekey_store(path, old, _new_key(ctx))
    _converted(result, fmt, "rekeyed")


@cli.command(
    "copy",
    short_help="Copy a whole store: SQLite and PostgreSQL, either way (verified).",
    epilog=examples(
        "hermes-models copy ~/.hermes/state.db 'postgresql://hermes@db/hermes'",
        "hermes-models copy 'postgresql://hermes@db/hermes?schema=work' work.db",
        "hermes-models copy state.db 'postgresql://hermes@db/hermes' --merge --json",
    ),
)
@click.argument("source", metavar="SRC")
@click.argument("target", metavar="DST")
@click.option(
    "--merge",
    is_flag=True,
    help="DST may hold sessions: add those it lacks, leave the others as they are.",
)
@format_options
@click.pass_context
def copy_(ctx: click.Context, source: str, target: str, merge: bool, fmt: str | None) -> None:
    """Copy the store SRC into DST and check the copy: sessions, messages (ids kept),
    state_meta and compression locks.

    SRC and DST are SQLite files (or sqlite:/// URLs) or postgresql:// URLs
    (?schema=NAME for a profile). SRC is read in one snapshot and never
    written; DST is created or migrated, and must be empty unless --merge is
    given. A copy that was killed finishes when run again with the same
    arguments.
    """
    # The copy module (and psycopg for a PostgreSQL store) loads when used: the CLI starts faster.

    _refuse_read_only(ctx)
    # Each row counts twice: as it is copied, and as the copy is checked.
    with terminal.progress("copying and checking", "rows") as progress:
        report = copy_store(
            source,
            target,
            merge=merge,
            progress=None if fmt else progress,
            redact=_root(ctx).get("redact"),
        )
    if fmt:
        terminal.write_records([report.as_dict()], fmt)
        return
    verified = report.verified
    how = "finished the interrupted copy: " if report.resumed else ""
    terminal.say(
        f"{how}copied {views.plural(report.sessions_copied, 'session')} and "
        f"{views.plural(report.messages_copied, 'message')} from {report.source} to "
        f"{report.target} in {report.seconds:.1f} s"
    )
    if report.sessions_skipped:
        terminal.say(
            f"{views.plural(report.sessions_skipped, 'session')} already there "
            f"({views.plural(report.messages_renumbered, 'message')} given new ids)"
        )
    terminal.say(
        f"verified: {verified['sessions']} sessions, {verified['messages']} messages, "
        f"{verified['state_meta']} state_meta rows, "
        f"{verified['compression_locks']} compression locks"
    )
    notes = (
        (report.orphan_messages, "message", "of no session not copied"),
        (report.parents_dropped, "parent link", "to a session in neither store dropped"),
        (report.titles_renamed, "title", "that DST already had given the next free #N"),
        (report.rows_differing, "row", "of DST that differ from SRC kept as they were"),
    )
    for count, noun, text in notes:
        if count:
            terminal.say(f"note: {views.plural(count, noun)} {text}", err=True)


# -- entry points -------------------------------------------------------------------------------


def main(argv: list[str] | None = None, prog_name: str = "hermes-models") -> int:
    """Run the CLI as the console script does (click's standalone mode); the exit status."""
    if sys.stdin is None:  # started with standard input closed: it reads as empty
        sys.stdin = open(os.devnull, encoding="utf-8")
    if sys.stderr is None:  # closed: errors go nowhere, the exit status still says
        sys.stderr = open(os.devnull, "w", encoding="utf-8")
    if sys.stdout is None:
        # Started with standard output closed (``>&-``): refuse before doing anything.
        sys.stderr.write("Error: standard output is closed; nothing was done\n")
        return EXIT_FAILURE
    try:
        with _noting_interrupts():
            cli.main(args=argv, prog_name=prog_name)
        status = 0
    except SystemExit as exc:
        code = exc.code
        status = code if isinstance(code, int) else (0 if code is None else EXIT_FAILURE)
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away before the last bytes were flushed: drop them quietly.
        _discard_stdout()
    except OSError as exc:
        # The last bytes cannot be written (a full disk): one error line unless the
        # command has said it already, and the bytes dropped, so that the interpreter
        # does not fail on them again at exit ("Exception ignored", status 120).
        if status == 0:
            sys.stderr.write(f"Error: {_one_line(exc)}\n")
            status = EXIT_FAILURE
        _discard_stdout()
    except ValueError:
        pass  # standard output was closed by the command
    return status


def _discard_stdout() -> None:
    """Send what is left for standard output nowhere."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
