"""``tacosc``: the command line.

Forms::

    tacosc TOPO.tdl [--collective NAME] [options] -o OUT.{json,xml}   synthesize a schedule
    tacosc info TOPO.tdl [--per-npu] [--json]                          describe a topology
    tacosc verify PLAN.{xml,json} [--topology TOPO.tdl] [--json]       check a plan
    tacosc presets [--json]                                            list shipped presets
    tacosc solvers [--json]                                            solvers and options
    tacosc import FORMAT FILE [options] -o OUT.tdl                     import a topology

Every command takes --json.  TOPO may be a TDL file or any file ``tacosc import`` reads (NCCL
topology XML, nvidia-smi topo -m output, TACCL/TE-CCL JSON), told apart by content.

Exit codes: 0 ok, 1 user error or failed verification, 2 usage, 3 tool failure.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import signal
import sys
import threading
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tacos.errors import TacosError, ToolFailure, UsageError

SUBCOMMANDS = ("info", "verify", "presets", "compile", "solvers", "import", "cost", "explore",
               "allocate")

WINDOW_SIZES = "1KiB:4GiB:x4"  #: the sizes ``-o DIR`` alone writes one window around each
DESCRIPTION = """\
tacos synthesizes collective communication algorithms for any topology.

  tacosc TOPO.tdl --collective allreduce --size 64MiB -o plan.xml
  tacosc info TOPO.tdl
  tacosc verify plan.xml [--topology TOPO.tdl]
  tacosc presets | tacosc solvers
  tacosc import nccl-topo topo.xml --node dgx_a100_node -o system.tdl
  tacosc cost TOPO.tdl --collective allreduce --size 64MiB [--group 0-7]
  tacosc explore TOPO.tdl --model gpt-20b
  tacosc allocate 'Ring(4)_FC(2)_Switch(8)' --budget 300GB/s --op allreduce:64MiB

