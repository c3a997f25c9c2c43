"""docs/hermes-compatibility.md, Hermes' public names and ours agree.

``tests/hermes_v16_public_names.txt`` lists the public names of Hermes v16's
``hermes_state`` module and ``SessionDB`` (with method signatures). The page
must have one row per name, say truthfully whether it exists here, and list
every public name we add; a name marked "same" must take Hermes' arguments.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

import hermes_models
import hermes_models.hermes_state as hermes_state
from hermes_models import SessionDB

pytestmark = pytest.mark.backends("sqlite", "postgresql")

HERE = Path(__file__).resolve().parent
NAMES = HERE / "hermes_v16_public_names.txt"
PAGE = HERE.parent / "docs" / "hermes-compatibility.md"
STATUSES = ("same", "different", "not applicable", "missing")
EXISTING = ("same", "different")
SECTIONS = {"module": "## Module `hermes_state`", "SessionDB": "## `SessionDB`"}


def hermes_names() -> dict[str, dict[str, str | None]]:
    """``{"module": {name: params or None}, "SessionDB": {...}}`` from the list."""
    found: dict[str, dict[str, str | None]] = {"module": {}, "SessionDB": {}}
    for line in NAMES.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        owner, _, rest = line.partition(" ")
        match = re.fullmatch(r"(\w+)(?:\((.*)\))?", rest.strip())
        assert owner in found and match, f"bad line in {NAMES.name}: {line!r}"
        name, params = match.group(1), match.group(2)
        assert name not in found[owner], f"{owner} {name} listed twice"
        found[owner][name] = params
    return found


def page_rows(heading: str) -> dict[str, str]:
    """``{name: status}`` of the tables under ``heading`` (up to the next ``## ``)."""
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(heading + "\n")
    end = text.find("\n## ", start + len(heading))
    body = text[start : end if end != -1 else len(text)]
    rows: dict[str, str] = {}
    for name, status in re.findall(r"^\| `(\w+)` \| ([^|]+?) \|", body, re.M):
        assert name not in rows, f"{name} has two rows in {PAGE.name}"
        rows[name] = status.strip()
    return rows


def additions() -> set[str]:
    return set(page_rows("## Additions"))


def our_module_names() -> set[str]:
    return set(hermes_state.__all__)


def our_sessiondb_names(tmp_path: Path) -> set[str]:
    store = SessionDB(tmp_path / "state.db")
    try:
        names = {name for name in dir(store) if not name.startswith("_")}
    finally:
        store.close()
    return names


# -- the list, the page, the code ----------------------------------------------------------


@pytest.mark.parametrize("owner", sorted(SECTIONS))
def test_every_hermes_name_has_exactly_one_row(owner: str) -> None:
    listed = {name for name in hermes_names()[owner] if not name.startswith("__")}
    rows = page_rows(SECTIONS[owner])
    assert sorted(listed - set(rows)) == [], "Hermes names without a row"
    assert sorted(set(rows) - listed) == [], "rows for names Hermes does not have"
    for name, status in rows.items():
        assert status in STATUSES, f"{name}: unknown status {status!r}"


def test_module_rows_say_truthfully_what_exists() -> None:
    ours = our_module_names()
    for name, status in page_rows(SECTIONS["module"]).items():
        exists = name in ours and hasattr(hermes_models, name)
        assert exists == (status in EXISTING), f"hermes_state.{name} is marked {status!r}"


def test_sessiondb_rows_say_truthfully_what_exists(tmp_path: Path) -> None:
    ours = our_sessiondb_names(tmp_path)
    for name, status in page_rows(SECTIONS["SessionDB"]).items():
        assert (name in ours) == (status in EXISTING), (
            f"SessionDB.{name} is marked {status!r}; update docs/hermes-compatibility.md"
        )


def test_every_public_name_we_add_is_listed(tmp_path: Path) -> None:
    hermes = hermes_names()
    module_extra = our_module_names() - set(hermes["module"])
    assert sorted(module_extra) == [], "hermes_state exports names Hermes does not have"
    extra = our_sessiondb_names(tmp_path) - set(hermes["SessionDB"])
    assert sorted(extra) == sorted(additions())


# -- signatures --------------------------------------------------------------------------------


def hermes_parameters(params: str) -> list[inspect.Parameter]:
    """The parameters of ``def f(<params>)`` with their literal defaults."""
    tree = ast.parse(f"def f({params}): pass").body[0]
    assert isinstance(tree, ast.FunctionDef)
    args = tree.args
    out: list[inspect.Parameter] = []
    positional = args.args
    defaults: list[Any] = [inspect.Parameter.empty] * (len(positional) - len(args.defaults))
    defaults += [ast.literal_eval(node) for node in args.defaults]
    for arg, default in zip(positional, defaults):
        out.append(
            inspect.Parameter(arg.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default)
        )
    for arg, node in zip(args.kwonlyargs, args.kw_defaults):
        default = inspect.Parameter.empty if node is None else ast.literal_eval(node)
        out.append(inspect.Parameter(arg.arg, inspect.Parameter.KEYWORD_ONLY, default=default))
    if args.kwarg is not None:
        out.append(inspect.Parameter(args.kwarg.arg, inspect.Parameter.VAR_KEYWORD))
    return out


def same_signature_cases() -> list[tuple[str, str, str]]:
    cases = []
    hermes = hermes_names()
    statuses = {
        "module": page_rows(SECTIONS["module"]),
        "SessionDB": page_rows(SECTIONS["SessionDB"]),
    }
    for owner, names in hermes.items():
        for name, params in names.items():
            if params is None:
                continue
            if name.startswith("__") or statuses[owner].get(name) == "same":
                cases.append((owner, name, params))
    return cases


@pytest.mark.parametrize(("owner", "name", "params"), same_signature_cases())
def test_same_names_take_hermes_arguments(owner: str, name: str, params: str) -> None:
    """Every call Hermes accepts is accepted: positions, keywords and defaults."""
    target = getattr(hermes_models, name) if owner == "module" else getattr(SessionDB, name)
    ours = [
        p
        for p in inspect.signature(target).parameters.values()
        if not (owner == "SessionDB" and p.name == "self")
    ]
    by_name = {p.name: p for p in ours}
    positional = [p for p in ours if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for index, theirs in enumerate(hermes_parameters(params)):
        if theirs.kind is theirs.VAR_KEYWORD:
            assert any(p.kind is p.VAR_KEYWORD for p in ours), f"{name}: no **{theirs.name}"
            continue
        if theirs.kind is theirs.POSITIONAL_OR_KEYWORD:
            assert index < len(positional), f"{name}: too few positional parameters"
            mine = positional[index]
            if theirs.default is not theirs.empty:
                assert mine.name == theirs.name, f"{name}: position {index} is {mine.name}"
        else:
            assert theirs.name in by_name, f"{name}: no keyword {theirs.name}"
            mine = by_name[theirs.name]
            assert mine.kind in (mine.KEYWORD_ONLY, mine.POSITIONAL_OR_KEYWORD)
        if theirs.default is not theirs.empty:
            assert mine.default == theirs.default, f"{name}({theirs.name}=) default"
    required = [
        p.name
        for p in ours
        if p.default is p.empty and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    ]
    assert len(required) <= len([p for p in hermes_parameters(params) if p.default is p.empty])


def test_the_names_list_has_no_late_v16_additions() -> None:
    late = {
        "update_session_billing_route",
        "backfill_repo_roots",
        "distinct_session_cwds",
        "has_platform_message_id",
        "delete_telegram_topic_binding",
        "archive_and_compact",
    }
    assert late.isdisjoint(hermes_names()["SessionDB"])
