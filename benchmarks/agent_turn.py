"""One turn of a running agent, with and without the prepared-statement layer.

A turn is what a gateway does for each message it handles: find the session to
resume and read it, append the user's message, list the recent sessions (a
picker or a sidebar), search the history once, replay the conversation for the
model, append the reply and add its token counts. The store is
built once (2,000 sessions, 50 messages each: 100,000 messages of common
words and rarer terms, a search term hitting about 100) under a temporary folder.

The same turns run two ways, alternating round by round:

* ``prepared``: as shipped — a statement the package builds with peewee is
  rendered to SQL once per store structure and run again with new values
  (:class:`hermes_models.store.statements.Prepared`);
* ``peewee``: every such statement built and rendered by peewee on each call,
  as a plain peewee program does.

It prints the median time of a turn and of each step both ways, and the share
of the turn the layer saves. The layer stays where it saves more than 5 % of a
turn (``docs/architecture.md``).

Run: python benchmarks/agent_turn.py [--rounds N] [--turns N]
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from hermes_models import SessionDB
from hermes_models.store import statements

COMMON = "the a to of and is in it that for on with as this be".split()
T0 = 1_700_000_000.0


def vocabulary() -> list[str]:
    """Common words, then 5,000 rarer ones (a term of a search hits tens of messages)."""
    return COMMON + [f"term{i}" for i in range(5_000)]


def build(path: Path, sessions: int, per_session: int) -> None:
    """A store of ``sessions`` sessions of ``per_session`` messages each."""
    rng = random.Random(7)
    words = vocabulary()
    with SessionDB(path) as store:
        for s in range(sessions):
            session_id = f"s{s:05d}"
            store.create_session(session_id, "cli", started_at=T0 + s * 100)
            store.set_session_title(session_id, f"talk {s}")
            store.replace_messages(
                session_id,
                [
                    {
                        "role": ("user", "assistant")[n % 2],
                        "content": " ".join(
                            rng.choice(COMMON) if k % 2 else rng.choice(words) for k in range(12)
                        ),
                        "timestamp": T0 + s * 100 + n,
                    }
                    for n in range(per_session)
                ],
            )


@contextlib.contextmanager
def unprepared() -> Iterator[None]:
    """Every Prepared statement built and rendered by peewee on each call."""
    render, run = statements.Prepared.render, statements.Prepared._run

    def every_time(self: statements.Prepared, db: Any) -> statements.Statement:
        self._last = None
        return self._render(db)

    def run_built(self: statements.Prepared, db: Any, values: dict[str, Any]) -> Any:
        self._last = None  # what it kept would be run without rendering
        return run(self, db, values)

    statements.Prepared.render = every_time  # type: ignore[method-assign]
    statements.Prepared._run = run_built  # type: ignore[method-assign]
    try:
        yield
    finally:
        statements.Prepared.render = render  # type: ignore[method-assign]
        statements.Prepared._run = run  # type: ignore[method-assign]


def turn(store: SessionDB, session_id: str, n: int) -> dict[str, float]:
    """One turn; returns the seconds of each step."""
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("resume target", lambda: store.resolve_resume_session_id(session_id)),
        ("get session", lambda: store.get_session(session_id)),
        ("append user", lambda: store.append_message(session_id, "user", f"question {n} loop")),
        ("list sessions", lambda: store.list_sessions_rich(limit=20)),
        ("search", lambda: store.search_messages(f"term{n % 5_000}", limit=5)),
        ("replay", lambda: store.get_messages_as_conversation(session_id)),
        ("append reply", lambda: store.append_message(session_id, "assistant", f"answer {n}")),
        ("token counts", lambda: store.update_token_counts(session_id, 120, 80)),
    ]
    out = {}
    for name, step in steps:
        start = time.perf_counter()
        step()
        out[name] = time.perf_counter() - start
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--sessions", type=int, default=2_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "state.db"
        print(f"building {args.sessions:,} sessions x 50 messages ...", flush=True)
        build(path, args.sessions, 50)
        store = SessionDB(path)
        times: dict[str, dict[str, list[float]]] = {"prepared": {}, "peewee": {}}
        n = 0
        for _ in range(args.rounds):
            for way in ("prepared", "peewee"):
                with unprepared() if way == "peewee" else contextlib.nullcontext():
                    for _ in range(args.turns):
                        n += 1
                        session_id = f"s{n % args.sessions:05d}"
                        for step, seconds in turn(store, session_id, n).items():
                            times[way].setdefault(step, []).append(seconds)
        store.close()
    print(f"{'step':<16} {'prepared':>10} {'peewee':>10} {'saved':>8}")
    totals = {}
    for way in ("prepared", "peewee"):
        totals[way] = sum(statistics.median(v) for v in times[way].values())
    for step in times["prepared"]:
        ours = statistics.median(times["prepared"][step])
        plain = statistics.median(times["peewee"][step])
        print(f"{step:<16} {ours * 1e3:8.3f}ms {plain * 1e3:8.3f}ms {plain - ours:+7.4f}s")
    saved = totals["peewee"] - totals["prepared"]
    print(
        f"{'turn':<16} {totals['prepared'] * 1e3:8.3f}ms {totals['peewee'] * 1e3:8.3f}ms "
        f"{saved * 1e3:+.3f} ms = {saved / totals['peewee'] * 100:.1f} % of the turn"
    )


if __name__ == "__main__":
    main()
