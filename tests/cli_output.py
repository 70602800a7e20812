"""What a test reads from tacosc's standard error."""

from __future__ import annotations


def after_phases(err: str) -> str:
    """``err`` without the ``tacosc: PHASE ...`` lines a pipe gets when a phase runs longer
    than a second (on a loaded machine, even loading a file can): what the command said."""
    return "".join(line for line in err.splitlines(keepends=True)
                   if not (line.startswith("tacosc: ") and line.rstrip().endswith("...")))
