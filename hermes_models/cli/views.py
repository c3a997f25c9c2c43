"""What ``hermes-models`` shows of the store: tables, transcripts, trees and reports.

Each function turns what the library returned into a rich renderable (for
people) or into records (for ``--json``/``--nl``/``--csv``/``--tsv``). Tables
let rich share out the width; the columns a reader needs whole (ids, counts,
times) are never cut, and text columns wrap instead of ending in ``…``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from gettext import ngettext
from typing import Any

from rich.console import Group, RenderableType
from rich.filesize import decimal
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from ..health import WARNING
from ..models import Clock
from ..store import IMAGE
from ..store import content_text as text_of
from .grid import TIME_WIDTH, short_ids, time_header, title_and
from .terminal import PlainText


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``1 session``, ``2 sessions``."""
    return f"{count} {ngettext(noun, nouns or noun + 's', count)}"


def children(count: int, verb: str) -> str:
    """``1 child stays as a root``, ``2 children kept as roots`` (``verb``: stay or kept)."""
    if verb == "stay":
        verb = ngettext("stays", "stay", count)
    return f"{plural(count, 'child', 'children')} {verb} {ngettext('as a root', 'as roots', count)}"


def size(count: int) -> str:
    """Bytes as people read them (``176.1 kB``)."""
    return decimal(count)


def _table() -> Table:
    return Table(box=None, pad_edge=False, show_edge=False, header_style="bold", expand=False)


def _id_column(table: Table, ids: Iterable[str]) -> None:
    table.add_column(
        "ID", overflow="fold", min_width=min(max(map(len, ids), default=2), TIME_WIDTH)
    )


def _title_and(title: Any, more: Any, style: str = "dim") -> Text:
    """A cell with the title, and under it (dim) the preview or the effect."""
    first, second = title_and(title, more)
    text = Text(first)
    if second:
        if first:
            text.append("\n")
        text.append(second, style)
    return text


def _sessions_of(
    rows: list[dict[str, Any]],
    clock: Clock,
    ids: dict[str, str],
    when: tuple[str, str],
    last: tuple[str, Callable[[dict[str, Any]], Text]],
) -> Table:
    """A table of sessions: id, source, message count, the ``when`` column (header, key)
    and the ``last`` one (header, cell of a row)."""
    table = _table()
    _id_column(table, ids.values())
    table.add_column("Source", overflow="fold")
    table.add_column("Msgs", justify="right", no_wrap=True)
    header, key = when
    table.add_column(
        time_header(clock, header, (row.get(key) for row in rows)),
        no_wrap=True,
        min_width=TIME_WIDTH,
    )
    table.add_column(last[0], overflow="fold", ratio=1)
    for row in rows:
        table.add_row(
            ids.get(row["id"], row["id"]),
            row.get("source") or "",
            str(row.get("message_count") or 0),
            clock.cell(row.get(key)),
            last[1](row),
        )
    return table


def sessions_table(rows: list[dict[str, Any]], clock: Clock, ids: dict[str, str]) -> Table:
    """The session listing: id, source, message count, last activity, title and preview."""
    return _sessions_of(
        rows,
        clock,
        ids,
        ("Last active", "last_active"),
        ("Title / preview", lambda row: _title_and(row.get("title"), row.get("preview"))),
    )


# -- one session ----------------------------------------------------------------------------


def content_text(content: Any) -> str:
    """Message content as text (:func:`hermes_models.store.content.content_text`), with
    ``[image]`` where a message has a picture."""
    return text_of(content, image=IMAGE)


