"""
What `find_races` reports: frozen dataclasses, plain-language findings, and a JSON form.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


MATCHES: tuple[str, ...] = ("idempotency_key", "call_id", "time_window")
"""How a caller attempt was paired with a callee record, strongest first."""


@dataclass(frozen=True, slots=True)
class Spread:
    """
    The distribution of one quantity in seconds (or a share, where the field says so).

    Args:
        n: Values it was computed from.
        p50: Median (``None`` when ``n`` is 0, as for every other field).
        p90: 90th percentile by the CDF.
        p99: 99th percentile by the CDF.
        max: Largest value.
    """

    n: int
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None


@dataclass(frozen=True, slots=True)
class ClockSkew:
    """
    The callee's clock minus the caller's, estimated NTP-style from answered pairs.

    With ``gap_in = callee receive - caller send`` and ``gap_out = caller end - callee end``
    over the pairs where the caller got its answer, ``skew_s = (min gap_in - min gap_out) / 2``
    (symmetric fastest network paths); since neither path can be faster than instant, the true
    skew lies in ``[low_s, high_s] = [-min gap_out, min gap_in]``.

    Args:
        skew_s: The estimate in seconds (positive: the callee's clock is ahead).
        low_s: Lower bound in seconds.
        high_s: Upper bound in seconds.
        pairs: Pairs it was estimated from.
        matched_by: Which pairs were used: ``id`` (key or call id) or ``time_window``.
    """

    skew_s: float
    low_s: float
    high_s: float
    pairs: int
    matched_by: str

    @property
    def how(self) -> str:
        """
        One phrase on how it was estimated, e.g. ``estimated from 40 pairs matched by id``.
        """
        return f"estimated from {self.pairs} pairs matched by {self.matched_by.replace('_', ' ')}"


@dataclass(frozen=True, slots=True)
class LateCall:
    """
    A callee success that ended after its caller attempt had given up.

    Args:
        key: The idempotency key (the call id when the call had none).
        step: The caller's step (``None``: outside a workflow).
        late_s: Skew-corrected seconds from the caller giving up (when it stopped waiting,
            or at its deadline if that came first) to the callee ending; always positive,
            ``None`` when the caller's log has no times for the attempt.
        caller_status: The caller attempt's status (``timeout``, ``cancelled``, …).
        side_effecting: The call was not idempotent (``idempotent: false`` in either log's
            attrs, or its step was named as side-effecting).
    """

    key: str
    step: str | None
    late_s: float | None
    caller_status: str
    side_effecting: bool


@dataclass(frozen=True, slots=True)
class Duplicate:
    """
    An idempotency key the callee executed (status other than ``rate_limited``) more than once.
    """

    key: str
    executions: int
    step: str | None


@dataclass(frozen=True, slots=True)
class Replan:
    """
    A caller (run, step) that sent more than one logical call: a new key for the same step.

    Args:
        run_id: The caller's run.
        step: The step.
        keys: Distinct idempotency keys the caller sent for it.
        executed: How many of those keys the callee executed.
    """

    run_id: str | None
    step: str
    keys: int
    executed: int


@dataclass(frozen=True, slots=True)
class RaceReport:
    """
    The races between a caller's log and its callee's log of the same calls.

    Args:
        caller_attempts: Attempts in the caller's log.
        callee_records: Records in the callee's log.
        matched_by: Pairs by how they were matched (`MATCHES`).
        unmatched_caller: Caller attempts with no callee record (never arrived, or not logged).
        unmatched_callee: Callee records with no caller attempt (orphans).
        window_s: The time window of the fallback match, in seconds.
        skew: The clock skew, ``None`` when no pair had an answered caller.
        t_zero_gap: Skew-corrected callee receive minus caller send, seconds.
        budget_share: The share of the caller's budget (deadline minus send) the gap ate.
        abandoned: Callee successes that ended after the caller gave up, latest first.
        duplicates: Keys the callee executed more than once.
        replans: Caller (run, step) pairs with more than one key.
        deadline_carried: Callee records that carried a deadline and an end.
        deadline_honoured: Of those, the ones that ended (or stopped) by it.
        budget_real: Per pair, the caller's deadline minus the (corrected) callee receive.
        budget_believed: Per pair, the callee's own deadline (or remaining seconds) at receive.
    """

    caller_attempts: int
    callee_records: int
    matched_by: dict[str, int]
    unmatched_caller: int
    unmatched_callee: int
    window_s: float
    skew: ClockSkew | None
    t_zero_gap: Spread
    budget_share: Spread
    abandoned: tuple[LateCall, ...]
    duplicates: tuple[Duplicate, ...]
    replans: tuple[Replan, ...]
    deadline_carried: int
    deadline_honoured: int
    budget_real: Spread
    budget_believed: Spread

    @property
    def paired(self) -> int:
        """
        Caller attempts paired with a callee record, however matched.
        """
        return sum(self.matched_by.values())

    @property
    def deadline_honoured_share(self) -> float | None:
        """
        ``deadline_honoured / deadline_carried``; ``None`` when no record carried a deadline.
        """
        if not self.deadline_carried:
            return None
        return self.deadline_honoured / self.deadline_carried

    def findings(self) -> list[str]:
        """
        The report in plain sentences, the most consequential first.
        """
        out: list[str] = []
        n_side = sum(a.side_effecting for a in self.abandoned)
        out.append(
            f"{len(self.abandoned)} calls finished after the harness gave up "
            f"({n_side} side-effecting)"
        )
        extra = sum(d.executions - 1 for d in self.duplicates)
        out.append(f"{len(self.duplicates)} calls executed more than once ({extra} extra runs)")
        out.append(f"{len(self.replans)} steps re-planned with a new call")
        share = self.deadline_honoured_share
        if share is None:
            out.append("no tool record carried a deadline")
        else:
            out.append(
                f"the tool honoured the deadline in {self.deadline_honoured} of "
                f"{self.deadline_carried} calls ({share:.0%})"
            )
        gap = self.t_zero_gap
        if gap.n and gap.p50 is not None and gap.p99 is not None:
            out.append(f"t-zero gap p50 {gap.p50:.3f} s, p99 {gap.p99:.3f} s over {gap.n} pairs")
        if self.skew is not None:
            s = self.skew
            out.append(
                f"clock skew {s.skew_s:+.3f} s (in [{s.low_s:+.3f}, {s.high_s:+.3f}]), {s.how}"
            )
        else:
            out.append("clock skew unknown: no pair where the harness got its answer")
        by_window = self.matched_by.get("time_window", 0)
        out.append(
            f"{self.paired} of {self.caller_attempts} harness attempts paired "
            f"({by_window} by time window only); {self.unmatched_callee} tool records unpaired"
        )
        return out

    def as_dict(self) -> dict[str, Any]:
        """
        Everything as JSON-ready values (seconds as floats, ``None`` for unknown).
        """
        out = asdict(self)
        out["paired"] = self.paired
        out["deadline_honoured_share"] = self.deadline_honoured_share
        out["skew"] = None if self.skew is None else {**asdict(self.skew), "how": self.skew.how}
        out["findings"] = self.findings()
        for name in ("abandoned", "duplicates", "replans"):
            out[name] = list(out[name])
        return out