Run 'tacosc COMMAND --help' for each form; 'tacosc TOPO.tdl ...' is short for
'tacosc compile TOPO.tdl ...'.  Times are estimates of the alpha-beta model (link latency +
bytes / bandwidth), not measurements.
"""


def _params(pairs: Sequence[str]) -> dict[str, Any]:
    """``--param nodes=2 --param nic=25GB/s`` → TDL parameter values."""
    from tacos.frontends.tdl_values import Quantity
    from tacos.model.units import parse_quantity, unit_kind

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
            value = float(text)
        except ValueError:
            pass
        else:
            if not math.isfinite(value):
                raise UsageError(f"--param {name}: {text!r} is not a finite number")
            out[name.strip()] = value
            continue
        unit = text.lstrip("0123456789.eE+- ")
        kind = unit_kind(unit)
        if kind is None:
            raise UsageError(f"--param {name}: cannot read {text!r}",
                             hint="give a number or a quantity such as 25GB/s, 2us, 1MiB")
        try:
            out[name.strip()] = Quantity(parse_quantity(text, kind), kind, unit)
        except ValueError as exc:
            raise UsageError(f"--param {name}: {exc}") from None
    return out


def _size(text: str, flag: str = "--size", minimum: int = 1) -> int:
    """A command-line size (``64MiB``, ``1000``) read by :func:`tacos.units.parse_size`."""
    from tacos.model.units import parse_size

    try:
        value = parse_size(text, flag)
    except TacosError as exc:
        raise UsageError(exc.message, hint=exc.hint or "e.g. 64MiB") from None
    if value < minimum:
        raise UsageError(f"{flag} must be at least {minimum} byte{'s' if minimum > 1 else ''}")
    if value:
        from tacos.limits import check_number

        problem = check_number("size", value)
        if problem is not None:
            raise UsageError(f"{flag}: {problem}", hint="e.g. 64MiB")
    return value


def _add_input_options(p: argparse.ArgumentParser) -> None:
    """``--limit`` and ``--include-dir``, shared by every command that reads TDL."""
    p.add_argument("--limit", action="append", default=[], metavar="NAME=N",
                   help="raise (or lower) an input limit for this run, e.g. --limit "
                   "links=10000000 (repeatable; see docs/tdl.md, Limits)")
    p.add_argument("--include-dir", action="append", default=[], metavar="DIR",
                   help="a further folder that 'use \"path\"' may read TDL files from "
                   "(repeatable)")


def limits_of(args: argparse.Namespace) -> Any:
    """A context manager applying ``--limit NAME=N`` for the command."""
    from tacos import limits

    changes: dict[str, int] = {}
    for pair in args.limit:
        name, sep, value = pair.partition("=")
        if not sep or not value.strip().isdigit():
            raise UsageError(f"--limit {pair!r} is not NAME=N",
                             hint=f"e.g. --limit links=10000000; limits: "
                             f"{', '.join(limits.LIMIT_NAMES)}")
        changes[name.strip()] = int(value)
    try:
        limits.with_changes(limits.current(), changes)
    except TacosError as exc:
        raise UsageError(f"--limit: {exc.message}", hint=exc.hint) from None
    return limits.raised(**changes)


def _check_numbers(args: argparse.Namespace) -> None:
    """Refuse numeric options that are out of range before any work is done (and read
    ``--cluster``'s default from ``$TACOS_CLUSTER``)."""
    from tacos.limits import check_number

    if getattr(args, "cluster", None) is None:
        args.cluster = os.environ.get("TACOS_CLUSTER", "").strip() or None
    if args.cluster is not None and not args.cluster.strip():
        raise UsageError("--cluster needs a Dask scheduler address",
                         hint="e.g. --cluster tcp://10.0.0.5:8786")

    for key in ("instances", "max_steps"):
        value = getattr(args, key)
        if value is not None and value < 1:
            raise UsageError(f"--{key.replace('_', '-')} must be at least 1, not {value}")
    if args.time_limit is not None:
        problem = check_number("time_limit", args.time_limit)
        if problem is not None:
            raise UsageError(f"--time-limit: {problem}", hint="e.g. --time-limit 60")


def _check_outputs(args: argparse.Namespace) -> None:
    """Every file the command will write can be written: checked before any work."""
    from tacos.atomic import check_writable

    if args.output == "-" and (args.report or args.json):
        raise UsageError("-o - writes the plan to standard output; --report and --json "
                         "would print into it", hint="write the plan to a file, or drop "
                         "--report/--json")
    if args.output and args.output != "-":
        check_writable(args.output)
    if args.plot:
        from tacos.backends.plot import check_plot_path

        check_plot_path(args.plot)
    if args.chakra:
        check_writable(f"{args.chakra}.0.et", "Chakra trace")


def _compile_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tacosc [compile]",
        description="Synthesize a schedule for a collective on a topology, verify it and write "
        "it. Reported times are alpha-beta model estimates, not measurements.",
    )
    p.add_argument("topology", help="TDL file describing the system (and maybe collectives), "
                   "or a file tacosc import reads")
    p.add_argument("-c", "--collective", help="standard collective (allgather, reducescatter, "
                   "allreduce, alltoall, broadcast, reduce, scatter, gather) or the name of a "
                   "collective declared in the file; default: every declared collective. The "
                   "file's declared size, chunks and root are kept unless given here")
    p.add_argument("--size", help="buffer size in the nccl-tests convention, e.g. 64MiB "
                   "(default: the file's collective's, else 1MiB)")
    p.add_argument("--chunks", type=_chunks_arg,
                   help="chunks per NPU, or 'auto': the count giving the fastest "
                   "schedule (default: the file's, else auto for greedy and for the greedy "
                   "candidate of --solver auto, 1 otherwise; ilp takes auto when asked)")
    p.add_argument("--root", help="root NPU (name or id) for broadcast/reduce/scatter/gather "
                   "(default: the file's)")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="set a TDL parameter, e.g. --param nodes=2 (repeatable)")
    p.add_argument("--solver", help="auto (default: the fastest verified plan of greedy, "
                   "forest, hierarchical, a2a and NCCL's own algorithms on this topology), greedy, "
                   "forest, ilp, taccl, multicast, a2a; NCCL models: nccl (NCCL's pick), "
                   "nccl-ring, nccl-tree, nvls, collnet, pat, nccl-p2p; textbook: ring (one "
                   "ring), biring, direct, rhd, dbtree, hierarchical ('tacosc solvers' lists "
                   "options); files "
                   "with reshard or job statements: multicast (default), and for reshards the "
                   "baselines sendrecv, alpa, broadcast")
    p.add_argument("--symmetric", action="store_true",
                   help="symmetric synthesis: one solve per group shape of a multi-rail Clos "
                        "(use clos_h100), written as a symmetric plan file; the default on "
                        "such fabrics of 256 NPUs or more without --solver (docs/scale.md)")
    p.add_argument("--objective", choices=("makespan", "fairness", "priority"),
                   help="jobs: what the joint plan optimizes (default makespan)")
    p.add_argument("--trials", type=int, help="randomized trials (greedy; the ILP's start)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--workers", type=int, help="parallel processes for trials (default: cores)")
    p.add_argument("--cluster", metavar="tcp://HOST:8786",
                   help="run trials and sweep sizes on this Dask scheduler's workers "
                   "(default: $TACOS_CLUSTER, else local processes; needs tacos[cluster])")
    p.add_argument("--time-limit", type=float, help="seconds the solver may spend (ILP)")
    p.add_argument("--relays", choices=("members", "all"),
                   help="where a process group's data may be relayed: at group members only "
                   "(default) or at any NPU")
    p.add_argument("--max-merge", help="greedy/ilp: most chunks one transfer may carry "
                   "(integer, auto, or none)")
    p.add_argument("--backend", help="ilp: MILP back end (highs, cpsat, cbc, gurobi; highs, cbc "
                   "and gurobi solve the TEN formulation); the API's backend= option")
    p.add_argument("--ilp-backend", dest="backend", help=argparse.SUPPRESS)
    p.add_argument("--mode", help="ilp: exact (default) or cluster (time clustering)")
    p.add_argument("-O", "--option", action="append", default=[], metavar="NAME=VALUE",
                   help="any other option of the solver, e.g. -O cluster_steps=8 "
                   "(repeatable; names as in the Python API)")
    p.add_argument("-o", "--output", help="output file: .json (schedule or, with --format "
                   "mscclpp, MSCCL++ plan), .xml (MSCCL) or .csv (NCCL tuner rules)")
    p.add_argument("--format", choices=("json", "xml", "mscclpp", "nccl-tuner"),
                   help="output format (default: from the output file's extension)")
    p.add_argument("--nvls", action="store_true",
                   help="--format mscclpp, all-reduce: write the in-switch (NVLS) plan with a "
                   "switch channel (needs a switch declared 'with multicast, reduce')")
    p.add_argument("--proto", choices=("Simple", "LL", "LL128"),
                   help="MSCCL protocol (default Simple; with --shape auto: the protocols "
                   "tried, default all)")
    p.add_argument("--inplace", action="store_true", default=None,
                   help="MSCCL/MSCCL++: emit an in-place plan (the default for all-reduce, "
                   "all-gather and reduce-scatter, as PyTorch calls them)")
    p.add_argument("--out-of-place", dest="inplace", action="store_false", default=None,
                   help="MSCCL/MSCCL++: emit an out-of-place plan (the default for the other "
                   "collectives)")
    p.add_argument("--instances", type=int,
                   help="MSCCL: channel instances, each chunk split over that many channels "
                   "(default 1, at most 32; with --shape auto: the count tried, default 1..32)")
    p.add_argument("--shape", choices=("auto", "fixed"),
                   help="MSCCL: 'auto' lowers each size window's plan in the shape (instances, "
                   "protocol, port order, paired peers) and among the plans (the solver's and "
                   "the all-pairs plan) that the runtime model times fastest, and reports why; "
                   "'fixed' lowers the solver's plan with --proto and --instances (default "
                   "Simple, 1). Default: auto")
    p.add_argument("--min-bytes", help="MSCCL: smallest message size, e.g. 1MiB (default 0)")
    p.add_argument("--max-bytes", help="MSCCL: largest (default 0 = no limit)")
    p.add_argument("--sizes", metavar="FROM:TO:xF", help="sweep message sizes like "
                   "nccl-tests (e.g. 1KiB:4GiB:x4, 1KiB:1MiB:+256KiB, 1MiB,64MiB): prints "
                   "time, algbw and busbw of tacos's plan and of each NCCL model per size; "
                   "-o DIR writes one MSCCL XML per size range (docs/nccl.md); -o DIR alone "
                   f"sweeps {WINDOW_SIZES}")
    p.add_argument("--max-steps", type=int,
                   help="MSCCL: most steps per threadblock (default 64, 2 to 1024)")
    p.add_argument("--report", action="store_true",
                   help="print collective time, algbw, lower bound and gap")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--plot", metavar="PNG", help="draw the schedule's timeline to a PNG")
    p.add_argument("--chakra", metavar="PREFIX", help="also write Chakra execution traces for "
                   "ASTRA-sim: PREFIX.<npu>.et (needs tacos[astra])")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress display")
    _add_input_options(p)
    return p


