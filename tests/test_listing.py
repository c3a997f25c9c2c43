"""Listings as pickers show them, counts, and archiving."""

from __future__ import annotations

from typing import Any

import pytest

from hermes_models import Session, SessionDB
from hermes_models.conversations.listing import TIP_COLUMNS, preview_text

pytestmark = pytest.mark.backends("sqlite", "postgresql")

T0 = 1_700_000_000.0


def make(store: SessionDB, sid: str, at: float, **options: Any) -> str:
    messages = options.pop("messages", [])
    store.create_session(sid, options.pop("source", "cli"), started_at=T0 + at, **options)
    for n, (role, text) in enumerate(messages):
        store.append_message(sid, role, text, timestamp=T0 + at + n + 1)
    return sid


def end(sid: str, reason: str, at: float) -> None:
    Session.get_by_id(sid).end(reason, at=T0 + at)


def ids(rows: list[dict[str, Any]]) -> list[str]:
    return [row["id"] for row in rows]


@pytest.fixture
def world(store: SessionDB) -> SessionDB:
    make(
        store,
        "alpha",
        0,
        messages=[("user", "first question\nwith a newline"), ("assistant", "a1")],
    )
    end("alpha", "compression", 100)
    make(store, "alpha-2", 100, parent_session_id="alpha", messages=[("user", "summary of alpha")])
    end("alpha-2", "compression", 200)
    make(
        store,
        "alpha-3",
        200,
        parent_session_id="alpha-2",
        messages=[("user", "s2"), ("assistant", "x")],
    )
    make(
        store,
        "alpha-sub",
        210,
        parent_session_id="alpha-3",
        messages=[("user", "subagent work")],
        model_config={"_delegate_from": "alpha-3"},
    )
    make(store, "beta", 300, source="telegram", messages=[("user", "x" * 80)])
    make(
        store,
        "beta-fork",
        400,
        source="telegram",
        parent_session_id="beta",
        model_config={"_branched_from": "beta"},
        messages=[("user", "forked")],
    )
    make(store, "gamma", 500, messages=[])
    make(store, "delta", 600, source="discord", messages=[("assistant", "no user yet")])
    return store


def test_rich_listing_projects_chains_and_hides_children(world: SessionDB) -> None:
    rows = world.list_sessions_rich()
    assert ids(rows) == ["delta", "gamma", "beta-fork", "beta", "alpha-3"]
    alpha = rows[-1]
    # As Hermes projects a chain: the root's row with the tip's id, end,
    # counts, title, model, prompt, cwd, preview and last activity.
    assert alpha["_lineage_root_id"] == "alpha"
    assert alpha["preview"] == "s2"
    assert alpha["last_active"] == T0 + 202
    root, tip = world.get_session("alpha"), world.get_session("alpha-3")
    taken = set(TIP_COLUMNS)
    assert {k: v for k, v in alpha.items() if k in root and k not in taken} == {
        k: v for k, v in root.items() if k not in taken
    }
    assert {k: alpha[k] for k in taken} == {k: tip[k] for k in taken}
    assert (alpha["started_at"], alpha["parent_session_id"]) == (T0, None)
    assert all("_lineage_root_id" not in row for row in rows[:-1])
    assert rows[3]["preview"] == "x" * 60 + "..."
    assert rows[0]["preview"] == ""
    assert rows[1]["last_active"] == T0 + 500


def test_rich_listing_without_projection_shows_roots(world: SessionDB) -> None:
    rows = world.list_sessions_rich(project_compression_tips=False)
    assert ids(rows) == ["delta", "gamma", "beta-fork", "beta", "alpha"]
    assert "_lineage_root_id" not in rows[-1]


def test_rich_listing_with_children_lists_every_session(world: SessionDB) -> None:
    rows = world.list_sessions_rich(include_children=True, limit=None)
    assert ids(rows) == [
        "delta",
        "gamma",
        "beta-fork",
        "beta",
        "alpha-sub",
        "alpha-3",
        "alpha-2",
        "alpha",
    ]


def test_rich_listing_filters(world: SessionDB) -> None:
    assert ids(world.list_sessions_rich(source="telegram")) == ["beta-fork", "beta"]
    assert ids(world.list_sessions_rich(exclude_sources=["telegram", "discord"])) == [
        "gamma",
        "alpha-3",
    ]
    assert ids(world.list_sessions_rich(min_message_count=2)) == ["alpha-3"]
    assert ids(world.list_sessions_rich(min_message_count=1)) == [
        "delta",
        "beta-fork",
        "beta",
        "alpha-3",
    ]


