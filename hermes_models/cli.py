"""``hermes-models``: the session store from a terminal.

Each command parses its options, makes one or a few library calls and prints
the result. Errors become one line on stderr and a non-zero exit status.
"""

from __future__ import annotations

import io
import json
import os
import re
import sqlite3
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
import peewee
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

from . import __version__
from .checks import epoch_datetime
from .db import resolve_path
from .errors import HermesModelsError, ReadOnlyDatabaseError
from .store import SessionDB

F = TypeVar("F", bound=Callable[..., Any])

#: Exit status for a failed command (a usage error exits with 2, as in click).
EXIT_FAILURE = 1


def _console() -> Console:
    return Console(highlight=False, soft_wrap=True)


_DB_HELP = "Database file (default: $HERMES_HOME/state.db, HERMES_HOME=~/.hermes)."


def _inherit_db(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """A command's ``--db``, else the one given before the command name (or the env var)."""
    if value is None and ctx.parent is not None:
        inherited: Path | None = ctx.find_root().params.get("db_path")
        return inherited
    return value


def db_option(command: F) -> F:
    """Add ``--db PATH`` to a command (``hermes-models --db PATH COMMAND`` works too)."""
    return click.option(
        "--db",
        "db_path",
        # A directory is refused by the library, like any file that is not a database.
        type=click.Path(path_type=Path),
        metavar="FILE",
        default=None,
        callback=_inherit_db,
        help=_DB_HELP,
    )(command)


@contextmanager
def open_store(
    db_path: Path | None,
    read_only: bool = False,
    must_exist: bool = False,
    reading: bool = False,
) -> Iterator[SessionDB]:
    """A SessionDB on ``db_path`` (the default store when None), closed afterwards.

    With ``must_exist`` a missing file is an error instead of a new empty store.
    A command that only reads (``reading``) opens a file it cannot write read-only.
    """
    if must_exist:
        path = resolve_path(db_path)
        if not path.exists():
            raise click.ClickException(
                f"{path} does not exist (create it with: hermes-models migrate --db {path})"
            )
    try:
        store = SessionDB(db_path, read_only=read_only)
    except ReadOnlyDatabaseError:
        if not reading:
            raise
        store = SessionDB(db_path, read_only=True)
    try:
        yield store
    finally:
        store.close()


def _echo_json_lines(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        click.echo(json.dumps(row, ensure_ascii=False))


def _plural(count: int, noun: str, plural: str | None = None) -> str:
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def _when(epoch: Any) -> str:
    if epoch is None:
        return "-"
    moment = epoch_datetime(epoch)
    # A value no date can stand for (written by another program) is shown as it is.
    return str(epoch) if moment is None else moment.strftime("%Y-%m-%d %H:%M")


class HermesGroup(click.Group):
    """A click group that turns library errors into one line and exit status 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (
            click.ClickException,
            click.exceptions.Exit,
            click.exceptions.Abort,
            BrokenPipeError,
        ):
            raise
        except (
            HermesModelsError,
            sqlite3.Error,
            peewee.PeeweeException,
            ValueError,
            TypeError,
            OSError,
            KeyError,
        ) as exc:
            raise click.ClickException(_one_line(exc)) from exc


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, (HermesModelsError, ValueError, click.ClickException)):
        return text
    return f"{type(exc).__name__}: {text}"


@click.group(cls=HermesGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db",
    "db_path",
    type=click.Path(path_type=Path),
    metavar="FILE",
    default=None,
    envvar="HERMES_MODELS_DB",
    help=_DB_HELP + " Env: HERMES_MODELS_DB.",
)
@click.version_option(__version__, prog_name="hermes-models")
def cli(db_path: Path | None) -> None:
    """The Hermes session store: sessions, messages, lineage and search in one SQLite file."""


@cli.command()
@db_option
def migrate(db_path: Path | None) -> None:
    """Apply pending migrations (adopting an existing Hermes database)."""
    from .schema import migrate as apply

    path = resolve_path(db_path)
    applied = apply(path)
    console = _console()
    if applied:
        for migration_id in applied:
            console.print(f"applied {migration_id}")
    console.print(f"{path}: schema up to date")


def _sessions_table(rows: list[dict[str, Any]], width: int) -> Table:
    """The session listing as a table fitting ``width`` columns of terminal."""
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    id_width = max([len(row["id"]) for row in rows] + [2])
    # ID, source, count and time keep their width; title and preview share the rest.
    room = max(width - (id_width + 8 + 4 + 16 + 2 * 5), 16)
    title_width = min(24, max(8, room // 3))
    preview_width = max(8, min(40, room - title_width))
    table.add_column("ID", no_wrap=True, min_width=id_width)
    table.add_column("Title", no_wrap=True, width=title_width, overflow="ellipsis")
    table.add_column("Source", no_wrap=True, min_width=6, max_width=8, overflow="ellipsis")
    table.add_column("Msgs", justify="right", no_wrap=True, min_width=4)
    table.add_column("Last active", no_wrap=True, min_width=16)
    table.add_column("Preview", no_wrap=True, width=preview_width, overflow="ellipsis")
    for row in rows:
        table.add_row(
            escape(row["id"]),
            escape(row.get("title") or ""),
            escape(row["source"]),
            str(row.get("message_count") or 0),
            _when(row.get("last_active")),
            escape(row.get("preview") or ""),
        )
    return table


@cli.command()
@db_option
@click.option(
    "--limit",
    default=20,
    show_default=True,
    type=click.IntRange(min=0),
    metavar="N",
    help="At most N rows.",
)
@click.option(
    "--offset",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    metavar="N",
    help="Skip the first N rows.",
)
@click.option("--source", default=None, help="Only sessions from this source (cli, telegram, ...).")
@click.option("--archived", is_flag=True, help="Show archived sessions only.")
@click.option("--recent", is_flag=True, help="Order by last activity instead of start time.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def sessions(
    db_path: Path | None,
    limit: int,
    offset: int,
    source: str | None,
    archived: bool,
    recent: bool,
    as_json: bool,
) -> None:
    """List sessions as a picker shows them (no subagent runs, chains shown by their tip)."""
    with open_store(db_path, must_exist=True, reading=True) as store:
        rows = store.list_sessions_rich(
            source=source,
            limit=limit,
            offset=offset,
            archived_only=archived,
            order_by_last_active=recent,
        )
    if as_json:
        _echo_json_lines(rows)
        return
    console = _console()
    if not rows:
        console.print("no sessions")
        return
    console.print(_sessions_table(rows, console.width))


def _resolve(store: SessionDB, session_id: str) -> str:
    """A session id from an id, a unique id prefix, an exact title or a lineage title."""
    resolved = store.resolve_session_id(session_id)
    if resolved is None:
        exact = store.get_session_by_title(session_id)
        resolved = exact["id"] if exact else store.resolve_session_by_title(session_id)
    if resolved is None:
        raise click.ClickException(f"no session matches {session_id!r}")
    return resolved


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    return json.dumps(content, ensure_ascii=False)


@cli.command()
@db_option
@click.argument("session_id")
@click.option("--all", "include_inactive", is_flag=True, help="Include rewound messages.")
def show(db_path: Path | None, session_id: str, include_inactive: bool) -> None:
    """Show one session (by id, unique id prefix or title) and its transcript."""
    with open_store(db_path, must_exist=True, reading=True) as store:
        resolved = _resolve(store, session_id)
        session = store.get_session(resolved)
        messages = store.get_messages(resolved, include_inactive=include_inactive)
    assert session is not None
    console = _console()
    title = f"  {escape(session['title'])}" if session.get("title") else ""
    console.print(f"[bold]{escape(session['id'])}[/bold]{title}")
    console.print(
        f"source {escape(session['source'])} · model {escape(session.get('model') or '-')} · "
        f"started {_when(session['started_at'])} · ended {_when(session.get('ended_at'))}"
        f"{' (' + escape(session['end_reason']) + ')' if session.get('end_reason') else ''}"
    )
    console.print(
        f"{session.get('message_count') or 0} messages · "
        f"{session.get('input_tokens') or 0} in / {session.get('output_tokens') or 0} out tokens"
    )
    if session.get("parent_session_id"):
        console.print(f"parent {escape(session['parent_session_id'])}")
    console.print()
    for message in messages:
        marker = "" if message["active"] else " [dim](rewound)[/dim]"
        label = message["role"] + (f":{message['tool_name']}" if message.get("tool_name") else "")
        console.print(f"[bold]{escape(label)}[/bold]{marker}")
        console.print(escape(_content_text(message["content"])))
        if message.get("tool_calls"):
            console.print(f"[dim]tool calls: {escape(_content_text(message['tool_calls']))}[/dim]")
        console.print()


def _lineage_tree(store: SessionDB, session_id: str) -> Tree:
    from .lineage import kind_of
    from .models import Session

    start = Session.get_by_id(session_id)
    root = start.root()
    resume = store.resolve_resume_session_id(root.id)

    def label(session: Session) -> str:
        kind = kind_of(session)
        parts = [f"[bold]{escape(session.id)}[/bold]", f"[cyan]{kind}[/cyan]"]
        if session.title:
            parts.append(escape(repr(session.title)))
        parts.append(f"{session.message_count or 0} msgs")
        if session.end_reason:
            parts.append(f"ended: {escape(session.end_reason)}")
        if session.id == resume:
            parts.append("[green]<- resume[/green]")
        if session.id == start.id and start.id != root.id:
            parts.append("[yellow](asked)[/yellow]")
        return "  ".join(parts)

    tree = Tree(label(root))
    children: dict[str, list[Session]] = {}
    for child in root.descendants():
        children.setdefault(child.parent_session_id or "", []).append(child)

    def grow(node: Tree, parent_id: str, seen: set[str]) -> None:
        for child in children.get(parent_id, []):
            if child.id in seen:
                continue
            seen.add(child.id)
            grow(node.add(label(child)), child.id, seen)

    grow(tree, root.id, {root.id})
    return tree


@cli.command()
@db_option
@click.argument("session_id")
def lineage(db_path: Path | None, session_id: str) -> None:
    """Draw the lineage tree around a session: kinds, titles, counts, resume target."""
    with open_store(db_path, must_exist=True, reading=True) as store:
        resolved = _resolve(store, session_id)
        tree = _lineage_tree(store, resolved)
    _console().print(tree)


@cli.command()
@db_option
@click.argument("session_id")
def resume(db_path: Path | None, session_id: str) -> None:
    """Print the id a /resume of SESSION_ID opens (the compression tip with messages)."""
    with open_store(db_path, must_exist=True, reading=True) as store:
        resolved = _resolve(store, session_id)
        click.echo(store.resolve_resume_session_id(resolved))


@cli.command()
@db_option
@click.option("--keep", is_flag=True, help="Keep the demo database and print where it is.")
def demo(db_path: Path | None, keep: bool) -> None:
    """Build a demo store in a temporary folder and show what the package does with it."""
    from .demo import build_demo

    if db_path is not None and db_path.exists() and db_path.stat().st_size > 0:
        raise click.ClickException(
            f"{db_path} already exists; the demo writes a new database (pick a new path)"
        )
    console = _console()
    with tempfile.TemporaryDirectory(prefix="hermes-models-demo-") as tmp:
        path = db_path or Path(tmp) / "state.db"
        if keep and db_path is None:
            path = Path(tempfile.mkdtemp(prefix="hermes-models-demo-")) / "state.db"
        with open_store(path) as store:
            ids = build_demo(store)
            console.rule("Sessions (as a picker lists them)")
            rows = store.list_sessions_rich(limit=None)
            console.print(_sessions_table(rows, console.width))
            for session_id in (ids.english, ids.chinese):
                console.rule(f"Transcript of {session_id}")
                for message in store.get_messages_as_conversation(session_id):
                    text = escape(_content_text(message["content"]))
                    console.print(f"[bold]{message['role']}[/bold]: {text}")
            _demo_search(console, store)
            console.rule("Lineage")
            console.print(_lineage_tree(store, ids.english))
            console.print(_lineage_tree(store, ids.compressed_root))
            target = store.resolve_resume_session_id(ids.compressed_root)
            console.rule("Resume")
            console.print(f"/resume {ids.compressed_root} opens {target}")
        if keep or db_path is not None:
            console.print(f"\ndemo database: {path}")


_MARKED = re.compile(r">>>(.*?)<<<", re.DOTALL)


def _marked(console: Console, snippet: str) -> str:
    """A search snippet on one line as rich markup: ``>>>match<<<`` highlighted on a
    colour terminal, the markers kept elsewhere."""
    if console.color_system is None:
        return escape(" ".join(snippet.split()))
    parts, at = [], 0
    for match in _MARKED.finditer(snippet):
        parts.append(escape(snippet[at : match.start()]))
        parts.append(f"[bold black on yellow]{escape(match.group(1))}[/]")
        at = match.end()
    parts.append(escape(snippet[at:]))
    return " ".join("".join(parts).split())


def _print_hits(console: Console, hits: list[dict[str, Any]]) -> None:
    for hit in hits:
        tool = f":{hit['tool_name']}" if hit.get("tool_name") else ""
        console.print(
            f"[bold]{escape(hit['session_id'])}[/bold] [cyan]{escape(hit['role'] + tool)}[/cyan] "
            f"[dim]#{hit['id']} {_when(hit['timestamp'])} {escape(hit['source'] or '')}[/dim]"
        )
        console.print(f"  {_marked(console, hit['snippet'])}")


def _print_session_hits(console: Console, rows: list[dict[str, Any]]) -> None:
    for row in rows:
        via = row["matched_session_id"]
        where = "" if via == row["id"] else f" [dim](best hit in {escape(via)})[/dim]"
        title = f" {escape(repr(row['title']))}" if row.get("title") else ""
        console.print(
            f"[bold]{escape(row['id'])}[/bold]{title} [cyan]{row['hits']} hit"
            f"{'' if row['hits'] == 1 else 's'}[/cyan] score {row['score']:.2f}{where}"
        )
        console.print(f"  {_marked(console, row['best_snippet'])}")


@cli.command()
@db_option
@click.argument("query")
@click.option("--source", "sources", multiple=True, help="Only this source (repeatable).")
@click.option("--role", "roles", multiple=True, help="Only messages of this role (repeatable).")
@click.option("--sessions", "by_session", is_flag=True, help="One row per session (lineage root).")
@click.option(
    "--limit",
    default=20,
    show_default=True,
    type=click.IntRange(min=0),
    metavar="N",
    help="At most N rows.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def search(
    db_path: Path | None,
    query: str,
    sources: tuple[str, ...],
    roles: tuple[str, ...],
    by_session: bool,
    limit: int,
    as_json: bool,
) -> None:
    """Full-text search of messages (words, "phrases", prefix*, OR/NOT; Chinese,
    Japanese and Korean substrings), matches highlighted."""
    with open_store(db_path, must_exist=True) as store:
        if by_session:
            if roles:
                raise click.UsageError("--role cannot be combined with --sessions")
            rows = store.search_sessions(query, limit=limit, source=list(sources) or None)
        else:
            rows = store.search_messages(
                query,
                source_filter=list(sources) or None,
                role_filter=list(roles) or None,
                limit=limit,
            )
    if as_json:
        _echo_json_lines(rows)
        return
    console = _console()
    if not rows:
        console.print("no matches")
    elif by_session:
        _print_session_hits(console, rows)
    else:
        _print_hits(console, rows)


def _demo_search(console: Console, store: SessionDB) -> None:
    for query in ("asyncio thread", "事件循环", "异步"):
        console.rule(f"Search messages: {query}")
        _print_hits(console, store.search_messages(query, limit=5))
    query = "checkpoint OR jitter"
    console.rule(f"Search sessions: {query} (subagent and continuation hits count for their root)")
    _print_session_hits(console, store.search_sessions(query, limit=5))


# -- export, import and health ---------------------------------------------------------


@contextmanager
def _progress(label: str) -> Iterator[Callable[[int, int], None]]:
    """A progress bar on stderr (drawn on a terminal only), handed out as a callback."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    console = Console(stderr=True)
    columns = (label, BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    live = console.is_terminal
    with Progress(*columns, console=console, transient=True, disable=not live) as bar:
        task = bar.add_task(label, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


@contextmanager
def _output(path: Path | None) -> Iterator[Any]:
    """``path``, or standard output as UTF-8 text when None."""
    if path is not None:
        yield path
        return
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:
        yield sys.stdout
        return
    sys.stdout.flush()
    stream = io.TextIOWrapper(buffer, encoding="utf-8", newline="\n")
    try:
        yield stream
    finally:
        stream.flush()
        stream.detach()


@cli.command()
@db_option
@click.option("--session", "session_id", help="Only this session's lineage (id, prefix or title).")
@click.option("--source", default=None, help="Only sessions from this source.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "md"]),
    default="jsonl",
    show_default=True,
    help="jsonl: the lossless bundle `import` reads; md: Markdown to read.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="File to write (default: standard output).",
)
def export(
    db_path: Path | None, session_id: str | None, source: str | None, fmt: str, output: Path | None
) -> None:
    """Export sessions with their messages, lineage and soft-deleted messages included."""
    with open_store(db_path, must_exist=True, reading=True) as store:
        if session_id is not None:
            session_id = _resolve(store, session_id)
        with _output(output) as target, _progress("exporting") as progress:
            if fmt == "jsonl":
                counts = store.export_bundle(
                    target, session_id=session_id, source=source, progress=progress
                )
            else:
                count = store.export_markdown(
                    target, session_id=session_id, source=source, progress=progress
                )
                counts = {"sessions": count}
    if output is not None:
        what = _plural(counts["sessions"], "session")
        if "messages" in counts:
            what += " and " + _plural(counts["messages"], "message")
        _console().print(f"wrote {what} to {escape(str(output))}")


@cli.command("import")
@db_option
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option(
    "--source",
    default="cli",
    show_default=True,
    help="Source of transcripts whose meta line names no platform.",
)
def import_(db_path: Path | None, path: Path, source: str) -> None:
    """Import a JSONL bundle, a legacy <session_id>.jsonl transcript, or a folder of them.

    Sessions already in the database are left as they are, so importing twice
    is the same as importing once.
    """
    from .bundle import is_bundle

    console = _console()
    with open_store(db_path) as store, _progress("importing") as progress:
        if path.is_file() and is_bundle(path):
            report = store.import_bundle(path, progress=progress)
            console.print(
                f"imported {report['sessions_added']} sessions and {report['messages_added']} "
                f"messages ({report['sessions_skipped']} sessions already present, "
                f"{report['messages_renumbered']} messages given new ids)"
            )
            return
        totals = store.import_transcripts(path, source=source, progress=progress)
    console.print(
        f"imported {totals['sessions_added']} sessions and {totals['messages_added']} messages "
        f"from {totals['files']} transcript files ({totals['sessions_skipped']} already present, "
        f"{totals['lines_skipped']} lines skipped)"
    )
    for failure in totals["failed"]:
        click.echo(f"failed: {failure['error']}", err=True)
    if totals["failed"]:
        raise click.exceptions.Exit(EXIT_FAILURE)


def _bytes(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024  # type: ignore[assignment]
    raise AssertionError("unreachable")  # pragma: no cover


@cli.command()
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
def stats(db_path: Path | None, as_json: bool) -> None:
    """Sessions, messages, file and WAL size, and search index rows against messages."""
    from .health import stats as store_stats

    with open_store(db_path, must_exist=True, reading=True) as store:
        report = store_stats(store.database)
    if as_json:
        click.echo(json.dumps(report, ensure_ascii=False))
        return
    table = Table(show_header=False, box=None, pad_edge=False)
    rows = [
        ("file", escape(report["path"])),
        ("schema", f"v{report['schema_version']} ({report['journal_mode']} journal)"),
        ("sessions", str(report["sessions"])),
        (
            "messages",
            f"{report['messages']} ({report['active_messages']} active, "
            f"{report['inactive_messages']} rewound)",
        ),
        ("file size", _bytes(report["file_bytes"])),
        ("WAL size", _bytes(report["wal_bytes"])),
    ]
    for name, count in report["fts_rows"].items():
        state = "in step" if count == report["messages"] else f"messages: {report['messages']}"
        rows.append((name, f"{count} rows ({state})"))
    for name, value in rows:
        table.add_row(name, value)
    _console().print(table)


@cli.command()
@db_option
def doctor(db_path: Path | None) -> None:
    """Check the file (integrity, search indexes, foreign keys) without changing it.

    Exits with status 1 when a check fails.
    """
    from .db import connect
    from .health import doctor as check

    path = resolve_path(db_path)
    if not path.is_file():
        raise click.ClickException(f"no database at {path}")
    db = connect(path, migrate=False)
    try:
        report = check(db)
    finally:
        db.close()
    console = _console()
    for item in report["checks"]:
        mark = "[green]ok[/green]  " if item["ok"] else "[red]FAIL[/red]"
        console.print(f"{mark} {escape(item['name'])}: {escape(item['detail'])}")
    failed = [item for item in report["checks"] if not item["ok"]]
    if failed:
        console.print(f"{path}: {len(failed)} of {len(report['checks'])} checks failed")
        raise click.exceptions.Exit(EXIT_FAILURE)
    console.print(f"{path}: healthy ({len(report['checks'])} checks passed)")


@cli.command()
@db_option
@click.argument("session_id")
@click.option("--undo", is_flag=True, help="Unarchive instead.")
def archive(db_path: Path | None, session_id: str, undo: bool) -> None:
    """Archive a session and its whole compression chain (hidden from listings)."""
    with open_store(db_path, must_exist=True) as store:
        resolved = _resolve(store, session_id)
        store.set_session_archived(resolved, not undo)
    click.echo(f"{'unarchived' if undo else 'archived'} {resolved}")


def _confirm(yes: bool, question: str) -> None:
    if not yes:
        click.confirm(question, abort=True, err=True)


sessions_dir_option = click.option(
    "--sessions-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    metavar="DIR",
    help="Also remove the deleted sessions' transcript files from DIR "
    "(<id>.json, <id>.jsonl, request_dump_<id>_*.json).",
)


@cli.command()
@db_option
@click.argument("session_ids", nargs=-1, required=True, metavar="SESSION_ID...")
@sessions_dir_option
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def delete(
    db_path: Path | None, session_ids: tuple[str, ...], sessions_dir: Path | None, yes: bool
) -> None:
    """Delete sessions with their messages and the subagent runs tagged under them;
    every other child (branches, continuations, untagged children) is kept as a root."""
    with open_store(db_path, must_exist=True) as store:
        resolved = [_resolve(store, session_id) for session_id in session_ids]
        _confirm(yes, f"delete {_plural(len(resolved), 'session')} and their subagent runs?")
        count = store.delete_sessions(resolved, sessions_dir=sessions_dir)
    click.echo(f"deleted {_plural(count, 'session')}")


@cli.command()
@db_option
@click.option(
    "--older-than",
    "days",
    type=click.FloatRange(min=0),
    default=90,
    show_default=True,
    metavar="DAYS",
    help="Delete ended sessions started more than DAYS ago.",
)
@click.option("--source", default=None, help="Only sessions from this source.")
@sessions_dir_option
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def prune(
    db_path: Path | None, days: float, source: str | None, sessions_dir: Path | None, yes: bool
) -> None:
    """Delete old ended sessions; their children, whatever they are, are kept as roots."""
    with open_store(db_path, must_exist=True) as store:
        _confirm(yes, f"delete ended sessions started more than {days:g} days ago?")
        count = store.prune_sessions(older_than_days=days, source=source, sessions_dir=sessions_dir)
    click.echo(f"pruned {_plural(count, 'session')}")


@cli.command()
@db_option
def vacuum(db_path: Path | None) -> None:
    """Merge the search index segments and compact the file."""
    path = resolve_path(db_path)
    with open_store(db_path, must_exist=True) as store:
        before = _file_size(path)
        indexes = store.vacuum()
        after = _file_size(path)
    optimized = _plural(indexes, "search index", "search indexes")
    click.echo(f"optimized {optimized}; {path}: {before:,} -> {after:,} bytes")


def _file_size(path: Path) -> int:
    return sum(
        candidate.stat().st_size for candidate in (path, Path(f"{path}-wal")) if candidate.exists()
    )


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status instead of raising it."""
    try:
        cli.main(args=argv, prog_name="hermes-models", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return EXIT_FAILURE
    except click.exceptions.NoArgsIsHelpError as exc:
        exc.show()
        return exc.exit_code
    except click.UsageError as exc:
        # One line, like every other error; the hint says where the usage is.
        command = exc.ctx.command_path if exc.ctx is not None else "hermes-models"
        message = " ".join(exc.format_message().split())
        click.echo(f"Error: {message} (see '{command} --help')", err=True)
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): stop quietly, and keep Python
        # from complaining again when it flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILURE
    except Exception as exc:  # the CLI never shows a traceback
        click.echo(f"Error: {_one_line(exc)}", err=True)
        return EXIT_FAILURE
    return 0


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())


__all__ = ["cli", "main", "run"]
