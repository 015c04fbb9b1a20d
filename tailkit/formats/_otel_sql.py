"""
SQL that turns OTLP/JSON trace exports into one row per span, with its attributes at hand.

An OTLP/JSON file holds ``ExportTraceServiceRequest`` objects, one per line (the collector's
file exporter) or one pretty-printed document. Each request nests
``resourceSpans[] → scopeSpans[] → spans[]``; attributes are ``[{key, value: {stringValue |
intValue | doubleValue | boolValue | arrayValue}}]``. `spans_sql` flattens the three levels with
list lambdas (one row per span, file order kept) and `attr` looks one key up in a span's
attribute list. A record that is not a JSON object stays as one row (``_kind = 'bad'``), so it
can be rejected with its line; a request without spans stays as one row (``_kind = 'empty'``),
so it can be counted.
"""

from __future__ import annotations

from collections.abc import Sequence

from tailkit.formats._sql import literal


MAX_LINE = 64 * 1024 * 1024

OPERATIONS = ("chat", "text_completion", "generate_content")
"""``gen_ai.operation.name`` values of an inference span (others are tools, agents, ...)."""

MODEL_KEYS = (
    "gen_ai.request.model",
    "gen_ai.response.model",
    "llm.model_name",
    "llm.request.model",
    "llm.response.model",
)
"""Attributes that name a model: a span with one of them (and no other kind) is an LLM span."""

_NOT_INFERENCE = ("embedding", "embeddings", "rerank")
"""OpenLLMetry ``llm.request.type`` values that are not inference calls."""


def _object(expr: str) -> str:
    # json_type() raises on invalid JSON and AND does not short-circuit: guard with CASE.
    return f"CASE WHEN json_valid({expr}) THEN json_type({expr}) = 'OBJECT' ELSE false END"


def records_sql(path: str, *, lines: bool) -> str:
    """
    SQL for ``(_rec, _where, _text, _ok)`` per request.

    Its number, where it is in the file, its text, and whether it is a JSON object.

    Args:
        path: The file.
        lines: One request per line (blank lines skipped, a bad line is one bad record), or
            JSON documents (objects, or arrays of them) spread over lines.
    """
    if lines:
        source = (
            f"(SELECT row_number() OVER () AS _n, line AS _text FROM read_csv({literal(path)}, "
            "columns={'line': 'VARCHAR'}, delim='\x01', quote='', escape='', header=false, "
            f"auto_detect=false, max_line_size={MAX_LINE}))"
        )
        return (
            f"(SELECT _n AS _rec, 'line ' || _n AS _where, _text, {_object('_text')} AS _ok "
            f"FROM {source} WHERE trim(_text) <> '')"
        )
    docs = (
        f"read_json({literal(path)}, format='unstructured', records=false, "
        f"columns={{'json': 'JSON'}}, maximum_object_size={MAX_LINE})"
    )
    items = (
        f"(SELECT unnest(CASE WHEN json_type(json) = 'ARRAY' THEN json_extract(json, '$[*]') "
        f"ELSE [json] END) AS _item FROM {docs})"
    )
    return (
        "(SELECT row_number() OVER () AS _rec, 'document ' || row_number() OVER () AS _where, "
        f"_item::VARCHAR AS _text, json_type(_item) = 'OBJECT' AS _ok FROM {items})"
    )


def attribute_list(expr: str) -> str:
    """
    ``[{k, t, v}]`` of an OTLP attribute list: key, value as text, value as JSON.
    """
    text = ", ".join(
        f"a->>'$.value.{kind}'" for kind in ("stringValue", "intValue", "doubleValue", "boolValue")
    )
    return (
        f"list_transform(json_extract({expr}, '$[*]'), lambda a: "
        f"{{'k': a->>'key', 't': coalesce({text}), 'v': a->'$.value'}})"
    )


def attr(key: str, attrs: str = "_a") -> str:
    """
    SQL for the text of attribute ``key`` in the ``[{k, t, v}]`` list ``attrs`` (first wins).
    """
    return f"list_filter({attrs}, lambda x: x.k = {literal(key)})[1].t"


def attr_json(key: str, attrs: str = "_a") -> str:
    """
    SQL for the OTLP value object (JSON) of attribute ``key``.
    """
    return f"list_filter({attrs}, lambda x: x.k = {literal(key)})[1].v"


def first_of(keys: Sequence[str], attrs: str = "_a") -> str:
    """
    SQL for the first of ``keys`` that has a non-empty value (current names before old ones).
    """
    return "coalesce(" + ", ".join(f"NULLIF({attr(k, attrs)}, '')" for k in keys) + ")"


