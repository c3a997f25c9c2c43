"""
Adopt tables written by older Hermes releases (schema versions 2 to 15).

A fresh database has no tables yet and this step does nothing. In a file an
older Hermes wrote, it adds every column the v16 layout has and the file
lacks, with the v16 declaration and default, and renames duplicate titles
(allowed before v4) so that the unique title index of the next migration can
be built. Existing rows are never removed.

Rolling back keeps the added columns: removing them could drop data written
since.
"""

from yoyo import step

# Columns added after the first Hermes schema, with their v16 declarations.
V16_COLUMNS = {
    "sessions": [
        ("user_id", "TEXT"),
        ("model", "TEXT"),
        ("model_config", "TEXT"),
        ("system_prompt", "TEXT"),
        ("parent_session_id", "TEXT REFERENCES sessions(id)"),
        ("ended_at", "REAL"),
        ("end_reason", "TEXT"),
        ("message_count", "INTEGER DEFAULT 0"),
        ("tool_call_count", "INTEGER DEFAULT 0"),
        ("input_tokens", "INTEGER DEFAULT 0"),
        ("output_tokens", "INTEGER DEFAULT 0"),
        ("cache_read_tokens", "INTEGER DEFAULT 0"),
        ("cache_write_tokens", "INTEGER DEFAULT 0"),
        ("reasoning_tokens", "INTEGER DEFAULT 0"),
        ("cwd", "TEXT"),
        ("git_branch", "TEXT"),
        ("billing_provider", "TEXT"),
        ("billing_base_url", "TEXT"),
        ("billing_mode", "TEXT"),
        ("estimated_cost_usd", "REAL"),
        ("actual_cost_usd", "REAL"),
        ("cost_status", "TEXT"),
        ("cost_source", "TEXT"),
        ("pricing_version", "TEXT"),
        ("title", "TEXT"),
        ("api_call_count", "INTEGER DEFAULT 0"),
        ("handoff_state", "TEXT"),
        ("handoff_platform", "TEXT"),
        ("handoff_error", "TEXT"),
        ("rewind_count", "INTEGER NOT NULL DEFAULT 0"),
        ("archived", "INTEGER NOT NULL DEFAULT 0"),
    ],
    "messages": [
        ("content", "TEXT"),
        ("tool_call_id", "TEXT"),
        ("tool_calls", "TEXT"),
        ("tool_name", "TEXT"),
        ("token_count", "INTEGER"),
        ("finish_reason", "TEXT"),
        ("reasoning", "TEXT"),
        ("reasoning_content", "TEXT"),
        ("reasoning_details", "TEXT"),
        ("codex_reasoning_items", "TEXT"),
        ("codex_message_items", "TEXT"),
        ("platform_message_id", "TEXT"),
        ("observed", "INTEGER DEFAULT 0"),
        ("active", "INTEGER NOT NULL DEFAULT 1"),
    ],
}


def _columns(cursor, table):
    cursor.execute("SELECT name FROM pragma_table_info(?)", (table,))
    return {row[0] for row in cursor.fetchall()}


def _add_missing_columns(cursor):
    for table, columns in V16_COLUMNS.items():
        present = _columns(cursor, table)
        if not present:
            continue
        for name, declaration in columns:
            if name not in present:
                cursor.execute(f'ALTER TABLE "{table}" ADD COLUMN "{name}" {declaration}')


def _rename_duplicate_titles(cursor):
    cursor.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'idx_sessions_title_unique'"
    )
    if cursor.fetchone():
        return
    cursor.execute(
        "SELECT id, title FROM sessions WHERE title IS NOT NULL"
        " AND title IN (SELECT title FROM sessions WHERE title IS NOT NULL"
        " GROUP BY title HAVING COUNT(*) > 1)"
        " ORDER BY title, started_at, id"
    )
    rows = cursor.fetchall()
    taken = set()
    cursor.execute("SELECT title FROM sessions WHERE title IS NOT NULL")
    taken.update(row[0] for row in cursor.fetchall())
    seen = set()
    for session_id, title in rows:
        if title not in seen:
            seen.add(title)
            continue
        number = 2
        while f"{title} #{number}" in taken:
            number += 1
        renamed = f"{title} #{number}"
        taken.add(renamed)
        cursor.execute("UPDATE sessions SET title = ? WHERE id = ?", (renamed, session_id))


def apply_step(conn):
    cursor = conn.cursor()
    _add_missing_columns(cursor)
    if "title" in _columns(cursor, "sessions"):
        _rename_duplicate_titles(cursor)


def rollback_step(conn):
    """Added columns stay: dropping them could lose data written since."""


steps = [step(apply_step, rollback_step)]
