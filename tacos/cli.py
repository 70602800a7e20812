"""``tacosc``: the command line.

Forms::

    tacosc TOPO.tdl [--collective NAME] [options] -o OUT.{json,xml}   synthesize a schedule
    tacosc info TOPO.tdl [--per-npu] [--json]                          describe a topology
    tacosc verify PLAN.{xml,json} [--topology TOPO.tdl] [--json]       check a plan
    tacosc presets                                                     list shipped presets

Exit codes: 0 ok, 1 user error or failed verification, 2 usage, 3 tool failure.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
import time
import traceback
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from tacos.errors import TacosError, ToolFailure, UsageError

SUBCOMMANDS = ("info", "verify", "presets", "compile")

DESCRIPTION = """\
tacos synthesizes collective communication algorithms for any topology.

  tacosc TOPO.tdl --collective allreduce --size 64MiB -o plan.xml
  tacosc info TOPO.tdl
  tacosc verify plan.xml [--topology TOPO.tdl]
  tacosc presets

Run 'tacosc info --help', 'tacosc verify --help' or 'tacosc compile --help' for each form;
'tacosc TOPO.tdl ...' is short for 'tacosc compile TOPO.tdl ...'.
"""


def _params(pairs: Sequence[str]) -> dict[str, Any]:
    """``--param nodes=2 --param nic=25GB/s`` → TDL parameter values."""
    from tacos.frontends.tdl_values import Quantity
    from tacos.units import parse_quantity, unit_kind

    out: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise UsageError(f"--param {pair!r} is not NAME=VALUE", hint="e.g. --param nodes=2")
        name, _, text = pair.partition("=")
        text = text.strip()
        try:
            out[name.strip()] = int(text)
            continue
        except ValueError:
            pass
        try:
            out[name.strip()] = float(text)
            continue
        except ValueError:
            pass
        unit = text.lstrip("0123456789.eE+- ")
        kind = unit_kind(unit)
        if kind is None:
            raise UsageError(f"--param {name}: cannot read {text!r}",
                             hint="give a number or a quantity such as 25GB/s, 2us, 1MiB")
        out[name.strip()] = Quantity(parse_quantity(text, kind), kind, unit)
    return out


def _size(text: str) -> int:
    from tacos.units import parse_quantity

    try:
        value = parse_quantity(text, "size", default_unit="B")
    except ValueError as exc:
        raise UsageError(f"--size: {exc}", hint="e.g. --size 64MiB") from None
    if value < 1:
        raise UsageError("--size must be at least 1 byte")
    return int(value)


def _compile_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tacosc [compile]",
        description="Synthesize a schedule for a collective on a topology and write it.",
    )
    p.add_argument("topology", help="TDL file describing the system (and maybe collectives)")
    p.add_argument("-c", "--collective", help="standard collective (allgather, reducescatter, "
                   "allreduce, alltoall, broadcast, reduce, scatter, gather) or the name of a "
                   "collective declared in the file; default: every declared collective")
    p.add_argument("--size", help="buffer size in the nccl-tests convention, e.g. 64MiB "
                   "(default 1MiB)")
    p.add_argument("--chunks", type=int, default=1, help="chunks per NPU (default 1)")
    p.add_argument("--root", help="root NPU (name or id) for broadcast/reduce/scatter/gather")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="set a TDL parameter, e.g. --param nodes=2 (repeatable)")
    p.add_argument("--solver", default="greedy", help="greedy (default), ilp, taccl, ring, "
                   "biring, direct, rhd, dbtree, hierarchical")
    p.add_argument("--trials", type=int, help="greedy: number of randomized trials")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--workers", type=int, help="greedy: parallel processes (default: cores)")
    p.add_argument("--max-merge", type=int, help="most chunks one transfer may carry "
                   "(1 = one chunk per transfer)")
    p.add_argument("--relays", choices=("members", "all"),
                   help="where a process group's data may be relayed: at group members only "
                   "(default) or at any NPU")
    p.add_argument("--ilp-backend", help="ilp: cbc, highs, cpsat or gurobi")
    p.add_argument("--time-limit", type=float, help="ilp: time limit in seconds")
    p.add_argument("-o", "--output", help="output file: .json (schedule) or .xml (MSCCL)")
    p.add_argument("--format", choices=("json", "xml", "mscclpp"),
                   help="output format (default: from the output file's extension)")
    p.add_argument("--proto", default="Simple", choices=("Simple", "LL", "LL128"),
                   help="MSCCL protocol (default Simple)")
    p.add_argument("--inplace", action="store_true", help="MSCCL: emit an in-place plan")
    p.add_argument("--min-bytes", type=int, default=0, help="MSCCL: smallest message size")
    p.add_argument("--max-bytes", type=int, default=0, help="MSCCL: largest (0 = no limit)")
    p.add_argument("--max-steps", type=int, default=64,
                   help="MSCCL: most steps per threadblock (default 64)")
    p.add_argument("--report", action="store_true",
                   help="print collective time, algbw, lower bound and gap")
    p.add_argument("--plot", metavar="PNG", help="draw the schedule's timeline to a PNG")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    return p


def _info_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tacosc info",
                                description="Describe a topology and its collectives.")
    p.add_argument("topology", help="TDL file")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="set a TDL parameter (repeatable)")
    p.add_argument("--per-npu", action="store_true", help="always print the per-NPU table")
    p.add_argument("--json", action="store_true", help="print JSON")
    return p


def _verify_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tacosc verify",
        description="Verify an MSCCL XML plan (ours or anyone's) or a tacos JSON schedule. "
        "Exits 1 and names the rank/threadblock/step and the rule on any violation.")
    p.add_argument("plan", help="plan.xml (MSCCL) or plan.json (tacos schedule)")
    p.add_argument("--topology", help="TDL file: also time the plan on it (XML) or check the "
                   "schedule was made for it (JSON)")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="set a TDL parameter of --topology (repeatable)")
    p.add_argument("--max-steps", type=int, default=64,
                   help="XML: most steps per threadblock (default 64)")
    p.add_argument("--ranks", metavar="NPU,NPU,...",
                   help="XML: the NPU (name or id) of each rank, in rank order, for a process "
                   "group's plan (default: the plan's 'tacos ranks' comment, else the group "
                   "of the collective declared in --topology, else rank r = NPU r)")
    p.add_argument("--strict", action="store_true",
                   help="XML: treat attributes the runtime needs to select a plan (outofplace, "
                   "minBytes, maxBytes) as errors when missing, not warnings")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    return p


def cmd_info(argv: Sequence[str]) -> int:
    """``tacosc info``."""
    from tacos import load
    from tacos.info import describe, format_info

    args = _info_parser().parse_args(argv)
    spec = load(args.topology, _params(args.param))
    if args.json:
        print(json.dumps(describe(spec), indent=2))
    else:
        print(format_info(spec, per_npu=True if args.per_npu else None))
    return 0


def cmd_presets(argv: Sequence[str]) -> int:
    """``tacosc presets``: list the shipped preset files and their first comment line."""
    argparse.ArgumentParser(prog="tacosc presets",
                            description="List the shipped presets.").parse_args(argv)
    folder = resources.files("tacos") / "presets"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".tdl"):
            first = entry.read_text(encoding="utf-8").splitlines()[0].lstrip("# ")
            print(f"{entry.name[:-4]:<16} {first}")
    return 0


def _choose_collective(spec: Any, args: argparse.Namespace) -> Any:
    from tacos import patterns
    from tacos.collective import STANDARD_COLLECTIVES

    topo = spec.topology
    if args.collective is None:
        if spec.collective is None:
            raise UsageError(f"{args.topology} declares no collective",
                             hint="pass --collective allreduce (or another collective)")
        return spec.collective
    for c in spec.collectives:
        if c.name == args.collective and c.kind != args.collective:
            return c
    if args.collective not in STANDARD_COLLECTIVES:
        declared = [c.name for c in spec.collectives]
        close = difflib.get_close_matches(args.collective,
                                          list(STANDARD_COLLECTIVES) + declared, n=1)
        raise UsageError(f"unknown collective {args.collective!r}",
                         hint=f"did you mean '{close[0]}'?" if close else
                         f"use one of {', '.join(STANDARD_COLLECTIVES)}")
    root = None
    if args.root is not None:
        names = {n.name: n.id for n in topo.npus}
        if args.root in names:
            root = names[args.root]
        elif args.root.isdigit() and int(args.root) < topo.n_npus:
            root = int(args.root)
        else:
            raise UsageError(f"--root {args.root!r} is not an NPU of {args.topology}")
    elif args.collective in patterns.ROOTED_COLLECTIVES:
        raise UsageError(f"{args.collective} needs --root", hint="e.g. --root 0")
    if args.chunks < 1:
        raise UsageError("--chunks must be at least 1")
    try:
        return patterns.build(args.collective, topo.live_npus,
                              size=_size(args.size) if args.size else 1 << 20,
                              chunks_per_npu=args.chunks, root=root)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


class _Progress:
    """A one-line progress bar on stderr (only when stderr is a terminal)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.start = time.perf_counter()

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        width = 30
        fill = int(width * done / max(1, total))
        elapsed = time.perf_counter() - self.start
        sys.stderr.write(f"\rsynthesizing [{'#' * fill}{'.' * (width - fill)}] "
                         f"{done}/{total} trials  {elapsed:.1f}s")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def cmd_compile(argv: Sequence[str]) -> int:
    """``tacosc TOPO.tdl ...``: synthesize, verify, write."""
    from tacos import load
    from tacos.synthesize import synthesize

    args = _compile_parser().parse_args(argv)
    fmt = args.format
    if args.output and fmt is None:
        suffix = Path(args.output).suffix.lower()
        fmt = {".json": "json", ".xml": "xml"}.get(suffix)
        if fmt is None:
            raise UsageError(f"cannot tell the format of {args.output!r}",
                             hint="name it .json or .xml, or pass --format")
    spec = load(args.topology, _params(args.param))
    collective = _choose_collective(spec, args)
    options: dict[str, Any] = {"seed": args.seed, "progress": _Progress(not args.quiet)}
    for key, value in (("trials", args.trials), ("workers", args.workers),
                       ("max_merge", args.max_merge), ("backend", args.ilp_backend),
                       ("time_limit", args.time_limit), ("relays", args.relays)):
        if value is not None:
            options[key] = value
    schedule = synthesize(spec.topology, collective, solver=args.solver, **options)
    schedule.verify().raise_if_failed()
    if args.output:
        data = _render(schedule, fmt, args)
        try:
            Path(args.output).write_text(data, encoding="utf-8")
        except OSError as exc:
            raise TacosError(f"cannot write {args.output}: {exc.strerror or exc}",
                             hint="check that the folder exists and is writable") from None
    if args.plot:
        from tacos.backends.plot import plot_schedule

        plot_schedule(schedule, args.plot)
    if args.report or not args.output:
        from tacos.report import format_report

        print(format_report(schedule, topology=spec.topology))
    return 0


