"""``hermes-models``: the session store from a terminal."""

from __future__ import annotations

from .commands import cli, main, run

__all__ = ["cli", "main", "run"]
