"""Secrets never stored: the pattern set, every write path, rewriting a store, exports.

True positives are measured on realistic FAKE secrets (tests/fake_secrets.py), false
positives on the benchmark corpus (benchmarks/search.py) and on near misses of
ordinary technical text."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from console_script import environment, run
from fake_secrets import KINDS, cases

from hermes_models import SessionDB
from hermes_models.store import RedactionPatternError, redaction
from hermes_models.transfer import copy_store

ROOT = Path(__file__).resolve().parent.parent
OPENAI = "sk-proj-" + "Ab3dEf9hIjKlMn0pQrStUvWxYz1234567890abcdEFGH"
GITHUB = "ghp_" + "1234567890abcdefABCDEF1234567890abcd"
AWS = "AKIA" + "IOSFODNN7EXAMPL3"


def _corpus_module() -> object:
    spec = importlib.util.spec_from_file_location("bench_search", ROOT / "benchmarks/search.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the patterns ---------------------------------------------------------------------------


def test_every_fake_secret_is_removed_and_named_for_its_pattern() -> None:
    redactor = redaction.redactor()
    missed: Counter[str] = Counter()
    misnamed: Counter[str] = Counter()
    for kind, secret, text in cases(40):
        out = redactor.text(text)
        if secret in out:
            missed[kind] += 1
        elif f"[REDACTED:{kind}]" not in out:
            misnamed[kind] += 1
    assert (missed, misnamed) == (Counter(), Counter())
    assert len(cases(40)) == 40 * len(KINDS)


def test_the_benchmark_corpus_is_left_exactly_as_it_is() -> None:
    bench = _corpus_module()
    rng = __import__("random").Random(7)
    sentences = [bench._sentence(rng) for _ in range(20_000)]  # type: ignore[attr-defined]
    redactor = redaction.redactor()
    changed = [s for s in sentences if redactor.text(s) != s]
    assert changed == []


NEAR_MISSES = [
    "set max_tokens=4096 and temperature=0.2",
    "MAX_TOKENS=100000000",
    "api_key = os.environ['OPENAI_API_KEY']",
    'token = os.getenv("GITHUB_TOKEN")',
    "export OPENAI_API_KEY=$OPENAI_API_KEY",
    "API_KEY=${API_KEY}",
    "PASSWORD=<your password here>",
    "ssh_key=~/.ssh/id_ed25519",
    "use sk-learn style estimators, e.g. sklearn-compatible-transformers",
    "Bearer authentication is described in RFC 6750",
    "the Authorization header carries a bearer token",
    "cache_key=f'{user}:{session}'",
    "sort_key=lambda item: item.rank",
    "primary_key=True",
    "https://example.com/path?x=1",
    "git@github.com:owner/repo.git",
    "user@example.com wrote: thanks",
    "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----",
    "commit 3f5e9a1c2b7d8e4f6a0b1c2d3e4f5a6b7c8d9e0f",
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "uuid 123e4567-e89b-12d3-a456-426614174000",
    "The token_count column counts tokens; tokens_used=512",
    "password: ''",
    "KEY=value",
    'AUTO_PRUNE_KEY = "last_auto_prune"',
    'LEASE_KEY = "hermes_models.import"',
]


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_ordinary_technical_text_is_not_redacted(text: str) -> None:
    assert redaction.redactor().text(text) == text


def test_a_group_named_secret_keeps_the_setting_name() -> None:
    r = redaction.redactor()
    assert r.text("DB_PASSWORD=hunter2hunter2") == "DB_PASSWORD=[REDACTED:env-assignment]"
    assert r.text('SECRET_KEY = "django-insecure-x1y2z3"') == (
        'SECRET_KEY = "[REDACTED:env-assignment]"'
    )
    assert (
        r.text(f"export OPENAI_API_KEY={OPENAI}") == "export OPENAI_API_KEY=[REDACTED:openai-key]"
    )
    assert (
        r.text("postgres://app:s3cretpw@db/app") == "postgres://app:[REDACTED:url-password]@db/app"
    )


def test_redaction_is_idempotent() -> None:
    r = redaction.redactor()
    for _, _, text in cases(5):
        once = r.text(text)
        assert r.text(once) == once


def test_json_tool_calls_stay_valid_json() -> None:
    r = redaction.redactor()
    key = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA1x2y3\n-----END RSA PRIVATE KEY-----"
    arguments = json.dumps({"cmd": f'echo "TOKEN={GITHUB}" > .env', "key": key, "n": 3})
    calls = [{"id": "c1", "type": "function", "function": {"name": "sh", "arguments": arguments}}]
    out = r.json_text(json.dumps(calls))
    parsed = json.loads(out)
    inner = json.loads(parsed[0]["function"]["arguments"])
    assert inner == {
        "cmd": 'echo "TOKEN=[REDACTED:github-token]" > .env',
        "key": "[REDACTED:private-key-block]",
        "n": 3,
    }
    assert r.json_text('{"a": "nothing here"}') == '{"a": "nothing here"}'  # not re-dumped
    assert r.json_text(f"not json {GITHUB}") == "not json [REDACTED:github-token]"


def test_users_add_patterns_by_argument_and_file(tmp_path: Path) -> None:
    r = redaction.redactor(extra=[("employee-id", r"\bEMP-[0-9]{6}\b")])
    assert r.text("EMP-123456 and " + GITHUB) == (
        "[REDACTED:employee-id] and [REDACTED:github-token]"
    )
    patterns = tmp_path / "patterns.txt"
    patterns.write_text("# ours\nticket-secret: TKT-[a-f0-9]{8}\n", encoding="utf-8")
    r = redaction.redactor(patterns_file=patterns)
    assert r.text("TKT-deadbeef") == "[REDACTED:ticket-secret]"
    assert r.names[-4:] == ("bearer-token", "basic-auth", "url-password", "env-assignment")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([("broken", "([a-z")], "redaction pattern 'broken': invalid regex '([a-z'"),
        ([("Bad Name", "x")], "redaction pattern name 'Bad Name'"),
        ([("empty", "x*")], "redaction pattern 'empty': the regex 'x*' matches empty text"),
        ([("a", "x"), ("a", "y")], "redaction pattern 'a' is named twice"),
    ],
)
def test_a_bad_user_pattern_is_a_clear_error(extra: list[tuple[str, str]], message: str) -> None:
    with pytest.raises(RedactionPatternError) as caught:
        redaction.redactor(extra=extra)
    assert str(caught.value).startswith(message)


def test_a_bad_patterns_file_line_names_the_file_and_line(tmp_path: Path) -> None:
    patterns = tmp_path / "p.txt"
    patterns.write_text("ok: abc\nno colon here\n", encoding="utf-8")
    with pytest.raises(RedactionPatternError, match=r"p\.txt:2: expected 'name: regex'"):
        redaction.read_patterns(patterns)


# -- the setting ----------------------------------------------------------------------------


def test_off_by_default_and_on_by_argument_or_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(redaction.REDACT_VARIABLE, raising=False)
    with SessionDB(tmp_path / "a.db") as store:
        store.create_session("s", "cli")
        store.append_message("s", "user", f"key {OPENAI}")
        assert store.get_messages("s")[0]["content"] == f"key {OPENAI}"
    monkeypatch.setenv(redaction.REDACT_VARIABLE, "1")
    with SessionDB(tmp_path / "b.db") as store:
        store.create_session("s", "cli")
        store.append_message("s", "user", f"key {OPENAI}")
        assert store.get_messages("s")[0]["content"] == "key [REDACTED:openai-key]"
    with SessionDB(tmp_path / "c.db", redact=False) as store:  # the argument wins
        store.create_session("s", "cli")
        store.append_message("s", "user", f"key {OPENAI}")
        assert store.get_messages("s")[0]["content"] == f"key {OPENAI}"
    monkeypatch.setenv(redaction.REDACT_VARIABLE, "perhaps")
    with pytest.raises(ValueError, match="HERMES_MODELS_REDACT='perhaps'"):
        SessionDB(tmp_path / "d.db")


def test_a_redacting_and_a_plain_handle_on_one_file_each_keep_their_setting(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    with SessionDB(path, redact=True) as red, SessionDB(path, redact=False) as plain:
        red.create_session("s", "cli")
        red.append_message("s", "user", GITHUB)
        plain.append_message("s", "user", GITHUB)
        assert [m["content"] for m in plain.get_messages("s")] == [
            "[REDACTED:github-token]",
            GITHUB,
        ]


# -- every write path -----------------------------------------------------------------------


@pytest.fixture
def red(tmp_path: Path) -> SessionDB:
    store = SessionDB(tmp_path / "red.db", redact=True)
    store.create_session("s", "cli")
    yield store  # type: ignore[misc]
    store.close()


def test_append_message_redacts_content_tool_calls_tool_output_and_reasoning(
    red: SessionDB,
) -> None:
    calls = [{"id": "c", "function": {"name": "sh", "arguments": json.dumps({"t": GITHUB})}}]
    red.append_message(
        "s", "assistant", f"using {AWS}", tool_calls=calls, reasoning=f"the key {OPENAI}"
    )
    red.append_message("s", "tool", f"stdout: {GITHUB}", tool_call_id="c")
    first, second = red.get_messages("s")
    assert first["content"] == "using [REDACTED:aws-access-key]"
    assert first["tool_calls"] == [
        {"id": "c", "function": {"name": "sh", "arguments": '{"t": "[REDACTED:github-token]"}'}}
    ]
    assert first["reasoning"] == "the key [REDACTED:openai-key]"
    assert second["content"] == "stdout: [REDACTED:github-token]"
    assert red.get_session("s")["tool_call_count"] == 1


def test_multimodal_content_is_redacted_inside_its_parts(red: SessionDB) -> None:
    red.append_message("s", "user", [{"type": "text", "text": f"key {OPENAI}"}])
    assert red.get_messages("s")[0]["content"] == [
        {"type": "text", "text": "key [REDACTED:openai-key]"}
    ]


def test_replace_messages_redacts(red: SessionDB) -> None:
    red.replace_messages("s", [{"role": "user", "content": f"DB_PASSWORD=hunter2hunter2 {AWS}"}])
    assert red.get_messages("s")[0]["content"] == (
        "DB_PASSWORD=[REDACTED:env-assignment] [REDACTED:aws-access-key]"
    )


def test_titles_are_redacted(red: SessionDB) -> None:
    red.set_session_title("s", f"fix {GITHUB}")
    assert red.get_session("s")["title"] == "fix [REDACTED:github-token]"


def test_a_bundle_import_redacts_messages_and_titles(tmp_path: Path) -> None:
    with SessionDB(tmp_path / "plain.db") as plain:
        plain.create_session("s", "cli")
        plain.set_session_title("s", f"t {GITHUB}")
        plain.append_message("s", "user", f"k {OPENAI}")
        plain.export_bundle(tmp_path / "b.jsonl")
    with SessionDB(tmp_path / "red.db", redact=True) as red:
        red.import_bundle(tmp_path / "b.jsonl")
        assert red.get_session("s")["title"] == "t [REDACTED:github-token]"
        assert red.get_messages("s")[0]["content"] == "k [REDACTED:openai-key]"


def test_a_copy_with_redact_writes_and_verifies_redacted_rows(tmp_path: Path) -> None:
    with SessionDB(tmp_path / "plain.db") as plain:
        plain.create_session("s", "cli")
        plain.set_session_title("s", f"t {GITHUB}")
        plain.append_message("s", "user", f"k {OPENAI}")
    report = copy_store(tmp_path / "plain.db", tmp_path / "copy.db", redact=True)
    assert (report.sessions_copied, report.messages_copied) == (1, 1)
    with SessionDB(tmp_path / "copy.db", read_only=True) as copy:
        assert copy.get_session("s")["title"] == "t [REDACTED:github-token]"
        assert copy.get_messages("s")[0]["content"] == "k [REDACTED:openai-key]"


def test_export_redact_changes_the_output_only(tmp_path: Path) -> None:
    with SessionDB(tmp_path / "plain.db") as plain:
        plain.create_session("s", "cli")
        plain.append_message("s", "user", f"k {OPENAI}")
        plain.export_bundle(tmp_path / "b.jsonl", redact=True)
        plain.export_markdown(tmp_path / "b.md", redact=True)
        assert plain.get_messages("s")[0]["content"] == f"k {OPENAI}"
    for name in ("b.jsonl", "b.md"):
        text = (tmp_path / name).read_text(encoding="utf-8")
        assert OPENAI not in text
        assert "[REDACTED:openai-key]" in text


# -- redacting an existing store ------------------------------------------------------------


def _store_with_secrets(path: Path, sessions: int = 3, per: int = 300) -> list[str]:
    secrets = []
    with SessionDB(path) as store:
        for n in range(sessions):
            store.create_session(f"s{n}", "cli")
            store.set_session_title(f"s{n}", f"title {n} {AWS[:-1]}{n}")
            rows = []
            for m in range(per):
                if m % 50 == 7:
                    secret = f"ghp_{n:02d}{m:04d}" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5"
                    secrets.append(secret)
                    rows.append({"role": "tool", "content": f"token {secret} printed"})
                else:
                    rows.append({"role": "user", "content": f"ordinary message {n} {m}"})
            store.replace_messages(f"s{n}", rows)
    return secrets


def test_redact_store_rewrites_counts_and_leaves_no_bytes(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    secrets = _store_with_secrets(path)
    with SessionDB(path) as store:
        dry = store.redact_secrets(dry_run=True)
        assert dry["by_pattern"] == {"github-token": 18, "aws-access-key": 3}
        assert store.search_messages(f'"{secrets[0]}"') != []
        report = store.redact_secrets()
        assert {
            k: report[k] for k in ("messages_scanned", "messages_changed", "titles_changed")
        } == {
            "messages_scanned": 900,
            "messages_changed": 18,
            "titles_changed": 3,
        }
        assert report["wal_truncated"] is True
        assert store.search_messages(f'"{secrets[0]}"') == []
        again = store.redact_secrets()
        assert (again["messages_changed"], again["titles_changed"]) == (0, 0)
        assert store.get_session("s1")["title"] == "title 1 [REDACTED:aws-access-key]"
    for file in tmp_path.iterdir():
        data = file.read_bytes()
        for secret in secrets:
            assert secret.encode() not in data, (file.name, secret)


def test_a_dry_run_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _store_with_secrets(path, sessions=1, per=60)
    with SessionDB(path) as store:
        before = store.get_messages("s0")
        store.redact_secrets(dry_run=True)
        assert store.get_messages("s0") == before


def test_redact_beside_a_writer(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    secrets = _store_with_secrets(path, sessions=2, per=600)
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\nfrom hermes_models import SessionDB\n"
            "db = SessionDB(sys.argv[1], redact=False)\n"
            "db.create_session('w', 'gateway')\n"
            "for n in range(300):\n    db.append_message('w', 'user', f'live {n}')\n",
            str(path),
        ]
    )
    try:
        result = run("redact", "--db", str(path), "--json", cwd=tmp_path)
    finally:
        assert writer.wait(timeout=120) == 0
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)[0]
    assert report["by_pattern"]["github-token"] == len(secrets)
    with SessionDB(path, read_only=True) as store:
        assert len(store.get_messages("w")) == 300
        text = json.dumps([store.get_messages(f"s{n}") for n in range(2)])
        assert all(secret not in text for secret in secrets)
        assert text.count("[REDACTED:github-token]") == len(secrets)


# -- the command line -----------------------------------------------------------------------


@pytest.mark.plaintext_file  # export of an encrypted store asks for --plaintext
def test_the_cli_redacts_imports_exports_and_says_what_it_removed(tmp_path: Path) -> None:
    with SessionDB(tmp_path / "plain.db") as plain:
        plain.create_session("s", "cli")
        plain.append_message("s", "user", f"k {OPENAI} and {GITHUB}")
        plain.export_bundle(tmp_path / "b.jsonl")
    dry = run("redact", "--dry-run", "--db", "plain.db", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout == (
        "would redact 2 secrets in 1 message and 0 titles (of 1 messages, 1 sessions)\n"
        "  github-token: 1\n"
        "  openai-key: 1\n"
    )
    shared = run("export", "--redact", "--db", "plain.db", cwd=tmp_path)
    assert shared.returncode == 0 and OPENAI not in shared.stdout
    assert "k [REDACTED:openai-key] and [REDACTED:github-token]" in shared.stdout
    imported = run("--redact", "import", "b.jsonl", "--db", "red.db", cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr
    with SessionDB(tmp_path / "red.db", read_only=True) as red:
        assert red.get_messages("s")[0]["content"] == (
            "k [REDACTED:openai-key] and [REDACTED:github-token]"
        )
    bad = run(
        "redact",
        "--db",
        "plain.db",
        cwd=tmp_path,
        env=environment(tmp_path, HERMES_MODELS_REDACT="maybe"),
    )
    assert bad.returncode == 1
    assert bad.stderr.startswith("Error: ") and "HERMES_MODELS_REDACT='maybe'" in bad.stderr


@pytest.mark.backends("sqlite", "postgresql")
def test_both_backends_redact_writes_imports_and_existing_rows(
    backend: str, tmp_path: Path, migrated_template: Path, request: pytest.FixtureRequest
) -> None:
    from conftest import fresh_store_file

    def target(name: str) -> object:
        if backend == "postgresql":
            return request.getfixturevalue("pg").new_database()
        return fresh_store_file(migrated_template, tmp_path / name)

    with SessionDB(tmp_path / "plain.db") as plain:
        plain.create_session("b", "cli")
        plain.set_session_title("b", f"t {GITHUB}")
        plain.append_message("b", "user", f"k {OPENAI}")
        plain.export_bundle(tmp_path / "b.jsonl")
    with SessionDB(target("red.db"), redact=True) as red:
        red.create_session("s", "cli")
        red.append_message("s", "tool", f"out {AWS}")
        red.import_bundle(tmp_path / "b.jsonl")
        assert red.get_messages("s")[0]["content"] == "out [REDACTED:aws-access-key]"
        assert red.get_messages("b")[0]["content"] == "k [REDACTED:openai-key]"
        assert red.get_session("b")["title"] == "t [REDACTED:github-token]"
    existing = target("old.db")
    with SessionDB(existing) as old:
        old.create_session("s", "cli")
        old.append_message("s", "user", f"k {OPENAI}")
        report = old.redact_secrets()
        assert (report["messages_changed"], report["by_pattern"]) == (1, {"openai-key": 1})
        assert report["wal_truncated"] is (None if backend == "postgresql" else True)
        assert old.get_messages("s")[0]["content"] == "k [REDACTED:openai-key]"
        assert old.search_messages("REDACTED")[0]["session_id"] == "s"
