"""
The registry of formats: each adapter by name, and the detectors asked before the generic rules.
"""

from pathlib import Path

from tailkit.formats._detect import Detected, Detector
from tailkit.formats._detect import detect_format as _detect_format
from tailkit.formats._generic import Csv, JsonDocument, JsonLines, Parquet
from tailkit.formats._llmperf import Llmperf
from tailkit.formats._mapping import FileFormat
from tailkit.formats._trace import Trace


FORMATS: dict[str, FileFormat] = {
    f.name: f for f in (JsonLines(), JsonDocument(), Csv(), Parquet(), Llmperf(), Trace())
}
"""Format name → adapter with ``sniff_sql(path)`` and ``scan(path, sniffed, options)``."""

GENERIC = ("jsonl", "json", "csv", "parquet")
"""Formats that read any file of their kind (columns named after the call record, or mapped)."""

DETECTORS: list[Detector] = []
"""Specific formats' content detectors, asked in order before the generic rules."""


def _register(adapter: FileFormat, detector: Detector) -> None:
    FORMATS[adapter.name] = adapter
    DETECTORS.append(detector)


def _register_all() -> None:
    from tailkit.formats import _guidellm, _helicone, _langfuse, _litellm, _otel, _vllm_bench

    _register(_otel.Otel(), Detector("otel", text=_otel.detect))
    _register(_litellm.Litellm(), Detector("litellm", text=_litellm.detect))
    _register(_helicone.Helicone(), Detector("helicone", text=_helicone.detect))

    _register(
        _langfuse.Langfuse(),
        Detector("langfuse", text=_langfuse.detect, parquet=_langfuse.detect_parquet),
    )
    _register(_vllm_bench.VllmBench(), Detector("vllm-bench", text=_vllm_bench.detect))
    _register(_guidellm.Guidellm(), Detector("guidellm", text=_guidellm.detect))

    from tailkit.formats import _aiperf, _genai_perf

    _register(_genai_perf.GenaiPerf(), Detector("genai-perf", text=_genai_perf.detect))
    _register(_aiperf.Aiperf(), Detector("aiperf", text=_aiperf.detect))


_register_all()


def detect_format(path: Path, head: bytes) -> Detected:
    """
    The format of a file, from its content: a specific format if one recognises it.

    Raises:
        InputFileError: The file is empty, binary, or in no format tailkit reads.
    """
    return _detect_format(path, head, DETECTORS)


def describe(name: str) -> str:
    """
    One line on what a format reads (its adapter's docstring summary).
    """
    doc = (type(FORMATS[name]).__doc__ or "").strip()
    return doc.splitlines()[0] if doc else name
