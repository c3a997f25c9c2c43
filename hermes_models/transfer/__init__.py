"""Moving data in and out: bundles, imports, exports, copies and backups."""

from __future__ import annotations

from .backups import backup
from .bundle import export_bundle, is_bundle
from .bundle_reader import check_bundle
from .copy import copy_store
from .importer import import_bundle
from .markdown import export_markdown
from .transcript_files import import_transcripts, read_transcript, transcript_paths

__all__ = [
    "backup",
    "check_bundle",
    "copy_store",
    "export_bundle",
    "export_markdown",
    "import_bundle",
    "import_transcripts",
    "is_bundle",
    "read_transcript",
    "transcript_paths",
]