def _info_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tacosc info",
                                description="Describe a topology and its collectives.")
    p.add_argument("topology", help="TDL file")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="set a TDL parameter (repeatable)")
    p.add_argument("--per-npu", action="store_true", help="always print the per-NPU table")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--astra-sim", metavar="YML", help="also write the ASTRA-sim analytical "
                   "network config (multi-dimensional topologies only)")
    _add_input_options(p)
    return p


def _verify_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tacosc verify",
        description="Verify an MSCCL XML plan (ours or anyone's), an MSCCL++ JSON plan or a "
        "tacos JSON schedule (the format is told from the content). Exits 1 and names the "
        "rank/threadblock/step and the rule on any violation.")
    p.add_argument("plan", help="plan.xml (MSCCL), plan.json (tacos schedule or MSCCL++ plan), "
                   "or a folder of MSCCL XML files (each verified, and their size windows "
                   "checked to form one set)")
    p.add_argument("--topology", help="TDL file: also time an XML plan on it (an alpha-beta "
                   "model estimate for the --size message) or check that a JSON schedule was "
                   "made for it")
    p.add_argument("--size", help="MSCCL XML or MSCCL++ plan: fail it when the runtime "
                   "would skip or refuse it at this message size (chunks that do not divide "
                   "it, outside its window); with --topology also the size to time (default: "
                   "the plan's maxBytes, else 1MiB)")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="set a TDL parameter of --topology (repeatable)")
    p.add_argument("--max-steps", type=int, default=64,
                   help="XML: most steps per threadblock (default 64)")
    p.add_argument("--ranks", metavar="NPU,NPU,...",
                   help="XML: the NPU (name or id) of each rank, in rank order, for a process "
                   "group's plan (default: the plan's 'tacos ranks' comment, else the group "
                   "of the collective declared in --topology, else rank r = NPU r)")
    p.add_argument("--lenient", action="store_true",
                   help="XML: report a missing outofplace/minBytes/maxBytes (older msccl-tools "
                   "and TACCL output, which the runtime refuses to load) as a warning, not an "
                   "error; for checking a file you will fix up")
    p.add_argument("--strict", action="store_true", help=argparse.SUPPRESS)  # the default
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    _add_input_options(p)
    return p


