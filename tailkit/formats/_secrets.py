"""
Keep the secrets inside stored text out of the store, found by their shape.

`tailkit.formats._scrub` drops the values stored under credential *names*; this finds
credentials by their *shape* inside any text.

An error message quotes the key it refused (``Incorrect API key provided: sk-proj-…``), an
``api_base`` carries a password (``https://user:pass@host``) or a key in its query
(``?key=AIza…``, ``&X-Amz-Signature=…``), an exception text holds an ``Authorization: Bearer …``
header. One regular expression finds them all, and each secret becomes `MARK` while the rest
stays readable: ``https://user:[redacted]@host``, ``?key=[redacted]&alt=json``,
``Authorization: [redacted]``, ``Bearer [redacted]``, and a bare key (``sk-…``, ``sk-ant-…``,
``AKIA…``, ``ghp_…``, ``AIza…``, ``hf_…``, ``xox…-``, a JWT) as ``[redacted]`` alone.

The expression is written in the common subset of RE2 (DuckDB's ``regexp_replace``, which
applies it to millions of rows inside the read) and Python's ``re`` (`scrub_text`), and it
never matches a quote or a backslash inside a secret: applied to JSON text, it keeps the JSON's
strings and escapes whole. Only the text columns that hold free text are scrubbed (``attrs``,
``error_type``, a reject's ``detail`` and ``raw``): identifiers (``call_id``, ``model``, …)
are names, kept as they are.
"""

from __future__ import annotations

import re


MARK = "[redacted]"
"""What a secret becomes."""

_PARAMS = (
    r"(?:[A-Za-z0-9_.-]*[-_.])?(?:api[-_]?key|apikey|key|token|secret|password|passwd|pwd"
    r"|signature|sig|credential|auth)"
)
"""A query parameter or ``name=value`` pair that holds a secret (case-insensitive): ``key``,
``api_key``, ``access_token``, ``X-Amz-Signature``, ``X-Amz-Credential``, ``sig`` (Azure),
``client_secret``, ``password``, …"""

_HEADERS = (
    r"(?:proxy-)?authorization|x-api-key|api-key|x-goog-api-key|ocp-apim-subscription-key"
    r"|x-auth-token|set-cookie|cookie"
    r"|(?:[A-Za-z0-9_.-]*[-_.])?(?:api[-_]?key|apikey|secret|password|passwd"
    r"|(?:access|auth|refresh|session)[-_]?token)"
)
"""Headers, and names of credentials, quoted as ``Name: value`` in error text, or as a
Python dict's or an inner JSON's pair (``{'api_key': '…'}``, ``{\\"api_key\\": \\"…\\"}``)
(case-insensitive)."""

_SHAPES = "|".join(
    [
        r"sk-[A-Za-z0-9_-]{8,}",  # OpenAI, Anthropic (sk-ant-), DeepSeek, Langfuse (sk-lf-)
        r"[sr]k_(?:live|test)_[A-Za-z0-9]{8,}",  # Stripe
        r"A[KS]IA[A-Z0-9]{16}",  # AWS access key ids
        r"gh[pousr]_[A-Za-z0-9]{20,}",  # GitHub
        r"github_pat_[A-Za-z0-9_]{20,}",
        r"glpat-[A-Za-z0-9_-]{20,}",  # GitLab
        r"xox[abprs]-[A-Za-z0-9-]{10,}",  # Slack
        r"AIza[A-Za-z0-9_-]{30,}",  # Google
        r"(?:hf|gsk|r8)_[A-Za-z0-9]{20,}",  # Hugging Face, Groq, Replicate
        r"(?:xai|pplx|nvapi)-[A-Za-z0-9_-]{20,}",  # xAI, Perplexity, NVIDIA
        r"eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*",  # a JWT
    ]
)
"""Keys recognised by their prefix and length alone."""

_START = r"(?:^|[^A-Za-z0-9_.-]|\\[nrtbf])"
"""What comes before a name or a key: not a part of a word, or a JSON escape (``\\n``), since
the expression also reads the JSON text of ``attrs`` (an error's text often has line breaks)."""

SECRET_PATTERN = (
    # https://user:PASSWORD@host (not host:8080/path@x: the password stops at / ? #)
    r"(://[^\s/?#@:\"'\\]*:)[^\s/?#@\"'\\]+(@)"
    # ?key=VALUE, &X-Amz-Signature=VALUE, api_key=VALUE in text
    rf"|({_START}(?i:{_PARAMS})=)[^\s&#\"'\\<>(){{}}\[\],;]+"
    # Authorization: Bearer VALUE, x-api-key: VALUE
    rf"|({_START}(?i:{_HEADERS})\\?[\"']?\s*[:=]\s*\\?[\"']?)"
    r"(?i:(?:bearer|basic|token|digest)\s+)?[^\s\"'\\,;]+"
    # Bearer VALUE
    r"|((?i:bearer)\s+)[A-Za-z0-9._~+/=-]{8,}"
    # a key by its shape
    rf"|({_START})(?:{_SHAPES})"
)
"""The secrets (RE2 and Python syntax alike); the groups keep what goes around each one."""

_REPLACEMENT = rf"\1\3\4\5\6{MARK}\2"
_SECRET_RE = re.compile(SECRET_PATTERN, re.ASCII)


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"  # as `tailkit.formats._sql.literal` (no cycle)


def scrub_text(text: str) -> str:
    """
    ``text`` with every secret found by `SECRET_PATTERN` replaced by `MARK`.
    """
    return _SECRET_RE.sub(_REPLACEMENT, text)


def scrub_values(expr: str) -> str:
    """
    SQL for the text ``expr`` with its secrets replaced by `MARK` (NULL stays NULL).

    ``expr`` is repeated: give a column, not a computation. Most values hold no secret, and
    a match costs less than a replace (no copy): only the values that match are rewritten.
    """
    pattern = _literal(SECRET_PATTERN)
    return (
        f"CASE WHEN regexp_matches({expr}, {pattern}) "
        f"THEN regexp_replace({expr}, {pattern}, {_literal(_REPLACEMENT)}, 'g') ELSE {expr} END"
    )


def scrub_values_json(expr: str) -> str:
    """
    SQL for the JSON value ``expr`` with the secrets inside its text replaced, still JSON.

    A secret is a string's part, so the text stays JSON; a secret that was a bare JSON value
    (a number after ``"x-api-key":``) would not, and then the whole value gives way to
    ``{"redacted": true}`` rather than keep it.
    """
    text = f"CAST({expr} AS VARCHAR)"
    pattern = _literal(SECRET_PATTERN)
    scrubbed = f"regexp_replace({text}, {pattern}, {_literal(_REPLACEMENT)}, 'g')"
    return (
        f"CASE WHEN regexp_matches({text}, {pattern}) THEN coalesce(TRY_CAST({scrubbed} AS "
        f"JSON), '{{\"redacted\": true}}'::JSON) ELSE {expr} END"
    )
