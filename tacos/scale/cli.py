"""``tacosc clos.tdl -c allreduce --size 1GiB -o plan.json`` on a system of isomorphic groups.

A multi-rail Clos (``use clos_h100(...)``, found by :func:`tacos.model.clos.recognize`) of
:data:`SYMMETRIC_FROM` NPUs or more takes symmetric synthesis by default for all-gather,
reduce-scatter and all-reduce: one solve per group shape (:mod:`tacos.scale.synthesize`),
checked without expanding it (:func:`tacos.check.symmetric.verify_symmetric`), written as the
symmetric plan file (:mod:`tacos.scale.plan_json`).  A per-chunk synthesis of 8,192 GPUs would
hold tens of millions of chunk-NPU pairs and not finish.  ``--symmetric`` asks for it on any
size (and fails with a hint where it does not apply); ``--solver NAME`` without
``--symmetric`` keeps the per-chunk synthesis; with ``--symmetric`` it names the solver of the
templates.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tacos.errors import UsageError

SYMMETRIC_FROM = 256
"""NPUs from which a recognized Clos takes symmetric synthesis without ``--symmetric``."""

KINDS = ("allgather", "reducescatter", "allreduce")

# flags the symmetric path cannot honour, with what they mean to a user
_UNSUPPORTED = (("root", "--root"), ("chunks", "--chunks"), ("nvls", "--nvls"),
                ("plot", "--plot"), ("chakra", "--chakra"), ("objective", "--objective"))


def _kind(spec: Any, args: argparse.Namespace) -> str | None:
    """The collective kind asked for, if it is one symmetric synthesis makes over all NPUs."""
    if args.collective is not None:
        return args.collective if args.collective in KINDS else None
    declared = getattr(spec, "collective", None)
    if declared is not None and declared.kind in KINDS and \
            len(declared.group) == spec.topology.n_npus:
        return str(declared.kind)
    return None


def wants_symmetric(spec: Any, args: argparse.Namespace) -> bool:
    """True when this compile takes the symmetric path: ``--symmetric``, or no ``--solver``, a
    recognized Clos of at least :data:`SYMMETRIC_FROM` NPUs and a collective it makes."""
    if getattr(args, "symmetric", False):
        return True
    if args.solver is not None or getattr(args, "sizes", None):
        return False
    topo = spec.topology
    if topo.n_npus < SYMMETRIC_FROM or _kind(spec, args) is None:
        return False
    from tacos.model.clos import recognize

    return recognize(topo) is not None


def _size(spec: Any, args: argparse.Namespace, kind: str, n: int) -> int:
    from tacos.cli import _size as parse_size
    from tacos.model import patterns

    if args.size:
        return parse_size(args.size)
    declared = getattr(spec, "collective", None)
    if declared is not None and declared.kind == kind:
        return int(declared.size)
    return int(patterns.default_size(kind, n, 1))


def _check_flags(spec: Any, args: argparse.Namespace, fmt: str | None) -> str:
    kind = _kind(spec, args)
    hint = "leave --symmetric out, or pass --solver NAME for a per-chunk synthesis"
    if kind is None:
        asked = args.collective or getattr(getattr(spec, "collective", None), "kind", None)
        raise UsageError(f"symmetric synthesis makes {', '.join(KINDS)} over all NPUs, "
                         f"not {asked or 'no collective'}",
                         hint="pass --collective allreduce (or allgather, reducescatter)"
                         if asked is None else hint)
    for attr, flag in _UNSUPPORTED:
        if getattr(args, attr, None):
            raise UsageError(f"{flag} does not apply to a symmetric plan", hint=hint)
    if fmt not in (None, "json"):
        raise UsageError(f"a symmetric plan is written as JSON (the symmetric plan file), not "
                         f"--format {fmt}", hint=hint)
    return kind


def compile_symmetric(spec: Any, args: argparse.Namespace, fmt: str | None,
                      reporter: Any) -> int:
    """Synthesize, verify and write the symmetric plan; print the summary as ``tacosc`` does
    for other compiles (``-o`` alone: one line; no ``-o`` or ``--report``: a short report;
    ``--json``: the compile report)."""
    from tacos.check.bounds_symmetric import symmetric_bound
    from tacos.check.symmetric import verify_symmetric
    from tacos.cli import write_output
    from tacos.model.units import format_size, format_time
    from tacos.scale.plan_json import dumps
    from tacos.scale.synthesize import DEFAULT_SOLVERS, synthesize_symmetric, system_of

    kind = _check_flags(spec, args, fmt)
    topo = spec.topology
    with reporter.phase("recognizing the groups"):
        system = system_of(topo)
    size = _size(spec, args, kind, topo.n_npus)
    solvers = DEFAULT_SOLVERS if args.solver in (None, "auto") else (args.solver,)
    with reporter.phase(f"symmetric synthesis on {topo.n_npus} NPUs"):
        plan = synthesize_symmetric(system, kind, size, solvers=solvers, seed=args.seed)
    with reporter.phase("verifying (unexpanded)"):
        report = verify_symmetric(plan)
    report.raise_if_failed()
    bound = symmetric_bound(system, kind, plan.size)
    if args.output:
        with reporter.phase(f"writing {args.output}"):
            write_output(args.output, dumps(plan))
    ratio = plan.makespan / bound if bound > 0 else float("nan")
    what = f"{kind} {format_size(plan.size)} on {topo.n_npus} NPUs"
    facts = (f"link-model time {format_time(plan.makespan)}, {ratio:.3f}x its lower bound "
             f"({format_time(bound)}), symmetric plan of {len(plan.parts)} parts and "
             f"{len({id(p.template) for p in plan.phases})} templates")
    if args.json:
        from tacos.report_schema import envelope

        doc = {"collective": {"kind": kind, "size": plan.size, "npus": topo.n_npus},
               "topology": {"name": topo.name, "npus": topo.n_npus,
                            "switches": len(topo.switches), "links": len(topo.links)},
               "time": plan.makespan,
               "runtime": {"time": None, "note": "symmetric plans are timed in the link model"},
               "verified": report.ok, "violations": [],
               "bound": {"value": bound, "kind": "symmetric closed form"}, "gap": ratio,
               "solver": {"solver": "symmetric", "seed": args.seed,
                          "templates_by": list(solvers)},
               "symmetric": {"parts": list(plan.parts), "phases": len(plan.phases),
                             "templates": len({id(p.template) for p in plan.phases}),
                             "transfers_represented": plan.n_transfers,
                             "size_requested": size},
               "output": args.output}
        print(json.dumps(envelope("compile", doc, report.ok), indent=2))
    elif args.report or not args.output:
        print(f"{what}: {facts}")
        print(f"  {plan.n_transfers:,} transfers represented; verified unexpanded")
        if plan.size != size:
            print(f"  size rounded down from {size} to {plan.size} bytes (whole bytes per NPU "
                  "and part)")
    if args.output and not args.json:
        where = "standard output" if args.output == "-" else args.output
        print(f"wrote {where}: {what}, {facts}, verified",
              file=sys.stderr if args.output == "-" else sys.stdout)
    return 0