def _declared(spec: Any, kind: str) -> Any:
    """The file's collective of ``kind`` (or the only one declared), for its size/root/chunks."""
    same = [c for c in spec.collectives if c.kind == kind]
    if same:
        return same[0]
    return spec.collectives[0] if len(spec.collectives) == 1 else None


def _root(args: argparse.Namespace, topo: Any) -> int | None:
    names = {n.name: n.id for n in topo.npus}
    if args.root in names:
        return names[args.root]
    if args.root.isdigit() and int(args.root) < topo.n_npus:
        return int(args.root)
    raise UsageError(f"--root {args.root!r} is not an NPU of {args.topology}")


def _choose_collective(spec: Any, args: argparse.Namespace) -> Any:
    """The collective to synthesize: the file's, or ``--collective`` built with the file's
    declared size, chunks and root unless the command line gives them."""
    from tacos.model import patterns
    from tacos.model.collective import STANDARD_COLLECTIVES

    topo = spec.topology
    if args.collective is None:
        if spec.collective is None:
            raise UsageError(f"{args.topology} declares no collective",
                             hint="pass --collective allreduce (or another collective)")
        if not (args.size or args.root or args.chunks):
            return spec.collective
        if spec.collective.kind not in STANDARD_COLLECTIVES:
            raise UsageError(f"--size, --chunks and --root do not apply to the file's "
                             f"{spec.collective.kind} collective",
                             hint="name a standard one, e.g. --collective allreduce")
        return _rebuilt(spec.collective, args, topo)  # the file's, with the flags given
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
    kind = args.collective
    base = _declared(spec, kind)
    group = topo.live_npus
    root = None
    if args.root is not None:
        root = _root(args, topo)
    elif kind in patterns.ROOTED_COLLECTIVES:
        root = base.root if base is not None and base.root is not None else None
        if root is None:
            raise UsageError(f"{kind} needs --root (the file declares none)",
                             hint="e.g. --root 0")
    chunks = _chunks(args, base)
    args.auto_chunks = chunks == "auto"
    chunks = 1 if chunks == "auto" else chunks
    if args.size:
        size = _size(args.size)
    elif base is not None and base.kind != "multi":
        size = base.size
    else:
        size = patterns.default_size(kind, len(group), chunks)
    try:
        return patterns.build(kind, group, size=size, chunks_per_npu=chunks, root=root)
    except TacosError as exc:
        from tacos.limits import LimitError

        if isinstance(exc, LimitError):  # at the file's statement that makes it too big
            from tacos.model.limit_spans import locate_group

            raise locate_group(exc, topo, group) from None
        raise UsageError(exc.message, hint=exc.hint) from None


def _rebuilt(declared: Any, args: argparse.Namespace, topo: Any) -> Any:
    """The file's own collective (its kind, group and, unless given, size, chunks and root)
    with the ``--size``, ``--chunks`` and ``--root`` the command line gives."""
    from tacos.model import patterns

    root = _root(args, topo) if args.root is not None else declared.root
    chunks = _chunks(args, declared)
    args.auto_chunks = chunks == "auto"
    chunks = 1 if chunks == "auto" else chunks
    size = _size(args.size) if args.size else declared.size
    try:
        return patterns.build(declared.kind, declared.group, size=size, chunks_per_npu=chunks,
                              root=root)
    except TacosError as exc:
        raise UsageError(exc.message, hint=exc.hint) from None


def _chunks_arg(text: str) -> int | str:
    """``--chunks`` as given: a count >= 1 or ``'auto'``."""
    low = text.strip().lower()
    if low == "auto":
        return "auto"
    if not low.isdigit() or int(low) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count >= 1 or auto")
    return int(low)


def _chunks(args: argparse.Namespace, base: Any) -> int | str:
    """``--chunks``: a count or ``'auto'`` (see :mod:`tacos.solvers.greedy_chunks`); by default
    the file's declared count, else ``'auto'`` for the greedy and 1 for other solvers."""
    if args.chunks is None:
        if base is not None:
            return base.chunks_per_npu
        return "auto" if args.solver in ("greedy", "auto") else 1
    return args.chunks


def _solver_options(args: argparse.Namespace) -> dict[str, Any]:
    from tacos.solvers.options import read_cli_value

    options: dict[str, Any] = {}
    for key, value in (("backend", args.backend), ("mode", args.mode),
                       ("max_merge", args.max_merge)):
        if value is not None:
            options[key] = read_cli_value(args.solver, key, value)
    for pair in args.option:
        key, sep, value = pair.partition("=")
        if not sep:
            raise UsageError(f"-O {pair!r} is not NAME=VALUE", hint="e.g. -O threads=2")
        options[key.strip().replace("-", "_")] = read_cli_value(
            args.solver, key.strip().replace("-", "_"), value.strip())
    return options


