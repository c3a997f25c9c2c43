"""Runs in a Python where Hermes v16 is installed: Hermes' own programs on its store.

Each program below is a piece of Hermes' released code that reaches the store
through ``from hermes_state import ...``: the gateway's session store, the
``hermes sessions`` commands, the ``session_search`` tool. Nothing here imports
``hermes_models``; whether Hermes got its own module or this package's is read
at the end from ``sys.modules``.

argv: the programs to run (``gateway``, ``cli``, ``search``, ``repair``, ``kanban``), in
order, on ``$HERMES_HOME/state.db``. Printed: one JSON object, ``module`` (the
``__name__`` of what ``hermes_state`` is) and each program's answers. Values
that differ from run to run (times, the ids the gateway draws, the home folder) are replaced by
stable placeholders, so two runs of the same programs on copies of one store
can be compared whole.
"""

import contextlib
import io
import json
import os
import re
import sys
from pathlib import Path

HOME = Path(os.environ["HERMES_HOME"])
#: Keys whose values are clock readings.
TIMES = {"timestamp", "started_at", "ended_at", "last_active", "when", "created_at", "updated_at"}
#: Ids the gateway drew in this run, in order: replaced by ``gateway-1``, ``gateway-2``, …
DRAWN = []


def stable(value):
    """``value`` without clock readings and with the drawn ids named by their order."""
    if isinstance(value, dict):
        return {k: ("<time>" if k in TIMES else stable(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [stable(v) for v in value]
    if isinstance(value, str):
        value = value.replace(str(HOME), "$HERMES_HOME")
        for n, drawn in enumerate(DRAWN, 1):
            value = value.replace(drawn, f"gateway-{n}")
        return re.sub(r"malformed-backup-\d{8}_\d{6}(-\d+)?", "malformed-backup-<stamp>", value)
    return value


def hermes(*argv):
    """``hermes ARGV``: Hermes' CLI in this process; (exit status, stdout)."""
    import hermes_cli.main

    sys.argv = ["hermes", *argv]
    out = io.StringIO()
    status = 0
    with contextlib.redirect_stdout(out):
        try:
            hermes_cli.main.main()
        except SystemExit as exc:
            status = exc.code or 0
    text = "\n".join(line for line in out.getvalue().splitlines() if "Database size" not in line)
    return [status, stable(text)]


def gateway():
    """A chat on Telegram through the gateway's session store: messages, /undo, /reset."""
    from gateway.config import GatewayConfig, Platform
    from gateway.session import SessionSource, SessionStore

    store = SessionStore(HOME / "sessions", GatewayConfig())
    source = SessionSource(platform=Platform.TELEGRAM, chat_id="42", chat_name="ops", user_id="u1")
    entry = store.get_or_create_session(source)
    DRAWN.append(entry.session_id)
    chat = [
        ("user", "deploy the asyncio service to staging"),
        ("assistant", "deployed; the 数据库 migration ran"),
        ("user", "thanks, now roll back"),
        ("assistant", "rolled back"),
    ]
    for role, text in chat:
        store.append_to_transcript(entry.session_id, {"role": role, "content": text})
    before = store.load_transcript(entry.session_id)
    undone = store.rewind_session(entry.session_id, 1)
    after = store.load_transcript(entry.session_id)
    fresh = store.reset_session(entry.session_key)
    DRAWN.append(fresh.session_id)
    store.append_to_transcript(fresh.session_id, {"role": "user", "content": "a fresh start"})
    db = store._db
    return stable(
        {
            "before": before,
            "undone": undone,
            "after": after,
            "fresh": store.load_transcript(fresh.session_id),
            "first": db.get_session(entry.session_id),
            "sessions": db.session_count(),
            "recent": db.list_recent_user_messages(entry.session_id),
        }
    )


def cli():
    """The ``hermes sessions`` commands a person runs."""
    return [
        hermes("sessions", "list"),
        hermes("sessions", "stats"),
        hermes("sessions", "rename", "s1", "asyncio", "notes"),
        hermes("sessions", "export", "-", "--session-id", "s1"),
        hermes("sessions", "list", "--source", "telegram"),
        hermes("sessions", "delete", "s3", "--yes"),
        hermes("sessions", "list"),
        hermes("sessions", "repair"),
    ]


def search():
    """The agent's ``session_search`` tool, in each of its shapes."""
    from tools.session_search_tool import check_session_search_requirements, session_search

    answers = {"requirements": check_session_search_requirements()}
    for query in ("asyncio", "数据库", "event loop", "rollback OR deploy"):
        answers[query] = json.loads(session_search(query=query, limit=5))
    answers["browse"] = json.loads(session_search())
    answers["read"] = json.loads(session_search(session_id="s1"))
    answers["scroll"] = json.loads(session_search(session_id="s2", around_message_id=3, window=2))
    return stable(answers)


def repair():
    """``hermes sessions repair`` on a file whose schema SQLite refuses."""
    return [hermes("sessions", "repair"), hermes("sessions", "list")]


def kanban():
    """The kanban board's database, which Hermes opens through ``apply_wal_with_fallback``."""
    import sqlite3

    from hermes_cli import kanban_db

    conn = kanban_db.connect(HOME / "kanban.db")
    try:
        return {
            "journal_mode": conn.execute("PRAGMA journal_mode").fetchone()[0],
            "sqlite_version": sqlite3.sqlite_version,
        }
    finally:
        conn.close()


PROGRAMS = {"gateway": gateway, "cli": cli, "search": search, "repair": repair, "kanban": kanban}


def main():
    answers = {name: PROGRAMS[name]() for name in sys.argv[1:]}
    answers["module"] = sys.modules["hermes_state"].__name__
    sys.stdout.write(json.dumps(answers, ensure_ascii=False, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
