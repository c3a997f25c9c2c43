"""The search query language: what a user types, made safe for FTS5 and LIKE.

A query is read as terms joined by ``OR``, ``AND`` and ``NOT`` (uppercase,
between terms). A balanced ``"quoted phrase"`` is one term; so is any other
run of non-space characters, which is matched as a phrase, so ``chat-send``,
``P2.2`` and ``simulate.p2.test.ts`` find those exact sequences. A trailing
``*`` asks for a prefix. Everything else FTS5 would read as syntax (stray
quotes, parentheses, braces, colons, ``^``, ``+``, dangling operators, NUL
and other control characters) is neutralised: the parsed query renders every
term as a quoted FTS5 string, so no input can make a ``MATCH`` fail.

Precedence is FTS5's: ``NOT`` binds tightest, then ``AND`` (also implied
between adjacent terms), then ``OR``. The parsed form is a disjunction of
groups, each a set of required terms and a set of excluded terms, which is
what lets one query mix index lookups and ``LIKE`` scans term by term.

Terms containing Chinese, Japanese or Korean characters are substring terms:
from three characters on they go to the trigram index, shorter ones to
``LIKE`` (no trigram can match them).
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass

from ..driver import whole_arguments
from ..store import CJK_RANGES, LIKE, TRIGRAM, WORDS

OPERATORS = frozenset({"AND", "OR", "NOT"})

#: Terms kept from one query (a term repeated in a group, or a repeated
#: group, counts once); the rest are dropped (a pasted page of text would
#: otherwise build an SQL expression SQLite refuses).
MAX_TERMS = 64

#: The most words a term looked up in the word index may hold: FTS5 reads the
#: whole list of a phrase's word once for each time it appears, so ``a*a*a*…`` of
#: 10,000 words took 60 s and 350 MB on 20,000 messages (256: 0.4 s, 36 MB).
MAX_TERM_WORDS = 256

#: The longest query read: a longer one is refused as a whole, with a warning in
#: the log (cutting it would find what it does not say). Reading a million repeated
#: words took 5 s, past the search's time budget; a CJK term of a million
#: characters ran for minutes.
MAX_QUERY_CHARS = 65536

#: The shortest substring the trigram index can find.
TRIGRAM_MIN_CHARS = 3

#: Where a term is looked up: the BM25 word index, the trigram index, or LIKE.

#: The lowest code point of :data:`CJK_RANGES`: characters below it are not looked up.
_CJK_FROM = min(lo for lo, _ in CJK_RANGES)
_CONTROL = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")
#: What ends a word: a space or a quote.
_WORD_END = re.compile(r'[\s"]')
#: A word as the index's tokenizer reads one (near enough to count them).
_INDEX_WORD = re.compile(r"[^\W_]+")

logger = logging.getLogger("hermes_models")


class _TooLong(Exception):
    """The query, or one of its terms, is longer than it may be."""

    def __init__(self, what: str, length: int, most: int, unit: str = "characters") -> None:
        super().__init__(what, length, most, unit)
        self.what, self.length, self.most, self.unit = what, length, most, unit


def _checked(term: Term) -> Term:
    """``term``, unless the word index would hold more than :data:`MAX_TERM_WORDS` of
    its words.

    Raises:
        _TooLong: it would.
    """
    if term.route == WORDS:
        words = sum(1 for _ in _INDEX_WORD.finditer(term.text))
        if words > MAX_TERM_WORDS:
            raise _TooLong("a term of the query", words, MAX_TERM_WORDS, "words")
    return term


def contains_cjk(text: str) -> bool:
    """True when ``text`` has a character of :data:`CJK_RANGES`.

    A loop, not a regular expression: compiling a character class of these ranges
    takes Python 4 ms (it walks every code point of them), paid by the first
    search of every process, and the texts asked about are a query's terms.
    """
    for char in text:
        code = ord(char)
        if code >= _CJK_FROM and any(lo <= code <= hi for lo, hi in CJK_RANGES):
            return True
    return False


def escape_like(text: str) -> str:
    """``text`` with ``\\``, ``%`` and ``_`` escaped for ``LIKE ... ESCAPE '\\'``."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def ascii_lower(text: str) -> str:
    """``text`` lowercased the way SQLite's ``lower()`` does: ASCII letters only."""
    return text.translate(_ASCII_LOWER)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


