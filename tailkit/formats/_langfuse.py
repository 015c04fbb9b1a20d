"""
Langfuse observations: the public API's JSON, JSON arrays or lines of them, the Parquet export.

Three shapes hold the same observations: a page of
``GET /api/public/observations`` (``{"data": [...], "meta": {...}}``, camelCase), plain JSON
arrays or JSON lines of observations (one observation or one page per line), and the blob-storage
export (``observations_v2/*.parquet``, snake_case). Every field is looked up under both spellings,
so a JSON file in the export's snake_case reads as well as one from the API.

Only ``type = 'GENERATION'`` observations are LLM calls. Spans, events and every other type are
counted and skipped, never rejected: they are filtered out before validation, and the sniff
query counts them by type for `Scan.notes`. An observation without a ``type`` is read as a
generation (and is rejected if it does not look like one). Everything that is read is numbered
in file order, skipped ones included, so a reject's row is the observation's position in the
file (for JSON lines with one observation a line: its line).

Latencies are computed from the timestamps, not taken from Langfuse's derived fields:
``total_s = end - start`` and ``ttft_s = completion_start - start``. A null
``completion_start_time`` is a call that was not streamed: TTFT NULL. A completion start at or
after the end is an integration that set it at the end (langfuse#3554): TTFT NULL too, with
``attrs.completion_start_not_before_end``. Timestamps without a zone (the export's
``YYYY-MM-DD HH:MM:SS.ffffff``) are UTC: the store's session runs in UTC. ``level = 'ERROR'`` is
status ``error`` with the text of ``status_message`` in ``attrs``; every other level is ok
(``--status-map`` does not apply). The provider comes from ``modelParameters.provider`` or the
metadata (``provider``, LangChain's ``ls_provider``, OpenTelemetry's ``gen_ai.provider.name`` /
``gen_ai.system``, also under ``metadata.attributes``); without one it is the provider the model
name implies (``unknown`` when it implies none, ``--set provider=NAME`` to name it). Prompts
and completions (``input``, ``output``) and the metadata are not kept, not even
in a rejected observation's raw text.
"""

from __future__ import annotations

import gzip
import json
import re

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from tailkit.formats import _lines as lines
from tailkit.formats._mapping import SET_MODEL, Scan, ScanOptions, refuse_fixed
from tailkit.formats._paths import real_path
from tailkit.formats._scrub import scrub, scrub_json
from tailkit.formats._sql import RawColumn, ident, literal, normalize_sql


NAME = "langfuse"
CALL_TYPES = ("GENERATION",)
"""Observation types that are LLM calls; every other type is skipped."""

_MAX_OBJECT = 256 * 1024 * 1024
_HEAD = 64 * 1024
Shape = Literal["parquet", "lines", "document"]

# Call-record inputs → the observation fields that hold them, API (camelCase) spelling first.
_FIELDS: dict[str, tuple[str, ...]] = {
    "id": ("id",),
    "trace": ("traceId", "trace_id"),
    "type": ("type",),
    "name": ("name",),
    "start": ("startTime", "start_time"),
    "end": ("endTime", "end_time"),
    "completion": ("completionStartTime", "completion_start_time"),
    "model": ("model", "providedModelName", "provided_model_name"),
    "level": ("level",),
    "status_message": ("statusMessage", "status_message"),
    "prompt_tokens": ("promptTokens", "prompt_tokens"),
    "completion_tokens": ("completionTokens", "completion_tokens"),
    "parent": ("parentObservationId", "parent_observation_id"),
    "environment": ("environment",),
    "latency": ("latency",),
    "ttft": ("timeToFirstToken", "time_to_first_token"),
    "total_cost": ("totalCost", "total_cost", "calculatedTotalCost", "calculated_total_cost"),
    "prompt_name": ("promptName", "prompt_name"),
    "trace_name": ("traceName", "trace_name"),
    "user_id": ("userId", "user_id"),
    "session_id": ("sessionId", "session_id"),
}
# Fields that hold objects (JSON-encoded strings in CSV-like exports and in metadata maps).
_OBJECTS: dict[str, tuple[str, ...]] = {
    "usage_details": ("usageDetails", "usage_details"),
    "usage": ("usage",),
    "params": ("modelParameters", "model_parameters"),
    "meta": ("metadata",),
    "cost_details": ("costDetails", "cost_details"),
}
_PROVIDER_KEYS = ("provider", "ls_provider", '"gen_ai.provider.name"', '"gen_ai.system"')
_KNOWN = frozenset(k for keys in (*_FIELDS.values(), *_OBJECTS.values()) for k in keys)

