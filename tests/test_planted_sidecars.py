"""Sidecars another user planted where SQLite will look for them: refused before SQLite opens
anything, whoever opens the store, by whatever name.

The victim runs as root and as an ordinary user (a uid of its own, made with ``setuid``:
it needs no entry in the password file), the attacker as ``nobody``. The attacker plants
the ``-wal`` and ``-shm`` the store's real file will use and keeps them open: a ``-wal``
that holds a whole forged store (its pages written by a ``VACUUM`` in WAL mode) and an
empty ``-shm``, or, for the hard links, names of files of the victim's that the attacker
may write. SQLite running as root takes such a file over at its first open (it gives it
the database's owner and mode), so a check after any SQLite open, even a read-only
probe, sees the victim's own file while the attacker goes on reading it through the
descriptor it holds.

Every test needs root (CI runs as root) to act as the other users; they never skip.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sqlite3
import struct
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from console_script import environment

from hermes_models import SessionDB
from hermes_models.store import schema

NOBODY = 65534
#: The ordinary user the victim is in half the tests: a uid the system has no name for.
USER = 64123
VICTIMS = {"root": 0, "user": USER}
ROUTES = ("direct", "link to the file", "link to a folder on the way", "hard links")

pytestmark = [
    pytest.mark.slow,  # each test runs a dozen processes as three users
    pytest.mark.plaintext_file,  # the attacker reads the sidecars' bytes
]


def _name(uid: int) -> str:
    return "root (uid 0)" if uid == 0 else f"uid {uid}"


#: What every victim's child runs first: the package, its command line and what they
#: load on the way (its job run once as root, on a store of its own: see _as_victim).
_VICTIM = """
import json, os, sys
from hermes_models import SessionDB
from hermes_models.store import schema
import hermes_models.cli
schema.load_migrations(schema.migrations_folder())  # yoyo, and what it loads
# Every open lists the migrations; the ordinary user may not read this installation (on
# CI it lies in a folder only root may enter), so they are read from root's copy beside
# the rehearsal stores, which anyone may read.
_copy = os.path.join(os.path.dirname(sys.argv[1]), "migrations")
schema.migrations_folder = lambda: _copy

def script(*args):
    # hermes-models ARGS, as the console script runs it, its output a pipe.
    out, err = os.pipe(), os.pipe()
    pid = os.fork()
    if pid == 0:
        os.dup2(out[1], 1); os.dup2(err[1], 2)
        sys.argv = ["hermes-models", *args]
        try:
            hermes_models.cli.run()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        sys.stdout.flush(); sys.stderr.flush()
        os._exit(code)
    os.close(out[1]); os.close(err[1])
    texts = [os.fdopen(fd, encoding="utf-8").read() for fd in (out[0], err[0])]
    return [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), *texts]

def tried(call):
    try:
        return call()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
