"""Violations and the report of the MSCCL XML verifier.

A :class:`Violation` names the rule broken and the place: rank (GPU id), thread block, step and
source line, whichever apply.  ``severity`` is ``"error"`` (the runtime rejects the file, hangs
or computes a wrong result) or ``"warning"`` (accepted but dubious: ignored elements, unused
flags, resource limits that depend on the deployment).  :class:`MscclReport` is ``ok`` when
there is no error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SEVERITIES = ("error", "warning")

NO_LIMIT = 1 << 62
"""A ``maxBytes`` at or above this is the runtime's "no limit" (msccl-tools writes 2^64 - 1)."""


def size_window(lo: int | None, hi: int | None) -> str:
    """An MSCCL size window in user units: ``1 KiB to 4 MiB``, ``64 MiB to no limit``."""
    from tacos.model.units import format_size

    low = format_size(int(lo)) if lo else "0 B"
    high = ("no limit" if not hi or int(hi) >= NO_LIMIT else
            format_size(int(hi)) if int(hi) > 0 else f"{hi} B")
    return f"{low} to {high}"


@dataclass(frozen=True)
class Violation:
    """One broken rule at one place (``None`` for the parts of the place that do not apply)."""

    rule: str
    message: str
    rank: int | None = None
    tb: int | None = None
    step: int | None = None
    line: int | None = None
    col: int | None = None
    severity: str = "error"
    hint: str | None = None

    def place(self) -> str:
        """``rank R tb T step S`` (only the known parts), or ``algo`` for file-level rules."""
        parts = []
        if self.rank is not None:
            parts.append(f"rank {self.rank}")
        if self.tb is not None:
            parts.append(f"tb {self.tb}")
        if self.step is not None:
            parts.append(f"step {self.step}")
        return " ".join(parts) if parts else "algo"

    def text(self, source: str | None = None) -> str:
        """``file:line: rank R tb T step S: [rule] message`` (warnings say ``warning:``)."""
        prefix = ""
        if source is not None and self.line is not None:
            prefix = f"{source}:{self.line}: "
        elif self.line is not None:
            prefix = f"line {self.line}: "
        kind = "warning: " if self.severity == "warning" else ""
        out = f"{prefix}{kind}{self.place()}: [{self.rule}] {self.message}"
        if self.hint:
            out += f" (hint: {self.hint})"
        return out

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready mapping of every field."""
        return {
            "rule": self.rule,
            "severity": self.severity,
            "message": self.message,
            "rank": self.rank,
            "tb": self.tb,
            "step": self.step,
            "line": self.line,
            "col": self.col,
            "hint": self.hint,
        }


@dataclass(frozen=True)
class MscclReport:
    """Outcome of verifying one MSCCL program.

    ``violations`` holds errors, ``warnings`` the rest; ``summary`` describes the program
    (collective, ranks, channels, thread blocks, steps, protocol, in-place modes, size window);
    ``checks`` maps each analysis to ``"passed"``, ``"failed"``, ``"skipped: why"`` or
    ``"not checked: why"``; ``time`` is the α-β time in seconds on a given topology (else None)
    and ``timing`` its details.
    """

    source: str
    violations: tuple[Violation, ...]
    warnings: tuple[Violation, ...] = ()
    summary: dict[str, Any] = field(default_factory=dict)
    checks: dict[str, str] = field(default_factory=dict)
    time: float | None = None
    timing: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when no rule is violated (warnings allowed)."""
        return not self.violations

    def text(self, *, warnings: bool = True) -> str:
        """Human-readable report: a summary line, one line per violation, then a verdict."""
        s = self.summary
        lines = []
        if s:
            tbs = s.get("tbs_per_gpu")
            tb_text = (
                f"{tbs} tbs/gpu"
                if isinstance(tbs, int)
                else f"{s.get('tbs_min')}-{s.get('tbs_max')} tbs/gpu"
            )
            fields = [f"{k}={s.get(k)}" for k in ("coll", "ngpus", "nchannels")
                      if s.get(k) is not None]
            fields.append(f"{tb_text} ({s.get('tbs_total')} total)")
            fields += [f"{k}={s.get(v)}" for k, v in (("steps", "steps_total"),
                                                      ("proto", "proto"),
                                                      ("inplace", "inplace"),
                                                      ("outofplace", "outofplace"))
                       if s.get(v) is not None]
            fields.append("sizes " + size_window(s.get("minBytes"), s.get("maxBytes")))
            lines.append(f"{self.source}: " + " ".join(fields))
        for v in self.violations:
            lines.append(v.text(self.source))
        if warnings:
            for v in self.warnings:
                lines.append(v.text(self.source))
        for name, state in self.checks.items():
            if state.startswith(("skipped", "not checked")):
                lines.append(f"note: {name} {state}")
        if self.time is not None:
            from tacos.model.units import format_size, format_time

            nbytes = self.timing.get("nbytes")
            size = f" for a {format_size(nbytes)} ({nbytes} B) message" if nbytes else ""
            if self.time != (self.timing.get("runtime") or {}).get("time"):
                lines.append(f"time: {format_time(self.time)}{size} (an estimate of the "
                             f"{self.timing.get('model', 'alpha-beta')} model, not a "
                             "measurement)")
            else:
                lines.append(f"message: {format_size(nbytes)} ({nbytes} B)" if nbytes else
                             "message: default size")
            rt = self.timing.get("runtime") or {}
            if rt.get("time") is not None:
                lines.append(f"runtime: {format_time(rt['time'])}, algbw "
                             f"{rt['algbw'] / 1e9:.2f} GB/s, busbw {rt['busbw'] / 1e9:.2f} GB/s "
                             f"({rt['model']}; bounded by {rt['bound']})")
            elif rt.get("note"):
                lines.append(f"runtime: none ({rt['note']})")
            ranks = self.timing.get("ranks")
            if ranks and list(ranks) != list(range(len(ranks))):
                lines.append(f"ranks: on NPUs {' '.join(map(str, ranks))} "
                             f"(from {self.timing.get('ranks_from', 'given')})")
        n = len(self.violations)
        lines.append("OK" if n == 0 else f"FAILED: {n} violation{'s' if n != 1 else ''}")
        return "\n".join(lines)

    def raise_if_failed(self, limit: int = 10) -> MscclReport:
        """Return ``self`` when ok, else raise :class:`~tacos.errors.VerificationError` with
        the first ``limit`` violations."""
        if self.ok:
            return self
        from tacos.errors import VerificationError

        shown = "\n".join(v.text(self.source) for v in self.violations[:limit])
        more = len(self.violations) - limit
        raise VerificationError(f"{self.source} fails verification:\n{shown}"
                                + (f"\n... and {more} more" if more > 0 else ""))

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready mapping (for CI): verdict, summary, checks, violations, warnings, time."""
        return {
            "source": self.source,
            "ok": self.ok,
            "summary": dict(self.summary),
            "checks": dict(self.checks),
            "violations": [v.as_dict() for v in self.violations],
            "warnings": [v.as_dict() for v in self.warnings],
            "time": self.time,
            "timing": dict(self.timing),
            "runtime": self.timing.get("runtime"),
        }
