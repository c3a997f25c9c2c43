"""Answers a Hermes process's ``import hermes_state`` with ``hermes_models.hermes_state``.

The line of ``hermes_models_shim.pth`` (see :mod:`hermes_models.hermes_shim`) runs
:func:`install` at every start of a Python of the environment it is in. That
adds one finder ahead of the others on ``sys.meta_path`` and nothing else: this
module imports only what every Python has loaded at start, and reads no file
until a process imports ``hermes_state``. A finder is needed, not a folder on
``PYTHONPATH``: Hermes' CLI, gateway and cron put their own folder first on
``sys.path`` as they start, ahead of any folder put there before.

The finder hands ``hermes_state`` to the module beside this file, which checks
which Hermes it serves and then stands in for ``hermes_models.hermes_state``.
``HERMES_MODELS_SHIM=off`` (or ``0``, ``no``, ``false``) in a process's
environment makes the finder step aside: Hermes imports its own module there.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import ModuleSpec, SourceFileLoader

#: The module the finder answers for.
NAME = "hermes_state"
#: The environment variable that turns the finder off in a process.
SWITCH = "HERMES_MODELS_SHIM"
#: Its values that turn it off (case and spaces ignored).
OFF = ("0", "off", "no", "false")
#: The folder of this file and of the module it hands out.
FOLDER = os.path.dirname(os.path.abspath(__file__))
#: The module imported as ``hermes_state``.
SHIM = os.path.join(FOLDER, NAME + ".py")


def switched_off() -> bool:
    """True when this process's environment turns the finder off."""
    return os.environ.get(SWITCH, "").strip().lower() in OFF


class Finder:
    """The finder on ``sys.meta_path``: ``hermes_state``, at the top level only."""

    #: How :func:`install` knows it is there already.
    hermes_models_shim = True

    @classmethod
    def find_spec(cls, name: str, path: object = None, target: object = None) -> ModuleSpec | None:
        if name != NAME or path is not None or switched_off():
            return None
        spec = ModuleSpec(NAME, SourceFileLoader(NAME, SHIM), origin=SHIM)
        spec.has_location = True
        return spec


def install() -> None:
    """Put :class:`Finder` first on ``sys.meta_path`` (once) and take this folder off
    ``sys.path``, where the ``.pth`` line put it to import this module."""
    if not any(getattr(finder, "hermes_models_shim", False) for finder in sys.meta_path):
        sys.meta_path.insert(0, Finder)
    while FOLDER in sys.path:
        sys.path.remove(FOLDER)
