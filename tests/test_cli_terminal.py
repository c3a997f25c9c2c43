"""Every command in a real 80-column terminal (tmux), on a store shaped like a real one:
Hermes-style ids, long and CJK titles, a compression chain, a branch, subagent runs.
What a reader needs (ids, counts, times, markers, every word of a title) is on the
screen whole; no line is wider than the terminal; nothing ends in an ellipsis; and
piped output carries no padding after the last column."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EXPORT_FLAGS
from console_script import SCRIPT, environment, run
from rich.cells import cell_len

from hermes_models import SessionDB
from hermes_models.conversations.children import branch, compress
from hermes_models.models.tables import Session

pytestmark = pytest.mark.slow

WIDTH = 80
T0 = 1_767_603_600.0  # 2026-01-05 09:00 UTC

TITLES = [
    "Refactor the asynchronous ingestion pipeline so back-pressure reaches every producer",
    "数据库连接池的配置与调优",
    "日本語のタイトル：検索インデックスの再構築",
    None,
    "short",
    "A title of exactly one hundred characters, which is the longest a Hermes session "
    "title may be!!",
]
SOURCES = ["cli", "telegram", "discord", "whatsapp", "cli", "telegram"]


def hermes_id(index: int) -> str:
    return f"20260105_{9 + index:02d}{index:02d}00_{index * 2654435761 % 2**32:08x}"


def build_store(path: Path) -> dict[str, str]:
    """The store the commands run on; returns the ids of the interesting sessions."""
    with SessionDB(path) as store:
        for index, (title, source) in enumerate(zip(TITLES, SOURCES)):
            sid = hermes_id(index)
            at = T0 + index * 3600
            store.create_session(sid, source, model="model-x", started_at=at)
            store.append_message(sid, "user", f"question {index}: " + "why " * 40, timestamp=at + 1)
            store.append_message(
                sid,
                "assistant",
                "Because the pipeline buffers every batch before it writes; 事件循环 " * 3,
                tool_calls=[{"id": f"call{index}", "type": "function"}] if index % 2 else None,
                timestamp=at + 2,
            )
            if title:
                store.set_session_title(sid, title)
            if index >= 2:
                store.end_session(sid, "user_exit")
        root = hermes_id(0)
        tip = compress(
            Session.get_by_id(root),
            [{"role": "user", "content": "Summary: back-pressure must reach producers."}],
            session_id=hermes_id(10),
            at=T0 + 100_000,
        )
        fork = branch(
            Session.get_by_id(hermes_id(1)), session_id=hermes_id(11), title=None, at=T0 + 9000
        )
        store.append_message(fork.id, "user", "a branch of the Chinese chat", timestamp=T0 + 9001)
        sub = store.create_session(
            hermes_id(12),
            "delegate",
            model_config={"_delegate_from": tip.id},
            parent_session_id=tip.id,
            started_at=T0 + 100_010,
        )
        store.append_message(sub, "user", "subagent task", timestamp=T0 + 100_011)
        store.end_session(sub, "completed")
    return {"root": root, "tip": tip.id, "fork": fork.id, "sub": sub}


class Terminal:
    """A tmux server whose windows are 80 columns wide."""

    def __init__(self, home: Path) -> None:
        self.socket = f"hermes-models-test-{os.getpid()}"
        env = environment(home)
        for name in ("COLUMNS", "LINES"):
            env.pop(name, None)
        self.env = env
        self.count = 0
        # A session that stays open keeps the server up between the commands' sessions.
        kept = self.tmux("new-session", "-d", "-x", str(WIDTH), "-y", "50", "-s", "keep")
        assert kept.returncode == 0, kept.stderr

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["tmux", "-L", self.socket, "-f", "/dev/null", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def run(
        self, cwd: Path, *args: str, env: dict[str, str] | None = None
    ) -> tuple[int, list[str]]:
        """Run ``hermes-models ARGS`` on the terminal (with ``env`` set for it); its
        status and the screen's lines."""
        self.count += 1
        name = f"w{self.count}"
        settings = [f"{key}={value}" for key, value in (env or {}).items()]
        command = " ".join(
            shlex.quote(a) for a in (*(["env", *settings] if settings else []), str(SCRIPT), *args)
        )
        script = f"cd {shlex.quote(str(cwd))} && {command} </dev/null; echo __STATUS__$?; sleep 600"
        started = self.tmux(
            "new-session",
            "-d",
            "-x",
            str(WIDTH),
            "-y",
            "50",
            "-s",
            name,
            "bash",
            "--norc",
            "-c",
            script,
        )
        assert started.returncode == 0, started.stderr
        deadline = time.monotonic() + 90
        while True:
            screen = self.tmux("capture-pane", "-p", "-J", "-S", "-", "-E", "-", "-t", name).stdout
            if "__STATUS__" in screen:
                break
            assert time.monotonic() < deadline, screen
            time.sleep(0.1)
        self.tmux("kill-session", "-t", name)
        lines = [line.rstrip() for line in screen.splitlines()]
        end = next(i for i, line in enumerate(lines) if line.startswith("__STATUS__"))
        return int(lines[end].removeprefix("__STATUS__")), lines[:end]

    def close(self) -> None:
        self.tmux("kill-server")


