"""
llmperf (ray-project/llmperf) per-request results: a JSON array per run.

The provider comes from the file name (``<provider>_<size>.json``), the model from the matching
summary file (``../summary/<same name>``, field ``model``). Failed requests keep their status
and error but no latency: llmperf's own docs call their latency fields meaningless. What they
reported is kept in ``attrs``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tailkit.errors import MappingError
from tailkit.formats._mapping import SET_MODEL, Scan, ScanOptions, refuse_fixed
from tailkit.formats._paths import real_path, sql_path
from tailkit.formats._sql import RawColumn, literal, normalize_sql


_FIELDS = (
    "error_code",
    "error_msg",
    "inter_token_latency_s",
    "ttft_s",
    "end_to_end_latency_s",
    "request_output_throughput_token_per_s",
    "number_total_tokens",
    "number_output_tokens",
    "number_input_tokens",
)
_OK = "error_code IS NULL"


def summary_path(path: Path) -> Path:
    """
    Where llmperf keeps the summary of an ``individual/`` results file.
    """
    return path.parent.parent / "summary" / path.name


class Llmperf:
    """
    The llmperf ``individual_responses`` JSON array.
    """

    name = "llmperf"

    def sniff_sql(self, path: str) -> None:
        """
        The layout is fixed; nothing to sniff.
        """
        return

    def scan(self, path: str, sniffed: Sequence[tuple[Any, ...]], options: ScanOptions) -> Scan:
        """
        Map llmperf fields onto the call record.

        Raises:
            MappingError: ``--map``, ``--unit ms`` or ``--status-map`` was given (the layout is
                fixed, in seconds, and the status comes from ``error_code``), or the model is
                unknown (no summary file and no ``--set model``).
        """
        del sniffed
        refuse_fixed(path, self.name, options, unit="s", status="error_code")
        file = Path(real_path(path))
        columns = "{" + ", ".join(f"'{f}': 'VARCHAR'" for f in _FIELDS) + "}"
        source = f"read_json({literal(path)}, format='array', columns={columns})"
        provider = options.sets.get("provider", file.name.split("_", 1)[0].split(".", 1)[0])
        summary = summary_path(file)
        if "model" in options.sets:
            model = RawColumn(literal(options.sets["model"]), "VARCHAR", "the value set for model")
        elif summary.exists():
            model = RawColumn(
                f"(SELECT model FROM read_json({literal(sql_path(str(summary)))}, "
                "columns={'model': 'VARCHAR'}))",
                "VARCHAR",
                f"summary {summary}",
            )
        else:
            msg = (
                f"{path}: no llmperf summary at {summary} to name the model; "
                "pass {field} model=NAME"
            )
            raise MappingError(msg, field="sets", value=None)
        code = "TRY_CAST(error_code AS INTEGER)"
        raw = {
            "provider": RawColumn(literal(provider), "VARCHAR", "the file name"),
            "model": model,
            "ttft_s": RawColumn(f"CASE WHEN {_OK} THEN ttft_s END", "VARCHAR", "ttft_s"),
            "total_s": RawColumn(
                f"CASE WHEN {_OK} THEN end_to_end_latency_s END", "VARCHAR", "end_to_end_latency_s"
            ),
            "input_tokens": RawColumn("number_input_tokens", "VARCHAR", "number_input_tokens"),
            "output_tokens": RawColumn(
                f"CASE WHEN {_OK} OR {code} = -100 THEN number_output_tokens END",
                "VARCHAR",
                "number_output_tokens",
            ),
            "status": RawColumn(
                f"CASE WHEN {_OK} THEN 'ok' WHEN {code} = 429 THEN 'rate_limited' "
                f"WHEN {code} = -100 THEN 'invalid' ELSE 'error' END",
                "VARCHAR",
                "error_code",
            ),
            "error_type": RawColumn(
                f"CASE WHEN {_OK} THEN NULL WHEN {code} = -100 THEN 'too_few_output_tokens' "
                f"WHEN {code} BETWEEN 100 AND 599 THEN 'http_' || error_code "
                "ELSE 'llmperf_error_' || error_code END",
                "VARCHAR",
                "error_code",
            ),
            "http_status": RawColumn(
                f"CASE WHEN {code} BETWEEN 100 AND 599 THEN {code} END", "INTEGER", "error_code"
            ),
        }
        for target, value in options.sets.items():
            raw[target] = RawColumn(literal(value), "VARCHAR", f"the value set for {target}")
        extras = [
            ("error_msg", "NULLIF(error_msg, '')"),
            ("inter_token_latency_s", "TRY_CAST(inter_token_latency_s AS DOUBLE)"),
            ("request_output_throughput_token_per_s",
             "TRY_CAST(request_output_throughput_token_per_s AS DOUBLE)"),
            ("number_total_tokens", "TRY_CAST(number_total_tokens AS BIGINT)"),
            ("reported_ttft_s", f"CASE WHEN NOT ({_OK}) THEN TRY_CAST(ttft_s AS DOUBLE) END"),
            ("reported_end_to_end_latency_s",
             f"CASE WHEN NOT ({_OK}) THEN TRY_CAST(end_to_end_latency_s AS DOUBLE) END"),
        ]  # fmt: skip
        return Scan(
            format=self.name,
            select_sql=normalize_sql(
                source, raw, extras=extras, model_hint=SET_MODEL, status_hint=""
            ),
            notes=(f"provider {provider!r} from the file name", f"model from {model.label}"),
        )
