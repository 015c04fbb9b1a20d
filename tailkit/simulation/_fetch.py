"""
What the route samples need from the store, for every route x bucket at once.

A pass over a large store costs seconds whatever it selects, so the counts of every route x
bucket come from one ``GROUP BY`` and the kept cut ages of all of them from one query; the
finished calls and the failures of each distinct route x bucket from one sampled query
(`tailkit.store.group_sample_sql`), steps that share a route and bucket sharing it. What comes
back is bounded by the sample size per route x bucket; a route x bucket with no more calls
than that comes back whole, in the store's order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt

from tailkit.errors import ConfigError
from tailkit.record import Buckets
from tailkit.store import Store
from tailkit.store.lowlevel import calls_with_buckets_sql, group_sample_sql


__all__ = ["Counts", "Need", "RouteData", "fetch", "since_sql"]

CUT = "coalesce(isfinite(censored_at_s) AND censored_at_s > 0, FALSE)"
OK = f"coalesce(status = 'ok' AND isfinite(total_s) AND total_s > 0, FALSE) AND NOT {CUT}"
FAILED = "coalesce(status IN ('error', 'rate_limited'), FALSE)"
UNSIZED = "?"  # the bucket of a call without a token count (`tailkit.record.bucket_label`)
_Array = npt.NDArray[np.float64]


def since_sql(since: datetime | None) -> str | None:
    """
    SQL true for the calls started at or after ``since`` (``None``: no limit, every call).

    A call without a start time (``started_at`` NULL) is left out when a limit is given.

    Raises:
        ConfigError: ``since`` has no time zone.
    """
    if since is None:
        return None
    if since.tzinfo is None or since.utcoffset() is None:
        msg = f"{{field}} must be a time-zone-aware datetime (UTC), got {since.isoformat()}"
        raise ConfigError(
            msg, field="since", value=since.isoformat(),
            fix="Pass datetime(..., tzinfo=timezone.utc), or an ISO time with its offset.",
        )  # fmt: skip
    moment = since.astimezone(UTC).isoformat()
    return f"started_at >= TIMESTAMPTZ {lit(moment)}"


def within(where: str, scope: str | None) -> str:
    """
    ``where``, and ``scope`` when there is one (`since_sql`).
    """
    return where if scope is None else f"({where}) AND {scope}"


def lit(text: str) -> str:
    """
    ``text`` as a SQL string literal.
    """
    return "'" + text.replace("'", "''") + "'"


@dataclass(frozen=True, slots=True)
class Need:
    """
    One route in one step's bucket: input and output bucket labels, ``None`` for any.
    """

    provider: str
    model: str
    input_bucket: str | None
    output_bucket: str | None

    def sql(self, *, output: bool = True) -> str:
        """
        SQL true for the calls of this route and input bucket (and output bucket).

        Without the output bucket (failures and cut calls) a call of unknown input size is
        the route's too: an attempt that failed or was cut before the provider reported its
        usage (every such line of an executor's ledger) has no input tokens, and leaving it
        out would make a route look as if it never failed. `_counts` gives a bucket its
        share of them.
        """
        parts = [f"provider = {lit(self.provider)}", f"model = {lit(self.model)}"]
        if self.input_bucket is not None:
            known = f"input_bucket = {lit(self.input_bucket)}"
            parts.append(known if output else f"({known} OR input_bucket = {lit(UNSIZED)})")
        if output and self.output_bucket is not None:
            parts.append(f"output_bucket = {lit(self.output_bucket)}")
        return "(" + " AND ".join(parts) + ")"

    def route_sql(self) -> str:
        """
        SQL true for the calls of this route, any bucket (a filter on ``calls`` itself).
        """
        return f"(provider = {lit(self.provider)} AND model = {lit(self.model)})"

    def keys(self, *, output: bool = True) -> tuple[str, ...]:
        """
        The columns that tell this need's calls from another's of the same shape.
        """
        keys: tuple[str, ...] = ("provider", "model")
        keys += ("input_bucket",) if self.input_bucket is not None else ()
        if output and self.output_bucket is not None:
            keys += ("output_bucket",)
        return keys


@dataclass(frozen=True, slots=True)
class Counts:
    """
    Exact counts of a route's calls in a step's input bucket.
    """

    attempts: int
    ok: int
    cut: int
    bucket: int  # finished calls in the output bucket too
    failed: int
    invalid: int

    def keep_cut(self, finished: int) -> int:
        """
        Cut calls to keep with ``finished`` finished ones: the input bucket's proportion.
        """
        return round(self.cut * finished / self.ok) if self.ok else 0


@dataclass(frozen=True, slots=True)
class RouteData:
    """
    A need's exact counts and its (sampled) finished calls, failures and cut ages.
    """

    counts: Counts
    total_s: _Array
    ttft_s: _Array
    error_s: _Array
    cut_s: _Array
    output_tokens: _Array | None = None  # of the finished calls (NaN: unknown)


def fetch(
    store: Store,
    needs: Sequence[Need],
    *,
    buckets: Buckets,
    size: int,
    seed: int,
    scope: str | None = None,
) -> dict[Need, RouteData]:
    """
    Every need's data (needs with fewer than two finished calls are left out).

    At most ``size`` finished calls and failures each; cut ages in the input bucket's
    proportion to the finished calls, evenly over their ranks. ``scope``: SQL that every
    call read must pass too (`since_sql`; ``None``: every call).
    """
    needs = list(dict.fromkeys(needs))
    # the routes filter the calls before their buckets are computed: twice as fast on a
    # large store as filtering the labelled calls
    routes = " OR ".join(dict.fromkeys(n.route_sql() for n in needs)) or "FALSE"
    base = calls_with_buckets_sql(buckets, where=within(routes, scope))
    counts = _counts(store, base, needs)
    live = [n for n in needs if counts[n].bucket >= 2]
    finished = _rows(
        store, buckets, live, counts, columns=("total_s", "ttft_s", "output_tokens"), where=OK,
        size=size, seed=seed, output=True, scope=scope,
    )  # fmt: skip
    failed = _rows(
        store, buckets, live, counts, columns=("total_s",), where=FAILED, size=size, seed=seed,
        output=False, scope=scope,
    )  # fmt: skip
    keep = {n: counts[n].keep_cut(finished[n][0].size) for n in live}
    cuts = _cut_ages(store, base, live, {n: (counts[n].cut, keep[n]) for n in live})
    return {
        n: RouteData(
            counts[n], finished[n][0], finished[n][1], failed[n][0], cuts[n], finished[n][2]
        )
        for n in live
    }


def _counts(store: Store, base: str, needs: list[Need]) -> dict[Need, Counts]:
    routes = " OR ".join(dict.fromkeys(n.sql(output=False) for n in needs)) or "FALSE"
    rows = store.fetchall(
        "SELECT provider, model, input_bucket, output_bucket, count(*), "
        f"count(*) FILTER ({OK}), count(*) FILTER ({CUT}), count(*) FILTER ({FAILED}), "
        f"count(*) FILTER (status = 'invalid') FROM ({base}) WHERE {routes} GROUP BY ALL"
    )
    out = {}
    for need in needs:
        total = np.zeros(5, dtype=np.int64)
        unsized = np.zeros(5, dtype=np.int64)  # failed or cut before the input was counted
        known = 0  # the route's finished calls of known input size, any input bucket
        bucket = 0
        for provider, model, in_label, out_label, *n in rows:
            if (provider, model) != (need.provider, need.model):
                continue
            known += int(n[1]) if in_label != UNSIZED else 0
            if need.input_bucket is not None and in_label == UNSIZED:
                unsized += np.asarray(n, dtype=np.int64)
                continue
            if need.input_bucket is not None and in_label != need.input_bucket:
                continue
            total += np.asarray(n, dtype=np.int64)
            if need.output_bucket is None or out_label == need.output_bucket:
                bucket += int(n[1])
        attempts, ok, cut, failed, invalid = (int(v) for v in total)
        if unsized[1:].any() and known:  # this input bucket's share of the unsized ones
            share = ok / known
            cut, failed, invalid = (
                v + round(share * int(u))
                for v, u in zip((cut, failed, invalid), unsized[2:], strict=True)
            )
            attempts = ok + cut + failed + invalid + (attempts - int(total[1:].sum()))
        out[need] = Counts(attempts, ok, cut, bucket, failed, invalid)
    return out


def _rows(
    store: Store,
    buckets: Buckets,
    needs: list[Need],
    counts: dict[Need, Counts],
    *,
    columns: tuple[str, ...],
    where: str,
    size: int,
    seed: int,
    output: bool,
    scope: str | None = None,
) -> dict[Need, list[_Array]]:
    """
    ``columns`` of each need's rows passing ``where``: all of them, or a sample of ``size``.

    One query per distinct route x bucket (one group at a time, so DuckDB holds one sample,
    not all of them): read whole, in the store's order, when it has ``size`` rows or fewer
    (as before samples existed, so small stores give the same plans), else sampled and sorted.
    """
    names = ", ".join(columns)
    out: dict[Need, list[_Array]] = {}
    units: dict[str, list[Need]] = {}  # needs with the same rows (same route, same buckets)
    for need in needs:
        units.setdefault(need.sql(output=output), []).append(need)
    for unit, sharing in units.items():
        first = sharing[0]
        base = calls_with_buckets_sql(buckets, where=within(first.route_sql(), scope))
        chosen = f"{where} AND {unit}"
        if (counts[first].bucket if output else counts[first].failed) <= size:
            sql = f"SELECT {names} FROM ({base}) WHERE {chosen}"
        else:
            keys = first.keys(output=output)
            rows = group_sample_sql(f"({base}) AS c", keys, size=size, seed=seed, where=chosen)
            sql = f"SELECT {names} FROM ({rows}) ORDER BY ALL"
        table = store.arrow(sql)
        values = [
            np.asarray(table.column(c).to_numpy(zero_copy_only=False), dtype=np.float64)
            for c in columns
        ]
        for need in sharing:
            out[need] = values
    return out


def _cut_ages(
    store: Store, base: str, needs: list[Need], wanted: dict[Need, tuple[int, int]]
) -> dict[Need, _Array]:
    """
    Each need's ``keep`` of its ``n_cut`` cut ages, evenly over their ranks, sorted.

    One query per shape (input bucket given, or any, so that groups never overlap): the cut
    calls of each route x input bucket ranked by age, joined with the (need, rank) pairs
    wanted, so only the kept ages come back.
    """
    out: dict[Need, _Array] = {}
    for any_input in (False, True):
        shape = [n for n in needs if (n.input_bucket is None) == any_input]
        if shape:
            out |= _shape_cut_ages(store, base, shape, wanted)
    return out


def _shape_cut_ages(
    store: Store, base: str, needs: list[Need], wanted: dict[Need, tuple[int, int]]
) -> dict[Need, _Array]:
    out = {n: np.zeros(0) for n in needs}
    pairs: list[tuple[int, int, int]] = []  # (need, route x input bucket, rank)
    groups = list(dict.fromkeys(n.sql(output=False) for n in needs))
    for i, need in enumerate(needs):
        n_cut, keep = wanted[need]
        if keep <= 0:
            continue
        at = np.arange(n_cut) if keep >= n_cut else np.linspace(0, n_cut - 1, keep).round()
        group = groups.index(need.sql(output=False))
        pairs.extend((i, group, int(r)) for r in at)
    if not pairs:
        return out
    which = " ".join(f"WHEN {g} THEN {i}" for i, g in enumerate(groups))
    ranked = (
        f"SELECT _group, censored_at_s AS age, row_number() OVER (PARTITION BY _group "
        f"ORDER BY censored_at_s) - 1 AS _rank FROM (SELECT CASE {which} END AS _group, "
        f"censored_at_s FROM ({base}) WHERE {CUT} AND ({' OR '.join(groups)}))"
    )
    need_ids, group_ids, ranks = ([p[k] for p in pairs] for k in range(3))
    rows = store.fetchall(
        f"SELECT w._need, r.age FROM ({ranked}) AS r JOIN (SELECT unnest(?) AS _need, "
        "unnest(?) AS _group, unnest(?) AS _rank) AS w ON r._group = w._group "
        "AND r._rank = w._rank ORDER BY w._need, r.age",
        [need_ids, group_ids, ranks],
    )
    got = np.asarray(rows, dtype=np.float64).reshape(-1, 2)
    for i, need in enumerate(needs):
        out[need] = got[got[:, 0] == i, 1]
    return out