@pytest.fixture(scope="module")
def terminal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Terminal]:
    if shutil.which("tmux") is None:
        raise RuntimeError("tmux is needed for the 80-column test (.ci/run installs it)")
    screen = Terminal(tmp_path_factory.mktemp("tmux-home"))
    yield screen
    screen.close()


@pytest.fixture(scope="module")
def place() -> Iterator[Path]:
    """A short working folder, so paths in the output are short as well."""
    folder = Path(tempfile.mkdtemp(prefix="hm", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def ids(place: Path) -> dict[str, str]:
    return build_store(place / "s.db")


def assert_fits(lines: list[str]) -> None:
    wide = [line for line in lines if cell_len(line) > WIDTH]
    assert wide == [], "lines wider than the terminal"
    assert [line for line in lines if "…" in line] == [], "an ellipsis: something was cut"


def block_of(lines: list[str], start: str, starts: list[str]) -> str:
    """The text from the line starting with ``start`` to the next line starting with any of
    ``starts`` (a table row and its wrapped continuation lines)."""
    first = next(i for i, line in enumerate(lines) if line.startswith(start))
    end = next(
        (
            i
            for i in range(first + 1, len(lines))
            if any(lines[i].startswith(other) for other in starts if other != start)
        ),
        len(lines),
    )
    return " ".join(lines[first:end])


def assert_words(text: str, sentence: str) -> None:
    """Every word of ``sentence`` is in ``text`` whole (CJK text: the whole string)."""
    if any(ord(char) > 0x2E80 for char in sentence):
        assert sentence in text.replace(" ", "") or sentence in text, (sentence, text)
        return
    tokens = set(text.split())
    missing = [word for word in sentence.split() if word not in tokens]
    assert missing == [], (sentence, text)


def listing(place: Path, *args: str) -> list[dict[str, str]]:
    result = run(*args, "--db", "s.db", "--json", cwd=place)
    assert result.returncode == 0, result.stderr
    return list(json.loads(result.stdout))


# -- the table commands -----------------------------------------------------------------------


def test_sessions_at_80_columns_are_a_line_each(
    terminal: Terminal, place: Path, ids: dict[str, str]
) -> None:
    # 20 sessions took 78 lines at 80 columns (titles wrapped 3-5 lines): now a line a
    # session, the title then the preview, cut with "…" where the line ends.
    status, lines = terminal.run(place, "sessions", "--db", "s.db")
    assert status == 0
    assert [line for line in lines if cell_len(line) > WIDTH] == []
    rows = listing(place, "sessions")
    assert len(lines) == len(rows) + 1  # the header, then a line a session
    start = lines[0].index("Title / preview")
    for row, line in zip(rows, lines[1:]):
        fields = line.split()
        assert row["id"].startswith(fields[0]) and len(fields[0]) >= 13
        when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(row["last_active"])).split()
        assert fields[1:5] == [row["source"], str(row["message_count"]), *when]
        whole = " · ".join(
            " ".join(part.split()) for part in (row["title"], row["preview"]) if part
        )
        shown = line[start:]
        assert shown == whole or (shown.endswith("…") and whole.startswith(shown[:-1]))


def test_sessions_at_80_columns_wide(terminal: Terminal, place: Path, ids: dict[str, str]) -> None:
    status, lines = terminal.run(place, "sessions", "--db", "s.db", "--wide")
    assert status == 0
    assert_fits(lines)
    assert lines[0].split()[:5] == ["ID", "Source", "Msgs", "Last", "active"]
    rows = listing(place, "sessions")
    shown = [line.split()[0] for line in lines[1:] if line and not line.startswith(" ")]
    assert len(shown) == len(rows)
    for row, prefix in zip(rows, shown):
        assert row["id"].startswith(prefix) and len(prefix) >= 13
        text = block_of(lines, prefix + " ", shown)
        first = text.split()
        assert first[1:5] == [
            row["source"],
            str(row["message_count"]),
            *time.strftime("%Y-%m-%d %H:%M", time.gmtime(row["last_active"])).split(),
        ]
        if row["title"]:
            assert_words(text, row["title"])
        assert_words(text, row["preview"])
    # Each shown prefix names its session.
    for row, prefix in zip(rows, shown):
        tree = listing(place, "lineage", prefix)
        assert [r["id"] for r in tree if r["asked"]] == [row["id"]]


def test_plans_at_80_columns(terminal: Terminal, place: Path, ids: dict[str, str]) -> None:
    for args in (
        ["prune", "--older-than", "0", "--dry-run"],
        ["delete", ids["root"], ids["tip"], "--dry-run"],
    ):
        status, lines = terminal.run(place, *args, "--db", "s.db")
        assert status == 0
        assert_fits(lines)
        rows = listing(place, *args)
        assert lines[0].startswith("would delete ")
        shown = [line.split()[0] for line in lines[2:] if line and not line.startswith(" ")]
        assert len(shown) == len(rows)
        for row, prefix in zip(rows, shown):
            text = block_of(lines, prefix + " ", shown)
            assert text.split()[1:3] == [row["source"], str(row["message_count"])]
            assert_words(text, row["effect"])
            if row["title"]:
                assert_words(text, row["title"])


def test_stats_and_doctor_at_80_columns(
    terminal: Terminal, place: Path, ids: dict[str, str]
) -> None:
    status, lines = terminal.run(place, "stats", "--db", "s.db")
    assert status == 0
    assert_fits(lines)
    [report] = listing(place, "stats")
    assert f"sessions              {report['sessions']}" in lines
    status, lines = terminal.run(place, "doctor", "--db", "s.db")
    assert status == 0
    assert_fits(lines)
    checks = listing(place, "doctor")
    text = " ".join(lines)
    for check in checks:
        assert_words(text, f"{check['name']}: {check['detail']}")
    assert lines[-1].endswith(f"healthy ({len(checks)} checks passed)")


# -- trees, transcripts and hits ----------------------------------------------------------------


def test_lineage_at_80_columns(terminal: Terminal, place: Path, ids: dict[str, str]) -> None:
    status, lines = terminal.run(place, "lineage", "--db", "s.db", ids["sub"])
    assert status == 0
    assert_fits(lines)
    rows = listing(place, "lineage", ids["sub"])
    starts = [row["id"] for row in rows]
    for row in rows:
        line = next(line for line in lines if row["id"] in line)
        words = line.split()
        at = words.index(row["id"])
        expected = [row["id"], row["kind"]]
        if row["resume_target"]:
            expected += ["<-", "resume"]
        if row["asked"]:
            expected += ["(asked)"]
        assert words[at : at + len(expected)] == expected, line
        if row["title"]:
            first = lines.index(line)
            following = []
            for other in lines[first + 1 :]:
                if any(start in other for start in starts):
                    break
                following.append(other)
            assert_words(" ".join([line, *following]), f"'{row['title']}'")


def test_show_at_80_columns(terminal: Terminal, place: Path, ids: dict[str, str]) -> None:
    status, lines = terminal.run(place, "show", "--db", "s.db", ids["tip"], "--with-ancestors")
    assert status == 0
    assert_fits(lines)
    assert lines[0].split()[0] == ids["tip"]
    assert_words(" ".join(lines[:3]), TITLES[0] + " #2")
    assert "source cli · model model-x · started 2026-01-06 12:46 UTC · ended -" in lines
    messages = listing(place, "show", ids["tip"], "--with-ancestors")
    text = " ".join(lines)
    for message in messages:
        assert_words(text, message["content"] or "")


def test_search_at_80_columns(terminal: Terminal, place: Path, ids: dict[str, str]) -> None:
    status, lines = terminal.run(place, "search", "--db", "s.db", "pipeline OR 事件循环")
    assert status == 0
    assert_fits(lines)
    hits = listing(place, "search", "pipeline OR 事件循环")
    heads = [line for line in lines if not line.startswith(" ")]
    assert len(heads) == len(hits)
    for hit, head in zip(hits, heads):
        stamp = time.strftime("%Y-%m-%d %H:%M", time.gmtime(hit["timestamp"]))
        assert head == f"{hit['session_id']} {hit['role']} #{hit['id']} {stamp} UTC {hit['source']}"
    status, lines = terminal.run(place, "search", "--db", "s.db", "pipeline", "--sessions")
    assert status == 0
    assert_fits(lines)
    rows = listing(place, "search", "pipeline", "--sessions")
    for row in rows:
        head = next(line for line in lines if line.startswith(row["id"] + " "))
        assert f"{row['hits']} hit" in head


# -- every other command ------------------------------------------------------------------------


def test_every_other_command_at_80_columns(
    terminal: Terminal, place: Path, ids: dict[str, str]
) -> None:
    work = place / "other"
    work.mkdir()
    shutil.copy(place / "s.db", work / "s.db")
    [report] = listing(place, "stats")
    totals = f"{report['sessions']} sessions and {report['messages']} messages"
    expectations = [
        (["migrate", "--db", "m.db"], "m.db: schema up to date"),
        (["resume", "--db", "s.db", ids["root"]], ids["tip"]),
        (["export", "--db", "s.db", *EXPORT_FLAGS, "-o", "b.jsonl"], f"wrote {totals} to b.jsonl"),
        (["import", "b.jsonl", "--db", "i.db"], f"imported {totals}"),
        (["archive", "--db", "s.db", ids["fork"]], f"archived {ids['fork']}"),
        (["backup", "--db", "s.db", "copies/"], "integrity_check ok"),
        (["vacuum", "--db", "s.db"], "optimized 2 search indexes;"),
        (["delete", "--db", "s.db", "-y", ids["fork"]], "deleted 1 session ("),
        (["prune", "--db", "s.db", "--older-than", "0", "-y"], "pruned"),
        (["demo"], "/resume demo-retries opens demo-retries-2"),
        (["--help"], "sessions  List sessions as a picker shows them."),
        (["sessions", "--help"], "  hermes-models sessions --limit all --csv > sessions.csv"),
    ]
    for args, expected in expectations:
        status, lines = terminal.run(work, *args)
        assert status == 0, (args, lines)
        assert_fits(lines)
        assert expected in " ".join(lines), (args, lines)


# -- piped output ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["sessions"],
        ["stats"],
        ["doctor"],
        ["lineage", "{sub}"],
        ["show", "{tip}"],
        ["search", "pipeline"],
        ["prune", "--older-than", "0", "--dry-run"],
    ],
    ids=lambda args: args[0],
)
def test_piped_output_has_no_trailing_padding(
    place: Path, ids: dict[str, str], args: list[str]
) -> None:
    result = run(*(a.format(**ids) for a in args), "--db", "s.db", cwd=place)
    assert result.returncode == 0, result.stderr
    padded = [line for line in result.stdout.splitlines() if line != line.rstrip()]
    assert padded == []
    assert max(cell_len(line) for line in result.stdout.splitlines()) <= WIDTH