_PRIVATE = ("input", "output", "metadata", "prompt", "promptTokensDetails")
"""Kept out of a rejected observation's raw text, as out of ``attrs``: prompts, completions and
free-form metadata (credentials are removed by name anywhere)."""
_DETECT_KEYS = ("traceId", "trace_id")
_LANGFUSE_ONLY = (
    "completionStartTime", "completion_start_time", "usageDetails", "usage_details",
    "providedModelName", "provided_model_name", "parentObservationId", "parent_observation_id",
    "statusMessage", "status_message", "modelParameters", "model_parameters",
)  # fmt: skip
_OBSERVATION_TYPE = re.compile(r'"type"\s*:\s*"(GENERATION|SPAN|EVENT)"')


def _has_key(text: str, key: str) -> bool:
    # The quoted key as plain text first: a substring search is several times faster than the
    # regular expression, and most files (every file of a folder of JSON lines) lack the key.
    return f'"{key}"' in text and re.search(rf'"{key}"\s*:', text) is not None


def detect(text: str, first: object | None) -> str | None:
    """
    Why ``text`` (a file's first 64 KiB) holds Langfuse observations, or ``None``.

    The rule: a trace id (``traceId`` or ``trace_id``), a ``"type"`` of ``GENERATION``,
    ``SPAN`` or ``EVENT``, and one key only Langfuse writes (``completionStartTime``,
    ``usageDetails``, ``providedModelName``, ``parentObservationId``, ``statusMessage``,
    ``modelParameters``, or their snake_case forms). ``first`` is not needed: keys are
    searched in the text, which may end mid-record.
    """
    del first
    if text.lstrip("\ufeff \t\r\n")[:1] not in ("{", "["):
        return None
    if not any(_has_key(text, k) for k in _DETECT_KEYS) or not _OBSERVATION_TYPE.search(text):
        return None
    if not any(_has_key(text, k) for k in _LANGFUSE_ONLY):
        return None
    if _has_key(text, "data") and _has_key(text, "meta"):
        return "a Langfuse observations API page (data, meta)"
    return "Langfuse observations (traceId, type, completionStartTime…)"


def detect_parquet(columns: Sequence[str]) -> str | None:
    """
    Why a Parquet file with these columns is a Langfuse blob export, or ``None``.

    The rule: ``id``, ``trace_id``, ``type`` and ``start_time``, and one of
    ``completion_start_time``, ``provided_model_name``, ``usage_details``.
    """
    names = set(columns)
    if not {"id", "trace_id", "type", "start_time"} <= names:
        return None
    if not names & {"completion_start_time", "provided_model_name", "usage_details"}:
        return None
    return "a Langfuse observations export (trace_id, type, completion_start_time…)"


def _head(path: str) -> bytes:
    path = real_path(path)
    with Path(path).open("rb") as fh:
        head = fh.read(_HEAD)
    if head[:2] == b"\x1f\x8b":
        with gzip.open(path, "rb") as fh:
            head = fh.read(_HEAD)
    return head


def shape_of(path: str) -> Shape:
    """
    How the file holds its observations: Parquet, a JSON value per line, or one document.

    A file named as JSON lines (``.jsonl``, ``.ndjson``), or one in which some line of the
    first bytes is a JSON object by itself (each line an observation, an array or an API page),
    is read line by line, so that a bad first line is one reject; anything else is one JSON
    document.
    """
    head = _head(path)
    if head[:4] == b"PAR1":
        return "parquet"
    name = real_path(path).lower().removesuffix(".gz")
    if name.endswith((".jsonl", ".ndjson")):
        return "lines"
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
    lines = [line for line in text.split("\n") if line.strip()]
    for line in lines[:-1] or lines:  # the last line of the head may be cut short
        try:
            value = json.loads(line)
        except RecursionError:  # a value nested deeper than Python parses is still one line
            return "lines"
        except ValueError:
            continue
        # An object (or a list of them) on one line; a pretty-printed document's lines are
        # fragments, or scalars such as a list's items, never a whole object.
        if isinstance(value, dict) or (
            value and isinstance(value, list) and isinstance(value[0], dict)
        ):
            return "lines"
    return "document"


