"""Solver options: what each solver accepts, and the check that rejects everything else.

A solver class declares the options it reads in a class attribute ``options``: a dict from
option name to :class:`Option` (a short description, and optionally a type used to read the
value from the command line, the allowed choices and the default)::

    class MySolver:
        name = "mine"
        options = {"depth": Option("search depth", int, default=3)}

The options every solver may use (``seed``, ``trials``, ``workers``, ``cluster``,
``time_limit``, ``progress``, ``relays``) are explicit parameters of :func:`tacos.synthesize`
and listed in :data:`COMMON_OPTIONS`; a solver need not declare them.  :func:`check_options`
rejects any other option the chosen solver does not declare, with a "did you mean" drawn from
that solver's options, the common ones, and the options of the other solvers.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tacos.errors import UsageError


@dataclass(frozen=True)
class Option:
    """One solver option: ``doc`` (one line), ``type`` (reads a command-line text), allowed
    ``choices`` (empty: any), the ``default`` (for the documentation) and, for a numeric
    option, its documented ``range`` (lowest, highest; both included), checked before any work
    (:func:`check_range`)."""

    doc: str
    type: Callable[[str], Any] | None = None
    choices: tuple[Any, ...] = ()
    default: Any = None
    range: tuple[float, float] | None = None


def int_or_text(*texts: str) -> Callable[[str], Any]:
    """A command-line reader for an option that is an integer or one of ``texts``."""

    def read(value: str) -> Any:
        if value in texts:
            return value
        if value.lower() in ("none", "unlimited"):
            return None
        return int(value)

    read.__name__ = "int or " + "/".join(texts)
    return read


def boolean(value: str) -> bool:
    """A command-line reader for yes/no options."""
    low = value.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{value!r} is not true/false")


MAX_SEED = 2**63 - 1
MAX_MERGE = 1_000_000  # chunks one transfer may carry: at most the default chunk limit
MAX_TRIALS = 100_000
MAX_WORKERS = 1024

COMMON_OPTIONS: dict[str, Option] = {
    "seed": Option("random seed: the same seed gives the same schedule", int, default=0,
                   range=(0, MAX_SEED)),
    "trials": Option("randomized trials (greedy, and the ILP's starting schedule)", int,
                     range=(1, MAX_TRIALS)),
    "workers": Option("processes running trials in parallel (default: all cores)", int,
                      range=(1, MAX_WORKERS)),
    "cluster": Option("address of a Dask scheduler (tcp://HOST:8786) whose workers run the "
                      "trials and sweep sizes instead of local processes", str),
    "time_limit": Option("seconds the solver may spend (ILP; default 60)", float,
                         range=(1e-3, 1e6)),
    "progress": Option("callback (done, total) after each unit of work, or a "
                       "tacos.progress.Reporter"),
    "relays": Option("relay data only through the group's NPUs ('members', default) or "
                     "through any NPU ('all')", str, ("members", "all"), "members"),
}
"""Options of every solver (explicit parameters of :func:`tacos.synthesize`)."""


def declared(solver_class: type) -> dict[str, Option]:
    """The options ``solver_class`` declares (without the common ones)."""
    return dict(getattr(solver_class, "options", {}) or {})


def _owners(key: str) -> list[str]:
    """Names of the registered solvers that declare ``key`` (solvers that cannot be imported
    are skipped)."""
    from tacos.solvers.registry import SOLVERS

    out = []
    for name, target in SOLVERS.items():
        module, attr = target.split(":")
        try:
            cls = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError):
            continue
        if key in declared(cls):
            out.append(name)
    return out


def _all_names() -> set[str]:
    from tacos.solvers.registry import SOLVERS

    names: set[str] = set()
    for target in SOLVERS.values():
        module, attr = target.split(":")
        try:
            names |= set(declared(getattr(importlib.import_module(module), attr)))
        except (ImportError, AttributeError):
            continue
    return names


def check_options(solver: str, solver_class: type, options: dict[str, Any]) -> None:
    """Raise :class:`~tacos.errors.UsageError` for an option ``solver`` does not accept, or a
    value outside an option's ``choices``."""
    accepted = declared(solver_class)
    for key, value in options.items():
        if key in COMMON_OPTIONS:
            continue
        if key in accepted:
            opt = accepted[key]
            if opt.choices and value not in opt.choices:
                raise UsageError(f"solver {solver!r}: option {key}={value!r} is not one of "
                                 f"{', '.join(map(repr, opt.choices))}")
            check_range(key, opt, value, f"solver {solver!r}: option ")
            continue
        owners = _owners(key)
        if owners:
            raise UsageError(f"solver {solver!r} has no option {key!r}",
                             hint=f"{key!r} is an option of solver "
                                  f"{', '.join(repr(o) for o in owners)}")
        mine = list(accepted) + list(COMMON_OPTIONS)
        close = difflib.get_close_matches(key, mine, n=1, cutoff=0.6) or \
            difflib.get_close_matches(key, sorted(_all_names()), n=1, cutoff=0.6)
        listing = ", ".join(sorted(accepted)) or "none besides the common ones"
        raise UsageError(f"solver {solver!r} has no option {key!r}",
                         hint=(f"did you mean {close[0]!r}? " if close else "")
                         + f"its options: {listing}; common: {', '.join(COMMON_OPTIONS)}")


