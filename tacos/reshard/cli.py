"""``tacosc FILE.tdl`` for files with ``reshard`` statements: plan, verify, report, write.

The reshards of a file are planned together.  ``--solver`` picks the planner (``multicast``
by default, any tacos solver, or a baseline: ``sendrecv``, ``alpa``, ``broadcast``);
``--chunks`` sets the pieces per tile (default: the file's ``pieces``, else chosen);
``--relays all`` (or the file's ``relays all``) lets NPUs outside the meshes forward data.  The
report gives the bound, the plan's time and each baseline's time on the same physical model.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from tacos.errors import UsageError


def run_options(args: argparse.Namespace, relays: str | None = None) -> dict[str, Any]:
    """The synthesis options the command line gives (common ones and ``-O``)."""
    from tacos.cli import _solver_options

    options = _solver_options(args)
    for key, value in (("trials", args.trials), ("workers", args.workers),
                       ("cluster", getattr(args, "cluster", None)),
                       ("time_limit", args.time_limit)):
        if value is not None:
            options[key] = value
    options["relays"] = args.relays or relays or "members"
    return options


def compile_reshards(spec: Any, args: argparse.Namespace, fmt: str | None, reporter: Any
                     ) -> int:
    """Plan ``spec.reshards`` as ``args`` say; print the report; write ``args.output``."""
    from tacos.cli import _render, write_output
    from tacos.reshard.plan import BASELINES, plan_reshard

    if spec.collectives:
        raise UsageError(f"{args.topology} declares both reshard and collective statements",
                         hint="pass --collective NAME to synthesize one collective instead")
    pieces = None if args.chunks == "auto" else args.chunks  # auto: chosen, as by default
    if pieces is None:
        declared = {r.pieces for r in spec.reshards if r.pieces}
        pieces = declared.pop() if len(declared) == 1 else None
    relays = "all" if any(r.relays == "all" for r in spec.reshards) else None
    baseline = args.solver in BASELINES
    options = {} if baseline else run_options(args, relays)
    with reporter.phase("planning the reshard"):
        result = plan_reshard(spec.topology, spec.reshards, solver=args.solver, pieces=pieces,
                              seed=args.seed, **options)
    schedule = result.schedule
    if args.output:
        if fmt in ("xml", "mscclpp"):
            from tacos.reshard.msccl import standard_form

            schedule = standard_form(schedule)
        with reporter.phase(f"writing {args.output}"):
            write_output(args.output, _render(schedule, fmt, args))
    show(result, args)
    return 0


def show(result: Any, args: argparse.Namespace, *, always: bool = False,
         kind: str = "reshard") -> None:
    """Print ``result``'s report: JSON (a ``kind`` report of the versioned schema) with
    ``--json``, else text unless only writing (``always``: the text with ``-o`` too)."""
    if args.json:
        from tacos.report_schema import envelope

        print(json.dumps(envelope(kind, result.report(), True), indent=2))
    elif args.report or not args.output or always:
        print(result.text())


__all__ = ["compile_reshards", "run_options", "show"]