def _parquet_columns(path: str) -> list[str]:
    import pyarrow.parquet as pq  # only Parquet files need it

    return [name for name in pq.read_schema(path).names if name in _KNOWN]


def _records(path: str, shape: Shape) -> str:
    """
    ``(_tk_record, _lf_line_no, _lf_line, _lf_valid, o)``: one row per observation, numbered.
    """
    if shape == "parquet":
        names = _parquet_columns(path)
        packed = "{" + ", ".join(f"{literal(n)}: {ident(n)}" for n in names) + "}"
        obj = f"to_json({packed})" if names else "NULL::JSON"
        return (
            "(SELECT file_row_number + 1 AS _tk_record, NULL::BIGINT AS _lf_line_no, "
            f"NULL::VARCHAR AS _lf_line, true AS _lf_valid, {obj} AS o "
            f"FROM read_parquet({literal(path)}, file_row_number=true))"
        )
    if shape == "lines":
        # Line by line with the forgiving JSON-lines reader: a line that is not JSON (a raw
        # control byte, bytes that are not UTF-8) is one bad record, never a failed file.
        values = (
            "(SELECT _tk_rec AS _lf_line_no, _line AS _lf_line, _parsed IS NOT NULL AS _lf_valid, "
            f"_parsed AS j FROM {lines.forgiving_source(path, {'id': 'VARCHAR'})})"
        )
    else:
        values = (
            "(SELECT row_number() OVER () AS _lf_line_no, NULL::VARCHAR AS _lf_line, "
            f"true AS _lf_valid, j FROM read_json({literal(path)}, format='auto', "
            f"records=false, columns={{'j': 'JSON'}}, maximum_object_size={_MAX_OBJECT}))"
        )
    # An array, or an API page's data array, holds several observations; anything else is one.
    items = (
        "CASE WHEN NOT _lf_valid THEN [NULL::JSON] WHEN json_type(j) = 'ARRAY' THEN "
        "CAST(j AS JSON[]) WHEN json_type(j) = 'OBJECT' AND json_type(j, '$.data') = 'ARRAY' "
        "THEN CAST(j->'$.data' AS JSON[]) ELSE [j] END"
    )
    return (
        "(SELECT row_number() OVER (ORDER BY _lf_line_no, _lf_e.i) AS _tk_record, _lf_line_no, "
        "_lf_line, _lf_valid, _lf_e.o AS o FROM (SELECT *, unnest(list_transform("
        f"{items}, lambda x, i: {{'i': i, 'o': x}})) AS _lf_e FROM {values}))"
    )


def _text(keys: Sequence[str], obj: str = "o") -> str:
    parts = [f"({obj}->>{literal('$.' + k)})" for k in keys]
    return parts[0] if len(parts) == 1 else f"coalesce({', '.join(parts)})"


def _object(keys: Sequence[str], obj: str = "o") -> str:
    # A JSON object, or a string holding one (CSV exports, Map(String, String) metadata).
    parts = []
    for key in keys:
        path = literal("$." + key)
        parts.append(
            f"CASE WHEN json_type({obj}, {path}) = 'OBJECT' THEN {obj}->{path} "
            f"WHEN json_type({obj}, {path}) = 'VARCHAR' AND json_valid({obj}->>{path}) "
            f"AND json_type(({obj}->>{path})::JSON) = 'OBJECT' THEN ({obj}->>{path})::JSON END"
        )
    return parts[0] if len(parts) == 1 else f"coalesce({', '.join(parts)})"