"""


def _as_victim(uid: int, job: str, path: Path, rehearsal: Path) -> Any:
    """``job`` (Python code that sets ``found`` from ``path``) run by ``uid``; ``found``.

    The child starts as root: an ordinary user may not read the interpreter here (it
    lives under /root), so the job runs once as root on ``rehearsal`` (a store of
    root's, in the same state) to load every module it needs, and then, as ``uid``
    (root drops its groups, group and user), on ``path``."""
    assert os.geteuid() == 0, "these tests need root (CI runs as root) to act as other users"
    code = (
        _VICTIM
        + "def job(path):\n    found = None\n"
        + textwrap.indent(textwrap.dedent(job), "    ")
        + "\n    return found\n"
        + "job(sys.argv[1])\n"
        + "if int(sys.argv[3]):\n"
        + "    os.setgroups([]); os.setgid(int(sys.argv[3])); os.setuid(int(sys.argv[3]))\n"
        + "print(json.dumps(job(sys.argv[2])))\n"
    )
    child = subprocess.run(
        [sys.executable, "-c", code, str(rehearsal), str(path), str(uid)],
        capture_output=True,
        text=True,
        timeout=120,
        # LOGNAME: yoyo records who migrated (getpass), and the uid has no name.
        env={**environment(rehearsal.parent), "PYTHONDONTWRITEBYTECODE": "1", "LOGNAME": "victim"},
        cwd="/",
        check=False,
    )
    assert child.returncode == 0, child.stderr
    return json.loads(child.stdout.strip().splitlines()[-1])


def _attacker() -> subprocess.Popen[str]:
    """The attacker, ``nobody``: it plants what it reads from its standard input."""
    return subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _ATTACKER.format(nobody=NOBODY)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture(scope="module")
def forged_wal() -> bytes:
    """A ``-wal`` holding every page of a store with one session, ``forged``."""
    folder = Path(tempfile.mkdtemp(prefix="hermes-models-forged-"))
    try:
        path = folder / "forged.db"
        with SessionDB(path) as store:
            store.create_session("forged", "cli")
            store.append_message("forged", "user", "written by another user")
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.execute("PRAGMA wal_autocheckpoint = 0")
            conn.execute("VACUUM")  # every page, into the -wal
            return Path(f"{path}-wal").read_bytes()
        finally:
            conn.close()
    finally:
        shutil.rmtree(folder)


def _hot_journal(store: bytes, page_size: int = 4096) -> bytes:
    """A rollback journal that SQLite takes for one a writer left behind in the middle of
    a transaction (a hot one): rolled back, it writes every page of ``store`` over the
    database it lies beside (the journal format: sqlite.org/fileformat.html)."""
    pages = len(store) // page_size
    nonce = 0x5EED
    header = bytes.fromhex("d9d505f920a163d7") + struct.pack(
        ">IIIII", pages, nonce, pages, 512, page_size
    )
    records = []
    for number in range(pages):
        data = store[number * page_size : (number + 1) * page_size]
        checksum = nonce + sum(data[i] for i in range(page_size - 200, 0, -200))
        records.append(
            struct.pack(">I", number + 1) + data + struct.pack(">I", checksum & 0xFFFFFFFF)
        )
    return header.ljust(512, b"\0") + b"".join(records)


@pytest.fixture(scope="module")
def forged_journal() -> bytes:
    """A hot ``-journal`` holding every page of a store with one session, ``forged``."""
    folder = Path(tempfile.mkdtemp(prefix="hermes-models-forged-"))
    try:
        path = folder / "forged.db"
        with SessionDB(path) as store:
            store.create_session("forged", "cli")
        return _hot_journal(path.read_bytes())
    finally:
        shutil.rmtree(folder)


class Scene:
    """Folders for one attack: the victim's private home, and a folder others can write."""

    def __init__(self, victim: int) -> None:
        self.victim = victim
        self.top = Path(tempfile.mkdtemp(prefix="hermes-models-attack-"))
        os.chmod(self.top, 0o755)
        self.home = self.top / "home"
        self.home.mkdir(mode=0o700)
        self.shared = self.top / "shared"
        self.shared.mkdir()
        os.chmod(self.shared, 0o1777)  # like /tmp
        os.chown(self.home, victim, victim)

    def route(self, route: str) -> tuple[Path, Path]:
        """The name the victim opens the store by, and the store's real file."""
        if route == "link to the file":
            real = self.shared / "state.db"
            (self.home / "state.db").symlink_to(real)
            return self.home / "state.db", real
        if route == "link to a folder on the way":
            folder = self.shared / "hermes"
            folder.mkdir()
            os.chmod(folder, 0o777)  # the victim's own folder, but others may write in it
            os.chown(folder, self.victim, self.victim)
            (self.home / "hermes").symlink_to(folder)
            return self.home / "hermes" / "state.db", folder / "state.db"
        real = self.shared / "state.db"
        return real, real

    def close(self) -> None:
        shutil.rmtree(self.top)


@pytest.fixture(params=list(VICTIMS))
def scene(request: pytest.FixtureRequest) -> Iterator[Scene]:
    made = Scene(VICTIMS[request.param])
    try:
        yield made
    finally:
        made.close()


_ATTACKER = """
import json, os, sys
os.setgroups([]); os.setgid({nobody}); os.setuid({nobody}); os.umask(0)
plan = json.loads(sys.stdin.readline())
fds = {{}}
for path, data in plan["plant"].items():
    fds[path] = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o666)
    os.write(fds[path], bytes.fromhex(data))
for path, target in plan["link"].items():
    os.link(target, path)
    fds[path] = os.open(path, os.O_RDWR)
print("planted", flush=True)
sys.stdin.readline()
held = {{path: os.pread(fd, 1 << 24, 0).hex() for path, fd in fds.items()}}
print(json.dumps(held), flush=True)
"""

_MAKE_STORE = """
with SessionDB(path) as store:
    store.create_session("s1", "cli")
    store.append_message("s1", "user", "SECRET-1")
"""

#: What the victim does: writes and reads with the library, lists and searches with the
#: console script.
_OPEN = """
def write():
    with SessionDB(path) as store:
        store.append_message("s1", "user", "SECRET-2")
        return [s["id"] for s in store.list_sessions_rich()]

def read():
    with SessionDB(path, read_only=True) as store:
        return [s["id"] for s in store.list_sessions_rich()]

found = {
    "write": tried(write),
    "read": tried(read),
    "sessions": script("sessions", "--db", path),
    "search": script("search", "SECRET", "--db", path),
}
"""

_HOLDS = """
with SessionDB(path, read_only=True) as store:
    found = {
        "sessions": [s["id"] for s in store.list_sessions_rich()],
        "messages": [m["content"] for m in store.get_messages("s1")],
    }
"""


@pytest.fixture(scope="module")
def rehearsal() -> Iterator[Path]:
    """Root's stores the victims' jobs run on first: ``plain.db``, and ``planted.db``
    with a ``-wal`` that ``nobody`` owns."""
    folder = Path(tempfile.mkdtemp(prefix="hermes-models-rehearsal-"))
    try:
        # The migrations, for the victims' jobs (see _VICTIM): the folder may be entered
        # by anyone, not listed; its stores stay root's own (0600).
        os.chmod(folder, 0o711)
        copy = Path(shutil.copytree(schema.migrations_folder(), folder / "migrations"))
        for name in [copy, *copy.rglob("*")]:
            os.chmod(name, 0o755 if name.is_dir() else 0o644)
        for name in ("plain.db", "planted.db"):
            with SessionDB(folder / name) as store:
                store.create_session("s1", "cli")
        wal = folder / "planted.db-wal"
        wal.write_bytes(b"")
        os.chown(wal, NOBODY, NOBODY)
        yield folder
    finally:
        shutil.rmtree(folder)


@pytest.mark.parametrize(
    ("route", "planted"),
    [(route, "-wal and -shm") for route in ROUTES]
    + [("direct", "-journal"), ("link to a folder on the way", "-journal")],
)
def test_planted_sidecars_let_no_other_user_read_or_write_the_store(
    scene: Scene,
    route: str,
    planted: str,
    forged_wal: bytes,
    forged_journal: bytes,
    rehearsal: Path,
) -> None:
    opened, real = scene.route(route)
    made = rehearsal / f"made-{secrets.token_hex(4)}.db"  # a new store, as the victim's
    _as_victim(scene.victim, _MAKE_STORE, real, made)
    wal, shm = Path(f"{real}-wal"), Path(f"{real}-shm")
    refused = wal
    plan: dict[str, dict[str, str]] = {"plant": {}, "link": {}}
    if route == "hard links":
        # Files of the victim's that the attacker may write (notes, a log): as names of
        # them, the sidecars pass every check of owner and kind.
        for name in ("notes.txt", "log.txt"):
            victims = scene.shared / name
            victims.write_text("the victim's own file\n")
            os.chown(victims, scene.victim, scene.victim)
            os.chmod(victims, 0o666)
        plan["link"] = {str(wal): str(scene.shared / "notes.txt")}
        plan["link"][str(shm)] = str(scene.shared / "log.txt")
    elif planted == "-journal":
        refused = Path(f"{real}-journal")
        plan["plant"] = {str(refused): forged_journal.hex()}
    else:
        plan["plant"] = {str(wal): forged_wal.hex(), str(shm): ""}
    put = {path: bytes.fromhex(data) for path, data in plan["plant"].items()}
    put.update({path: b"the victim's own file\n" for path in plan["link"]})
    attacker = _attacker()
    assert attacker.stdin is not None and attacker.stdout is not None
    attacker.stdin.write(json.dumps(plan) + "\n")
    attacker.stdin.flush()
    assert attacker.stdout.readline() == "planted\n"
    try:
        found = _as_victim(scene.victim, _OPEN, opened, rehearsal / "planted.db")
    finally:
        attacker.stdin.write("\n")
        attacker.stdin.flush()
        out, err = attacker.communicate(timeout=60)
    assert attacker.returncode == 0, err
    held = {path: bytes.fromhex(data) for path, data in json.loads(out).items()}

    if route == "hard links":
        why = "has 2 names (hard links), so SQLite would write into another file too"
    else:
        why = (
            f"is owned by another user, nobody (uid {NOBODY}), not by the store's owner,"
            f" {_name(scene.victim)}"
        )
    refusal = (
        f"{refused} {why}; refusing to use it (anyone who can change it could read or alter the"
        " store). It is not a file SQLite made for this store: have its owner (or root)"
        " remove it, then open the store again"
    )
    assert found == {
        "write": f"UnsafeFileError: {refusal}",
        "read": f"UnsafeFileError: {refusal}",
        "sessions": [1, "", f"Error: {refusal}\n"],
        "search": [1, "", f"Error: {refusal}\n"],
    }
    # The attacker read 0 bytes of the victim's: its files hold what it put there.
    assert held == put
    # ...and wrote 0 rows: once its files are gone, the store is the victim's alone.
    for path in put:
        os.unlink(path)
    assert _as_victim(scene.victim, _HOLDS, opened, rehearsal / "plain.db") == {
        "sessions": ["s1"],
        "messages": ["SECRET-1"],
    }
