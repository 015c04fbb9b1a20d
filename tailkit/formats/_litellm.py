"""
LiteLLM logs: the ``StandardLoggingPayload`` JSON lines and the proxy's spend-log export.

Both shapes are one JSON object per line and go through one reader; which one a file is only
changes the TTFT rule:

- ``StandardLoggingPayload`` (bucket loggers, custom callbacks): ``startTime`` / ``endTime`` /
  ``completionStartTime`` are epoch seconds. LiteLLM sets ``completionStartTime`` to ``endTime``
  when no first chunk was seen, so ``ttft_s`` is NULL unless ``stream`` is true and
  ``completionStartTime < endTime``.
- ``LiteLLM_SpendLogs`` rows: ISO times, ``request_id``, no ``stream`` field;
  ``completionStartTime`` is NULL or equal to ``endTime`` when not streamed.

TTFT is measured from ``startTime``, LiteLLM's entry point: it includes the proxy's own hooks
(``hidden_params.litellm_overhead_time_ms`` stays in ``attrs``). A failure whose error says
timeout is censored at its age (``censored_at_s``, no ``total_s``); a 429 is rate-limited.
Everything that maps to no column, except message content, is kept in ``attrs``.

`json_lines_scan` is the JSON-lines reader this and the Helicone format share: typed SQL per
field, a fast ``read_json`` pass and a line-by-line fallback that rejects broken lines.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tailkit.formats import _lines as lines
from tailkit.formats._generic import JsonLines
from tailkit.formats._mapping import SET_MODEL, Scan, ScanOptions, mapped_status, refuse_fixed
from tailkit.formats._scrub import is_secret, scrub, scrub_json
from tailkit.formats._sql import REJECT_STATUS, RawColumn, ident, literal, normalize_sql


_MAX_LINE = lines.MAX_LINE

Ref = Callable[[str], str]
"""Turns a JSON key into SQL over the scan (its value as VARCHAR, or JSON for nested keys)."""


def sniffed_keys(sniffed: Sequence[tuple[Any, ...]]) -> list[str]:
    """
    The top-level keys of the objects sampled by `JsonLines.sniff_sql`, in order.
    """
    return [key for key, _ in lines.sniffed_types(sniffed)]


def json_lines_scan(
    path: str,
    sniffed: Sequence[tuple[Any, ...]],
    options: ScanOptions,
    *,
    name: str,
    fields: Mapping[str, str],
    columns: Callable[[Ref], dict[str, RawColumn]],
    drop: frozenset[str],
    content: frozenset[str],
    duration_scale: float,
    notes: tuple[str, ...] = (),
) -> Scan:
    """
    The scan of a JSON-lines file whose call-record columns are SQL over its fields.

    Args:
        path: The file.
        sniffed: Rows of `JsonLines.sniff_sql` (the merged structure of the first objects).
        options: ``sets`` override the format's own column (``status_map`` is applied by
            ``columns``, which reads the format's status field).
        name: The format name (the rows' ``source``).
        fields: Every key the format reads → ``VARCHAR`` or ``JSON``.
        columns: Given a `Ref`, the source of each call-record column.
        drop: Keys kept out of ``attrs`` (keys already mapped, and ``content``).
        content: Keys that hold message content: cut from rejected lines too, as are keys
            named like credentials, at any depth (`tailkit.formats._scrub`).
        duration_scale: Divide durations by this for seconds (1000 for milliseconds).
        notes: Phrases for the user.
    """
    extra_keys: list[str] = []
    seen = {k.lower() for k in fields}
    private = {k for k in sniffed_keys(sniffed) if is_secret(k)} | content
    for key in sniffed_keys(sniffed):
        if key and key.lower() not in seen and key not in drop and key not in private:
            extra_keys.append(key)
            seen.add(key.lower())
    typed = {**fields, **dict.fromkeys(extra_keys, "JSON")}

    def build(ref: Ref, **kw: Any) -> str:
        raw = columns(ref)
        for target, value in options.sets.items():
            raw[target] = RawColumn(literal(value), "VARCHAR", f"the value set for {target}")
        extras = [(k, ref(k)) for k in (*fields, *extra_keys) if k not in drop]
        sql = normalize_sql(
            kw.pop("source"), raw, extras=extras, duration_scale=duration_scale,
            model_hint=SET_MODEL, **kw,
        )  # fmt: skip
        # Nested objects (metadata, hidden_params) may hold credentials under their own names:
        # one pass over each stored row's attrs (a rejected row's raw is scrubbed as it is made).
        kept = (
            f"CASE WHEN status = {literal(REJECT_STATUS)} THEN attrs ELSE {scrub_json('attrs')} END"
        )
        return f"SELECT * REPLACE ({kept} AS attrs) FROM ({sql}) AS _tk_scrubbed"

    struct = "{" + ", ".join(f"{literal(k)}: {literal(v)}" for k, v in typed.items()) + "}"
    fast = (
        f"read_json({literal(path)}, format='newline_delimited', columns={struct}, "
        f"maximum_object_size={_MAX_LINE})"
    )
    return Scan(
        units_known=True,
        format=name,
        select_sql=build(ident, source=fast),
        fallback_sql=build(
            lambda k: f"_j.{ident(k)}",
            source=lines.forgiving_source(path, typed),
            raw_text=scrub("_line", private),
            row_problem=lines.row_problem(private),
            row_number="_tk_rec",
        ),
        raw_lines_sql=lines.raw_lines_sql(path, private),
        has_call_id=True,
        notes=notes,
    )


def host_provider(url: str) -> str:
    """
    SQL naming the provider behind an API base URL (``url`` is SQL for the text).
    """
    whens = " ".join(
        f"WHEN {url} ILIKE {literal('%' + part + '%')} THEN {literal(provider)}"
        for part, provider in _HOSTS
    )
    return f"CASE {whens} ELSE NULLIF(regexp_extract({url}, '^[A-Za-z]+://([^/:?]+)', 1), '') END"


_HOSTS = (
    ("openai.azure.com", "azure"),
    ("api.openai.com", "openai"),
    ("anthropic.com", "anthropic"),
    ("bedrock", "bedrock"),
    ("generativelanguage.googleapis.com", "gemini"),
    ("aiplatform.googleapis.com", "vertex_ai"),
    ("api.groq.com", "groq"),
    ("api.mistral.ai", "mistral"),
    ("api.deepseek.com", "deepseek"),
    ("api.together.xyz", "together_ai"),
    ("api.cohere", "cohere"),
)
"""API host fragment → provider, for rows that name only their ``api_base``."""


# --- LiteLLM --------------------------------------------------------------------------------

_FIELDS: dict[str, str] = {
    "id": "VARCHAR",
    "request_id": "VARCHAR",
    "litellm_call_id": "VARCHAR",
    "model": "VARCHAR",
    "model_group": "VARCHAR",
    "custom_llm_provider": "VARCHAR",
    "api_base": "VARCHAR",
    "startTime": "VARCHAR",
    "endTime": "VARCHAR",
    "completionStartTime": "VARCHAR",
    "stream": "VARCHAR",
    "prompt_tokens": "VARCHAR",
    "completion_tokens": "VARCHAR",
    "status": "VARCHAR",
    "error_str": "VARCHAR",
    "error_information": "JSON",
    "hidden_params": "JSON",
    "metadata": "JSON",
}
_MAPPED = frozenset(
    {"id", "request_id", "model", "custom_llm_provider", "startTime", "endTime",
     "completionStartTime", "prompt_tokens", "completion_tokens", "status"}
)  # fmt: skip
# Message content, and the spend log's (hashed) API key: not worth keeping, not ours to copy.
_CONTENT = frozenset(
    {"messages", "response", "proxy_server_request", "model_map_information", "api_key"}
)


def _secs(x: str) -> str:
    """
    Epoch seconds (DOUBLE) from a number or an ISO time given as text; NULL if neither.
    """
    return f"coalesce(TRY_CAST({x} AS DOUBLE), epoch(TRY_CAST({x} AS TIMESTAMPTZ)))"


def _since_start(ref: Ref, end: str) -> str:
    """
    ``end - startTime`` in seconds as text; the unreadable value itself when one does not parse.

    The text goes through `normalize_sql` as a duration, so a bad time is rejected showing it.
    """
    s, e = ref("startTime"), ref(end)
    # Rounded to the microsecond: the difference of two epoch floats near 1.7e9 carries
    # ~1e-7 s of binary noise that would otherwise show in every stored value.
    return (
        f"CASE WHEN {e} IS NULL OR {s} IS NULL THEN NULL "
        f"WHEN {_secs(e)} IS NULL THEN {e} WHEN {_secs(s)} IS NULL THEN {s} "
        f"ELSE CAST(round({_secs(e)} - {_secs(s)}, 6) AS VARCHAR) END"
    )


def _columns(ref: Ref, *, spend_logs: bool, status_map: str | None = None) -> dict[str, RawColumn]:
    """
    The call-record columns over one payload; ``status_map`` is `mapped_status` of ``status``.

    A status ``--status-map`` names wins over the one told from the error; a mapped
    ``timeout`` is censored at the call's age like any other.
    """
    info = f"coalesce({ref('error_information')}, {ref('metadata')}->'error_information')"
    code = f"NULLIF({info}->>'error_code', '')"
    error_class = f"NULLIF({info}->>'error_class', '')"
    error_text = f"coalesce({ref('error_str')}, {info}->>'error_message', '')"
    status = f"lower(trim({ref('status')}))"
    failed = (
        f"coalesce({status} = 'failure' OR ({status} IS NULL AND "
        f"(NULLIF({ref('error_str')}, '') IS NOT NULL OR {error_class} IS NOT NULL)), false)"
    )
    timeout = (
        f"({code} = '408' OR {error_class} ILIKE '%timeout%' OR {error_text} ILIKE '%timeout%' "
        f"OR {error_text} ILIKE '%timed out%')"
    )
    limited = f"({code} = '429' OR {error_class} ILIKE '%ratelimit%')"
    kind = (
        f"CASE WHEN NOT {failed} THEN NULL WHEN {timeout} THEN 'timeout' "
        f"WHEN {limited} THEN 'rate_limited' ELSE 'error' END"
    )
    if status_map is not None:
        kind = f"coalesce({status_map}, {kind})"
    http = f"TRY_CAST({code} AS INTEGER)"
    total = _since_start(ref, "endTime")
    first = _since_start(ref, "completionStartTime")
    end, cst = _secs(ref("endTime")), _secs(ref("completionStartTime"))
    # Reference §1.2: LiteLLM copies endTime into completionStartTime when no chunk came, so
    # only a strictly earlier first chunk is a TTFT; the payload must also say it streamed.
    streamed = "true" if spend_logs else f"lower({ref('stream')}) = 'true'"
    api_base = f"coalesce({ref('api_base')}, {ref('hidden_params')}->>'api_base')"
    return {
        "call_id": RawColumn(
            f"coalesce({ref('id')}, {ref('request_id')}, {ref('litellm_call_id')})",
            "VARCHAR",
            "id / request_id",
        ),
        "model": RawColumn(
            f"coalesce(NULLIF({ref('model')}, ''), {ref('model_group')})", "VARCHAR", "model"
        ),
        "provider": RawColumn(
            f"coalesce(NULLIF({ref('custom_llm_provider')}, ''), "
            f"NULLIF({info}->>'llm_provider', ''), {host_provider(api_base)})",
            "VARCHAR",
            "custom_llm_provider / api_base",
        ),
        "started_at": RawColumn(ref("startTime"), "VARCHAR", "startTime"),
        "ttft_s": RawColumn(
            f"CASE WHEN {streamed} AND {cst} < {end} THEN {first} END",
            "VARCHAR",
            "completionStartTime - startTime",
        ),
        "total_s": RawColumn(
            f"CASE WHEN ({kind}) IS DISTINCT FROM 'timeout' THEN {total} END",
            "VARCHAR",
            "endTime - startTime",
        ),
        "censored_at_s": RawColumn(
            f"CASE WHEN ({kind}) = 'timeout' THEN {total} END", "VARCHAR", "endTime - startTime"
        ),
        "input_tokens": RawColumn(ref("prompt_tokens"), "VARCHAR", "prompt_tokens"),
        "output_tokens": RawColumn(
            # A failed call's completion_tokens is 0: no output was measured, not none produced.
            f"CASE WHEN {failed} THEN NULLIF({ref('completion_tokens')}, '0') "
            f"ELSE {ref('completion_tokens')} END",
            "VARCHAR",
            "completion_tokens",
        ),
        "status": RawColumn(
            f"CASE WHEN {failed} OR ({kind}) IS NOT NULL THEN {kind} "
            f"WHEN {status} = 'success' THEN 'ok' ELSE {ref('status')} END",
            "VARCHAR",
            "status",
        ),
        "error_type": RawColumn(
            f"CASE WHEN {failed} THEN coalesce({error_class}, "
            f"CASE WHEN {http} BETWEEN 100 AND 599 THEN 'http_' || {http} END, 'error') END",
            "VARCHAR",
            "error_information.error_class",
        ),
        "http_status": RawColumn(
            f"CASE WHEN {http} BETWEEN 100 AND 599 THEN {http} END",
            "INTEGER",
            "error_information.error_code",
        ),
    }


def _is_spend_log(keys: Sequence[str]) -> bool:
    return "request_id" in keys and "id" not in keys


class Litellm:
    """
    LiteLLM ``StandardLoggingPayload`` JSON lines, or ``LiteLLM_SpendLogs`` rows as JSON lines.
    """

    name = "litellm"

    def sniff_sql(self, path: str) -> str:
        """
        SQL for the merged JSON structure of the first objects (as for any JSON lines).
        """
        return JsonLines().sniff_sql(path)

    def scan(self, path: str, sniffed: Sequence[tuple[Any, ...]], options: ScanOptions) -> Scan:
        """
        Map LiteLLM fields onto the call record (the shape is told from the sniffed keys).

        ``--status-map`` maps values of the ``status`` field (before ``success`` / ``failure``
        are read).

        Raises:
            MappingError: ``--map``, or a ``--unit`` other than s, was given.
        """
        refuse_fixed(path, self.name, options, unit="s", status=None)
        spend_logs = _is_spend_log(sniffed_keys(sniffed))
        shape = "spend-log rows" if spend_logs else "StandardLoggingPayload"
        return json_lines_scan(
            path,
            sniffed,
            options,
            name=self.name,
            fields=_FIELDS,
            columns=lambda ref: _columns(
                ref, spend_logs=spend_logs, status_map=mapped_status(ref("status"), options)
            ),
            drop=_MAPPED | _CONTENT,
            content=_CONTENT,
            duration_scale=1.0,
            notes=(f"read as LiteLLM {shape}",),
        )


_TIME_KEYS = ("startTime", "endTime")
_PAYLOAD_KEYS = ("custom_llm_provider", "call_type", "litellm_call_id", "model_group")


def detect(text: str, first: object | None) -> str | None:
    """
    Why ``text`` is LiteLLM JSON lines, or ``None``.

    A first object with ``startTime`` and ``endTime`` and a LiteLLM key (``custom_llm_provider``,
    ``call_type``, ``litellm_call_id``, ``model_group``) is LiteLLM; with ``request_id`` and no
    ``id`` it is a spend-log export. When the first line does not parse (longer than the head),
    the same keys are looked for in the text of a file that starts with ``{``.
    """
    if isinstance(first, dict):
        keys: Sequence[str] = [str(k) for k in first]
    elif first is None and text.lstrip("\ufeff \t\r\n").startswith("{"):
        line = text.lstrip("\ufeff \t\r\n").split("\n", 1)[0]
        keys = [k for k in (*_TIME_KEYS, *_PAYLOAD_KEYS, "request_id", "id") if f'"{k}"' in line]
    else:
        return None
    if not all(k in keys for k in _TIME_KEYS) or not any(k in keys for k in _PAYLOAD_KEYS):
        return None
    if _is_spend_log(keys):
        return "a LiteLLM spend-log export (request_id, startTime, endTime)"
    return "a LiteLLM StandardLoggingPayload (startTime, endTime, custom_llm_provider)"