def _output_format(args: argparse.Namespace) -> str | None:
    fmt = args.format
    if not args.output:
        return fmt
    if args.output == "-":  # standard output: MSCCL XML unless --format says otherwise
        return fmt or "xml"
    suffix = Path(args.output).suffix.lower()
    if fmt is None:
        fmt = {".json": "json", ".xml": "xml", ".csv": "nccl-tuner"}.get(suffix)
        if fmt is None:
            raise UsageError(f"cannot tell the format of {args.output!r}",
                             hint="name it .json, .xml or .csv, or pass --format")
    want = {"json": ".json", "xml": ".xml", "mscclpp": ".json", "nccl-tuner": ".csv"}[fmt]
    if suffix != want:
        raise UsageError(f"--format {fmt} writes {want[1:].upper()}, but "
                         f"{args.output!r} ends in {suffix or 'no extension'}",
                         hint=f"name the output *{want}")
    return fmt


def _is_folder(output: str | None, fmt: str | None) -> bool:
    """``-o DIR``: an existing folder, a name ending in a separator, or one without suffix."""
    if not output or output == "-" or fmt not in (None, "xml"):
        return False
    path = Path(output)
    return path.is_dir() or output.endswith(("/", os.sep)) or (path.suffix == ""
                                                               and not path.exists())


def cmd_compile(argv: Sequence[str]) -> int:
    """``tacosc TOPO.tdl ...``: synthesize, verify, write (outputs are written atomically)."""
    from tacos import cli_flags

    args = _compile_parser().parse_args(argv)
    _check_numbers(args)
    cli_flags.check_common(args)
    if not args.sizes and args.collective and _is_folder(args.output, args.format):
        args.sizes = WINDOW_SIZES  # -o DIR: one plan per size window, 1 KiB to no limit
    if args.sizes:  # -o is a folder of MSCCL XML files, one per size range
        cli_flags.check_msccl(args, None)
        with limits_of(args):
            return _sweep(args)
    fmt = _output_format(args)
    cli_flags.check_msccl(args, fmt)
    _check_outputs(args)  # fail now, not after a long synthesis
    with limits_of(args):
        return _compile(args, fmt)


