"""Every read call of SessionDB asked of Hermes' released code and of this package, on a
store the release built through its own API (``tests/hermes_differential.py``).

Each release from v16 to v31 builds its store; then each call of
:func:`hermes_differential.calls` is asked of Hermes (in its own process) and of a
read-only ``SessionDB`` on the very file, and the whole answers are compared. A
difference passes only when :data:`LISTED` names it - the method, where in the
answer, and the releases - and ``docs/hermes-compatibility.md`` gives its reason
under the same name. Anything else fails the test, naming the call and the place.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from console_script import run
from hermes_differential import build, calls, cli_calls, window_calls
from hermes_release import HermesError, HermesProcess

from hermes_models import SessionDB

# A Hermes process per release; run by tox's hermes-reference env (its time reported apart).
pytestmark = [pytest.mark.slow, pytest.mark.hermes_reference]

RELEASES = ("v16", "v17", "v19", "v22", "v25", "v26", "v30s2", "v30s3", "v31")
NEWER = RELEASES[1:]
V30_ON = ("v30s2", "v30s3", "v31")
DOCS = Path(__file__).resolve().parent.parent / "docs" / "hermes-compatibility.md"


@dataclass(frozen=True)
class Listed:
    """A difference left on purpose or not done yet; ``name`` is its row in the docs."""

    name: str
    method: str
    where: str  # a regular expression over the place in the answer ("[]" for indexes)
    how: str  # "only theirs", "only ours", "length" or "value"
    releases: tuple[str, ...]
    asked: str = ".*"  # a regular expression over the call's arguments (their repr)


LISTED = (
    Listed("snippet-marks", "search_messages", r"\[\]\[\]\.snippet", "value", RELEASES),
    Listed("context-rewound", "search_messages", r"\[\]\[\]\.context", "length", RELEASES),
    Listed("context-rewound", "search_messages", r"\[\]\[\]\.context\[\]\.(role|content)",
           "value", RELEASES),
    Listed("search-rewound", "search_messages", r"\[\]", "length", RELEASES,
           asked=r"\('(数据|库)',\)"),
    Listed("trigram-gaps", "search_messages", r"\[\]", "length", V30_ON,
           asked=r"\('[^a-z]{3,}',\)"),
    Listed("cjk-index", "search_messages", r"\[\]", "length", ("v31",),
           asked=r"\('[^a-z]+',\)"),
)  # fmt: skip


def _plain(value: Any) -> Any:
    """``value`` as JSON gives it back (tuples are lists, bytes are marked)."""
    return json.loads(json.dumps(value, default=lambda o: {"bytes": bytes(o).hex()}))


def _ask(store: Any, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        if isinstance(store, HermesProcess):
            return ["ok", _plain(store.call(method, *args, **kwargs))]
        return ["ok", _plain(getattr(store, method)(*args, **kwargs))]
    except HermesError as exc:
        return ["error", exc.kind]
    except Exception as exc:  # the error's class is the answer compared
        return ["error", type(exc).__name__]


def differences(theirs: Any, ours: Any, where: str = "") -> list[tuple[str, str]]:
    """Where two answers differ: ``(place, how)``, places with ``[]`` for list indexes."""
    if isinstance(theirs, dict) and isinstance(ours, dict):
        found = []
        for key in sorted(set(theirs) | set(ours)):
            place = f"{where}.{key}"
            if key not in ours:
                found.append((place, "only theirs"))
            elif key not in theirs:
                found.append((place, "only ours"))
            else:
                found += differences(theirs[key], ours[key], place)
        return found
    if isinstance(theirs, list) and isinstance(ours, list):
        if len(theirs) != len(ours):
            return [(f"{where}", "length")]
        return [d for a, b in zip(theirs, ours) for d in differences(a, b, f"{where}[]")]
    both_numbers = all(
        isinstance(x, (int, float)) and not isinstance(x, bool) for x in (theirs, ours)
    )
    if both_numbers and abs(theirs - ours) < 1e-6:
        return []
    return [] if theirs == ours else [(where, "value")]


def listed(release: str, method: str, args: tuple[Any, ...], place: str, how: str) -> bool:
    return any(
        release in entry.releases
        and re.fullmatch(entry.method, method)
        and re.fullmatch(entry.asked, repr(args))
        and re.fullmatch(entry.where, place)
        and entry.how == how
        for entry in LISTED
    )


@pytest.mark.parametrize("release", RELEASES)
def test_every_read_answers_as_hermes_or_is_listed(tmp_path: Path, release: str) -> None:
    path = tmp_path / "state.db"
    with HermesProcess(release, path) as hermes:
        made = build(hermes, seed=RELEASES.index(release))
        asked = calls(made)
        theirs = [_ask(hermes, *call) for call in asked]
        held = [theirs[asked.index(("get_messages", (sid,), {}))] for sid in made["sessions"]]
        windows = window_calls(made["sessions"], held)
        asked += windows
        theirs += [_ask(hermes, *call) for call in windows]
    with SessionDB(path, read_only=True) as store:
        ours = [_ask(store, *call) for call in asked]
    unlisted = [
        f"{method}{args}{kwargs or ''}: {place or 'the answer'} ({how})"
        for (method, args, kwargs), a, b in zip(asked, theirs, ours)
        for place, how in differences(a, b)
        if not listed(release, method, args, place, how)
    ]
    assert unlisted == []
    equal = sum(a == b for a, b in zip(theirs, ours))
    assert equal >= len(asked) * 0.6, f"{equal} of {len(asked)} calls answer as Hermes"
    # The console script's read commands, as a person runs them, answer as Hermes too.
    commands = cli_calls(made)
    with HermesProcess(release, path) as hermes:
        theirs = [_ask(hermes, method, args, kwargs) for _, method, args, kwargs in commands]
    shown = []
    for argv, *_ in commands:
        done = run("--db", str(path), *argv, cwd=tmp_path)
        assert done.returncode == 0, (argv, done.stderr)
        text = done.stdout.strip()
        shown.append(["ok", text if argv[0] == "resume" else json.loads(text)])
    unlisted = [
        f"hermes-models {' '.join(argv)}: {place or 'the answer'} ({how})"
        for (argv, method, args, _), a, b in zip(commands, theirs, shown)
        for place, how in differences(a, b)
        if not listed(release, method, args, place, how)
    ]
    assert unlisted == []


def test_each_listed_difference_has_its_reason_in_the_docs() -> None:
    text = DOCS.read_text(encoding="utf-8")
    rows = set(re.findall(r"^\|\s*`([a-z-]+)`\s*\|", text, re.M))
    assert sorted(entry.name for entry in LISTED if entry.name not in rows) == []
