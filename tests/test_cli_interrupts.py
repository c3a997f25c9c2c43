"""Ctrl-C (SIGINT) sent to the installed script while it works: it exits with status 130
and one line, as shells expect, and an import into a file it created leaves no file."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from console_script import SCRIPT, build_demo_store, environment

from hermes_models import SessionDB

from snapshots import snapshot

pytestmark = pytest.mark.slow

T0 = 1_767_603_600.0  # 2026-01-05 09:00 UTC

#: What rich writes to draw and clear a progress bar: escape sequences, carriage returns.
_DRAWING = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")


def last_line(stderr: str) -> str:
    """The last line of ``stderr`` as a terminal shows it: after the last control that
    moved back to its start (a progress bar cleared)."""
    return _DRAWING.split(stderr.rstrip("\n").split("\n")[-1])[-1]


class Running:
    """The script running in the background, its output read as it comes."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [str(SCRIPT), *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.stdout = self.stderr = ""
        self._readers = [
            threading.Thread(target=self._read, args=(name,), daemon=True)
            for name in ("stdout", "stderr")
        ]
        for reader in self._readers:
            reader.start()

    def __enter__(self) -> Running:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(60)
        for reader in self._readers:
            reader.join(10)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()

    def _read(self, name: str) -> None:
        stream = getattr(self.process, name)
        while chunk := stream.read(1):
            setattr(self, name, getattr(self, name) + chunk)

    def wait_for(self, ready: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + 60
        while not ready():
            assert self.process.poll() is None, f"ended before {what}: {self.stderr}"
            assert time.monotonic() < deadline, f"no {what} in 60 s: {self.stderr}"
            time.sleep(0.005)

    def interrupt(self) -> tuple[int, str, str]:
        """Send SIGINT; the exit status, standard output and standard error."""
        self.process.send_signal(signal.SIGINT)
        status = self.process.wait(timeout=60)
        for reader in self._readers:
            reader.join(10)
        return status, self.stdout, self.stderr


def write_bundle(path: Path, messages: int) -> Path:
    """A bundle of one session of ``messages`` messages, written as ``export`` writes one."""
    header = {
        "format": "hermes-models-bundle",
        "version": 1,
        "schema_version": 16,
        "sessions": 1,
        "messages": messages,
    }
    session = {"type": "session", "id": "big", "source": "cli", "started_at": T0}
    with path.open("w", encoding="utf-8") as out:
        out.write(json.dumps(header) + "\n" + json.dumps(session) + "\n")
        for index in range(messages):
            message = {
                "type": "message",
                "id": index + 1,
                "session_id": "big",
                "role": "user" if index % 2 == 0 else "assistant",
                "content": f"message {index} about the event loop and its writers",
                "timestamp": T0 + index,
            }
            out.write(json.dumps(message) + "\n")
    return path


@pytest.mark.parametrize("moment", ["file created", "progress drawn"])
def test_ctrl_c_during_an_import_into_a_new_file_exits_130_and_leaves_no_file(
    tmp_path: Path, moment: str
) -> None:
    bundle = write_bundle(tmp_path / "big.jsonl", 60_000)
    target = tmp_path / "new" / "state.db"
    # Rich draws the progress bar on the pipe as it would on a terminal.
    env = environment(tmp_path, TTY_COMPATIBLE="1", TTY_INTERACTIVE="1")
    with Running(["import", str(bundle), "--db", str(target)], tmp_path, env) as running:
        if moment == "file created":  # while the schema is made, or soon after
            running.wait_for(target.exists, "database file")
        else:  # while the messages go in
            running.wait_for(lambda: "importing" in running.stderr, "progress bar")
        status, stdout, stderr = running.interrupt()
    assert (status, stdout) == (130, "")
    assert last_line(stderr) == f"interrupted; nothing was imported and {target} was removed"
    assert not target.parent.exists()


def test_ctrl_c_during_an_import_into_a_store_exits_130_and_adds_nothing(tmp_path: Path) -> None:
    bundle = write_bundle(tmp_path / "big.jsonl", 60_000)
    path = build_demo_store(tmp_path / "demo.db")
    before = snapshot(path)
    env = environment(tmp_path, TTY_COMPATIBLE="1", TTY_INTERACTIVE="1")
    with Running(["import", str(bundle), "--db", str(path)], tmp_path, env) as running:
        running.wait_for(lambda: "importing" in running.stderr, "progress bar")
        status, stdout, stderr = running.interrupt()
    assert (status, stdout) == (130, "")
    assert last_line(stderr) == "interrupted"
    with SessionDB(path, read_only=True) as store:
        assert store.get_session("big") is None
    assert snapshot(path) == before


def test_ctrl_c_at_the_question_of_delete_exits_130_and_deletes_nothing(tmp_path: Path) -> None:
    path = build_demo_store(tmp_path / "demo.db")
    before = snapshot(path)
    args = ["delete", "demo-chinese", "--db", str(path)]
    with Running(args, tmp_path, environment(tmp_path)) as running:
        running.wait_for(lambda: running.stderr.endswith("[y/N]: "), "question")
        status, stdout, stderr = running.interrupt()
    assert (status, stdout) == (130, "")
    assert stderr.endswith(
        "Delete 1 session and 4 messages? [y/N]: \ninterrupted; nothing was deleted\n"
    )
    assert snapshot(path) == before