def _when(text: str) -> str:
    # ISO-8601 first; epoch numbers told apart by magnitude, as in _sql.
    x = f"TRY_CAST({text} AS DOUBLE)"
    return (
        f"coalesce(TRY_CAST({text} AS TIMESTAMPTZ), try(CASE WHEN abs({x}) < 1e11 THEN "
        f"to_timestamp({x}) WHEN abs({x}) < 1e14 THEN to_timestamp({x} / 1e3) "
        f"WHEN abs({x}) < 1e17 THEN to_timestamp({x} / 1e6) ELSE to_timestamp({x} / 1e9) END))"
    )


def _fields(records: str) -> str:
    """
    The observations with their fields extracted, types not yet checked; generations only.
    """
    texts = ", ".join(f"{_text(keys)} AS _lf_{name}" for name, keys in _FIELDS.items())
    objects = ", ".join(f"{_object(keys)} AS _lf_{name}" for name, keys in _OBJECTS.items())
    kinds = ", ".join(literal(t) for t in CALL_TYPES)
    extracted = (
        f"(SELECT *, coalesce(json_type(o) = 'OBJECT', false) AS _lf_is_object, "
        f"upper(_lf_type) AS _lf_kind FROM (SELECT *, {texts}, {objects} FROM {records}))"
    )
    meta_attrs = _object(["attributes"], "_lf_meta")
    provider = ", ".join(
        ["(_lf_params->>'$.provider')"]
        + [f"(_lf_meta->>{literal('$.' + k)})" for k in _PROVIDER_KEYS]
        + [f"({meta_attrs}->>{literal('$.' + k)})" for k in _PROVIDER_KEYS[2:]]
    )
    tokens_unit = "coalesce(upper(_lf_usage->>'$.unit'), 'TOKENS') = 'TOKENS'"
    return (
        f"(SELECT *, {_when('_lf_start')} AS _lf_start_at, {_when('_lf_end')} AS _lf_end_at, "
        f"{_when('_lf_completion')} AS _lf_completion_at, coalesce({provider}) AS _lf_provider, "
        "coalesce(_lf_usage_details->>'$.input', "
        f"CASE WHEN {tokens_unit} THEN _lf_usage->>'$.input' END, _lf_prompt_tokens) "
        "AS _lf_input_tokens, coalesce(_lf_usage_details->>'$.output', "
        f"CASE WHEN {tokens_unit} THEN _lf_usage->>'$.output' END, _lf_completion_tokens) "
        f"AS _lf_output_tokens FROM {extracted} WHERE _lf_kind IS NULL OR _lf_kind IN ({kinds}))"
    )


def _seconds(later: str, earlier: str) -> str:
    return f"CAST((epoch_us({later}) - epoch_us({earlier})) / 1e6 AS VARCHAR)"


# A timestamp that does not parse reaches the duration as its own text, which is then
# rejected as "not a finite number" naming the field: the row is never dropped or zeroed.
_TOTAL = (
    "CASE WHEN _lf_end IS NOT NULL AND _lf_end_at IS NULL THEN _lf_end "
    f"WHEN _lf_end_at IS NOT NULL AND _lf_start_at IS NOT NULL "
    f"THEN {_seconds('_lf_end_at', '_lf_start_at')} END"
)
_NOT_BEFORE_END = "_lf_completion_at >= _lf_end_at"
_TTFT = (
    "CASE WHEN _lf_completion IS NOT NULL AND _lf_completion_at IS NULL THEN _lf_completion "
    f"WHEN {_NOT_BEFORE_END} THEN NULL WHEN _lf_completion_at IS NOT NULL "
    f"AND _lf_start_at IS NOT NULL THEN {_seconds('_lf_completion_at', '_lf_start_at')} END"
)
_BAD_RECORD = (
    "malformed_record",
    "NOT _lf_is_object",
    "CASE WHEN NOT _lf_valid THEN 'line ' || _lf_line_no || ' is not JSON: ' || "
    "left(_lf_line, 60) ELSE 'observation is not a JSON object: ' || "
    "left(coalesce(o::VARCHAR, 'null'), 60) END",
)


