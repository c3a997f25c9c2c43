"""A small store to show what the package does: English and Chinese
conversations, a /branch fork, a compression chain and a subagent run.

:func:`build_demo` only writes data and returns the ids; the ``demo``
command of the CLI prints what it finds in it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..conversations import branch, compress
from ..models import Session
from ..sessiondb import SessionDB

#: A fixed clock so the demo looks the same every time (2026-01-05 09:00 UTC).
DEMO_EPOCH = 1_767_603_600.0


@dataclass(frozen=True)
class DemoIds:
    """The sessions :func:`build_demo` created."""

    english: str
    chinese: str
    branch: str
    compressed_root: str
    continuation: str
    subagent: str


_ENGLISH = [
    ("user", "How do I run blocking file IO without freezing my asyncio event loop?"),
    (
        "assistant",
        "Hand the blocking call to a worker thread with asyncio.to_thread(); the event "
        "loop keeps serving other tasks while the thread waits on the disk.",
    ),
    ("user", "And if I need a timeout on that call?"),
    (
        "assistant",
        "Wrap it: await asyncio.wait_for(asyncio.to_thread(read_file, path), timeout=5).",
    ),
]

_CHINESE = [
    ("user", "请解释一下 Python 异步编程中的事件循环是怎么工作的？"),
    (
        "assistant",
        "事件循环不断从就绪队列中取出协程并运行，遇到 await 时挂起当前协程，"
        "把控制权交还给循环，等 IO 完成后再恢复执行。",
    ),
    ("user", "那么数据库连接池应该怎么配置？"),
    ("assistant", "连接池的大小一般与并发请求数相当，SQLite 在 WAL 模式下允许多个读者同时读取。"),
]

_LONG_CHAT = [
    ("user", "Let's design the retry policy for our SQLite writers."),
    ("assistant", "Start with BEGIN IMMEDIATE so a writer takes the lock before reading."),
    ("user", "Why random jitter between 20 and 150 milliseconds?"),
    ("assistant", "Random pauses spread competing writers out instead of waking them in step."),
]

_SUMMARY = [
    {
        "role": "user",
        "content": "[Summary of the earlier conversation] We chose BEGIN IMMEDIATE writes "
        "with a 20-150 ms random jitter retry, up to 15 attempts.",
    },
    {"role": "assistant", "content": "Understood. Next: when should checkpoints run?"},
]


def _conversation(
    store: SessionDB, session_id: str, turns: list[tuple[str, str]], t0: float
) -> None:
    for offset, (role, content) in enumerate(turns):
        store.append_message(session_id, role, content, timestamp=t0 + 10.0 * (offset + 1))


def build_demo(store: SessionDB) -> DemoIds:
    """Fill ``store`` with the demo conversations and return their ids."""
    t0 = DEMO_EPOCH
    english = store.create_session(
        "demo-asyncio", "cli", model="demo-model", started_at=t0, cwd="/home/demo/project"
    )
    _conversation(store, english, _ENGLISH, t0)
    store.set_session_title(english, "asyncio file IO")
    store.update_token_counts(english, input_tokens=812, output_tokens=240, api_call_count=2)

    chinese = store.create_session(
        "demo-chinese", "telegram", model="demo-model", started_at=t0 + 600
    )
    _conversation(store, chinese, _CHINESE, t0 + 600)
    store.set_session_title(chinese, "Python 异步编程")

    forked = _branch(store, english, t0 + 1200)

    root = store.create_session("demo-retries", "cli", model="demo-model", started_at=t0 + 1800)
    _conversation(store, root, _LONG_CHAT, t0 + 1800)
    store.set_session_title(root, "writer retry policy")
    continuation = compress(
        Session.get_by_id(root), _SUMMARY, session_id="demo-retries-2", at=t0 + 1900
    )

    subagent = store.create_session(
        "demo-subagent",
        "delegate",
        model="demo-small-model",
        model_config={"_delegate_from": continuation.id},
        parent_session_id=continuation.id,
        started_at=continuation.started_at + 5,
    )
    _conversation(
        store,
        subagent,
        [
            ("user", "Search the SQLite docs for wal_checkpoint modes."),
            (
                "assistant",
                "PASSIVE, FULL, RESTART and TRUNCATE; TRUNCATE also empties the WAL file.",
            ),
        ],
        continuation.started_at + 5,
    )
    Session.get_by_id(subagent).end("completed", at=continuation.started_at + 30)
    return DemoIds(english, chinese, forked, root, continuation.id, subagent)


def _branch(store: SessionDB, parent_id: str, when: float) -> str:
    child = branch(
        Session.get_by_id(parent_id),
        session_id="demo-asyncio-branch",
        title="asyncio, take two",
        at=when,
    )
    store.append_message(
        child.id, "user", "Could I use aiofiles instead of to_thread?", timestamp=when + 10
    )
    store.append_message(
        child.id,
        "assistant",
        "Yes; aiofiles runs the same thread pool under the hood, behind an async API.",
        timestamp=when + 20,
    )
    return child.id
