"""
Generate the seeded, production-like LLM call log of data_samples/production.

The simulation lives in the package (``tailkit.demo._generate``, described in
data_samples/README.md) so that ``tailkit demo`` can write the same sample from an installed
wheel; this script is its command line.  Same seed, same bytes.
"""

import argparse
import sys
import time

from pathlib import Path

from tailkit.demo._generate import FORMATS, SAMPLE_ROWS, SAMPLE_SEED, write_sample


def main(argv: list[str] | None = None) -> int:
    """
    Parse the command line, generate the call log and write the requested files.
    """
    ap = argparse.ArgumentParser(
        description="Generate a seeded, production-like LLM call log (one row per attempt) "
        "as gzip JSON lines and/or zstd Parquet, the same rows in both."
    )
    ap.add_argument("--rows", type=int, default=SAMPLE_ROWS, help="attempts (default 200000)")
    ap.add_argument("--seed", type=int, default=SAMPLE_SEED, help="RNG seed (default 7)")
    here = Path(__file__).resolve().parent
    ap.add_argument("--out", type=Path, default=here / "production", help="output directory")
    ap.add_argument("--formats", default="jsonl,parquet", help="subset of jsonl,parquet")
    ap.add_argument("--no-gzip", action="store_true", help="write calls.jsonl, not .jsonl.gz")
    args = ap.parse_args(argv)
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    if not set(formats) <= set(FORMATS) or args.rows < 1:
        ap.error("--formats must be a subset of jsonl,parquet and --rows >= 1")
    t0 = time.perf_counter()
    paths = write_sample(
        args.out, rows=args.rows, seed=args.seed, formats=formats, gzipped=not args.no_gzip
    )
    for path in paths:
        print(f"wrote {path} ({args.rows:,} rows, {path.stat().st_size / 1e6:.1f} MB)")
    print(f"done in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