def _raw() -> dict[str, RawColumn]:
    def col(expr: str, label: str) -> RawColumn:
        return RawColumn(expr, "VARCHAR", label)

    return {
        "call_id": col("_lf_id", "id"),
        "run_id": col("_lf_trace", "traceId"),
        "step": col("_lf_name", "name"),
        "provider": col("_lf_provider", "modelParameters.provider or metadata"),
        "model": col("_lf_model", "model"),
        "started_at": col("_lf_start", "startTime"),
        "ttft_s": col(_TTFT, "completionStartTime - startTime"),
        "total_s": col(_TOTAL, "endTime - startTime"),
        "input_tokens": col("_lf_input_tokens", "usageDetails.input"),
        "output_tokens": col("_lf_output_tokens", "usageDetails.output"),
        "status": col("CASE WHEN upper(_lf_level) = 'ERROR' THEN 'error' ELSE 'ok' END", "level"),
    }


_EXTRAS = (
    ("level", "_lf_level"),
    ("status_message", "NULLIF(_lf_status_message, '')"),
    ("parent_observation_id", "_lf_parent"),
    ("environment", "_lf_environment"),
    ("usage_details", "_lf_usage_details"),
    ("usage", "_lf_usage"),
    ("cost_details", "_lf_cost_details"),
    ("total_cost", "TRY_CAST(_lf_total_cost AS DOUBLE)"),
    ("model_parameters", scrub_json("_lf_params")),
    ("reported_latency_s", "TRY_CAST(_lf_latency AS DOUBLE)"),
    ("reported_ttft_s", "TRY_CAST(_lf_ttft AS DOUBLE)"),
    ("completion_start_not_before_end", f"CASE WHEN {_NOT_BEFORE_END} THEN true END"),
    ("prompt_name", "_lf_prompt_name"),
    ("trace_name", "_lf_trace_name"),
    ("user_id", "_lf_user_id"),
    ("session_id", "_lf_session_id"),
)


def _skipped_sql(path: str, shape: Shape) -> str:
    kinds = ", ".join(literal(t) for t in CALL_TYPES)
    if shape == "parquet":
        if "type" not in _parquet_columns(path):
            return "SELECT NULL::VARCHAR AS kind, 0::BIGINT AS n WHERE false"
        kind, source = 'upper(CAST("type" AS VARCHAR))', f"read_parquet({literal(path)})"
    else:
        kind, source = "upper(o->>'$.type')", _records(path, shape)
    return (
        f"SELECT kind, count(*) AS n FROM (SELECT {kind} AS kind FROM {source}) "
        f"WHERE kind IS NOT NULL AND kind NOT IN ({kinds}) GROUP BY 1 ORDER BY 2 DESC, 1"
    )


class Langfuse:
    """
    Langfuse observations: API JSON (pages, arrays, lines) and the Parquet blob export.
    """

    name = NAME

    def sniff_sql(self, path: str) -> str:
        """
        SQL counting the observations that are not generations, by type (to skip them).
        """
        return _skipped_sql(path, shape_of(path))

    def scan(self, path: str, sniffed: Sequence[tuple[Any, ...]], options: ScanOptions) -> Scan:
        """
        Map generations onto the call record; ``sniffed`` holds the skipped types' counts.

        Raises:
            MappingError: ``--map``, ``--unit ms`` or ``--status-map`` was given (the layout is
                fixed, durations come from timestamps, the status from ``level``).
        """
        refuse_fixed(path, NAME, options, unit="s", status="level")
        shape = shape_of(path)
        raw = _raw()
        for target, value in options.sets.items():
            raw[target] = RawColumn(literal(value), "VARCHAR", f"the value set for {target}")
        select = normalize_sql(
            _fields(_records(path, shape)),
            raw,
            extras=_EXTRAS,
            raw_text=scrub("coalesce(o::VARCHAR, _lf_line, 'null')", _PRIVATE),
            row_problem=_BAD_RECORD,
            row_number="_tk_record",
            model_hint=SET_MODEL,
            status_hint="",
        )
        notes = [f"{t} ← the value set for it" for t in options.sets]
        skipped = [(str(kind), int(n)) for kind, n in sniffed]
        if skipped:
            total = sum(n for _, n in skipped)
            by_kind = ", ".join(f"{kind} {n:,}" for kind, n in skipped)
            notes.append(f"skipped {total:,} observation(s) that are not generations ({by_kind})")
        return Scan(
            format=NAME, select_sql=select, has_call_id=True, notes=tuple(notes),
            units_known=True,
        )  # fmt: skip