def test_rich_listing_orders_by_last_activity(world: SessionDB) -> None:
    world.append_message("beta", "user", "a late reply", timestamp=T0 + 10_000)
    rows = world.list_sessions_rich(order_by_last_active=True)
    assert ids(rows) == ["beta", "delta", "gamma", "beta-fork", "alpha-3"]
    assert [row["last_active"] for row in rows] == [
        T0 + 10_000,
        T0 + 601,
        T0 + 500,
        T0 + 401,
        T0 + 202,
    ]


def test_rich_listing_pages_count_roots(world: SessionDB) -> None:
    assert ids(world.list_sessions_rich(limit=2)) == ["delta", "gamma"]
    assert ids(world.list_sessions_rich(limit=2, offset=2)) == ["beta-fork", "beta"]
    assert ids(world.list_sessions_rich(limit=2, offset=4)) == ["alpha-3"]
    assert ids(world.list_sessions_rich(limit=2, offset=3, order_by_last_active=True)) == [
        "beta",
        "alpha-3",
    ]
    assert world.list_sessions_rich(limit=0) == []


def test_limit_0_is_no_row_and_none_every_row(world: SessionDB) -> None:
    # As in Hermes, whose methods pass limit to SQL's LIMIT; the CLI's --limit agrees.
    counts = {
        name: [len(method(limit=limit)) for limit in (0, None)]
        for name, method in (
            ("list_sessions", world.list_sessions),
            ("list_sessions_rich", world.list_sessions_rich),
            (
                "search_messages",
                lambda limit: world.search_messages("s2 OR x OR forked", limit=limit),
            ),
            (
                "search_sessions",
                lambda limit: world.search_sessions("s2 OR x OR forked", limit=limit),
            ),
        )
    }
    assert counts == {
        "list_sessions": [0, 8],
        "list_sessions_rich": [0, 5],
        "search_messages": [0, 3],
        "search_sessions": [0, 2],
    }


def test_rich_listing_rejects_bad_pages(world: SessionDB) -> None:
    with pytest.raises(ValueError, match="limit"):
        world.list_sessions_rich(limit=-1)
    with pytest.raises(ValueError, match="offset"):
        world.list_sessions_rich(offset=-5)
    with pytest.raises(TypeError, match="limit"):
        world.list_sessions_rich(limit="10")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="exclude_sources"):
        world.list_sessions_rich(exclude_sources=[1, 2])  # type: ignore[list-item]


def test_archive_applies_to_the_whole_compression_chain(world: SessionDB) -> None:
    assert world.set_session_archived("alpha-2", True) is True
    archived = {s.id for s in Session.select().where(Session.archived == 1)}
    assert archived == {"alpha", "alpha-2", "alpha-3"}
    assert "alpha-3" not in ids(world.list_sessions_rich())
    assert ids(world.list_sessions_rich(archived_only=True)) == ["alpha-3"]
    assert ids(world.list_sessions_rich(include_archived=True)) == [
        "delta",
        "gamma",
        "beta-fork",
        "beta",
        "alpha-3",
    ]
    assert world.set_session_archived("alpha", False) is True
    assert {s.id for s in Session.select().where(Session.archived == 1)} == set()
    assert world.set_session_archived("nope", True) is False


def test_archiving_a_branch_leaves_its_parent(world: SessionDB) -> None:
    world.set_session_archived("beta-fork", True)
    assert {s.id for s in Session.select().where(Session.archived == 1)} == {"beta-fork"}


def test_session_count_filters(world: SessionDB) -> None:
    assert world.session_count() == 8
    assert world.session_count(exclude_children=True) == 5
    assert world.session_count(source="telegram") == 2
    assert world.session_count(exclude_sources=["cli"]) == 3
    assert world.session_count(min_message_count=2) == 2
    world.set_session_archived("beta", True)
    # Archived sessions are left out unless asked for, as Hermes counts.
    assert world.session_count() == 7
    assert world.session_count(include_archived=True) == 8
    assert world.session_count(archived_only=True) == 1


def test_plain_list_sessions_has_every_row(world: SessionDB) -> None:
    rows = world.list_sessions(limit=3)
    assert ids(rows) == ["delta", "gamma", "beta-fork"]
    assert ids(world.list_sessions(limit=None, source="cli")) == [
        "gamma",
        "alpha-sub",
        "alpha-3",
        "alpha-2",
        "alpha",
    ]
    assert rows[0] == world.get_session("delta")


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("short", "short"),
        ("  spaced\n\tout  text ", "spaced \tout  text"),
        ("a\r\nb", "a  b"),
        ("y" * 60, "y" * 60),
        ("y" * 61, "y" * 60 + "..."),
        ("y" * 60 + "   " + "z" * 10, "y" * 60),
        ("y" * 59 + " z" + "w" * 10, "y" * 59 + " ..."),
        (
            [
                {"type": "text", "text": "look"},
                {"type": "image_url"},
                {"type": "text", "text": "here"},
            ],
            "look here",
        ),
        (None, ""),
    ],
)
def test_preview_text(content: Any, expected: str) -> None:
    assert preview_text(content) == expected


