"""Peak memory of bundle import, search and export on large stores.

A bundle is written directly in the format ``export_bundle`` produces (a
header, every session column, every message column, compact JSON), cached
under ``--dir``: sessions of 100 messages, each session with a system prompt
of 2-6 KB and a model config, messages of a few hundred bytes (English,
about a fifth Chinese or Japanese, every fifth assistant message a tool
call answered by a tool message). Half the messages hold the word
``hermes``; one in ten ``数据`` (half of those as ``数据库``).

Each measurement runs in a child process, which imports the package and
opens the store first, takes ``ru_maxrss`` as its baseline, does the one
thing, and reports the growth of ``ru_maxrss`` (the peak resident size),
the time, and the rows involved:

* ``import``: ``SessionDB.import_bundle`` into a fresh file, sizes
  interleaved (100k, 1M, 100k, 1M, ... for ``--rounds``);
* with ``--search``, on the store the last import of each size built:
  ``search_messages`` (first page of 20, no time budget) of
  ``hermes`` (about half of the rows), of ``数据`` and of ``数据库``, and
  ``search_sessions("hermes")``;
* with ``--export``, on those stores: ``export_bundle`` and
  ``export_markdown`` of everything to ``/dev/null``.

Run: python benchmarks/memory.py [--sizes 100000,1000000] [--rounds N]
[--search] [--export] [--dir PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_DIR = Path("/tmp/hermes-memory")
PER_SESSION = 100
T0 = 1_700_000_000.0

WORDS = (
    "the of and to in is that for it with as was on be by this are or from at which but not "
    "asyncio thread loop event socket timeout retry writer reader lock checkpoint journal wal "
    "sqlite index query search snippet token rank session message branch compression subagent "
    "python function class module import return value error warning debug trace memory cache "
    "file path folder disk network request response server client header payload stream buffer"
).split()
HAN = (
    "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出"
    "就分对成会可主发年动同工也能下过子说产种面"
)
KANA = (
    "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをん"
)


def _text(rng: random.Random, size: int) -> str:
    kind = rng.random()
    if kind < 0.8:
        words: list[str] = []
        length = 0
        while length < size:
            word = rng.choice(WORDS)
            words.append(word)
            length += len(word) + 1
        return " ".join(words)
    alphabet = HAN if kind < 0.92 else KANA
    return "".join(rng.choice(alphabet) for _ in range(size // 3))


def write_bundle(path: Path, sessions: int, seed: int = 14) -> None:
    """A bundle of ``sessions`` sessions of :data:`PER_SESSION` messages each."""
    # Imported here: the parent process of a measurement does not need the package.
    from hermes_models.store.files import SCHEMA_VERSION
    from hermes_models.transfer.bundle import (
        FORMAT,
        MESSAGE_COLUMNS,
        SESSION_COLUMNS,
        VERSION,
        dumps,
    )

    rng = random.Random(seed)
    messages = sessions * PER_SESSION
    part = path.with_suffix(".part")
    with open(part, "w", encoding="utf-8") as out:
        header = {
            "format": FORMAT,
            "version": VERSION,
            "schema_version": SCHEMA_VERSION,
            "sessions": sessions,
            "messages": messages,
        }
        out.write(dumps(header) + "\n")
        for s in range(sessions):
            values: dict[str, Any] = dict.fromkeys(SESSION_COLUMNS)
            values.update(
                id=f"mem-{s:07d}",
                source=("cli", "telegram", "discord")[s % 3],
                model="bench-model",
                model_config=json.dumps({"temperature": 0.7, "max_tokens": 4096}),
                system_prompt=_text(rng, rng.randint(2000, 6000)),
                started_at=T0 + s * 600,
                ended_at=T0 + s * 600 + 500,
                message_count=PER_SESSION,
                tool_call_count=PER_SESSION // 10,
                input_tokens=1000,
                output_tokens=500,
                title=f"Session {s}" if s % 4 else None,
                rewind_count=0,
                archived=0,
            )
            out.write(dumps({"type": "session", **values}) + "\n")
        for n in range(messages):
            s, m = divmod(n, PER_SESSION)
            values = dict.fromkeys(MESSAGE_COLUMNS)
            role = ("user", "assistant", "tool", "assistant", "user")[m % 5]
            content = _text(rng, rng.randint(100, 500))
            if n % 2:
                content = "hermes " + content
            if n % 10 == 3:
                pair = "数据库" if n % 20 == 3 else "数据"
                content = content[:20] + pair + content[20:]
            values.update(
                id=n + 1,
                session_id=f"mem-{s:07d}",
                role=role,
                content=content,
                timestamp=T0 + s * 600 + m,
                active=1,
            )
            if role == "assistant" and m % 5 == 1:
                values["tool_calls"] = json.dumps(
                    [{"id": f"c{n}", "type": "function", "function": {"name": "search"}}]
                )
            if role == "tool":
                values["tool_call_id"] = f"c{n - 1}"
                values["tool_name"] = "search"
            out.write(dumps({"type": "message", **values}) + "\n")
    part.replace(path)


def bundle_for(folder: Path, messages: int) -> Path:
    path = folder / f"bundle-{messages}.jsonl"
    if not path.exists():
        print(f"writing {path} (once) ...", file=sys.stderr, flush=True)
        write_bundle(path, messages // PER_SESSION)
    return path


# -- the child: one measurement -------------------------------------------------------------


def _peak_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def child(action: str, db: str, arg: str) -> dict[str, Any]:
    """Run one measured action in this process; the figures as a dict."""
    # Everything the actions need is loaded before the baseline is taken.
    from hermes_models import SessionDB

    store = SessionDB(db, read_only=action != "import")
    store.session_count()
    base = _peak_kib()
    start = time.perf_counter()
    rows: Any
    if action == "import":
        report = store.import_bundle(arg)
        rows = report["messages_added"]
    elif action == "search":
        rows = len(store.search_messages(arg, limit=20, time_budget=None))
    elif action == "search_sessions":
        rows = len(store.search_sessions(arg, limit=10, time_budget=None))
    elif action == "export_bundle":
        rows = store.export_bundle("/dev/null")["messages"]
    elif action == "export_markdown":
        rows = store.export_markdown("/dev/null")
    else:
        raise SystemExit(f"unknown action {action}")
    took = time.perf_counter() - start
    growth = _peak_kib() - base
    store.close()
    return {"growth_mib": growth / 1024, "base_mib": base / 1024, "seconds": took, "rows": rows}


def measure(action: str, db: Path, arg: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", action, str(db), arg],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def show(label: str, result: dict[str, Any]) -> None:
    print(
        f"{label:<38} peak RSS +{result['growth_mib']:7.1f} MiB (baseline "
        f"{result['base_mib']:5.1f})  {result['seconds']:8.2f} s  rows {result['rows']:,}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--search", action="store_true")
    parser.add_argument("--export", action="store_true")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    folder: Path = args.dir
    folder.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    bundles = {n: bundle_for(folder, n) for n in sizes}
    for n, path in bundles.items():
        print(f"{n:,} messages: {path} ({path.stat().st_size / 2**20:,.0f} MiB)")
    for _ in range(args.rounds):
        for n in sizes:
            db = folder / f"import-{n}.db"
            for suffix in ("", "-wal", "-shm"):
                Path(f"{db}{suffix}").unlink(missing_ok=True)
            show(f"import_bundle, {n:,} messages", measure("import", db, str(bundles[n])))
            for suffix in ("", "-wal", "-shm"):
                if Path(f"{db}{suffix}").exists():
                    os.replace(f"{db}{suffix}", folder / f"store-{n}.db{suffix}")
    for n in sizes:
        kept = folder / f"store-{n}.db"
        if args.search:
            for term in ("hermes", "数据", "数据库"):
                show(f"{n:,}: search_messages({term!r})", measure("search", kept, term))
            show(f"{n:,}: search_sessions('hermes')", measure("search_sessions", kept, "hermes"))
        if args.export:
            show(f"{n:,}: export_bundle (everything)", measure("export_bundle", kept, "-"))
            show(f"{n:,}: export_markdown (everything)", measure("export_markdown", kept, "-"))


if __name__ == "__main__":
    main()
