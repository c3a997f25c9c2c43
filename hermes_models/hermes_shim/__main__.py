"""``python -m hermes_models.hermes_shim [status|install|remove]``, run with Hermes' Python."""

from __future__ import annotations

import argparse
import sys

from ..errors import HermesModelsError
from . import FILE_NAME, SERVED_SCHEMA, find_hermes, install, installed, remove, site_packages

DESCRIPTION = (
    "Make the Hermes of this Python environment import hermes_models.hermes_state as its "
    "hermes_state module (install), or its own module again (remove). Run it with the "
    "Python that runs hermes. status (the default) says what is installed."
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hermes_models.hermes_shim", description=DESCRIPTION
    )
    parser.add_argument(
        "action", nargs="?", default="status", choices=("status", "install", "remove")
    )
    action = parser.parse_args(argv).action
    try:
        if action == "install":
            print(f"installed {install()}: Hermes here imports hermes_models.hermes_state")
        elif action == "remove":
            removed = remove()
            if removed is None:
                print(f"not installed (no {site_packages() / FILE_NAME}): nothing to remove")
            else:
                print(f"removed {removed}: Hermes here imports its own hermes_state")
        else:
            hermes = find_hermes()
            if hermes is None:
                print("Hermes: none in this Python environment")
            else:
                served = "served" if hermes.schema_version == SERVED_SCHEMA else "not served"
                print(f"Hermes: {hermes.path} (schema {hermes.schema_version}, {served})")
            pth = installed()
            print(f"shim: installed ({pth})" if pth else "shim: not installed")
    except (HermesModelsError, OSError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    return 0


raise SystemExit(main())