def _compile(args: argparse.Namespace, fmt: str | None) -> int:
    from tacos.check.verify import verify_schedule
    from tacos.check.verify_once import verified
    from tacos.importers import load_any
    from tacos.progress import TerminalReporter
    from tacos.synthesize import synthesize

    reporter = TerminalReporter(enabled=not args.quiet and not args.json)
    with reporter.phase(f"loading {args.topology}"):
        spec = load_any(args.topology, _params(args.param), include_dirs=args.include_dir)
    if args.objective is not None and (args.collective is not None
                                       or not getattr(spec, "jobs", ())):
        raise UsageError("--objective applies to the joint plan of a file's jobs, not here",
                         hint="drop --objective (or plan the file's jobs: no --collective)")
    if args.collective is None and (getattr(spec, "jobs", ()) or getattr(spec, "reshards", ())):
        args.solver_given = args.solver is not None
        args.solver = args.solver or "multicast"
        if spec.jobs:
            from tacos.jobs.cli import compile_jobs

            return compile_jobs(spec, args, fmt, reporter)
        from tacos.reshard.cli import compile_reshards

        return compile_reshards(spec, args, fmt, reporter)
    from tacos.scale.cli import compile_symmetric, wants_symmetric

    if wants_symmetric(spec, args):  # large Clos: one solve per group shape, not per chunk
        return compile_symmetric(spec, args, fmt, reporter)
    args.solver = args.solver or "auto"
    collective = _choose_collective(spec, args)
    args.inplace = in_place(args.inplace, collective.kind)
    if fmt == "nccl-tuner":
        return _write_tuner(spec, collective, args)
    if args.nvls:
        return _write_nvls(spec, collective, args, fmt)
    options = _solver_options(args)
    run = synthesize
    if getattr(args, "auto_chunks", False) and args.solver in ("greedy", "ilp"):
        from tacos.solvers.greedy.chunks import synthesize_chunked as run
    elif getattr(args, "auto_chunks", False) and args.solver == "auto":
        options["greedy_chunks"] = True
    if args.output and (fmt == "xml" and args.solver in ("auto", "forest")
                        or fmt == "mscclpp" and args.solver == "auto"):
        # MSCCL cannot express in-switch groups: pick among the plans it can run (MSCCL++
        # runs them on switch channels when every transfer is in a group: forest's star)
        options.setdefault("in_switch", False)
    if args.output and fmt == "xml" and args.solver == "auto":
        # rank by the runtime time of the file written: shaped unless --shape fixed
        options.setdefault("emit", "xml" if args.shape == "fixed" else "shaped")
    elif args.output and fmt == "mscclpp" and args.solver == "auto":
        # MSCCL++ plans go through the MSCCL lowering: rank by it, drop what it cannot lower
        options.setdefault("emit", "xml")
    schedule = run(spec.topology, collective, solver=args.solver, seed=args.seed,
                   trials=args.trials, workers=args.workers, cluster=args.cluster,
                   time_limit=args.time_limit, relays=args.relays or "members",
                   progress=reporter, **options)
    with reporter.phase("verifying"):
        from tacos.solvers.scale_gate import verified_report

        (verified_report(schedule) or verified(schedule)).raise_if_failed()
    program = runtime = choice = mchoice = None
    if args.output and fmt == "xml" and args.shape != "fixed":
        from tacos.cli_shape import shaped_file, shaped_runtime

        with reporter.phase(f"shaping and writing {args.output}"):
            choice = shaped_file(schedule, spec.topology, args)
        from tacos.model.schedule import Schedule

        program = choice.program  # the runtime time reported is the written program's
        if isinstance(choice.schedule, Schedule):
            schedule = choice.schedule
        runtime = shaped_runtime(choice, schedule)  # the search timed that program already
    elif args.output and fmt == "xml":  # large plans: streamed, never held as one text
        from tacos.msccl.ranks import ranks_comment
        from tacos.msccl.xml_writer import iter_xml, lower_verified, write_xml

        with reporter.phase("lowering to MSCCL XML and verifying it"):
            program = lower_verified(schedule, _msccl_options(args), progress=reporter)
        header = ranks_comment(schedule.collective.group)
        with reporter.phase(f"writing {args.output}"):
            if args.output == "-":
                write_output("-", header + "".join(iter_xml(program)))
            else:
                write_xml(program, args.output, header=header)
    elif args.output and fmt == "mscclpp":
        from tacos.cli_mscclpp import mscclpp_file

        def synth(coll: Any, solver: str | None = None, **extra: Any) -> Any:
            opts = {**options, **extra} if solver is None else extra
            again = run(spec.topology, collective if coll is None else coll,
                        solver=solver or args.solver, seed=args.seed,
                        trials=args.trials, workers=args.workers, cluster=args.cluster,
                        time_limit=args.time_limit, relays=args.relays or "members", **opts)
            verify_schedule(again).raise_if_failed()
            return again

        mchoice, schedule, notes = mscclpp_file(schedule, args, _msccl_options(args), synth,
                                                reporter)
        with reporter.phase(f"writing {args.output}"):
            write_output(args.output, mchoice.text)
        for line in notes:
            print(f"note: {line}", file=sys.stderr)
        runtime = _mscclpp_runtime(schedule, spec.topology, mchoice)
    elif args.output:
        with reporter.phase(f"writing {args.output}"):
            text = _render(schedule, fmt, args)
            write_output(args.output, text)
    if args.output and args.output != "-" and not args.json:  # no file to read back or run
        from tacos.recipes import recipe

        print(recipe(fmt or "json", args.output, nranks=len(schedule.collective.group),
                     kind=schedule.collective.kind), file=sys.stderr)
        written = choice.written if choice is not None else program
        for line in _unused_at_own_size(args.output, fmt, schedule.collective.size, written):
            print(f"warning: {line}", file=sys.stderr)
    if args.plot:
        from tacos.backends.plot import plot_schedule

        plot_schedule(schedule, args.plot)
    if args.chakra:
        from tacos.backends.chakra_et import write_traces

        with reporter.phase("writing Chakra traces"):
            write_traces(schedule, args.chakra)
    if runtime is None and program is None and fmt != "xml":
        from tacos.solvers.scale_gate import ranked_runtime

        runtime = ranked_runtime(schedule)  # the portfolio's ranking of this plan, if gated
    if runtime is None:
        from tacos.runtime.plans import runtime_of

        with reporter.phase("runtime model"):
            runtime = runtime_of(schedule, spec.topology, program=program,
                                 options=_msccl_options(args) if fmt == "xml" else None)
    if args.json:
        from tacos.report import report

        with reporter.phase("report"):
            doc = report(schedule, topology=spec.topology, runtime=runtime)
            if choice is not None:
                doc["msccl_shape"] = choice.as_dict()
            if mchoice is not None:
                doc["mscclpp_shape"] = mchoice.as_dict()
            from tacos.report_schema import envelope

            print(json.dumps(envelope("compile", doc, doc.get("verified", True)), indent=2))
    elif args.report or not args.output:
        from tacos.report import format_report

        with reporter.phase("report"):
            print(format_report(schedule, topology=spec.topology, runtime=runtime))
            if choice is not None:
                print("\n".join(choice.lines()))
            if mchoice is not None:
                print("\n".join(mchoice.lines()))
    else:  # -o alone: one line says what was written
        from tacos.compile_line import compile_line

        print(compile_line(schedule, spec.topology, args.output, runtime),
              file=sys.stderr if args.output == "-" else sys.stdout)
    return 0


def _unused_at_own_size(path: str, fmt: str | None, nbytes: int,
                        written: Any = None) -> list[str]:
    """Why the runtime would skip (MSCCL XML) or refuse (MSCCL++) the plan just written at
    the very size it was made for; empty when it runs there.  ``written``: the MSCCL program
    the file was written from (its header is what is checked), else the file is read."""
    if fmt == "xml":
        from tacos.msccl.size_fit import xml_size_problems
        from tacos.msccl.xml_reader import load_xml

        program = written if written is not None else load_xml(path)
        return [v.message for v in xml_size_problems(program, nbytes)
                if v.severity == "error"]
    if fmt == "mscclpp":
        from tacos.msccl.mscclpp_loader import size_problems

        return size_problems(json.loads(Path(path).read_text(encoding="utf-8")), nbytes)
    return []