def test_a_long_show_goes_through_the_pager_on_a_terminal_only(
    terminal: Terminal, place: Path
) -> None:
    # A 188-message show scrolled some 700 lines past: taller than the screen, it now
    # goes through $PAGER (less -FRX when unset) on a terminal; never in a pipe, never
    # with --no-pager, and a page that fits is printed as it is.
    work = place / "pager"
    work.mkdir()
    with SessionDB(work / "long.db") as store:
        store.create_session("long", "cli", started_at=T0)
        for n in range(120):
            store.append_message("long", "user", f"message {n}", timestamp=T0 + n)
        store.create_session("short", "cli", started_at=T0)
        store.append_message("short", "user", "only one", timestamp=T0)
    capture = {"PAGER": "sh -c 'cat > paged.txt'"}
    status, lines = terminal.run(work, "show", "--db", "long.db", "long", env=capture)
    assert status == 0
    paged = (work / "paged.txt").read_text(encoding="utf-8")
    assert "message 0" in paged and "message 119" in paged
    assert not any("message" in line for line in lines)  # on the screen: nothing
    (work / "paged.txt").unlink()
    status, lines = terminal.run(work, "show", "--db", "long.db", "long", "--no-pager", env=capture)
    assert status == 0 and not (work / "paged.txt").exists()
    assert any("message 119" in line for line in lines)
    status, lines = terminal.run(work, "show", "--db", "long.db", "short", env=capture)
    assert status == 0 and not (work / "paged.txt").exists()
    assert any("only one" in line for line in lines)
    piped = run("show", "--db", "long.db", "long", cwd=work, env={**environment(work), **capture})
    assert piped.returncode == 0 and "message 119" in piped.stdout
    assert not (work / "paged.txt").exists()
