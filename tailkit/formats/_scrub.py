"""
Keep credentials and message content out of the store: attrs and rejected rows alike.

A log line can carry an API key, an ``Authorization`` header, cookies and the prompt itself.
Nothing of that is needed to study latency, and the store is a plain file. Each format already
leaves message content out of ``attrs``; the same fields must not come back through a reject's
``raw`` text. Everything here is SQL over JSON text, so it runs inside DuckDB with the read:

- `drop_keys` removes named top-level keys from a JSON object (``json_merge_patch`` with
  nulls: a patch's null deletes the key).
- `scrub` also removes, at any depth, every ``"name": value`` pair whose name looks like a
  credential, when the value is a string, number, boolean or null (a regular expression over
  the JSON text: nested objects are kept, but the secrets inside them are found by their own
  names, e.g. ``headers.Authorization``).

Token *counts* (``prompt_tokens``, ``total_tokens``) are not credentials; an ``access_token``
or a bare ``token`` is.
"""

from __future__ import annotations

import json
import re

from collections.abc import Iterable

from tailkit.formats._sql import literal


_CREDENTIAL = (
    r"[^\"\\]*(?:api[-_]?key|apikey|secret|password|passwd|credential|authorization|cookie"
    r"|access[-_]?key|private[-_]?key|signing[-_]?key|bearer)"
    r"|(?:x-)?(?:access|refresh|id|session|auth|api|csrf|xsrf|oauth|bearer)?[-_]?token"
)
"""A credential's key name (case-insensitive, the whole name): RE2 syntax, no quotes.

The credential word ends the name: ``user_api_key`` is a key, ``user_api_key_team_id`` names
the key's team and is kept."""

CONTENT_KEYS = frozenset({"messages", "prompt", "prompts", "input", "output", "response"})
"""Keys that hold prompts or completions in a generic file (dropped from attrs and rejects)."""

CONTAINER_KEYS = frozenset({"headers", "cookies"})
"""Keys whose whole value is dropped (they hold credentials under any name)."""

# A scalar value; a string may be cut off by the end of a torn line.
_SCALAR = r'(?:"(?:[^"\\]|\\.)*(?:"|$)|-?[0-9][0-9.eE+-]*|true|false|null)'


def _pairs(keys: Iterable[str]) -> tuple[str, str]:
    """
    Patterns for a ``"name": scalar`` pair with its comma before, and with its comma after.
    """
    names = "|".join([_CREDENTIAL, *(re.escape(k) for k in sorted(keys))])
    pair = rf'"(?i:{names})"\s*:\s*{_SCALAR}'
    return r",\s*" + pair, pair + r"\s*,?\s*"


_CREDENTIAL_RE = re.compile(rf"(?:{_CREDENTIAL})", re.IGNORECASE)


def is_secret(key: str) -> bool:
    """
    Whether a key names a credential or a container of credentials (headers, cookies).
    """
    return _CREDENTIAL_RE.fullmatch(key) is not None or key.lower() in CONTAINER_KEYS


def is_private(key: str) -> bool:
    """
    Whether a generic file's column is kept out of the store: a credential or message content.
    """
    return is_secret(key) or key.lower() in CONTENT_KEYS


def drop_keys(expr: str, keys: Iterable[str]) -> str:
    """
    SQL for the JSON object ``expr`` without ``keys`` (anything else unchanged).
    """
    names = sorted(set(keys))
    if not names:
        return expr
    patch = literal(json.dumps(dict.fromkeys(names)))
    listed = "[" + ", ".join(literal(k) for k in names) + "]"
    # Patched only when a key is there: a patch re-serialises the object (spaces dropped).
    return (
        f"CASE WHEN json_valid({expr}) AND json_type({expr}) = 'OBJECT' "
        f"AND list_has_any(json_keys({expr}), {listed}) "
        f"THEN json_merge_patch({expr}, {patch})::VARCHAR ELSE {expr} END"
    )


def scrub(expr: str, keys: Iterable[str] = ()) -> str:
    """
    SQL for the JSON text ``expr`` without ``keys`` and without credentials.

    ``keys`` go at the top level of an object whatever their value, and as ``"key": scalar``
    pairs anywhere; credentials go as pairs anywhere. Works on text that is not valid JSON
    too (a torn line keeps its shape, minus the pairs the expression finds), and keeps NULL.
    """
    names = set(keys)
    dropped = drop_keys(expr, {*names, *CONTAINER_KEYS, "api_key", "Authorization"})
    after_comma, before_comma = _pairs(names | CONTAINER_KEYS)
    # A pair after a comma goes with its comma; the first pair of an object with the one after.
    no_tail = f"regexp_replace(({dropped})::VARCHAR, {literal(after_comma)}, '', 'g')"
    return f"regexp_replace({no_tail}, {literal(before_comma)}, '', 'g')"


def scrub_json(expr: str) -> str:
    """
    SQL for the JSON value ``expr`` with credentials removed at any depth, still JSON.
    """
    text = scrub(f"CAST({expr} AS VARCHAR)")
    return f"CASE WHEN {expr} IS NULL THEN NULL ELSE TRY_CAST({text} AS JSON) END"