def _write_nvls(spec: Any, collective: Any, args: argparse.Namespace, fmt: str | None) -> int:
    """``--nvls``: the NVLS all-reduce MSCCL++ plan (:mod:`tacos.msccl.mscclpp_nvls`)."""
    from tacos.msccl.mscclpp_nvls import nvls_allreduce_json
    from tacos.recipes import recipe
    from tacos.verify_plan import verify

    if fmt != "mscclpp" or not args.output or collective.kind != "allreduce":
        raise UsageError("--nvls writes an all-reduce MSCCL++ plan",
                         hint="add -c allreduce --format mscclpp -o plan.json")
    text = nvls_allreduce_json(spec.topology, list(collective.group),
                               name=Path(args.output).stem, nbytes=collective.size,
                               min_bytes=_size(args.min_bytes or "0", "--min-bytes", 0),
                               max_bytes=_size(args.max_bytes or "0", "--max-bytes", 0)
                               or 2**64 - 1)
    verify(text, topology=spec.topology, ranks=list(collective.group)).raise_if_failed()
    write_output(args.output, text)
    if not args.json:
        print(recipe("mscclpp", args.output, nranks=len(collective.group),
                     kind="allreduce"), file=sys.stderr)
    return 0


def _write_tuner(spec: Any, collective: Any, args: argparse.Namespace) -> int:
    """``--format nccl-tuner``: NCCL's best algorithm/protocol/channels per size window
    (:mod:`tacos.runtime.tuner_csv`), no synthesis."""
    from tacos.recipes import recipe
    from tacos.runtime.tuner_csv import COLLECTIVES, tuner_csv

    if collective.kind not in COLLECTIVES:
        raise UsageError(f"NCCL's tuner plugin has no {collective.kind!r}",
                         hint=f"it tunes {', '.join(COLLECTIVES)}")
    # every collective the plugin tunes: a call no rule matches is forced to ring/simple
    kinds = [collective.kind] + [k for k in COLLECTIVES if k != collective.kind]
    text = tuner_csv(spec.topology, kinds, collective.group, source=Path(args.topology).name)
    if not args.output:
        print(text, end="")
        return 0
    write_output(args.output, text)
    if not args.json:
        print(recipe("nccl-tuner", args.output), file=sys.stderr)
    return 0


def _mscclpp_runtime(schedule: Any, topology: Any, choice: Any) -> Any:
    """The runtime model's time of the MSCCL++ plan just written (``choice``: its
    :class:`~tacos.msccl.mscclpp_choose.MscclppChoice`, whose own estimate is used when it was
    made at the collective's size on this topology: the window's start does not change it)."""
    from tacos.errors import TacosError
    from tacos.msccl.mscclpp_reader import read_plan_text
    from tacos.runtime.mscclpp_exec import estimate_mscclpp

    coll = schedule.collective
    if choice.estimate is not None and choice.nbytes == int(coll.size) and \
            choice.topology is topology:
        return choice.estimate, "the MSCCL++ plan written"
    plan, _ = read_plan_text(choice.text)
    try:
        est = estimate_mscclpp(plan, topology, coll.size, ranks=coll.group)
    except TacosError as exc:
        return None, f"runtime model: {exc.message}"
    return est, "the MSCCL++ plan written"



def in_place(flag: bool | None, kind: str | None) -> bool:
    """``--inplace`` / ``--out-of-place`` when given, else in place for the collectives
    PyTorch calls in place (:data:`tacos.msccl.lower.IN_PLACE_KINDS`)."""
    from tacos.msccl.lower import IN_PLACE_KINDS

    if flag is not None:
        return bool(flag)
    return kind in IN_PLACE_KINDS


