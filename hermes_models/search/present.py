"""Presenting a search: rows the execute stage fetched, turned into hits.

The last stage of a search (parse, plan, execute, **present**). It reads
nothing from the database: it gets rows (a page of hits, their FTS5 snippets,
the messages around each) and returns the dicts callers see, with a snippet
whose matches are marked ``>>>``/``<<<`` (made here from the text when no
index made one) and each hit's ``context``. Content stored as JSON shows as
text: in snippets the text of every part, ``[image]`` for pictures
(:func:`hermes_models.models.tables.readable`), in ``context`` by Hermes' rule, its
text parts or ``[multimodal content]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..models import CONTENT_JSON_PREFIX, decode_content, readable
from ..store import content_text, stored_text
from .query import SearchQuery, highlight, term_finder

#: Characters of each message in a hit's ``context``.
CONTEXT_CHARS = 200


@dataclass
class Found:
    """What the execute stage hands over for one page of hits."""

    #: Hit rows (:data:`hermes_models.search.plan.HIT_COLUMNS`, maybe then a snippet).
    rows: list[tuple[Any, ...]]
    #: FTS5 snippets by hit id (none for hits no index found).
    snippets: dict[int, str] = field(default_factory=dict)
    #: ``(id, role before, content before, role after, content after)`` by hit id.
    around: dict[int, tuple[Any, ...]] = field(default_factory=dict)


def text_of(content: str | None) -> str:
    """Content as a hit's ``context`` shows it: JSON content by Hermes' rule
    (:func:`hermes_models.store.content.content_text`), other content as stored."""
    if isinstance(content, str) and not content.startswith(CONTENT_JSON_PREFIX):
        return content
    return content_text(decode_content(content))  # JSON, NULL, or another writer's value


def snippet_of(
    content: str | None, tool_name: str | None, tool_calls: str | None, regex: Any
) -> str:
    """A snippet made from a message's text, tool name and tool calls; ``regex`` as
    :func:`hermes_models.search.query.term_finder` gives it."""
    text = readable(content)
    if tool_name or tool_calls:
        parts = (text, tool_name, tool_calls)
        text = " ".join(stored_text(p) for p in parts if p)
    return highlight(text, regex)


def hits(found: Found, query: SearchQuery) -> list[dict[str, Any]]:
    """The hit dicts of a page (see :func:`hermes_models.search.pipeline.search_messages`)."""
    regex = None
    out = []
    for row in found.rows:
        (message_id, session_id, timestamp, role, content, tool_name, tool_calls) = row[:7]
        source, model, started = row[7:10]
        text = text_of(content)
        snippet = found.snippets.get(message_id)
        if snippet is None or (isinstance(content, str) and "\x00" in content):
            regex = regex or term_finder(query.positive_terms())
            snippet = snippet_of(content, tool_name, tool_calls, regex)
        context = [{"role": role, "content": text[:CONTEXT_CHARS]}]
        around = found.around.get(message_id)
        if around is not None:
            _, prev_role, prev_content, next_role, next_content = around
            if prev_role is not None:
                context.insert(
                    0, {"role": prev_role, "content": text_of(prev_content)[:CONTEXT_CHARS]}
                )
            if next_role is not None:
                context.append(
                    {"role": next_role, "content": text_of(next_content)[:CONTEXT_CHARS]}
                )
        out.append(
            {
                "id": message_id,
                "session_id": session_id,
                "role": role,
                "snippet": snippet,
                "timestamp": timestamp,
                "tool_name": tool_name,
                "source": source,
                "model": model,
                "session_started": started,
                "context": context,
            }
        )
    return out


def sessions(
    rows: list[dict[str, Any]], best: list[tuple[Any, ...]], query: SearchQuery
) -> list[dict[str, Any]]:
    """Session rows as :func:`hermes_models.search.pipeline.search_sessions` returns them;
    ``best`` holds ``(id, content, tool_name, tool_calls)`` of each best hit."""
    regex = term_finder(query.positive_terms()) if best else None
    snippets = {row[0]: snippet_of(row[1], row[2], row[3], regex) for row in best}
    for row in rows:
        rank = row.pop("_rank") or 0.0
        row["hits"] = row.pop("_hits")
        row["score"] = 0.0 - rank
        row["matched_session_id"] = row.pop("_matched")
        row["best_snippet"] = snippets.get(row.pop("_best_id"), "")
    return rows
