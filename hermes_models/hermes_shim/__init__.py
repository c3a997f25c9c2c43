"""Hermes' own processes on this package: ``python -m hermes_models.hermes_shim install``
run with Hermes' Python makes every ``import hermes_state`` there give
:mod:`hermes_models.hermes_state` (see :mod:`hermes_models.hermes_shim.shim`)."""

from __future__ import annotations

from .shim import (
    FILE_NAME,
    SERVED_SCHEMA,
    SWITCH,
    HermesModule,
    find_hermes,
    install,
    installed,
    newer_store,
    pth_text,
    remove,
    served_module,
    site_packages,
)

__all__ = [
    "FILE_NAME",
    "SERVED_SCHEMA",
    "SWITCH",
    "HermesModule",
    "find_hermes",
    "install",
    "installed",
    "newer_store",
    "pth_text",
    "remove",
    "served_module",
    "site_packages",
]
