"""A writer process for the fault tests: appends until it is killed.

Usage: python fault_writer.py DB_PATH ACK_PATH SESSION_ID

After each append_message call returns, the message id is written to
ACK_PATH and fsynced, so the parent knows which writes were acknowledged
before it killed this process.
"""

from __future__ import annotations

import os
import sys

from hermes_models import SessionDB


def main() -> None:
    db_path, ack_path, session_id = sys.argv[1:4]
    store = SessionDB(db_path)
    store.ensure_session(session_id, "fault-test")
    fd = os.open(ack_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    n = 0
    while True:
        n += 1
        role = "user" if n % 2 else "assistant"
        calls = (
            [{"id": f"c{n}", "type": "function"}] if role == "assistant" and n % 3 == 0 else None
        )
        message_id = store.append_message(
            session_id, role, f"{session_id} line {n} 断电测试 {'x' * (n % 50)}", tool_calls=calls
        )
        if n % 7 == 0:
            store.update_token_counts(session_id, input_tokens=3, output_tokens=2)
        os.write(fd, f"{message_id}\n".encode())
        os.fsync(fd)


if __name__ == "__main__":
    main()
