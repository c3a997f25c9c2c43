"""Secrets never stored: the named patterns, and text, JSON and rows redacted with them.

A :class:`Redactor` holds an ordered set of named patterns (:data:`PATTERNS`,
plus any a user adds). Each match is replaced by ``[REDACTED:<name>]``; a
pattern with a group named ``secret`` replaces that group only, so
``API_KEY=[REDACTED:env-assignment]`` still says which setting it was. The
specific patterns (a provider's token shape) run before the generic ones
(a bearer header, an ``.env``-style assignment), so a key is named for its
provider where its shape tells it.

JSON text (``tool_calls``, content stored as JSON) is parsed and every string
value redacted, a string that itself holds a JSON object or list (a tool call's
``arguments``) one level further: the result is always valid JSON, dumped again
only when something was removed.

Whether a store redacts is a setting of its handle (:func:`settings`): the
``redact`` argument of :func:`~hermes_models.store.connect` and ``SessionDB``,
else the environment variable :data:`REDACT_VARIABLE`; off unless asked. Users
add patterns with :func:`redactor` ``(extra=[(name, regex), ...])`` or in a file
named by :data:`PATTERNS_VARIABLE` (one ``name: regex`` a line, ``#`` comments).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .content import CONTENT_JSON_PREFIX

#: The environment variable that turns redaction on (``1``/``true``/``yes``/``on``) or off.
REDACT_VARIABLE = "HERMES_MODELS_REDACT"
#: The environment variable naming a file of extra patterns (``name: regex`` a line).
PATTERNS_VARIABLE = "HERMES_MODELS_REDACT_PATTERNS"

#: Columns redacted as text, and as JSON text, wherever a row is written.
TEXT_COLUMNS = frozenset({"content", "reasoning", "reasoning_content", "title"})
JSON_COLUMNS = frozenset({"tool_calls"})

_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")

# A token's characters, and a look-ahead that wants a digit among them: a run of
# letters alone is a word, not a key.
_TOK = r"[A-Za-z0-9_-]"
_HAS_DIGIT = r"(?=[A-Za-z0-9_-]{0,255}[0-9])"
_IDENTIFIER = r"[a-z]+(?:[._][a-z]+)+"
_SECRET_NAME = (
    r"[A-Za-z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIALS?|"
    r"key|token|secret|password|passwd|passphrase|credentials?|Key|Token|Secret|Password)"
)

#: The maintained patterns, most specific first: (name, regex).
PATTERNS: tuple[tuple[str, str], ...] = (
    (
        "private-key-block",
        # The body stops at the next run of five dashes: the END line, or another
        # BEGIN (a block cut off runs to the end of its base64). Linear in the text.
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
        r"(?:(?:[^-]|-(?!----))*-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
        r"|[A-Za-z0-9+/=\s\\]*)",
    ),
    ("anthropic-key", rf"\bsk-ant-(?:api|admin|oat|sid)[0-9]{{2}}-{_TOK}{{20,}}"),
    ("openai-key", rf"\bsk-(?:proj-|svcacct-|admin-|None-)?{_HAS_DIGIT}{_TOK}{{32,}}"),
    ("aws-access-key", r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b"),
    (
        "aws-secret-key",
        r"(?i:aws_?secret_?(?:access_?)?key|secretaccesskey)[\"']?\s*[:=]\s*[\"']?"
        r"(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])",
    ),
    ("github-token", r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b"),
    ("gitlab-token", rf"\bgl(?:pat|dt|ptt|rt|cbt|soat)-{_TOK}{{20,}}"),
    ("slack-token", r"\bxox[abposre]-[A-Za-z0-9-]{10,}"),
    (
        "slack-webhook",
        r"https://hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9_/]{20,}",
    ),
    ("stripe-key", r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"),
    ("google-api-key", rf"\bAIza{_TOK}{{35}}(?!{_TOK})"),
    ("huggingface-token", r"\bhf_[A-Za-z0-9]{30,}\b"),
    ("npm-token", r"\bnpm_[A-Za-z0-9]{36}\b"),
    ("sendgrid-key", rf"\bSG\.{_TOK}{{22}}\.{_TOK}{{43}}(?!{_TOK})"),
    (
        "jwt",
        r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    ),
    (
        "bearer-token",
        r"(?i:\bbearer)\s+(?P<secret>(?=[A-Za-z0-9._~+/=-]{0,255}[0-9])[A-Za-z0-9._~+/-]{16,}=*)",
    ),
    (
        "basic-auth",
        r"(?i:\bauthorization)[\"']?\s*[:=]\s*[\"']?(?i:basic)\s+(?P<secret>[A-Za-z0-9+/]{8,}=*)",
    ),
    (
        "url-password",
        # Bounded parts: a long run of letters and dots is never scanned again and again.
        r"\b[A-Za-z][A-Za-z0-9+.-]{0,31}://[^\s:/@\"'<>]{1,128}:"
        r"(?P<secret>[^\s@/\"'<>\[\]]{3,128})@",
    ),
    (
        "env-assignment",
        # KEY=value (no spaces), or KEY = "value" / KEY: 'value' quoted. Values that
        # are references or placeholders ($VAR, <...>, {...}, paths) are left alone.
        rf"\b{_SECRET_NAME}\b(?:"
        # A value that is a lowercase dotted or snake_case name (``"hermes_models.import"``,
        # a constant named ``..._KEY``) is an identifier, not a secret.
        rf"=(?!{_IDENTIFIER}(?=[\s;,'\"]|$))"
        r"(?P<secret>[A-Za-z0-9_\-.+=:@!%^&*~]{8,})(?=[\s;,'\"]|$)"
        rf"|\s*[:=]\s*(?P<q>[\"'])(?!{_IDENTIFIER}(?P=q))"
        r"(?P<quoted>[^\"'\s$<{/~\[\\][^\"'\n\\]{7,})(?P=q))",
    ),
)


class RedactionPatternError(ValueError):
    """A pattern a user gave cannot be used: a bad name or a regex that does not compile."""


class Redactor:
    """Named patterns applied in order; ``text``, ``json_text`` and ``row`` redact.

    Two redactors with the same patterns are equal (a store handle is found again by
    its settings, these included).
    """

    __slots__ = ("_compiled", "patterns")

    def __init__(self, patterns: Iterable[tuple[str, str]] = PATTERNS) -> None:
        self.patterns: tuple[tuple[str, str], ...] = tuple(patterns)
        compiled = []
        seen: set[str] = set()
        for name, regex in self.patterns:
            if not isinstance(name, str) or not _NAME.fullmatch(name):
                raise RedactionPatternError(
                    f"redaction pattern name {name!r}: expected lowercase letters, digits, "
                    "'-' or '_', at most 64"
                )
            if name in seen:
                raise RedactionPatternError(f"redaction pattern {name!r} is named twice")
            seen.add(name)
            if not isinstance(regex, str) or not regex:
                raise RedactionPatternError(f"redaction pattern {name!r}: the regex is empty")
            try:
                pattern = re.compile(regex)
            except re.error as exc:
                raise RedactionPatternError(
                    f"redaction pattern {name!r}: invalid regex {regex!r}: {exc}"
                ) from None
            if pattern.search("") is not None:
                raise RedactionPatternError(
                    f"redaction pattern {name!r}: the regex {regex!r} matches empty text"
                )
            compiled.append((name, pattern))
        self._compiled = tuple(compiled)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Redactor) and self.patterns == other.patterns

    def __hash__(self) -> int:
        return hash(self.patterns)

    def __repr__(self) -> str:
        return f"Redactor({len(self.patterns)} patterns)"

    @property
    def names(self) -> tuple[str, ...]:
        """The patterns' names, in the order they run."""
        return tuple(name for name, _ in self.patterns)

    # -- text -------------------------------------------------------------------------------

    def text(self, value: str, counts: Counter[str] | None = None) -> str:
        """``value`` with every match replaced by ``[REDACTED:<name>]``; each replacement
        is counted in ``counts`` by pattern name."""
        for name, pattern in self._compiled:
            if pattern.search(value) is None:
                continue
            marker = f"[REDACTED:{name}]"

            def replace(match: re.Match[str], marker: str = marker, name: str = name) -> str:
                if counts is not None:
                    counts[name] += 1
                groups = match.groupdict()
                for group in ("secret", "quoted"):
                    if groups.get(group) is not None:
                        start, end = match.span(group)
                        whole = match.group(0)
                        base = match.start()
                        return whole[: start - base] + marker + whole[end - base :]
                return marker

            value = pattern.sub(replace, value)
        return value

    def json_text(self, value: str, counts: Counter[str] | None = None) -> str:
        """JSON text with every string value redacted, still valid JSON; text that is not
        JSON is redacted as text."""
        try:
            parsed = json.loads(value)
        except (ValueError, RecursionError):
            return self.text(value, counts)
        found: Counter[str] = Counter()
        cleaned = self._walk(parsed, found)
        if not found:
            return value
        if counts is not None:
            counts.update(found)
        return json.dumps(cleaned, ensure_ascii=False)

    def _walk(self, value: Any, counts: Counter[str]) -> Any:
        if isinstance(value, str):
            stripped = value.lstrip()
            if stripped[:1] in ("{", "["):  # a tool call's arguments: JSON in a string
                inner = self.json_text(value, counts)
                return inner
            return self.text(value, counts)
        if isinstance(value, list):
            return [self._walk(item, counts) for item in value]
        if isinstance(value, dict):
            return {key: self._walk(item, counts) for key, item in value.items()}
        return value

    def content(self, value: Any, counts: Counter[str] | None = None) -> Any:
        """Stored message content redacted: text as text, prefixed JSON as JSON."""
        if not isinstance(value, str):
            return value
        if value.startswith(CONTENT_JSON_PREFIX):
            prefix = len(CONTENT_JSON_PREFIX)
            return CONTENT_JSON_PREFIX + self.json_text(value[prefix:], counts)
        return self.text(value, counts)

    # -- rows ----------------------------------------------------------------------------------

    def row(
        self,
        columns: Sequence[str],
        values: Sequence[Any],
        counts: Counter[str] | None = None,
    ) -> list[Any]:
        """A row about to be written (``values`` in ``columns`` order) with its message
        text, tool calls and title redacted."""
        out = list(values)
        for index, column in enumerate(columns):
            value = out[index]
            if not isinstance(value, str):
                continue
            if column == "content":
                out[index] = self.content(value, counts)
            elif column in JSON_COLUMNS:
                out[index] = self.json_text(value, counts)
            elif column in TEXT_COLUMNS:
                out[index] = self.text(value, counts)
        return out

    def rows(self, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> Iterable[list[Any]]:
        """:meth:`row` over a stream of rows."""
        for values in rows:
            yield self.row(columns, values)


def read_patterns(path: str | os.PathLike[str]) -> list[tuple[str, str]]:
    """The patterns of a file: one ``name: regex`` a line; blank lines and lines
    starting with ``#`` are skipped.

    Raises:
        RedactionPatternError: a line is not ``name: regex``, naming the file and line.
        OSError: the file cannot be read.
    """
    found = []
    text = Path(path).read_text(encoding="utf-8")
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        name, colon, regex = stripped.partition(":")
        if not colon or not regex.strip():
            raise RedactionPatternError(
                f"{path}:{number}: expected 'name: regex', got {stripped!r}"
            )
        found.append((name.strip(), regex.strip()))
    return found


def redactor(
    extra: Iterable[tuple[str, str]] | Mapping[str, str] = (),
    *,
    patterns_file: str | os.PathLike[str] | None = None,
    builtin: bool = True,
) -> Redactor:
    """A :class:`Redactor`: the maintained :data:`PATTERNS` (unless ``builtin=False``),
    then the patterns of ``patterns_file``, then ``extra`` ((name, regex) pairs or a
    mapping). A user pattern named as a maintained one replaces it in its place.

    Raises:
        RedactionPatternError: a bad name, a name given twice, or a regex that does
        not compile (the message names the pattern).
    """
    added = list(extra.items()) if isinstance(extra, Mapping) else list(extra)
    if patterns_file is not None:
        added = read_patterns(patterns_file) + added
    for item in added:
        if not isinstance(item, tuple) or len(item) != 2:
            raise RedactionPatternError(f"a redaction pattern is a (name, regex) pair: {item!r}")
    names = [name for name, _ in added]
    twice = sorted({str(name) for name in names if names.count(name) > 1})
    if twice:
        raise RedactionPatternError(f"redaction pattern {twice[0]!r} is named twice")
    chosen: dict[str, str] = dict(PATTERNS) if builtin else {}
    chosen.update(added)
    # The generic patterns run last, after every specific one a user added.
    generic = ("bearer-token", "basic-auth", "url-password", "env-assignment")
    ordered = [(n, r) for n, r in chosen.items() if n not in generic]
    ordered += [(n, chosen[n]) for n in generic if n in chosen]
    return Redactor(ordered)


def check_redact(value: Any, argument: str = "redact") -> bool | None:
    """``redact`` as a flag: True, False or None (not given); text as the variable takes it."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        low = value.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
    raise ValueError(f"{argument}={value!r}: expected true or false (1/0, yes/no, on/off)")


def settings(redact: Any = None) -> Redactor | None:
    """The redaction a store handle applies: ``redact`` (True, False, or a
    :class:`Redactor` of one's own), else :data:`REDACT_VARIABLE`; None when off.
    When on without a redactor given, the maintained patterns and those of the file
    :data:`PATTERNS_VARIABLE` names.

    Raises:
        ValueError: ``redact`` or the variable is not a flag.
        RedactionPatternError: the patterns file holds a bad pattern.
        OSError: the patterns file cannot be read.
    """
    if isinstance(redact, Redactor):
        return redact
    chosen = check_redact(redact)
    if chosen is None:
        chosen = check_redact(os.environ.get(REDACT_VARIABLE), REDACT_VARIABLE)
    if not chosen:
        return None
    return default_redactor()


def asked(redact: Any, argument: str = "redact") -> Redactor | None:
    """The redaction one call asks for, the environment aside (an export's ``redact``):
    a :class:`Redactor` as given, True the maintained patterns (and the file's),
    False or None none."""
    if isinstance(redact, Redactor):
        return redact
    return default_redactor() if check_redact(redact, argument) else None


_default: dict[str | None, Redactor] = {}


def default_redactor() -> Redactor:
    """The maintained patterns and those of the :data:`PATTERNS_VARIABLE` file (read
    once per file name)."""
    path = os.environ.get(PATTERNS_VARIABLE) or None
    found = _default.get(path)
    if found is None:
        found = _default[path] = redactor(patterns_file=path)
    return found