def range_text(opt: Option) -> str:
    """``opt``'s documented range in words (``'1 to 64'``), or ``''`` when it has none."""
    if opt.range is None:
        return ""
    lo, hi = opt.range
    return f"{lo:,g} to {hi:,g}" if isinstance(lo, float) or isinstance(hi, float) \
        else f"{lo:,} to {hi:,}"


def check_range(key: str, opt: Option, value: Any, where: str = "") -> None:
    """Raise :class:`~tacos.errors.UsageError` when ``value`` is a number outside ``opt``'s
    documented range, or not a whole number for an integer option (a text is read with the
    option's reader first; words such as ``'auto'`` and None are left to the option)."""
    if isinstance(value, str) and opt.range is not None and opt.type is not None:
        try:
            value = opt.type(value)  # '-1' given through the API is still -1
        except (TypeError, ValueError):
            return  # not a number: the option's own reader says why
    if opt.range is None or value is None or isinstance(value, str):
        return
    lo, hi = opt.range
    whole = opt.type is int or getattr(opt.type, "__name__", "").startswith("int")
    if isinstance(value, bool) or not isinstance(value, int | float) or (
            whole and not isinstance(value, int)):
        kind = "a whole number" if whole else "a number"
        raise UsageError(f"{where}{key}={value!r} is not {kind}",
                         hint=f"{key}: {opt.doc} (range {range_text(opt)})")
    if not lo <= value <= hi:  # NaN fails too
        raise UsageError(f"{where}{key}={value!r} is out of range ({range_text(opt)})",
                         hint=f"{key}: {opt.doc}")


def describe(solver: str) -> dict[str, Option]:
    """Every option ``solver`` accepts (common ones first), for ``tacosc solvers`` and help."""
    from tacos.solvers.registry import solver_class

    return {**COMMON_OPTIONS, **declared(solver_class(solver))}


def read_cli_value(solver: str, key: str, text: str) -> Any:
    """Convert a ``--option KEY=TEXT`` value with the option's declared type."""
    if key == "progress":
        raise UsageError("progress is not a command-line option", hint="use -q to hide it")
    opts = describe(solver)
    if key not in opts:
        check_options(solver, _class(solver), {key: text})
    reader = opts[key].type
    if reader is None:
        return text
    try:
        value = reader(text)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"--option {key}={text}: {exc}",
                         hint=f"{key}: {opts[key].doc}") from None
    check_range(key, opts[key], value, "-O ")
    return value


def _class(solver: str) -> type:
    from tacos.solvers.registry import solver_class

    return solver_class(solver)