@dataclass(frozen=True)
class Term:
    """One searchable string: a word, a phrase, or a CJK substring."""

    text: str
    prefix: bool = False

    @functools.cached_property
    def cjk(self) -> bool:
        """True when the term is matched as a substring (it has CJK characters)."""
        return contains_cjk(self.text)

    @functools.cached_property
    def route(self) -> str:
        """:data:`WORDS`, :data:`TRIGRAM` or :data:`LIKE`, by the characters alone."""
        if not self.cjk:
            return WORDS
        return TRIGRAM if len(self.text) >= TRIGRAM_MIN_CHARS else LIKE

    def fts(self) -> str:
        """The term as an FTS5 string: quoted, ``*`` appended for a prefix."""
        star = "*" if self.prefix and not self.cjk else ""
        return '"' + self.text.replace('"', '""') + '"' + star

    def like(self) -> str:
        """A ``LIKE`` pattern finding the term anywhere (wildcards escaped)."""
        return "%" + escape_like(self.text) + "%"


@dataclass(frozen=True)
class Group:
    """Terms that must all match (``include``) and terms that must not (``exclude``)."""

    include: tuple[Term, ...]
    exclude: tuple[Term, ...] = ()

    def fts(self) -> str:
        """The group as an FTS5 expression."""
        text = " AND ".join(term.fts() for term in self.include)
        for term in self.exclude:
            text += " NOT " + term.fts()
        return text


@dataclass(frozen=True)
class SearchQuery:
    """A parsed query: matches when any of its groups matches."""

    groups: tuple[Group, ...]

    def __bool__(self) -> bool:
        return bool(self.groups)

    def terms(self) -> tuple[Term, ...]:
        """Every term, included or excluded, in order."""
        return tuple(t for g in self.groups for t in (*g.include, *g.exclude))

    def positive_terms(self) -> tuple[Term, ...]:
        """The terms a hit contains (the ones a snippet marks)."""
        return tuple(t for g in self.groups for t in g.include)

    def routes(self) -> frozenset[str]:
        """The routes of all terms."""
        return frozenset(term.route for term in self.terms())

    def fts(self) -> str:
        """The whole query as one FTS5 expression."""
        if len(self.groups) == 1:
            return self.groups[0].fts()
        return " OR ".join(f"({group.fts()})" for group in self.groups)


def _trim(word: str) -> str:
    start, end = 0, len(word)
    while start < end and not word[start].isalnum():
        start += 1
    while end > start and not word[end - 1].isalnum():
        end -= 1
    return word[start:end]


def _tokens(text: str) -> Iterator[str | Term]:
    """Operators (as strings) and terms, in order, read as they are asked for (a query
    of a million words is read as far as its first :data:`MAX_TERMS` terms); stray
    syntax dropped.

    Control characters and lone surrogates (which SQLite cannot take) count as spaces.

    Raises:
        _TooLong: a term for the word index has over :data:`MAX_TERM_WORDS` words.
    """
    text = _CONTROL.sub(" ", text)
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        if ch == '"':
            close = text.find('"', i + 1)
            if close < 0:
                i += 1  # an unbalanced quote is dropped
                continue
            phrase = text[i + 1 : close].strip()
            prefix = text.startswith("*", close + 1)
            if any(c.isalnum() for c in phrase):
                yield _checked(Term(phrase, prefix))
            i = close + 1
            while i < n and text[i] == "*":
                i += 1
            continue
        found = _WORD_END.search(text, i)
        end = n if found is None else found.start()
        word = text[i:end]
        i = end
        if word in OPERATORS:
            yield word
            continue
        core = _trim(word)
        if core:
            stem = word.rstrip("*")
            yield _checked(Term(core, stem != word and stem.endswith(core)))


def _same(term: Term) -> tuple[str, bool]:
    """What makes two terms find the same messages (every route folds ASCII case)."""
    return ascii_lower(term.text), term.prefix