# -- paging by key (``after``) -------------------------------------------------------------


@pytest.fixture
def crowd(store: SessionDB) -> SessionDB:
    """Forty-odd sessions with many equal start times (ties go by id), three compression
    chains of different lengths, branches, a subagent run, archived and other sources."""
    starts = [0, 0, 0, 5, 5, 7, 7, 7, 7, 9, 12, 12, 15, 15, 15, 15, 20, 21, 21, 30]
    for n, at in enumerate(starts):
        source = ("cli", "telegram", "discord")[n % 3]
        make(store, f"s{n:02d}", at, source=source, messages=[("user", f"m{n}")] * (n % 3))
    for c, (at, hops) in enumerate([(7, 1), (15, 3), (30, 2)]):
        sid = make(store, f"chain{c}", at, messages=[("user", f"chain {c}")])
        for hop in range(1, hops + 1):
            end(sid, "compression", at + hop)
            sid = make(
                store,
                f"chain{c}-{hop}",
                at + hop,
                parent_session_id=sid,
                messages=[("user", f"chain {c} hop {hop}")],
            )
    make(store, "s05-fork", 7, parent_session_id="s05", model_config={"_branched_from": "s05"})
    make(store, "s06-sub", 8, parent_session_id="s06", model_config={"_delegate_from": "s06"})
    store.set_session_archived("s03", True)
    store.set_session_archived("s12", True)
    return store


PAGED_OPTIONS = [
    {},
    {"project_compression_tips": False},
    {"include_children": True},
    {"source": "telegram"},
    {"exclude_sources": ["discord"], "min_message_count": 1},
    {"include_archived": True},
    {"archived_only": True},
]


@pytest.mark.parametrize("options", PAGED_OPTIONS, ids=lambda o: ",".join(o) or "default")
def test_paging_by_key_gives_the_pages_paging_by_offset_gives(
    crowd: SessionDB, options: dict[str, Any]
) -> None:
    full = crowd.list_sessions_rich(limit=None, **options)
    assert len(full) >= 2
    for size in (1, 3, 7):
        by_offset = [
            crowd.list_sessions_rich(limit=size, offset=start, **options)
            for start in range(0, len(full), size)
        ]
        by_key, after = [], None
        for _ in range(len(by_offset) + 1):  # a key that does not move on ends too
            page = crowd.list_sessions_rich(limit=size, after=after, **options)
            if not page:
                break
            by_key.append(page)
            after = page[-1]["id"]
        assert by_key == by_offset
    assert [row for page in by_key for row in page] == full


def test_a_page_after_a_chain_tip_or_its_root_is_the_same(crowd: SessionDB) -> None:
    full = crowd.list_sessions_rich(limit=None)
    at = next(n for n, row in enumerate(full) if row.get("_lineage_root_id") == "chain1")
    assert full[at]["id"] == "chain1-3"  # the row shows the tip
    rest = full[at + 1 :]
    assert crowd.list_sessions_rich(limit=None, after="chain1-3") == rest
    assert crowd.list_sessions_rich(limit=None, after="chain1") == rest
    # A session in the middle of the chain stands at the same place.
    assert crowd.list_sessions_rich(limit=None, after="chain1-1") == rest
    # Unprojected, the chain's sessions are rows of their own, each at its own place.
    every = crowd.list_sessions_rich(limit=None, include_children=True)
    at = ids(every).index("chain1-1")
    assert (
        crowd.list_sessions_rich(limit=None, include_children=True, after="chain1-1")
        == (every[at + 1 :])
    )


def test_offset_counts_from_the_key(crowd: SessionDB) -> None:
    full = crowd.list_sessions_rich(limit=None)
    key = full[4]["id"]
    assert crowd.list_sessions_rich(limit=3, offset=2, after=key) == full[7:10]
    assert crowd.list_sessions_rich(limit=None, after=full[-1]["id"]) == []


def test_paging_by_key_refuses_what_it_cannot_page(crowd: SessionDB) -> None:
    with pytest.raises(ValueError, match=r"after: no session 'gone' \(deleted since"):
        crowd.list_sessions_rich(after="gone")
    with pytest.raises(ValueError, match="after pages the start order"):
        crowd.list_sessions_rich(after="s01", order_by_last_active=True)
    with pytest.raises(TypeError, match="after must be str or None, not int"):
        crowd.list_sessions_rich(after=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="after must not be empty"):
        crowd.list_sessions_rich(after="")
    page = crowd.list_sessions_rich(limit=2)
    crowd.delete_session(page[-1]["id"])
    with pytest.raises(ValueError, match=f"after: no session {page[-1]['id']!r}"):
        crowd.list_sessions_rich(limit=2, after=page[-1]["id"])
