"""
DDL of the store and the migrations between schema versions.

The schema version lives in table ``meta``. Opening an older file runs the migrations from its
version up to `SCHEMA_VERSION` in one transaction; a newer file is refused with the fix.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tailkit.record import CALL_COLUMNS


SCHEMA_VERSION = 2

_CALLS = ",\n    ".join(f"{c.name} {c.sql_type}" for c in CALL_COLUMNS)

DDL_V1: tuple[str, ...] = (
    "CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL)",
    f"CREATE TABLE calls (\n    {_CALLS}\n)",
    """CREATE TABLE rejects (
    ingest_id BIGINT NOT NULL,
    source_file VARCHAR NOT NULL,
    source_row BIGINT,
    reason VARCHAR NOT NULL,
    detail VARCHAR NOT NULL,
    raw VARCHAR
)""",
    """CREATE TABLE ingests (
    ingest_id BIGINT PRIMARY KEY,
    source_file VARCHAR NOT NULL,
    content_hash VARCHAR NOT NULL,
    format VARCHAR NOT NULL,
    options JSON NOT NULL,
    rows_in BIGINT NOT NULL,
    stored BIGINT NOT NULL,
    rejected BIGINT NOT NULL,
    duplicates BIGINT NOT NULL,
    started_at TIMESTAMPTZ NOT NULL,
    finished_at TIMESTAMPTZ NOT NULL,
    tailkit_version VARCHAR NOT NULL
)""",
    "CREATE SEQUENCE ingest_id_seq START 1",
)
"""Statements that create a store of the current version from nothing (every column)."""

Execute = Callable[[str], Any]

MIGRATIONS: Mapping[int, tuple[str, ...]] = {
    # 2: job_key, the job (prompt) an attempt works on, shared by its repeats and its runs on
    # other routes: the evidence of how much a repeat attempt shares with the one it repeats
    1: ("ALTER TABLE calls ADD COLUMN job_key VARCHAR",),
}
"""``MIGRATIONS[v]`` turns a version-``v`` store into version ``v + 1``."""


def create(execute: Execute) -> None:
    """
    Create every table of the current schema and record its version.
    """
    for statement in DDL_V1:
        execute(statement)
    execute(f"INSERT INTO meta VALUES ('schema_version', '{SCHEMA_VERSION}')")


def migrate(execute: Execute, version: int, migrations: Mapping[int, tuple[str, ...]]) -> int:
    """
    Apply ``migrations`` from ``version`` up to the newest one they know.

    Returns:
        The version the store has afterwards.
    """
    while version in migrations:
        for statement in migrations[version]:
            execute(statement)
        version += 1
        execute(f"UPDATE meta SET value = '{version}' WHERE key = 'schema_version'")
    return version
