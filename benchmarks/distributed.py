"""
Distributed: ``tailkit stats`` over a partitioned log on one machine and on a local Dask cluster.

Writes a seeded, production-like log (``benchmarks/scale.py``'s generator) as ``--partitions``
Parquet files ``part-00000.parquet`` ... of consecutive rows (zstd), in bounded memory, or splits
an existing log given with ``--from FILE.parquet`` the same way; ``--reuse`` measures the parts
already in ``--workdir``. Then runs, each in a fresh child process whose peak RSS is measured
(GNU time's ``%M``; see ``scale.measure``), and interleaved when ``--repeat`` > 1:

- exact: ``tailkit stats --source 'DIR/*.parquet' --json``, the single-machine engine (DuckDB
  reads the files in place; quantiles exact);
- sketch: the same with ``--sketch``: the mergeable per-group summaries, computed in that one
  process;
- dask N: ``--engine dask --scheduler local --workers N`` for each N in ``--workers``: the same
  summaries, one Dask task per file, on a LocalCluster of N worker processes that the command
  starts and stops (both inside its wall time).

Per variant: wall seconds of the whole child (start-up, and for Dask the cluster's start and
stop, included), the ratio to the exact variant's wall time measured in the same run, the
client's peak RSS (GNU time's ``%M``: Linux folds the peak of every process the command waited
for into it, so with a local cluster it is the larger of the client's and its workers'), each
worker's peak RSS and the summaries' size (from the JSON ``engine`` field), and the partitions.

Agreement with the exact table, group by group (matched on the key columns, e.g. provider,
model, input_bucket, output_bucket): ``n`` must be equal, and p50 and p99 must be within 1 % of
the exact values (PASS/FAIL); the table also counts the rows whose p50 or p99 falls outside the
row's own ``quantile_rel_error`` bound, and the rows skipped because the exact value is missing
or infinite. Exits 0 whatever the figures (``--check``: 1 when a variant's agreement FAILs),
nonzero on errors.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import shutil
import sys
import tempfile

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


HERE = Path(__file__).resolve().parent
TARGET_REL = 0.01  # p50 and p99 within 1 % of the exact values
KEY_FALLBACK = ("provider", "model", "input_bucket", "output_bucket")
BATCH = 1_000_000  # rows read at a time when splitting --from
CLIENT_RSS_NOTE = (
    "client peak RSS is GNU time's %M, which includes the processes the command waited for: "
    "with --scheduler local, the Dask workers too; worker peak RSS is what each worker reported"
)


def _scale() -> ModuleType:
    """
    ``benchmarks/scale.py`` (generator, ``measure``, ``interleave``, ``machine``) by its path.
    """
    module = sys.modules.get("bench_scale")
    if module is not None:
        return module
    spec = importlib.util.spec_from_file_location("bench_scale", HERE / "scale.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_scale"] = module
    spec.loader.exec_module(module)
    return module


scale = _scale()


# ---------------------------------------------------------------------------------------------
# The partitioned log


def part_path(out: Path, i: int) -> Path:
    """
    The ``i``-th part's path, ``out/part-0000i.parquet``.
    """
    return out / f"part-{i:05d}.parquet"


def existing_parts(out: Path) -> list[Path]:
    """
    The ``part-*.parquet`` files in ``out``, sorted.
    """
    return sorted(out.glob("part-*.parquet"))


def write_parts(
    tables: Iterator[pa.Table], schema: pa.Schema, rows: int, partitions: int, out: Path
) -> list[Path]:
    """
    Write the rows of ``tables`` (in order) into ``partitions`` zstd Parquet files.

    Part ``i`` holds rows ``[i * rows // partitions, (i + 1) * rows // partitions)``: each file
    holds consecutive rows, and only one incoming table is in memory at a time.

    Args:
        tables: The log's rows, chunk by chunk; ``rows`` in all.
        schema: Their Arrow schema.
        rows: Rows in all.
        partitions: Files to write (at most ``rows``).
        out: Folder for the files (created if missing; earlier parts are deleted first).

    Returns:
        The parts written, in order.

    Raises:
        ValueError: ``tables`` held fewer or more rows than ``rows``.
    """
    out.mkdir(parents=True, exist_ok=True)
    for old in existing_parts(out):
        old.unlink()
    bounds = [i * rows // partitions for i in range(partitions + 1)]
    paths = [part_path(out, i) for i in range(partitions)]
    part, written, writer = 0, 0, pq.ParquetWriter(paths[0], schema, compression="zstd")
    try:
        for chunk in tables:
            table = chunk
            while table.num_rows:
                if part >= partitions:
                    msg = f"the log holds more than the {rows:,} rows expected"
                    raise ValueError(msg)
                take = min(table.num_rows, bounds[part + 1] - written)
                writer.write_table(table.slice(0, take))
                table, written = table.slice(take), written + take
                if written == bounds[part + 1]:
                    writer.close()
                    part += 1
                    if part < partitions:
                        writer = pq.ParquetWriter(paths[part], schema, compression="zstd")
    finally:
        writer.close()
    if written != rows:
        msg = f"the log holds {written:,} rows, {rows:,} expected"
        raise ValueError(msg)
    return paths


def split_file(source: Path, partitions: int, out: Path) -> list[Path]:
    """
    Split an existing Parquet log into ``partitions`` parts of consecutive rows.
    """
    f = pq.ParquetFile(source)
    batches = (pa.Table.from_batches([b]) for b in f.iter_batches(batch_size=BATCH))
    return write_parts(batches, f.schema_arrow, f.metadata.num_rows, partitions, out)


def generate(rows: int, seed: int, partitions: int, out: Path) -> list[Path]:
    """
    Generate the seeded log of ``rows`` calls straight into ``partitions`` parts.
    """
    return write_parts(scale.chunks(rows, seed), scale.SCHEMA, rows, partitions, out)


def parts_rows(paths: list[Path]) -> int:
    """
    Rows in all these Parquet files (from their footers).
    """
    return sum(pq.ParquetFile(p).metadata.num_rows for p in paths)


# ---------------------------------------------------------------------------------------------
# Agreement with the exact table


def key_columns(rows: list[dict[str, Any]]) -> list[str]:
    """
    The table's group keys: the non-numeric columns before ``n`` (e.g. provider ... bucket).
    """
    if not rows or "n" not in rows[0]:
        return list(KEY_FALLBACK)
    keys = []
    for name in rows[0]:
        if name == "n":
            break
        if all(r.get(name) is None or isinstance(r.get(name), str) for r in rows):
            keys.append(name)
    return keys or list(KEY_FALLBACK)


def number(value: Any) -> float | None:
    """
    A JSON cell as a float (``"inf"`` is infinity); None when missing or not a number.
    """
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def agreement(exact: list[dict[str, Any]], other: list[dict[str, Any]]) -> dict[str, Any]:
    """
    Compare a summaries table with the exact one, group by group.

    Args:
        exact: Rows of the exact single-machine table.
        other: Rows of the table to check (``--sketch`` or ``--engine dask``).

    Returns:
        ``groups``, ``keys``, ``n_mismatch`` (groups whose ``n`` differs, or that only one
        table has), per quantile q in p50, p99: ``max_rel_q`` (largest relative difference),
        ``outside_q`` (rows beyond their ``quantile_rel_error``, or with no value where exact
        has one), ``skipped_q`` (rows whose exact value is missing or infinite); and ``pass``:
        n all equal and both largest differences within `TARGET_REL`.
    """
    keys = key_columns(exact)
    by_key = {tuple(r.get(k) for k in keys): r for r in other}
    seen: set[tuple[Any, ...]] = set()
    doc: dict[str, Any] = {"groups": len(exact), "keys": keys, "n_mismatch": 0}
    for q in ("p50", "p99"):
        doc |= {f"max_rel_{q}": 0.0, f"outside_{q}": 0, f"skipped_{q}": 0}
    for row in exact:
        key = tuple(row.get(k) for k in keys)
        seen.add(key)
        got = by_key.get(key)
        if got is None or got.get("n") != row.get("n"):
            doc["n_mismatch"] += 1
        for q in ("p50", "p99"):
            want = number(row.get(f"{q}_s"))
            if want is None or not math.isfinite(want):
                doc[f"skipped_{q}"] += 1
                continue
            value = None if got is None else number(got.get(f"{q}_s"))
            if value is None or not math.isfinite(value):
                rel = math.inf
            else:
                rel = abs(value - want) / abs(want) if want else (0.0 if value == 0 else math.inf)
            doc[f"max_rel_{q}"] = max(doc[f"max_rel_{q}"], rel)
            bound = None if got is None else number(got.get("quantile_rel_error"))
            if bound is None or rel > bound * (1 + 1e-9):
                doc[f"outside_{q}"] += 1
    doc["n_mismatch"] += sum(1 for k in by_key if k not in seen)
    doc["pass"] = (
        doc["n_mismatch"] == 0
        and doc["max_rel_p50"] <= TARGET_REL
        and doc["max_rel_p99"] <= TARGET_REL
    )
    return doc


# ---------------------------------------------------------------------------------------------
# Measuring


def variants(tailkit: str, source: str, workers: list[int]) -> dict[str, list[str]]:
    """
    The command line of each variant, by name.
    """
    stats = [tailkit, "stats", "--source", source, "--json"]
    out = {"exact": stats, "sketch": [*stats, "--sketch"]}
    for n in workers:
        out[f"dask {n}"] = [*stats, "--engine", "dask", "--scheduler", "local",
                            "--workers", str(n)]  # fmt: skip
    return out


def run_all(
    cmds: dict[str, list[str]], d: Path, repeat: int
) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """
    Run the variants interleaved ``repeat`` times; their figures and each run's JSON output.
    """
    docs: dict[str, list[dict[str, Any]]] = {name: [] for name in cmds}

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    def step(name: str) -> Any:
        def run() -> dict[str, float]:
            wall, rss, out = scale.measure(cmds[name], d)
            try:
                doc = json.loads(out)
            except json.JSONDecodeError as exc:
                msg = f"{name}: stats --json printed no JSON ({exc}): {out[:300]}"
                raise scale.BenchError(msg) from exc
            if not isinstance(doc, dict) or not doc.get("table"):
                msg = f"{name}: stats --json printed no table rows: {out[:300]}"
                raise scale.BenchError(msg)
            docs[name].append(doc)
            return {"s": wall, "rss_mb": rss}

        return run

    measured = scale.interleave({name: step(name) for name in cmds}, repeat, log)
    return measured, docs


def results(
    measured: dict[str, Any], docs: dict[str, list[dict[str, Any]]], partitions: int
) -> list[dict[str, Any]]:
    """
    One row per variant: time, ratio to exact, memory, summaries' size and agreement.

    ``partitions`` (the files read) stands in where the engine does not report its own.
    """
    exact_s = measured.get("exact", {}).get("s")
    exact_rows = docs["exact"][-1]["table"] if docs.get("exact") else None
    out = []
    for name, m in measured.items():
        r: dict[str, Any] = {"variant": name}
        if "error" in m:
            out.append(r | {"error": m["error"]})
            continue
        engine = docs[name][-1].get("engine", {})
        worker_bytes = [max(col) for col in zip(*(d.get("engine", {}).get("peak_rss_bytes")
                        or [] for d in docs[name]), strict=False)]  # fmt: skip
        r |= {
            "engine": engine.get("name"),
            "workers": engine.get("workers"),
            "partitions": engine.get("partitions", partitions),
            "s": m["s"],
            "runs_s": [x["s"] for x in m["runs"]],
            "ratio_to_exact": m["s"] / exact_s if exact_s else None,
            "client_rss_mb": m["rss_mb"],
            "worker_rss_mb": [b / 2**20 for b in worker_bytes],
            "summary_bytes": engine.get("summary_bytes"),
            "summary_bytes_per_group": engine.get("summary_bytes_per_group"),
            "groups": len(docs[name][-1]["table"]),
        }
        if name != "exact" and exact_rows is not None:
            r["agreement"] = agreement(exact_rows, docs[name][-1]["table"])
        out.append(r)
    return out


def render(doc: dict[str, Any]) -> str:
    """
    The results as Markdown: the machine and log, time and memory, then agreement with exact.
    """
    info = doc["machine"]
    lines = [
        f"machine: nproc={info['nproc']} mem={info['mem_gb']:.0f} GB python={info['python']} "
        f"duckdb={info['duckdb']} ({info['platform']}); commit {info['commit']}",
        f"log: {doc['rows']:,} rows in {doc['partitions']} Parquet parts, "
        f"{doc['parquet_mb']:,.0f} MB ({doc['log']}); repeat={doc['repeat']} "
        "(median s, max RSS); wall seconds of whole child processes",
        "",
        "| variant | workers | partitions | s | / exact s | client peak RSS MB | "
        "worker peak RSS MB | summary MB | bytes / group | groups |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]

    def cell(value: Any, fmt: str) -> str:
        return "" if value is None else format(value, fmt)

    for r in doc["results"]:
        if "error" in r:
            lines.append(f"| {r['variant']} | FAILED: {r['error'].splitlines()[0]} |||||||||")
            continue
        workers = ", ".join(f"{x:,.0f}" for x in r["worker_rss_mb"])
        summary = None if r["summary_bytes"] is None else r["summary_bytes"] / 1e6
        lines.append(
            f"| {r['variant']} | {cell(r['workers'], 'd')} | {cell(r['partitions'], 'd')} | "
            f"{r['s']:.2f} | {cell(r['ratio_to_exact'], '.2f')} | {r['client_rss_mb']:,.0f} | "
            f"{workers} | {cell(summary, ',.1f')} | {cell(r['summary_bytes_per_group'], ',')} | "
            f"{r['groups']:,} |"
        )
    lines += [
        "",
        f"Agreement with exact (target: n equal, p50 and p99 within {TARGET_REL:.0%}):",
        "",
        "| variant | groups | n mismatches | max p50 rel diff | max p99 rel diff | "
        "outside own bound p50 / p99 | skipped (exact inf/null) p50 / p99 | |",
        "|---|---:|---:|---:|---:|---|---|---|",
    ]
    for r in doc["results"]:
        a = r.get("agreement")
        if a is None:
            continue
        lines.append(
            f"| {r['variant']} | {a['groups']:,} | {a['n_mismatch']} | {a['max_rel_p50']:.3%} | "
            f"{a['max_rel_p99']:.3%} | {a['outside_p50']} / {a['outside_p99']} | "
            f"{a['skipped_p50']} / {a['skipped_p99']} | {'PASS' if a['pass'] else 'FAIL'} |"
        )
    lines += [f"- {n}" for n in doc["notes"]]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Command line


def finite(value: Any) -> Any:
    """
    ``value`` with every infinite or NaN float written ``"inf"``/``"nan"`` (as tailkit's JSON).
    """
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def worker_counts(text: str) -> list[int]:
    """
    ``--workers 1,2,4`` as a list of positive ints (``none``: no Dask variant).
    """
    if text.strip().lower() == "none":
        return []
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        msg = f"--workers wants positive counts separated by commas, e.g. 1,2; got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return counts


def parser() -> argparse.ArgumentParser:
    """
    The command line; ``--help`` gives the module docstring.
    """
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--rows",
        type=int,
        default=100_000_000,
        help="rows of the generated log (default 100 M; ignored with --from)",
    )
    p.add_argument(
        "--partitions",
        type=int,
        default=50,
        help="Parquet parts of about rows / partitions consecutive rows (default 50)",
    )
    p.add_argument(
        "--from",
        dest="source",
        type=Path,
        metavar="FILE.parquet",
        help="split this Parquet log into the parts instead of generating one",
    )
    p.add_argument("--seed", type=int, default=7, help="seed of the generated log (default 7)")
    p.add_argument(
        "--workdir",
        type=Path,
        help="folder for the parts (default: a temporary directory, deleted)",
    )
    p.add_argument(
        "--reuse",
        action="store_true",
        help="with --workdir: measure the --partitions parts already there (from an "
        "earlier --keep run) instead of writing them again",
    )
    p.add_argument(
        "--keep", action="store_true", help="keep the parts written (default: deleted at the end)"
    )
    p.add_argument(
        "--workers",
        type=worker_counts,
        default=[1, 2],
        metavar="N,N",
        help="Dask worker counts, one variant each (default 1,2; none: no Dask variant)",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs per variant, interleaved; median s, max RSS (default 1)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document, no tables")
    p.add_argument(
        "--check",
        action="store_true",
        help="exit 1 when a variant's agreement with exact is FAIL (default: exit 0 "
        "whatever the figures)",
    )
    p.add_argument("--generate", type=Path, help=argparse.SUPPRESS)  # the writer child
    return p


def prepare(args: argparse.Namespace, d: Path, notes: list[str]) -> tuple[int, str, bool]:
    """
    Write the parts in ``d`` (or find them, with --reuse); rows, description, whether written.
    """
    desc = f"split from {args.source}" if args.source else f"generated, seed {args.seed}"
    found = existing_parts(d)
    if args.reuse and len(found) == args.partitions:
        notes.append(f"parts reused from {d} (--reuse): written by an earlier run")
        return parts_rows(found), "reused", False
    if args.reuse:
        notes.append(f"--reuse: {len(found)} parts in {d}, not {args.partitions}; wrote them")
    cmd = [sys.executable, __file__, "--generate", str(d), "--rows", str(args.rows),
           "--partitions", str(args.partitions), "--seed", str(args.seed)]  # fmt: skip
    if args.source:
        cmd += ["--from", str(args.source)]
    s, rss, _ = scale.measure(cmd, d)
    notes.append(f"parts written ({desc}) in {s:.1f} s, writer's peak RSS {rss:,.0f} MB")
    print(f"  {notes[-1]}", file=sys.stderr, flush=True)
    return parts_rows(existing_parts(d)), desc, True


def main(argv: list[str] | None = None) -> int:
    """
    Parse arguments, write the parts, run the variants and print the tables (or JSON).
    """
    args = parser().parse_args(argv)
    if args.partitions < 1 or args.repeat < 1 or (args.source is None and args.rows < 1):
        sys.exit("error: --partitions, --repeat and --rows must be at least 1")
    if args.generate is not None:  # the writer child
        if args.source is not None:
            split_file(args.source, args.partitions, args.generate)
        else:
            generate(args.rows, args.seed, args.partitions, args.generate)
        return 0
    return bench(args)


def bench(args: argparse.Namespace) -> int:
    """
    Write the parts, run the variants, print the tables (or JSON); the exit status.
    """
    if args.source is not None and not args.source.is_file():
        sys.exit(f"error: --from {args.source}: no such file")
    here = str(Path(sys.executable).parent)
    tailkit = shutil.which("tailkit", path=here) or shutil.which("tailkit")
    if tailkit is None:
        sys.exit("error: no `tailkit` executable next to this Python or on PATH")
    d = args.workdir or Path(tempfile.mkdtemp(prefix="tailkit-distributed-"))
    d.mkdir(parents=True, exist_ok=True)
    rows = pq.ParquetFile(args.source).metadata.num_rows if args.source else args.rows
    if not args.reuse and rows * 25 / 1e9 > shutil.disk_usage(d).free / 1e9:
        sys.exit(f"error: {d} has {shutil.disk_usage(d).free / 1e9:.0f} GB free; {rows:,} rows "
                 f"need ~{rows * 25 / 1e9:.0f} GB (choose another --workdir)")  # fmt: skip
    notes = [CLIENT_RSS_NOTE] if args.workers else []
    wrote = False
    try:
        print(f"== {args.partitions} parts in {d}", file=sys.stderr, flush=True)
        rows, desc, wrote = prepare(args, d, notes)
        print(f"  {rows:,} rows ({desc})", file=sys.stderr, flush=True)
        parquet_mb = sum(p.stat().st_size for p in existing_parts(d)) / 1e6
        cmds = variants(tailkit, str(d / "part-*.parquet"), args.workers)
        measured, docs = run_all(cmds, d, args.repeat)
    except (scale.BenchError, ValueError, OSError) as exc:
        sys.exit(f"error: {exc}")
    finally:
        if wrote and not args.keep:
            for p in existing_parts(d):
                p.unlink()
        if args.workdir is None and not args.keep:
            shutil.rmtree(d, ignore_errors=True)
    doc: dict[str, Any] = {
        "machine": scale.machine(),
        "rows": rows,
        "partitions": args.partitions,
        "log": desc,
        "parquet_mb": parquet_mb,
        "repeat": args.repeat,
        "target_rel": TARGET_REL,
        "results": results(measured, docs, args.partitions),
        "notes": notes,
    }
    for r in doc["results"]:
        if "error" in r:
            head = r["error"].splitlines()
            notes.append(f"{r['variant']}: FAILED ({head[0]} ... {head[-1]})")
    print(json.dumps(finite(doc), indent=2) if args.json else render(doc))
    failed = any("error" in r for r in doc["results"])
    disagree = any(not r.get("agreement", {}).get("pass", True) for r in doc["results"])
    return 1 if failed or (args.check and disagree) else 0


if __name__ == "__main__":
    sys.exit(main())
