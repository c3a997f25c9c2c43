"""Redaction's precision and recall, and what it costs an append.

1. False positives on the benchmark corpus (``benchmarks/search.py``'s generator:
   ordinary technical words, CJK, kana and Hangul, 2 % multimodal JSON content):
   how many of ``--messages`` messages the maintained patterns change (none should).
2. False positives on the project's own technical text: every paragraph of the
   docs and README and every 20-line block of the package's source (code,
   settings, URLs, hashes, ``KEY=value`` examples), the fake-secret test files left out.
3. True positives: ``--fakes`` realistic fake secrets of each maintained kind
   (``tests/fake_secrets.py``) pasted into sentences, shell lines, ``.env``
   lines and JSON tool calls: recall (secret gone) and naming (the pattern named
   is the kind's), and precision over the mixed set of 2 and 3.
4. ``append_message`` with ``redact=True`` against without, one message per
   transaction, interleaved (ratio: redacting / plain).
5. The slowest pattern on 200 KB adversarial texts (a unit repeated: ``sk-``, ``a.``,
   ``-----BEGIN PRIVATE KEY-----`` without an END, ...): each pattern is linear in
   the text, so none should take more than a fraction of a second.

Run: python benchmarks/redaction.py [--messages N] [--fakes N] [--appends N]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import search as corpus  # noqa: E402
from fake_secrets import KINDS, cases  # noqa: E402

from hermes_models import SessionDB  # noqa: E402
from hermes_models.store import redaction  # noqa: E402

LEFT_OUT = {"fake_secrets.py", "test_redaction.py", "redaction.py", "redaction.md"}


def project_text() -> list[str]:
    """Paragraphs of the docs and README, and 20-line blocks of the package's source."""
    pieces: list[str] = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        if page.name in LEFT_OUT:
            continue
        text = page.read_text(encoding="utf-8")
        pieces += [p for p in text.split("\n\n") if p.strip()]
    for source in sorted((ROOT / "hermes_models").rglob("*.py")):
        if source.name in LEFT_OUT:
            continue
        lines = source.read_text(encoding="utf-8").splitlines()
        pieces += ["\n".join(lines[i : i + 20]) for i in range(0, len(lines), 20)]
    return pieces


def tool_call(text: str) -> str:
    arguments = json.dumps({"command": text})
    return json.dumps(
        [{"id": "c1", "type": "function", "function": {"name": "sh", "arguments": arguments}}]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--fakes", type=int, default=200)
    parser.add_argument("--appends", type=int, default=2000)
    args = parser.parse_args()
    redactor = redaction.redactor()

    rng = random.Random(7)
    sentences = [corpus._sentence(rng) for _ in range(args.messages)]
    changed_corpus = [s for s in sentences if redactor.text(s) != s]
    print(f"benchmark corpus: {len(changed_corpus)} of {len(sentences)} messages changed")

    own = project_text()
    changed_own = [(p, redactor.text(p)) for p in own if redactor.text(p) != p]
    print(f"project text: {len(changed_own)} of {len(own)} paragraphs/blocks changed")
    for before, after in changed_own:
        print("  FP:", json.dumps(before[:160]), "->", json.dumps(after[:160]))

    found: Counter[str] = Counter()
    named: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for kind, secret, text in cases(args.fakes):
        for form in (text, tool_call(text)):
            total[kind] += 1
            out = redactor.json_text(form) if form.startswith("[") else redactor.text(form)
            if form.startswith("["):
                json.loads(out)  # still valid JSON
            if secret not in out and secret not in out.replace("\\n", "\n"):
                found[kind] += 1
                named[kind] += f"[REDACTED:{kind}]" in out
    print("true positives (fake secrets, as text and inside a JSON tool call):")
    for kind in KINDS:
        print(f"  {kind:18} recall {found[kind]}/{total[kind]}, named {named[kind]}/{total[kind]}")
    tp, all_secrets = sum(found.values()), sum(total.values())
    fp = len(changed_corpus) + len(changed_own)
    recall = tp / all_secrets
    precision = tp / (tp + fp) if tp + fp else 1.0
    print(f"recall {recall:.4f} ({tp}/{all_secrets}); precision {precision:.4f} ({tp}/{tp + fp})")

    with tempfile.TemporaryDirectory() as folder:
        plain = SessionDB(Path(folder) / "plain.db", redact=False)
        red = SessionDB(Path(folder) / "red.db", redact=True)
        for store in (plain, red):
            store.create_session("s", "cli")
        times: dict[str, list[float]] = {"plain": [], "redact": []}
        for n in range(args.appends):
            text = sentences[n % len(sentences)]
            for name, store in (("plain", plain), ("redact", red)):
                started = time.perf_counter()
                store.append_message("s", "user", text)
                times[name].append(time.perf_counter() - started)
        plain.close()
        red.close()
    adversarial(redactor)
    p50 = {k: statistics.median(v) * 1e6 for k, v in times.items()}
    print(
        f"append_message p50: plain {p50['plain']:.0f} µs, redacting {p50['redact']:.0f} µs "
        f"(ratio {p50['redact'] / p50['plain']:.2f})"
    )


ADVERSARIAL = (
    "a.",
    "a",
    "a_",
    "KEY",
    "1",
    "sk-",
    " ",
    "-----BEGIN PRIVATE KEY-----\n",
    "eyJ",
    "a:",
    "http://",
    "http://a:",
    "bearer ",
    "KEY=",
    'KEY = "',
    "ghp_",
    "xoxb-",
    "AIza",
    "Authorization: Basic ",
    "aws_secret_access_key=",
    "-",
    "AKIA",
    "sk-ant-api03-",
    "eyJa.eyJb.",
    "https://hooks.slack.com/services/",
    "SECRET_TOKEN",
)


def adversarial(redactor: redaction.Redactor) -> None:
    worst = (0.0, "", "")
    for unit in ADVERSARIAL:
        text = unit * (200_000 // len(unit))
        for name, regex in redactor.patterns:
            one = redaction.Redactor([(name, regex)])
            started = time.perf_counter()
            one.text(text)
            worst = max(worst, (time.perf_counter() - started, name, unit))
    print(
        f"slowest pattern on 200 KB adversarial text: {worst[1]} on {worst[2]!r}, {worst[0]:.3f} s"
    )


if __name__ == "__main__":
    main()
