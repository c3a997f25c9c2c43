"""A TCP proxy that adds network latency, for benchmarks on a machine without ``tc netem``.

It listens on 127.0.0.1, forwards every connection to a target (a PostgreSQL
server) and holds every chunk of bytes it reads for half the added latency
before writing it on, in each direction: one round trip costs the added
latency more. Each direction of a connection has a reader thread, which
stamps a chunk with the time it is due (its arrival plus the delay) and
queues it, and a writer thread, which sends the queued chunks in order, each
when it is due: a chunk's delay starts when it arrives, several chunks may be
in flight at once, nothing waits for the one before it to be delivered more
than the delay already does. Bytes are forwarded as read, intact and in order.

The proxy runs in a process of its own (:class:`LatencyProxy` starts it), so
its threads do not take the measured client's interpreter lock.

Run: python benchmarks/latency_proxy.py --target 127.0.0.1:5432 [--latency-ms 1.0] [--port 0]
     python benchmarks/latency_proxy.py --check postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import collections
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import TracebackType
from urllib.parse import urlsplit, urlunsplit

CHUNK = 65536


class _Line:
    """One direction of a connection: chunks read from ``src``, each written to ``dst``
    ``delay`` seconds after it arrived."""

    def __init__(self, src: socket.socket, dst: socket.socket, delay: float) -> None:
        self.src = src
        self.dst = dst
        self.delay = delay
        self.queue: collections.deque[tuple[float, bytes]] = collections.deque()
        self.ready = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._write, daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                data = self.src.recv(CHUNK)
            except OSError:
                data = b""
            with self.ready:
                self.queue.append((time.monotonic() + self.delay, data))
                self.ready.notify()
            if not data:
                return

    def _write(self) -> None:
        while True:
            with self.ready:
                while not self.queue:
                    self.ready.wait()
                due, data = self.queue.popleft()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if not data:  # the sender closed: pass the end on
                try:
                    self.dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                return
            try:
                self.dst.sendall(data)
            except OSError:
                try:
                    self.src.shutdown(socket.SHUT_RD)
                except OSError:
                    pass
                return


def serve(listener: socket.socket, target: tuple[str, int], latency: float) -> None:
    """Accept connections on ``listener`` for ever, each forwarded to ``target`` with
    ``latency`` seconds added to every round trip (half each way)."""
    while True:
        client, _ = listener.accept()
        try:
            server = socket.create_connection(target)
        except OSError:
            client.close()
            continue
        for sock in (client, server):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _Line(client, server, latency / 2)
        _Line(server, client, latency / 2)


class LatencyProxy:
    """The proxy in a process of its own, in front of the server of ``url``:
    :meth:`url` gives the same URL through the proxy."""

    def __init__(self, url: str, latency_s: float) -> None:
        parts = urlsplit(url)
        self.latency_s = latency_s
        self.target = f"{parts.hostname or '127.0.0.1'}:{parts.port or 5432}"
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--target", self.target,
             "--latency-ms", repr(latency_s * 1e3)],
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("listening "):
            self.close()
            raise RuntimeError(f"latency proxy did not start: {line!r}")
        self.port = int(line.split()[1])

    def url(self, url: str) -> str:
        """``url`` with its host and port replaced by the proxy's."""
        parts = urlsplit(url)
        user = parts.netloc.rpartition("@")[0]
        netloc = (user + "@" if user else "") + f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()

    def __enter__(self) -> LatencyProxy:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def select_one_ms(url: str, rounds: int = 400) -> float:
    """Median milliseconds of ``SELECT 1`` on one autocommit connection to ``url``."""
    import psycopg

    times = []
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(20):
            conn.execute("SELECT 1").fetchone()
        for _ in range(rounds):
            started = time.perf_counter()
            conn.execute("SELECT 1").fetchone()
            times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3


def check(url: str, latency_s: float) -> tuple[float, float, float]:
    """``SELECT 1`` direct, through the proxy adding nothing, and adding ``latency_s``:
    median ms of each, interleaved in blocks."""
    direct: list[float] = []
    zero: list[float] = []
    added: list[float] = []
    with LatencyProxy(url, 0.0) as none, LatencyProxy(url, latency_s) as proxy:
        for _ in range(5):
            direct.append(select_one_ms(url, 200))
            zero.append(select_one_ms(none.url(url), 200))
            added.append(select_one_ms(proxy.url(url), 200))
    return statistics.median(direct), statistics.median(zero), statistics.median(added)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--target", help="host:port to forward to")
    parser.add_argument("--latency-ms", type=float, default=1.0, help="added per round trip")
    parser.add_argument("--port", type=int, default=0, help="where to listen (0: any free)")
    parser.add_argument("--check", metavar="URL", help="measure SELECT 1 with and without it")
    args = parser.parse_args()
    if args.check:
        direct, zero, added = check(args.check, args.latency_ms / 1e3)
        print(
            f"SELECT 1: direct {direct:.3f} ms, through the proxy adding 0 ms {zero:.3f} ms,"
            f" adding {args.latency_ms:g} ms {added:.3f} ms (+{added - direct:.3f} ms)"
        )
        return
    if not args.target:
        raise SystemExit("--target host:port is needed")
    host, _, port = args.target.rpartition(":")
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", args.port))
    listener.listen(64)
    print(f"listening {listener.getsockname()[1]}", flush=True)
    serve(listener, (host, int(port)), args.latency_ms / 1e3)


if __name__ == "__main__":
    main()
