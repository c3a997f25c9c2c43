"""A Hermes v16 process appending in a loop, as a live gateway does, beside the caller.

``Appender(path)`` starts Hermes' released ``SessionDB`` in a process of its own
(``hermes_appender.py``): it fills ``path`` and then appends a message every
``pause_ms`` until ``stop()``, which returns every append it made, timed. Used by
``test_beside_a_gateway.py`` (correctness) and ``benchmarks/beside_gateway.py``
(figures).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import hermes_release

APPENDER = Path(__file__).with_name("hermes_appender.py")


@dataclass(frozen=True)
class Append:
    """One ``append_message`` of Hermes': when it began (epoch seconds), how long it
    took, the id it returned (None when it raised) and the error it raised."""

    start: float
    seconds: float
    message_id: int | None
    error: str | None


class Appender:
    """Hermes v16 appending to ``path`` in a loop, after filling it with ``sessions``
    sessions of ``messages`` messages (``filled`` says how many messages that made)."""

    def __init__(
        self, path: Path, *, sessions: int = 200, messages: int = 10, pause_ms: int = 20
    ) -> None:
        self.stop_file = path.with_name(path.name + ".stop")
        self.stop_file.unlink(missing_ok=True)
        home = path.parent / "hermes-home-appender"
        home.mkdir(parents=True, exist_ok=True)
        self._log = (home / "stderr.log").open("ab")
        self._process = subprocess.Popen(
            [
                *hermes_release.command(),
                str(APPENDER),
                str(path),
                str(sessions),
                str(messages),
                str(pause_ms),
                str(self.stop_file),
            ],
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=hermes_release.environment("v16", home),
        )
        assert self._process.stdout is not None
        ready = self._process.stdout.readline()
        if not ready:
            self._process.wait(timeout=60)
            self._log.close()
            raise RuntimeError(f"Hermes' appender stopped: {(home / 'stderr.log').read_text()}")
        self.filled: int = json.loads(ready)["messages"]

    def stop(self) -> list[Append]:
        """Stop the loop; every append it made, in order."""
        self.stop_file.touch()
        out, _ = self._process.communicate(timeout=120)
        self._log.close()
        self.stop_file.unlink(missing_ok=True)
        assert self._process.returncode == 0, out
        records = json.loads(out.splitlines()[-1])["records"]
        return [Append(*record) for record in records]
