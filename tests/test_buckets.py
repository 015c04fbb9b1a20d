"""
Token buckets: every call falls in exactly one, and SQL agrees with Python.
"""

from __future__ import annotations

import pytest

from hypothesis import given
from hypothesis import strategies as st

from tailkit.record import DEFAULT_INPUT_EDGES, DEFAULT_OUTPUT_EDGES, Buckets, bucket_label
from tailkit.store import Store


_EDGES = st.lists(st.integers(0, 200_000), min_size=1, max_size=8, unique=True).map(
    lambda xs: tuple(sorted(xs))
)


@given(edges=_EDGES, tokens=st.integers(0, 10_000_000))
def test_every_count_falls_in_exactly_one_bucket(edges: tuple[int, ...], tokens: int) -> None:
    """
    Exactly one half-open bucket (or the below-range '?') contains a token count.
    """
    containing = [
        i for i, lo in enumerate(edges)
        if lo <= tokens < (edges[i + 1] if i + 1 < len(edges) else float("inf"))
    ]  # fmt: skip
    label = bucket_label(edges, tokens)

    if tokens < edges[0]:
        assert "?" == label
        assert [] == containing
    else:
        assert 1 == len(containing)
        assert label == bucket_label(edges, edges[containing[0]])


@given(edges=_EDGES, a=st.integers(0, 300_000), b=st.integers(0, 300_000))
def test_bucket_order_follows_token_order(edges: tuple[int, ...], a: int, b: int) -> None:
    """
    A larger count never lands in an earlier bucket.
    """
    labels = ["?", *[bucket_label(edges, e) for e in edges]]
    lo, hi = sorted((a, b))

    assert labels.index(bucket_label(edges, lo)) <= labels.index(bucket_label(edges, hi))


def test_default_edges_and_labels() -> None:
    """
    The documented defaults (docs/call-record.md), with 600 output tokens starting the long calls.
    """
    buckets = Buckets()

    assert (0, 1_000, 4_000, 16_000, 64_000) == DEFAULT_INPUT_EDGES
    assert (0, 64, 256, 600, 1_200, 2_400) == DEFAULT_OUTPUT_EDGES
    assert "in 4k-16k / out 600-1200" == buckets.label(9_000, 900)
    assert "in 64k+ / out ?" == buckets.label(100_000, None)


@pytest.mark.parametrize(
    ("text", "message"),
    [("0,1k,1k", "strictly increasing"), ("0,x", "is not a number"), ("0,1.5", "whole number")],
)
def test_bad_edges_are_refused(text: str, message: str) -> None:
    """
    Edges must be whole, increasing numbers.
    """
    with pytest.raises(ValueError, match=message):
        Buckets(Buckets.parse_edges(text))


@pytest.mark.slow
@given(
    edges=_EDGES,
    counts=st.lists(st.one_of(st.none(), st.integers(0, 300_000)), min_size=1, max_size=30),
)
def test_sql_buckets_match_python(edges: tuple[int, ...], counts: list[int | None]) -> None:
    """
    The store's bucket query labels every call as `Buckets` does.
    """
    buckets = Buckets(input_edges=edges)
    with Store.open(":memory:") as store:
        for i, n in enumerate(counts):
            store.execute("INSERT INTO calls (call_id, input_tokens) VALUES (?, ?)", [str(i), n])
        got = store.calls_with_buckets(buckets).order("call_id::INT").fetchall()

    assert [buckets.input_label(n) for n in counts] == [row[-2] for row in got]