def parse(text: str | None) -> SearchQuery:
    """Parse what a user typed; an empty :class:`SearchQuery` when nothing is searchable,
    or when the query is longer than :data:`MAX_QUERY_CHARS` or a term for the word
    index has over :data:`MAX_TERM_WORDS` words (refused, with a warning in the log).

    Never raises for any string.
    """
    if text is None:
        return SearchQuery(())
    if not isinstance(text, str):
        raise TypeError(f"query must be str, not {type(text).__name__}")
    try:
        if len(text) > MAX_QUERY_CHARS:
            raise _TooLong("the query", len(text), MAX_QUERY_CHARS)
        return _parsed(text)
    except _TooLong as exc:
        logger.warning(
            "search refused: %s has %d %s, more than the %d %s it may have; nothing was searched",
            exc.what,
            exc.length,
            exc.unit,
            exc.most,
            exc.unit,
        )
        return SearchQuery(())


def _parsed(text: str) -> SearchQuery:
    groups: list[Group] = []
    include: list[Term] = []
    exclude: list[Term] = []
    negate = False
    count = 0

    seen: set[tuple[frozenset[tuple[str, bool]], frozenset[tuple[str, bool]]]] = set()

    def close_group() -> None:
        nonlocal count
        # A repeated group adds nothing to an OR ("x OR x" is "x"), and its terms do
        # not count toward MAX_TERMS; nor do those of a group with nothing to include.
        key = (frozenset(map(_same, include)), frozenset(map(_same, exclude)))
        if include and key not in seen:
            seen.add(key)
            groups.append(Group(tuple(include), tuple(exclude)))
        else:
            count -= len(include) + len(exclude)
        include.clear()
        exclude.clear()

    for token in _tokens(text):
        if isinstance(token, str):
            if token == "OR":
                close_group()
                negate = False
            elif token == "NOT":
                negate = bool(include)  # NOT needs a term on its left
            continue
        if count >= MAX_TERMS:
            break
        terms = exclude if negate else include
        negate = False
        if _same(token) in map(_same, terms):
            continue  # "x x" is "x"
        count += 1
        terms.append(token)
    close_group()
    return SearchQuery(tuple(groups))


# -- snippets made in Python -----------------------------------------------------------

#: Characters of a snippet cut from text (LIKE hits, JSON content).
SNIPPET_CHARS = 120
MARK_OPEN, MARK_CLOSE, ELLIPSIS = ">>>", "<<<", "..."


def _pattern(term: Term) -> str:
    if term.cjk:
        return re.escape(term.text)
    words = [w for w in re.split(r"[\W_]+", term.text) if w]
    if not words:
        return re.escape(term.text)
    body = r"[\W_]+".join(re.escape(w) for w in words)
    tail = r"[^\W_]*" if term.prefix else r"(?![^\W_])"
    return r"(?<![^\W_])" + body + tail


def term_regex(terms: tuple[Term, ...]) -> re.Pattern[str] | None:
    """One case-insensitive regex finding any of ``terms`` (None when there are none)."""
    patterns = sorted({_pattern(t) for t in terms}, key=len, reverse=True)
    if not patterns:
        return None
    return re.compile("|".join(patterns), re.IGNORECASE)


def term_finder(terms: tuple[Term, ...]) -> re.Pattern[str] | str | None:
    """What :func:`highlight` looks for to mark ``terms``: the text itself when they are
    one substring term whose characters have no case (CJK, digits, punctuation), which
    :func:`term_regex` matches exactly as written; else :func:`term_regex`."""
    texts = {t.text for t in terms}
    if len(texts) == 1 and all(t.cjk for t in terms):
        (text,) = texts
        if text.lower() == text == text.upper():
            return text
    return term_regex(terms)


def highlight(text: str, regex: re.Pattern[str] | str | None, width: int = SNIPPET_CHARS) -> str:
    """About ``width`` characters of ``text`` centred on the first match, matches
    marked ``>>>``/``<<<``; the start of ``text`` when nothing matches. ``regex`` may be
    a string found as it is (see :func:`term_finder`)."""
    if isinstance(regex, str):
        at = text.find(regex)
        if at < 0:
            return _start_of(text, width)
        if len(text) <= width:  # the whole text is the snippet
            return text.replace(regex, MARK_OPEN + regex + MARK_CLOSE)
        start, end = _around(text, at, at + len(regex), width)
        marked = text[start:end].replace(regex, MARK_OPEN + regex + MARK_CLOSE)
    else:
        first = regex.search(text) if regex is not None else None
        if first is None:
            return _start_of(text, width)
        start, end = _around(text, first.start(), first.end(), width)
        marked = first.re.sub(_marked, text[start:end])
    return (ELLIPSIS if start > 0 else "") + marked + (ELLIPSIS if end < len(text) else "")


