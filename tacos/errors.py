"""User-facing errors.

Every mistake a user can make surfaces as a :class:`TacosError`.  The library never prints and
never exits; the CLI renders errors with :meth:`TacosError.render` and maps them to exit codes
(0 ok, 1 user error, 2 usage, 3 tool failure).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    """A source location: 1-based line and column, with an optional end (exclusive column)."""

    file: str
    line: int
    col: int
    end_line: int | None = None
    end_col: int | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


SHOWN_LINE = 160
"""Longest part of a source line an error shows (a window around the caret)."""


class TacosError(Exception):
    """Base class of every error a user can cause.

    ``span`` locates the error in a source file; ``source_line`` is the text of that line (so
    the message can show it with a caret); ``hint`` suggests a fix.
    """

    exit_code = 1

    def __init__(
        self,
        message: str,
        *,
        span: Span | None = None,
        hint: str | None = None,
        source_line: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.span = span
        self.hint = hint
        self.source_line = source_line

    def render(self) -> str:
        """Format as ``file:line:col: error: msg``, the source line, a caret and the hint."""
        head = f"{self.span}: error: {self.message}" if self.span else f"error: {self.message}"
        lines = [head]
        if self.span is not None and self.source_line is not None:
            text = self.source_line.rstrip("\n").expandtabs(1)
            col = self.span.col
            width = 1
            if self.span.end_col is not None and (self.span.end_line in (None, self.span.line)):
                width = max(1, self.span.end_col - self.span.col)
            if len(text) > SHOWN_LINE:  # a window around the caret, not a megabyte of line
                start = max(0, min(col - 1 - SHOWN_LINE // 3, len(text) - SHOWN_LINE))
                cut = text[start:start + SHOWN_LINE]
                text = ("..." if start else "") + cut + (
                    "..." if start + SHOWN_LINE < len(text) else "")
                col = col - start + (3 if start else 0)
                width = min(width, max(1, SHOWN_LINE - (col - 1 - (3 if start else 0))))
            num = str(self.span.line)
            lines.append(f"  {num} | {text}")
            width = min(width, max(1, len(text) - col + 1))
            lines.append(f"  {' ' * len(num)} | {' ' * (col - 1)}{'^' * width}")
        if self.hint:
            lines.append(f"hint: {self.hint}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()


class TdlSyntaxError(TacosError):
    """The TDL text does not follow the grammar."""


class TdlSemanticError(TacosError):
    """The TDL text parses but means something impossible (unknown node, bad value, ...)."""


class InputFileError(TacosError):
    """An input file is missing, not text, empty or too large."""


class InfeasibleError(TacosError):
    """A collective cannot be served on its topology (names the NPU and chunk)."""


class UsageError(TacosError):
    """The command line is wrong."""

    exit_code = 2


class ClusterError(UsageError):
    """The cluster the user named cannot run the work (not installed, unreachable, no worker,
    another tacos version): never a reason to quietly skip a solver."""


class SolverUnavailableError(TacosError):
    """A requested solver back end is not installed."""

    exit_code = 3


class ToolFailure(TacosError):
    """The tool itself failed (solver crash, time-out without any schedule)."""

    exit_code = 3


class VerificationError(TacosError):
    """A schedule or plan violates a correctness rule."""