def _kind() -> str:
    op = attr("gen_ai.operation.name")
    oi = attr("openinference.span.kind")
    request_type = attr("llm.request.type")
    ops = ", ".join(literal(o) for o in OPERATIONS)
    skip = ", ".join(literal(t) for t in _NOT_INFERENCE)
    models = " OR ".join(f"{attr(k)} IS NOT NULL" for k in MODEL_KEYS)
    return (
        f"CASE WHEN NOT _ok THEN 'bad' WHEN _span IS NULL THEN 'empty' "
        f"WHEN NOT coalesce(json_type(_span) = 'OBJECT', false) THEN 'bad' "
        f"WHEN {op} IS NOT NULL THEN CASE WHEN {op} IN ({ops}) THEN 'llm' ELSE 'other' END "
        f"WHEN {oi} IS NOT NULL THEN CASE WHEN upper({oi}) = 'LLM' THEN 'llm' ELSE 'other' END "
        f"WHEN lower({request_type}) IN ({skip}) THEN 'other' "
        f"WHEN {models} THEN 'llm' ELSE 'other' END"
    )


def spans_sql(path: str, *, lines: bool) -> str:
    """
    One row per span in file order, plus one per bad record and per request without spans.

    Columns: ``_rec``, ``_where`` (``line 3, resourceSpans[0].scopeSpans[1].spans[2]``),
    ``_text`` (the span's JSON, or the bad record's text), ``_span`` (JSON), ``_a`` (its
    attributes), ``_res`` (resource attributes), ``_scope`` (JSON), ``_kind``
    (``llm`` / ``other`` / ``bad`` / ``empty``), ``_row`` (the row's number among LLM and bad
    rows, in file order).
    """
    scopes = (
        "list_concat(json_extract(rs, '$.scopeSpans[*]'), "
        "json_extract(rs, '$.instrumentationLibrarySpans[*]'))"
    )
    flat = (
        "flatten(flatten(list_transform(json_extract(_text::JSON, '$.resourceSpans[*]'), "
        f"lambda rs, ri: list_transform({scopes}, lambda ss, si: "
        "list_transform(json_extract(ss, '$.spans[*]'), lambda sp, pi: {"
        "'path': 'resourceSpans[' || (ri - 1) || '].scopeSpans[' || (si - 1) || '].spans[' "
        "|| (pi - 1) || ']', 'ord': [ri, si, pi], 'span': sp, "
        "'res': json_extract(rs, '$.resource.attributes'), "
        "'scope': coalesce(json_extract(ss, '$.scope'), "
        "json_extract(ss, '$.instrumentationLibrary'))})))))"
    )
    empty = (
        "{'path': NULL::VARCHAR, 'ord': NULL::BIGINT[], 'span': NULL::JSON, "
        "'res': NULL::JSON, 'scope': NULL::JSON}"
    )
    unnested = (
        f"(SELECT _rec, _where, _text AS _record, _ok, unnest(CASE WHEN NOT _ok THEN [{empty}] "
        f"WHEN len({flat}) = 0 THEN [{empty}] ELSE {flat} END) AS _s "
        f"FROM {records_sql(path, lines=lines)})"
    )
    span_attrs = attribute_list("_s.span->'$.attributes'")
    spans = (
        "(SELECT _rec, _s.ord AS _ord, _ok, _where || coalesce(', ' || _s.path, '') AS _where, "
        "coalesce(_s.span::VARCHAR, _record) AS _text, _s.span AS _span, "
        f"{span_attrs} AS _a, "
        f"{attribute_list('_s.res')} AS _res, _s.scope AS _scope FROM {unnested})"
    )
    # The path counts from 1 in lambdas and from 0 in OTLP's own (protobuf) terms.
    kinded = f"(SELECT *, {_kind()} AS _kind FROM {spans})"
    return (
        f"(SELECT *, CASE WHEN _kind IN ('llm', 'bad') THEN row_number() OVER "
        f"(PARTITION BY _kind IN ('llm', 'bad') ORDER BY _rec, _ord) END AS _row FROM {kinded})"
    )


def counts_sql(path: str, *, lines: bool) -> str:
    """
    SQL for one row: LLM spans, other spans, bad records, requests without spans.
    """
    return (
        "SELECT count(*) FILTER (WHERE _kind = 'llm'), count(*) FILTER (WHERE _kind = 'other'), "
        "count(*) FILTER (WHERE _kind = 'bad'), count(*) FILTER (WHERE _kind = 'empty') "
        f"FROM {spans_sql(path, lines=lines)}"
    )
