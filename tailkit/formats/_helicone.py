"""
Helicone request exports: the JSON lines ``npx @helicone/export`` writes.

Each line is a ``HeliconeRequest``. Durations are milliseconds: ``delay_ms`` (``latency`` in
older exports; else ``response_created_at - request_created_at``) and ``time_to_first_token``,
converted to seconds once, in SQL. A TTFT that is missing, 0 or equal to the latency is NULL
(not streamed). ``response_status`` is the HTTP status: 2xx is ok, 429 rate-limited, 408 and 504
a timeout (censored at its age, no ``total_s``), other codes errors; 0 or -1 (no response) an
error of type ``no_response``; ``--status-map`` reads other codes or words before these rules
(``--status-map 529=rate_limited``). The provider is Helicone's upper-case name, lower-cased.
Request and response bodies are content and are not kept; every other field is kept in
``attrs``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tailkit.formats._generic import JsonLines
from tailkit.formats._litellm import Ref, host_provider, json_lines_scan
from tailkit.formats._mapping import Scan, ScanOptions, mapped_status, refuse_fixed
from tailkit.formats._sql import RawColumn


_FIELDS: dict[str, str] = {
    "request_id": "VARCHAR",
    "response_id": "VARCHAR",
    "request_created_at": "VARCHAR",
    "response_created_at": "VARCHAR",
    "response_status": "VARCHAR",
    "request_model": "VARCHAR",
    "model": "VARCHAR",
    "response_model": "VARCHAR",
    "provider": "VARCHAR",
    "target_url": "VARCHAR",
    "delay_ms": "VARCHAR",
    "latency": "VARCHAR",
    "time_to_first_token": "VARCHAR",
    "prompt_tokens": "VARCHAR",
    "completion_tokens": "VARCHAR",
}
_MAPPED = frozenset(
    {"request_id", "request_created_at", "response_status", "request_model", "model",
     "provider", "delay_ms", "latency", "time_to_first_token", "prompt_tokens",
     "completion_tokens"}
)  # fmt: skip
_CONTENT = frozenset({"request_body", "response_body", "body", "signed_body_url"})
_PROVIDERS = {"aws": "bedrock", "google": "gemini"}
"""Helicone provider names (lower-cased) that differ from the record's vocabulary."""


def _ms_between(start: str, end: str) -> str:
    t0, t1 = f"TRY_CAST({start} AS TIMESTAMPTZ)", f"TRY_CAST({end} AS TIMESTAMPTZ)"
    return f"CAST((epoch_us({t1}) - epoch_us({t0})) / 1000.0 AS VARCHAR)"


