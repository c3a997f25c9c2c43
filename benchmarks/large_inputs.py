"""One large input: ``hermes-models show`` of one large message, at 2, 4 and 20 MB.

Each size in six shapes (prose in 5,000-character lines; one paragraph; one word;
short lines; CJK in one line; lines of CJK and ASCII words, accented letters and
emoji), timed as users run it (the console script, output to a pipe),
against plain sqlite3 reading the same message and writing it to the same pipe.
``show`` must stay linear: the 20 MB / 2 MB ratio of ours near 10, and 20 MB
under 2 s.

Run: python benchmarks/large_inputs.py [--sizes 2,4,20] [--shapes prose,lines]
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hermes_models import SessionDB

SCRIPT = Path(sys.executable).parent / "hermes-models"
PLAIN = (
    "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]);"
    " sys.stdout.write(c.execute(\"SELECT content FROM messages WHERE session_id = 'big'\")"
    ".fetchone()[0])"
)


def message(shape: str, size: int) -> str:
    rng = random.Random(1)
    if shape == "prose":
        words = ["alpha", "beta", "gamma", "delta", "epsilon"]
        text = " ".join(rng.choice(words) for _ in range(size // 6))
        return "\n".join(text[i : i + 5000] for i in range(0, len(text), 5000))
    if shape == "paragraph":
        return "word " * (size // 5)
    if shape == "word":
        return "x" * size
    if shape == "lines":
        return "short line\n" * (size // 11)
    if shape == "cjk":
        return "漢字のテキスト" * (size // 21)
    if shape == "mixed":
        words = ["我们使用", "Python", "来处理数据", "的", "SQLite", "テキスト"]
        words += ["café", "🙂", "and"]
        lines, length = [], 0
        while length < size:
            line = " ".join(rng.choice(words) for _ in range(rng.randrange(50, 400)))
            lines.append(line)
            length += len(line.encode()) + 1
        return "\n".join(lines)
    raise SystemExit(f"unknown shape {shape!r}")


def timed(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="2,4,20", help="megabytes, comma-separated")
    parser.add_argument("--shapes", default="prose,paragraph,word,lines,cjk,mixed")
    args = parser.parse_args()
    sizes = [int(float(s) * 1_000_000) for s in args.sizes.split(",")]
    print(f"{'shape':<10} {'MB':>4} {'show':>8} {'plain':>8} {'ratio':>7}")
    with tempfile.TemporaryDirectory() as folder:
        for shape in args.shapes.split(","):
            for size in sizes:
                path = Path(folder) / f"{shape}-{size}.db"
                with SessionDB(path) as store:
                    store.create_session("big", "cli")
                    store.append_message("big", "user", message(shape, size))
                ours = timed([str(SCRIPT), "show", "big", "--db", str(path)])
                plain = timed([sys.executable, "-c", PLAIN, str(path)])
                print(
                    f"{shape:<10} {size / 1e6:>4.0f} {ours:>7.2f}s {plain:>7.2f}s"
                    f" {ours / plain:>7.1f}"
                )


if __name__ == "__main__":
    main()
