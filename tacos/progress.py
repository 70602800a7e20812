"""Progress reporting for long phases (synthesis, bounds, verification, lowering).

A :class:`Reporter` is told when a phase starts (:meth:`Reporter.phase`, a context manager)
and how far it got (:meth:`Phase.update`).  The library only calls these; it never prints.
:func:`as_reporter` adapts what users pass as ``progress=``: ``None`` (nothing), a plain
callable ``(done, total)`` (called with the solver's progress only, as before), or a
:class:`Reporter`.  The command line uses :class:`TerminalReporter` (rich progress bars on
stderr, silent when stderr is not a terminal).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class Phase:
    """Handle of a running phase; :meth:`update` reports ``done`` of ``total`` units."""

    def update(self, done: int, total: int | None = None) -> None:
        """Report progress (no-op here)."""


class Reporter:
    """Receives phases; this base class ignores them."""

    @contextmanager
    def phase(self, name: str, total: int | None = None, unit: str = "") -> Iterator[Phase]:
        """Run a phase called ``name`` (``total`` units of ``unit`` when known)."""
        yield Phase()

    def solver_callback(self, phase: Phase) -> Callable[[int, int], None] | None:
        """The ``(done, total)`` callback a solver gets for ``phase``."""
        return phase.update


class _CallableReporter(Reporter):
    """Forwards solver progress to a user's ``(done, total)`` callable; other phases are
    silent (the behaviour of ``progress=`` before phases existed)."""

    def __init__(self, fn: Callable[[int, int], None]) -> None:
        self.fn = fn

    def solver_callback(self, phase: Phase) -> Callable[[int, int], None] | None:
        return self.fn


def as_reporter(progress: Any) -> Reporter:
    """A :class:`Reporter` for whatever was passed as ``progress=``."""
    if progress is None:
        return Reporter()
    if isinstance(progress, Reporter):
        return progress
    if callable(progress):
        return _CallableReporter(progress)
    from tacos.errors import TacosError

    raise TacosError(f"progress must be a callable (done, total) or a tacos.progress.Reporter, "
                     f"not {type(progress).__name__}")


class _RichPhase(Phase):
    def __init__(self, bar: Any, task: Any) -> None:
        self.bar, self.task = bar, task

    def update(self, done: int, total: int | None = None) -> None:
        if total is not None:
            self.bar.update(self.task, completed=done, total=total)
        else:
            self.bar.update(self.task, completed=done)


class TerminalReporter(Reporter):
    """rich progress bars on stderr, one line per phase, when stderr is a terminal (and
    ``enabled``); a phase that ends within ``quiet_below`` seconds leaves no line behind.
    When stderr is a pipe or file (and ``enabled``), one plain line for each of the command's
    phases that runs longer than ``quiet_below`` (``tacosc: synthesizing (auto) ...``, printed
    then; phases inside a phase print none; no clock in the text)."""

    def __init__(self, enabled: bool = True, stream: Any = None,
                 quiet_below: float = 1.0) -> None:
        self.stream = stream or sys.stderr
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = enabled and tty
        self.pipe = enabled and not tty
        self.quiet_below = quiet_below

    @contextmanager
    def phase(self, name: str, total: int | None = None, unit: str = "") -> Iterator[Phase]:
        depth = getattr(self, "_depth", 0)
        if not self.enabled or depth > 0:  # a phase inside a phase shows as its parent
            timer = None
            if self.pipe and depth == 0:  # the command's own phases, not their parts
                timer = self._pipe_line(name)
            self._depth = depth + 1
            try:
                yield Phase()
            finally:
                self._depth = depth
                if timer is not None:
                    timer.cancel()
            return
        self._depth = 1
        try:
            with self._bar(name, total, unit) as phase:
                yield phase
        finally:
            self._depth = 0

    def _pipe_line(self, name: str) -> Any:
        """Print ``tacosc: NAME ...`` once the phase has run ``quiet_below`` seconds (at once
        when that is 0): a long phase says what it does, a quick one (or an input error)
        leaves nothing before the command's own output.  Returns the timer to cancel."""
        def say() -> None:
            print(f"tacosc: {name} ...", file=self.stream, flush=True)

        if self.quiet_below <= 0:
            say()
            return None
        import threading

        timer = threading.Timer(self.quiet_below, say)
        timer.daemon = True
        timer.start()
        return timer

    @contextmanager
    def _bar(self, name: str, total: int | None, unit: str) -> Iterator[Phase]:
        """A rich progress bar for one phase on the terminal."""
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        columns: list[Any] = [SpinnerColumn(), TextColumn("{task.description}")]
        if total is not None or unit:
            columns += [BarColumn(), MofNCompleteColumn(), TextColumn(unit)]
        columns.append(TimeElapsedColumn())
        t0 = time.perf_counter()
        bar = Progress(*columns, console=Console(file=self.stream), transient=True)
        with bar:
            task = bar.add_task(name, total=total)
            yield _RichPhase(bar, task)
        took = time.perf_counter() - t0
        if took >= self.quiet_below:
            print(f"{name}: done in {took:.1f} s", file=self.stream)
