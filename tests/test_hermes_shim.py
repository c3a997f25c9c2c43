"""Hermes' own processes on this package (docs/hermes.md): the shim, run as a user runs it.

Each test builds a Python environment the way a Hermes user has one: a venv
whose site-packages hold Hermes v16's release (hermes-agent 0.17.0, installed
from the package index by ``hermes_release``) and this package. The shim is
installed with ``python -m hermes_models.hermes_shim install`` run by that
venv's Python, and Hermes' released code runs there (``hermes_programs.py``):
its gateway's session store, its ``hermes sessions`` commands, its
``session_search`` tool. Each program runs twice on copies of one store made
by Hermes' own ``SessionDB``: with the shim, and with Hermes' own module
(``HERMES_MODELS_SHIM=off``); the answers must be the same, and only the first
store carries this package's migrations.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3 as stdlib_sqlite3
import subprocess
import sys
import sysconfig
from pathlib import Path

import hermes_release
import pytest
from console_script import run
from hermes_release import HermesProcess

from hermes_models import SessionDB, hermes_shim
from hermes_models.driver import has_wal_reset_bug, sqlite3
from hermes_models.hermes_shim import FILE_NAME, pth_text

pytestmark = pytest.mark.slow  # builds Python environments and runs Hermes' code in them

PROGRAMS = Path(__file__).with_name("hermes_programs.py")
#: Where this package and its requirements are installed for the running tests.
OURS = sysconfig.get_path("purelib")


class Environment:
    """A venv holding Hermes' release ``release`` (None: no Hermes) and this package."""

    def __init__(self, root: Path, release: str | None = "v16") -> None:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
        self.root = root
        self.python = root / "bin" / "python"
        self.site = Path(self.python_says("import sysconfig; print(sysconfig.get_path('purelib'))"))
        self.use(release)
        # This package as `pip install hermes_models` puts it beside Hermes.
        (self.site / "zz-hermes-models.pth").write_text(f"import site; site.addsitedir({OURS!r})\n")

    def use(self, release: str | None) -> None:
        """Install Hermes' release ``release`` here (None: remove Hermes)."""
        listing = self.site / "hermes-agent.pth"
        if release is None:
            listing.unlink(missing_ok=True)
        else:
            listing.write_text("".join(f"{p}\n" for p in hermes_release.install(release)))

    def env(self, home: Path, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "HERMES"))}
        env.update(HERMES_HOME=str(home), TZ="UTC", PYTHONDONTWRITEBYTECODE="1", **extra)
        return env

    def run(self, *args: str, home: Path, **extra: str) -> subprocess.CompletedProcess[str]:
        home.mkdir(parents=True, exist_ok=True)
        return subprocess.run(
            [str(self.python), *args],
            cwd=home,
            env=self.env(home, **extra),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    def python_says(self, code: str) -> str:
        done = subprocess.run(
            [str(self.python), "-c", code], capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    def shim(self, *args: str, home: Path) -> subprocess.CompletedProcess[str]:
        """``python -m hermes_models.hermes_shim ARGS`` with this venv's Python."""
        return self.run("-m", "hermes_models.hermes_shim", *args, home=home)

    def programs(self, home: Path, *names: str, shim: bool = True) -> dict[str, object]:
        """Hermes' programs ``names`` on ``home``'s store: their answers."""
        extra = {} if shim else {"HERMES_MODELS_SHIM": "off"}
        done = self.run(str(PROGRAMS), *names, home=home, **extra)
        assert done.returncode == 0, done.stderr[-3000:]
        answers: dict[str, object] = json.loads(done.stdout)
        return answers


@pytest.fixture(scope="module")
def hermes_env(tmp_path_factory: pytest.TempPathFactory) -> Environment:
    """One venv with Hermes v16 and this package, the shim installed."""
    env = Environment(tmp_path_factory.mktemp("hermes-env") / "venv")
    done = env.shim("install", home=env.root.parent / "home")
    assert done.returncode == 0, done.stderr
    return env


def hermes_store(path: Path) -> None:
    """A store written by Hermes v16's own SessionDB: three chats, one compressed."""
    with HermesProcess("v16", path) as hermes:
        hermes.call("create_session", "s1", "cli", model="m1")
        hermes.call("append_message", "s1", "user", "why does the asyncio event loop block?")
        hermes.call("append_message", "s1", "assistant", "a blocking call inside a coroutine")
        hermes.call("create_session", "s2", "telegram", user_id="u1")
        hermes.call("append_message", "s2", "user", "数据库 migration plan")
        hermes.call("append_message", "s2", "assistant", "deploy first, then rollback if needed")
        hermes.call("append_message", "s2", "user", "and the event loop?")
        hermes.call("set_session_title", "s2", "db plan")
        hermes.call("end_session", "s2", "compression")
        hermes.call("create_session", "s2b", "telegram", parent_session_id="s2")
        hermes.call("append_message", "s2b", "assistant", "continued after compression")
        hermes.call("create_session", "s3", "cli")
        hermes.call("append_message", "s3", "user", "a chat to delete")


def copies(tmp_path: Path, *names: str) -> list[Path]:
    """Homes ``names`` under ``tmp_path``, each holding a copy of one Hermes-made store."""
    original = tmp_path / "original" / "state.db"
    original.parent.mkdir()
    hermes_store(original)
    homes = []
    for name in names:
        home = tmp_path / name
        home.mkdir()
        shutil.copy(original, home / "state.db")
        homes.append(home)
    return homes


def tables(path: Path) -> set[str]:
    # closing(): a connection's own with-block commits but does not close it (Python
    # 3.13 warns of the open one when it is collected, failing whichever test runs then).
    with contextlib.closing(stdlib_sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}


def adopted(path: Path) -> bool:
    """Whether this package's migrations ran on ``path``."""
    return "_yoyo_migration" in tables(path)


# -- the command ---------------------------------------------------------------------------


def test_the_command_installs_reports_and_removes_the_pth_file(tmp_path: Path) -> None:
    env = Environment(tmp_path / "venv")
    home = tmp_path / "home"
    hermes = hermes_release.install("v16")[0] / "hermes_state.py"
    pth = env.site / FILE_NAME

    status = env.shim(home=home)
    assert (status.returncode, status.stdout) == (
        0,
        f"Hermes: {hermes} (schema 16, served)\nshim: not installed\n",
    )
    done = env.shim("install", home=home)
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        f"installed {pth}: Hermes here imports hermes_models.hermes_state\n",
        "",
    )
    assert pth.read_text() == pth_text()
    assert env.shim(home=home).stdout == (
        f"Hermes: {hermes} (schema 16, served)\nshim: installed ({pth})\n"
    )
    probe = "import hermes_state; print(hermes_state.__name__, hermes_state.SessionDB.__module__)"
    assert env.run("-c", probe, home=home).stdout == (
        "hermes_models.hermes_state hermes_models.sessiondb\n"
    )
    # The hook leaves sys.path as it was, and a start loads nothing of the package.
    hook = Path(hermes_shim.__file__).parent / "hook"
    assert env.python_says(f"import sys; print({str(hook)!r} in sys.path)") == "False"
    assert env.python_says("import sys; print('hermes_models' in sys.modules)") == "False"

    removed = env.shim("remove", home=home)
    assert (removed.returncode, removed.stdout) == (
        0,
        f"removed {pth}: Hermes here imports its own hermes_state\n",
    )
    assert not pth.exists()
    assert env.run("-c", probe, home=home).stdout == "hermes_state hermes_state\n"
    again = env.shim("remove", home=home)
    assert (again.returncode, again.stdout) == (0, f"not installed (no {pth}): nothing to remove\n")


def test_a_folder_on_pythonpath_does_not_reach_hermes_cli(tmp_path: Path) -> None:
    """Why the shim is a finder: Hermes' CLI (like its gateway and cron) puts its own
    folder first on sys.path as it starts, ahead of PYTHONPATH."""
    env = Environment(tmp_path / "venv")
    folder = tmp_path / "shadow"
    folder.mkdir()
    (folder / "hermes_state.py").write_text(
        "import hermes_models.hermes_state as m, sys\nsys.modules[__name__] = m\n"
    )
    probe = "import {}; import hermes_state; print(hermes_state.__name__)"
    bare = env.run("-c", probe.format("sys"), home=tmp_path / "home", PYTHONPATH=str(folder))
    assert bare.stdout == "hermes_models.hermes_state\n"
    cli = env.run(
        "-c", probe.format("hermes_cli.main"), home=tmp_path / "home", PYTHONPATH=str(folder)
    )
    assert (cli.returncode, cli.stdout) == (0, "hermes_state\n"), cli.stderr


def test_install_refuses_a_python_without_hermes_and_a_hermes_past_v16(tmp_path: Path) -> None:
    env = Environment(tmp_path / "venv", release=None)
    home = tmp_path / "home"
    done = env.shim("install", home=home)
    assert (done.returncode, done.stdout, done.stderr) == (
        1,
        "",
        "Error: no Hermes in this Python environment (no hermes_state module on its path): "
        "run this with the Python that runs hermes\n",
    )
    env.use("v17")
    later = hermes_release.install("v17")[0] / "hermes_state.py"
    done = env.shim("install", home=home)
    assert (done.returncode, done.stderr) == (
        1,
        f"Error: {later} is Hermes' store module of schema 17; the shim serves Hermes of "
        "schema 16 (hermes-agent 0.17) only: later releases import names hermes_models does "
        "not have, and write stores it only reads\n",
    )
    assert not (env.site / FILE_NAME).exists()


def test_a_hermes_updated_past_v16_after_the_install_keeps_its_own_module(tmp_path: Path) -> None:
    env = Environment(tmp_path / "venv")
    home = tmp_path / "home"
    assert env.shim("install", home=home).returncode == 0
    env.use("v17")  # `hermes update`, the shim left in place
    later = hermes_release.install("v17")[0] / "hermes_state.py"
    done = env.run("-c", "import hermes_state; print(hermes_state.SCHEMA_VERSION)", home=home)
    assert (done.returncode, done.stdout) == (0, "17\n")
    assert done.stderr == (
        f"{later} is Hermes' store module of schema 17, not 16: Hermes keeps its own "
        "hermes_state (`python -m hermes_models.hermes_shim remove` removes the shim)\n"
    )


def test_a_store_a_later_hermes_wrote_keeps_hermes_on_its_own_module(
    hermes_env: Environment, tmp_path: Path
) -> None:
    """This package only reads such a file, and the gateway drops a refused write with a
    debug line: the shim steps aside, and Hermes v16 does as it does without it."""
    homes = [tmp_path / "ours", tmp_path / "theirs"]
    newer_file = tmp_path / "v31.db"
    with HermesProcess("v31", newer_file) as hermes:
        hermes.call("create_session", "s1", "cli")
        hermes.call("append_message", "s1", "user", "written by Hermes v31")
    for home in homes:
        home.mkdir()
        shutil.copy(newer_file, home / "state.db")
    done = hermes_env.run(str(PROGRAMS), "gateway", home=homes[0])
    assert done.returncode == 0, done.stderr
    with_shim = json.loads(done.stdout)
    without = hermes_env.programs(homes[1], "gateway", shim=False)
    assert (with_shim["module"], without["module"]) == ("hermes_state", "hermes_state")
    assert with_shim["gateway"] == without["gateway"]
    assert [m["content"] for m in with_shim["gateway"]["fresh"]] == ["a fresh start"]
    assert done.stderr == (
        f"{homes[0] / 'state.db'} has Hermes schema version 31, newer than 16, which "
        "hermes_models only reads: Hermes keeps its own hermes_state\n"
    )


# -- Hermes' programs ------------------------------------------------------------------------


def test_hermes_programs_run_on_this_package_and_answer_as_on_their_own(
    hermes_env: Environment, tmp_path: Path
) -> None:
    ours, theirs = copies(tmp_path, "ours", "theirs")
    names = ("gateway", "cli", "search")
    with_shim = hermes_env.programs(ours, *names)
    without = hermes_env.programs(theirs, *names, shim=False)

    assert (with_shim["module"], without["module"]) == (
        "hermes_models.hermes_state",
        "hermes_state",
    )
    for name in names:
        assert with_shim[name] == without[name], name
    assert adopted(ours / "state.db") and not adopted(theirs / "state.db")

    # The answers are right, not only alike.
    gateway = with_shim["gateway"]
    assert [(m["role"], m["content"]) for m in gateway["after"]] == [
        ("user", "deploy the asyncio service to staging"),
        ("assistant", "deployed; the 数据库 migration ran"),
    ]
    assert gateway["undone"]["rewound_count"] == 2
    assert gateway["first"]["end_reason"] == "session_reset"
    assert [m["content"] for m in gateway["fresh"]] == ["a fresh start"]
    cli = with_shim["cli"]
    # Four sessions of Hermes' and two of the gateway's; rewound rows stay, inactive.
    assert cli[1] == [
        0,
        "Total sessions: 6\nTotal messages: 12\n  cli: 2 sessions\n  telegram: 4 sessions",
    ]
    assert cli[2] == [0, "Session 's1' renamed to: asyncio notes"]
    assert json.loads(cli[3][1])["title"] == "asyncio notes"
    assert cli[5] == [0, "Deleted session 's3'."]
    assert "s3" not in cli[6][1] and "asyncio notes" in cli[6][1]
    assert cli[7] == [0, "✓ $HERMES_HOME/state.db opens cleanly — no repair needed."]
    search = with_shim["search"]
    assert search["requirements"] is True
    assert [hit["session_id"] for hit in search["数据库"]["results"]] == ["s2", "gateway-1"]
    assert search["read"]["message_count"] == 2
    with SessionDB(ours / "state.db", read_only=True) as store:
        assert [m["content"] for m in store.get_messages("s1")] == [
            "why does the asyncio event loop block?",
            "a blocking call inside a coroutine",
        ]
        assert store.get_session("s3") is None


def test_hermes_sessions_repair_repairs_a_malformed_store_with_this_package(
    hermes_env: Environment, tmp_path: Path
) -> None:
    ours, theirs = copies(tmp_path, "ours", "theirs")
    for home in (ours, theirs):
        conn = stdlib_sqlite3.connect(home / "state.db", isolation_level=None)
        conn.execute("PRAGMA writable_schema=ON")
        conn.execute(
            "INSERT INTO sqlite_master (type, name, tbl_name, rootpage, sql) SELECT type, name,"
            " tbl_name, rootpage, sql FROM sqlite_master WHERE name = 'messages_fts_insert'"
        )
        conn.execute("PRAGMA writable_schema=OFF")
        conn.close()
    with_shim = hermes_env.programs(ours, "repair")
    without = hermes_env.programs(theirs, "repair", shim=False)

    assert (with_shim["module"], without["module"]) == (
        "hermes_models.hermes_state",
        "hermes_state",
    )
    assert with_shim["repair"] == without["repair"]
    status, text = with_shim["repair"][0]
    assert (status, text.splitlines()) == (
        0,
        [
            "✗ $HERMES_HOME/state.db does not open cleanly: malformed database schema"
            " (messages_fts_insert) - trigger messages_fts_insert already exists",
            "Repairing (a backup copy is made first)…",
            "  backup: $HERMES_HOME/state.db.malformed-backup-<stamp>",
            "  strategy: dedup_schema",
            "✓ Repaired — 4 sessions recovered.",
        ],
    )
    assert adopted(ours / "state.db") and not adopted(theirs / "state.db")


def test_hermes_kanban_board_opens_through_this_package_journal_policy(
    hermes_env: Environment, tmp_path: Path
) -> None:
    with_shim = hermes_env.programs(tmp_path / "ours", "kanban")["kanban"]
    without = hermes_env.programs(tmp_path / "theirs", "kanban", shim=False)["kanban"]
    version = tuple(int(p) for p in with_shim["sqlite_version"].split("."))
    # Hermes puts a new board in WAL on any SQLite; this package keeps it out of WAL
    # where the SQLite running it has the WAL-reset bug (Hermes runs the standard library's).
    assert without["journal_mode"] == "wal"
    assert with_shim["journal_mode"] == ("delete" if has_wal_reset_bug(version) else "wal")


# -- going back ------------------------------------------------------------------------------


def test_after_the_shim_is_removed_hermes_v16_goes_on_with_the_adopted_store(
    tmp_path: Path,
) -> None:
    env = Environment(tmp_path / "venv")
    [home] = copies(tmp_path, "home")
    path = home / "state.db"
    assert env.shim("install", home=home).returncode == 0
    first = env.programs(home, "gateway", "cli")
    assert first["module"] == "hermes_models.hermes_state"
    vacuumed = run("vacuum", "--db", str(path), cwd=tmp_path)
    assert vacuumed.returncode == 0, vacuumed.stderr
    assert adopted(path)

    assert env.shim("remove", home=home).returncode == 0
    second = env.programs(home, "gateway", "cli")
    assert second["module"] == "hermes_state"
    # Hermes' own code goes on with the chat it wrote through this package.
    chat = [m["content"] for m in first["gateway"]["before"]]
    assert [m["content"] for m in second["gateway"]["before"]] == ["a fresh start", *chat]
    assert second["cli"][1] == [
        0,
        "Total sessions: 6\nTotal messages: 16\n  cli: 1 sessions\n  telegram: 5 sessions",
    ]
    with HermesProcess("v16", path) as hermes:
        assert hermes.schema_version == 16
        hermes.call("append_message", "s1", "user", "written by Hermes after going back 回去")
        hits = hermes.call("search_messages", "回去")
        assert [hit["session_id"] for hit in hits] == ["s1"]
    with SessionDB(path, read_only=True) as store:
        assert store.get_messages("s1")[-1]["content"] == "written by Hermes after going back 回去"
        assert [hit["session_id"] for hit in store.search_messages("回去")] == ["s1"]
    doctor = run("doctor", "--db", str(path), cwd=tmp_path)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
