"""Command-line flags checked against their documented ranges, and against the output chosen.

Run by ``tacosc compile`` before any file is read or any work is done, whatever the output
format: a number outside its range (``--trials 0``, ``--instances 1000000``, ``--max-bytes``
below ``--min-bytes``) is refused, and so is a flag that would be silently ignored because it
does not apply to the chosen output (``--instances`` with ``-o plan.json``).

Ranges (both ends included):

========================  ===================================================================
``--seed``                0 to 2**63 - 1
``--trials``              1 to 100,000
``--workers``             1 to 1,024
``--time-limit``          0.001 to 1e6 s
``--instances``           1 to 32 (MSCCL: each instance takes a channel; MAXCHANNELS is 32)
``--max-steps``           2 to 1,024 (MSCCL_MAX_NUM_STEPS of the runtime build; default 64)
``--min-bytes``           0 to 1 PiB, at most ``--max-bytes`` unless that is 0 (no limit)
``--max-bytes``           0 (no limit) or 1 B to 1 PiB
========================  ===================================================================
"""

from __future__ import annotations

import argparse

from tacos.errors import TacosError, UsageError

MAX_INSTANCES = 32
"""Most ``--instances``: every instance needs its own channel, and MSCCL has 32 (MAXCHANNELS)."""
MAX_STEPS = 1024
"""Most ``--max-steps`` (``MSCCL_MAX_NUM_STEPS`` of a runtime build: 64 by default, 256 in some)."""

MSCCL_FLAGS = (("instances", "--instances"), ("min_bytes", "--min-bytes"),
               ("max_bytes", "--max-bytes"), ("max_steps", "--max-steps"),
               ("proto", "--proto"), ("inplace", "--inplace"))
"""(attribute, flag) of the options that shape MSCCL output only; unset they are None/False."""
SWEEP_FLAGS = ("min_bytes", "max_bytes", "proto", "inplace")
"""The MSCCL flags a ``--sizes`` sweep applies to the XML files it writes."""
SHAPED_SWEEP_FLAGS = ("instances", "max_steps")
"""The flags a runtime-shaped sweep (``--shape auto``, the default) also takes: the instance
count it tries and the steps per thread block it may use."""


def check_common(args: argparse.Namespace) -> None:
    """Refuse ``--seed``, ``--trials`` and ``--workers`` outside their documented ranges."""
    from tacos.solvers.options import COMMON_OPTIONS, range_text

    for key in ("seed", "trials", "workers"):
        value = getattr(args, key, None)
        if value is None:
            continue
        lo, hi = COMMON_OPTIONS[key].range or (0, 0)
        if not lo <= value <= hi:
            raise UsageError(f"--{key} {value} is out of range ({range_text(COMMON_OPTIONS[key])})",
                             hint=COMMON_OPTIONS[key].doc)


def given_msccl_flags(args: argparse.Namespace) -> list[str]:
    """The MSCCL-only flags given on the command line."""
    given = []
    for key, flag in MSCCL_FLAGS:
        value = getattr(args, key, None)
        if key == "inplace" and value is False:  # --out-of-place (unset is None)
            given.append("--out-of-place")
        elif value not in (None, False):
            given.append(flag)
    return given


def check_msccl(args: argparse.Namespace, fmt: str | None) -> None:
    """Refuse MSCCL flags that do not apply to the output chosen (``fmt``: ``json``, ``xml``,
    ``mscclpp`` or None for no file; ``args.sizes``: a sweep writing XML files to a folder),
    then check their values together (ranges, ``--min-bytes`` <= ``--max-bytes``)."""
    given = given_msccl_flags(args)
    if not given:
        return
    if getattr(args, "sizes", None):
        where = "a --sizes sweep without -o DIR writes no MSCCL XML" if not args.output else \
            None
        takes = SWEEP_FLAGS + (SHAPED_SWEEP_FLAGS if getattr(args, "shape", None) != "fixed"
                               else ())
        unused = given if where else [f for k, f in MSCCL_FLAGS
                                      if f in given and k not in takes]
        if unused:
            raise UsageError(f"{', '.join(unused)} do{'es' if len(unused) == 1 else ''} not "
                             f"apply here: {where or 'the XML files of a --sizes sweep take only '}"
                             + ("" if where else ", ".join(f for k, f in MSCCL_FLAGS
                                                           if k in takes)),
                             hint="drop " + ", ".join(unused))
    elif fmt not in ("xml", "mscclpp"):
        out = f"-o {args.output} writes a JSON schedule" if args.output else \
            "no output file is written"
        raise UsageError(f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to MSCCL "
                         f"output only, and {out}",
                         hint="write MSCCL XML with -o plan.xml (or MSCCL++ with --format "
                         "mscclpp), or drop " + ", ".join(given))
    msccl_values(args)


def msccl_values(args: argparse.Namespace) -> dict[str, object]:
    """The MSCCL flags as :func:`tacos.msccl.lower.msccl_options` keywords (defaults filled in),
    each checked against its range; a :class:`~tacos.errors.UsageError` otherwise."""
    from tacos.cli import _size

    instances = 1 if args.instances is None else args.instances
    if not 1 <= instances <= MAX_INSTANCES:
        raise UsageError(f"--instances {instances} is out of range (1 to {MAX_INSTANCES})",
                         hint="each instance takes an MSCCL channel, and there are "
                         f"{MAX_INSTANCES} (MAXCHANNELS)")
    steps = 64 if args.max_steps is None else args.max_steps
    if not 2 <= steps <= MAX_STEPS:
        raise UsageError(f"--max-steps {steps} is out of range (2 to {MAX_STEPS})",
                         hint="the runtime's MSCCL_MAX_NUM_STEPS: 64 in a default build")
    low = _size(args.min_bytes or "0", "--min-bytes", 0)
    high = _size(args.max_bytes or "0", "--max-bytes", 0)
    if high and low > high:
        raise UsageError(f"--min-bytes {args.min_bytes} is above --max-bytes {args.max_bytes}",
                         hint="the runtime picks the plan for sizes from --min-bytes to "
                         "--max-bytes (0: no upper limit)")
    values: dict[str, object] = dict(proto=args.proto or "Simple", inplace=bool(args.inplace),
                                     outofplace=not args.inplace, min_bytes=low,
                                     max_bytes=high, instances=instances,
                                     max_steps_per_tb=steps)
    try:
        from tacos.msccl.lower import msccl_options

        msccl_options(**values)
    except TacosError as exc:
        raise UsageError(exc.message, hint=exc.hint) from None
    return values


def check_ranges(args: argparse.Namespace, ranges: dict[str, tuple[int, int]]) -> None:
    """Refuse a given integer flag outside its range; ``ranges`` maps the attribute name to
    (lowest, highest), both included (the flag is the name with dashes)."""
    for key, (lo, hi) in ranges.items():
        value = getattr(args, key, None)
        if value is not None and not lo <= value <= hi:
            raise UsageError(f"--{key.replace('_', '-')} {value} is out of range "
                             f"({lo:,} to {hi:,})")
