"""``tacosc FILE.tdl`` for files with ``reshard`` statements: plan, verify, report, write.

The reshards of a file are planned together.  ``--solver`` picks the planner (``multicast``
by default, any tacos solver, or a baseline: ``sendrecv``, ``alpa``, ``broadcast``);
``--chunks`` sets the pieces per tile (default: the file's ``pieces``, else chosen).  The
report gives the bound, the plan's time and each baseline's time on the same physical model.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tacos.errors import UsageError


def compile_reshards(spec: Any, args: argparse.Namespace, options: dict[str, Any]) -> int:
    """Plan ``spec.reshards`` as ``args`` say; print the report; write ``args.output``."""
    from tacos.reshard.plan import plan_reshard

    if spec.collectives:
        raise UsageError(f"{args.topology} declares both reshard and collective statements",
                         hint="pass --collective NAME to synthesize one collective instead")
    pieces = args.chunks
    if pieces is None:
        declared = {r.pieces for r in spec.reshards if r.pieces}
        pieces = declared.pop() if len(declared) == 1 else None
    solver = args.solver or "multicast"
    opts = {k: v for k, v in options.items() if k not in ("seed",)}
    relays = {r.relays for r in spec.reshards if r.relays}
    if relays and solver == "multicast":
        opts["relays"] = "any" if "any" in relays else "group"
    result = plan_reshard(spec.topology, spec.reshards, solver=solver, pieces=pieces,
                          seed=options.get("seed", 0),
                          baselines=not getattr(args, "no_baselines", False), **opts)
    schedule = result.schedule
    if args.output:
        from tacos.cli import _render, write_output

        fmt = args.format or {".json": "json", ".xml": "xml"}[Path(args.output).suffix.lower()]
        if fmt in ("xml", "mscclpp"):
            from tacos.reshard.msccl import standard_form

            schedule = standard_form(schedule)
        write_output(args.output, _render(schedule, fmt, args))
    if args.report or not args.output:
        print(result.text())
    return 0


__all__ = ["compile_reshards"]
