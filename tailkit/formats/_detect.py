"""
Tell a file's format from its name and its first bytes (never by parsing rows).
"""

from __future__ import annotations

import gzip
import json
import zlib

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tailkit.errors import InputFileError
from tailkit.formats._parquet_footer import parquet_columns
from tailkit.formats._trace import DETECT_KEYS


HEAD_BYTES = 64 * 1024
SUFFIXES: dict[str, str] = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".csv": "csv",
    ".tsv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
}
"""File suffixes an ingest of a folder picks up (each also with ``.gz``, except Parquet)."""

_LLMPERF_KEYS = ('"end_to_end_latency_s"', '"number_input_tokens"')
_LLMPERF_SUMMARY_KEYS = ('"num_concurrent_requests"', '"results_ttft_s_quantiles_p50"')


@dataclass(frozen=True, slots=True)
class Detected:
    """
    The format of one file and why it was chosen.

    Args:
        format: A format name (``jsonl``, ``json``, ``csv``, ``parquet``, ``llmperf``,
            ``trace``) or ``skip`` for a file that holds no calls (an llmperf summary).
        why: One phrase for the user, e.g. ``"llmperf keys in a JSON array"``.
    """

    format: str
    why: str


@dataclass(frozen=True, slots=True)
class Detector:
    """
    How one specific format recognises its files by content (never by name).

    Args:
        name: The format's name.
        text: For text files: called with the first 64 KiB (decoded; may end mid-record)
            and the first line parsed as JSON (``None`` when it does not parse); returns a
            one-phrase reason when the file is this format.
        parquet: For Parquet files: called with the column names.
    """

    name: str
    text: Callable[[str, object | None], str | None] | None = None
    parquet: Callable[[Sequence[str]], str | None] | None = None


def _parquet(path: Path, detectors: Sequence[Detector]) -> Detected:
    hooks = [d for d in detectors if d.parquet is not None]
    columns = parquet_columns(path) if hooks else []
    for d in hooks:
        why = d.parquet(columns) if d.parquet is not None else None
        if why:
            return Detected(d.name, why)
    return Detected("parquet", "Parquet magic bytes")


def _specific(text: str, detectors: Sequence[Detector]) -> Detected | None:
    try:
        first: object | None = json.loads(text.split("\n", 1)[0])
    except (ValueError, RecursionError):  # nested deeper than Python parses: the reader's job
        first = None
    for d in detectors:
        why = d.text(text, first) if d.text is not None else None
        if why:
            return Detected(d.name, why)
    return None


def suffix_of(path: Path) -> str:
    """
    The format-bearing suffix of ``path``, ignoring a trailing ``.gz``.
    """
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    return suffixes[-1] if suffixes else ""


def read_head(path: Path) -> bytes:
    """
    The first bytes of a file, decompressed when it is gzip.

    Raises:
        InputFileError: The file is missing, empty, unreadable, or a broken gzip.
    """
    return read_head_whole(path)[0]


def read_head_whole(path: Path) -> tuple[bytes, bool]:
    """
    `read_head`, and whether those bytes are the whole file as stored (not gzip, not cut).

    Raises:
        InputFileError: The file is missing, empty, unreadable, or a broken gzip.
    """
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            head = fh.read(HEAD_BYTES)
    except FileNotFoundError:
        msg = f"{path}: no such file"
        raise InputFileError(msg) from None
    except OSError as exc:
        msg = f"{path}: cannot read ({exc.strerror})"
        raise InputFileError(msg) from None
    if size == 0:
        msg = f"{path}: empty file (0 bytes), nothing to ingest"
        raise InputFileError(msg)
    if head[:2] == b"\x1f\x8b":
        try:
            with gzip.open(path, "rb") as fh:
                head = fh.read(HEAD_BYTES)
        except (OSError, EOFError, zlib.error) as exc:
            msg = f"{path}: broken gzip file ({exc})"
            raise InputFileError(msg) from None
        return head, False
    return head, len(head) == size


def detect_format(path: Path, head: bytes, detectors: Sequence[Detector] = ()) -> Detected:
    """
    Choose the format of a file from its content (the suffix only tells CSV from TSV).

    Specific formats (``detectors``, asked in order) come before the generic readers.

    Raises:
        InputFileError: The file is empty, binary, or in no format tailkit reads.
    """
    if head[:4] == b"PAR1":
        return _parquet(path, detectors)
    if b"\x00" in head:
        msg = f"{path}: binary file, not JSON, CSV or Parquet (use {{field}} to force one)"
        raise InputFileError(msg, field="format", value="auto")
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
    if not text:
        msg = f"{path}: empty file (only whitespace), nothing to ingest"
        raise InputFileError(msg)
    suffix = suffix_of(path)
    specific = _specific(text, detectors)
    if specific is not None:
        return specific
    if text[0] == "[":
        if all(key in text for key in _LLMPERF_KEYS):
            return Detected("llmperf", "llmperf keys in a JSON array")
        return Detected("json", "a JSON array")
    if text[0] == "{":
        if all(key in text for key in _LLMPERF_SUMMARY_KEYS):
            return Detected("skip", "an llmperf summary (read for model names)")
        first = text.split("\n", 1)[0]
        try:
            obj = json.loads(first)
        except RecursionError:  # a JSON line nested deeper than Python parses
            return Detected("jsonl", "one JSON object per line")
        except ValueError:
            return Detected("json", "JSON objects spanning several lines")
        if isinstance(obj, dict) and all(key in obj for key in DETECT_KEYS):
            return Detected("trace", "a tailkit executor ledger (idempotency_key and winner)")
        return Detected("jsonl", "one JSON object per line")
    if suffix in (".csv", ".tsv") or "," in text.split("\n", 1)[0]:
        return Detected("csv", "comma-separated text" if suffix != ".tsv" else "tab-separated text")
    msg = (
        f"{path}: cannot tell the format (it starts with {text[:20]!r}); "
        "pass {field} jsonl|json|csv|parquet|llmperf"
    )
    raise InputFileError(msg, field="format", value="auto")
