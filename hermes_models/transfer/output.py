"""Where exports go: a path written safely, or a stream written as it is.

A regular file is never written in place: the text goes to a hidden
temporary file in the same folder, which then takes the file's name in one
``rename``, so a reader sees the old file or the new one, never half of
either. An existing file is replaced only when the caller says so
(``overwrite=True``, ``--force`` on the command line). A symbolic link is
followed: the file it points at is replaced and the link stays. FIFOs,
character and block devices are opened and written directly — renaming a
file over ``/dev/null`` or over a pipe someone is reading would replace it.
Errors name the path the caller gave, never the temporary file.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, cast

from ..checks import expand_user


def file_path(value: Any, argument: str) -> Path | None:
    """``value`` as a path (``~`` expanded), or None when it is a text stream.

    Raises:
        TypeError: ``value`` is neither a path nor a stream.
        ValueError: ``value`` starts with ``~`` and that home folder is not known.
    """
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        if not isinstance(text, str):
            raise TypeError(f"{argument} must be a text path, not bytes")
        expanded = expand_user(text, argument)
        if expanded.startswith(f".{os.sep}~"):
            # A Path prints "./~/x" as "~/x", which messages would show as the home folder.
            expanded = os.path.abspath(expanded)
        return Path(expanded)
    if hasattr(value, "write") or hasattr(value, "read"):
        return None
    raise TypeError(f"{argument} must be a path or a text stream, not {type(value).__name__}")


def failure_naming(exc: OSError, path: Path, what: str) -> OSError:
    """``exc`` again, naming ``path`` (the caller's) instead of any other file."""
    reason = exc.strerror or str(exc)
    error = type(exc)(exc.errno, f"cannot {what} {path}: {reason}")
    error.filename = str(path)
    return error


def _kind(mode: int) -> str | None:
    """What a file that is written directly is, or None for a regular file."""
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    return None


class _Named:
    """A text stream whose write errors name the caller's path (not a temporary file)."""

    def __init__(self, handle: IO[str], path: Path) -> None:
        self._handle = handle
        self.name = str(path)

    def write(self, text: str) -> int:
        try:
            return self._handle.write(text)
        except OSError as exc:
            raise failure_naming(exc, Path(self.name), "write") from None

    def flush(self) -> None:
        try:
            self._handle.flush()
        except OSError as exc:
            raise failure_naming(exc, Path(self.name), "write") from None


@contextmanager
def _direct(path: Path) -> Iterator[IO[str]]:
    """A FIFO or device, opened for writing without creating or truncating anything."""
    try:
        fd = os.open(path, os.O_WRONLY | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise failure_naming(exc, path, "write") from None
    with open(fd, "w", encoding="utf-8", newline="\n") as handle:
        named = _Named(handle, path)
        yield cast(IO[str], named)
        named.flush()


def _link(temp: str, real: Path, path: Path) -> None:
    """Give ``temp`` the name ``real`` unless that name exists (then FileExistsError)."""
    try:
        os.link(temp, real)
    except FileExistsError:
        raise _exists(path) from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
            raise
        # No hard links on this file system: check, then rename (a small race).
        if real.exists():
            raise _exists(path) from None
        os.replace(temp, real)
    else:
        os.unlink(temp)


@contextmanager
def _replace(path: Path, real: Path, overwrite: bool, mode: int | None) -> Iterator[IO[str]]:
    """A temporary file next to ``real`` that becomes ``real`` when the block ends."""
    folder = real.parent
    try:
        fd, temp = tempfile.mkstemp(dir=folder, prefix=f".{real.name}.", suffix=".tmp")
    except FileNotFoundError as exc:
        if folder.is_dir():  # a folder where files cannot be made (procfs says ENOENT)
            raise failure_naming(exc, path, "write") from None
        raise FileNotFoundError(
            errno.ENOENT, f"cannot write {path}: the folder {folder} does not exist"
        ) from None
    except OSError as exc:
        raise failure_naming(exc, path, "write") from None
    try:
        with open(fd, "w", encoding="utf-8", newline="\n") as handle:
            if mode is not None:
                os.fchmod(fd, stat.S_IMODE(mode))
            named = _Named(handle, path)
            yield cast(IO[str], named)
            named.flush()
            try:
                os.fsync(fd)
            except OSError as exc:
                raise failure_naming(exc, path, "write") from None
        try:
            if overwrite:
                os.replace(temp, real)
            else:
                _link(temp, real, path)
        except FileExistsError:
            raise
        except OSError as exc:
            raise failure_naming(exc, path, "write") from None
    finally:
        Path(temp).unlink(missing_ok=True)


def _exists(path: Path) -> FileExistsError:
    error = FileExistsError(
        errno.EEXIST,
        f"{path} already exists (pass overwrite=True, or --force on the command line, "
        "to replace it)",
    )
    error.filename = str(path)
    return error


@contextmanager
def open_output(
    target: str | os.PathLike[str] | IO[str], *, overwrite: bool = False
) -> Iterator[IO[str]]:
    """A text stream for ``target``, as described in the module documentation.

    Raises:
        FileExistsError: ``target`` is an existing file and ``overwrite`` is false.
        IsADirectoryError: ``target`` is a folder.
        OSError: the file cannot be written; the message names ``target``.
    """
    path = file_path(target, "target")
    if path is None:
        yield cast(IO[str], target)
        return
    if not isinstance(overwrite, bool):
        raise TypeError(f"overwrite must be bool, not {type(overwrite).__name__}")
    real = Path(os.path.realpath(path))
    try:
        info = os.stat(real)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise failure_naming(exc, path, "write") from None
    if info is not None:
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, f"cannot write {path}: it is a folder")
        if _kind(info.st_mode) is not None:
            with _direct(path) as handle:
                yield handle
            return
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, f"cannot write {path}: not a regular file")
        if not overwrite:
            raise _exists(path)
    with _replace(path, real, overwrite, None if info is None else info.st_mode) as handle:
        yield handle
