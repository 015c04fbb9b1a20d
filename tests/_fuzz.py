"""
The check every format's Hypothesis test ends with: each line stored, rejected or a duplicate.
"""

from __future__ import annotations

from pathlib import Path

from tailkit.ingest import ScanOptions, ingest_paths
from tailkit.store import Store


def assert_every_line_accounted(
    folder: Path, lines: list[str], *, format: str, unit: str | None = None
) -> None:
    """Ingest ``lines`` as one file: no error, counts add up, rejects have reasons, sane TTFTs."""
    path = folder / "any.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with Store.open(folder / "t.duckdb") as store:
        report = ingest_paths(store, [path], format=format, options=ScanOptions(unit=unit))
        assert report.ok, report.errors
        totals = report.totals()
        assert len(lines) == totals["rows_in"]
        assert totals["rows_in"] == totals["stored"] + totals["rejected"] + totals["duplicates"]
        assert (0,) == store.fetchone("SELECT count(*) FROM rejects WHERE reason IS NULL")
        assert (0,) == store.fetchone(
            "SELECT count(*) FROM calls WHERE ttft_s = 0 OR ttft_s >= total_s OR total_s < 0"
        )


def assert_document_accounted(text: str, *, format: str) -> None:
    """Ingest ``text`` as one file; if it is readable, every record is stored or explained."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "r.json"
        path.write_text(text)
        with Store.open(Path(tmp) / "t.duckdb") as store:
            report = ingest_paths(store, [path], format=format)
            if not report.ok:
                return
            totals = report.totals()
            stored = store.fetchone("SELECT count(*) FROM calls")
            unexplained = store.fetchone(
                "SELECT count(*) FROM rejects WHERE reason IS NULL OR detail IS NULL"
            )
    assert totals["rows_in"] == totals["stored"] + totals["rejected"] + totals["duplicates"]
    assert (totals["stored"],) == stored
    assert (0,) == unexplained