def _render(schedule: Any, fmt: str, args: argparse.Namespace) -> str:
    if fmt == "json":
        from tacos.backends.json_schedule import dumps

        return dumps(schedule)
    if fmt == "mscclpp":
        from tacos.backends.mscclpp_json import emit_mscclpp_json

        return emit_mscclpp_json(schedule)
    from tacos.backends.msccl_xml import schedule_to_xml
    from tacos.msccl.lower import MscclOptions

    options = MscclOptions(
        name=Path(args.output).stem if args.output else "tacos",
        proto=args.proto,
        inplace=args.inplace,
        outofplace=not args.inplace,
        min_bytes=args.min_bytes,
        max_bytes=args.max_bytes,
        max_steps_per_tb=args.max_steps,
    )
    return schedule_to_xml(schedule, options)


def cmd_verify(argv: Sequence[str]) -> int:
    """``tacosc verify``: MSCCL XML or tacos JSON."""
    args = _verify_parser().parse_args(argv)
    topology, groups = None, []
    if args.topology:
        from tacos import load

        spec = load(args.topology, _params(args.param))
        topology = spec.topology
        groups = [c.group for c in spec.collectives]
    path = Path(args.plan)
    if not path.exists():
        raise TacosError(f"{path}: no such file")
    if path.suffix.lower() == ".xml":
        from tacos.msccl.ranks import parse_ranks
        from tacos.msccl.verify import verify_xml_file

        ranks = None
        if args.ranks is not None:
            if topology is None:
                raise UsageError("--ranks needs --topology")
            ranks = parse_ranks(args.ranks, topology)
        report = verify_xml_file(path, topology=topology, max_steps=args.max_steps,
                                 strict=args.strict, ranks=ranks, groups=groups)
    else:
        from tacos.frontends.json_schedule import check_against_topology, load
        from tacos.verify import verify_schedule

        schedule = load(path)
        if topology is not None:
            problems = check_against_topology(schedule, topology)
            if problems:
                raise TacosError(f"{path} was not made for {args.topology}: {problems[0]}",
                                 hint=f"{len(problems)} difference(s) in all")
        report = verify_schedule(schedule)
    print(json.dumps(report.as_dict(), indent=2) if args.json else report.text())
    return 0 if report.ok else 1