def _sweep(args: argparse.Namespace) -> int:
    """``tacosc TOPO --collective C --sizes ...``: a nccl-tests-like sweep (docs/nccl.md)."""
    from tacos.importers import load_any
    from tacos.progress import TerminalReporter
    from tacos.sweep import sweep

    if not args.collective:
        raise UsageError("--sizes needs --collective", hint="e.g. --collective allreduce")
    min_bytes = _size(args.min_bytes or "0", "--min-bytes", 0)
    max_bytes = _size(args.max_bytes or "0", "--max-bytes", 0)
    out = Path(args.output) if args.output else None
    if out is not None and (out.suffix.lower() in (".xml", ".json") or out.is_file()):
        raise UsageError(f"with --sizes, -o names a folder for one MSCCL XML per size range, "
                         f"not {args.output}", hint="e.g. -o plans/")
    # every output is checked before the sweep, not after minutes of synthesis
    from tacos.msccl.sweep_xml import check_folder, windows, write_windows
    from tacos.sweep import parse_sizes

    sizes = parse_sizes(args.sizes)
    if out is not None:
        windows(sizes, min_bytes, max_bytes)
        check_folder(out, mode="inplace" if in_place(args.inplace, args.collective)
                     else "outofplace")
    if args.plot:
        from tacos.backends.plot import check_plot_path

        check_plot_path(args.plot)
    reporter = TerminalReporter(enabled=not args.quiet and not args.json)
    with reporter.phase(f"loading {args.topology}"):
        spec = load_any(args.topology, _params(args.param), include_dirs=args.include_dir)
    args.solver = args.solver or "auto"
    chosen = argparse.Namespace(**{**vars(args), "size": None})
    coll = _choose_collective(spec, chosen)
    if args.solver == "auto" and (args.option or args.backend or args.mode or args.max_merge):
        raise UsageError("solver options do not apply to a --sizes sweep with --solver auto",
                         hint="name the solver they belong to with --solver")
    args.inplace = in_place(args.inplace, coll.kind)
    options = _solver_options(args) if args.solver != "auto" else {}
    # no count given: the greedy picks its own per size (tacos.sweep.sweep decides)
    free = getattr(chosen, "auto_chunks", False) and args.solver in ("auto", "greedy")
    for key, value in (("trials", args.trials), ("workers", args.workers),
                       ("cluster", args.cluster), ("time_limit", args.time_limit)):
        if value is not None:
            options[key] = value
    cands = None if args.solver == "auto" else (args.solver, "nccl")
    with reporter.phase("sweeping", unit="sizes") as phase:
        result = sweep(spec.topology, coll.kind, sizes, group=coll.group,
                       chunks_per_npu=None if free else coll.chunks_per_npu, root=coll.root,
                       candidates=cands,
                       progress=phase.update, seed=args.seed, **options)
    if args.json:
        from tacos.report_schema import envelope

        print(json.dumps(envelope("sweep", result.as_dict(), True), indent=2))
    else:
        print(result.table())
    if out is not None and args.shape != "fixed":
        from tacos.cli_shape import shaped_windows

        with reporter.phase("shaping the windows", unit="sizes") as phase:
            paths = shaped_windows(result, out, args, min_bytes, max_bytes, phase.update)
    elif out is not None:
        paths = write_windows(result, Path(out), min_bytes=min_bytes, max_bytes=max_bytes,
                              proto=args.proto or "Simple", inplace=bool(args.inplace))
    if out is not None:
        if not args.json:
            from tacos.recipes import recipe

            print(f"# wrote {len(paths)} MSCCL XML file(s) to {out}/ (disjoint minBytes/"
                  "maxBytes windows)")
            from tacos.msccl.size_fit import window_gaps
            from tacos.msccl.xml_reader import load_xml

            for line in window_gaps([(p.name, load_xml(p)) for p in paths],
                                    top=max(1 << 30, 4 * max(sizes))):
                print(f"# gap: {line}")
            print(recipe("xml-dir", out, nranks=len(coll.group), kind=coll.kind))
    if args.plot:
        from tacos.backends.plot_sweep import plot_sweep

        plot_sweep(result, Path(args.plot))
    return 0


def write_output(path: str | Path, data: str) -> None:
    """Write ``data`` to ``path`` atomically (:mod:`tacos.atomic`): the previous file or the
    whole new one, never a part; a user error (not a traceback) when that fails."""
    if str(path) == "-":  # standard output
        sys.stdout.write(data if data.endswith("\n") else data + "\n")
        sys.stdout.flush()
        return
    from tacos.atomic import write_text

    write_text(path, data)


def _render(schedule: Any, fmt: str, args: argparse.Namespace) -> str:
    if fmt == "json":
        from tacos.backends.json_schedule import dumps

        return dumps(schedule)
    options = _msccl_options(args)
    if fmt == "mscclpp":
        from tacos.msccl.mscclpp_writer import emit_mscclpp_json

        return emit_mscclpp_json(schedule, options=options)
    from tacos.msccl.xml_writer import schedule_to_xml

    return schedule_to_xml(schedule, options)


def _msccl_options(args: argparse.Namespace) -> Any:
    from tacos.cli_flags import msccl_values
    from tacos.msccl.lower import msccl_options

    return msccl_options(name=Path(args.output).stem if args.output not in (None, "", "-")
                         else "tacos",
                         **msccl_values(args))


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
    if command == "compile":
        return cmd_compile(rest)
    if command in ("cost", "explore", "allocate"):  # design-space commands, with the models
        from tacos.cost import cli as cost_cli

        return getattr(cost_cli, f"cmd_{command}")(rest)
    from tacos import cli_commands

    return getattr(cli_commands, f"cmd_{command}")(rest)


class Terminated(KeyboardInterrupt):
    """SIGTERM as an exception, so that clean-up (worker processes, temporary files) runs."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated()


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point: errors become messages and exit codes, never tracebacks.

    SIGTERM is handled like Ctrl-C: worker processes are stopped and nothing half-written is
    left behind; the exit code is 128 + the signal number.
    """
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if in_main else None
    if argv is None:  # the console entry point owns its process
        from tacos.nogc import batch_thresholds

        batch_thresholds()
    try:
        return _main(argv)
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)
        if argv is None:  # the console entry point: the process exits next
            from tacos.nogc import freeze_for_exit

            freeze_for_exit()


def _main(argv: Sequence[str] | None) -> int:
    try:
        return run(list(sys.argv[1:] if argv is None else argv))
    except TacosError as exc:
        print(exc.render(), file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:  # output piped into head & co.
        sys.stderr.close()
        return 0
    except Terminated:
        print("terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
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
