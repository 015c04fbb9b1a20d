"""
The tail table's summaries on a Dask cluster (``engine="dask"``): the ``distributed`` extra.

Each file is a task of each pass (`tailkit.engines`): a worker reads it with DuckDB and
returns its summary, then its share of the samples; both merge on the workers in a tree of
`FAN_IN` at a time, so the client receives one of each, never the calls.
``scheduler="local"`` starts a `LocalCluster` of worker processes on this machine and stops it
after; an address (``tcp://host:8786``) connects to a running scheduler, whose workers must
have tailkit installed and read the files at the same paths (a shared or mounted file system).
"""

from __future__ import annotations

import contextlib
import logging
import os

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

import polars as pl

from tailkit.engines._files import (
    EngineRun,
    Partition,
    Reading,
    aggregate_file,
    counts_only,
    draw_file,
    merge_partitions,
    peak_rss_bytes,
)
from tailkit.errors import ConfigError
from tailkit.tails import TableQuery
from tailkit.tails.lowlevel import Summary, merge_samples
from tailkit.text import printable


FAN_IN = 4  # summaries merged by one task
CONNECT_TIMEOUT_S = 20


def summarize_dask(
    files: Sequence[str | Path],
    query: TableQuery,
    reading: Reading,
    *,
    scheduler: str = "local",
    workers: int = 2,
    min_group: int = 1,
    on_file: Callable[[int], None] | None = None,
    connect_timeout_s: float | None = None,
) -> EngineRun:
    """
    Every file summarized by a Dask worker, merged in a tree on the workers.

    Args:
        files: The partitions, one task each.
        query: Grouping, buckets and filter.
        reading: How to read each file; on a local cluster, ``threads`` defaults to the cores
            shared among the workers.
        scheduler: ``local`` (start a cluster of ``workers`` processes here) or an address.
        workers: Worker processes of a local cluster.
        min_group: The table's ``min_group`` (which groups the samples serve).
        on_file: Called with the count of file tasks done, as they finish (two per file).
        connect_timeout_s: Seconds a scheduler's address has to accept a connection, and
            then as long again to answer as a Dask scheduler (``None``: `CONNECT_TIMEOUT_S`,
            20 s); a peer that stays silent, or answers something else, is an error after
            at most twice this long.

    Raises:
        ConfigError: Dask is not installed, or the scheduler cannot be reached or does not
            answer as a Dask scheduler (``field`` is ``scheduler``).
        IngestError: A file cannot be read (raised as the worker raised it).
    """
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        msg = "{field} dask needs Dask: pip install 'tailkit[distributed]'"
        raise ConfigError(msg, field="engine", value="dask") from None
    if not files:
        msg = "no files to summarize"
        raise ValueError(msg)
    with contextlib.ExitStack() as stack:
        if scheduler == "local":
            if workers < 1:
                msg = f"{{field}} must be at least 1, got {workers}"
                raise ConfigError(msg, field="workers", value=workers)
            cluster = stack.enter_context(
                LocalCluster(  # type: ignore[no-untyped-call]
                    n_workers=workers,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=":0",  # any free port: never a clash with 8787
                    silence_logs=logging.CRITICAL,
                )
            )
            client = stack.enter_context(Client(cluster))  # type: ignore[no-untyped-call]
            if reading.threads is None:
                cores = max(1, (os.cpu_count() or 1) // workers)
                reading = Reading(reading.format, reading.options, reading.memory_limit, cores)
        else:
            timeout_s = CONNECT_TIMEOUT_S if connect_timeout_s is None else connect_timeout_s
            client = stack.enter_context(_connect(Client, scheduler, timeout_s))
        count = len(client.scheduler_info()["workers"])
        paths = [str(f) for f in files]
        firsts = client.map(aggregate_file, paths, query=query, reading=reading, pure=False)
        watch = _Progress(on_file)
        merged: Partition = _tree(client, merge_partitions, firsts, watch).result()
        counts = client.scatter(counts_only(merged.summary), broadcast=True)
        seconds = client.map(
            draw_file, paths, query=query, reading=reading, counts=counts,
            min_group=min_group, pure=False,
        )  # fmt: skip
        sizes = counts_only(merged.summary)
        samples = _tree(client, _merge_samples, seconds, watch, sizes=sizes).result()
        peaks = client.run(peak_rss_bytes)
        summary = replace(merged.summary, samples=samples)
        return EngineRun(
            Partition(summary, merged.read), "dask", count, [int(v) for v in peaks.values()]
        )


def _merge_samples(frames: list[pl.DataFrame], sizes: Summary) -> pl.DataFrame:
    return merge_samples(frames, sizes)


class _Progress:
    """
    Strictly private: counts finished file tasks over both passes for ``on_file``.
    """

    def __init__(self, on_file: Callable[[int], None] | None) -> None:
        self.on_file, self.done = on_file, 0

    def __call__(self, future: Any) -> None:
        self.done += 1
        if self.on_file:
            self.on_file(self.done)


def _tree(
    client: Any, merge: Callable[..., Any], futures: list[Any], watch: _Progress, **kwargs: Any
) -> Any:
    """
    Merge the futures' results `FAN_IN` at a time on the workers, to one future.
    """
    from distributed import as_completed

    level = list(futures)
    while len(level) > 1:
        level = [
            client.submit(merge, level[i : i + FAN_IN], pure=False, **kwargs)
            for i in range(0, len(level), FAN_IN)
        ]
    for future in as_completed(futures):  # type: ignore[no-untyped-call]
        future.result()  # a file that failed raises its error here
        watch(future)
    return level[0]


def _connect(client: Callable[..., Any], address: str, timeout_s: float) -> Any:
    """
    A client of the scheduler at ``address``, once it has answered as one within ``timeout_s``.

    Dask's client times out its TCP connect but not the handshake that follows: a peer that
    accepts and stays silent would hang it for ever, and one that answers something else
    fails deep in Dask's framing (``struct.error``, a huge allocation). `_probe` does the
    handshake first, bounded as a whole.
    """
    _probe(address, timeout_s)
    try:
        return client(address, timeout=f"{timeout_s}s")
    except (OSError, TimeoutError) as exc:
        _refuse(address, printable(str(exc)))


def _refuse(address: str, why: str) -> NoReturn:
    msg = (
        f"cannot reach the Dask scheduler at {printable(repr(address))} ({why}); give its "
        "address as tcp://HOST:8786, or {field} local to start workers on this machine"
    )
    raise ConfigError(msg, field="scheduler", value=address) from None


def _probe(address: str, timeout_s: float) -> None:
    """
    Connect to ``address`` within ``timeout_s`` seconds, and read its handshake within as long.

    In a thread of its own, with its own event loop: a caller inside a running loop (a
    notebook) can call it too.

    Raises:
        ConfigError: No answer in time, or an answer that is not a Dask handshake.
    """
    import asyncio

    from concurrent.futures import ThreadPoolExecutor

    from distributed.comm.core import CommClosedError, connect
    from distributed.security import Security

    async def handshake() -> Any:
        security = Security()  # type: ignore[no-untyped-call]
        args = security.get_connection_args("client")  # type: ignore[no-untyped-call]
        comm = await connect(address, timeout=timeout_s, **args)  # type: ignore[no-untyped-call]
        try:
            return comm.remote_info
        finally:
            comm.abort()

    async def bounded() -> Any:
        # the connect has its own timeout_s (and says so when it runs out); the handshake
        # after it gets as long again
        return await asyncio.wait_for(handshake(), 2 * timeout_s)

    _parse(address)
    with ThreadPoolExecutor(1, thread_name_prefix="tailkit-dask-probe") as pool:
        try:
            info = pool.submit(asyncio.run, bounded()).result()
        except TimeoutError:  # asyncio's is the builtin since 3.11
            _refuse(
                address,
                f"connected, but no answer within {timeout_s:g} s: something accepts "
                "connections there but does not answer as a Dask scheduler",
            )
        except CommClosedError:
            _refuse(address, "it closed the connection without answering as a Dask scheduler")
        except OSError as exc:  # refused, unreachable, timed out connecting
            _refuse(address, printable(str(exc) or type(exc).__name__))
        except Exception:  # whatever garbage makes Dask's framing raise
            _refuse(address, "it answered, but not in Dask's protocol")
    if not isinstance(info, dict) or "compression" not in info:
        _refuse(address, "it answered, but not in Dask's protocol")


def _parse(address: str) -> None:
    """
    Refuse an address Dask cannot connect to at all (an unknown scheme, no port).
    """
    from distributed.comm import registry
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme, location = parse_address(address)
        registry.get_backend(scheme)
        if scheme in ("tcp", "tls", "ws", "wss"):
            parse_host_port(location)
    except (ValueError, TypeError) as exc:
        _refuse(address, f"not an address Dask can connect to: {printable(str(exc))}")
