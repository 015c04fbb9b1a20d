"""
Following a plan file: the recalibrated plan reaches the running executor without a restart.

The last step of the drift loop (docs/operations.md): the recalibration rewrites ``plan.yaml``,
and every process that runs the plan picks it up on its next poll. A poll is one ``stat`` of
the file (its modification time in nanoseconds, its size and its inode); only when those
changed is the file read, checked (`tailkit.config.load_plan`) and, when it is a valid plan of
the same workflow that differs from the running one, swapped in (`Executor.replace_plan`,
keeping the executor's policies, budgets, ledger and live-routing state). A file that does not
load, or holds another workflow's plan, is reported once per version of the file and the
running plan stays: a half-written or mistaken plan never stops a service.

A writer that replaces the file in one step (write a temporary file beside it, then rename;
`tailkit calibrate` does) is never seen half-written. One that writes in place may be: the
version read is checked like any other, and the file is read again as soon as it settles.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os

from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from tailkit.config import Plan, load_plan
from tailkit.errors import ConfigError
from tailkit.executor._executor import Executor


__all__ = ["PlanFollower", "follow_plan"]

logger = logging.getLogger("tailkit.executor")

_Signature = tuple[int, int, int]  # (mtime_ns, size, inode)


class PlanFollower:
    """
    Keeps an executor on the latest valid plan in a file (see `follow_plan`).

    Use it as an async context manager (it polls every ``every_s`` seconds while inside), or
    call `reload_if_changed` from your own schedule, or run `run` as a task.

    Attributes:
        path: The plan file.
        reloads: Plans swapped in so far.
        last_error: The latest problem reported (``None``: none yet, or the latest version
            of the file loaded).
    """

    def __init__(
        self,
        executor: Executor,
        path: str | os.PathLike[str],
        *,
        every_s: float = 30.0,
        on_error: Callable[[ConfigError], object] | None = None,
    ) -> None:
        number = isinstance(every_s, int | float) and not isinstance(every_s, bool)
        if not (number and math.isfinite(every_s) and every_s > 0.0):
            msg = f"{{field}} must be a positive number of seconds, got {every_s!r}."
            raise ConfigError(msg, field="every_s", value=every_s, fix="Pass e.g. 30.0.")
        self.executor = executor
        self.path = Path(path)
        self.every_s = float(every_s)
        self.on_error = on_error
        self.reloads = 0
        self.last_error: ConfigError | None = None
        self._seen: _Signature | str | None = None  # the version last handled, or a problem
        self._task: asyncio.Task[None] | None = None

    def _signature(self) -> _Signature:
        stat = os.stat(self.path)
        return stat.st_mtime_ns, stat.st_size, stat.st_ino

    def reload_if_changed(self) -> bool:
        """
        Swap in the file's plan if the file changed since the last look; whether it did.

        The first call reads the file whatever its time stamp (a plan equal to the running
        one is not swapped in). A file that is missing, does not load, holds another
        workflow's plan or is refused by `Executor.replace_plan` is reported through
        ``on_error`` (default: a warning on the ``tailkit.executor`` logger), once per version
        of the file, and the running plan stays.

        Returns:
            True when a new plan now runs.
        """
        try:
            before = self._signature()
        except OSError as exc:
            key = f"stat: {exc.errno}"
            if key != self._seen:  # reported once, until the file is back
                self._report(f"{self.path}: cannot read it: {exc.strerror or exc}", key=key)
            return False
        if before == self._seen:
            return False
        try:
            plan = load_plan(self.path)
        except ConfigError as error:
            if self._settled(before):  # else it was being written: read again next poll
                self._report(str(error), key=before)
            return False
        if not self._settled(before):
            return False
        self._seen = before
        return self._swap(plan)

    def _settled(self, before: _Signature) -> bool:
        """
        Whether the file is still the version stat'ed before it was read.
        """
        try:
            return self._signature() == before
        except OSError:
            return False

    def _swap(self, plan: Plan) -> bool:
        running = self.executor.profile_plan
        if plan.workflow != running.workflow:
            why = (
                f"{self.path}: it is a plan of workflow {plan.workflow!r}, but this executor "
                f"runs workflow {running.workflow!r}: follow that workflow's plan file"
            )
            self._report(why)
            return False
        if plan == running:
            self.last_error = None
            return False
        try:
            self.executor.replace_plan(plan)
        except ConfigError as error:
            self._report(f"{self.path}: the executor refused it: {error}")
            return False
        self.reloads += 1
        self.last_error = None
        logger.info("plan file %s reloaded (workflow %r)", self.path, plan.workflow)
        return True

    def _report(self, problem: str, *, key: _Signature | str | None = None) -> None:
        """
        Report a version of the file that was not swapped in (``problem`` names the file).
        """
        if key is not None:
            self._seen = key  # handled: not read again until it changes
        msg = f"not reloaded, the running plan stays: {problem}"
        error = self.last_error = ConfigError(msg)
        if self.on_error is not None:
            self.on_error(error)
        else:
            logger.warning("%s", msg)

    async def run(self) -> None:
        """
        Poll every ``every_s`` seconds, forever (until cancelled).
        """
        while True:
            await asyncio.sleep(self.every_s)
            self.reload_if_changed()

    async def __aenter__(self) -> PlanFollower:
        self._task = asyncio.get_running_loop().create_task(self.run())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def follow_plan(
    executor: Executor,
    path: str | os.PathLike[str],
    *,
    every_s: float = 30.0,
    on_error: Callable[[ConfigError], object] | None = None,
) -> PlanFollower:
    """
    Keep ``executor`` on the latest valid plan in the file at ``path``.

    Every ``every_s`` seconds the file is stat'ed; when it changed and holds a valid plan of
    the executor's workflow that differs from the running one, `Executor.replace_plan` swaps
    it in (policies, budgets, ledger and live-routing state carry over; calls already running
    finish under their own plan). A file that does not load, or holds another workflow's
    plan, is reported and the running plan stays.

    Args:
        executor: The executor to keep up to date.
        path: The plan file the recalibration rewrites.
        every_s: Seconds between polls (one ``stat`` each), > 0.
        on_error: Called with a `ConfigError` naming the file and the problem, once per
            version of the file that was not swapped in (``None``: a warning on the
            ``tailkit.executor`` logger).

    Returns:
        A `PlanFollower`: use it as ``async with`` (it polls while inside), or call its
        ``reload_if_changed()`` on your own schedule.

    Raises:
        ConfigError: ``every_s`` is not a positive number of seconds.

    Example::

        async with Executor(load_plan("plan.yaml"), ledger=ledger) as executor:
            async with follow_plan(executor, "plan.yaml"):
                await serve_requests(executor)
    """
    return PlanFollower(executor, path, every_s=every_s, on_error=on_error)
