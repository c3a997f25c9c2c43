"""``python -m hermes_models``: the ``hermes-models`` command line."""

from __future__ import annotations

from .cli import main

raise SystemExit(main(prog_name="python -m hermes_models"))
