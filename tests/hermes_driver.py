"""Runs in Hermes' process (see ``hermes_release``): a ``SessionDB`` answering JSON lines.

argv: the database path and ``1`` for a read-only handle. It writes one line when
ready (the SQLite version and Hermes' SCHEMA_VERSION, or the error that stopped
the open), then reads requests, one JSON object a line, and answers each with one:

* ``{"call": NAME, "args": [...], "kwargs": {...}}`` runs ``SessionDB.NAME``;
* ``{"sql": TEXT, "params": [...]}`` runs ``_conn.execute`` and returns every row;
* ``{"close": true}`` closes the store and ends the process.

Answers are ``{"result": ...}`` or ``{"error": [class name, message]}``. Bytes travel
as ``{"__bytes__": base64}``. Nothing here imports hermes_models.
"""

import base64
import json
import sqlite3
import sys
from pathlib import Path


def encode(value):
    if isinstance(value, bytes):
        return {"__bytes__": base64.b64encode(value).decode("ascii")}
    if isinstance(value, sqlite3.Row):
        return {k: encode(value[k]) for k in value.keys()}
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [encode(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def decode(value):
    if isinstance(value, dict):
        if set(value) == {"__bytes__"}:
            return base64.b64decode(value["__bytes__"])
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def say(answer):
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()


def main():
    path, read_only = Path(sys.argv[1]), sys.argv[2] == "1"
    try:
        import hermes_state

        store = hermes_state.SessionDB(path, read_only=read_only)
    except Exception as exc:  # the test reads the error
        say({"error": [type(exc).__name__, str(exc)]})
        return
    try:
        from hermes_state_common import SCHEMA_VERSION  # v31 moved it there
    except ImportError:
        SCHEMA_VERSION = hermes_state.SCHEMA_VERSION
    say({"sqlite_version": sqlite3.sqlite_version, "schema_version": SCHEMA_VERSION})
    for line in sys.stdin:
        request = decode(json.loads(line))
        if request.get("close"):
            break
        try:
            if "sql" in request:
                cursor = store._conn.execute(request["sql"], request.get("params") or ())
                result = [list(row) for row in cursor.fetchall()]
            else:
                method = getattr(store, request["call"])
                result = method(*request.get("args", []), **request.get("kwargs", {}))
            say({"result": encode(result)})
        except Exception as exc:  # the test reads the error
            say({"error": [type(exc).__name__, str(exc)]})
    store.close()


if __name__ == "__main__":
    main()
