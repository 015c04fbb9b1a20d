"""
The ledger: one JSON line per attempt, in the columns of the call record (docs/ledger.md).

Standard library only (plus the call record's constants), shared by the two writers of these
lines: `tailkit.executor` (one line per attempt it starts) and `tailkit.serve` (its access log).
`tailkit.executor` re-exports `Ledger`, the sinks and `AttemptRecord`, so ``from
tailkit.executor import Ledger`` keeps working.

Every attempt the executor starts ends in exactly one `AttemptRecord`: a winner, a loser that
was cancelled (``censored_at_s``: its true latency is longer), a loser that was allowed to finish
(``abandoned``), or a failure. `Ledger` validates each record, renders it once with
`AttemptRecord.to_json`, and hands the line to every sink. A sink that fails must not take the
executor down with it: its first failure is logged, later ones are not, and the other sinks and
the counts carry on. Ingesting the file (``ingest_paths(store, [path], format="trace")``) reads
the lines back into the store.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from tailkit.errors import ConfigError
from tailkit.record import ROLES, STATUSES


try:  # the json module's own C escaper (what its encoder calls for every string)
    from json.encoder import c_encode_basestring_ascii as _escape  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - a Python built without the json C accelerator
    from json.encoder import py_encode_basestring_ascii as _escape


__all__ = [
    "LEDGER_FIELDS",
    "AttemptRecord",
    "CallbackSink",
    "JsonlSink",
    "Ledger",
    "MemorySink",
    "Sink",
    "check_record",
]

LEDGER_FIELDS: tuple[str, ...] = (
    "call_id",
    "run_id",
    "step",
    "attempt",
    "role",
    "provider",
    "model",
    "started_at",
    "ttft_s",
    "total_s",
    "input_tokens",
    "output_tokens",
    "status",
    "error_type",
    "http_status",
    "censored_at_s",
    "abandoned",
    "job_key",
    "idempotency_key",
    "deadline_at",
    "winner",
    "attrs",
)
"""The keys of a ledger line, in order: the call record's source columns, then the executor's."""

_SECONDS = ("ttft_s", "total_s", "censored_at_s")
# one encoder for every line: ``json.dumps`` with options builds a new one per call
_ENCODER = json.JSONEncoder(separators=(",", ":"), default=str)
logger = logging.getLogger("tailkit.executor")


def _iso(name: str, value: datetime) -> str:
    """
    ``2026-11-29T12:00:03.123456Z``: UTC, always with microseconds, as DuckDB reads it.

    A datetime already in UTC (what the executor writes) skips the conversion: half the time
    of the line, twice per line.
    """
    if value.tzinfo is UTC:
        return value.isoformat(timespec="microseconds")[:-6] + "Z"  # drop "+00:00"
    if value.tzinfo is None or value.utcoffset() is None:
        msg = f"{name} must be a timezone-aware datetime (UTC), got naive {value.isoformat()}"
        raise ConfigError(msg)
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


@dataclass(slots=True)
class AttemptRecord:
    """
    One attempt as the ledger writes it: the call record plus the executor's own fields.

    Args:
        call_id: Unique id of this attempt.
        run_id: The workflow run (``None``: the call ran outside a workflow).
        step: The step name (``None``: outside a workflow).
        attempt: 0 for the first attempt of a logical call, then 1, 2, …
        role: ``primary``, ``hedge``, ``retry``, ``downgrade`` or ``upgrade``.
        provider: Serving path, e.g. ``openai``.
        model: Model id.
        started_at: When the attempt started, timezone-aware (written as UTC).
        ttft_s: Seconds to the first content token; ``None`` when not streamed or never seen.
        total_s: Seconds from start to the end; ``None`` when the attempt never finished.
        input_tokens: Prompt tokens (provider usage), ``None`` when unknown.
        output_tokens: Completion tokens, ``None`` when unknown.
        status: ``ok``, ``error``, ``timeout``, ``cancelled``, ``invalid`` or ``rate_limited``.
        error_type: The exception class or provider error code, ``None`` for a success.
        http_status: The provider's HTTP status, ``None`` when there was no response.
        censored_at_s: Age in seconds at which the attempt was cut (cutoff, lost a hedge
            race); its true latency is longer. ``None`` when it was not cut.
        abandoned: It finished after its caller had stopped waiting for it.
        job_key: The job (prompt) the attempt works on, when the caller names one (``None``:
            the idempotency key links a call's attempts).
        idempotency_key: Shared by every retry and hedge of one logical call.
        deadline_at: The run deadline as an absolute instant; ``None``: no deadline.
        winner: Its result is the one the step returned.
        attrs: Anything else worth keeping; values JSON cannot encode are written as ``str()``.
    """

    call_id: str
    run_id: str | None
    step: str | None
    attempt: int
    role: str
    provider: str
    model: str
    started_at: datetime
    ttft_s: float | None = None
    total_s: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    status: str = "ok"
    error_type: str | None = None
    http_status: int | None = None
    censored_at_s: float | None = None
    abandoned: bool = False
    job_key: str | None = None
    idempotency_key: str = ""
    deadline_at: datetime | None = None
    winner: bool = False
    attrs: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """
        One line of JSON (no newline), keys in `LEDGER_FIELDS` order.

        Datetimes are ISO-8601 UTC with microseconds and ``Z``; floats are written exactly
        (their ``repr``). ``source`` is not written: ingest sets the provenance columns.

        Raises:
            ConfigError: A datetime is naive, or a number is NaN or infinite (JSON has no
                such values).
        """
        started = _iso("started_at", self.started_at)
        deadline = None if self.deadline_at is None else _iso("deadline_at", self.deadline_at)
        for name in _SECONDS:
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                msg = f"{name} must be a finite number of seconds or None, got {value!r}"
                raise ConfigError(msg)
        try:
            return self._plain_json(started, deadline)
        except _NotPlain:
            pass
        values = {  # spelled out, in `LEDGER_FIELDS` order (a test holds them together)
            "call_id": self.call_id, "run_id": self.run_id, "step": self.step,
            "attempt": self.attempt, "role": self.role, "provider": self.provider,
            "model": self.model, "started_at": started,
            "ttft_s": self.ttft_s, "total_s": self.total_s, "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens, "status": self.status,
            "error_type": self.error_type, "http_status": self.http_status,
            "censored_at_s": self.censored_at_s, "abandoned": self.abandoned,
            "job_key": self.job_key, "idempotency_key": self.idempotency_key,
            "deadline_at": deadline,
            "winner": self.winner, "attrs": self.attrs,
        }  # fmt: skip
        return _ENCODER.encode(values)

    def _plain_json(self, started: str, deadline: str | None) -> str:
        """
        `to_json`'s line for a record of plain values, without the dict the encoder reads.

        Strings, ``None``, exact ints, finite floats and bools, written as the encoder writes
        them (the executor's records are all such): half the time of a line. Anything else
        (an ``IntEnum`` status code, a NaN token count, a bool where a number belongs) raises
        `_NotPlain`, and the encoder writes the line. ``tests/test_executor_ledger.py`` holds
        the two to the same bytes.
        """
        text, number, flag = _text, _number, _flag
        return (
            f'{{"call_id":{text(self.call_id)},"run_id":{text(self.run_id)},'
            f'"step":{text(self.step)},"attempt":{number(self.attempt)},'
            f'"role":{text(self.role)},"provider":{text(self.provider)},'
            f'"model":{text(self.model)},"started_at":{text(started)},'
            f'"ttft_s":{number(self.ttft_s)},"total_s":{number(self.total_s)},'
            f'"input_tokens":{number(self.input_tokens)},'
            f'"output_tokens":{number(self.output_tokens)},"status":{text(self.status)},'
            f'"error_type":{text(self.error_type)},"http_status":{number(self.http_status)},'
            f'"censored_at_s":{number(self.censored_at_s)},"abandoned":{flag(self.abandoned)},'
            f'"job_key":{text(self.job_key)},"idempotency_key":{text(self.idempotency_key)},'
            f'"deadline_at":{text(deadline)},"winner":{flag(self.winner)},'
            f'"attrs":{_EMPTY if _empty_dict(self.attrs) else _ENCODER.encode(self.attrs)}}}'
        )


class _NotPlain(Exception):  # noqa: N818 - control flow within `to_json`, never raised out
    """
    Strictly private: a record value the plain line does not write as the encoder would.
    """


_EMPTY = "{}"


def _empty_dict(value: object) -> bool:
    return type(value) is dict and not value


def _text(value: object) -> str:
    if value is None:
        return "null"
    if type(value) is not str:
        raise _NotPlain
    return _escape(value)  # type: ignore[no-any-return]


def _number(value: object) -> str:
    if value is None:
        return "null"
    kind = type(value)
    if kind is int:
        return int.__repr__(value)
    if kind is float and math.isfinite(value):  # type: ignore[arg-type]
        return float.__repr__(value)
    raise _NotPlain


def _flag(value: object) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    raise _NotPlain


def check_record(record: AttemptRecord) -> None:
    """
    Refuse a record whose status or role is not a call-record value.

    Raises:
        ConfigError: Naming the field, the value, the valid values and the call.
    """
    if record.status not in STATUSES or record.role not in ROLES:
        for name, value, valid in (
            ("status", record.status, STATUSES),
            ("role", record.role, ROLES),
        ):
            if value not in valid:
                msg = (
                    f"{name} must be one of {', '.join(valid)}, got {value!r} "
                    f"for call {record.call_id!r}"
                )
                raise ConfigError(msg)
    for name in _SECONDS:
        value = getattr(record, name)
        if value is not None and not math.isfinite(value):
            msg = f"{name} must be a finite number of seconds or None, got {value!r}"
            raise ConfigError(msg)


class Sink(Protocol):
    """
    Where ledger lines go. ``write`` may raise: the ledger logs it and carries on.
    """

    def write(self, line: str, record: AttemptRecord) -> None:
        """
        Take one record and its JSON line (without the newline).
        """

    def close(self) -> None:
        """
        Release what the sink holds; no writes follow.
        """


class JsonlSink:
    """
    Append ledger lines to a file, one line per record, flushed per line.

    The file is opened for appending, so several runs (and several processes: each line is one
    write to a file opened with ``O_APPEND``) add to the same ledger. Threads of one process
    share the sink safely: a lock keeps each line whole.

    Args:
        path: The ledger file; missing parent folders are created.

    Raises:
        ConfigError: The file cannot be created or opened for appending.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = self.path.open("a", encoding="utf-8", buffering=1)
        except OSError as exc:
            msg = f"ledger file {str(path)!r}: cannot open it for appending ({exc.strerror})"
            raise ConfigError(msg) from None

    def write(self, line: str, record: AttemptRecord) -> None:
        """
        Append ``line`` and a newline in one write, then flush.
        """
        del record
        with self._lock:
            self._fh.write(line + "\n")
            self._fh.flush()

    def close(self) -> None:
        """
        Close the file (again is a no-op).
        """
        with self._lock:
            self._fh.close()

    def __repr__(self) -> str:
        return f"JsonlSink({str(self.path)!r})"


class CallbackSink:
    """
    Call ``fn(record)`` for every record, e.g. to feed metrics or a queue.

    Args:
        fn: Receives each `AttemptRecord`; what it raises is logged once, not propagated.
    """

    def __init__(self, fn: Callable[[AttemptRecord], None]) -> None:
        self.fn = fn

    def write(self, line: str, record: AttemptRecord) -> None:
        """
        Pass the record on.
        """
        del line
        self.fn(record)

    def close(self) -> None:
        """
        Nothing to release.
        """

    def __repr__(self) -> str:
        return f"CallbackSink({self.fn!r})"


class MemorySink:
    """
    Keep every record and line in memory (tests, notebooks).
    """

    def __init__(self) -> None:
        self.records: list[AttemptRecord] = []
        self.lines: list[str] = []

    def write(self, line: str, record: AttemptRecord) -> None:
        """
        Keep the record and its line.
        """
        self.records.append(record)
        self.lines.append(line)

    def close(self) -> None:
        """
        Nothing to release; the records stay readable.
        """

    def __repr__(self) -> str:
        return f"MemorySink({len(self.records)} records)"


class Ledger:
    """
    Validate attempt records, count them, and write each to every sink.

    Args:
        *sinks: Where lines go. With none, records are still validated and counted.
    """

    def __init__(self, *sinks: Sink) -> None:
        self.sinks: tuple[Sink, ...] = sinks
        self._lock = threading.Lock()
        self._holders = 0  # executors using it that have not closed (see `acquire`)
        self._failed: set[int] = set()
        self._counts: dict[str, int] = dict.fromkeys(
            ("attempts", *STATUSES, "abandoned", "winners"), 0
        )

    def write(self, record: AttemptRecord) -> None:
        """
        Record one attempt.

        A sink that raises is logged (the first time only) on the ``tailkit.executor`` logger
        and skipped for this record; the record still counts and the other sinks get it.

        Raises:
            ConfigError: ``status`` or ``role`` is not a call-record value, a datetime is
                naive, or a duration is not finite.
        """
        check_record(record)
        line = record.to_json() if self.sinks else ""  # no sink: counted, never rendered
        with self._lock:
            counts = self._counts
            counts["attempts"] += 1
            counts[record.status] += 1
            counts["abandoned"] += int(record.abandoned)
            counts["winners"] += int(record.winner)
        for sink in self.sinks:
            try:
                sink.write(line, record)
            except Exception:
                self._failed_once(sink, "write")

    def count(self, status: str, *, abandoned: bool = False, winner: bool = False) -> None:
        """
        Count an attempt that no sink needs to see (a ledger without sinks): no record built.
        """
        with self._lock:
            counts = self._counts
            counts["attempts"] += 1
            counts[status] += 1
            counts["abandoned"] += int(abandoned)
            counts["winners"] += int(winner)

    def counts(self) -> dict[str, int]:
        """
        Attempts written so far: ``attempts``, one count per status, ``abandoned``, ``winners``.

        The status counts add up to ``attempts``.
        """
        with self._lock:
            return dict(self._counts)

    def acquire(self) -> Ledger:
        """
        One more user of the ledger (an `Executor` calls it when made); returns the ledger.

        Each user calls `release` when done, and the last release closes the sinks. So an
        executor closed while another one still writes to the same ledger (the old one after
        a reload, say) leaves it open, where closing it used to lose the lines that followed.
        """
        with self._lock:
            self._holders += 1
        return self

    def release(self) -> None:
        """
        A user of the ledger is done: the last one closes every sink (see `acquire`).
        """
        with self._lock:
            self._holders = max(self._holders - 1, 0)
            last = self._holders == 0
        if last:
            self.close()

    def close(self) -> None:
        """
        Close every sink now, whoever still uses the ledger; a failure to close is logged.
        """
        for sink in self.sinks:
            try:
                sink.close()
            except Exception:
                self._failed_once(sink, "close")

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _failed_once(self, sink: Sink, action: str) -> None:
        with self._lock:
            first = id(sink) not in self._failed
            self._failed.add(id(sink))
        if first:
            logger.exception(
                "ledger sink %r failed to %s; the executor goes on, and later failures of "
                "this sink are not logged",
                sink,
                action,
            )
