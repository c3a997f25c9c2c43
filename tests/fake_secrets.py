"""Realistic FAKE secrets, one kind per maintained pattern, made from a seeded random
source (never real keys): ``(pattern name, secret)`` pairs, and the contexts people
paste them in."""

from __future__ import annotations

import base64
import json
import random
import string

ALNUM = string.ascii_letters + string.digits
UPPER = string.ascii_uppercase + string.digits
URLSAFE = ALNUM + "-_"


def _pick(rng: random.Random, alphabet: str, n: int) -> str:
    # A digit in every token, as real ones have (a run of letters alone is a word).
    return rng.choice(string.digits) + "".join(rng.choice(alphabet) for _ in range(n - 1))


def _b64url(data: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


def fake(kind: str, rng: random.Random) -> str:
    """One fake secret of ``kind`` (a pattern name)."""
    if kind == "openai-key":
        prefix = rng.choice(["sk-", "sk-proj-", "sk-svcacct-"])
        return prefix + _pick(rng, URLSAFE, rng.choice([48, 64, 156]))
    if kind == "anthropic-key":
        return "sk-ant-api03-" + _pick(rng, URLSAFE, 93) + "AA"
    if kind == "aws-access-key":
        return rng.choice(["AKIA", "ASIA"]) + _pick(rng, UPPER, 16)
    if kind == "aws-secret-key":
        return _pick(rng, ALNUM + "/+", 40)
    if kind == "github-token":
        if rng.random() < 0.3:
            return "github_pat_" + _pick(rng, ALNUM, 22) + "_" + _pick(rng, ALNUM, 59)
        return rng.choice(["ghp_", "gho_", "ghs_"]) + _pick(rng, ALNUM, 36)
    if kind == "gitlab-token":
        return "glpat-" + _pick(rng, URLSAFE, 20)
    if kind == "slack-token":
        return f"xoxb-{rng.randint(10**11, 10**12)}-{rng.randint(10**12, 10**13)}-" + _pick(
            rng, ALNUM, 24
        )
    if kind == "stripe-key":
        return rng.choice(["sk_live_", "sk_test_", "rk_live_"]) + _pick(rng, ALNUM, 24)
    if kind == "google-api-key":
        return "AIza" + _pick(rng, URLSAFE, 35)
    if kind == "jwt":
        head = _b64url({"alg": "HS256", "typ": "JWT"})
        body = _b64url({"sub": str(rng.randint(1, 10**9)), "exp": rng.randint(10**9, 2 * 10**9)})
        return f"{head}.{body}." + _pick(rng, URLSAFE, 43)
    if kind == "private-key-block":
        lines = [_pick(rng, ALNUM + "+/", 64) for _ in range(rng.randint(3, 8))]
        label = rng.choice(["RSA ", "EC ", "OPENSSH ", ""])
        body = "\n".join(lines)
        return f"-----BEGIN {label}PRIVATE KEY-----\n{body}\n-----END {label}PRIVATE KEY-----"
    if kind == "bearer-token":
        return _pick(rng, URLSAFE + ".", 40)
    if kind == "env-assignment":
        return _pick(rng, ALNUM + "!@%", rng.randint(12, 32))
    if kind == "url-password":
        return _pick(rng, ALNUM, 16)
    raise ValueError(kind)


KINDS = (
    "openai-key",
    "anthropic-key",
    "aws-access-key",
    "aws-secret-key",
    "github-token",
    "gitlab-token",
    "slack-token",
    "stripe-key",
    "google-api-key",
    "jwt",
    "private-key-block",
    "bearer-token",
    "env-assignment",
    "url-password",
)

#: How a secret of each kind appears in a message, ``{s}`` the secret.
CONTEXTS = {
    "aws-secret-key": ["aws_secret_access_key = {s}", 'AWS_SECRET_ACCESS_KEY="{s}"'],
    "bearer-token": [
        "curl -H 'Authorization: Bearer {s}' https://api.example.com/v1/items",
        "Authorization: Bearer {s}",
    ],
    "env-assignment": [
        "DATABASE_PASSWORD={s}",
        'export SERVICE_TOKEN="{s}"',
        "secret_key = '{s}'",
        "MY_APP_API_KEY={s} python run.py",
    ],
    "url-password": ["DATABASE_URL=postgres://app:{s}@db.internal:5432/app"],
}
GENERIC = [
    "here is my key {s} can you check why it fails?",
    "{s}",
    "export SOME_VAR={s}",
    "config:\n  credential: {s}\n",
    "Error: invalid credentials ({s}) for request 42",
]


def cases(count_per_kind: int = 20, seed: int = 11) -> list[tuple[str, str, str]]:
    """``(kind, secret, message text)`` triples, ``count_per_kind`` of each kind."""
    rng = random.Random(seed)
    out = []
    for kind in KINDS:
        for _ in range(count_per_kind):
            secret = fake(kind, rng)
            template = rng.choice(CONTEXTS.get(kind, GENERIC))
            out.append((kind, secret, template.format(s=secret)))
    return out
