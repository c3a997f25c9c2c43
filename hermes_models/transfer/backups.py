"""Online backups: a consistent copy of a live store, checked before it is kept.

The copy is made with SQLite's backup API from one read transaction on the
source, so it is the store as it was at one instant, whatever writers do
meanwhile. In WAL mode a reader never blocks a writer: other processes keep
appending while the pages are copied, and nobody waits on the backup (the
WAL grows instead, and the next checkpoint trims it). On a file in DELETE
mode (network file systems) writers wait while the copy holds its read lock.

The copy is written to a hidden temporary file next to its destination
(mode 0600 from its creation), switched to ``journal_mode=DELETE`` so it is
one self-contained file, checked with ``PRAGMA integrity_check`` and each
search index's FTS5 ``integrity-check``, flushed to disk, and only then
given its name. A failed check leaves nothing behind. Given a folder, the
copy is named after the source and the UTC time (``state-20260105T090000Z.db``)
and listed, with the store it is a copy of, in the folder's manifest
(:data:`MANIFEST`); ``keep`` removes the oldest copies of that store beyond the
newest ``keep``, never a copy of another store of the same name (two Hermes
profiles, each a ``state.db``) nor a file the manifest does not list.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import stat
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from ..checks import check_int64, expand_user
from ..driver import sqlite3
from ..errors import BackupError
from ..store import (
    check_file_kind,
    check_header,
    check_index,
    is_postgres_url,
    open_file,
    opened_key,
    read_only_params,
    refuse_planted,
    resolve_file,
    resolve_path,
    split_integrity,
    sqlite_sql,
    sqlite_uri,
)
from .output import failure_naming

logger = logging.getLogger("hermes_models")

#: ``progress(done, total)`` with page counts, called after each step of the copy.
Progress = Callable[[int, int], None]

#: Pages copied per step (4 MiB with 4 KiB pages): how often ``progress`` is called.
STEP_PAGES = 1024


def _stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def rotation_pattern(stem: str) -> re.Pattern[str]:
    """File names :func:`backup` gives copies of a source named ``stem`` in a folder."""
    return re.compile(rf"{re.escape(stem)}-(\d{{8}}T\d{{6}}Z)(?:-(\d+))?\.db")


def _folder(path: Path) -> None:
    """Create ``path`` and its missing parents, each readable by its owner only."""
    missing = [folder for folder in (path, *path.parents) if not folder.exists()]
    for folder in reversed(missing):
        folder.mkdir(mode=0o700, exist_ok=True)


def _target(source: Path, dest: Path, into_folder: bool) -> Path:
    """The file name of the copy."""
    if not into_folder:
        if dest.exists() or dest.is_symlink():
            raise FileExistsError(f"{dest} already exists (name a new file, or a folder)")
        return dest
    stamp = _stamp()
    pattern = rotation_pattern(source.stem)
    # A later copy made in the same second gets a higher number, never a freed one.
    taken = [
        int(match.group(2) or 1)
        for match in (pattern.fullmatch(entry.name) for entry in dest.iterdir())
        if match is not None and match.group(1) == stamp
    ]
    number = max(taken, default=0) + 1
    suffix = "" if number == 1 else f"-{number}"
    return dest / f"{source.stem}-{stamp}{suffix}.db"


def _create_private(path: Path) -> int:
    """Create ``path`` (mode 0600) and hold a lock on it while the backup lives: an
    open descriptor, returned, with an exclusive ``flock`` (SQLite's own locks are
    POSIX locks, which do not meet it). A process that dies, ``kill -9`` included,
    lets go of it, which is how :func:`_remove_leftovers` tells its file from the
    temporary file of a backup still running."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o600)
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


#: A backup's temporary file: ``.<name of the copy>.<8 hex digits>.tmp`` (and its
#: ``-journal``).
_TEMPORARY = re.compile(r"\.(?P<name>.+)\.[0-9a-f]{8}\.tmp(?P<journal>-journal)?")