def run(argv: Sequence[str]) -> int:
    """Dispatch ``argv`` (without the program name); returns the exit code."""
    if not argv or argv[0] in ("-h", "--help"):
        print(DESCRIPTION)
        _compile_parser().print_help()
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        from tacos import __version__

        print(f"tacosc {__version__}")
        return 0
    command, rest = (argv[0], argv[1:]) if argv[0] in SUBCOMMANDS else ("compile", argv)
    handler = {"info": cmd_info, "verify": cmd_verify, "presets": cmd_presets,
               "compile": cmd_compile}[command]
    return handler(rest)


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point: errors become messages and exit codes, never tracebacks."""
    try:
        return run(list(sys.argv[1:] if argv is None else argv))
    except TacosError as exc:
        print(exc.render(), file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:  # output piped into head & co.
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except SystemExit as exc:  # argparse usage errors
        return int(exc.code) if isinstance(exc.code, int) else 2
    except ImportError as exc:
        err = ToolFailure(f"a required component is missing: {exc}",
                          hint="reinstall tacos (pip install -e .) or install the named package")
        print(err.render(), file=sys.stderr)
        return err.exit_code
    except Exception as exc:  # a bug: say so plainly
        if os.environ.get("TACOS_DEBUG"):
            traceback.print_exc()
        print(f"error: internal error: {type(exc).__name__}: {exc}\n"
              "hint: this is a bug in tacos; rerun with TACOS_DEBUG=1 for details and report it",
              file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
