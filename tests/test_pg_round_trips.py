"""What the server's round trips were cut to still does what the longer form did.

A write begins with its isolation level in the ``BEGIN`` (no ``SET TRANSACTION``
after it): its transaction runs at that level. A search's own transaction begins
with its settings in the same round trip and its end sets them back: the pooled
connection keeps the server's settings for whatever runs on it next. The messages
around a search's hits come with the page: the same ``context`` as the messages'
own order gives.
"""

from __future__ import annotations

import pytest

from hermes_models import SessionDB

pytestmark = pytest.mark.backends("postgresql")

SHOW_LEVEL = "SHOW transaction_isolation"
SETTINGS = "SELECT current_setting('statement_timeout'), current_setting('plan_cache_mode')"


def test_a_write_runs_at_the_level_its_begin_names(store: SessionDB) -> None:
    db = store.database
    assert db.write(lambda: db.execute_sql(SHOW_LEVEL).fetchone()[0]) == "serializable"
    assert db.write_new_rows(lambda: db.execute_sql(SHOW_LEVEL).fetchone()[0]) == "repeatable read"
    # Inside a write, a nested one is a savepoint of the same transaction.
    nested = db.write(lambda: db.write(lambda: db.execute_sql(SHOW_LEVEL).fetchone()[0]))
    assert nested == "serializable"
    # Outside, reads run at the server's default.
    assert db.execute_sql(SHOW_LEVEL).fetchone()[0] == "read committed"


def test_a_search_leaves_the_connection_with_the_servers_settings(store: SessionDB) -> None:
    db = store.database
    store.create_session("s", "cli")
    store.append_message("s", "user", "docker compose up")
    with db.connection_context():  # one connection for the searches and the look after
        before = db.execute_sql(SETTINGS).fetchone()
        assert [hit["session_id"] for hit in store.search_messages("docker")] == ["s"]
        assert store.search_messages("docker", time_budget=None, sort="newest") != []
        assert store.search_messages("数据") == []
        assert db.execute_sql(SETTINGS).fetchone() == before
    assert before[1] == "auto"


def test_a_hits_context_is_the_messages_before_and_after_it(store: SessionDB) -> None:
    store.create_session("s", "cli")
    for n, text in enumerate(["first", "docker one", "middle", "docker two", "last"]):
        store.append_message("s", "user" if n % 2 == 0 else "assistant", text)
    store.create_session("t", "cli")
    store.append_message("t", "user", "docker alone")
    hits = store.search_messages("docker", sort="oldest")
    assert [(hit["session_id"], hit["context"]) for hit in hits] == [
        (
            "s",
            [
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": "docker one"},
                {"role": "user", "content": "middle"},
            ],
        ),
        (
            "s",
            [
                {"role": "user", "content": "middle"},
                {"role": "assistant", "content": "docker two"},
                {"role": "user", "content": "last"},
            ],
        ),
        ("t", [{"role": "user", "content": "docker alone"}]),
    ]
