"""The ids and hashes yoyo gives the migrations of a folder, read from the file names
alone (no migration is loaded): what both backends compare with the applied
migrations a store records, to tell in one read whether anything is pending."""

from __future__ import annotations

import hashlib
import os


def migration_ids(folder: str | os.PathLike[str]) -> list[str]:
    """The ids yoyo's ``read_migrations`` gives the migrations in ``folder``, in order.

    Read from the file names alone, as yoyo reads them: every ``.py`` and
    ``.sql`` file but rollbacks, post-apply hooks and yoyo's scratch files.
    """
    with os.scandir(folder) as entries:
        names = sorted(
            entry.name
            for entry in entries
            if entry.is_file() and os.path.splitext(entry.name)[1] in (".py", ".sql")
        )
    return [
        name.rsplit(".", 1)[0]
        for name in names
        if not name.endswith(".rollback.sql")
        and not name.startswith(("post-apply", "_tmp_yoyonew"))
    ]


def migration_hash(migration_id: str) -> str:
    """The key yoyo records an applied migration under (``_yoyo_migration.migration_hash``)."""
    return hashlib.sha256(migration_id.encode("utf-8")).hexdigest()
