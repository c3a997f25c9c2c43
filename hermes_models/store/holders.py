"""Lock holders that name a local process, and telling whether that process is gone.

A compression lock is a lease with an expiry. A process killed in the middle
of a compression (``kill -9``, an out-of-memory kill) cannot release it, and
waiting out the lease (five minutes by default) blocks the next compression
of that conversation. A holder made by :func:`local_holder` carries enough to
tell, later and from another process, that its process is gone::

    hermes_models:pid=4242:tid=140001:start=991823:ns=<boot id>.<pid namespace>:1f2e3d4c

Such a lock is reclaimed at once only when every one of these holds:

* the holder names the same boot of the same kernel (``boot_id``) and the
  same PID namespace as the process asking, so the PID means the same
  process here (another host sharing the file, or another container, never
  matches);
* that PID no longer runs, is a zombie, or now belongs to a process that
  started at another time (the PID was reused).

Anything else - a holder in another format (Hermes' own ``pid:tid:nonce``),
another host or container, a platform without ``/proc``, any doubt while
reading it - keeps the lock until its lease expires.
"""

from __future__ import annotations

import functools
import os
import re
import threading
import uuid

_FIELD = r"(?:^|:){}=([^:]+)(?::|$)"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


@functools.lru_cache(maxsize=1)
def namespace() -> str | None:
    """This kernel boot and PID namespace (``<boot id>.<namespace inode>``), or None
    where the platform does not say."""
    boot = _read("/proc/sys/kernel/random/boot_id")
    try:
        link = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    inode = re.fullmatch(r"pid:\[(\d+)\]", link)
    if not boot or inode is None:
        return None
    return f"{boot.strip()}.{inode.group(1)}"


def _stat(pid: int) -> tuple[str, str] | None:
    """``(state, start time)`` of a process from ``/proc/<pid>/stat``; None when it
    does not exist.

    Raises:
        OSError: it could not be read for another reason.
    """
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            text = handle.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after it.
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], fields[19]


def local_holder(label: str = "hermes_models") -> str:
    """A holder for a lock taken by this thread, naming this process so that it can
    be reclaimed as soon as the process is gone (see the module documentation).

    Where the platform cannot name the process that way the holder is still
    unique, and its lock simply lasts until the lease expires.
    """
    pid = os.getpid()
    parts = [label, f"pid={pid}", f"tid={threading.get_ident()}"]
    space = namespace()
    if space is not None:
        try:
            found = _stat(pid)
        except (OSError, ValueError, IndexError):
            found = None
        if found is not None:
            parts += [f"start={found[1]}", f"ns={space}"]
    parts.append(uuid.uuid4().hex[:8])
    return ":".join(parts)


def _field(holder: str, name: str) -> str | None:
    match = re.search(_FIELD.format(name), holder)
    return None if match is None else match.group(1)


def holder_is_gone(holder: str) -> bool:
    """True only when ``holder`` names a process of this boot and PID namespace that
    provably no longer runs; False whenever that cannot be told for sure."""
    pid_text, start, space = (_field(holder, name) for name in ("pid", "start", "ns"))
    if pid_text is None or start is None or space is None or not pid_text.isdigit():
        return False
    if space != namespace():
        return False
    pid = int(pid_text)
    if pid <= 0:
        return False
    try:
        found = _stat(pid)
    except (OSError, ValueError, IndexError):
        return False
    if found is None:
        return True
    state, started = found
    return state in ("Z", "X", "x") or started != start