def _columns(ref: Ref, options: ScanOptions) -> dict[str, RawColumn]:
    """
    The call-record columns over one request; ``--status-map`` maps ``response_status`` values.

    A mapped status wins over the HTTP reading (``--status-map 529=rate_limited``); a mapped
    ``timeout`` is censored at the request's age like a 408.
    """
    text = f"trim({ref('response_status')})"
    code = f"TRY_CAST(TRY_CAST({text} AS DOUBLE) AS INTEGER)"
    kind = (
        f"CASE WHEN {code} BETWEEN 200 AND 299 THEN 'ok' WHEN {code} = 429 THEN 'rate_limited' "
        f"WHEN {code} IN (408, 504) THEN 'timeout' WHEN {code} IS NOT NULL THEN 'error' END"
    )
    mapped = mapped_status(text, options)
    if mapped is not None:
        kind = f"coalesce({mapped}, {kind})"
    # The latency in ms as text (so that a bad value is rejected showing it).
    latency = (
        f"coalesce({ref('delay_ms')}, {ref('latency')}, "
        f"{_ms_between(ref('request_created_at'), ref('response_created_at'))})"
    )
    name = f"lower(trim({ref('provider')}))"
    mapped = " ".join(f"WHEN '{k}' THEN '{v}'" for k, v in _PROVIDERS.items())
    return {
        "call_id": RawColumn(
            f"coalesce({ref('request_id')}, {ref('response_id')})", "VARCHAR", "request_id"
        ),
        "model": RawColumn(
            f"coalesce(NULLIF({ref('request_model')}, ''), NULLIF({ref('model')}, ''), "
            f"{ref('response_model')})",
            "VARCHAR",
            "request_model / model / response_model",
        ),
        "provider": RawColumn(
            f"coalesce(CASE {name} {mapped} ELSE NULLIF({name}, '') END, "
            f"{host_provider(ref('target_url'))})",
            "VARCHAR",
            "provider / target_url",
        ),
        "started_at": RawColumn(ref("request_created_at"), "VARCHAR", "request_created_at"),
        "ttft_s": RawColumn(ref("time_to_first_token"), "VARCHAR", "time_to_first_token"),
        "total_s": RawColumn(
            f"CASE WHEN ({kind}) IS DISTINCT FROM 'timeout' THEN {latency} END",
            "VARCHAR",
            "delay_ms",
        ),
        "censored_at_s": RawColumn(
            f"CASE WHEN ({kind}) = 'timeout' THEN {latency} END", "VARCHAR", "delay_ms"
        ),
        "input_tokens": RawColumn(ref("prompt_tokens"), "VARCHAR", "prompt_tokens"),
        "output_tokens": RawColumn(
            # A failed request's 0 completion tokens is "no output measured".
            f"CASE WHEN coalesce(({kind}) <> 'ok', false) "
            f"THEN NULLIF({ref('completion_tokens')}, '0') ELSE {ref('completion_tokens')} END",
            "VARCHAR",
            "completion_tokens",
        ),
        # A status that is not a number goes through as text: normalize_sql rejects it.
        "status": RawColumn(f"coalesce({kind}, NULLIF({text}, ''))", "VARCHAR", "response_status"),
        "error_type": RawColumn(
            f"CASE WHEN ({kind}) = 'ok' THEN NULL WHEN {code} <= 0 THEN 'no_response' "
            f"WHEN {code} NOT BETWEEN 200 AND 299 THEN 'http_' || {code} END",
            "VARCHAR",
            "response_status",
        ),
        "http_status": RawColumn(
            f"CASE WHEN {code} BETWEEN 100 AND 599 THEN {code} END", "INTEGER", "response_status"
        ),
    }


class Helicone:
    """
    Helicone ``HeliconeRequest`` JSON lines (``npx @helicone/export``, the default JSONL).
    """

    name = "helicone"

    def sniff_sql(self, path: str) -> str:
        """
        SQL for the merged JSON structure of the first objects (as for any JSON lines).
        """
        return JsonLines().sniff_sql(path)

    def scan(self, path: str, sniffed: Sequence[tuple[Any, ...]], options: ScanOptions) -> Scan:
        """
        Map Helicone fields onto the call record, milliseconds to seconds.

        Raises:
            MappingError: ``--map``, or a ``--unit`` other than ms, was given.
        """
        refuse_fixed(path, self.name, options, unit="ms", status=None)
        return json_lines_scan(
            path,
            sniffed,
            options,
            name=self.name,
            fields=_FIELDS,
            columns=lambda ref: _columns(ref, options),
            drop=_MAPPED | _CONTENT,
            content=_CONTENT,
            duration_scale=1000.0,
            notes=("durations read as milliseconds",),
        )


_KEYS = ("request_created_at", "response_status")
_LATENCY_KEYS = ("delay_ms", "latency", "time_to_first_token")


def detect(text: str, first: object | None) -> str | None:
    """
    Why ``text`` is a Helicone export, or ``None``.

    The first object has ``request_created_at`` and ``response_status`` and a latency key
    (``delay_ms``, ``latency`` or ``time_to_first_token``). When the first line does not parse
    (longer than the head), the keys are looked for in the text of a file that starts with ``{``.
    """
    if isinstance(first, dict):
        keys: Sequence[str] = [str(k) for k in first]
    elif first is None and text.lstrip("\ufeff \t\r\n").startswith("{"):
        line = text.lstrip("\ufeff \t\r\n").split("\n", 1)[0]
        keys = [k for k in (*_KEYS, *_LATENCY_KEYS) if f'"{k}"' in line]
    else:
        return None
    if all(k in keys for k in _KEYS) and any(k in keys for k in _LATENCY_KEYS):
        return "a Helicone request export (request_created_at, response_status, delay_ms)"
    return None