def session_header(session: dict[str, Any], clock: Clock) -> RenderableType:
    """Id, title, source, model, times, counters and parent of a session."""
    lines = [
        Text.assemble(
            (session["id"], "bold"), f"  {session['title']}" if session.get("title") else ""
        )
    ]
    ended = clock.stamp(session.get("ended_at"))
    if session.get("end_reason"):
        ended += f" ({session['end_reason']})"
    lines.append(
        Text(
            f"source {session['source']} · model {session.get('model') or '-'} · "
            f"started {clock.stamp(session['started_at'])} · ended {ended}"
        )
    )
    lines.append(
        Text(
            f"{plural(session.get('message_count') or 0, 'message')} · "
            f"{session.get('input_tokens') or 0} in / "
            f"{session.get('output_tokens') or 0} out tokens"
        )
    )
    if session.get("parent_session_id"):
        lines.append(Text(f"parent {session['parent_session_id']}"))
    return Group(*lines)


def transcript(messages: Iterable[dict[str, Any]], clock: Clock) -> RenderableType:
    """Each message: its role (and tool), time, and text; rewound ones marked."""
    parts: list[RenderableType] = []
    for message in messages:
        label = message["role"] + (f":{message['tool_name']}" if message.get("tool_name") else "")
        head = Text.assemble((label, "bold"), ("  " + clock.stamp(message.get("timestamp")), "dim"))
        if message.get("compacted") and not message.get("active", 1):
            head.append(" (compacted)", "dim")
        elif not message.get("active", 1):
            head.append(" (rewound)", "dim")
        parts.append(head)
        parts.append(PlainText(content_text(message.get("content"))))
        if message.get("tool_calls"):
            calls = message["tool_calls"]
            text = calls if isinstance(calls, str) else json.dumps(calls, ensure_ascii=False)
            parts.append(Text(f"tool calls: {text}", "dim"))
        parts.append(Text(""))
    return Group(*parts)


# -- lineage --------------------------------------------------------------------------------


@dataclass
class Node:
    """One session of a lineage tree."""

    row: dict[str, Any]
    kind: str
    depth: int
    children: list[Node] = field(default_factory=list)


def lineage_rows(root: Node, resume: str, asked: str) -> list[dict[str, Any]]:
    """The tree as records, root first, each child after its parent."""
    rows: list[dict[str, Any]] = []
    stack = [root]  # not recursion: a chain may be thousands of links long
    while stack:
        node = stack.pop()
        row = node.row
        rows.append(
            {
                "id": row["id"],
                "parent_session_id": row.get("parent_session_id"),
                "depth": node.depth,
                "kind": node.kind,
                "title": row.get("title"),
                "message_count": row.get("message_count") or 0,
                "started_at": row.get("started_at"),
                "ended_at": row.get("ended_at"),
                "end_reason": row.get("end_reason"),
                "resume_target": row["id"] == resume,
                "asked": row["id"] == asked,
            }
        )
        stack.extend(reversed(node.children))
    return rows


#: The levels of a lineage tree indented, at most, per 16 columns of the console: a
#: deeper session is drawn at the last of them with its depth (a chain may be
#: thousands of links long).
COLUMNS_PER_LEVEL = 16