def _remove_leftovers(folder: Path, stem: str, target: Path) -> list[str]:
    """Remove the temporary files killed backups left in ``folder``: those of copies
    of a source named ``stem`` (or of ``target``), regular files of this user that no
    running backup holds (see :func:`_create_private`). A killed backup of a large
    store left a full-size copy per kill, each still holding what was erased since."""
    if fcntl is None:  # no flock: a running backup cannot be told from a dead one
        return []
    pattern = rotation_pattern(stem)
    removed: list[str] = []
    for entry in sorted(folder.iterdir()):
        match = _TEMPORARY.fullmatch(entry.name)
        if match is None or not (
            pattern.fullmatch(match.group("name")) or match.group("name") == target.name
        ):
            continue
        base = Path(str(entry).removesuffix("-journal"))
        try:
            info = entry.lstat()
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
                continue
            fd = os.open(base, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            fd = None  # a journal whose copy is gone already
        except OSError:
            continue
        try:
            if fd is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a backup running now
            entry.unlink(missing_ok=True)
            removed.append(str(entry))
        finally:
            if fd is not None:
                os.close(fd)
    if removed:
        logger.info("removed %d file(s) of killed backups: %s", len(removed), ", ".join(removed))
    return removed


def _fts_tables(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """The search indexes of ``conn``'s file: name and the SQL that created each."""
    rows = conn.execute(sqlite_sql.FTS5_TABLES_WITH_SQL).fetchall()
    return [(str(row[0]), str(row[1])) for row in rows]


def verify(path: Path, label: str | None = None, *, key: str | None = None) -> None:
    """Run ``PRAGMA integrity_check`` and each FTS5 ``integrity-check`` on the file ``path``
    (named ``label`` in errors), encrypted under ``key`` (None: the key
    :func:`hermes_models.store.cipher.key_for` finds, if any).

    Raises:
        BackupError: a check found a problem.
    """
    label = label or str(path)
    if key is None:
        conn = open_file(sqlite_uri(path), uri=True, isolation_level=None)
    else:
        conn = open_file(sqlite_uri(path), key, uri=True, isolation_level=None)
    try:
        tables = _fts_tables(conn)
        found = [str(row[0]) for row in conn.execute(sqlite_sql.INTEGRITY_CHECK)]
        # What it says of a search index (SQLite 3.44+) is left to the index's own check.
        found, _ = split_integrity(found, [name for name, _ in tables])
        if found not in (["ok"], []):
            raise BackupError(f"{label}: integrity_check failed: {'; '.join(found[:5])}")
        for table, table_sql in tables:
            try:
                result = check_index(conn, table, table_sql)
            except sqlite3.Error as exc:
                if "no such tokenizer" in str(exc):
                    # A newer Hermes' index over a tokenizer that is a C extension
                    # (messages_fts_cjk): this SQLite cannot open it, nor check it.
                    logger.warning("%s: search index %s not checked: %s", label, table, exc)
                    continue
                raise BackupError(f"{label}: search index {table} failed its check: {exc}") from exc
            if not result.ok:
                raise BackupError(
                    f"{label}: search index {table} failed its check: {result.detail}"
                )
            if result.older or result.newer:
                logger.info("%s: search index %s: %s", label, table, result.detail)
    finally:
        conn.close()


def _copy(source: Path, target: Path, progress: Progress | None) -> tuple[int, str | None]:
    """Copy ``source`` into the empty file ``target`` from one read snapshot; the page
    count, and the key both are encrypted under (None: plain): an encrypted store's
    copy is encrypted under the same key."""
    params = read_only_params(source)
    src = open_file(sqlite_uri(source, **params), uri=True, isolation_level=None)
    try:
        key = opened_key(str(source))
        dst = open_file(sqlite_uri(target), key, uri=True, isolation_level=None)
        try:
            # One read transaction for every step: each step reads the same snapshot.
            src.execute(sqlite_sql.BEGIN)
            src.execute(sqlite_sql.READ_SCHEMA).fetchone()
            pages = [0]

            def step(status: int, remaining: int, total: int) -> None:
                pages[0] = total
                if progress is not None:
                    progress(total - remaining, total)

            src.backup(dst, pages=STEP_PAGES, progress=step, sleep=0)
            src.execute(sqlite_sql.COMMIT)
            dst.execute(sqlite_sql.JOURNAL_MODE_DELETE).fetchone()
        finally:
            dst.close()
    finally:
        src.close()
    return pages[0], key


def _sync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _publish(temporary: Path, target: Path) -> None:
    """Give the finished copy its name, never replacing a file that appeared meanwhile."""
    try:
        os.link(temporary, target)
    except FileExistsError:
        raise FileExistsError(f"{target} appeared while the copy was made") from None
    except OSError:
        # A file system without hard links: a rename is the next best thing.
        if target.exists():
            raise FileExistsError(f"{target} appeared while the copy was made") from None
        os.rename(temporary, target)


#: The file in a folder of copies that says which store each copy is of (JSON: the
#: copy's file name -> the real path of its store), mode 0600.
MANIFEST = ".hermes-backups.json"


def _listed(handle: int) -> dict[str, str]:
    """The manifest read from its open descriptor; ``{}`` when empty or unreadable (a
    manifest a crash left half written lists nothing: nothing is then removed)."""
    os.lseek(handle, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(handle, 1 << 16):
        chunks.append(chunk)
    try:
        listed = json.loads(b"".join(chunks) or b"{}")
    except ValueError:
        return {}
    if not isinstance(listed, dict):
        return {}
    return {str(name): str(store) for name, store in listed.items()}


def _record_and_rotate(folder: Path, made: Path, source: Path, keep: int | None) -> list[str]:
    """List ``made`` as a copy of ``source`` in the folder's manifest and, with ``keep``,
    remove the oldest copies of that store beyond the newest ``keep``, holding the
    manifest's lock throughout (two backups into one folder take turns). Returns the
    paths removed."""
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    handle = os.open(folder / MANIFEST, flags, 0o600)
    try:
        if fcntl is not None:
            fcntl.flock(handle, fcntl.LOCK_EX)
        store = os.path.realpath(source)
        listed = {name: of for name, of in _listed(handle).items() if (folder / name).exists()}
        listed[made.name] = store
        removed = [] if keep is None else _rotate(folder, source.stem, keep, made, listed)
        for path in removed:
            listed.pop(Path(path).name, None)
        text = json.dumps(listed, indent=1, sort_keys=True).encode()
        os.lseek(handle, 0, os.SEEK_SET)
        os.ftruncate(handle, 0)
        os.write(handle, text)
        os.fsync(handle)
        return removed
    finally:
        os.close(handle)


def _rotate(folder: Path, stem: str, keep: int, made: Path, listed: dict[str, str]) -> list[str]:
    """Remove the oldest copies of the store ``listed`` names for ``made`` beyond the
    newest ``keep``: files named as copies of ``stem`` that the manifest lists as
    copies of that same store."""
    pattern = rotation_pattern(stem)
    store = listed[made.name]
    named = [
        (pattern.fullmatch(entry.name), entry)
        for entry in folder.iterdir()
        if listed.get(entry.name) == store
    ]
    # Oldest first: by the time in the name, then by the number of a second copy that second.
    copies = [
        entry
        for match, entry in sorted(
            ((m, e) for m, e in named if m is not None),
            key=lambda pair: (pair[0].group(1), int(pair[0].group(2) or 1)),
        )
    ]
    removed: list[str] = []
    for old in copies[: max(len(copies) - keep, 0)]:
        if old == made or not stat.S_ISREG(old.lstat().st_mode):
            continue
        old.unlink()
        removed.append(str(old))
    return removed


def backup(
    source: str | os.PathLike[str] | None,
    dest: str | os.PathLike[str],
    *,
    keep: int | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Copy the store ``source`` (a path or ``sqlite:///`` URL; None: the default store)
    to ``dest`` (a path or ``sqlite:///`` URL) while other processes keep using it;
    returns what was done.

    ``dest`` is a new file, or a folder (an existing one, a path ending in a
    separator, or any path when ``keep`` is given) where the copy is named
    ``<source stem>-<UTC time>.db``. With ``keep`` only the newest ``keep``
    copies of that store stay in the folder (the folder's manifest, :data:`MANIFEST`,
    says which copies are of which store: another store of the same name keeps
    its copies, and a file it does not list is never removed). The result has ``path``,
    ``source``, ``bytes``, ``pages``, ``integrity`` (``"ok"``), ``removed``
    (copies deleted by the rotation) and ``leftovers`` (temporary files of killed
    backups of the same copies, removed first).

    Raises:
        FileNotFoundError: ``source`` does not exist.
        NotADatabaseError: ``source`` is not an SQLite database (a folder, a device...).
        ValueError: ``dest`` is empty, a URL of a server or of another scheme, or
            starts with the ``~`` of an unknown user.
        FileExistsError: ``dest`` is an existing file.
        BackupError: the copy failed its checks (it is not kept).
    """
    path = resolve_path(source, argument="source")
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist (nothing to back up)")
    check_file_kind(path)  # a folder, a device, a FIFO...
    refuse_planted(path)  # before SQLite opens anything
    check_header(path)  # ...or a file that is no database
    if not os.fspath(dest):
        raise ValueError("dest must not be empty (a new file, or a folder)")
    if keep is not None:
        keep = check_int64(keep, "keep", minimum=1)
    text = os.fspath(dest)
    if "://" in text:
        if is_postgres_url(text):
            raise ValueError(
                "dest: a backup is a file; copy a store to PostgreSQL with copy_store"
                " (hermes-models copy)"
            )
        dest_path = Path(resolve_file(text, argument="dest"))  # sqlite:///, or an error
    else:
        dest_path = Path(os.path.abspath(expand_user(text, "dest")))
    into_folder = keep is not None or dest_path.is_dir() or os.fspath(dest).endswith(("/", os.sep))
    if into_folder:
        if dest_path.exists() and not dest_path.is_dir():
            raise NotADirectoryError(f"{dest_path} is not a folder (keep needs a folder)")
        _folder(dest_path)
    else:
        _folder(dest_path.parent)
    target = _target(path, dest_path, into_folder)
    leftovers = _remove_leftovers(target.parent, path.stem, target)
    temporary = target.parent / f".{target.name}.{secrets.token_hex(4)}.tmp"
    try:
        held = _create_private(temporary)
    except OSError as exc:  # named after the copy asked for, not the temporary file
        raise failure_naming(exc, target, "write") from None
    try:
        pages, key = _copy(path, temporary, progress)
        verify(temporary, f"the copy of {path}", key=key)
        _sync(temporary)
        _publish(temporary, target)
    finally:
        for leftover in (temporary, Path(f"{temporary}-journal")):
            try:
                leftover.unlink()
            except FileNotFoundError:
                pass
        os.close(held)
    _sync(target.parent)
    removed = _record_and_rotate(target.parent, target, path, keep) if into_folder else []
    return {
        "path": str(target),
        "source": str(path),
        "bytes": target.stat().st_size,
        "pages": pages,
        "integrity": "ok",
        "removed": removed,
        "leftovers": leftovers,
    }