def _start_of(text: str, width: int) -> str:
    return text[:width] + (ELLIPSIS if len(text) > width else "")


def _around(text: str, found: int, until: int, width: int) -> tuple[int, int]:
    """Where a snippet of ``width`` characters centred on ``text[found:until]`` starts
    and ends."""
    pad = max(0, width - (until - found)) // 2
    start = max(0, found - pad)
    end = max(until, min(len(text), start + width))
    return max(0, min(start, end - width)), end


def _marked(match: re.Match[str]) -> str:
    return MARK_OPEN + match.group(0) + MARK_CLOSE


# -- substring terms found in one pass ---------------------------------------------------


class Matcher:
    """Finds which of several substring terms each message holds, the way ``LIKE`` does.

    A message holds a term when its content, tool name or tool calls
    contain it, ASCII letters compared without case (as ``LIKE``), the whole
    text read (``LIKE`` stops at a NUL). :meth:`visit` is called as an SQL
    function on every message of one scan: a regular-expression search for
    all terms at once passes over most messages, and the few that hold
    something are sorted by term into :attr:`holders`. One scan answers
    every term of a query.
    """

    def __init__(self, terms: tuple[Term, ...]) -> None:
        self.needles = tuple(ascii_lower(term.text) for term in terms)
        #: For each needle, the ids of the messages holding it.
        self.holders: dict[str, list[int]] = {needle: [] for needle in self.needles}
        alternatives = sorted(self.holders, key=len, reverse=True)
        regex = re.compile("|".join(map(re.escape, alternatives)), re.IGNORECASE | re.ASCII)
        self._search = regex.search
        self._singles = {needle for needle in self.holders if len(needle) == 1}
        self._others = [needle for needle in self.holders if len(needle) > 1]
        self._pairs = set(self._others) if all(len(n) == 2 for n in self._others) else None
        #: Whether case matters: only when a needle has an ASCII letter.
        self._fold = any(c.isascii() and c.isalpha() for needle in self.holders for c in needle)

    def visit(
        self,
        message_id: int,
        content: object,
        tool_name: object,
        tool_calls: object,
        mask: int = 0,
    ) -> int:
        """Note which needles a message holds; 0 always. Text holding a NUL comes as
        bytes, flagged in ``mask`` (see :func:`hermes_models.search.plan.scan_statement`).

        Raises:
            UndecodedText: text that is not UTF-8 came as None (pysqlite3), so that the
                SQL call fails as on the standard library's module; nothing else raises.
        """
        values: tuple[object, ...] = (content, tool_name, tool_calls)
        if mask:  # raises UndecodedText: the scan then reads the row's text as bytes
            values = whole_arguments(mask, values)
        try:
            columns = [str(c) for c in values if c is not None]
            search = self._search
            if any(search(column) is not None for column in columns):
                self._sort(message_id, columns)
        except Exception:  # a value of an odd type: held nothing, never an error in SQL
            pass
        return 0

    def _sort(self, message_id: int, columns: list[str]) -> None:
        # Terms hold no control characters, so none spans the NUL joining the columns;
        # bytes.lower() changes ASCII letters only, as LIKE compares them.
        text = "\x00".join(columns)
        if self._fold:
            text = text.encode("utf-8", "surrogatepass").lower().decode("utf-8", "surrogatepass")
        holders = self.holders
        for char in self._singles.intersection(text):
            holders[char].append(message_id)
        if self._pairs is not None and len(self._pairs) > 16 and len(text) < 4096:
            for pair in self._pairs.intersection({text[i : i + 2] for i in range(len(text) - 1)}):
                holders[pair].append(message_id)
        else:
            for needle in self._others:
                if needle in text:
                    holders[needle].append(message_id)