class LineageTree:
    """The lineage tree drawn with guides as rich's ``Tree`` draws them, in time
    linear in the tree: each session labelled (id, kind, markers first, then
    title, counts, end). Indentation stops growing at a level that fills a quarter
    of the width; a session below it is drawn there, labelled with its depth."""

    def __init__(self, root: Node, resume: str, asked: str) -> None:
        self.root, self.resume, self.asked = root, resume, asked

    def label(self, node: Node) -> Text:
        row = node.row
        text = Text.assemble((row["id"], "bold"), "  ", (node.kind, "cyan"))
        if row["id"] == self.resume:
            text.append("  <- resume", "green")
        if row["id"] == self.asked and self.asked != self.root.row["id"]:
            text.append("  (asked)", "yellow")
        if row.get("title"):
            text.append(f"  {row['title']!r}")
        text.append(f"  {plural(row.get('message_count') or 0, 'msg')}")
        if row.get("end_reason"):
            text.append(f"  ended: {row['end_reason']}")
        return text

    def lines(self, width: int) -> Iterable[Text]:
        """One line per session, root first, each child after its parent."""
        levels = max(1, width // COLUMNS_PER_LEVEL)
        # (node, guides): guides link (is the last child, the parent's guides).
        stack: list[tuple[Node, Any]] = [(self.root, None)]
        while stack:  # not recursion: a chain may be thousands of links long
            node, guides = stack.pop()
            lasts: list[bool] = []
            at = guides
            while at is not None and len(lasts) < levels:
                lasts.append(at[0])
                at = at[1]
            lasts.reverse()
            prefix = "".join("    " if last else "│   " for last in lasts[:-1])
            if lasts:
                prefix += "└── " if lasts[-1] else "├── "
            line = Text(prefix, "tree.line") + self.label(node)
            if node.depth > levels:
                line.append(f"  (depth {node.depth})", "dim")
            yield line
            children = node.children
            for i in range(len(children) - 1, -1, -1):
                stack.append((children[i], (i == len(children) - 1, guides)))

    def __rich_console__(self, console: Any, options: Any) -> Iterable[Text]:
        yield from self.lines(options.max_width)


def lineage_tree(root: Node, resume: str, asked: str) -> LineageTree:
    """The tree, each session labelled: id, kind, markers first, then title, counts, end."""
    return LineageTree(root, resume, asked)


# -- search ---------------------------------------------------------------------------------

_MARKED = re.compile(r">>>(.*?)<<<", re.DOTALL)


def snippet(text: str, colour: bool) -> Text:
    """A search snippet on one line: matches highlighted in colour, else kept marked."""
    flat = " ".join(text.split())
    if not colour:
        return Text(flat)
    out, at = Text(), 0
    for match in _MARKED.finditer(flat):
        out.append(flat[at : match.start()])
        out.append(match.group(1), "bold black on yellow")
        at = match.end()
    out.append(flat[at:])
    return out


def message_hits(hits: list[dict[str, Any]], clock: Clock, colour: bool) -> RenderableType:
    """One hit per message: where it is, then its snippet, indented."""
    parts: list[RenderableType] = []
    for hit in hits:
        tool = f":{hit['tool_name']}" if hit.get("tool_name") else ""
        where = f"#{hit['id']} {clock.stamp(hit['timestamp'])} {hit.get('source') or ''}"
        parts.append(
            Text.assemble(
                (hit["session_id"], "bold"),
                " ",
                (hit["role"] + tool, "cyan"),
                " ",
                (where.rstrip(), "dim"),
            )
        )
        parts.append(Padding(snippet(hit["snippet"], colour), (0, 0, 0, 2)))
    return Group(*parts)


def session_hits(rows: list[dict[str, Any]], clock: Clock, colour: bool) -> RenderableType:
    """One hit per conversation: its root, hit count, score and title; when it started
    and where the best hit is; the best snippet."""
    parts: list[RenderableType] = []
    for row in rows:
        line = Text.assemble((row["id"], "bold"))
        line.append(f" {plural(row['hits'], 'hit')}", "cyan")
        line.append(f" score {row['score']:.2f}")
        if row.get("title"):
            line.append(f" {row['title']!r}")
        parts.append(line)
        where = f"started {clock.stamp(row.get('started_at'))}"
        if row["matched_session_id"] != row["id"]:
            where += f" · best hit in {row['matched_session_id']}"
        parts.append(Padding(Text(where, "dim"), (0, 0, 0, 2)))
        parts.append(Padding(snippet(row["best_snippet"], colour), (0, 0, 0, 2)))
    return Group(*parts)


# -- deletion plans -------------------------------------------------------------------------


def plan_rows(
    rows: list[dict[str, Any]], targets: set[str], orphaned: set[str], gone: str = "deleted"
) -> list[dict[str, Any]]:
    """Sessions a deletion touches, each with its ``effect``: ``deleted`` (asked for or
    matched), ``deleted with its parent`` (a subagent run) or ``kept as a root``
    (``erased`` for ``deleted`` with ``gone="erased"``)."""
    out = []
    for row in rows:
        if row["id"] in orphaned:
            effect = "kept as a root"
        elif row["id"] in targets:
            effect = gone
        else:
            effect = f"{gone} with its parent"
        keys = ("id", "title", "source", "message_count", "started_at", "ended_at")
        out.append({**{key: row.get(key) for key in keys}, "effect": effect})
    return out


def plan_table(rows: list[dict[str, Any]], clock: Clock, ids: dict[str, str]) -> Table:
    """The sessions of a deletion plan: id, source, count, start, what happens, title."""
    return _sessions_of(
        rows,
        clock,
        ids,
        ("Started", "started_at"),
        ("Effect / title", lambda row: _title_and(row["effect"], row.get("title"), "")),
    )


# -- reports --------------------------------------------------------------------------------


def stats_table(report: dict[str, Any]) -> Table:
    """The ``stats`` report as name/value rows."""
    table = Table(show_header=False, box=None, pad_edge=False, show_edge=False)
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")
    on_file = report["journal_mode"] is not None  # else a PostgreSQL store
    table.add_row("file" if on_file else "store", report["path"])
    schema = f"v{report['schema_version']}"
    if on_file:
        exposed = ", exposed to the WAL-reset bug" if report.get("exposed") else ""
        schema += f" ({report['journal_mode']} journal{exposed})"
    if report.get("newer_than_writes"):
        schema += ", newer than v16: read only"
    table.add_row("schema", schema)
    if report.get("newer_than_writes") and report.get("fts_layout") is not None:
        table.add_row("search layout", f"{report['fts_layout']} (Hermes' fts_storage_version)")
    table.add_row("sessions", str(report["sessions"]))
    table.add_row(
        "messages",
        f"{report['messages']} ({report['active_messages']} active, "
        f"{report['inactive_messages']} rewound)",
    )
    sqlite = report.get("sqlite")
    if on_file and sqlite:
        bug = "has the WAL-reset bug" if sqlite["wal_reset_bug"] else "without the WAL-reset bug"
        table.add_row("SQLite", f"{sqlite['version']} ({sqlite['module']}), {bug}")
        table.add_row("SQLite source", str(sqlite["source_id"]))
    if on_file:
        table.add_row("file size", size(report["file_bytes"]))
        table.add_row("WAL size", size(report["wal_bytes"]))
    for name, count in report["fts_rows"].items():
        if report.get("fts_in_step") is None:
            state = "indexed as Hermes indexes it"
        elif count == report["messages"]:
            state = "in step"
        else:
            state = f"messages: {report['messages']}"
        table.add_row(name, f"{count} rows ({state})")
    if report.get("newer_than_writes"):
        for name, use in report.get("search_indexes", {}).items():
            table.add_row(f"{name}", use)
    return table


def doctor_lines(checks: list[dict[str, Any]]) -> RenderableType:
    """Each check as ``ok``/``FAIL``, its name and detail (wrapped under the name)."""
    table = Table(show_header=False, box=None, show_edge=False, padding=(0, 1, 0, 0))
    table.add_column(no_wrap=True, min_width=4)
    table.add_column(overflow="fold")
    for check in checks:
        if not check["ok"]:
            mark = Text("FAIL", "red")
        elif str(check["detail"]).startswith(WARNING):
            mark = Text("warn", "yellow")
        else:
            mark = Text("ok", "green")
        table.add_row(mark, f"{check['name']}: {check['detail']}")
    return table


__all__ = [
    "Node",
    "children",
    "content_text",
    "doctor_lines",
    "lineage_rows",
    "lineage_tree",
    "message_hits",
    "plan_rows",
    "plan_table",
    "plural",
    "session_header",
    "session_hits",
    "sessions_table",
    "short_ids",
    "size",
    "snippet",
    "stats_table",
    "transcript",
]
