"""
One definition of a finished ("ok") call, shared by the store summary and the tail table.
"""

from __future__ import annotations

from tailkit.store.lowlevel import OK_CALL
from tailkit.tails._query import TableQuery, groups_sql


def test_the_tail_table_counts_ok_with_the_summarys_definition() -> None:
    """
    `tailkit.store.OK_CALL` is public, and the tail table's n_ok filter is that very SQL.
    """
    sql = groups_sql(TableQuery())

    assert "status = 'ok' AND total_s > 0" == OK_CALL
    assert f"count(*) FILTER ({OK_CALL}) AS n_ok" in sql
